#!/bin/bash
# Installs the schema packages of package-lock.json into ./node_modules (git-ignored) with `npm ci`,
# from the npm registry. tests/run.sh calls it once per run, before the ctest passes; run.sh calls
# it when the installed modules are missing or not those of the lock file. Usage: install.sh
set -euo pipefail
dir=$(cd "$(dirname "$0")" && pwd)
command -v npm >/dev/null || {
  echo "kube-schema: npm not found (Debian package nodejs; deploy/scripts/install-deps.sh)" >&2
  exit 1
}
start=$(date +%s)
# --loglevel=error: the packages declare engines node >= 22; they run on Node 20 (validate.mjs's
# self-test proves it on every run), so npm's engine warnings are left out.
(cd "$dir" && npm ci --no-audit --no-fund --loglevel=error)
# run.sh compares this copy with package-lock.json to tell whether the modules are current.
cp "$dir/package-lock.json" "$dir/node_modules/.sidelock-lock.json"
echo "kube-schema: schema packages installed in $(($(date +%s) - start)) s"
