#!/usr/bin/env bash
# Cold start: what a freshly started Sluice does with a burst of clients arriving at once,
# and how long until it answers them as one that has run a while does; on 127.0.0.1.
#
# Usage:
#   bench/cold_start.sh                    # everything (about 1.5 minutes on a quiet machine)
#   BURST=100 WAVES=2 bench/cold_start.sh  # smaller bursts, two waves
#
# Sluice: SLUICE_ADMISSION_MODE=enforce, SLUICE_THREADS=THREADS, routes /bulk -> bulk,
# /sse -> heavy, / -> standard (as bench/overload/run.sh), access log off, every other
# variable at its default. Each instance below is a fresh Sluice in front of a fresh upstream.
# The clients: sluice_loadgen --burst N (bench/overload/loadgen.cpp): N requests at once,
# each on a new connection; a wave is over when every one has its outcome. Client timeout
# TIMEOUT_MS (a stream: for its response head; the stream is then read to its end).
#
# (a) Healthy upstream: `sluice-upstream --service-ms SERVICE_MS`, no capacity limit. Three
#     instances, one per burst: BURST x GET /api/item (standard), BURST x GET /bulk/job (bulk),
#     STREAMS x GET STREAM_PATH (heavy: SSE streams, 5 s each by default). Each burst is sent
#     WAVES times on its instance, the next wave WAVE_GAP s after the previous one is over.
# (b) Upstream that answers 429 above CAPACITY: `sluice-upstream --capacity CAPACITY
#     --over-capacity 429 --service-ms SERVICE_MS`, bursts of BURST x GET /api/item.
#       warm:  WARM_SECONDS s of open-loop standard load at WARM_LOAD x C/S first (C/S =
#              CAPACITY / SERVICE_MS), then WAVES bursts, WAVE_GAP s apart.
#       fresh: bursts WAVE_GAP s apart from the first request on, until two in a row look
#              like the warm ones (the share of each outcome, 2xx, 503, 429, other and no
#              answer, within LOOK_LIKE points of the warm bursts' mean), MAX_WAVES at most.
#     "Looks warm after": from the fresh instance's first request to the start of the first
#     of those two bursts (0 s: its first burst already looked warm).
#
# Per wave: 2xx, 503 (with Sluice's reasons, from sluice_admission_decisions_total{outcome=
# "shed"}), 429 (the upstream's, forwarded), other answers, no answer (client timeouts,
# connection errors); the p50/p99 of the 2xx; how long the wave took; the upstream's own
# 429s (its /stats) as a share of what reached it; K-hat after the wave (/admin/state).
#
# Environment: THREADS (2), SERVICE_MS (50), BURST (200), STREAMS (50), STREAM_PATH
# ("/sse?n=50&interval_ms=100"), WAVES (3), WAVE_GAP (1 s), TIMEOUT_MS (10000), CAPACITY (8),
# WARM_SECONDS (5), WARM_LOAD (1.5), LOOK_LIKE (5 points), MAX_WAVES (10), QUIET_MAX /
# QUIET_WAIT (before each instance, wait up to QUIET_WAIT s, default 20, for the machine's
# busy CPU to drop to QUIET_MAX percent, default 15; 100 turns it off), KEEP_TMP=1 keeps the
# temp dir (logs, per-request logs, /metrics, /stats). BIN_SLUICE runs another Sluice binary.
#
# curl and python3 are installed with apt-get when missing (dpkg-query decides), and, when
# the binaries are not built yet, what the build needs. Only the processes this script
# started are stopped, by pid, when it exits. It prints markdown tables.
set -euo pipefail
export LC_ALL=C

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
SLUICE=${BIN_SLUICE:-$REPO/build/release/app/sluice}
UPSTREAM="$REPO/build/release/upstream/sluice-upstream"
LOADGEN="$REPO/build/release/bench/sluice_loadgen"

THREADS=${THREADS:-2}
SERVICE_MS=${SERVICE_MS:-50}
BURST=${BURST:-200}
STREAMS=${STREAMS:-50}
STREAM_PATH=${STREAM_PATH:-/sse?n=50&interval_ms=100}
WAVES=${WAVES:-3}
WAVE_GAP=${WAVE_GAP:-1}
TIMEOUT_MS=${TIMEOUT_MS:-10000}
CAPACITY=${CAPACITY:-8}
WARM_SECONDS=${WARM_SECONDS:-5}
WARM_LOAD=${WARM_LOAD:-1.5}
LOOK_LIKE=${LOOK_LIKE:-5}
MAX_WAVES=${MAX_WAVES:-10}
QUIET_MAX=${QUIET_MAX:-15}
QUIET_WAIT=${QUIET_WAIT:-20}
KEEP_TMP=${KEEP_TMP:-0}
UPSTREAM_THREADS=2
ROUTES='[{"prefix":"/bulk","lane":"bulk"},{"prefix":"/sse","lane":"heavy"},{"prefix":"/","lane":"standard"}]'

