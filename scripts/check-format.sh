#!/usr/bin/env bash
# Fails when a C++ file in the repository differs from what clang-format
# (.clang-format) makes of it; `scripts/check-format.sh --fix` rewrites them.
set -euo pipefail
cd "$(dirname "$0")/.."
mapfile -t files < <(git ls-files '*.cpp' '*.hpp' '*.h')
if [ "${1:-}" = --fix ]; then
  clang-format -i "${files[@]}"
  exit 0
fi
if ! clang-format --dry-run --Werror "${files[@]}" 2>/tmp/sluice-format.$$; then
  grep -o '^[^:]*' /tmp/sluice-format.$$ | sort -u | sed 's/^/format: differs: /' >&2
  rm -f /tmp/sluice-format.$$
  echo "format: run scripts/check-format.sh --fix" >&2
  exit 1
fi
rm -f /tmp/sluice-format.$$
echo "format: ${#files[@]} files as clang-format writes them"
