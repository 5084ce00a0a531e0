#!/usr/bin/env bash
# Overload, side by side: Sluice, nginx (three ways) and HAProxy in front of the same
# fixed-capacity upstream, under the same open-loop load, on 127.0.0.1.
#
# Usage:
#   bench/overload/run.sh              # the full run (about 20 minutes on a quiet machine)
#   DURATION=3 WARMUP=1 LOADS="1 3" SHAPES=queue bench/overload/run.sh   # a quick look
#   SHAPES=halve STEP=0 HONESTY=0 bench/overload/run.sh   # only the capacity that halves
#
# The upstream: `sluice-upstream --capacity C --service-ms S --over-capacity SHAPE`, C
# slots of S ms each, capacity C/S requests per second. SHAPE 429: above C in flight it
# answers 429 (Retry-After: 1) at once. SHAPE queue: above C a request waits, first come
# first served, for a slot (its latency grows with the queue, and it is served even after
# its client has given up). SHAPE halve: the 429 shape with `--capacity-schedule
# P:C/2,2P:C` (P = HALVE_PHASE, 10 s; C/2 rounded down, at least 1): C slots, C/2 from P s
# after the upstream's first request, C again from 2P s. Every run starts a fresh upstream
# and a fresh proxy.
#
# The load: sluice_loadgen (bench/overload/loadgen.cpp, built as build/release/bench/
# sluice_loadgen), open loop: requests arrive on schedule whether or not the earlier ones
# were answered. At load x, the upstream is offered x C slots: the streams hold
# STREAM_RATE x STREAM_SECONDS of them (0.5 by default), and the requests the rest,
# R(x) = (x C - STREAM_RATE x STREAM_SECONDS) / S per second:
#   bulk      GET /bulk/job   at (1 - STANDARD_SHARE) R(x) per second
#   standard  GET /api/item   at STANDARD_SHARE R(x) per second
#   heavy     GET /sse?n=N&interval_ms=100 (an SSE stream of STREAM_SECONDS) at
#             STREAM_RATE per second whatever x is: a few long streams beside the rest
# with constant gaps, except at the load written "0.9p" (Poisson arrivals). Every request
# has the client timeout TIMEOUT_MS (a stream: for its response head); then it counts as a
# timeout and its connection is closed. Connections are kept alive and reused.
#
# The systems, each with its own config in the temp dir, all with one worker thread:
#   direct            the load generator straight at the upstream (only at the highest
#                     load on the 429 shape: it serves every slot it has and refuses the
#                     rest at once, so its goodput there is the measured capacity)
#   sluice            SLUICE_ADMISSION_MODE=enforce, SLUICE_THREADS=THREADS, routes
#                     /bulk -> bulk, /sse -> heavy, / -> standard; no limit set by hand
#   nginx             proxy_pass with keep-alive upstream connections, no limits
#   nginx-limit-conn  the same with `limit_conn` C per server (503 above it)
#   nginx-max-conns   the same with `server ... max_conns=C` (502 when none is free)
#   haproxy           `server ... maxconn C` and `timeout queue QUEUE_MS` (503 after it)
# nginx and HAProxy get `proxy_buffering off` / nothing special for the streams.
#
# Per shape, system and load: DURATION s measured after WARMUP s of the same load. Goodput
# = 2xx answered within the timeout per second (bulk and standard) as a share of C/S and
# of the measured capacity; per lane p50/p99 of those 2xx, shares of 503/504/429/other/
# timeouts, and the share of refusals (429/503) that carried a Retry-After; the upstream's
# own 429s as a share of what reached it (its /stats deltas over the window).
#
# The step (STEP_SYSTEMS on the STEP_SHAPE upstream): 0.5x for STEP_BEFORE s, then 2x for
# STEP_AFTER s, one line per request logged; for Sluice /admin/state is polled every
# 100 ms (level, K-hat, queue depth). Settled: from when every later 1 s window has a
# standard p99 (timeouts count as infinite) under 2 S, and goodput within 10 % of its
# final level.
#
# The halve shape (its own runs, at each load of HALVE_LOADS, and direct at the highest of
# them): 3 HALVE_PHASE s of load, no warm-up (DURATION and WARMUP do not apply), one line per
# request logged; for Sluice /admin/state is polled every 100 ms, as for the step. Goodput
# counts the upstream's slot time the 2xx answered in time used (S per bulk or standard
# request, STREAM_SECONDS per stream, by completion), over the slot time available (C or
# C/2 slots), overall and per phase (0-P, P-2P, 2P-3P s on the upstream's clock, which
# starts at its first request: /stats reports schedule_ms, which places it on the load's
# clock). For Sluice: how long after each change K-hat came within 20 % of the new capacity
# and stayed there until the next change (or the end of the load).
#
# Retry-After honesty (Sluice, HONESTY_SHAPE): 0.5x, HONESTY_STEP x from 5 s to 15 s (and
# HONESTY_STREAM_STEP times as many streams, so that every lane is refused), 0.5x to 25 s;
# its streams last HONESTY_STREAM_SECONDS and come STREAM_SECONDS / HONESTY_STREAM_SECONDS
# times as often: the same seats as the other runs' streams, more clients to refuse (at 2 s,
# 18-21 streams refused per overload left too few probes to find a shortest wait);
# with HONESTY_BURSTS 2, the same overload again HONESTY_PERIOD s later (from 155 s to 165 s),
# then 0.5x to 305 s (the first overload a lane meets has no earlier one to go by; the
# second has);
# every refused request with a Retry-After retries once, HONESTY_PROBE_SHARE of them (half)
# after a random share of the told wait ("probe"), the others after exactly it ("obey");
# retries due more than HONESTY_HORIZON s after the arrivals end are not sent.
# bench/overload/analyze.py derives the admitted share of the obeying retries and, from the
# probes, the shortest wait that worked (see docs/benchmarks.md).
#
# Environment: CAPACITY (8), SERVICE_MS (50), TIMEOUT_MS (1000), DURATION (6), WARMUP (2),
# LOADS ("0.5 0.9p 1 1.5 2 3"), SHAPES ("429 queue halve"; "" runs only the step and the honesty run),
# HALVE_LOADS ("2": the loads of the halve shape), HALVE_PHASE (10 s), SYSTEMS ("sluice nginx
# nginx-limit-conn nginx-max-conns haproxy"; direct is added on its own), STANDARD_SHARE
# (0.2), STREAM_RATE (0.25 per second), STREAM_SECONDS (2), QUEUE_MS (HAProxy's timeout queue, 500), THREADS (1),
# STEP (1; 0 skips), STEP_SYSTEMS (as SYSTEMS), STEP_SHAPE (queue), STEP_BEFORE (5),
# STEP_AFTER (15), HONESTY (1; 0 skips), HONESTY_SHAPE (queue), HONESTY_STEP (6),
# HONESTY_STREAM_STEP (12), HONESTY_STREAM_SECONDS (1), HONESTY_BURSTS (2), HONESTY_PERIOD (150),
# HONESTY_HORIZON (20), HONESTY_PROBE_SHARE (0.5: the share of refused clients that probe),
# CHARTS (docs/images: the SVGs are written there; "" skips them), SEED (1),
# QUIET_MAX / QUIET_WAIT (before each run, wait up to QUIET_WAIT s, default 20, for the
# machine's busy CPU to drop to QUIET_MAX percent, default 15; 100 turns it off),
# KEEP_TMP=1 keeps the temp dir (configs, logs, per-request logs, /stats, /metrics).
# BIN_SLUICE runs another Sluice binary (default build/release/app/sluice), to compare builds.
#
# nginx-light, haproxy, gnuplot-nox, curl and python3 are installed with apt-get when
# missing (dpkg-query decides); nginx and HAProxy run as this script's foreground
# processes, never through systemd. Only the processes this script started are stopped,
# by pid, when it exits. At the end it prints the tables (plain markdown) and the targets.
set -euo pipefail
export LC_ALL=C

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
HERE="$REPO/bench/overload"
SLUICE=${BIN_SLUICE:-$REPO/build/release/app/sluice}
UPSTREAM="$REPO/build/release/upstream/sluice-upstream"
LOADGEN="$REPO/build/release/bench/sluice_loadgen"

