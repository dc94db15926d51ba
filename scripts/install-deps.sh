#!/bin/sh
# Installs what linattn needs on Debian 12 (run as root).
#   sh scripts/install-deps.sh          build: compiler, meson, SLEEF,
#                                       cpu_features, Check, cmake (for the
#                                       find_package files)
#   sh scripts/install-deps.sh --test   also everything scripts/test-all.sh
#                                       runs: SIMDe (emulated AVX-512 table),
#                                       QEMU user mode, the aarch64 cross
#                                       toolchain and arm64 libraries, clang
#                                       and libomp (fuzzing, ThreadSanitizer),
#                                       the Python packages of the Python tests
#                                       (with python3-venv and python3-dev).
#                                       On amd64 it adds arm64 as a dpkg
#                                       architecture for good (dpkg
#                                       --print-foreign-architectures shows
#                                       it; dpkg --remove-architecture arm64
#                                       after removing the :arm64 packages
#                                       undoes it): about 670 MB in all.
#   sh scripts/install-deps.sh --plot   also matplotlib for scripts/plot_sweep.py
# Options combine. PYTHON_TORCH=1 adds python3-torch to --test (large; only
# the Python tests that compare against PyTorch need it).
set -eu
if [ "$(id -u)" -ne 0 ]; then
    echo "install-deps.sh: run as root (apt-get)" >&2
    exit 1
fi
test_deps=0 plot=0
for arg in "$@"; do
    case $arg in
    --test) test_deps=1 ;;
    --plot) plot=1 ;;
    *) echo "usage: install-deps.sh [--test] [--plot]" >&2; exit 2 ;;
    esac
done
export DEBIAN_FRONTEND=noninteractive

packages="build-essential meson ninja-build pkg-config libsleef-dev check"
case $(dpkg --print-architecture) in
amd64) packages="$packages libcpu-features-dev" ;;
esac
packages="$packages cmake"

if [ $test_deps -eq 1 ]; then
    packages="$packages libsimde-dev qemu-user clang libclang-rt-dev libomp-dev
              python3-mesonpy python3-numpy python3-pytest python3-venv python3-dev"
    if [ "${PYTHON_TORCH:-0}" = 1 ]; then
        packages="$packages python3-torch"
    fi
    if [ "$(dpkg --print-architecture)" = amd64 ]; then
        dpkg --add-architecture arm64
        packages="$packages gcc-aarch64-linux-gnu libc6-dev-arm64-cross libgomp1-arm64-cross
                  libsleef-dev:arm64 check:arm64 pkgconf:arm64"
    fi
fi
if [ $plot -eq 1 ]; then
    packages="$packages python3-matplotlib"
fi

# apt's own output stays visible: with --test it downloads about 670 MB.
echo "install-deps.sh: apt-get install $(echo $packages)"
apt-get update
# shellcheck disable=SC2086
apt-get install -y --no-install-recommends $packages
echo "install-deps.sh: installed$( [ $test_deps -eq 1 ] && echo ' (with test tools)')"
