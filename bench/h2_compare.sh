#!/usr/bin/env bash
# HTTP/2 cost: Sluice against nginx and HAProxy speaking h2 over TLS to clients
# (ALPN), with the same certificate, in front of one sluice-upstream (plain
# HTTP/1.1 behind each of them).
#
# Usage:
#   bench/h2_compare.sh
#
# The load: h2load -t1 -c10 -m10 (100 streams at once over 10 connections),
# small responses (GET /, "ok"), DURATION seconds.
# CPU per request is the proxy's utime+stime from /proc (nginx: master and
# workers) over the requests completed. One thread / worker each, TLS 1.3,
# ROUNDS rounds in rotated order; medians, and Sluice's requests per second
# and CPU per request each as a ratio to the better peer's.
#
# Environment: ROUNDS (3), DURATION (5 s), QUIET_MAX (10 %) and QUIET_WAIT
# (120 s): before each run, wait for other CPU use on the machine to drop under
# QUIET_MAX; KEEP_TMP=1 keeps the temp dir. nginx, haproxy, nghttp2-client and
# openssl are installed with apt-get when missing. Only the processes this
# script started are stopped, by pid.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
SLUICE="$REPO/build/release/app/sluice"
UPSTREAM="$REPO/build/release/upstream/sluice-upstream"
ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-5}
KEEP_TMP=${KEEP_TMP:-0}
QUIET_MAX=${QUIET_MAX:-10}
QUIET_WAIT=${QUIET_WAIT:-120}

log() { printf 'h2_compare: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

if [ "$#" -gt 0 ]; then
  case "$1" in
    -h | --help) sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0"; exit 0 ;;
    *) die "unknown argument: $1" ;;
  esac
fi
for v in ROUNDS DURATION QUIET_MAX QUIET_WAIT; do
  [[ ${!v} =~ ^[0-9]+$ ]] || die "$v must be a whole number, not '${!v}'"
done
while read -r v; do unset "$v"; done < <(compgen -e | grep '^SLUICE_' || true)

# shellcheck source=bench/lib/common.sh
. "$(dirname "$0")/lib/common.sh"
CLK_TCK=$(getconf CLK_TCK)

install_packages nginx haproxy nghttp2-client curl openssl python3
if [ ! -x "$SLUICE" ] || [ ! -x "$UPSTREAM" ]; then
  (cd "$REPO" && cmake --preset release >/dev/null && cmake --build --preset release -j2)
fi
NGINX=$(command -v nginx || echo /usr/sbin/nginx)
HAPROXY=$(command -v haproxy || echo /usr/sbin/haproxy)

TMP=$(mktemp -d /tmp/sluice-h2.XXXXXX)
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

openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj /CN=bench.test \
  -addext subjectAltName=DNS:bench.test,IP:127.0.0.1 -keyout cert.key -out cert.crt 2>/dev/null
cat cert.crt cert.key >cert.pem

declare -A PORT PID
mapfile -t ports < <(free_ports 5)
start_bg "$TMP/sluice.log" env SLUICE_UPSTREAMS="127.0.0.1:$UP_PORT" \
  SLUICE_LISTEN="127.0.0.1:${ports[0]}" SLUICE_ADMIN_LISTEN="127.0.0.1:${ports[1]}" \
  SLUICE_TLS_LISTEN="127.0.0.1:${ports[2]}" SLUICE_TLS_CERT="$TMP/cert.crt" \
  SLUICE_TLS_KEY="$TMP/cert.key" SLUICE_THREADS=1 SLUICE_ACCESS_LOG=off \
  SLUICE_DRAIN_DELAY=0 SLUICE_DRAIN_TIMEOUT=2s "$SLUICE"
PID[sluice]=$LAST_PID
PORT[sluice]=${ports[2]}
mkdir -p "$TMP/nginx/logs" "$TMP/nginx/temp"
cat >"$TMP/nginx/nginx.conf" <<EOF
worker_processes 1;
pid $TMP/nginx/nginx.pid;
error_log $TMP/nginx/logs/error.log warn;
events { worker_connections 4096; }
http {
    access_log off;
    client_body_temp_path $TMP/nginx/temp/client_body;
    proxy_temp_path $TMP/nginx/temp/proxy;
    fastcgi_temp_path $TMP/nginx/temp/fastcgi;
    uwsgi_temp_path $TMP/nginx/temp/uwsgi;
    scgi_temp_path $TMP/nginx/temp/scgi;
    upstream backend { server 127.0.0.1:$UP_PORT; keepalive 128; }
    server {
        listen 127.0.0.1:${ports[3]} ssl http2;
        ssl_certificate $TMP/cert.crt;
        ssl_certificate_key $TMP/cert.key;
        ssl_protocols TLSv1.2 TLSv1.3;
        http2_max_concurrent_streams 128;
        keepalive_requests 1000000;  # (its default, 1000, ends each connection after 1000 streams)
        location / {
            proxy_pass http://backend;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
        }
    }
}
EOF
start_bg "$TMP/nginx.log" "$NGINX" -c "$TMP/nginx/nginx.conf" -p "$TMP/nginx" \
  -e "$TMP/nginx/logs/error.log" -g 'daemon off;'
