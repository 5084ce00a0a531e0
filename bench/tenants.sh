#!/usr/bin/env bash
# Tenants, measured through the real binary (docs/benchmarks.md#tenants):
#   fairness  two tenants in the bulk lane of a Sluice (2 threads, two
#             upstreams, cold) in front of an upstream that serves 4 at a time
#             for 50 ms: a loud tenant with 20 clients, a quiet one with 2.
#             Once with SLUICE_TENANT_KEY=header:X-Api-Key, once without (one
#             tenant for all): the quiet tenant's success and p99 against the
#             upstream's service time.
#   fleet     three Sluice instances (2 threads each) and one redis-server on
#             loopback, SLUICE_TENANT_RATE=RATE, SLUICE_REDIS_INTERVAL=100ms:
#             one tenant's clients spread over the three, then all on one
#             instance, then Redis frozen (SIGSTOP), then back (SIGCONT); the
#             fleet's admitted rate in each phase against RATE.
#   cost      instructions per request under callgrind (bench/callgrind.sh's
#             method: wrk -t1 -c10 with an X-Api-Key header): tenants off, the
#             key on, the key with a concurrency and a rate that never limit;
#             and tenants off on BASE (a binary from before tenants), if given.
#             Valgrind has no SHA-NI: the key's SHA-256 counts there in
#             software, several times its cost on this CPU.
#   cpu       CPU per request on the real CPU (utime + stime of Sluice, 1
#             thread, over the requests wrk -t1 -c50 completed), ROUNDS rounds
#             of DURATION s alternating: BASE if given, tenants off, the key,
#             the key with limits that never limit.
# Usage: bench/tenants.sh [fairness|fleet|cost|cpu ...]   (default: all four)
# Environment: SECONDS_PER_PHASE (default 10), RATE (default 40), DURATION
# (callgrind and cpu, default 8), ROUNDS (cpu, default 5), BASE (a sluice
# binary to compare tenants off with), KEEP_TMP=1 keeps the temp dir.
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
LIB="$REPO/bench/lib"
SLUICE="$REPO/build/release/app/sluice"
UPSTREAM="$REPO/build/release/upstream/sluice-upstream"
PHASE=${SECONDS_PER_PHASE:-10}
RATE=${RATE:-40}
DURATION=${DURATION:-8}
ROUNDS=${ROUNDS:-5}
BASE=${BASE:-}
KEEP_TMP=${KEEP_TMP:-0}
log() { echo "tenants: $*" >&2; }
die() { log "$*"; exit 1; }
usage() { sed -n '2,31p' "$0" | sed 's/^# \{0,1\}//'; }
# shellcheck source=bench/lib/common.sh
source "$LIB/common.sh"

parts=("$@")
[ "${#parts[@]}" -eq 0 ] && parts=(fairness fleet cost cpu)
for p in "${parts[@]}"; do
  case "$p" in
    fairness|fleet|cost|cpu) ;;
    -h|--help) usage; exit 0 ;;
    *) usage >&2; die "unknown part: $p" ;;
  esac
done
need_whole PHASE DURATION ROUNDS
need_positive PHASE DURATION ROUNDS
need_decimal RATE
install_packages curl python3 redis-server valgrind wrk
if [ ! -x "$SLUICE" ] || [ ! -x "$UPSTREAM" ]; then die "build first: ./scripts/build.sh release"; fi
TMP=$(mktemp -d /tmp/sluice-tenants.XXXXXX)

# sluice NAME PORT ADMIN VAR=VALUE...: a Sluice in the background (LAST_PID).
sluice() {
  local name=$1 port=$2 admin=$3; shift 3
  start_bg "$TMP/$name.log" env SLUICE_LISTEN="127.0.0.1:$port" SLUICE_ADMIN_LISTEN="127.0.0.1:$admin" \
    SLUICE_THREADS=2 SLUICE_ACCESS_LOG=off SLUICE_DRAIN_DELAY=0 SLUICE_DRAIN_TIMEOUT=2s "$@" "$SLUICE"
  wait_http_200 "$name" "$LAST_PID" "http://127.0.0.1:$admin/healthz" "$TMP/$name.log"
}
load() {  # TARGETS KEY CLIENTS SECONDS: the tenant's outcome as JSON
  python3 "$LIB/tenant_load.py" --targets "$1" --key "$2" --clients "$3" --seconds "$4"
}
field() { python3 -c 'import json,sys; print(json.loads(sys.argv[1])[sys.argv[2]])' "$1" "$2"; }