usage() { sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "${BASH_SOURCE[0]}"; }
log() { printf 'cold_start: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

# shellcheck source=bench/lib/common.sh
. "$REPO/bench/lib/common.sh"
no_arguments "$@"
need_whole THREADS SERVICE_MS BURST STREAMS WAVES TIMEOUT_MS CAPACITY WARM_SECONDS MAX_WAVES \
  QUIET_MAX QUIET_WAIT
need_positive THREADS SERVICE_MS BURST STREAMS WAVES TIMEOUT_MS CAPACITY MAX_WAVES
need_decimal WAVE_GAP WARM_LOAD LOOK_LIKE
[[ $STREAM_PATH == /sse* ]] || die "STREAM_PATH must be an /sse path (the heavy route), not '$STREAM_PATH'"
[ "$MAX_WAVES" -ge 2 ] || die "MAX_WAVES must be at least 2 (two bursts in a row decide)"

# Only the SLUICE_ variables set below apply (an unknown one would stop Sluice).
while read -r v; do unset "$v"; done < <(compgen -e | grep '^SLUICE_' || true)

# ---------------------------------------------------------------- setup

install_packages curl python3
if ! [ -x "$SLUICE" ] || ! [ -x "$UPSTREAM" ] || ! [ -x "$LOADGEN" ]; then
  # What the release preset needs to configure and build (scripts/setup.sh has the rest).
  install_packages build-essential cmake ninja-build pkg-config libboost1.81-dev \
    nlohmann-json3-dev prometheus-cpp-dev libre2-dev catch2
  log "building the release preset"
  (cd "$REPO" && cmake --preset release >/dev/null &&
    cmake --build --preset release -j2 --target sluice sluice-upstream sluice_loadgen)
  for b in "$SLUICE" "$UPSTREAM" "$LOADGEN"; do [ -x "$b" ] || die "the build did not produce $b"; done
fi

TMP=$(mktemp -d /tmp/sluice-cold-start.XXXXXX)
mkdir -p "$TMP/runs"
# Run copies: others may rebuild build/release meanwhile.
SLUICE_BUILT=$(date -u -r "$SLUICE" '+%Y-%m-%d %H:%M UTC')
cp "$SLUICE" "$TMP/sluice"
cp "$UPSTREAM" "$TMP/sluice-upstream"
cp "$LOADGEN" "$TMP/sluice_loadgen"
SLUICE="$TMP/sluice"
UPSTREAM="$TMP/sluice-upstream"
LOADGEN="$TMP/sluice_loadgen"
"$SLUICE" --version >/dev/null || die "$SLUICE --version failed (a build in progress?)"

# ---------------------------------------------------------------- processes

UP_PORT="" UP_PID=""
start_upstream() {  # NAME ARGS...
  local name=$1
  shift
  UP_PORT=$(free_ports 1)
  start_bg "$TMP/runs/$name-upstream.log" "$UPSTREAM" --listen "127.0.0.1:$UP_PORT" \
    --threads "$UPSTREAM_THREADS" --service-ms "$SERVICE_MS" "$@"
  UP_PID=$LAST_PID
  wait_http_200 sluice-upstream "$UP_PID" "http://127.0.0.1:$UP_PORT/stats" "$TMP/runs/$name-upstream.log"
}

SL_PORT="" SL_ADMIN="" SL_PID=""
start_sluice() {  # NAME
  local ports
  mapfile -t ports < <(free_ports 2)
  start_bg "$TMP/runs/$1-sluice.log" env \
    SLUICE_UPSTREAMS="api=127.0.0.1:$UP_PORT" \
    SLUICE_ROUTES="$ROUTES" \
    SLUICE_LISTEN="127.0.0.1:${ports[0]}" \
    SLUICE_ADMIN_LISTEN="127.0.0.1:${ports[1]}" \
    SLUICE_THREADS="$THREADS" \
    SLUICE_ADMISSION_MODE=enforce \
    SLUICE_ACCESS_LOG=off \
    SLUICE_DRAIN_DELAY=0 SLUICE_DRAIN_TIMEOUT=2s \
    "$SLUICE"
  SL_PORT=${ports[0]} SL_ADMIN=${ports[1]} SL_PID=$LAST_PID
  wait_http_200 sluice "$SL_PID" "http://127.0.0.1:$SL_ADMIN/readyz" "$TMP/runs/$1-sluice.log"
}

stop_instance() {
  kill -0 "$SL_PID" 2>/dev/null || die "sluice exited during the run (logs: $TMP/runs; KEEP_TMP=1 keeps them)"
  stop_pid "$SL_PID"
  stop_pid "$UP_PID"
}

# ---------------------------------------------------------------- one wave

# Sluice's refusals so far, by reason: "reason count" lines.
shed_by_reason() {
  curl -sf --max-time 2 "http://127.0.0.1:$SL_ADMIN/metrics" |
    awk '/^sluice_admission_decisions_total\{/ && /outcome="shed"/ {
      match($0, /reason="[^"]*"/); r = substr($0, RSTART + 8, RLENGTH - 9); n[r] += $NF }
      END { for (r in n) print r, n[r] }'
}

khat() {
  curl -sf --max-time 2 "http://127.0.0.1:$SL_ADMIN/admin/state" |
    python3 -c 'import json, sys; print("%.2f" % json.load(sys.stdin)["upstreams"][0]["capacity"])' ||
    echo -
}

up_stats() { curl -sf --max-time 2 "http://127.0.0.1:$UP_PORT/stats" || echo '{}'; }

INSTANCE_T0=""
# wave PART INSTANCE KIND N WAVE CLASS_SPEC: one burst of N, appended to waves.tsv.
wave() {
  local part=$1 instance=$2 kind=$3 n=$4 index=$5 spec=$6 name start m0 m1 s0 s1 other k
  name="$part-$instance-$kind-$index"
  m0=$(shed_by_reason)
  s0=$(up_stats)
  cpu_mark
  start=$(date +%s.%N)
  [ -n "$INSTANCE_T0" ] || INSTANCE_T0=$start
  start_bg "$TMP/runs/$name-loadgen.tsv" "$LOADGEN" --target "127.0.0.1:$SL_PORT" --burst "$n" \
    --log "$TMP/runs/$name-log.tsv" --class "$spec"
  wait "$LAST_PID" || { cat "$TMP/runs/$name-loadgen.tsv" >&2; die "sluice_loadgen failed ($name)"; }
  stop_pid "$LAST_PID"
  other=$(cpu_other_pct)
  m1=$(shed_by_reason)
  s1=$(up_stats)
  k=$(khat)
  python3 - "$TMP/runs/$name-loadgen.tsv" "$part" "$instance" "$kind" "$index" \
    "$(awk -v a="$INSTANCE_T0" -v b="$start" 'BEGIN { printf "%.3f", b - a }')" \
    "$m0" "$m1" "$s0" "$s1" "$k" "$other" >>"$TMP/waves.tsv" <<'EOF'
import json, re, sys
gen, part, instance, kind, index, start, m0, m1, s0, s1, khat, other = sys.argv[1:]
text = open(gen).read()
over = re.search(r"over in ([0-9.]+) s", text)
rows = [l.split("\t") for l in text.splitlines() if "\t" in l]
head, row = rows[0], dict(zip(rows[0], rows[1]))
n = lambda k: int(row[k])
def reasons(t):
    return {l.split()[0]: float(l.split()[1]) for l in t.splitlines() if l.strip()}
r0, r1 = reasons(m0), reasons(m1)
shed = {r: int(r1[r] - r0.get(r, 0)) for r in r1 if r1[r] - r0.get(r, 0) > 0}
u0, u1 = json.loads(s0), json.loads(s1)
print("\t".join([part, instance, kind, index, start, row["sent"], row["ok"], row["503"], row["429"],
                 str(n("late_2xx") + n("504") + n("other")), str(n("timeouts") + n("errors") + n("dropped")),
                 over.group(1) if over else "nan", row["p50_ms"], row["p99_ms"],
                 ",".join("%s %d" % kv for kv in sorted(shed.items())) or "-",
                 str(u1.get("requests", 0) - u0.get("requests", 0)),
                 str(u1.get("rejected", 0) - u0.get("rejected", 0)), khat, other]))
EOF
  log "$(awk -F'\t' 'END { printf "%-24s %s sent, %s 2xx, %s 503, %s 429, %s other, %s no answer; K-hat %s",
    $1 "-" $2 "-" $3 " " $4, $6, $7, $8, $9, $10, $11, $18 }' "$TMP/waves.tsv")"
}

