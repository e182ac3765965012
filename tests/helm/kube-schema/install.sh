#!/bin/bash
# Installs the schema packages of package-lock.json into ./node_modules (git-ignored) with `npm ci`,
# from the npm registry (tests/support/npm_packages.sh). tests/run.sh calls it once per run, before
# the ctest passes; run.sh installs them when missing or not those of the lock file. Usage: install.sh
set -euo pipefail
dir=$(cd "$(dirname "$0")" && pwd)
source "$dir/../../support/npm_packages.sh"
npm_packages_install "$dir" kube-schema
