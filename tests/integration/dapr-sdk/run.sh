#!/bin/bash
# CTest entries dapr_sdk_test and grpc_api_test: the official Dapr JS SDK (@dapr/dapr, DaprClient
# over HTTP and gRPC: sdk_test.mjs), and a gRPC client built from sidelock's protos by
# @grpc/grpc-js + @grpc/proto-loader (grpc_api_test.mjs), against a real sidecar on a real
# redis-server. Runs offline when tests/run.sh has installed the packages; otherwise installs them
# first (npm ci, needs the npm registry) and says so.
# Usage: run.sh REPO_ROOT SIDELOCK_BINARY [SCRIPT (default sdk_test.mjs)]
set -euo pipefail
repo=$1
dir=$repo/tests/integration/dapr-sdk
source "$repo/tests/support/npm_packages.sh"
npm_packages_ensure "$dir" dapr-sdk
exec node "$dir/${3:-sdk_test.mjs}" "$2" "$repo"