# looks_warm INSTANCE: exit 0 when the last two waves of INSTANCE (part b) look like the warm ones.
looks_warm() {
  python3 - "$TMP/waves.tsv" "$1" "$LOOK_LIKE" <<'EOF'
import sys
from analyze_cold import read, shares, looks_like
path, instance, points = sys.argv[1], sys.argv[2], float(sys.argv[3])
rows = read(path)
warm = [r for r in rows if r["part"] == "b" and r["instance"] == "warm"]
mine = [r for r in rows if r["part"] == "b" and r["instance"] == instance]
sys.exit(0 if len(mine) >= 2 and all(looks_like(r, warm, points) for r in mine[-2:]) else 1)
EOF
}

# ---------------------------------------------------------------- the report's helpers

cat >"$TMP/analyze_cold.py" <<'EOF'
import statistics

FIELDS = ["part", "instance", "kind", "wave", "start_s", "sent", "ok", "s503", "s429", "other",
          "no_answer", "over_s", "p50_ms", "p99_ms", "reasons", "up_requests", "up_rejected", "khat",
          "other_cpu"]
OUTCOMES = ["ok", "s503", "s429", "other", "no_answer"]

def read(path):
    with open(path) as f:
        return [dict(zip(FIELDS, l.rstrip("\n").split("\t"))) for l in f if l.strip()]

