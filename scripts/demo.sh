#!/usr/bin/env bash
# Sets up, builds and runs the demo: the demo upstream and Sluice in front of
# it, on loopback. Prints the requests to try; Ctrl-C stops both.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
# Only the two binaries the demo runs, not the tests and fuzz replayers that
# scripts/build.sh builds too.
echo "demo: building sluice and sluice-upstream in build/release" >&2
cmake --preset release >/dev/null
cmake --build --preset release -j "$(nproc)" --target sluice sluice-upstream >/dev/null
bin=build/release

port="${DEMO_PORT:-8080}"
admin="${DEMO_ADMIN_PORT:-9901}"
upstream_port="${DEMO_UPSTREAM_PORT:-9000}"

"$bin/upstream/sluice-upstream" --listen "127.0.0.1:$upstream_port" &
upstream_pid=$!
SLUICE_UPSTREAMS="api=127.0.0.1:$upstream_port" \
SLUICE_LISTEN="127.0.0.1:$port" \
SLUICE_ADMIN_LISTEN="127.0.0.1:$admin" \
SLUICE_ROUTES='[{"name":"events","prefix":"/sse","lane":"heavy"},{"name":"uploads","prefix":"/echo","lane":"bulk"},{"name":"api","prefix":"/","lane":"standard"}]' \
SLUICE_ACCESS_LOG="${DEMO_ACCESS_LOG:-stdout}" \
  "$bin/app/sluice" &
sluice_pid=$!
trap 'kill "$sluice_pid" "$upstream_pid" 2>/dev/null; wait 2>/dev/null' EXIT INT TERM

for _ in $(seq 50); do
  curl -fs "http://127.0.0.1:$admin/readyz" >/dev/null 2>&1 && break
  sleep 0.1
done

cat <<MSG

Sluice is listening on 127.0.0.1:$port in front of the demo upstream (127.0.0.1:$upstream_port).
Try, in another terminal:

  curl -i http://127.0.0.1:$port/hello                                  # a plain request
  curl -N http://127.0.0.1:$port/sse?n=5\&interval_ms=500                # an SSE stream, event by event
  curl -i -X POST --data-binary 'some bytes' http://127.0.0.1:$port/echo # a body, both ways
  curl -i http://127.0.0.1:$port/slow?ms=300                            # a slow upstream
  curl -s http://127.0.0.1:$admin/metrics | grep ^sluice_                  # the metrics
  curl -i http://127.0.0.1:$admin/readyz                                   # readiness

A shed request: pin the admission level to critical for a minute, then send bulk work.

  curl -s -X POST -d '{"level":2,"ttl":"1m","reason":"demo"}' http://127.0.0.1:$admin/admin/pins
  curl -i -X POST --data-binary 'x' http://127.0.0.1:$port/echo             # bulk lane: 503 with Retry-After
  curl -i http://127.0.0.1:$port/hello                                  # standard lane: still admitted
  curl -s http://127.0.0.1:$admin/admin/state                              # level, pin, lanes
  curl -s -X DELETE http://127.0.0.1:$admin/admin/pins                     # unpin; the level decays on its own

Access log lines appear below. Ctrl-C stops the demo.

MSG
wait "$sluice_pid"
