#!/usr/bin/env bash
# TLS cost: Sluice against nginx and HAProxy terminating HTTPS in front of one
# sluice-upstream (plain HTTP behind them), with the same certificate.
#
# Usage:
#   bench/tls_compare.sh              # ECDSA P-256, then RSA 2048
#   bench/tls_compare.sh ecdsa        # one key type (ecdsa | rsa)
#
# Per key type and system, three loads over https://:
#   full       full handshakes: two `openssl s_time -new -www /` at once, each a
#              new connection, a handshake that resumes nothing and one GET, one
#              after the other
#   resumed    wrk -t1 -c10 -H 'Connection: close': a new connection per request,
#              each resuming the session of the one before (wrk keeps it)
#   keepalive  wrk -t1 -cCONNECTIONS: kept-alive connections, the cost of TLS
#              per request
# CPU per request (or handshake) is the proxy's utime+stime from /proc (nginx:
# master and workers) over the requests (or connections) completed. One thread /
# worker each, TLS 1.3 (what the clients and servers agree on), ROUNDS rounds in
# rotated order; medians, and each cost as a ratio to the better peer's.
#
# Environment: ROUNDS (3), DURATION (5 s per wrk run), CONNECTIONS (50, the
# keep-alive load), QUIET_MAX (10 %) and QUIET_WAIT (120 s): before each run, wait
# for other CPU use on the machine to drop under QUIET_MAX; KEEP_TMP=1 keeps the
# temp dir. nginx, haproxy, wrk and openssl are installed with apt-get when
# missing. Only the processes this script started are stopped, by pid.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
SLUICE="$REPO/build/release/app/sluice"
UPSTREAM="$REPO/build/release/upstream/sluice-upstream"
ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-5}
CONNECTIONS=${CONNECTIONS:-50}
KEEP_TMP=${KEEP_TMP:-0}
QUIET_MAX=${QUIET_MAX:-10}
QUIET_WAIT=${QUIET_WAIT:-120}

log() { printf 'tls_compare: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

kinds=(ecdsa rsa)
if [ "$#" -gt 0 ]; then
  case "$1" in
    ecdsa | rsa) kinds=("$1") ;;
    -h | --help) sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0"; exit 0 ;;
    *) die "unknown argument: $1 (ecdsa or rsa)" ;;
  esac
fi
for v in ROUNDS DURATION CONNECTIONS QUIET_MAX QUIET_WAIT; do
  [[ ${!v} =~ ^[0-9]+$ ]] || die "$v must be a whole number, not '${!v}'"
done
while read -r v; do unset "$v"; done < <(compgen -e | grep '^SLUICE_' || true)

# shellcheck source=bench/lib/common.sh
. "$(dirname "$0")/lib/common.sh"
CLK_TCK=$(getconf CLK_TCK)

install_packages nginx haproxy wrk curl openssl python3
if [ ! -x "$SLUICE" ] || [ ! -x "$UPSTREAM" ]; then
  (cd "$REPO" && cmake --preset release >/dev/null && cmake --build --preset release -j2)
fi
NGINX=$(command -v nginx || echo /usr/sbin/nginx)
HAPROXY=$(command -v haproxy || echo /usr/sbin/haproxy)

TMP=$(mktemp -d /tmp/sluice-tls.XXXXXX)
cd "$TMP"
SLUICE_BUILT=$(date -u -r "$SLUICE" '+%Y-%m-%d %H:%M UTC')
cp "$SLUICE" "$TMP/sluice"
cp "$UPSTREAM" "$TMP/sluice-upstream"
SLUICE="$TMP/sluice"
UPSTREAM="$TMP/sluice-upstream"

UP_PORT=$(free_ports 1)
start_bg "$TMP/upstream.log" "$UPSTREAM" --listen "127.0.0.1:$UP_PORT" --threads 2
UP_PID=$LAST_PID
wait_http_200 sluice-upstream "$UP_PID" "http://127.0.0.1:$UP_PORT/" "$TMP/upstream.log"

make_cert() {  # KIND: writes KIND.crt, KIND.key and KIND.pem (both, for HAProxy)
  local key=(-newkey ec -pkeyopt ec_paramgen_curve:P-256)
  [ "$1" = rsa ] && key=(-newkey rsa:2048)
  openssl req -x509 "${key[@]}" -nodes -days 2 -subj /CN=bench.test \
    -addext subjectAltName=DNS:bench.test,IP:127.0.0.1 -keyout "$1.key" -out "$1.crt" 2>/dev/null
  cat "$1.crt" "$1.key" >"$1.pem"
}

