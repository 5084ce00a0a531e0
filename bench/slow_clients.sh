#!/usr/bin/env bash
# Slow clients: does a crowd of slow connections slow normal clients down?
#
# Usage:
#   bench/slow_clients.sh
#
# Environment: SLOW (slow connections, default 1000), MIX (weights of slowloris,
# slow body, slow read; default 1,1,1), ROUNDS (default 3), DURATION seconds per
# wrk run (default 10), CONNECTIONS (wrk -c, default 50), THREADS (Sluice I/O
# threads, default 1), UPSTREAM_THREADS (default 1), KEEP_TMP=1 keeps the temp
# dir. QUIET_MAX / QUIET_WAIT: before each run, wait up to QUIET_WAIT seconds
# (default 120) for the machine's busy CPU to drop to QUIET_MAX percent
# (default 10); QUIET_MAX=100 turns it off.
#
# What it does: one sluice-upstream, Sluice in front of it with its default
# timeouts (head 10s, body 30s, send 30s), each a foreground process of this
# script on free 127.0.0.1 ports. Then ROUNDS rounds of two runs of the same
# normal load,
#   wrk -t1 -cCONNECTIONS -dDURATIONs --latency http://127.0.0.1:PORT/
# first alone, then with SLOW slow connections held open against the same
# Sluice (bench/lib/slow_clients.py: slowloris heads a header line a second,
# bodies a byte a second, readers of a 1 MiB response that read nothing and
# reset after 40 s; each one the server cuts is replaced at once). 1 MiB is
# more than the sockets between Sluice and a reader hold (Sluice's
# SLUICE_CLIENT_SEND_BUFFER of 256KiB, doubled by the kernel, and the reader's
# 4 KiB), so Sluice's write stalls; a larger response would mostly measure the
# test upstream's own send buffers, which share this machine's TCP memory. The slow connections start before
# the second run and stop after it; the run starts once all are open and the
# readers' writes have stalled. The slow clients run at nice 10 (in reality they
# would run on other machines; here they share two CPUs with Sluice, wrk and the
# upstream), and their CPU time is reported. It prints the medians of both, the ratio, the
# Sluice gauges seen during the slow runs, and a markdown fragment.
# Throughput counts 2xx answers only. Exit 1 when the median throughput with slow clients is more than 10 % below
# the one without, or the p99 more than 10 % above.
#
# Only the processes this script started are stopped, by pid, when it exits.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
LIB="$REPO/bench/lib"
SLUICE="$REPO/build/release/app/sluice"
UPSTREAM="$REPO/build/release/upstream/sluice-upstream"

SLOW=${SLOW:-1000}
MIX=${MIX:-1,1,1}
ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-10}
CONNECTIONS=${CONNECTIONS:-50}
THREADS=${THREADS:-1}
UPSTREAM_THREADS=${UPSTREAM_THREADS:-1}
KEEP_TMP=${KEEP_TMP:-0}
QUIET_MAX=${QUIET_MAX:-10}
QUIET_WAIT=${QUIET_WAIT:-120}

log() { printf 'slow_clients: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }
usage() { sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "${BASH_SOURCE[0]}"; }
case "${1:-}" in -h|--help) usage; exit 0 ;; "") ;; *) usage >&2; die "unknown argument: $1" ;; esac
for v in SLOW ROUNDS DURATION CONNECTIONS THREADS UPSTREAM_THREADS QUIET_MAX QUIET_WAIT; do
  [[ ${!v} =~ ^[0-9]+$ ]] || die "$v must be a whole number, not '${!v}'"
done
[[ $MIX =~ ^[0-9]+,[0-9]+,[0-9]+$ ]] || die "MIX must be three weights, e.g. 1,1,1"
while read -r v; do unset "$v"; done < <(compgen -e | grep '^SLUICE_' || true)

# shellcheck source=bench/lib/common.sh
. "$(dirname "$0")/lib/common.sh"

if [ ! -x "$SLUICE" ] || [ ! -x "$UPSTREAM" ]; then
  die "build first: cmake --preset release && cmake --build --preset release"
fi
command -v wrk >/dev/null || die "wrk not found (apt-get install wrk)"
# The slow connections and Sluice's own need file descriptors: raise the soft
# limit (inherited by the processes started below) up to the hard one.
need=$((2 * SLOW + 1024))
hard=$(ulimit -Hn)
if [ "$hard" != unlimited ] && [ "$hard" -lt "$need" ]; then
  die "the hard open-files limit ($hard) is below $need; raise it or use a smaller SLOW"
fi
if [ "$(ulimit -Sn)" != unlimited ] && [ "$(ulimit -Sn)" -lt "$need" ]; then ulimit -Sn "$need"; fi