CAPACITY=${CAPACITY:-8}
SERVICE_MS=${SERVICE_MS:-50}
TIMEOUT_MS=${TIMEOUT_MS:-1000}
DURATION=${DURATION:-6}
WARMUP=${WARMUP:-2}
LOADS=${LOADS:-0.5 0.9p 1 1.5 2 3}
SHAPES=${SHAPES-429 queue halve}
HALVE_LOADS=${HALVE_LOADS:-2}
HALVE_PHASE=${HALVE_PHASE:-10}
SYSTEMS=${SYSTEMS:-sluice nginx nginx-limit-conn nginx-max-conns haproxy}
STANDARD_SHARE=${STANDARD_SHARE:-0.2}
STREAM_RATE=${STREAM_RATE:-0.25}
STREAM_SECONDS=${STREAM_SECONDS:-2}
QUEUE_MS=${QUEUE_MS:-500}
THREADS=${THREADS:-1}
STEP=${STEP:-1}
STEP_SYSTEMS=${STEP_SYSTEMS:-$SYSTEMS}
STEP_SHAPE=${STEP_SHAPE:-queue}
STEP_BEFORE=${STEP_BEFORE:-5}
STEP_AFTER=${STEP_AFTER:-15}
HONESTY=${HONESTY:-1}
HONESTY_SHAPE=${HONESTY_SHAPE:-queue}
HONESTY_HORIZON=${HONESTY_HORIZON:-20}
HONESTY_PROBE_SHARE=${HONESTY_PROBE_SHARE:-0.5}
HONESTY_PERIOD=${HONESTY_PERIOD:-150}
HONESTY_STEP=${HONESTY_STEP:-6}
HONESTY_STREAM_STEP=${HONESTY_STREAM_STEP:-12}
HONESTY_STREAM_SECONDS=${HONESTY_STREAM_SECONDS:-1}
HONESTY_BURSTS=${HONESTY_BURSTS:-2}
CHARTS=${CHARTS-docs/images}
SEED=${SEED:-1}
QUIET_MAX=${QUIET_MAX:-15}
QUIET_WAIT=${QUIET_WAIT:-20}
KEEP_TMP=${KEEP_TMP:-0}
UPSTREAM_THREADS=2

