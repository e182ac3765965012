#!/bin/bash
# Installs the Dapr JS SDK of package-lock.json into ./node_modules (git-ignored) with `npm ci`, from
# the npm registry (tests/support/npm_packages.sh, as tests/helm/kube-schema does). tests/run.sh
# calls it once per run, before the ctest passes; run.sh installs it when missing or not that of the
# lock file. Usage: install.sh
set -euo pipefail
dir=$(cd "$(dirname "$0")" && pwd)
source "$dir/../../support/npm_packages.sh"
npm_packages_install "$dir" dapr-sdk
