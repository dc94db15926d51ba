#!/bin/sh
# Installs everything linattn needs to build, test and cross-test on Debian 12
# (run as root): the native toolchain and libraries, SIMDe for the emulated
# AVX-512 table, QEMU user mode, and the aarch64 cross toolchain with the
# arm64 builds of the same libraries.
set -eu
if [ "$(id -u)" -ne 0 ]; then
    echo "install-deps.sh: run as root (apt-get)" >&2
    exit 1
fi
export DEBIAN_FRONTEND=noninteractive
native="build-essential meson ninja-build pkg-config libsleef-dev libcpu-features-dev check
        libsimde-dev qemu-user python3-matplotlib"
arm="gcc-aarch64-linux-gnu libc6-dev-arm64-cross libgomp1-arm64-cross
     libsleef-dev:arm64 check:arm64 pkgconf:arm64"
if [ "$(dpkg --print-architecture)" = amd64 ]; then
    dpkg --add-architecture arm64
    apt-get update -qq
    # shellcheck disable=SC2086
    apt-get install -y -qq $native $arm >/dev/null
else
    apt-get update -qq
    # shellcheck disable=SC2086
    apt-get install -y -qq $native >/dev/null
fi
echo "install-deps.sh: dependencies installed"