usage() { sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "${BASH_SOURCE[0]}"; }
log() { printf 'overload: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

# shellcheck source=bench/lib/common.sh
. "$REPO/bench/lib/common.sh"
no_arguments "$@"
need_whole CAPACITY SERVICE_MS TIMEOUT_MS DURATION WARMUP STREAM_SECONDS QUEUE_MS THREADS STEP \
  STEP_BEFORE STEP_AFTER HONESTY HONESTY_HORIZON HONESTY_BURSTS HONESTY_PERIOD SEED QUIET_MAX QUIET_WAIT HALVE_PHASE \
  HONESTY_STREAM_SECONDS
need_positive CAPACITY SERVICE_MS TIMEOUT_MS DURATION THREADS HALVE_PHASE HONESTY_STREAM_SECONDS
[[ $STANDARD_SHARE =~ ^0?\.[0-9]+$|^1$ ]] || die "STANDARD_SHARE must be in 0..1, not '$STANDARD_SHARE'"
[[ $HONESTY_PROBE_SHARE =~ ^0?\.[0-9]*[1-9][0-9]*$ ]] ||
  die "HONESTY_PROBE_SHARE must be between 0 and 1, not '$HONESTY_PROBE_SHARE'"
need_decimal STREAM_RATE
for l in $LOADS; do [[ $l =~ ^[0-9]+(\.[0-9]+)?p?$ ]] || die "LOADS: '$l' is not a load (1.5, 0.9p)"; done
[ "$HONESTY_BURSTS" -ge 1 ] || die "HONESTY_BURSTS: at least 1, not '$HONESTY_BURSTS'"
[ "$HONESTY_PERIOD" -ge 30 ] || die "HONESTY_PERIOD: at least 30 (s), not '$HONESTY_PERIOD'"
for v in HONESTY_STEP HONESTY_STREAM_STEP; do
  [[ ${!v} =~ ^[0-9]+(\.[0-9]+)?$ ]] || die "$v: '${!v}' is not a multiple (6, 2.5)"
done
for l in $HALVE_LOADS; do
  [[ $l =~ ^[0-9]+(\.[0-9]+)?p?$ ]] || die "HALVE_LOADS: '$l' is not a load (2, 0.9p)"
done
for s in $SHAPES; do
  [[ $s == 429 || $s == queue || $s == halve ]] || die "SHAPES: a shape is 429, queue or halve, not '$s'"
done
for s in $STEP_SHAPE $HONESTY_SHAPE; do
  [[ $s == 429 || $s == queue ]] || die "STEP_SHAPE and HONESTY_SHAPE are 429 or queue, not '$s'"
done
for s in $SYSTEMS $STEP_SYSTEMS; do
  case "$s" in sluice|nginx|nginx-limit-conn|nginx-max-conns|haproxy) ;;
    *) die "unknown system '$s'" ;; esac
done

# Only the SLUICE_ variables set below apply (an unknown one would stop Sluice).
while read -r v; do unset "$v"; done < <(compgen -e | grep '^SLUICE_' || true)

# ---------------------------------------------------------------- setup

install_missing() {
  local wanted=(haproxy curl python3)
  command -v nginx >/dev/null || [ -x /usr/sbin/nginx ] || wanted+=(nginx-light)
  # gnuplot-nox is only needed for the charts (another gnuplot will do).
  if [ -n "$CHARTS" ] && ! command -v gnuplot >/dev/null; then wanted+=(gnuplot-nox); fi
  install_packages "${wanted[@]}"
}

build_if_missing() {
  if [ -x "$SLUICE" ] && [ -x "$UPSTREAM" ] && [ -x "$LOADGEN" ]; then return 0; fi
  log "building the release preset"
  (cd "$REPO" && cmake --preset release >/dev/null &&
    cmake --build --preset release -j2 --target sluice sluice-upstream sluice_loadgen)
  for b in "$SLUICE" "$UPSTREAM" "$LOADGEN"; do [ -x "$b" ] || die "the build did not produce $b"; done
}