PID[nginx]=$LAST_PID
PORT[nginx]=${ports[3]}
cat >"$TMP/haproxy.cfg" <<EOF
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
    bind 127.0.0.1:${ports[4]} ssl crt $TMP/cert.pem alpn h2,http/1.1
    default_backend upstream
backend upstream
    http-reuse always
    server up1 127.0.0.1:$UP_PORT
EOF
start_bg "$TMP/haproxy.log" "$HAPROXY" -f "$TMP/haproxy.cfg" -db
PID[haproxy]=$LAST_PID
PORT[haproxy]=${ports[4]}
for s in sluice nginx haproxy; do
  wait_http_200 "$s" "${PID[$s]}" "https://127.0.0.1:${PORT[$s]}/" "$TMP/$s.log" -k
  proto=$(curl -sk --http2 -o /dev/null -w '%{http_version}' "https://127.0.0.1:${PORT[$s]}/")
  [ "$proto" = 2 ] || die "$s does not answer over HTTP/2 (got HTTP/$proto)"
done

# run SYSTEM ROUND: one measured run, a line in results.tsv.
run() {
  local system=$1 round=$2 pid port out before after ubefore uafter requests rps cpu_us user_us other
  pid=${PID[$system]}
  port=${PORT[$system]}
  out="$TMP/$system-$round.txt"
  wait_quiet
  cpu_mark
  before=$(tree_ticks "$pid")
  ubefore=$(tree_ticks "$pid" user)
  h2load -t1 -c10 -m10 -D "$DURATION" "https://127.0.0.1:$port/" >"$out" 2>&1 ||
    { cat "$out" >&2; die "h2load failed against $system"; }
  after=$(tree_ticks "$pid")
  uafter=$(tree_ticks "$pid" user)
  other=$(cpu_other_pct)
  grep -q 'Application protocol: h2' "$out" || die "h2load did not speak h2 to $system"
  requests=$(awk '/^requests:/ { print $8; exit }' "$out")
  rps=$(awk '/^finished in/ { print $4; exit }' "$out" | tr -d ,)
  [[ ${requests:-} =~ ^[1-9][0-9]*$ ]] || { cat "$out" >&2; die "nothing succeeded against $system"; }
  cpu_us=$(awk -v t=$((after - before)) -v hz="$CLK_TCK" -v n="$requests" \
    'BEGIN { printf "%.2f\n", t * 1e6 / hz / n }')
  user_us=$(awk -v t=$((uafter - ubefore)) -v hz="$CLK_TCK" -v n="$requests" \
    'BEGIN { printf "%.2f\n", t * 1e6 / hz / n }')
  printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$system" "$round" "$rps" "$cpu_us" "$user_us" "$other" \
    >>"$TMP/results.tsv"
  log "$(printf '%-7s round %s: %9.0f req/s  %7.1f us CPU each (%.1f user)  other CPU %s%%' \
    "$system" "$round" "$rps" "$cpu_us" "$user_us" "$other")"
}

printf 'system\tround\treq_s\tcpu_us\tuser_us\tother_cpu_pct\n' >"$TMP/results.tsv"
systems=(sluice nginx haproxy)
for s in "${systems[@]}"; do run "$s" warmup >/dev/null 2>&1 || true; done
sed -i '/\twarmup\t/d' "$TMP/results.tsv"
for ((round = 1; round <= ROUNDS; round++)); do
  for ((j = 0; j < 3; j++)); do run "${systems[$(((round - 1 + j) % 3))]}" "$round"; done
done
for s in "${systems[@]}"; do stop_pid "${PID[$s]}"; done

commit=$(git -C "$REPO" rev-parse --short HEAD 2>/dev/null || echo unknown)
echo
echo "- Command: \`ROUNDS=$ROUNDS DURATION=$DURATION bench/h2_compare.sh\`"
echo "- Date: $(date -u '+%Y-%m-%d %H:%M UTC'); CPU: $(nproc) CPUs; Sluice built $SLUICE_BUILT (HEAD $commit)"
echo "- $("$NGINX" -v 2>&1 | sed -n 1p); $("$HAPROXY" -v 2>&1 | sed -n 1p); $(openssl version); $(h2load --version | sed -n 1p)"
echo
python3 - "$TMP/results.tsv" <<'EOF'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1]), delimiter="\t"))
med = {}
for s in ("sluice", "nginx", "haproxy"):
    sel = [r for r in rows if r["system"] == s]
    med[s] = (statistics.median(float(r["req_s"]) for r in sel),
              statistics.median(float(r["cpu_us"]) for r in sel),
              statistics.median(float(r["user_us"]) for r in sel),
              max(float(r["other_cpu_pct"]) for r in sel))
best_rps = max(med["nginx"][0], med["haproxy"][0])
best_cpu = min(med["nginx"][1], med["haproxy"][1])
print("| system | requests/s | better peer's / this | CPU us per request | this / better peer's | of it, user space | other CPU % |")
print("|---|---:|---:|---:|---:|---:|---:|")
for s, (rps, cpu, user, other) in med.items():
    r1 = f"{best_rps / rps:.2f}x" if s == "sluice" else ""
    r2 = f"{cpu / best_cpu:.2f}x" if s == "sluice" else ""
    print(f"| {s} | {rps:.0f} | {r1} | {cpu:.1f} | {r2} | {user:.1f} | {other:.1f} |")
EOF
