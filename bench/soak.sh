#!/usr/bin/env bash
# Soak: a long run of mixed load with faults, looking for leaks and lost answers.
#
# Usage:
#   bench/soak.sh                 # 30 minutes
#   DURATION=120 bench/soak.sh    # a short run, to try it out
#
# Environment: DURATION seconds of the main run (default 1800), RATE requests a
# second (default 200), SSE concurrent SSE streams (default 8), WARMUP seconds
# (default 30), SETTLE seconds of quiet before each measurement (default 15;
# Sluice closes pooled upstream connections idle for 5 s), PIN_EVERY seconds
# between pin toggles (default 20), FAULT_EVERY seconds between kills of the
# second upstream host (default 60), FAULT_DOWN seconds it stays down (default
# 5), THREADS Sluice I/O threads (default 2), KEEP_TMP=1 keeps the temp dir
# (Sluice's access log, the upstreams' logs, the client's summaries).
#
# What it does: starts two sluice-upstream processes as the two hosts of
# upstream "api" and Sluice in front of them (admin token set, routes: bulk by
# header X-Lane: bulk, SSE to heavy, the rest standard), everything niced. The
# client (bench/lib/soak_client.py) sends RATE requests a second over kept-alive
# connections: small and bulk GETs and POSTs, large Content-Length and chunked
# bodies, upstream 500s and 503s, /drop (the upstream closes without answering:
# a GET is replayed, a POST gets 502), /slow, bodies cut short by the upstream;
# it holds SSE SSE streams open throughout, toggles pins through the admin API,
# and kills the second host (SIGKILL, by pid) and restarts it on its port.
# First a WARMUP run of the same load, then SETTLE seconds of quiet and a
# measurement (open fds of Sluice, RSS, upstream pool sizes, client
# connections, requests in flight); then the DURATION run, the same quiet, the
# same measurement. Last it checks the accounting: every request the client
# sent ended in exactly one answer, cut or client timeout, and Sluice's
# /metrics (sluice_requests_total plus sluice_client_errors_total, by code)
# equal the client's counts (a body cut after its head is Sluice's 502, a
# client timeout its 499). Exit 1 when a figure is off.
#
# Only the processes this script started are stopped, by pid, when it exits.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
LIB="$REPO/bench/lib"
SLUICE="$REPO/build/release/app/sluice"
UPSTREAM="$REPO/build/release/upstream/sluice-upstream"

DURATION=${DURATION:-1800}
RATE=${RATE:-200}
SSE=${SSE:-8}
WARMUP=${WARMUP:-30}
SETTLE=${SETTLE:-15}
PIN_EVERY=${PIN_EVERY:-20}
FAULT_EVERY=${FAULT_EVERY:-60}
FAULT_DOWN=${FAULT_DOWN:-5}
THREADS=${THREADS:-2}
KEEP_TMP=${KEEP_TMP:-0}
QUIET_MAX=100  # leaks and accounting, not throughput: no waiting for a quiet machine
QUIET_WAIT=0
TOKEN="soak-$$-$RANDOM$RANDOM"

log() { printf 'soak: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

usage() { sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "${BASH_SOURCE[0]}"; }
case "${1:-}" in -h|--help) usage; exit 0 ;; "") ;; *) usage >&2; die "unknown argument: $1" ;; esac
for v in DURATION RATE SSE WARMUP SETTLE PIN_EVERY FAULT_EVERY FAULT_DOWN THREADS; do
  [[ ${!v} =~ ^[0-9]+$ ]] || die "$v must be a whole number, not '${!v}'"
done
while read -r v; do unset "$v"; done < <(compgen -e | grep '^SLUICE_' || true)

# shellcheck source=bench/lib/common.sh
. "$(dirname "$0")/lib/common.sh"

if [ ! -x "$SLUICE" ] || [ ! -x "$UPSTREAM" ]; then
  die "build first: cmake --preset release && cmake --build --preset release"
fi
command -v curl >/dev/null || die "curl not found"
TMP=$(mktemp -d /tmp/sluice-soak.XXXXXX)
cd "$TMP"
# Run copies: a rebuild in the work tree during the soak changes nothing here.
cp "$SLUICE" "$TMP/sluice"
cp "$UPSTREAM" "$TMP/sluice-upstream"
SLUICE="$TMP/sluice"
UPSTREAM="$TMP/sluice-upstream"