install_missing
build_if_missing
NGINX=$(command -v nginx || echo /usr/sbin/nginx)
HAPROXY=$(command -v haproxy || echo /usr/sbin/haproxy)
[ -x "$NGINX" ] || die "nginx not found"
[ -x "$HAPROXY" ] || die "haproxy not found"

TMP=$(mktemp -d /tmp/sluice-overload.XXXXXX)
mkdir -p "$TMP/runs"
# Run copies: others may rebuild build/release during the benchmark.
SLUICE_BUILT=$(date -u -r "$SLUICE" '+%Y-%m-%d %H:%M UTC')
cp "$SLUICE" "$TMP/sluice"
cp "$UPSTREAM" "$TMP/sluice-upstream"
cp "$LOADGEN" "$TMP/sluice_loadgen"
SLUICE="$TMP/sluice"
UPSTREAM="$TMP/sluice-upstream"
LOADGEN="$TMP/sluice_loadgen"
"$SLUICE" --version >/dev/null || die "$SLUICE --version failed (a build in progress?)"
# Up to a few thousand connections at once (the peers' and the generator's).
if [ "$(ulimit -Sn)" != unlimited ] && [ "$(ulimit -Sn)" -lt 16384 ]; then
  ulimit -Sn "$(ulimit -Hn | awk '{ print ($1 == "unlimited" || $1 > 16384) ? 16384 : $1 }')"
fi

RATE=$(awk -v c="$CAPACITY" -v s="$SERVICE_MS" 'BEGIN { printf "%.4f", c * 1000 / s }')
ROUTES='[{"prefix":"/bulk","lane":"bulk"},{"prefix":"/sse","lane":"heavy"},{"prefix":"/","lane":"standard"}]'
STREAM_PATH="/sse?n=$((STREAM_SECONDS * 10))&interval_ms=100"
STREAM_SLOTS=$(awk -v r="$STREAM_RATE" -v s="$STREAM_SECONDS" 'BEGIN { printf "%.4f", r * s }')
HALF=$((CAPACITY / 2 > 0 ? CAPACITY / 2 : 1))
HALVE_SCHEDULE="$HALVE_PHASE:$HALF,$((2 * HALVE_PHASE)):$CAPACITY"

# ---------------------------------------------------------------- processes

UP_PORT="" UP_PID=""
start_upstream() {  # SHAPE NAME
  local over=(--over-capacity "$1")
  [ "$1" != halve ] || over=(--over-capacity 429 --capacity-schedule "$HALVE_SCHEDULE")
  UP_PORT=$(free_ports 1)
  start_bg "$TMP/runs/$2-upstream.log" "$UPSTREAM" --listen "127.0.0.1:$UP_PORT" \
    --threads "$UPSTREAM_THREADS" --capacity "$CAPACITY" --service-ms "$SERVICE_MS" \
    "${over[@]}"
  UP_PID=$LAST_PID
  wait_http_200 sluice-upstream "$UP_PID" "http://127.0.0.1:$UP_PORT/stats" "$TMP/runs/$2-upstream.log"
}

SYS_PORT="" SYS_PID="" SYS_ADMIN=""
start_system() {  # SYSTEM NAME
  local system=$1 name=$2 ports dir conf
  SYS_ADMIN=""
  case "$system" in
    direct)
      SYS_PORT=$UP_PORT SYS_PID=$UP_PID
      return 0 ;;
    sluice)
      mapfile -t ports < <(free_ports 2)
      start_bg "$TMP/runs/$name-sluice.log" env \
        SLUICE_UPSTREAMS="api=127.0.0.1:$UP_PORT" \
        SLUICE_ROUTES="$ROUTES" \
        SLUICE_LISTEN="127.0.0.1:${ports[0]}" \
        SLUICE_ADMIN_LISTEN="127.0.0.1:${ports[1]}" \
        SLUICE_THREADS="$THREADS" \
        SLUICE_ADMISSION_MODE=enforce \
        SLUICE_ACCESS_LOG="$TMP/runs/$name-access.log" \
        SLUICE_DRAIN_DELAY=0 SLUICE_DRAIN_TIMEOUT=2s \
        "$SLUICE"
      SYS_PORT=${ports[0]} SYS_ADMIN=${ports[1]} SYS_PID=$LAST_PID
      wait_http_200 sluice "$SYS_PID" "http://127.0.0.1:$SYS_ADMIN/readyz" "$TMP/runs/$name-sluice.log"
      return 0 ;;
    nginx|nginx-limit-conn|nginx-max-conns)
      SYS_PORT=$(free_ports 1)
      dir="$TMP/runs/$name-nginx"
      mkdir -p "$dir/logs" "$dir/temp"
      local zone="" limit="" max_conns=""
      if [ "$system" = nginx-limit-conn ]; then
        zone="limit_conn_zone \$server_name zone=perserver:1m;"
        limit="limit_conn perserver $CAPACITY;"
      fi
      [ "$system" = nginx-max-conns ] && max_conns=" max_conns=$CAPACITY"
      cat >"$dir/nginx.conf" <<EOF
