#!/usr/bin/env bash
# Sets up, builds and runs every test: the operations files' validators, then
# unit tests and end-to-end tests that start the real binaries on loopback.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
./scripts/build.sh release
./scripts/check-ops.sh
ctest --preset release -j "$(nproc)" --timeout 180
