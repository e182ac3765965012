#!/usr/bin/env bash
# Quick start: installs what is missing, builds sidelock, starts a throw-away redis-server on a free
# port and runs the sidecar against it in the foreground (Ctrl-C stops both).
#   SIDELOCK_PORT=7411   TCP port for the sidecar (default 7411)
#   BUILD_DIR=build      where to build
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD_DIR=${BUILD_DIR:-build}
PORT=${SIDELOCK_PORT:-7411}

deploy/scripts/install-deps.sh --runtime-only
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release -DSIDELOCK_BUILD_TESTS=OFF >/dev/null
cmake --build "$BUILD_DIR" --target sidelock -j"$(nproc)"
BIN=$(cd "$BUILD_DIR" && pwd)/src/sidelock

WORK=$(mktemp -d /tmp/sidelock-quickstart.XXXXXX)
REDIS_PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])' 2>/dev/null \
  || shuf -i 20000-60000 -n 1)
redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --dir "$WORK" --save "" --appendonly no \
  --daemonize no --logfile "$WORK/redis.log" &
REDIS_PID=$!
cleanup() {
  kill "$REDIS_PID" 2>/dev/null || true
  wait "$REDIS_PID" 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT
for _ in $(seq 100); do
  redis-cli -p "$REDIS_PORT" ping >/dev/null 2>&1 && break
  sleep 0.05
done

SOCK="$WORK/sidelock.sock"
# Start from the shipped config and point it at the throw-away Redis and a temp socket.
sed -e "s|tcp: \"127.0.0.1:7411\"|tcp: \"127.0.0.1:$PORT\"|" \
    -e "s|unix: \"/run/sidelock/sidelock.sock\"|unix: \"$SOCK\"|" \
    -e "s|nodes: \[\"127.0.0.1:6379\"\]|nodes: [\"127.0.0.1:$REDIS_PORT\"]|" \
    config/sidelock.yaml >"$WORK/sidelock.yaml"

cat <<EOT

sidelock is starting on 127.0.0.1:$PORT and $SOCK (Redis on 127.0.0.1:$REDIS_PORT).
Try, in another terminal:
  curl -s -XPOST localhost:$PORT/v1/locks/orders-42/acquire -d '{"ttl_ms":10000}'
  curl -s localhost:$PORT/v1/locks/orders-42
  curl -s -XPOST localhost:$PORT/v1/locks/orders-42/release -d '{"owner":"<owner from acquire>"}'
  curl -s --unix-socket $SOCK http://localhost/readyz
  curl -s localhost:$PORT/metrics | grep ^sidelock_
  $BIN run --addr 127.0.0.1:$PORT --ttl 5000 demo -- sh -c 'echo token \$SIDELOCK_TOKEN; sleep 2'
Ctrl-C stops sidelock and Redis.

EOT
"$BIN" --config "$WORK/sidelock.yaml"