fairness() {
  local ports with
  mapfile -t ports < <(free_ports 6)
  start_bg "$TMP/api.log" "$UPSTREAM" --listen "127.0.0.1:${ports[0]}" --capacity 4 --service-ms 50 --threads 2
  start_bg "$TMP/search.log" "$UPSTREAM" --listen "127.0.0.1:${ports[1]}"
  for with in on off; do
    local key=() pid loud quiet
    [ "$with" = on ] && key=(SLUICE_TENANT_KEY=header:X-Api-Key)
    sluice "fair-$with" "${ports[2]}" "${ports[3]}" \
      SLUICE_UPSTREAMS="api=127.0.0.1:${ports[0]};search=127.0.0.1:${ports[1]}" \
      SLUICE_ROUTES='[{"prefix":"/search","upstream":"search","lane":"bulk"},{"prefix":"/","lane":"bulk"}]' \
      ${key[@]+"${key[@]}"}
    pid=$LAST_PID
    load "127.0.0.1:${ports[2]}" loud 20 "$PHASE" >"$TMP/loud-$with.json" &
    local loud_pid=$!
    quiet=$(load "127.0.0.1:${ports[2]}" quiet 2 "$PHASE")
    wait "$loud_pid"
    loud=$(cat "$TMP/loud-$with.json")
    stop_pid "$pid"
    printf 'fairness, tenants %-3s quiet: %s of %s ok (%.2f %%), p50 %s ms, p99 %s ms (after the first second %s ms) | loud: %s of %s ok, %s refused\n' \
      "$with" "$(field "$quiet" ok)" "$(field "$quiet" answered)" \
      "$(python3 -c "print(100*$(field "$quiet" success))")" "$(field "$quiet" p50_ms)" \
      "$(field "$quiet" p99_ms)" "$(field "$quiet" p99_after_1s_ms)" "$(field "$loud" ok)" \
      "$(field "$loud" answered)" "$(field "$loud" refused_503)"
  done
  echo "fairness: the upstream's service time is 50 ms (the goal: quiet p99 within 2x, 100 ms)"
}

