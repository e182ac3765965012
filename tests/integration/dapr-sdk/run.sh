#!/bin/bash
# CTest entry dapr_sdk_test: the official Dapr JS SDK (@dapr/dapr, DaprClient over HTTP) against a
# real sidecar on a real redis-server (sdk_test.mjs). Runs offline when tests/run.sh has installed
# the SDK; otherwise installs it first (npm ci, needs the npm registry) and says so.
# Usage: run.sh REPO_ROOT SIDELOCK_BINARY
set -euo pipefail
repo=$1
dir=$repo/tests/integration/dapr-sdk
source "$repo/tests/support/npm_packages.sh"
npm_packages_ensure "$dir" dapr-sdk
exec node "$dir/sdk_test.mjs" "$2"
