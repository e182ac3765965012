#!/usr/bin/env bash
# Installs the Debian 12 packages sidelock needs to build, run and test, skipping what is present.
# Usage: deploy/scripts/install-deps.sh [--runtime-only]
set -euo pipefail

BUILD_PACKAGES=(
  build-essential cmake pkg-config git ca-certificates
  libuv1-dev node-llhttp libhiredis-dev libssl-dev libyaml-cpp-dev prometheus-cpp-dev nlohmann-json3-dev
  libnghttp2-dev
  redis-server redis-tools
  libprotobuf-dev protobuf-compiler
)
TEST_PACKAGES=(
  libgtest-dev prometheus openssl curl
  golang-go golang-github-masterminds-sprig-dev golang-gopkg-yaml.v3-dev golang-gopkg-yaml.v2-dev
  golang-github-xeipuuv-gojsonschema-dev
  clang libclang-rt-14-dev
  iproute2 iptables faketime libtcmalloc-minimal4
  python3 python3-jsonschema python3-h2 nodejs
)

packages=("${BUILD_PACKAGES[@]}")
if [[ "${1:-}" != "--runtime-only" ]]; then
  packages+=("${TEST_PACKAGES[@]}")
fi

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if ((${#missing[@]} == 0)); then
  echo "install-deps: all ${#packages[@]} packages present"
  exit 0
fi

echo "install-deps: installing ${missing[*]}"
SUDO=()
if [[ $(id -u) -ne 0 ]]; then
  command -v sudo >/dev/null || { echo "install-deps: need root or sudo to install: ${missing[*]}" >&2; exit 1; }
  SUDO=(sudo)
fi
export DEBIAN_FRONTEND=noninteractive
"${SUDO[@]}" apt-get update -qq
"${SUDO[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" </dev/null
# Debian starts redis-server as a service on install where systemd runs; sidelock's scripts and
# tests start their own instances on free ports and never use it.
