# What the bench scripts share: the processes they start and their clean-up
# (only pids a script started are stopped), free ports, and waiting for a quiet
# machine. Sourced after the script defines log(), KEEP_TMP, QUIET_MAX and
# QUIET_WAIT.
# shellcheck shell=bash

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
