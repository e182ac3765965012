#!/bin/bash
# Instructions the sidecar executes per acquire+release pair, counted by callgrind (repeatable on
# a noisy shared VM, unlike time). Runs the sidecar twice under callgrind, driven by
# pair_load.py (16 keep-alive HTTP/1.1 clients, distinct names) or grpc_pair_load.py (16 concurrent
# sidelock.v1.Locks Acquire/Release call chains on ONE HTTP/2 connection, the same names), with
# 1 600 and 8 000 pairs; the difference divided by 6 400 cancels start-up and shutdown. A fourth
# argument sets the concurrency (16 by default): 1 profiles one call (one request) at a time.
#
#   tests/bench/callgrind_pairs.sh build/src/sidelock memory        # HTTP + API + lock service only
#   tests/bench/callgrind_pairs.sh build/src/sidelock redis         # plus the Redis connection layer
#   tests/bench/callgrind_pairs.sh build/src/sidelock memory grpc   # the same pairs over gRPC
#   tests/bench/callgrind_pairs.sh build/src/sidelock memory grpc 1 # one call at a time
#
# Profiles stay in $OUT (default: a temp dir) for callgrind_annotate.
set -euo pipefail
SIDELOCK=$1
BACKEND=${2:-memory}
PROTOCOL=${3:-http}
CALLS=${4:-16}
OUT=${OUT:-$(mktemp -d)}
mkdir -p "$OUT"
HERE=$(cd "$(dirname "$0")" && pwd)
PORT=$((20000 + RANDOM % 20000))
REDIS_PORT=$((PORT + 1))
GRPC_PORT=$((PORT + 2))
REDIS_PID=""
if [ "$BACKEND" = redis ]; then
  redis-server --port $REDIS_PORT --save "" --appendonly no >/dev/null &
  REDIS_PID=$!
  sleep 0.3
fi
cat >"$OUT/sidelock.yaml" <<CFG
listen: {tcp: "127.0.0.1:$PORT", unix: "", grpc: "127.0.0.1:$GRPC_PORT"}
backend: {type: $BACKEND, nodes: ["127.0.0.1:$REDIS_PORT"]}
log: {level: warn}
CFG

instructions() {
  local pairs=$1
  valgrind --tool=callgrind --callgrind-out-file="$OUT/callgrind.$pairs" \
    "$SIDELOCK" --config "$OUT/sidelock.yaml" 2>"$OUT/valgrind.$pairs.log" &
  local pid=$!
  for _ in $(seq 100); do
    curl -s -o /dev/null "http://127.0.0.1:$PORT/healthz" && break
    sleep 0.2
  done
  if [ "$PROTOCOL" = grpc ]; then
    /usr/bin/python3 "$HERE/grpc_pair_load.py" "127.0.0.1:$GRPC_PORT" $CALLS $((pairs / CALLS)) >&2
  else
    python3 "$HERE/pair_load.py" "127.0.0.1:$PORT" $CALLS $((pairs / CALLS)) >&2
  fi
  kill -TERM $pid
  wait $pid || true
  grep -o 'summary: [0-9]*' "$OUT/callgrind.$pairs" | awk '{print $2}'
}

SMALL=$(instructions 1600)
LARGE=$(instructions 8000)
[ -n "$REDIS_PID" ] && kill $REDIS_PID
echo "backend=$BACKEND protocol=$PROTOCOL calls=$CALLS instructions_per_pair=$(((LARGE - SMALL) / 6400)) profiles=$OUT"
