# What the bench scripts share: the checks of their knobs, the processes they
# start and their clean-up (only pids a script started are stopped), free
# ports, and waiting for a quiet machine. Sourced after the script defines log(), KEEP_TMP, QUIET_MAX and
# QUIET_WAIT.
# shellcheck shell=bash

# The scripts take no argument but -h / --help (usage() is the script's).
no_arguments() {
  case "${1:-}" in
    "") ;;
    -h|--help) usage; exit 0 ;;
    *) usage >&2; die "unknown argument: $1" ;;
  esac
}

# The knobs named, by the script's die(): whole numbers, at least 1, decimals.
need_whole() {
  local v
  for v; do [[ ${!v} =~ ^[0-9]+$ ]] || die "$v must be a whole number, not '${!v}'"; done
}
need_positive() {
  local v
  for v; do [ "${!v}" -ge 1 ] || die "$v must be at least 1"; done
}
need_decimal() {
  local v
  for v; do [[ ${!v} =~ ^[0-9]*\.?[0-9]+$ ]] || die "$v must be a number, not '${!v}'"; done
}

PIDS=()
TMP=""
cleanup() {
  local pid
  for pid in ${PIDS[@]+"${PIDS[@]}"}; do stop_pid "$pid"; done
  if [ -n "$TMP" ]; then
    if [ "$KEEP_TMP" = 1 ]; then log "kept $TMP"; else rm -rf "$TMP"; fi
  fi
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# stop_pid PID: SIGTERM, up to 5 s to exit, then SIGKILL. Only pids this script started.
stop_pid() {
  local pid=$1 i keep=()
  if kill -0 "$pid" 2>/dev/null; then
    kill "$pid" 2>/dev/null || true
    for ((i = 0; i < 50; i++)); do
      kill -0 "$pid" 2>/dev/null || break
      # a child that has exited stays a zombie until waited for; wait reaps it
      if [ "$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null)" = Z ]; then break; fi
      sleep 0.1
    done
    kill -0 "$pid" 2>/dev/null && [ "$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null)" != Z ] \
      && { kill -KILL "$pid" 2>/dev/null || true; }
  fi
  wait "$pid" 2>/dev/null || true
  for i in ${PIDS[@]+"${PIDS[@]}"}; do [ "$i" = "$pid" ] || keep+=("$i"); done
  PIDS=(${keep[@]+"${keep[@]}"})
}

# start_bg LOGFILE CMD...: runs CMD in the background; its pid is in LAST_PID.
LAST_PID=""
start_bg() {
  local logfile=$1; shift
  "$@" >"$logfile" 2>&1 </dev/null &
  LAST_PID=$!
  PIDS+=("$LAST_PID")
}

# free_ports N: N distinct free 127.0.0.1 ports, one a line.
free_ports() {
  python3 - "$1" <<'EOF'
import socket, sys
socks = []
for _ in range(int(sys.argv[1])):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    socks.append(s)
for s in socks:
    print(s.getsockname()[1])
EOF
}

# machine_ticks: "busy total" jiffies of all CPUs from /proc/stat (idle and iowait are not busy).
machine_ticks() {
  # cpu  user nice system idle iowait irq softirq steal ...
  awk '$1 == "cpu" { print $2 + $3 + $4 + $7 + $8 + $9, $2 + $3 + $4 + $5 + $6 + $7 + $8 + $9 }' /proc/stat
}

# wait_quiet: until the machine's busy CPU over one second is at most QUIET_MAX
# percent (the proxies and the upstream are idle between runs), or QUIET_WAIT seconds.
wait_quiet() {
  local start=$SECONDS a b pct logged=0
  [ "$QUIET_MAX" -lt 100 ] || return 0
  while :; do
    a=$(machine_ticks)
    sleep 1
    b=$(machine_ticks)
    pct=$(awk -v a="$a" -v b="$b" 'BEGIN { split(a, x, " "); split(b, y, " ")
      t = y[2] - x[2]; printf "%d\n", (t > 0 ? 100 * (y[1] - x[1]) / t : 0) }')
    [ "$pct" -gt "$QUIET_MAX" ] || return 0
    if [ $((SECONDS - start)) -ge "$QUIET_WAIT" ]; then
      log "the machine is still ${pct}% busy after ${QUIET_WAIT}s; running anyway"
      return 0
    fi
    if [ "$logged" = 0 ]; then log "the machine is ${pct}% busy with other work; waiting"; logged=1; fi
  done
}

# wait_http_200 NAME PID URL LOGFILE: until URL answers 200, or die with the process's log
# (needs die()).
wait_http_200() {  # NAME PID URL LOGFILE [CURL_OPTION...]
  local name=$1 pid=$2 url=$3 logfile=$4 i code=""
  shift 4
  for ((i = 0; i < 100; i++)); do
    if ! kill -0 "$pid" 2>/dev/null; then
      sed 's/^/    /' "$logfile" >&2 || true
      die "$name exited during start-up"
    fi
    code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 1 "$@" "$url" || true)
    if [ "$code" = 200 ]; then return 0; fi
    sleep 0.1
  done
  sed 's/^/    /' "$logfile" >&2 || true
  die "$name did not answer 200 on $url (last status '$code')"
}