TMP=$(mktemp -d /tmp/sluice-slow.XXXXXX)
cd "$TMP"
cp "$SLUICE" "$TMP/sluice"
cp "$UPSTREAM" "$TMP/sluice-upstream"
SLUICE_BUILT=$(date -u -r "$SLUICE" '+%Y-%m-%d %H:%M UTC')
SLUICE="$TMP/sluice"
UPSTREAM="$TMP/sluice-upstream"

mapfile -t ports < <(free_ports 3)
UP=${ports[0]} PORT=${ports[1]} ADMIN=${ports[2]}
start_bg "$TMP/upstream.log" "$UPSTREAM" --listen "127.0.0.1:$UP" --threads "$UPSTREAM_THREADS"
wait_http_200 upstream "$LAST_PID" "http://127.0.0.1:$UP/" "$TMP/upstream.log"
start_bg "$TMP/sluice.log" env SLUICE_UPSTREAMS="127.0.0.1:$UP" \
  SLUICE_LISTEN="127.0.0.1:$PORT" SLUICE_ADMIN_LISTEN="127.0.0.1:$ADMIN" \
  SLUICE_THREADS="$THREADS" SLUICE_ACCESS_LOG=off SLUICE_MAX_CONNECTIONS=$((SLOW + 2000)) \
  SLUICE_DRAIN_DELAY=0 SLUICE_DRAIN_TIMEOUT=2s "$SLUICE"
SLUICE_PID=$LAST_PID
wait_http_200 sluice "$SLUICE_PID" "http://127.0.0.1:$PORT/" "$TMP/sluice.log"

to_ms() {
  awk -v v="$1" 'BEGIN { n = v + 0; u = v; sub(/^[0-9.]+/, "", u)
    if (u == "us") n /= 1000; else if (u == "s") n *= 1000; else if (u == "m") n *= 60000
    else if (u != "ms") { print "nan"; exit }
    printf "%.3f\n", n }'
}

metric() {  # NAME: the sum over labels
  curl -s --max-time 5 "http://127.0.0.1:$ADMIN/metrics" \
    | awk -v n="$1" '$1 == n || index($1, n "{") == 1 { s += $NF } END { printf "%d\n", s }'
}

# run_wrk KIND ROUND: one run, appended to results.tsv
run_wrk() {
  local out="$TMP/wrk-$1-$2.txt" rps p50 p99 errors non2xx
  wrk -t1 -c"$CONNECTIONS" -d"${DURATION}s" --latency "http://127.0.0.1:$PORT/" >"$out" 2>&1 \
    || { cat "$out" >&2; die "wrk failed"; }
  # Answers other than 2xx (a 503 is fast) would flatter the rate: only 2xx count.
  rps=$(awk '/ requests in /{n = $1; d = $4; sub(/s,?$/, "", d)} /Non-2xx or 3xx responses:/{bad = $NF}
    END { printf "%.1f\n", (n - bad) / d }' "$out")
  p50=$(to_ms "$(awk '$1 == "50%" {print $2; exit}' "$out")")
  p99=$(to_ms "$(awk '$1 == "99%" {print $2; exit}' "$out")")
  non2xx=$(awk '/Non-2xx or 3xx responses:/{print $NF; exit}' "$out")
  errors=$(awk '/Socket errors:/{gsub(/,/, ""); print $4 + $6 + $8 + $10; exit}' "$out")
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$1" "$2" "$rps" "$p50" "$p99" "${non2xx:-0}" "${errors:-0}" \
    >>"$TMP/results.tsv"
  log "$(printf 'round %s %-9s %9.0f req/s  p50 %7.3f ms  p99 %7.3f ms  non-2xx %s  socket errors %s' \
    "$2" "$1" "$rps" "$p50" "$p99" "${non2xx:-0}" "${errors:-0}")"
}

printf 'kind\tround\trps\tp50_ms\tp99_ms\tnon2xx\tsocket_errors\n' >"$TMP/results.tsv"
: >"$TMP/gauges.txt"
run_wrk warmup 0
for ((round = 1; round <= ROUNDS; round++)); do
  wait_quiet
  run_wrk alone "$round"

  rm -f "$TMP/ready" "$TMP/done"
  start_bg "$TMP/slow-$round.out" nice -n 10 python3 "$LIB/slow_clients.py" --port "$PORT" --count "$SLOW" \
    --mix "$MIX" --ready-file "$TMP/ready" --done-file "$TMP/done" --read-hold 40
  slow_pid=$LAST_PID
  while [ ! -e "$TMP/ready" ]; do
    kill -0 "$slow_pid" 2>/dev/null || { cat "$TMP/slow-$round.out" >&2; die "slow_clients.py exited early"; }
    sleep 0.2
  done
  sleep 3  # the readers' writes stall once the socket buffers are full
  wait_quiet
  gauges="client connections $(metric sluice_client_connections), upstream connections $(metric sluice_upstream_connections), in flight $(metric sluice_lane_in_flight), slots given back by stalled writes $(metric sluice_client_stalled_writes_total), capacity estimate $(metric sluice_upstream_capacity_estimate)"
  run_wrk slow "$round"
  gauges_after="client connections $(metric sluice_client_connections), upstream connections $(metric sluice_upstream_connections)"
  log "Sluice with the slow connections: before the run $gauges; after it $gauges_after"
  echo "round $round: before the run $gauges; after it $gauges_after" >>"$TMP/gauges.txt"
  touch "$TMP/done"
  slow_cpu=$(awk '{ print $14 + $15 }' "/proc/$slow_pid/stat" 2>/dev/null || echo 0)
  log "slow clients' CPU time so far: $(awk -v t="$slow_cpu" -v hz="$(getconf CLK_TCK)" 'BEGIN { printf "%.1f s", t / hz }')"
  wait "$slow_pid" || true
  stop_pid "$slow_pid"
  log "slow clients: $(tail -n1 "$TMP/slow-$round.out")"
  sleep 2
done
kill -0 "$SLUICE_PID" 2>/dev/null || die "Sluice exited during the runs"
timeouts=$(curl -s --max-time 5 "http://127.0.0.1:$ADMIN/metrics" | awk '/^sluice_client_timeouts_total/ {
  match($1, /phase="[a-z]+"/); printf "%s %d, ", substr($1, RSTART + 7, RLENGTH - 8), $NF }' | sed 's/, $//')

summary=$(python3 - "$TMP/results.tsv" <<'EOF'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1]), delimiter="\t"))
def med(kind, col):
    return statistics.median(float(r[col]) for r in rows if r["kind"] == kind)
