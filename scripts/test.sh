#!/usr/bin/env bash
# Sets up, builds and runs every test: the format and clang-tidy checks, the operations
# files' validators, then unit tests and end-to-end tests that start the real binaries on
# loopback.
# Then the sanitizer and fuzzing jobs, each in its own build folder:
#   asan   the whole suite built with ASan+UBSan (build/asan)
#   tsan   the concurrency tests (ctest label "concurrency") built with TSan (build/tsan)
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

# Runs ctest for a sanitizer preset with every report written under
# <build folder>/reports (the children of end-to-end tests print their stderr to
# files a test may never show); fails on a failed test or on any report.
sanitized_ctest() {
  local preset="$1" dir
  dir="$(pwd)/$2/reports"
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

if [[ $jobs == *" asan "* ]]; then
  cmake --preset asan-ubsan >/dev/null
  timed "asan build" cmake --build --preset asan-ubsan -j "$cores" \
    --target sluice_unit_tests sluice_e2e_tests fuzzers
  timed "asan tests" sanitized_ctest asan-ubsan build/asan -j "$cores" --timeout 300 \
    --output-on-failure
fi

if [[ $jobs == *" tsan "* ]]; then
  cmake --preset tsan >/dev/null
  timed "tsan build" cmake --build --preset tsan -j "$cores" --target sluice_e2e_tests
  timed "tsan tests" sanitized_ctest tsan build/tsan -L concurrency -j "$cores" --timeout 300 \
    --output-on-failure
fi

if [[ $jobs == *" fuzz "* ]]; then
  cmake --preset fuzz >/dev/null
  timed "fuzz build" cmake --build --preset fuzz -j "$cores"
  timed fuzz ./fuzz/run.sh
fi
