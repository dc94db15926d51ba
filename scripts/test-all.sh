#!/bin/sh
# The whole test suite, as the README and CI run it:
#   1. native release build: every table this CPU can run (others are
#      reported as skipped), the SIMDe build of the AVX-512 table, dispatch
#      (LINATTN_ISA forcing, QEMU-emulated CPUs) and the installed tree;
#   2. the same suite under AddressSanitizer + UBSan;
#   3. aarch64 cross build, scalar and NEON tables under QEMU (scripts/test-arm.sh).
set -eu
cd "$(dirname "$0")/.."

setup() { # setup DIR [meson options...]
    dir=$1
    shift
    if [ -f "$dir/build.ninja" ]; then
        meson setup --reconfigure "$dir" "$@" >/dev/null
    else
        meson setup "$dir" "$@" >/dev/null
    fi
}

echo "== native build =="
setup build
ninja -C build
meson test -C build -v --print-errorlogs

echo "== AddressSanitizer + UBSan =="
setup build-asan -Dbuildtype=debug -Db_sanitize=address,undefined -Db_lundef=false \
    -Dc_args=-fno-sanitize-recover=all
ninja -C build-asan
ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
    meson test -C build-asan -v --print-errorlogs --suite kernels --suite dispatch --suite tools

echo "== aarch64 under QEMU =="
sh scripts/test-arm.sh
