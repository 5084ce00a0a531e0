#!/usr/bin/env bash
# Instructions per request on the request path: Sluice under callgrind
# (SLUICE_THREADS=THREADS, 1 by default), `wrk -t1 -c10 -dDURATIONs` against GET / through it to one
# sluice-upstream. The counters are zeroed once Sluice serves and dumped when wrk
# ends (callgrind_control), so start-up and shut-down are left out: the
# instructions of that window divided by the requests Sluice counted in it
# (sluice_requests_total). Once with the access log to a file, once with it off.
# User-space instruction counts hold steady on a shared machine where times do not.
#
# Usage: bench/callgrind.sh [SLUICE_BINARY]   (default build/release/app/sluice)
# Environment: DURATION (default 8), THREADS (default 1; callgrind runs them one at a
# time, so the count is the instructions of the path, locks included), KEEP_TMP=1 keeps the temp dir (callgrind.out.*
# for callgrind_annotate). Installs valgrind and wrk with apt-get when missing.
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
LIB="$REPO/bench/lib"
SLUICE=$(realpath "${1:-$REPO/build/release/app/sluice}")
UPSTREAM="$REPO/build/release/upstream/sluice-upstream"
DURATION=${DURATION:-8}
THREADS=${THREADS:-1}
KEEP_TMP=${KEEP_TMP:-0}
log() { echo "callgrind: $*" >&2; }
die() { log "$*"; exit 1; }
# shellcheck source=bench/lib/common.sh
source "$LIB/common.sh"

install_packages valgrind wrk curl
[ -x "$SLUICE" ] || die "no $SLUICE (build it: ./scripts/build.sh release)"
TMP=$(mktemp -d /tmp/sluice-callgrind.XXXXXX)
cd "$TMP"

UP_PORT=$(free_ports 1)
start_bg "$TMP/upstream.log" "$UPSTREAM" --listen "127.0.0.1:$UP_PORT" --threads 1
wait_http_200 sluice-upstream "$LAST_PID" "http://127.0.0.1:$UP_PORT/" "$TMP/upstream.log"

requests_total() {  # ADMIN_PORT
  curl -fsS "http://127.0.0.1:$1/metrics" |
    awk '/^sluice_requests_total[{ ]/ { n += $NF } END { printf "%d", n }'
}

run() {  # NAME ACCESS_LOG: prints instructions per request
  local name=$1 access_log=$2 ports pid before after ir dump
  mapfile -t ports < <(free_ports 2)
  start_bg "$TMP/$name.log" env SLUICE_UPSTREAMS="127.0.0.1:$UP_PORT" \
    SLUICE_LISTEN="127.0.0.1:${ports[0]}" SLUICE_ADMIN_LISTEN="127.0.0.1:${ports[1]}" \
    SLUICE_THREADS="$THREADS" SLUICE_ACCESS_LOG="$access_log" SLUICE_DRAIN_DELAY=0 SLUICE_DRAIN_TIMEOUT=2s \
    valgrind --tool=callgrind --callgrind-out-file="$TMP/callgrind.out.$name" "$SLUICE"
  pid=$LAST_PID
  wait_http_200 "$name" "$pid" "http://127.0.0.1:${ports[0]}/" "$TMP/$name.log"
  wrk -t1 -c10 -d1s "http://127.0.0.1:${ports[0]}/" >/dev/null  # warm: pools, buffers
  before=$(requests_total "${ports[1]}")
  callgrind_control -z "$pid" >/dev/null 2>&1
  wrk -t1 -c10 -d"${DURATION}s" "http://127.0.0.1:${ports[0]}/" >"$TMP/$name.wrk"
  callgrind_control -d "$pid" >/dev/null 2>&1
  after=$(requests_total "${ports[1]}")
  stop_pid "$pid"
  dump="$TMP/callgrind.out.$name.1"  # the first dump: the window of the wrk run
  ir=$(awk '/^(summary|totals):/ { print $2; exit }' "$dump")
  if [ -z "$ir" ] || [ "$after" -le "$before" ]; then
    die "$name: no dump or no requests (see $TMP/$name.log)"
  fi
  awk -v ir="$ir" -v n="$((after - before))" -v name="$name" \
    'BEGIN { printf "%s: %d requests, %.0f instructions per request\n", name, n, ir / n }'
}

run "access-log-on" "$TMP/access.log"
run "access-log-off" off
