#!/bin/bash
# CTest entry helm_kube_schema: validates every rendered manifest (tests/helm/golden/) and
# deploy/kubernetes/ against the Kubernetes API schemas (validate.mjs; helm/sidelock/README.md,
# "Kubernetes API schemas"). Runs offline when tests/run.sh has installed the packages; otherwise
# installs them first (npm ci, needs the npm registry) and says so. Usage: run.sh REPO_ROOT
set -euo pipefail
repo=$1
dir=$repo/tests/helm/kube-schema
source "$repo/tests/support/npm_packages.sh"
npm_packages_ensure "$dir" kube-schema
exec node "$dir/validate.mjs" "$repo"
