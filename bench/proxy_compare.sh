#!/usr/bin/env bash
# Throughput benchmark: Sluice against nginx and HAProxy in front of one sluice-upstream.
#
# Usage:
#   bench/proxy_compare.sh                      # 1 proxy thread/worker (the default)
#   bench/proxy_compare.sh --threads 2          # 2 threads/workers
#   bench/proxy_compare.sh --all                # 1, then 2
#   bench/proxy_compare.sh --idle-connections [N]   # Sluice RSS with N idle keep-alive clients (default 10000)
#
# Environment: ROUNDS (default 5), DURATION in seconds per wrk run (default 5),
# CONNECTIONS (wrk -c, default 50), WARMUP seconds per system before the rounds
# (default 1, 0 skips), BIN_SLUICE (another Sluice binary, to compare builds),
# UPSTREAM_THREADS (default 2), KEEP_TMP=1 keeps the temp
# dir (configs, logs, raw wrk output, results.tsv). IDLE_BATCH (default 100):
# connections opened at once by --idle-connections; their first requests run
# concurrently, so it also bounds how many upstream connections Sluice pools.
#
# The machine may be shared (someone compiling). Before each run the script waits
# up to QUIET_WAIT seconds (default 120) for the other CPU use on the machine to
# drop to QUIET_MAX percent of all CPUs (default 10), and a run during which other
# processes used more than QUIET_MAX percent is repeated up to RETRIES times
# (default 2); the "other CPU %" column shows what remained. QUIET_MAX=100 turns
# both off.
#
# What it does, per thread count N: starts one sluice-upstream, and in front of it
# Sluice (SLUICE_THREADS=N, access log to a file), Sluice again with the access log
# off, nginx (worker_processes N) and HAProxy (nbthread N), each as a foreground
# process of this script with its own config in a temp dir, each on its own free
# 127.0.0.1 port. Then ROUNDS rounds; each round runs
#   wrk -t1 -cCONNECTIONS -dDURATIONs --latency http://127.0.0.1:PORT/
# against every system in a rotated order (A B C D, B C D A, ...), reading the
# proxy's utime+stime from /proc/PID/stat (nginx: master and workers) before and
# after the run. CPU per request = CPU time / requests wrk completed.
# It prints medians per system, the Sluice/nginx and Sluice/HAProxy ratios, and a
# markdown fragment for docs/benchmarks.md.
#
# nginx, haproxy and wrk are installed with apt-get when missing (dpkg-query
# decides); they are never started through systemd or init scripts. Only the
# processes this script started are stopped, by pid, when it exits.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
LIB="$REPO/bench/lib"
SLUICE="${BIN_SLUICE:-$REPO/build/release/app/sluice}"
UPSTREAM="$REPO/build/release/upstream/sluice-upstream"

ROUNDS=${ROUNDS:-5}
DURATION=${DURATION:-5}
CONNECTIONS=${CONNECTIONS:-50}
WARMUP=${WARMUP:-1}
UPSTREAM_THREADS=${UPSTREAM_THREADS:-2}
KEEP_TMP=${KEEP_TMP:-0}
QUIET_MAX=${QUIET_MAX:-10}
QUIET_WAIT=${QUIET_WAIT:-120}
RETRIES=${RETRIES:-2}
IDLE_BATCH=${IDLE_BATCH:-100}

SYSTEMS=(sluice sluice-nolog nginx haproxy)