fleet() {
  local ports redis_pid targets i pids=() out
  mapfile -t ports < <(free_ports 8)
  start_bg "$TMP/redis.log" redis-server --port "${ports[0]}" --bind 127.0.0.1 --save "" --appendonly no
  redis_pid=$LAST_PID
  start_bg "$TMP/fleet-api.log" "$UPSTREAM" --listen "127.0.0.1:${ports[1]}" --threads 2
  targets=""
  for i in 0 1 2; do
    sluice "fleet-$i" "${ports[$((2 + 2 * i))]}" "${ports[$((3 + 2 * i))]}" \
      SLUICE_UPSTREAMS="127.0.0.1:${ports[1]}" SLUICE_TENANT_KEY=header:X-Api-Key \
      SLUICE_TENANT_RATE="$RATE" SLUICE_REDIS_URL="redis://127.0.0.1:${ports[0]}" \
      SLUICE_REDIS_INTERVAL=100ms
    pids+=("$LAST_PID")
    targets="$targets${targets:+,}127.0.0.1:${ports[$((2 + 2 * i))]}"
  done
  sleep 1
  phase() {  # NAME TARGETS CLIENTS
    out=$(load "$2" "tenant-$1" "$3" "$PHASE")
    python3 - "$1" "$out" "$RATE" "$PHASE" <<'PY'
import json, sys
name, out, rate, secs = sys.argv[1], json.loads(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
steady = out["per_second"][1:]  # the first second holds the tenant's first allowance
r = sum(steady) / len(steady)
print(f"fleet, {name:<16} admitted {r:6.1f}/s of a rate of {rate:g} ({100 * r / rate:5.1f} %), "
      f"per second {out['per_second']}, 429s {out['limited_429']}, failed {out['failed']}")
PY
  }
  phase spread "$targets" 6
  phase one-instance "${targets%%,*}" 6
  kill -STOP "$redis_pid"
  sleep 0.5
  phase redis-frozen "$targets" 6
  kill -CONT "$redis_pid"
  sleep 0.5
  phase redis-back "$targets" 6
  for i in "${pids[@]}"; do stop_pid "$i"; done
}

cost() {
  local ports up
  mapfile -t ports < <(free_ports 1)
  start_bg "$TMP/cost-up.log" "$UPSTREAM" --listen "127.0.0.1:${ports[0]}" --threads 1
  up=$LAST_PID
  wait_http_200 sluice-upstream "$up" "http://127.0.0.1:${ports[0]}/" "$TMP/cost-up.log"
  one() {  # NAME BINARY VAR=VALUE...
    local name=$1 bin=$2 p pid before after ir; shift 2
    mapfile -t p < <(free_ports 2)
    start_bg "$TMP/$name.log" env SLUICE_UPSTREAMS="127.0.0.1:${ports[0]}" \
      SLUICE_LISTEN="127.0.0.1:${p[0]}" SLUICE_ADMIN_LISTEN="127.0.0.1:${p[1]}" SLUICE_THREADS=1 \
      SLUICE_ACCESS_LOG=off SLUICE_DRAIN_DELAY=0 SLUICE_DRAIN_TIMEOUT=2s "$@" \
      valgrind --tool=callgrind --callgrind-out-file="$TMP/callgrind.out.$name" "$bin"
    pid=$LAST_PID
    wait_http_200 "$name" "$pid" "http://127.0.0.1:${p[0]}/" "$TMP/$name.log"
    wrk -t1 -c10 -d1s -H "X-Api-Key: tenant-a" "http://127.0.0.1:${p[0]}/" >/dev/null
    before=$(curl -fsS "http://127.0.0.1:${p[1]}/metrics" | awk '/^sluice_requests_total[{ ]/ { n += $NF } END { printf "%d", n }')
    callgrind_control -z "$pid" >/dev/null 2>&1
    wrk -t1 -c10 -d"${DURATION}s" -H "X-Api-Key: tenant-a" "http://127.0.0.1:${p[0]}/" >/dev/null
    callgrind_control -d "$pid" >/dev/null 2>&1
    after=$(curl -fsS "http://127.0.0.1:${p[1]}/metrics" | awk '/^sluice_requests_total[{ ]/ { n += $NF } END { printf "%d", n }')
    stop_pid "$pid"
    ir=$(awk '/^(summary|totals):/ { print $2; exit }' "$TMP/callgrind.out.$name.1")
    awk -v ir="$ir" -v n="$((after - before))" -v name="$name" \
      'BEGIN { printf "cost, %-24s %d requests, %.0f instructions per request\n", name, n, ir / n }'
  }
  if [ -n "$BASE" ]; then one "base (before tenants)" "$BASE"; fi
  one "tenants off" "$SLUICE"
  one "key" "$SLUICE" SLUICE_TENANT_KEY=header:X-Api-Key
  one "key + limits" "$SLUICE" SLUICE_TENANT_KEY=header:X-Api-Key \
    SLUICE_TENANT_CONCURRENCY=1000 SLUICE_TENANT_RATE=1000000
  stop_pid "$up"
}

cpu() {
  local ports up names=() bins=() envs=() i
  mapfile -t ports < <(free_ports 1)
  start_bg "$TMP/cpu-up.log" "$UPSTREAM" --listen "127.0.0.1:${ports[0]}" --threads 1
  up=$LAST_PID
  wait_http_200 sluice-upstream "$up" "http://127.0.0.1:${ports[0]}/" "$TMP/cpu-up.log"
  if [ -n "$BASE" ]; then names+=("base"); bins+=("$BASE"); envs+=(""); fi
  names+=("off" "key" "key+limits")
  bins+=("$SLUICE" "$SLUICE" "$SLUICE")
  envs+=("" "SLUICE_TENANT_KEY=header:X-Api-Key"
    "SLUICE_TENANT_KEY=header:X-Api-Key SLUICE_TENANT_CONCURRENCY=1000 SLUICE_TENANT_RATE=1000000")
  : >"$TMP/cpu.tsv"
  for _ in $(seq "$ROUNDS"); do
    for i in "${!names[@]}"; do
      local p pid t0 t1 n extra=()
      mapfile -t p < <(free_ports 2)
      read -r -a extra <<<"${envs[$i]}"
      start_bg "$TMP/cpu-${names[$i]}.log" env SLUICE_UPSTREAMS="127.0.0.1:${ports[0]}" \
        SLUICE_LISTEN="127.0.0.1:${p[0]}" SLUICE_ADMIN_LISTEN="127.0.0.1:${p[1]}" SLUICE_THREADS=1 \
        SLUICE_ACCESS_LOG=off SLUICE_DRAIN_DELAY=0 SLUICE_DRAIN_TIMEOUT=2s ${extra[@]+"${extra[@]}"} "${bins[$i]}"
      pid=$LAST_PID
      wait_http_200 "${names[$i]}" "$pid" "http://127.0.0.1:${p[0]}/" "$TMP/cpu-${names[$i]}.log"
      wrk -t1 -c50 -d1s -H "X-Api-Key: tenant-a" "http://127.0.0.1:${p[0]}/" >/dev/null
      t0=$(proc_ticks "$pid")
      n=$(wrk -t1 -c50 -d"${DURATION}s" -H "X-Api-Key: tenant-a" "http://127.0.0.1:${p[0]}/" |
        awk '/requests in/ { print $1 }')
      t1=$(proc_ticks "$pid")
      stop_pid "$pid"
      printf '%s\t%s\t%s\n' "${names[$i]}" "$n" "$((t1 - t0))" >>"$TMP/cpu.tsv"
    done
  done
  stop_pid "$up"
  python3 - "$TMP/cpu.tsv" "$(getconf CLK_TCK)" <<'PY'
import collections, statistics, sys
rows = [l.split("\t") for l in open(sys.argv[1]).read().splitlines()]
hz = float(sys.argv[2])
per = collections.OrderedDict()
for name, n, ticks in rows:
    per.setdefault(name, []).append(int(ticks) / hz / int(n) * 1e6)
off = statistics.median(per["off"])
for name, v in per.items():
    m = statistics.median(v)
    print(f"cpu, {name:<11} {m:5.2f} us per request (median of {len(v)}; rounds {', '.join(f'{x:.2f}' for x in v)}), "
          f"{m / off:.3f} x tenants off")
PY
}

for p in "${parts[@]}"; do "$p"; done
