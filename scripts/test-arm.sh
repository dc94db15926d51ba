#!/bin/sh
# aarch64 cross build run under QEMU user mode: the scalar and NEON tables on
# QEMU's default CPU (which also has SVE) and on a plain-NEON cortex-a72.
#   sh scripts/test-arm.sh [BUILD_DIR]    (default build-arm)
# Needs the ARM packages of scripts/install-deps.sh. Exits non-zero on failure.
set -eu
cd "$(dirname "$0")/.."
dir=${1:-build-arm}
cross=cross/aarch64-linux-gnu.ini

if [ -f "$dir/build.ninja" ]; then
    meson setup --reconfigure "$dir" --cross-file "$cross" -Dtests=true >/dev/null
else
    meson setup "$dir" --cross-file "$cross" -Dtests=true >/dev/null
fi
ninja -C "$dir"

# tests/meson.build registers every test twice in a cross build: on QEMU's
# default CPU and with QEMU_CPU=cortex-a72 (kernels-neon-cortex-a72, ...).
# A QEMU_CPU from the caller would override the default-CPU half: clear it.
unset QEMU_CPU
meson test -C "$dir" -v --print-errorlogs
