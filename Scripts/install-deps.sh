#!/bin/sh
# Installs the Debian packages Gatehouse builds and tests with, skipping what is already there.
set -eu
packages="libssl-dev libsqlite3-dev zlib1g-dev libnghttp2-dev libhiredis-dev libc-ares-dev redis-server dnsmasq-base nghttp2-client python3-h2 python3-jwt python3-cryptography python3-websockets openssl curl ca-certificates $*"
missing=""
for p in $packages; do
  dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"
done
[ -z "$missing" ] && exit 0
as_root=""
[ "$(id -u)" -ne 0 ] && as_root="sudo"
$as_root apt-get update -qq
DEBIAN_FRONTEND=noninteractive $as_root apt-get install -y -qq $missing