usage() { sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "${BASH_SOURCE[0]}"; }
log() { printf 'proxy_compare: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

# ---------------------------------------------------------------- arguments

command_line="bench/proxy_compare.sh${*:+ $*}"
threads_list=(1)
mode=compare
idle_n=10000
while [ "$#" -gt 0 ]; do
  case "$1" in
    --threads)
      [[ ${2:-} =~ ^[1-9][0-9]*$ ]] || die "--threads needs a positive number"
      threads_list=("$2"); shift 2 ;;
    --threads=*)
      threads_list=("${1#--threads=}")
      [[ ${threads_list[0]} =~ ^[1-9][0-9]*$ ]] || die "--threads needs a positive number"
      shift ;;
    --all) threads_list=(1 2); shift ;;
    --idle-connections)
      mode=idle
      if [[ ${2:-} =~ ^[0-9]+$ ]]; then idle_n=$2; shift; fi
      shift ;;
    --idle-connections=*) mode=idle; idle_n=${1#--idle-connections=}; shift ;;
    -h|--help) usage; exit 0 ;;
    *) usage >&2; die "unknown argument: $1" ;;
  esac
done
for v in ROUNDS DURATION CONNECTIONS WARMUP UPSTREAM_THREADS IDLE_BATCH QUIET_MAX QUIET_WAIT RETRIES; do
  [[ ${!v} =~ ^[0-9]+$ ]] || die "$v must be a whole number, not '${!v}'"
done
[[ $idle_n =~ ^[1-9][0-9]*$ ]] || die "--idle-connections needs a positive number"
if [ "$ROUNDS" -lt 1 ] || [ "$DURATION" -lt 1 ]; then die "ROUNDS and DURATION must be at least 1"; fi

# A SLUICE_ variable from the caller's environment would change what is measured
# (and an unknown one stops Sluice); only the ones set below apply.
while read -r v; do unset "$v"; done < <(compgen -e | grep '^SLUICE_' || true)

# ---------------------------------------------------------------- processes

# shellcheck source=bench/lib/common.sh
. "$(dirname "$0")/lib/common.sh"

CLK_TCK=$(getconf CLK_TCK)

# ---------------------------------------------------------------- setup

build_if_missing() {
  if [ -x "$SLUICE" ] && [ -x "$UPSTREAM" ]; then return 0; fi
  log "building the release preset"
  (cd "$REPO" && cmake --preset release >/dev/null && cmake --build --preset release -j2)
  if [ ! -x "$SLUICE" ] || [ ! -x "$UPSTREAM" ]; then die "build did not produce $SLUICE and $UPSTREAM"; fi
}

install_packages nginx haproxy wrk curl python3
build_if_missing
NGINX=$(command -v nginx || echo /usr/sbin/nginx)
HAPROXY=$(command -v haproxy || echo /usr/sbin/haproxy)
[ -x "$NGINX" ] || die "nginx not found"
[ -x "$HAPROXY" ] || die "haproxy not found"
command -v wrk >/dev/null || die "wrk not found"

TMP=$(mktemp -d /tmp/sluice-bench.XXXXXX)
cd "$TMP"  # nothing is written outside the temp dir

# Run copies, so that a rebuild in the work tree during the benchmark (others may
# be compiling) neither changes the binaries between thread counts nor breaks them.
SLUICE_BUILT=$(date -u -r "$SLUICE" '+%Y-%m-%d %H:%M UTC')
cp "$SLUICE" "$TMP/sluice"
cp "$UPSTREAM" "$TMP/sluice-upstream"
SLUICE="$TMP/sluice"
UPSTREAM="$TMP/sluice-upstream"
"$SLUICE" --version >/dev/null || die "$SLUICE --version failed (a build in progress?)"

UP_PORT=""
UP_PID=""
start_upstream() {
  UP_PORT=$(free_ports 1)
  start_bg "$TMP/upstream.log" "$UPSTREAM" --listen "127.0.0.1:$UP_PORT" --threads "$UPSTREAM_THREADS"
  UP_PID=$LAST_PID
  wait_http_200 sluice-upstream "$LAST_PID" "http://127.0.0.1:$UP_PORT/" "$TMP/upstream.log"
}

# ---------------------------------------------------------------- proxies

