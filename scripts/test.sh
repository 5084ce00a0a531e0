#!/usr/bin/env bash
# Sets up, builds and runs every test: the format and clang-tidy checks, the operations
# files' validators, then unit tests and end-to-end tests that start the real binaries on
# loopback.
# Then the sanitizer and fuzzing jobs, each in its own build folder:
#   asan   the whole suite with ASan+UBSan (build/asan): the unit tests and the fuzz
#          targets' replayers built so, and the end-to-end and corpus tests (built
#          once, in build/release) against the sluice built so
#   tsan   the concurrency tests (ctest label "concurrency") against a sluice built
#          with TSan (build/tsan)
#   fuzz   each libFuzzer target for SLUICE_FUZZ_SECONDS (default 20) from its
#          seeds and regressions (build/fuzz, clang)
# SLUICE_TEST_JOBS picks among "release asan tsan fuzz" (default: all four).
# Any sanitizer report, in a test or in a process a test started, fails the run.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=" ${SLUICE_TEST_JOBS:-release asan tsan fuzz} "
cores="$(nproc)"

# Each step's time, for CI's log: "test: <step>: <seconds> s".
timed() {
  local name="$1" start=$SECONDS
  shift
  "$@"
  echo "test: $name: $((SECONDS - start)) s"
}

timed setup ./scripts/setup.sh

if [[ $jobs == *" release "* ]]; then
  timed format ./scripts/check-format.sh
  timed "release build" ./scripts/build.sh release
  timed tidy ./scripts/check-tidy.sh
  timed ops ./scripts/check-ops.sh
  timed "release tests" ctest --preset release -j "$cores" --timeout 180 --output-on-failure
fi

# Runs ctest for a preset with every sanitizer report written under
# <report folder> (the children of end-to-end tests print their stderr to files a
# test may never show); fails on a failed test or on any report.
sanitized_ctest() {
  local preset="$1" dir
  dir="$(pwd)/$2"
  shift 2
  rm -rf "$dir"
  mkdir -p "$dir"
  local status=0
  ASAN_OPTIONS="halt_on_error=1:detect_leaks=1:log_path=$dir/asan" \
    UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1:log_path=$dir/ubsan" \
    TSAN_OPTIONS="halt_on_error=1:exitcode=66:second_deadlock_stack=1:log_path=$dir/tsan" \
    ctest --preset "$preset" "$@" || status=$?
  if compgen -G "$dir/*" >/dev/null; then
    for report in "$dir"/*; do
      echo "== $report"
      cat "$report"
    done
    echo "test: $preset: sanitizer reports above ($dir)" >&2
    return 1
  fi
  if [ "$status" -ne 0 ]; then
    echo "test: $preset: tests failed" >&2
    return "$status"
  fi
}

# The end-to-end and corpus tests of the release build, against the sluice of
# build/<folder> (what the asan and tsan jobs run; ctest's arguments follow).
sanitized_e2e() {
  local folder="$1"
  shift
  cmake --preset release >/dev/null
  cmake --build --preset release -j "$cores" --target sluice_e2e_tests sluice-upstream
  TEST_SLUICE_BIN="$(pwd)/build/$folder/app/sluice" TEST_SLUICE_SANITIZED=1 \
    sanitized_ctest release "build/$folder/reports-e2e" -j "$cores" --output-on-failure "$@"
}

if [[ $jobs == *" asan "* ]]; then
  cmake --preset asan-ubsan >/dev/null
  timed "asan build" cmake --build --preset asan-ubsan -j "$cores" \
    --target sluice sluice_unit_tests fuzzers
  timed "asan tests" sanitized_ctest asan-ubsan build/asan/reports -j "$cores" --timeout 300 \
    --output-on-failure
  timed "asan e2e tests" sanitized_e2e asan -R '^(e2e|corpus):'
fi

if [[ $jobs == *" tsan "* ]]; then
  cmake --preset tsan >/dev/null
  timed "tsan build" cmake --build --preset tsan -j "$cores" --target sluice
  timed "tsan tests" sanitized_e2e tsan -L concurrency
fi

if [[ $jobs == *" fuzz "* ]]; then
  cmake --preset fuzz >/dev/null
  timed "fuzz build" cmake --build --preset fuzz -j "$cores"
  timed fuzz ./fuzz/run.sh
fi
