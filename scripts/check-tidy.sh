#!/usr/bin/env bash
# clang-tidy (.clang-tidy) over the pure libraries, admission/, routes/, tls/,
# replay/, sim/, hosts/ and config/, with the release build's compile commands; any
# finding fails. proxy/ and the binaries are left out: every one of their files
# compiles Beast, which would take clang-tidy minutes a file on this machine.
set -euo pipefail
cd "$(dirname "$0")/.."
db=build/release/compile_commands.json
[ -f "$db" ] || { echo "tidy: no $db (build the release preset first)" >&2; exit 1; }
mapfile -t files < <(git ls-files 'admission/*.cpp' 'routes/*.cpp' 'replay/*.cpp' 'sim/*.cpp' 'config/*.cpp' 'tls/*.cpp' 'hosts/*.cpp')
if ! printf '%s\n' "${files[@]}" | xargs -P "$(nproc)" -n 1 clang-tidy -p build/release --quiet \
    >/tmp/sluice-tidy.$$ 2>&1; then
  grep -E 'warning:|error:' /tmp/sluice-tidy.$$ | sort -u >&2
  rm -f /tmp/sluice-tidy.$$
  echo "tidy: findings above" >&2
  exit 1
fi
rm -f /tmp/sluice-tidy.$$
echo "tidy: ${#files[@]} files, no finding"
