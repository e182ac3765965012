#!/bin/bash
# CTest entry helm_kube_schema: validates every rendered manifest (tests/helm/golden/) and
# deploy/kubernetes/ against the Kubernetes API schemas (validate.mjs; helm/sidelock/README.md,
# "Kubernetes API schemas"). Runs offline when tests/run.sh has installed the packages; otherwise
# installs them first (npm ci, needs the npm registry) and says so. Usage: run.sh REPO_ROOT
set -euo pipefail
repo=$1
dir=$repo/tests/helm/kube-schema
if ! cmp -s "$dir/package-lock.json" "$dir/node_modules/.sidelock-lock.json" 2>/dev/null; then
  echo "kube-schema: the schema packages are missing or not those of package-lock.json;" \
       "installing them now (tests/helm/kube-schema/install.sh, npm ci)"
  if ! "$dir/install.sh"; then
    echo "kube-schema: FAILED: could not install the schema packages (npm registry unreachable?);" \
         "nothing was validated. Run tests/helm/kube-schema/install.sh where npm reaches it." >&2
    exit 1
  fi
fi
exec node "$dir/validate.mjs" "$repo"