mapfile -t ports < <(free_ports 4)
UP_A=${ports[0]} UP_B=${ports[1]} PORT=${ports[2]} ADMIN=${ports[3]}
start_bg "$TMP/upstream-a.log" nice -n 10 "$UPSTREAM" --listen "127.0.0.1:$UP_A" --threads 2
wait_http_200 upstream-a "$LAST_PID" "http://127.0.0.1:$UP_A/" "$TMP/upstream-a.log"
ROUTES='[{"header":{"name":"X-Lane","value":"bulk"},"lane":"bulk"},{"sse":true,"lane":"heavy"},{"prefix":"/","lane":"standard"}]'
start_bg "$TMP/sluice.log" env \
  SLUICE_UPSTREAMS="api=127.0.0.1:$UP_A|127.0.0.1:$UP_B" \
  SLUICE_LISTEN="127.0.0.1:$PORT" SLUICE_ADMIN_LISTEN="127.0.0.1:$ADMIN" \
  SLUICE_ADMIN_TOKEN="$TOKEN" SLUICE_THREADS="$THREADS" \
  SLUICE_ROUTES="$ROUTES" SLUICE_ACCESS_LOG="$TMP/access.log" \
  SLUICE_UPSTREAM_IDLE_TIMEOUT=5s SLUICE_UPSTREAM_RESPONSE_TIMEOUT=10s \
  SLUICE_HOST_EJECT=1s:10s SLUICE_DRAIN_DELAY=0 SLUICE_DRAIN_TIMEOUT=2s \
  nice -n 10 "$SLUICE"
SLUICE_PID=$LAST_PID
wait_http_200 sluice "$SLUICE_PID" "http://127.0.0.1:$ADMIN/healthz" "$TMP/sluice.log"

# sum_metric NAME: the sum of a Prometheus series over its labels.
sum_metric() {
  curl -s --max-time 5 "http://127.0.0.1:$ADMIN/metrics" \
    | awk -v n="$1" '$1 == n || index($1, n "{") == 1 { s += $NF } END { printf "%d\n", s }'
}

# measure LABEL: one line of figures, also kept as M[<field>_<LABEL>].
declare -A M
measure() {
  local label=$1 fds rss pools clients inflight heavy waiting
  fds=$(find "/proc/$SLUICE_PID/fd" -mindepth 1 -maxdepth 1 | wc -l)
  rss=$(awk '/^VmRSS:/{print $2}' "/proc/$SLUICE_PID/status")
  pools=$(sum_metric sluice_upstream_connections)
  waiting=$(sum_metric sluice_upstream_waiting)
  clients=$(sum_metric sluice_client_connections)
  inflight=$(sum_metric sluice_lane_in_flight)
  heavy=$(sum_metric sluice_heavy_leases)
  M[fds_$label]=$fds
  M[rss_$label]=$rss
  M[pools_$label]=$pools
  M[waiting_$label]=$waiting
  M[clients_$label]=$clients
  M[inflight_$label]=$inflight
  M[heavy_$label]=$heavy
  log "$label: fds $fds, RSS $rss KiB, upstream connections $pools (waiting $waiting), client connections $clients, in flight $inflight, heavy leases $heavy"
}

run_client() {  # SECONDS OUTFILE
  start_bg "$TMP/client-$2.err" nice -n 10 python3 "$LIB/soak_client.py" \
    --port "$PORT" --admin-port "$ADMIN" --token "$TOKEN" --duration "$1" --rate "$RATE" \
    --sse "$SSE" --pin-every "$PIN_EVERY" --fault-every "$FAULT_EVERY" --fault-down "$FAULT_DOWN" \
    --fault-cmd "nice -n 10 $UPSTREAM --listen 127.0.0.1:$UP_B --threads 1" \
    --fault-log "$TMP/upstream-b.log"
  local pid=$LAST_PID
  while kill -0 "$pid" 2>/dev/null && [ "$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null)" != Z ]; do
    kill -0 "$SLUICE_PID" 2>/dev/null || die "Sluice exited during the run (log: $TMP/sluice.log)"
    sleep 1
  done
  wait "$pid" || die "the client failed: $(tail -5 "$TMP/client-$2.err")"
  stop_pid "$pid"
  tail -n1 "$TMP/client-$2.err" >"$TMP/client-$2.json"
  python3 -c 'import json,sys; json.load(open(sys.argv[1]))' "$TMP/client-$2.json" \
    || die "no summary from the client: $(tail -5 "$TMP/client-$2.err")"
}

started=$(date -u '+%Y-%m-%d %H:%M UTC')
log "warm-up: ${WARMUP}s at $RATE req/s (Sluice pid $SLUICE_PID, port $PORT, admin $ADMIN)"
run_client "$WARMUP" warmup
sleep "$SETTLE"
measure start
log "main run: ${DURATION}s at $RATE req/s, $SSE SSE streams, a pin toggle every ${PIN_EVERY}s, host b killed every ${FAULT_EVERY}s"
run_client "$DURATION" main
sleep "$SETTLE"
measure end
curl -s --max-time 5 "http://127.0.0.1:$ADMIN/metrics" >"$TMP/metrics.txt"

