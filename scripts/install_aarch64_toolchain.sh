#!/usr/bin/env bash
# The cross toolchain `make ctest-aarch64` needs: Debian's AArch64 GCC (with its
# glibc and sanitizer runtimes) and qemu-user to run the test driver on an x86-64
# host.  Installs only what is missing; needs root (CI runs as root) and Debian's
# package names (bookworm: gcc-aarch64-linux-gnu 12, qemu-user 7.2).
set -euo pipefail

need=()
command -v aarch64-linux-gnu-gcc >/dev/null 2>&1 || need+=(gcc-aarch64-linux-gnu)
[ -e /usr/aarch64-linux-gnu/include/stdio.h ] || need+=(libc6-dev-arm64-cross)
command -v qemu-aarch64 >/dev/null 2>&1 || need+=(qemu-user)
[ ${#need[@]} -eq 0 ] && exit 0

if [ "$(id -u)" -ne 0 ]; then
  echo "install_aarch64_toolchain.sh: missing ${need[*]}; run as root (or: sudo apt-get install ${need[*]})" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -q
apt-get install -y -q --no-install-recommends "${need[@]}"