worker_processes $THREADS;
pid $dir/nginx.pid;
error_log $dir/logs/error.log warn;
events { worker_connections 16384; }
http {
    access_log off;
    client_body_temp_path $dir/temp/client_body;
    proxy_temp_path $dir/temp/proxy;
    fastcgi_temp_path $dir/temp/fastcgi;
    uwsgi_temp_path $dir/temp/uwsgi;
    scgi_temp_path $dir/temp/scgi;
    $zone
    upstream backend {
        server 127.0.0.1:$UP_PORT$max_conns;
        keepalive 64;
    }
    server {
        listen 127.0.0.1:$SYS_PORT;
        server_name bench;  # limit_conn's key; an empty key is not counted
        $limit
        proxy_http_version 1.1;
        proxy_set_header Connection "";
        location / { proxy_pass http://backend; }
        location /sse { proxy_pass http://backend; proxy_buffering off; }
    }
}
EOF
      start_bg "$TMP/runs/$name-nginx.log" "$NGINX" -c "$dir/nginx.conf" -p "$dir" \
        -e "$dir/logs/error.log" -g 'daemon off;'
      SYS_PID=$LAST_PID
      wait_http_200 nginx "$SYS_PID" "http://127.0.0.1:$SYS_PORT/" "$TMP/runs/$name-nginx.log"
      return 0 ;;
    haproxy)
      SYS_PORT=$(free_ports 1)
      conf="$TMP/runs/$name-haproxy.cfg"
      cat >"$conf" <<EOF
global
    nbthread $THREADS
    maxconn 8192

defaults
    mode http
    option http-keep-alive
    timeout connect 5s
    timeout client 30s
    timeout server 30s
    timeout queue ${QUEUE_MS}ms
    timeout http-request 10s
    timeout http-keep-alive 30s

frontend bench
    bind 127.0.0.1:$SYS_PORT
    default_backend upstream

backend upstream
    server up1 127.0.0.1:$UP_PORT maxconn $CAPACITY
EOF
      start_bg "$TMP/runs/$name-haproxy.log" "$HAPROXY" -f "$conf" -db
      SYS_PID=$LAST_PID
      wait_http_200 haproxy "$SYS_PID" "http://127.0.0.1:$SYS_PORT/" "$TMP/runs/$name-haproxy.log"
      return 0 ;;
  esac
  die "unknown system $system"
}

up_stats() { curl -sf --max-time 2 "http://127.0.0.1:$UP_PORT/stats" || echo '{}'; }

# request_rate LOAD LANE: requests per second of LANE (bulk or standard) at LOAD.
request_rate() {
  awk -v x="$1" -v c="$CAPACITY" -v s="$SERVICE_MS" -v st="$STREAM_SLOTS" -v f="$STANDARD_SHARE" \
    -v lane="$2" 'BEGIN { r = (x * c - st) * 1000 / s; if (r < 0) r = 0
      printf "%.3f", (lane == "standard" ? f : 1 - f) * r }'
}

