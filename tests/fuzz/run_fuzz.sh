#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (ASan + UBSan) and runs each for a bounded time over a
# scratch copy of its in-tree corpus. Fails on the first crash, leak, sanitizer report or timeout;
# the crashing input is kept in the scratch directory, whose path is printed.
#   tests/fuzz/run_fuzz.sh [build-dir=build-fuzz] [seconds-per-target=20] [jobs=2]
set -euo pipefail
cd "$(dirname "$0")/../.."
dir=${1:-build-fuzz}
seconds=${2:-20}
jobs=${3:-${JOBS:-2}}
targets=(http_request_fuzz request_body_fuzz grpc_frame_fuzz)

# -O1 -gline-tables-only, as OSS-Fuzz builds its targets: sanitizer reports keep file:line, and
# the build is shorter than RelWithDebInfo's -O2 -g (full debug info is most of its compile time).
CC=clang CXX=clang++ cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSIDELOCK_FUZZ=ON \
  "-DCMAKE_C_FLAGS_RELWITHDEBINFO=-O1 -gline-tables-only -DNDEBUG" \
  "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -gline-tables-only -DNDEBUG" >/dev/null
cmake --build "$dir" --target "${targets[@]}" -j"$jobs"

scratch=$(mktemp -d /tmp/sidelock-fuzz.XXXXXX)
status=0
for t in "${targets[@]}"; do
  mkdir -p "$scratch/$t"
  # New inputs go to the scratch directory (first); the in-tree corpus is only read.
  if ! (cd "$scratch/$t" && "$OLDPWD/$dir/tests/$t" -max_total_time="$seconds" -timeout=10 \
          -rss_limit_mb=2048 -print_final_stats=1 . "$OLDPWD/tests/fuzz/corpus/$t" \
          >"$scratch/$t.log" 2>&1); then
    echo "fuzz: $t FAILED; log and crashing input in $scratch/$t.log, $scratch/$t/"
    tail -40 "$scratch/$t.log"
    status=1
  else
    echo "fuzz: $t ok ($(grep -o 'Done [0-9]* runs' "$scratch/$t.log" || echo '?'))"
  fi
done
if ((status == 0)); then rm -rf "$scratch"; fi
exit "$status"