declare -A PORT PID ADMIN
start_sluice() {  # NAME THREADS ACCESS_LOG [extra VAR=VALUE...]
  local name=$1 threads=$2 access_log=$3 ports
  shift 3
  mapfile -t ports < <(free_ports 2)
  start_bg "$TMP/$name-t$threads.log" env \
    SLUICE_UPSTREAMS="127.0.0.1:$UP_PORT" \
    SLUICE_LISTEN="127.0.0.1:${ports[0]}" \
    SLUICE_ADMIN_LISTEN="127.0.0.1:${ports[1]}" \
    SLUICE_THREADS="$threads" \
    SLUICE_ACCESS_LOG="$access_log" \
    SLUICE_DRAIN_DELAY=0 SLUICE_DRAIN_TIMEOUT=2s \
    "$@" "$SLUICE"
  PORT[$name]=${ports[0]}
  ADMIN[$name]=${ports[1]}
  PID[$name]=$LAST_PID
  wait_http_200 "$name" "$LAST_PID" "http://127.0.0.1:${ports[0]}/" "$TMP/$name-t$threads.log"
}

start_nginx() {  # THREADS
  local threads=$1 port dir="$TMP/nginx-$1"
  port=$(free_ports 1)
  mkdir -p "$dir/logs" "$dir/temp"
  cat >"$dir/nginx.conf" <<EOF
worker_processes $threads;
pid $dir/nginx.pid;
error_log $dir/logs/error.log warn;
events {
    worker_connections 4096;
}
http {
    access_log off;
    client_body_temp_path $dir/temp/client_body;
    proxy_temp_path $dir/temp/proxy;
    fastcgi_temp_path $dir/temp/fastcgi;
    uwsgi_temp_path $dir/temp/uwsgi;
    scgi_temp_path $dir/temp/scgi;
    upstream backend {
        server 127.0.0.1:$UP_PORT;
        keepalive 64;
    }
    server {
        listen 127.0.0.1:$port;
        location / {
            proxy_pass http://backend;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
        }
    }
}
EOF
  start_bg "$TMP/nginx-t$threads.log" "$NGINX" -c "$dir/nginx.conf" -p "$dir" -e "$dir/logs/error.log" \
    -g 'daemon off;'
  PORT[nginx]=$port
  PID[nginx]=$LAST_PID
  wait_http_200 nginx "$LAST_PID" "http://127.0.0.1:$port/" "$TMP/nginx-t$threads.log"
}

start_haproxy() {  # THREADS
  local threads=$1 port conf="$TMP/haproxy-$1.cfg"
  port=$(free_ports 1)
  cat >"$conf" <<EOF
global
    nbthread $threads
    maxconn 4096

defaults
    mode http
    option http-keep-alive
    timeout connect 5s
    timeout client 30s
    timeout server 30s
    timeout http-request 10s
    timeout http-keep-alive 30s

frontend bench
    bind 127.0.0.1:$port
    default_backend upstream

backend upstream
    server up1 127.0.0.1:$UP_PORT
EOF
  start_bg "$TMP/haproxy-t$threads.log" "$HAPROXY" -f "$conf" -db
  PORT[haproxy]=$port
  PID[haproxy]=$LAST_PID
  wait_http_200 haproxy "$LAST_PID" "http://127.0.0.1:$port/" "$TMP/haproxy-t$threads.log"
}

# ---------------------------------------------------------------- one wrk run

# to_ms VALUE: wrk prints latencies as 512.00us, 1.58ms, 1.02s, 1.00m.
to_ms() {
  awk -v v="$1" 'BEGIN {
    n = v + 0; u = v; sub(/^[0-9.]+/, "", u)
    if (u == "us") n /= 1000; else if (u == "s") n *= 1000; else if (u == "m") n *= 60000
    else if (u != "ms") { print "nan"; exit }
    printf "%.3f\n", n }'
}