def shares(r):
    sent = float(r["sent"]) or 1.0
    return {k: 100.0 * float(r[k]) / sent for k in OUTCOMES}

def looks_like(r, warm, points):
    """Every outcome's share of r within `points` of the warm waves' mean share."""
    mean = {k: statistics.mean(shares(w)[k] for w in warm) for k in OUTCOMES}
    return all(abs(shares(r)[k] - mean[k]) <= points for k in OUTCOMES)
EOF
export PYTHONPATH="$TMP"

# ---------------------------------------------------------------- run

: >"$TMP/waves.tsv"
started=$SECONDS
log "BURST=$BURST, STREAMS=$STREAMS, WAVES=$WAVES, THREADS=$THREADS; temp dir $TMP"

# (a) a healthy upstream
for kind in standard bulk heavy; do
  case "$kind" in
    standard) spec="name=standard,path=/api/item,timeout_ms=$TIMEOUT_MS" n=$BURST ;;
    bulk) spec="name=bulk,path=/bulk/job,timeout_ms=$TIMEOUT_MS" n=$BURST ;;
    heavy) spec="name=heavy,path=$STREAM_PATH,timeout_ms=$TIMEOUT_MS,stream=1" n=$STREAMS ;;
  esac
  wait_quiet
  start_upstream "a-$kind"
  start_sluice "a-$kind"
  INSTANCE_T0=""
  for ((w = 1; w <= WAVES; w++)); do
    [ "$w" = 1 ] || sleep "$WAVE_GAP"
    wave a fresh "$kind" "$n" "$w" "$spec"
  done
  stop_instance
done

# (b) an upstream that answers 429 above CAPACITY: warm first, the yardstick of fresh
spec="name=standard,path=/api/item,timeout_ms=$TIMEOUT_MS"
wait_quiet
start_upstream b-warm --capacity "$CAPACITY" --over-capacity 429
start_sluice b-warm
warm_rate=$(awk -v x="$WARM_LOAD" -v c="$CAPACITY" -v s="$SERVICE_MS" 'BEGIN { printf "%.3f", x * c * 1000 / s }')
start_bg "$TMP/runs/b-warm-load.tsv" "$LOADGEN" --target "127.0.0.1:$SL_PORT" --warmup 0 \
  --duration "$WARM_SECONDS" --class "name=standard,path=/api/item,rate=$warm_rate,timeout_ms=$TIMEOUT_MS"
wait "$LAST_PID" || die "sluice_loadgen failed (the warm-up)"
stop_pid "$LAST_PID"
warmed_khat=$(khat)
INSTANCE_T0=""
for ((w = 1; w <= WAVES; w++)); do
  sleep "$WAVE_GAP"
  wave b warm standard "$BURST" "$w" "$spec"
done
stop_instance

wait_quiet
start_upstream b-fresh --capacity "$CAPACITY" --over-capacity 429
start_sluice b-fresh
INSTANCE_T0=""
for ((w = 1; w <= MAX_WAVES; w++)); do
  [ "$w" = 1 ] || sleep "$WAVE_GAP"
  wave b fresh standard "$BURST" "$w" "$spec"
  if [ "$w" -ge 2 ] && looks_warm fresh; then break; fi
done
stop_instance
log "measured in $((SECONDS - started)) s"

# ---------------------------------------------------------------- report

