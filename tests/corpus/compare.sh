#!/usr/bin/env bash
# The corpus suite against Sluice, HAProxy and nginx, on the same runner.
#
# Usage: tests/corpus/compare.sh [--mode request|response|both] [--corpora DIR]
#
# Runs tests/corpus/corpus.py once per proxy (Sluice from build/release, built
# when missing; haproxy and nginx from Debian's packages, installed with apt-get
# when missing, never through systemd), each as a child process of the runner
# with its own config on free 127.0.0.1 ports, stopped by pid. Prints per proxy
# and mode: agreement with the corpora, forwarded ambiguities, desyncs, then a
# markdown table for docs/security.md. Per-case output goes to
# $OUT (default: a temp dir, printed at the end).
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
SLUICE="$REPO/build/release/app/sluice"
args=("$@")

log() { printf 'compare: %s\n' "$*" >&2; }

missing=()
for p in haproxy nginx-light python3-yaml; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ] && ! { command -v nginx && command -v haproxy && python3 -c 'import yaml'; } >/dev/null 2>&1; then
  log "installing ${missing[*]}"
  sudo=(); [ "$(id -u)" -eq 0 ] || sudo=(sudo)
  "${sudo[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
if [ ! -x "$SLUICE" ]; then
  log "building the release preset"
  (cd "$REPO" && cmake --preset release >/dev/null && cmake --build --preset release -j2)
fi

OUT=${OUT:-$(mktemp -d /tmp/sluice-corpus-compare.XXXXXX)}
mkdir -p "$OUT"
for proxy in sluice haproxy nginx; do
  extra=()
  [ "$proxy" = sluice ] && extra=(--sluice "$SLUICE")
  log "running $proxy"
  python3 "$REPO/tests/corpus/corpus.py" --proxy "$proxy" "${extra[@]}" --no-review --corpora-only \
    --json "$OUT/$proxy.json" ${args[@]+"${args[@]}"} >"$OUT/$proxy.txt" 2>&1 || true
  grep '^==' "$OUT/$proxy.txt" || { cat "$OUT/$proxy.txt" >&2; exit 1; }
done

echo
echo "| proxy | mode | cases | agreement | forwarded ambiguities | desyncs |"
echo "|---|---|---|---|---|---|"
for proxy in sluice haproxy nginx; do
  sed -n 's/^== \([a-z]*\) \([a-z]*\): \([0-9]*\) cases in [0-9.]*s; agreement \([0-9/]* ([0-9.]*%)\); forwarded ambiguities \([0-9]*\); desyncs \([0-9]*\)$/| \1 | \2 | \3 | \4 | \5 | \6 |/p' \
    "$OUT/$proxy.txt"
done
echo
log "per-case output in $OUT"