# CPU accounting of a measured window: cpu_mark at its start, cpu_other_pct at its end gives
# the CPU that processes this script did not start used meanwhile, in percent of all CPUs.
proc_ticks() {  # PID [user]: utime+stime (utime alone with "user") in clock ticks, 0 when gone
  local line rest f
  { line=$(<"/proc/$1/stat"); } 2>/dev/null || { echo 0; return; }
  rest=${line##*) }          # the command name may hold spaces and parentheses
  read -r -a f <<<"$rest"    # f[0] is field 3 (state): utime is field 14, stime 15
  if [ "${2:-}" = user ]; then echo $((f[11])); else echo $((f[11] + f[12])); fi
}
tree_ticks() {  # PID [user]: the process plus its direct children (nginx master and workers)
  local total child
  total=$(proc_ticks "$1" "${2:-}")
  for child in $(pgrep -P "$1" || true); do total=$((total + $(proc_ticks "$child" "${2:-}"))); done
  echo "$total"
}
waited_ticks() {  # cutime+cstime of this shell: its reaped children
  local line rest f
  line=$(<"/proc/$$/stat")
  rest=${line##*) }
  read -r -a f <<<"$rest"    # cutime is field 16, cstime 17
  echo $((f[13] + f[14]))
}
ours_ticks() {  # the live processes this script started (and their children), plus the reaped ones
  local total pid
  total=$(waited_ticks)
  for pid in ${PIDS[@]+"${PIDS[@]}"}; do total=$((total + $(tree_ticks "$pid"))); done
  echo "$total"
}
CPU_MARK=""
cpu_mark() { CPU_MARK="$(machine_ticks) $(ours_ticks)"; }
cpu_other_pct() {
  local now
  now="$(machine_ticks) $(ours_ticks)"
  awk -v a="$CPU_MARK" -v b="$now" 'BEGIN { split(a, x, " "); split(b, y, " ")
    t = y[2] - x[2]; o = (y[1] - x[1]) - (y[3] - x[3]); if (o < 0) o = 0
    printf "%.1f\n", (t > 0 ? 100 * o / t : 0) }'
}

# install_packages PKG...: installs with apt-get the Debian packages not installed yet
# (dpkg-query decides); nothing when all are there.
install_packages() {
  local missing=() p sudo=()
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
  done
  [ "${#missing[@]}" -eq 0 ] && return 0
  log "installing ${missing[*]}"
  if [ "$(id -u)" -ne 0 ]; then sudo=(sudo); fi
  "${sudo[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends \
    "${missing[@]}" >/dev/null
}
