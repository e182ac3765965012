#!/bin/bash
# Builds tests/helm/render offline from Debian's Go packages (golang-go, golang-github-masterminds-sprig-dev,
# golang-gopkg-yaml.v2-dev, golang-gopkg-yaml.v3-dev, golang-github-xeipuuv-gojsonschema-dev).
# Usage: build.sh OUT_BINARY
# GOPATH mode: Debian installs sources under /usr/share/gocode/src without the /v3 suffix of their module
# paths, so a temp GOPATH maps github.com/Masterminds/{sprig,semver}/v3 onto them with symlinks.
set -euo pipefail
out=$1
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/gopath/src/github.com/Masterminds/sprig" "$work/gopath/src/github.com/Masterminds/semver"
ln -s /usr/share/gocode/src/github.com/Masterminds/sprig "$work/gopath/src/github.com/Masterminds/sprig/v3"
ln -s /usr/share/gocode/src/github.com/Masterminds/semver "$work/gopath/src/github.com/Masterminds/semver/v3"
cd "$here/render"
GO111MODULE=off GOPATH="$work/gopath:/usr/share/gocode" GOCACHE="$work/cache" GOPROXY=off GOFLAGS= \
  go build -o "$out" .