declare -A PORT PID
start_all() {  # KIND
  local kind=$1 ports
  mapfile -t ports < <(free_ports 5)
  start_bg "$TMP/sluice-$kind.log" env SLUICE_UPSTREAMS="127.0.0.1:$UP_PORT" \
    SLUICE_LISTEN="127.0.0.1:${ports[0]}" SLUICE_ADMIN_LISTEN="127.0.0.1:${ports[1]}" \
    SLUICE_TLS_LISTEN="127.0.0.1:${ports[2]}" SLUICE_TLS_CERT="$TMP/$kind.crt" \
    SLUICE_TLS_KEY="$TMP/$kind.key" SLUICE_THREADS=1 SLUICE_ACCESS_LOG=off \
    SLUICE_DRAIN_DELAY=0 SLUICE_DRAIN_TIMEOUT=2s "$SLUICE"
  PID[sluice]=$LAST_PID
  PORT[sluice]=${ports[2]}
  local dir="$TMP/nginx-$kind"
  mkdir -p "$dir/logs" "$dir/temp"
  cat >"$dir/nginx.conf" <<EOF
worker_processes 1;
pid $dir/nginx.pid;
error_log $dir/logs/error.log warn;
events { worker_connections 4096; }
http {
    access_log off;
    client_body_temp_path $dir/temp/client_body;
    proxy_temp_path $dir/temp/proxy;
    fastcgi_temp_path $dir/temp/fastcgi;
    uwsgi_temp_path $dir/temp/uwsgi;
    scgi_temp_path $dir/temp/scgi;
    upstream backend { server 127.0.0.1:$UP_PORT; keepalive 64; }
    server {
        listen 127.0.0.1:${ports[3]} ssl;
        ssl_certificate $TMP/$kind.crt;
        ssl_certificate_key $TMP/$kind.key;
        ssl_protocols TLSv1.2 TLSv1.3;
        location / {
            proxy_pass http://backend;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
        }
    }
}
EOF
  start_bg "$TMP/nginx-$kind.log" "$NGINX" -c "$dir/nginx.conf" -p "$dir" -e "$dir/logs/error.log" \
    -g 'daemon off;'
  PID[nginx]=$LAST_PID
  PORT[nginx]=${ports[3]}
  cat >"$TMP/haproxy-$kind.cfg" <<EOF
global
    nbthread 1
    maxconn 4096
    ssl-default-bind-options ssl-min-ver TLSv1.2
defaults
    mode http
    option http-keep-alive
    timeout connect 5s
    timeout client 30s
    timeout server 30s
    timeout http-request 10s
    timeout http-keep-alive 30s
frontend bench
    bind 127.0.0.1:${ports[4]} ssl crt $TMP/$kind.pem
    default_backend upstream
backend upstream
    server up1 127.0.0.1:$UP_PORT
EOF
  start_bg "$TMP/haproxy-$kind.log" "$HAPROXY" -f "$TMP/haproxy-$kind.cfg" -db
  PID[haproxy]=$LAST_PID
  PORT[haproxy]=${ports[4]}
  local s
  for s in sluice nginx haproxy; do
    wait_http_200 "$s" "${PID[$s]}" "https://127.0.0.1:${PORT[$s]}/" "$TMP/$s-$kind.log" -k
  done
}

