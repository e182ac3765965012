#!/bin/bash
# CTest entry for the Helm chart and deploy/ checks: builds tests/helm/render offline (build.sh) into a
# temp dir and runs `helmtest test`. Usage: run.sh REPO_ROOT [SIDELOCK_BINARY]
# UPDATE_GOLDEN=1 rewrites tests/helm/golden/*.yaml (review the diff, then commit).
# $SIDELOCK_TEST_BINARY, when set, is the binary checked (tests/run.sh: the shipped build). The
# Dockerfile check reads the binary's own shared libraries, so this is the ELF file, never the
# tests' sidelock-under-test shim.
set -euo pipefail
repo=$1
bin=${SIDELOCK_TEST_BINARY:-${2:-}}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$repo/tests/helm/build.sh" "$work/helmtest"
"$work/helmtest" test -repo "$repo" -sidelock "$bin"