# classes LOAD STEP_SPEC: the generator's --class arguments at load LOAD (x C/S); STEP_SPEC
# is "" or "T1:X1 T2:X2 ..." (the load changes to Xi at Ti s).
classes() {
  local load=${1%p} arrivals=constant steps=$2 b s st
  [[ $1 == *p ]] && arrivals=poisson
  b=$(request_rate "$load" bulk)
  s=$(request_rate "$load" standard)
  local bsteps="" ssteps=""
  for st in $steps; do
    bsteps+=",step=${st%%:*}:$(request_rate "${st#*:}" bulk)"
    ssteps+=",step=${st%%:*}:$(request_rate "${st#*:}" standard)"
  done
  CLASS_ARGS=(
    --class "name=bulk,path=/bulk/job,rate=$b$bsteps,arrivals=$arrivals,timeout_ms=$TIMEOUT_MS"
    --class "name=standard,path=/api/item,rate=$s$ssteps,arrivals=$arrivals,timeout_ms=$TIMEOUT_MS"
  )
  if [ "$STREAM_SLOTS" != 0.0000 ]; then
    CLASS_ARGS+=(--class "name=heavy,path=$STREAM_PATH,rate=$STREAM_RATE,arrivals=$arrivals,timeout_ms=$TIMEOUT_MS,stream=1")
  fi
}

stop_run() {
  kill -0 "$SYS_PID" 2>/dev/null || die "$1 exited during the run (logs: $TMP/runs; KEEP_TMP=1 keeps them)"
  [ "$SYS_PID" = "$UP_PID" ] || stop_pid "$SYS_PID"
  stop_pid "$UP_PID"
}

# ---------------------------------------------------------------- one measured run

# run_load SHAPE SYSTEM LOAD: one run; appends its rows to results.tsv.
run_load() {
  local shape=$1 system=$2 load=$3 name gen s0 s1 other poller=""
  name="$shape-$system-$load"
  wait_quiet
  start_upstream "$shape" "$name"
  start_system "$system" "$name"
  classes "$load" ""
  cpu_mark
  if [ -n "$SYS_ADMIN" ]; then  # Sluice's K̂, queues and levels through the run (KEEP_TMP=1 keeps them)
    start_bg "$TMP/runs/$name-poll.err" python3 "$HERE/poll_state.py" \
      --url "http://127.0.0.1:$SYS_ADMIN/admin/state" --out "$TMP/runs/$name-state.tsv" \
      --t0 "$(date +%s.%N)" --seconds $((WARMUP + DURATION + 3))
    poller=$LAST_PID
  fi
  start_bg "$TMP/runs/$name-loadgen.err" "$LOADGEN" --target "127.0.0.1:$SYS_PORT" \
    --warmup "$WARMUP" --duration "$DURATION" --seed "$SEED" "${CLASS_ARGS[@]}"
  gen=$LAST_PID
  sleep "$WARMUP"
  s0=$(up_stats)
  sleep "$DURATION"
  s1=$(up_stats)
  other=$(cpu_other_pct)
  wait "$gen" || { cat "$TMP/runs/$name-loadgen.err" >&2; die "sluice_loadgen failed ($name)"; }
  stop_pid "$gen"
  [ -z "$poller" ] || stop_pid "$poller"
  [ -z "$SYS_ADMIN" ] || curl -sf --max-time 2 "http://127.0.0.1:$SYS_ADMIN/metrics" >"$TMP/runs/$name-metrics.txt" || true
  stop_run "$system"
  mv "$TMP/runs/$name-loadgen.err" "$TMP/runs/$name-loadgen.tsv"
  printf '%s\n%s\n' "$s0" "$s1" >"$TMP/runs/$name-stats.json"
  python3 - "$TMP/runs/$name-loadgen.tsv" "$TMP/runs/$name-stats.json" "$shape" "$system" "$load" "$other" \
    >>"$TMP/results.tsv" <<'EOF'
import json, sys
gen, stats, shape, system, load, other = sys.argv[1:]
s0, s1 = [json.loads(l) for l in open(stats).read().split("\n") if l.strip()]
up_req = s1.get("requests", 0) - s0.get("requests", 0)
up_rej = s1.get("rejected", 0) - s0.get("rejected", 0)
rows = [l.rstrip("\n").split("\t") for l in open(gen) if l.strip()]
head = rows[0]
for r in rows[1:]:
    if r[0] not in ("bulk", "standard", "heavy"):
        continue
    print("\t".join([shape, system, load] + r + [str(up_req), str(up_rej), other]))
EOF
  log "$(awk -F'\t' -v n="$name" -v o="$other" -v c="$RATE" -v d="$DURATION" '
    $1 == "bulk" || $1 == "standard" { ok += $3; t += $9 } $1 == "standard" { p99 = $13 }
    END { printf "%-32s goodput %5.1f%% of C/S, standard p99 %7s ms, timeouts %d, other CPU %s%%",
      n, 100 * ok / d / c, p99, t, o }' "$TMP/runs/$name-loadgen.tsv")"
}

# ---------------------------------------------------------------- the step and honesty

run_step() {  # SHAPE SYSTEM
  local shape=$1 system=$2 name gen poller="" t0 other
  name="step-$shape-$system"
  wait_quiet
  start_upstream "$shape" "$name"
  start_system "$system" "$name"
  classes 0.5 "$STEP_BEFORE:2"
  cpu_mark
  t0=$(date +%s.%N)
  if [ -n "$SYS_ADMIN" ]; then
    start_bg "$TMP/runs/$name-poll.err" python3 "$HERE/poll_state.py" \
      --url "http://127.0.0.1:$SYS_ADMIN/admin/state" --out "$TMP/runs/$name-state.tsv" --t0 "$t0" \
      --seconds $((STEP_BEFORE + STEP_AFTER + 3))
    poller=$LAST_PID
  fi
  start_bg "$TMP/runs/$name-loadgen.tsv" "$LOADGEN" --target "127.0.0.1:$SYS_PORT" \
    --warmup 0 --duration $((STEP_BEFORE + STEP_AFTER)) --seed "$SEED" --log "$TMP/runs/$name-log.tsv" \
    "${CLASS_ARGS[@]}"
  gen=$LAST_PID
  wait "$gen" || die "sluice_loadgen failed ($name)"
  stop_pid "$gen"
  other=$(cpu_other_pct)
  [ -z "$poller" ] || stop_pid "$poller"
  stop_run "$system"
  printf '%s\t%s\t%s\n' "$shape" "$system" "$other" >>"$TMP/steps.tsv"
  log "$(printf '%-32s done, other CPU %s%%' "$name" "$other")"
}

# run_halve SYSTEM LOAD: 3 HALVE_PHASE s at LOAD on the upstream whose capacity halves; every
# request logged, Sluice's /admin/state polled. Appends a line to halve.tsv.
run_halve() {
  local system=$1 load=$2 name gen poller="" t0 s0 s1 w0 w1 other
  name="halve-$system-$load"
  wait_quiet
  start_upstream halve "$name"
  start_system "$system" "$name"
  classes "$load" ""
  s0=$(up_stats)  # after nginx's and HAProxy's readiness request, which reached the upstream
  cpu_mark
  t0=$(date +%s.%N)
  if [ -n "$SYS_ADMIN" ]; then
    start_bg "$TMP/runs/$name-poll.err" python3 "$HERE/poll_state.py" \
      --url "http://127.0.0.1:$SYS_ADMIN/admin/state" --out "$TMP/runs/$name-state.tsv" --t0 "$t0" \
      --seconds $((3 * HALVE_PHASE + 3))
    poller=$LAST_PID
  fi
  start_bg "$TMP/runs/$name-loadgen.tsv" "$LOADGEN" --target "127.0.0.1:$SYS_PORT" \
    --warmup 0 --duration $((3 * HALVE_PHASE)) --seed "$SEED" --log "$TMP/runs/$name-log.tsv" \
    "${CLASS_ARGS[@]}"
  gen=$LAST_PID
  wait "$gen" || die "sluice_loadgen failed ($name)"
  stop_pid "$gen"
  other=$(cpu_other_pct)
  # schedule_ms against the wall clock places the upstream's changes on the load's clock.
  w0=$(date +%s.%N)
  s1=$(up_stats)
  w1=$(date +%s.%N)
  [ -z "$poller" ] || stop_pid "$poller"
  stop_run "$system"
  printf '%s\n%s\n' "$s0" "$s1" >"$TMP/runs/$name-stats.json"
  printf '%s\t%s\t%s\t%s\t%s\n' "$system" "$load" "$t0" \
    "$(awk -v a="$w0" -v b="$w1" 'BEGIN { printf "%.6f", (a + b) / 2 }')" "$other" >>"$TMP/halve.tsv"
  log "$(printf '%-32s done, other CPU %s%%' "$name" "$other")"
}

run_honesty() {  # SHAPE
  local shape=$1 name gen other
  name="honesty-$shape-sluice"
  wait_quiet
  start_upstream "$shape" "$name"
  start_system sluice "$name"
  # Overload k (of HONESTY_BURSTS) from 5 + HONESTY_PERIOD (k - 1) s for 10 s, 0.5x around
  # them and to the end of the last one's period: long enough that every client refused in
  # an overload, coming back once on the half of the capacity the 0.5x leaves (about 8,000
  # at 6x: 100 s of it), comes back beside the same load, before the next.
  local k at steps="" stream_steps="" streams rate
  # The streams: HONESTY_STREAM_SECONDS long, as many seats as the other runs' streams.
  rate=$(awk -v r="$STREAM_RATE" -v s="$STREAM_SECONDS" -v h="$HONESTY_STREAM_SECONDS" \
    'BEGIN { printf "%.4f", r * s / h }')
  streams=$(awk -v r="$rate" -v x="$HONESTY_STREAM_STEP" 'BEGIN { printf "%.4f", r * x }')
  for ((k = 0; k < HONESTY_BURSTS; k++)); do
    at=$((5 + HONESTY_PERIOD * k))
    steps+=" $at:$HONESTY_STEP $((at + 10)):0.5"
    stream_steps+="step=$at:$streams,step=$((at + 10)):$rate,"
  done
  classes 0.5 "$steps"
  # The streams step too (HONESTY_STREAM_STEP times as many), so that heavy is refused as
  # well, and their clients wait 5 s for a head: longer than heavy's 2 s queue window, so
  # that Sluice's refusal (with its Retry-After) reaches them before they give up.
  local i
  for i in "${!CLASS_ARGS[@]}"; do
    [[ ${CLASS_ARGS[$i]} == name=heavy,* ]] || continue
    CLASS_ARGS[$i]=${CLASS_ARGS[$i]/rate=$STREAM_RATE,/rate=$rate,$stream_steps}
    CLASS_ARGS[$i]=${CLASS_ARGS[$i]/"path=$STREAM_PATH"/"path=/sse?n=$((HONESTY_STREAM_SECONDS * 10))&interval_ms=100"}
    CLASS_ARGS[$i]=${CLASS_ARGS[$i]/timeout_ms=$TIMEOUT_MS/timeout_ms=5000}
  done
  cpu_mark
  start_bg "$TMP/runs/$name-loadgen.tsv" "$LOADGEN" --target "127.0.0.1:$SYS_PORT" \
    --warmup 0 --duration $((5 + HONESTY_PERIOD * HONESTY_BURSTS)) --seed "$SEED" \
    --obey-retry-after --probe-share "$HONESTY_PROBE_SHARE" \
    --retry-horizon "$HONESTY_HORIZON" --retries "$TMP/runs/$name-retries.tsv" \
    --log "$TMP/runs/$name-log.tsv" "${CLASS_ARGS[@]}"
  gen=$LAST_PID
  wait "$gen" || die "sluice_loadgen failed ($name)"
  stop_pid "$gen"
  other=$(cpu_other_pct)
  stop_run sluice
  printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$shape" "$other" "$HONESTY_STEP" "$HONESTY_BURSTS" "$HONESTY_PERIOD" \
    "$HONESTY_STREAM_SECONDS" >"$TMP/honesty.tsv"
  log "$(printf '%-32s done, other CPU %s%%' "$name" "$other")"
}

# ---------------------------------------------------------------- run

printf 'shape\tsystem\tload\tclass\tsent\tok\tlate_2xx\t503\t504\t429\tother\ttimeouts\terrors\tdropped\tp50_ms\tp99_ms\trefused\trefused_with_retry_after\toffered_rps\tgoodput_rps\tup_requests\tup_rejected\tother_cpu\n' \
  >"$TMP/results.tsv"
: >"$TMP/steps.tsv"
printf 'system\tload\tt0\tstats_at\tother_cpu\n' >"$TMP/halve.tsv"
started=$SECONDS
top_load=$(for l in $LOADS; do echo "${l%p}"; done | sort -g | tail -n1)
top_load_name=$(for l in $LOADS; do [ "${l%p}" = "$top_load" ] && echo "$l"; done | head -n1)
log "C=$CAPACITY, S=${SERVICE_MS}ms: C/S = $RATE requests/s; loads: $LOADS; shapes: $SHAPES (halve: $HALVE_LOADS); temp dir $TMP"
for shape in $SHAPES; do
  if [ "$shape" = halve ]; then
    top_halve=$(for l in $HALVE_LOADS; do echo "${l%p} $l"; done | sort -g | tail -n1 | cut -d' ' -f2)
    run_halve direct "$top_halve"
    for system in $SYSTEMS; do
      for load in $HALVE_LOADS; do run_halve "$system" "$load"; done
    done
    continue
  fi
  if [ "$shape" = 429 ]; then run_load 429 direct "$top_load_name"; fi
  for system in $SYSTEMS; do
    for load in $LOADS; do run_load "$shape" "$system" "$load"; done
  done
done
if [ "$STEP" = 1 ]; then
  for system in $STEP_SYSTEMS; do run_step "$STEP_SHAPE" "$system"; done
fi
if [ "$HONESTY" = 1 ]; then run_honesty "$HONESTY_SHAPE"; fi
log "measured in $((SECONDS - started)) s"

commit=$(git -C "$REPO" rev-parse --short HEAD 2>/dev/null || echo unknown)
cpu=$(lscpu | awk -F: '/^Model name/ && !seen++ {gsub(/^[ \t]+/, "", $2); print $2}')
META="Date: $(date -u '+%Y-%m-%d %H:%M UTC'); CPU: $cpu, $(nproc) CPUs online
Sluice: $("$SLUICE" --version 2>&1 | sed -n 1p) (${BIN_SLUICE:-build/release} built $SLUICE_BUILT; HEAD was $commit), SLUICE_THREADS=$THREADS; $("$NGINX" -v 2>&1 | sed -n 1p); $("$HAPROXY" -v 2>&1 | sed -n 1p)
Upstream: sluice-upstream --capacity $CAPACITY --service-ms $SERVICE_MS (C/S = $RATE requests/s); client timeout $TIMEOUT_MS ms; $DURATION s measured after $WARMUP s per run; standard share $STANDARD_SHARE of the requests; $STREAM_RATE streams/s of ${STREAM_SECONDS} s ($STREAM_SLOTS slots)"
if [[ " $SHAPES " == *" halve "* ]]; then
  META+="
Halve: sluice-upstream --capacity $CAPACITY --over-capacity 429 --capacity-schedule $HALVE_SCHEDULE (from its first request), $((3 * HALVE_PHASE)) s at each of $HALVE_LOADS"
fi
charts_dir=""
[ -z "$CHARTS" ] || charts_dir=$(cd "$REPO" && mkdir -p "$CHARTS" && cd "$CHARTS" && pwd)
python3 "$HERE/analyze.py" --dir "$TMP" --capacity "$CAPACITY" --service-ms "$SERVICE_MS" \
  --rate "$RATE" --duration "$DURATION" --step-at "$STEP_BEFORE" --meta "$META" \
  --halve-phase "$HALVE_PHASE" --stream-seconds "$STREAM_SECONDS" \
  ${charts_dir:+--charts "$charts_dir"}