commit=$(git -C "$REPO" rev-parse --short HEAD 2>/dev/null || echo unknown)
cpu=$(lscpu | awk -F: '/^Model name/ && !seen++ {gsub(/^[ \t]+/, "", $2); print $2}')
python3 - "$TMP/waves.tsv" "$LOOK_LIKE" "$WAVE_GAP" "$warmed_khat" <<EOF
import math, sys
from analyze_cold import read, shares, looks_like
path, points, gap, warmed_khat = sys.argv[1], float(sys.argv[2]), sys.argv[3], sys.argv[4]
rows = read(path)
f = lambda x: "-" if x in ("nan", "") or math.isnan(float(x)) else "%.1f" % float(x)
print("- Date: $(date -u '+%Y-%m-%d %H:%M UTC'); CPU: $cpu, $(nproc) CPUs online")
print("- Sluice: $("$SLUICE" --version 2>&1 | sed -n 1p) (${BIN_SLUICE:-build/release} built $SLUICE_BUILT; HEAD was $commit), "
      "SLUICE_THREADS=$THREADS, SLUICE_ADMISSION_MODE=enforce, every other variable at its default")
print("- Clients: sluice_loadgen --burst (all at once, each on a new connection), client timeout $TIMEOUT_MS ms; "
      "waves ${WAVE_GAP} s apart (from the end of one to the start of the next)")
print("")
print("#### (a) Healthy upstream (sluice-upstream --service-ms $SERVICE_MS, no capacity limit), a fresh Sluice per burst")
print("")
print("| burst | wave | sent | 2xx | 503 | other | no answer | Sluice's 503s by reason | over in | 2xx p50 / p99 ms | K̂ after | other CPU % |")
print("|---|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|")
what = {"standard": "$BURST x /api/item (standard)", "bulk": "$BURST x /bulk/job (bulk)",
        "heavy": "$STREAMS x $STREAM_PATH (heavy)"}
for r in [r for r in rows if r["part"] == "a"]:
    print("| %s | %s | %s | %s | %s | %s | %s | %s | %s s | %s / %s | %s | %s |" % (
        what[r["kind"]], r["wave"], r["sent"], r["ok"], r["s503"], int(r["s429"]) + int(r["other"]),
        r["no_answer"], r["reasons"], f(r["over_s"]), f(r["p50_ms"]), f(r["p99_ms"]), r["khat"], r["other_cpu"]))
print("")
print("#### (b) Upstream that answers 429 above $CAPACITY (--capacity $CAPACITY --over-capacity 429 --service-ms $SERVICE_MS): $BURST x /api/item at once")
print("")
print("warm: $WARM_SECONDS s of open-loop /api/item at ${WARM_LOAD}x C/S first (K̂ after it: %s)." % warmed_khat)
print("")
print("| instance | wave | starts at | 2xx % | 503 % | 429 % | other % | no answer % | Sluice's 503s by reason | "
      "upstream's 429s / what reached it | over in | K̂ after | other CPU % |")
print("|---|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|")
b = [r for r in rows if r["part"] == "b"]
warm = [r for r in b if r["instance"] == "warm"]
for r in b:
    s = shares(r)
    up = int(r["up_requests"])
    print("| %s | %s | %s s | %.1f | %.1f | %.1f | %.1f | %.1f | %s | %s | %s s | %s | %s |" % (
        r["instance"], r["wave"], f(r["start_s"]), s["ok"], s["s503"], s["s429"], s["other"], s["no_answer"],
        r["reasons"], ("%s / %s = %.1f %%" % (r["up_rejected"], up, 100.0 * int(r["up_rejected"]) / up)) if up else "0 / 0",
        f(r["over_s"]), r["khat"], r["other_cpu"]))
print("")
print("starts at: from the instance's first burst (warm: after its warm-up). The shares are of the %s "
      "requests of a burst; the upstream's 429s are of what reached it in the burst." % "$BURST")
print("")
fresh = [r for r in b if r["instance"] == "fresh"]
first = next((i for i in range(len(fresh) - 1)
              if looks_like(fresh[i], warm, points) and looks_like(fresh[i + 1], warm, points)), None)
if first is None:
    print("The fresh instance's answers did not look like the warm one's (every outcome's share within %g points "
          "of the warm bursts' mean, two bursts in a row) within %d bursts (%s s)." % (
              points, len(fresh), f(fresh[-1]["start_s"])))
else:
    print("The fresh instance's answers look like the warm one's (every outcome's share within %g points of the "
          "warm bursts' mean, two bursts in a row) from **%s s** after its first request (burst %s)." % (
              points, f(fresh[first]["start_s"]), fresh[first]["wave"]))
print("")
EOF
