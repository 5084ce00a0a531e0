#!/usr/bin/env bash
# The fleet sharing each upstream's capacity through Redis, measured through
# the real binaries (docs/benchmarks.md#a-fleet-sharing-capacity):
#   N Sluice instances (2 I/O threads each) and one redis-server on loopback,
#   in front of an upstream of C slots x SERVICE_MS that answers 429 above C;
#   one open-loop sluice_loadgen per instance (Poisson arrivals, LOAD x the
#   upstream's capacity in all, spread evenly as a round-robin balancer would).
#   Once settled (SETTLE s), PHASE s counted at the upstream: goodput against
#   its capacity and its 429s against what it was sent; with sharing on and
#   with SLUICE_FLEET_CAPACITY=off. With sharing on, then: Redis frozen
#   (SIGSTOP) for PHASE s, the same figures; Redis back, the time until every
#   instance holds the fleet's share again; one instance killed (SIGKILL), the
#   time until every other sees it gone (its share back to them).
# Usage: bench/fleet.sh
# Environment: INSTANCES (default "3 8"), CAPACITIES (default "2 32"),
# SERVICE_MS (50), LOAD (2), SETTLE (3), PHASE (5), KEEP_TMP=1 keeps the logs.
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
KEEP_TMP=${KEEP_TMP:-0}
log() { echo "fleet: $*" >&2; }
die() { log "$*"; exit 1; }
usage() { sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; }
# shellcheck source=bench/lib/common.sh
source "$REPO/bench/lib/common.sh"
no_arguments "$@"
install_packages python3 redis-server
for b in app/sluice upstream/sluice-upstream bench/sluice_loadgen; do
  [ -x "$REPO/build/release/$b" ] || die "build first: ./scripts/build.sh release"
done
TMP=$(mktemp -d /tmp/sluice-fleet.XXXXXX)
export TMP
python3 "$REPO/bench/fleet.py"