# measure SYSTEM THREADS ROUND: one recorded run, repeated when disturbed.
measure() {
  local attempt rc
  for ((attempt = 0; ; attempt++)); do
    wait_quiet
    rc=0
    run_wrk "$1" "$2" "$3" "$DURATION" 1 "$attempt" || rc=$?
    [ "$rc" = 3 ] || return "$rc"
  done
}

# run_wrk SYSTEM THREADS ROUND SECONDS RECORD(0|1) [ATTEMPT]
# Returns 3, recording nothing, when the run was disturbed and may be repeated.
run_wrk() {
  local system=$1 threads=$2 round=$3 seconds=$4 record=$5 attempt=${6:-0}
  local pid=${PID[$system]} port=${PORT[$system]} out before after
  local requests rps p50 p99 non2xx sockerr cpu_us other_pct
  local up_before up_after self_before self_after m_before m_after
  out="$TMP/wrk-$threads-$system-$round.txt"
  m_before=$(machine_ticks)
  self_before=$(waited_ticks)
  up_before=$(proc_ticks "$UP_PID")
  before=$(tree_ticks "$pid")
  wrk -t1 -c"$CONNECTIONS" -d"${seconds}s" --latency "http://127.0.0.1:$port/" >"$out" 2>&1 \
    || { cat "$out" >&2; die "wrk failed against $system"; }
  after=$(tree_ticks "$pid")
  up_after=$(proc_ticks "$UP_PID")
  self_after=$(waited_ticks)
  m_after=$(machine_ticks)
  kill -0 "$pid" 2>/dev/null || die "$system exited during the run (its log is under $TMP)"
  [ "$record" = 1 ] || return 0

  requests=$(awk '/ requests in /{print $1; exit}' "$out")
  rps=$(awk '/^Requests\/sec:/{print $2; exit}' "$out")
  p50=$(to_ms "$(awk '$1 == "50%" {print $2; exit}' "$out")")
  p99=$(to_ms "$(awk '$1 == "99%" {print $2; exit}' "$out")")
  non2xx=$(awk '/Non-2xx or 3xx responses:/{print $NF; exit}' "$out")
  sockerr=$(awk '/Socket errors:/{gsub(/,/, ""); print $4 + $6 + $8 + $10; exit}' "$out")
  non2xx=${non2xx:-0}
  sockerr=${sockerr:-0}
  if ! [[ ${requests:-} =~ ^[1-9][0-9]*$ ]]; then cat "$out" >&2; die "no requests parsed from wrk"; fi
  cpu_us=$(awk -v t=$((after - before)) -v hz="$CLK_TCK" -v n="$requests" \
    'BEGIN { printf "%.2f\n", t * 1e6 / hz / n }')
  # CPU used on the machine during the run by anything but the proxy, the upstream
  # and wrk (other people's builds, say), as a percentage of all CPUs: a noise gauge.
  other_pct=$(awk -v mb="$m_before" -v ma="$m_after" \
    -v ours=$(((after - before) + (up_after - up_before) + (self_after - self_before))) \
    'BEGIN { split(mb, b, " "); split(ma, a, " "); total = a[2] - b[2]; busy = a[1] - b[1]
             o = total > 0 ? 100 * (busy - ours) / total : 0; printf "%.1f\n", (o < 0 ? 0 : o) }')
  if [ "$attempt" -lt "$RETRIES" ] && awk -v o="$other_pct" -v m="$QUIET_MAX" 'BEGIN { exit !(o > m) }'; then
    log "$(printf 'threads=%s round=%s %-13s %9.0f req/s, other CPU %.0f%%: disturbed, repeating' \
      "$threads" "$round" "$system" "$rps" "$other_pct")"
    return 3
  fi
  if [ "$non2xx" != 0 ] || [ "$sockerr" != 0 ]; then
    log "WARNING: $system round $round: $non2xx non-2xx/3xx responses, $sockerr socket errors"
    grep -E 'Non-2xx|Socket errors' "$out" | sed 's/^/    /' >&2
  fi
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$threads" "$system" "$round" "$rps" "$p50" \
    "$p99" "$cpu_us" "$requests" "$non2xx" "$sockerr" "$other_pct" >>"$TMP/results.tsv"
  log "$(printf 'threads=%s round=%s %-13s %9.0f req/s  p50 %6.2f ms  p99 %6.2f ms  %5.1f us CPU/req  other CPU %4.1f%%' \
    "$threads" "$round" "$system" "$rps" "$p50" "$p99" "$cpu_us" "$other_pct")"
}