# ---------------------------------------------------------------- accounting
report=$(python3 - "$TMP/client-warmup.json" "$TMP/client-main.json" "$TMP/metrics.txt" <<'EOF'
import json, re, sys
from collections import Counter
client = Counter()
sent = answered = cut = timed_out = no_answer = 0
kills = 0
for path in sys.argv[1:3]:
    s = json.load(open(path))
    sent += s["sent"]; answered += s["answered"]; cut += s["cut"]
    timed_out += s["timed_out"]; no_answer += s["no_answer"]; kills += s["upstream_kills"]
    client.update({k: v for k, v in s["codes"].items()})
    client["502"] += s["cut"]          # Sluice counts a body cut after the head as 502
    client["499"] += s["timed_out"]    # and a client that gave up as 499
    client["no_answer"] += s["no_answer"]
sluice = Counter()
for line in open(sys.argv[3]):
    m = re.match(r'(sluice_requests_total|sluice_client_errors_total)\{(.*)\} ([0-9.e+]+)$', line.strip())
    if m:
        code = re.search(r'code="(\d+)"', m.group(2)).group(1)
        sluice[code] += int(float(m.group(3)))
codes = sorted(set(client) | set(sluice))
classes = Counter(); sclasses = Counter()
for c in client:
    classes[c[0] + "xx" if c[0].isdigit() else c] += client[c]
for c in sluice:
    sclasses[c[0] + "xx"] += sluice[c]
ok = sent == answered + cut + timed_out + no_answer and no_answer == 0 and all(
    client[c] == sluice[c] for c in codes)
print(json.dumps({"ok": ok, "sent": sent, "answered": answered, "cut": cut, "timed_out": timed_out,
                  "no_answer": no_answer, "upstream_kills": kills,
                  "by_code": {c: [client[c], sluice[c]] for c in codes},
                  "by_class": {c: [classes[c], sclasses[c]] for c in sorted(set(classes) | set(sclasses))}}))
EOF
)
log "accounting: $report"
ok=$(python3 -c 'import json,sys; print(int(json.loads(sys.argv[1])["ok"]))' "$report")

fail=0
check() {  # WHAT START END SLACK
  local d=$(($3 - $2))
  if [ "${d#-}" -gt "$4" ]; then log "LEAK? $1: $2 at the start, $3 at the end"; fail=1; fi
}
check "open fds" "${M[fds_start]}" "${M[fds_end]}" 0
check "upstream connections" "${M[pools_start]}" "${M[pools_end]}" 0
check "client connections" "${M[clients_start]}" "${M[clients_end]}" 0
check "requests in flight" "${M[inflight_start]}" "${M[inflight_end]}" 0
check "heavy leases" "${M[heavy_start]}" "${M[heavy_end]}" 0
check "RSS KiB" "${M[rss_start]}" "${M[rss_end]}" $((M[rss_start] / 10 + 2048))
[ "$ok" = 1 ] || { log "ACCOUNTING MISMATCH (client, Sluice by code above)"; fail=1; }

commit=$(git -C "$REPO" rev-parse --short HEAD 2>/dev/null || echo unknown)
by_class=$(python3 -c '
import json,sys; r=json.loads(sys.argv[1])
print(", ".join("%s %d / %d" % (c, v[0], v[1]) for c, v in r["by_class"].items()))' "$report")
read -r sent answered cut timed_out no_answer kills < <(python3 -c '
import json,sys; r=json.loads(sys.argv[1])
print(r["sent"], r["answered"], r["cut"], r["timed_out"], r["no_answer"], r["upstream_kills"])' "$report")
echo
echo "----- markdown -----"
echo
echo "- Command: \`DURATION=$DURATION RATE=$RATE SSE=$SSE bench/soak.sh\` (HEAD $commit, started $started, $THREADS Sluice threads, everything at nice 10)"
echo "- Client: $sent requests sent = $answered answered + $cut cut after the head + $timed_out timed out + $no_answer without an answer; host b killed and restarted $kills times"
echo "- By status class, client / Sluice's /metrics: $by_class"
echo
echo "| after ${SETTLE}s quiet | open fds | RSS | upstream connections | client connections | in flight | heavy leases |"
echo "|---|---:|---:|---:|---:|---:|---:|"
echo "| after the ${WARMUP}s warm-up | ${M[fds_start]} | ${M[rss_start]} KiB | ${M[pools_start]} | ${M[clients_start]} | ${M[inflight_start]} | ${M[heavy_start]} |"
echo "| after the ${DURATION}s run | ${M[fds_end]} | ${M[rss_end]} KiB | ${M[pools_end]} | ${M[clients_end]} | ${M[inflight_end]} | ${M[heavy_end]} |"
exit "$fail"
