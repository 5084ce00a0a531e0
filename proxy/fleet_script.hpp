#pragma once
// The fleet's ledger of one upstream, in Redis: admission::FleetLedger's rules
// (admission/fleet.hpp) as one Lua script, run atomically per report
// (EVALSHA, loaded once per connection). tests/e2e/fleet_test.cpp runs it
// against a real redis-server; tests/unit/fleet_test.cpp pins the same rules
// in C++.
//
// KEYS[1]  sluice:fleet:<upstream>   hash: khat, k, epoch
// KEYS[2]  sluice:fleet:<upstream>:m hash: member id -> "in_flight demand slots seen_ms turn_at_ms
// turn busy" ARGV     id, expiry_ms, hold_ms, in_flight, demand, change (0 none, 1 grow,
//          2 decrease), khat, carrying, epoch, max, channel, upstream
// Returns  {khat, k, epoch, members, slots, others' in flight, decreased,
//          others' max(slots, busy)} as strings; a
//          decrease is published on `channel` as "<upstream> <epoch> <khat> <k>".
namespace sluice::proxy {

inline constexpr const char* kFleetScript = R"lua(
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local id = ARGV[1]
local expiry, hold = tonumber(ARGV[2]), tonumber(ARGV[3])
local in_flight, demand, change = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
local khat_in, k_in, epoch_in, max = tonumber(ARGV[7]), tonumber(ARGV[8]), tonumber(ARGV[9]), tonumber(ARGV[10])
local cap = math.max(1, max)
local s = redis.call('HMGET', KEYS[1], 'khat', 'k', 'epoch')
local khat, k, epoch = tonumber(s[1]), tonumber(s[2]), tonumber(s[3])
local decreased = 0
if not khat or not epoch then
  khat, k, epoch = math.min(math.max(khat_in, 1), cap), math.max(k_in, 0), 1
elseif change == 2 and epoch_in == epoch then
  khat = math.max(1, math.min(khat, khat_in))
  if k_in > 0 then k = k_in end
  epoch = epoch + 1
  decreased = 1
elseif change == 1 and epoch_in == epoch and khat_in > khat then
  khat = math.min(khat_in, cap)
  k = math.max(k, k_in)
end
redis.call('HSET', KEYS[1], 'khat', string.format('%.17g', khat), 'k', string.format('%.17g', k), 'epoch', epoch)
redis.call('PEXPIRE', KEYS[1], 86400000)
local ms, me = {}, nil
local raw = redis.call('HGETALL', KEYS[2])
for i = 1, #raw, 2 do
  local f = {}
  for x in string.gmatch(raw[i + 1], '%S+') do f[#f + 1] = tonumber(x) end
  local m = {id = raw[i], in_flight = f[1], demand = f[2], slots = f[3], seen = f[4], turn_at = f[5], turn = f[6], busy = f[7] or f[1]}
  if m.id == id then
    me = m
  elseif now - m.seen > expiry then
    redis.call('HDEL', KEYS[2], m.id)
  else
    ms[#ms + 1] = m
  end
end
if not me then me = {id = id, slots = 0, turn_at = 0, turn = 0} end
me.in_flight, me.demand, me.seen = math.max(0, in_flight), math.max(0, demand), now
me.busy = math.max(me.in_flight, me.slots)
ms[#ms + 1] = me
table.sort(ms, function(a, b) return a.id < b.id end)
local total = math.max(1, math.floor(khat + 1e-9))
local n = #ms
local function whole(x) return math.max(0, math.floor(x + 1e-9)) end
-- max-min fair shares over the claims (none claims total / n), the rest spread evenly
local claims, order, share = {}, {}, {}
for i, m in ipairs(ms) do
  claims[i] = m.demand > 0 and m.demand or total / n
  order[i] = i
end
table.sort(order, function(a, b) if claims[a] ~= claims[b] then return claims[a] < claims[b] end return a < b end)
local left, capped = total, false
for j, i in ipairs(order) do
  local level = left / (n - j + 1)
  if claims[i] > level then
    for jj = j, n do share[order[jj]] = level end
    left, capped = 0, true
    break
  end
  share[i] = claims[i]
  left = left - claims[i]
end
if not capped then for i = 1, n do share[i] = share[i] + left / n end end
-- whole slots, then the fractions' slots in turns
local target, given, wanting = {}, 0, {}
for i, m in ipairs(ms) do
  target[i] = whole(share[i])
  given = given + target[i]
  if m.demand > target[i] then wanting[#wanting + 1] = i end
end
local function kept(m) return m.turn == 1 and now - m.turn_at < hold end
table.sort(wanting, function(a, b)
  local x, y = ms[a], ms[b]
  if kept(x) ~= kept(y) then return kept(x) end
  if x.turn_at ~= y.turn_at then return x.turn_at < y.turn_at end
  return x.id < y.id
end)
for _, i in ipairs(wanting) do
  if given >= total then break end
  target[i] = target[i] + 1
  given = given + 1
end
local occupied, others, self = 0, 0, 0
for i, m in ipairs(ms) do
  if m.id == id then
    self = i
  else
    occupied = occupied + math.max(m.slots, m.busy)
    others = others + m.in_flight
  end
end
me.slots = math.max(0, math.min(total - occupied, target[self]))
local turn = me.slots > whole(share[self]) and 1 or 0
if turn == 1 and me.turn ~= 1 then me.turn_at = now end
me.turn = turn
redis.call('HSET', KEYS[2], id, string.format('%d %d %d %d %d %d %d', me.in_flight, me.demand, me.slots, me.seen, me.turn_at, me.turn, me.busy))
redis.call('PEXPIRE', KEYS[2], 86400000)
if decreased == 1 then
  redis.call('PUBLISH', ARGV[11], ARGV[12] .. ' ' .. epoch .. ' ' .. string.format('%.17g', khat) .. ' ' .. string.format('%.17g', k))
end
return {string.format('%.17g', khat), string.format('%.17g', k), tostring(epoch), tostring(n), tostring(me.slots), tostring(others), tostring(decreased), tostring(occupied)}
)lua";

}  // namespace sluice::proxy