# ---------------------------------------------------------------- metadata

metadata() {
  local cpu nginx_v haproxy_v wrk_v commit
  cpu=$(lscpu | awk -F: '/^Model name/ && !seen++ {gsub(/^[ \t]+/, "", $2); print $2}')
  nginx_v=$("$NGINX" -v 2>&1 | sed -n 1p || true)
  haproxy_v=$("$HAPROXY" -v 2>&1 | sed -n 1p || true)
  wrk_v=$(wrk --version 2>&1 | sed -n 1p || true)
  commit=$(git -C "$REPO" rev-parse --short HEAD 2>/dev/null || echo unknown)
  M_DATE=$(date -u '+%Y-%m-%d %H:%M UTC')
  M_CPU="$cpu, $(nproc) CPUs online, Linux $(uname -r)"
  M_SLUICE="$("$SLUICE" --version 2>&1 | sed -n 1p || true) (${BIN_SLUICE:-build/release/app/sluice} built $SLUICE_BUILT; HEAD was $commit)"
  META=(
    "Command=\`ROUNDS=$ROUNDS DURATION=$DURATION $command_line\`"
    "Date=$M_DATE"
    "CPU=$M_CPU"
    "Load=wrk -t1 -c$CONNECTIONS -d${DURATION}s --latency, GET / (3-byte body), keep-alive; one sluice-upstream with $UPSTREAM_THREADS threads behind every proxy"
    "Versions=Sluice: $M_SLUICE; $nginx_v; $haproxy_v; $wrk_v"
  )
}

# ---------------------------------------------------------------- modes

