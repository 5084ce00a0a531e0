#!/usr/bin/env bash
# Runs each libFuzzer target of build/fuzz (the fuzz preset) for a bounded time,
# as many at once as there are cores. Each starts from its seeds (fuzz/seeds/,
# and llhttp's request cases for request_head), its regressions
# (fuzz/regressions/) and the corpus earlier runs grew (build/fuzz/corpus/).
# A crash, a sanitizer report or a broken property fails the run and leaves its
# input in build/fuzz/crashes/<target>/: fix it, and keep the input under
# fuzz/regressions/<target>/ so every build replays it.
# usage: fuzz/run.sh [TARGET...]   (default: every target)
#   SLUICE_FUZZ_SECONDS  time per target (default 20)
#   SLUICE_CORPORA       the HTTP corpora llhttp's cases come from (default:
#                        tests/corpus/data, the copy in the repository)
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${SLUICE_FUZZ_SECONDS:-20}"
corpora="${SLUICE_CORPORA:-tests/corpus/data}"
out=build/fuzz
targets=("$@")
if [ "${#targets[@]}" -eq 0 ]; then
  for f in fuzz/*.cpp; do  # one file per target (fuzz/CMakeLists.txt), and the replayer
    t=$(basename "$f" .cpp)
    [ "$t" = regress_main ] || targets+=("$t")
  done
fi

if [[ " ${targets[*]} " == *" request_head "* ]]; then
  python3 fuzz/llhttp_seeds.py "$corpora" "$out/seeds/request_head"
fi

run() {
  local t="$1" max_len=4096
  local dirs=("$out/corpus/$t" "fuzz/seeds/$t")
  for d in "fuzz/regressions/$t" "$out/seeds/$t"; do
    if [ -d "$d" ]; then dirs+=("$d"); fi
  done
  # A head (and so a path) may be as long as SLUICE_MAX_HEADER_BYTES' default.
  case "$t" in request_head | response_head | route_match) max_len=16384 ;; esac
  mkdir -p "$out/corpus/$t" "$out/crashes/$t"
  UBSAN_OPTIONS=print_stacktrace=1 "$out/fuzz/fuzz_$t" -max_total_time="$seconds" -timeout=10 \
    -max_len="$max_len" -artifact_prefix="$out/crashes/$t/" -print_final_stats=1 "${dirs[@]}" \
    >"$out/$t.log" 2>&1
}

running=0
for t in "${targets[@]}"; do
  rm -f "$out/$t.status"
  (if run "$t"; then echo ok; else echo failed; fi >"$out/$t.status") &
  running=$((running + 1))
  if [ "$running" -ge "$(nproc)" ]; then
    wait -n
    running=$((running - 1))
  fi
done
wait

failed=0
for t in "${targets[@]}"; do
  runs="$(sed -n 's/^stat::number_of_executed_units: *//p' "$out/$t.log")"
  cov="$(grep -o 'cov: [0-9]*' "$out/$t.log" | tail -n 1 || true)"
  if [ "$(cat "$out/$t.status")" = ok ]; then
    echo "fuzz: $t: ${runs:-?} runs in ${seconds}s, $cov, no crash"
  else
    failed=1
    tail -n 60 "$out/$t.log"
    echo "fuzz: $t FAILED: input in $out/crashes/$t/ (log: $out/$t.log)" >&2
  fi
done
exit "$failed"
