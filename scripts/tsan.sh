#!/bin/sh
# ThreadSanitizer pass: the library, tests/threads and the fuzz corpus's
# replay built with clang
# -fsanitize=thread, OpenMP from libomp (GCC's libgomp is not instrumented;
# libomp's libarcher tells TSan about OpenMP's synchronisation).
#   sh scripts/tsan.sh [BUILD_DIR]      (default build-tsan)
# Needs clang and libomp-dev (scripts/install-deps.sh --test).
set -eu
cd "$(dirname "$0")/.."
dir=${1:-build-tsan}
# The SIMDe table cannot be chosen by linattn_set_isa, so it adds nothing here.
opts="-Db_sanitize=thread -Db_lundef=false -Dtests=false -Dsimde=disabled
      -Dbuildtype=debugoptimized"
if [ -f "$dir/build.ninja" ]; then
    # shellcheck disable=SC2086
    CC=clang meson setup --reconfigure "$dir" $opts >/dev/null
else
    # shellcheck disable=SC2086
    CC=clang meson setup "$dir" $opts >/dev/null
fi
ninja -C "$dir" tests/threads/test_threads tests/threads/test_units tests/fuzz/fuzz_replay
# the threads test, then the fuzz corpus (calls on OpenMP threads, and
# plans whose ranges run on two threads at once)
TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 ignore_noninstrumented_modules=1" \
    meson test -C "$dir" -v --print-errorlogs --no-rebuild --suite threads --suite fuzz