compare() {
  local threads round i j n=${#SYSTEMS[@]} system
  printf 'threads\tsystem\tround\trps\tp50_ms\tp99_ms\tcpu_us_per_req\trequests\tnon2xx\tsocket_errors\tother_cpu_pct\n' \
    >"$TMP/results.tsv"
  start_upstream
  for threads in "${threads_list[@]}"; do
    log "threads=$threads: starting the proxies (upstream on 127.0.0.1:$UP_PORT)"
    start_sluice sluice "$threads" "$TMP/sluice-access-$threads.log"
    start_sluice sluice-nolog "$threads" off
    start_nginx "$threads"
    start_haproxy "$threads"
    if [ "$WARMUP" -gt 0 ]; then
      for system in "${SYSTEMS[@]}"; do run_wrk "$system" "$threads" warmup "$WARMUP" 0; done
    fi
    for ((round = 1; round <= ROUNDS; round++)); do
      for ((j = 0; j < n; j++)); do
        i=$(((round - 1 + j) % n))
        measure "${SYSTEMS[$i]}" "$threads" "$round"
      done
    done
    log "threads=$threads: Sluice access log: $(wc -l <"$TMP/sluice-access-$threads.log") lines"
    for system in "${SYSTEMS[@]}"; do stop_pid "${PID[$system]}"; done
  done
  metadata
  local args=() m
  for m in "${META[@]}"; do args+=(--meta "$m"); done
  python3 "$LIB/summarize.py" "$TMP/results.tsv" --noise "$QUIET_MAX" "${args[@]}"
}

rss_kib() { awk '/^VmRSS:/{print $2}' "/proc/$1/status"; }

# gauge ADMIN_PORT NAME: the sum of a Prometheus gauge over its labels.
gauge() {
  curl -s --max-time 5 "http://127.0.0.1:$1/metrics" \
    | awk -v n="$2" '$1 == n || index($1, n "{") == 1 { s += $NF; f = 1 } END { print f ? s : "?" }'
}

idle() {
  local n=$idle_n need hard pid port before after ready result i
  need=$((n + 1024))
  hard=$(ulimit -Hn)
  if [ "$hard" != unlimited ] && [ "$hard" -lt "$need" ]; then
    die "the hard open-files limit ($hard) is below $need; raise it (e.g. /etc/security/limits.conf) or use a smaller N"
  fi
  if [ "$(ulimit -Sn)" != unlimited ] && [ "$(ulimit -Sn)" -lt "$need" ]; then ulimit -Sn "$need"; fi

  start_upstream
  start_sluice sluice 1 "$TMP/sluice-access-idle.log" \
    SLUICE_IDLE_TIMEOUT=10m SLUICE_MAX_CONNECTIONS=$((n + 1000))
  pid=${PID[sluice]}
  port=${PORT[sluice]}
  # a few requests first, so the baseline includes a warmed-up upstream pool
  for ((i = 0; i < 20; i++)); do curl -s -o /dev/null "http://127.0.0.1:$port/"; done
  sleep 1
  before=$(rss_kib "$pid")
  log "Sluice RSS before: $before KiB; opening $n idle connections"

  ready="$TMP/idle.ready"
  start_bg "$TMP/idle_clients.out" python3 "$LIB/idle_clients.py" --port "$port" --count "$n" \
    --batch "$IDLE_BATCH" --ready-file "$ready" --done-file "$TMP/idle.done" --hold 900
  local client=$LAST_PID
  while [ ! -e "$ready" ]; do
    kill -0 "$client" 2>/dev/null || { cat "$TMP/idle_clients.out" >&2; die "idle_clients.py exited early"; }
    sleep 0.2
  done
  sleep 2  # let Sluice settle after the last batch
  after=$(rss_kib "$pid")
  local clients upstreams
  clients=$(gauge "${ADMIN[sluice]}" sluice_client_connections)
  upstreams=$(gauge "${ADMIN[sluice]}" sluice_upstream_connections)
  touch "$TMP/idle.done"
  wait "$client" || true
  stop_pid "$client"
  result=$(tail -n1 "$TMP/idle_clients.out")
  grep '^idle_clients:' "$TMP/idle_clients.out" | sed 's/^/    /' >&2 || true
  local opened failed alive
  read -r opened failed alive <<<"$result"
  kill -0 "$pid" 2>/dev/null || die "Sluice exited during the idle-connection run"
  [[ ${opened:-} =~ ^[1-9][0-9]*$ ]] || die "no idle connection could be opened (see above)"

  metadata
  local per
  per=$(awk -v a="$after" -v b="$before" -v n="$opened" 'BEGIN { printf "%.1f", (a - b) / n }')
  echo
  echo "Sluice (1 thread) with $opened idle kept-alive client connections ($failed failed, $alive still open at the end)"
  echo "  Sluice's gauges at the measurement: sluice_client_connections $clients, sluice_upstream_connections $upstreams"
  printf '  RSS before:      %8d KiB\n' "$before"
  printf '  RSS after:       %8d KiB\n' "$after"
  printf '  per connection:  %8s KiB\n' "$per"
  echo
  echo "----- markdown -----"
  echo
  echo "- Command: \`$command_line\`"
  echo "- Date: $M_DATE"
  echo "- CPU: $M_CPU"
  echo "- Sluice: $M_SLUICE"
  echo
  echo "| Idle keep-alive connections | opened / failed / still open | client / upstream connections (Sluice gauges) | RSS before | RSS after | (after - before) / opened |"
  echo "|---:|---:|---:|---:|---:|---:|"
  echo "| $n | $opened / $failed / $alive | $clients / $upstreams | $before KiB | $after KiB | $per KiB |"
}

if [ "$mode" = idle ]; then idle; else compare; fi