a_rps, s_rps = med("alone", "rps"), med("slow", "rps")
a_p99, s_p99 = med("alone", "p99_ms"), med("slow", "p99_ms")
a_p50, s_p50 = med("alone", "p50_ms"), med("slow", "p50_ms")
errs = sum(int(r["non2xx"]) + int(r["socket_errors"]) for r in rows if r["kind"] in ("alone", "slow"))
ok = s_rps >= 0.9 * a_rps and s_p99 <= 1.1 * a_p99
print("%.0f %.0f %.3f %.3f %.3f %.3f %.1f %.1f %d %d" % (a_rps, s_rps, a_p50, s_p50, a_p99, s_p99,
      100 * (1 - s_rps / a_rps), 100 * (s_p99 / a_p99 - 1), errs, ok))
EOF
)
read -r a_rps s_rps a_p50 s_p50 a_p99 s_p99 slowdown p99_up errs ok <<<"$summary"
commit=$(git -C "$REPO" rev-parse --short HEAD 2>/dev/null || echo unknown)
cpu=$(lscpu | awk -F: '/^Model name/ && !seen++ {gsub(/^[ \t]+/, "", $2); print $2}')
echo
echo "normal load alone:           $a_rps req/s, p50 $a_p50 ms, p99 $a_p99 ms (median of $ROUNDS)"
echo "with $SLOW slow connections: $s_rps req/s, p50 $s_p50 ms, p99 $s_p99 ms"
echo "throughput $slowdown % lower, p99 $p99_up % higher; errors in the measured runs: $errs"
echo
echo "----- markdown -----"
echo
echo "- Command: \`SLOW=$SLOW MIX=$MIX ROUNDS=$ROUNDS DURATION=$DURATION bench/slow_clients.sh\`"
echo "- Date: $(date -u '+%Y-%m-%d %H:%M UTC'); CPU: $cpu, $(nproc) CPUs online; Sluice $THREADS thread(s), built $SLUICE_BUILT (HEAD $commit), default timeouts"
echo "- Normal load: \`wrk -t1 -c$CONNECTIONS -d${DURATION}s --latency\` GET / through Sluice to one sluice-upstream"
echo "- Slow connections (mix slowloris,slow body,slow read = $MIX): $(sed -n 1p "$TMP/gauges.txt")"
echo "- Cut by Sluice over the whole run, sluice_client_timeouts_total: $timeouts"
echo
echo "| normal load (median of $ROUNDS) | req/s | p50 | p99 |"
echo "|---|---:|---:|---:|"
echo "| alone | $a_rps | $a_p50 ms | $a_p99 ms |"
echo "| with $SLOW slow connections | $s_rps | $s_p50 ms | $s_p99 ms |"
echo "| change | $(awk -v s="$slowdown" 'BEGIN { printf "%+.1f %%", -s }') | | $(awk -v s="$p99_up" 'BEGIN { printf "%+.1f %%", s }') |"
[ "$ok" = 1 ] || { log "the slow connections slowed the normal load by more than 10 %"; exit 1; }
