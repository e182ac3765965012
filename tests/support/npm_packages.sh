#!/bin/bash
# The npm packages of a test folder (package.json + package-lock.json; node_modules git-ignored):
# the tests that run code nobody here wrote (tests/helm/kube-schema: the Kubernetes API schemas;
# tests/integration/dapr-sdk: the Dapr JS SDK). Sourced by their install.sh and run.sh.

# npm_packages_install DIR LABEL: `npm ci` from the npm registry (npm's own cache makes a repeat
# cheap), then a copy of the lock file in node_modules, which npm_packages_ensure compares.
npm_packages_install() {
  local dir=$1 label=$2 start
  command -v npm >/dev/null || {
    echo "$label: npm not found (Debian package nodejs; deploy/scripts/install-deps.sh)" >&2
    return 1
  }
  start=$(date +%s)
  # --loglevel=error: some packages declare engines node >= 22 and run on Node 20 (each test proves
  # its packages work on every run), so npm's engine warnings are left out.
  (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error) || return 1
  cp "$dir/package-lock.json" "$dir/node_modules/.sidelock-lock.json"
  echo "$label: npm packages installed in $(($(date +%s) - start)) s"
}

# npm_packages_ensure DIR LABEL: nothing when the installed modules are those of the lock file
# (tests/run.sh installs them before ctest, which then runs offline); otherwise installs them,
# saying so, and fails naming the cause when the registry cannot be reached.
npm_packages_ensure() {
  local dir=$1 label=$2
  cmp -s "$dir/package-lock.json" "$dir/node_modules/.sidelock-lock.json" 2>/dev/null && return 0
  echo "$label: the npm packages are missing or not those of package-lock.json;" \
       "installing them now ($dir/install.sh, npm ci)"
  npm_packages_install "$dir" "$label" && return 0
  echo "$label: FAILED: could not install the npm packages (npm registry unreachable?);" \
       "nothing was tested. Run $dir/install.sh where npm reaches it." >&2
  return 1
}