# run KIND LOAD SYSTEM ROUND: one measured run, a line in results.tsv.
run() {
  local kind=$1 load=$2 system=$3 round=$4 pid port out before after requests rps cpu_us other
  pid=${PID[$system]}
  port=${PORT[$system]}
  out="$TMP/$kind-$load-$system-$round.txt"
  wait_quiet
  cpu_mark
  before=$(tree_ticks "$pid")
  if [ "$load" = full ]; then
    local a b
    openssl s_time -connect "127.0.0.1:$port" -new -time "$DURATION" -www / >"$out.1" 2>&1 &
    a=$!
    openssl s_time -connect "127.0.0.1:$port" -new -time "$DURATION" -www / >"$out.2" 2>&1 &
    b=$!
    wait "$a" "$b" || die "openssl s_time failed against $system: $(cat "$out.1" "$out.2")"
    requests=$(cat "$out.1" "$out.2" | awk '/connections in .* real seconds/ { n += $1 } END { print n + 0 }')
    rps=$(awk -v n="$requests" -v d="$DURATION" 'BEGIN { printf "%.1f", n / d }')
  else
    local args=(-t1 -c"$CONNECTIONS" -d"${DURATION}s")
    [ "$load" = resumed ] && args=(-t1 -c10 -d"${DURATION}s" -H 'Connection: close')
    wrk "${args[@]}" "https://127.0.0.1:$port/" >"$out" 2>&1 || { cat "$out" >&2; die "wrk failed"; }
    requests=$(awk '/ requests in /{print $1; exit}' "$out")
    rps=$(awk '/^Requests\/sec:/{print $2; exit}' "$out")
  fi
  after=$(tree_ticks "$pid")
  other=$(cpu_other_pct)
  [[ ${requests:-} =~ ^[1-9][0-9]*$ ]] || { cat "$out"* >&2; die "nothing completed against $system"; }
  cpu_us=$(awk -v t=$((after - before)) -v hz="$CLK_TCK" -v n="$requests" \
    'BEGIN { printf "%.2f\n", t * 1e6 / hz / n }')
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$kind" "$load" "$system" "$round" "$rps" "$cpu_us" "$other" \
    >>"$TMP/results.tsv"
  log "$(printf '%-5s %-9s %-7s round %s: %9.0f /s  %7.1f us CPU each  other CPU %s%%' \
    "$kind" "$load" "$system" "$round" "$rps" "$cpu_us" "$other")"
}

printf 'kind\tload\tsystem\tround\tper_s\tcpu_us\tother_cpu_pct\n' >"$TMP/results.tsv"
systems=(sluice nginx haproxy)
for kind in "${kinds[@]}"; do
  make_cert "$kind"
  start_all "$kind"
  for load in full resumed keepalive; do
    for s in "${systems[@]}"; do run "$kind" "$load" "$s" warmup >/dev/null 2>&1 || true; done
    sed -i '/\twarmup\t/d' "$TMP/results.tsv"
    for ((round = 1; round <= ROUNDS; round++)); do
      for ((j = 0; j < 3; j++)); do run "$kind" "$load" "${systems[$(((round - 1 + j) % 3))]}" "$round"; done
    done
  done
  for s in "${systems[@]}"; do stop_pid "${PID[$s]}"; done
done

commit=$(git -C "$REPO" rev-parse --short HEAD 2>/dev/null || echo unknown)
echo
echo "- Command: \`ROUNDS=$ROUNDS DURATION=$DURATION bench/tls_compare.sh${*:+ $*}\`"
echo "- Date: $(date -u '+%Y-%m-%d %H:%M UTC'); CPU: $(nproc) CPUs; Sluice built $SLUICE_BUILT (HEAD $commit)"
echo "- $("$NGINX" -v 2>&1 | sed -n 1p); $("$HAPROXY" -v 2>&1 | sed -n 1p); $(openssl version)"
echo
python3 - "$TMP/results.tsv" <<'EOF'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1]), delimiter="\t"))
order = {"full": 0, "resumed": 1, "keepalive": 2}
keys = sorted({(r["kind"], r["load"]) for r in rows}, key=lambda k: (k[0] != "ecdsa", order[k[1]]))
print("| key | load | system | per second | CPU us each | cost / better peer's | other CPU % |")
print("|---|---|---|---:|---:|---:|---:|")
for kind, load in keys:
    med = {}
    for s in ("sluice", "nginx", "haproxy"):
        sel = [r for r in rows if (r["kind"], r["load"], r["system"]) == (kind, load, s)]
        med[s] = (statistics.median(float(r["per_s"]) for r in sel),
                  statistics.median(float(r["cpu_us"]) for r in sel),
                  max(float(r["other_cpu_pct"]) for r in sel))
    best = min(med["nginx"][1], med["haproxy"][1])
    label = {"full": "full handshake", "resumed": "resumed handshake",
             "keepalive": "keep-alive request"}[load]
    for s, (per, cpu, other) in med.items():
        ratio = f"{cpu / best:.2f}x" if s == "sluice" else ""
        print(f"| {kind} | {label} | {s} | {per:.0f} | {cpu:.1f} | {ratio} | {other:.1f} |")
EOF
