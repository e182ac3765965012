#!/usr/bin/env bash
# Installs what is missing, builds, and runs the whole test suite: every test against an
# ASan+UBSan build (clang, Debug), then the tests that run the sidecar binary again against the
# shipped build (gcc, Release). This is what CI runs (.ci/run).
#   SIDELOCK_SKIP_SANITIZE=1  one Release build of everything, every test against it, no sanitizer
#                             (local iteration only)
#   SIDELOCK_SKIP_FUZZ=1      skip the bounded libFuzzer step; SIDELOCK_FUZZ_SECONDS=N per target
set -euo pipefail
cd "$(dirname "$0")/.."
JOBS=${JOBS:-$(nproc)}
# Tests at twice the cores: they mostly wait (for Redis, TTLs, child processes). Measured, the
# Release tests at -j4 on 2 cores: 125 s instead of 238 s at -j2, using 1.4 cores on average.
CTEST_JOBS=${CTEST_JOBS:-$((JOBS * 2))}

deploy/scripts/install-deps.sh
# The npm packages of the Kubernetes schema test, once for both passes (the ctest then runs offline;
# if this fails, helm_kube_schema tries again and fails, naming the cause).
tests/helm/kube-schema/install.sh || echo "== warning: tests/helm/kube-schema/install.sh failed"
# The Dapr JS SDK of dapr_sdk_test, likewise (issue 21).
tests/integration/dapr-sdk/install.sh || echo "== warning: tests/integration/dapr-sdk/install.sh failed"

# Tests start their own redis-server / prometheus processes on free ports; make sure no stale
# processes from an interrupted run hold resources (only ones started from our temp dirs).
export GOFLAGS=${GOFLAGS:-}
export GOCACHE=${GOCACHE:-$(mktemp -d /tmp/sidelock-gocache.XXXXXX)}

build() {
  local dir=$1; shift
  cmake -S . -B "$dir" "$@" >/dev/null
  cmake --build "$dir" -j"$JOBS"
}
tests_in() {
  local dir=$1; shift
  (cd "$dir" && ctest --output-on-failure -j"$CTEST_JOBS" --timeout 600 "$@")
}

# SIDELOCK_PCH: the tests' common headers are parsed once per build, not once per test file
# (tests/CMakeLists.txt): measured on the clang ASan build's tests, 422 CPU-s instead of 670.
failed=()
if [[ "${SIDELOCK_SKIP_SANITIZE:-0}" == "1" ]]; then
  echo "== build and test (Release, as shipped; no sanitizer pass)"
  # (SIDELOCK_BUILD_TESTS=ON: build-test may hold the sidecar-only configuration of a full run.)
  { build build-test -DCMAKE_BUILD_TYPE=Release -DSIDELOCK_BUILD_TESTS=ON -DSIDELOCK_PCH=ON &&
      tests_in build-test; } \
    || failed+=("Release")
else
  # The test binaries are built once, here, and every test runs against this build's sidecar. The
  # second pass builds only the shipped sidecar and runs the tests that run the sidecar binary
  # again, from these test binaries, against it (labels "sidecar" and "shipped",
  # tests/CMakeLists.txt). Building the tests once instead of twice keeps the whole command within
  # CI's time budget: the test code was 61 % of the Release build's compile time (488 of 800 CPU-s).
  echo "== build and test (ASan + UBSan)"
  export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
  export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
  # clang, not gcc: the same sanitizers, and it compiles this code base's instrumented Debug
  # build in about 55 % of gcc 12's time (api_test.cc: 11.5 s vs 21.2 s), which keeps the whole
  # command within CI's time budget. The shipped build (below) stays gcc.
  # -gline-tables-only instead of Debug's -g: sanitizer reports keep file:line, and the build is
  # shorter (lock_api.cc: 6.8 s instead of 7.6 s), as CI's runner never starts a debugger.
  asan_built=0
  if CC=clang CXX=clang++ build build-asan -DCMAKE_BUILD_TYPE=Debug -DSIDELOCK_SANITIZE=ON \
       -DSIDELOCK_PCH=ON -DCMAKE_C_FLAGS_DEBUG=-gline-tables-only \
       -DCMAKE_CXX_FLAGS_DEBUG=-gline-tables-only; then
    asan_built=1
    tests_in build-asan -LE shipped || failed+=("ASan+UBSan")
  else
    failed+=("ASan+UBSan build")
  fi

  echo "== build the shipped sidecar (gcc, Release) and run the tests that run it"
  if build build-test -DCMAKE_BUILD_TYPE=Release -DSIDELOCK_BUILD_TESTS=OFF; then
    if ((asan_built)); then
      SIDELOCK_TEST_BINARY="$PWD/build-test/src/sidelock" tests_in build-asan -L 'sidecar|shipped' \
        || failed+=("Release")
    fi
  else
    failed+=("Release build")
  fi
fi

if [[ "${SIDELOCK_SKIP_FUZZ:-0}" != "1" ]]; then
  echo "== fuzz (libFuzzer, ${SIDELOCK_FUZZ_SECONDS:-20} s per target; tests/fuzz/README.md)"
  tests/fuzz/run_fuzz.sh build-fuzz "${SIDELOCK_FUZZ_SECONDS:-20}" || failed+=("fuzz")
fi

if ((${#failed[@]})); then
  echo "== FAILED: ${failed[*]}"
  exit 1
fi
echo "== all test passes succeeded"
