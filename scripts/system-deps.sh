#!/usr/bin/env bash
# Install the Debian packages the test suite needs, only those missing.
set -euo pipefail
need=()
[ -d /usr/share/datasets/fashion-mnist ] || need+=(dataset-fashion-mnist)
command -v mpicc >/dev/null 2>&1 || need+=(openmpi-bin libopenmpi-dev)
command -v java >/dev/null 2>&1 || need+=(openjdk-17-jre-headless)
# OpenSSL's headers: the links' compiled record layer (transport/_seclink.c) links libcrypto
[ -f /usr/include/openssl/evp.h ] || need+=(libssl-dev)
if [ ${#need[@]} -eq 0 ]; then exit 0; fi
if [ "$(id -u)" != 0 ]; then
  echo "system-deps: missing ${need[*]}; install them with: sudo apt-get install ${need[*]}" >&2
  exit 1
fi
echo "system-deps: installing ${need[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -q >/dev/null || true
apt-get install -y -q "${need[@]}" >/dev/null
