#!/bin/sh
# Fuzzes whole linattn calls (tests/fuzz/fuzz_call.c) under AddressSanitizer
# and UBSan (pointer-overflow left out of the kernel tables: meson.build,
# table_args), SECONDS per kernel table this CPU can run (default 60; CI
# passes 30; a longer hunt is e.g. `sh scripts/fuzz.sh 3600`).
#   sh scripts/fuzz.sh [SECONDS] [BUILD_DIR]      (default 60 build-fuzz)
# Needs clang and libomp-dev (scripts/install-deps.sh --test). Findings are
# written as crash-*/leak-*/timeout-* files in the build directory; replay
# one with  BUILD_DIR/tests/fuzz/fuzz_call FILE  (or fuzz_replay in a normal
# build). The corpus grown by a run stays in BUILD_DIR/fuzz-corpus-ISA; the
# checked-in seeds are tests/fuzz/corpus (tests/fuzz/make-corpus.py).
# libFuzzer's random seed is FUZZ_SEED, 1 unless set: a CI run explores
# the same inputs first each time, so it does not fail at random on an old
# finding; FUZZ_SEED=0 takes a new seed each run (for hunts).
set -eu
cd "$(dirname "$0")/.."
seconds=${1:-60}
dir=${2:-build-fuzz}
seed=${FUZZ_SEED:-1}

# libFuzzer's coverage in every object, the fuzzer's main in fuzz_call.
# OpenMP comes from libomp (clang's runtime). The SIMDe table is never
# chosen through LINATTN_ISA, so it is left out here, and so are the native
# AVX-512 tables where /proc/cpuinfo lacks one of the features they need:
# their sanitized build is most of this script's time, for a fuzzer that
# would only report them unavailable.
avx512=true
for f in avx512f avx512vl avx512bw avx512dq; do
    grep -qw "$f" /proc/cpuinfo 2>/dev/null || avx512=false
done
[ "$avx512" = true ] || echo "fuzz avx512: this CPU lacks AVX-512F/VL/BW/DQ, tables not built"
opts="-Dfuzz=true -Dtests=false -Dsimde=disabled -Dbuildtype=debugoptimized
      -Davx512=$avx512 -Db_sanitize=address,undefined -Db_lundef=false
      -Dc_args=-fsanitize=fuzzer-no-link"
if [ -f "$dir/build.ninja" ]; then
    # shellcheck disable=SC2086
    CC=clang meson setup --reconfigure "$dir" $opts >/dev/null
else
    # shellcheck disable=SC2086
    CC=clang meson setup "$dir" $opts >/dev/null
fi
ninja -C "$dir" tests/fuzz/fuzz_call

dir=$(cd "$dir" && pwd)
fuzzer=$dir/tests/fuzz/fuzz_call
seeds=${FUZZ_SEEDS:-$PWD/tests/fuzz/corpus}
supp=$PWD/tests/fuzz/lsan.supp # before the cd into the build directory below
# every allocation starts as NaN (as in test-all.sh's ASan suites): a read
# of workspace never written shows in the outputs on every run
fill=malloc_fill_byte=255:max_malloc_fill_size=67108864
status=0
# Where the CPU has AVX512-BF16, LINATTN_ISA=avx512 runs the avx512bf16
# table; avx512-plain masks that extension so the plain table is fuzzed too.
plain=
grep -qw avx512_bf16 /proc/cpuinfo 2>/dev/null && plain=avx512-plain
for isa in scalar avx2 avx512 $plain neon; do
    corpus=$dir/fuzz-corpus-$isa
    mkdir -p "$corpus"
    log=$dir/fuzz-$isa.log
    off=
    [ "$isa" = avx512-plain ] && off=avx512bf16
    set +e
    (cd "$dir" && LINATTN_ISA=${isa%-plain} LINATTN_TEST_CPU_OFF=$off \
        ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1:$fill \
        LSAN_OPTIONS=suppressions=$supp \
        UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
        "$fuzzer" -seed="$seed" -max_total_time="$seconds" -timeout=30 -rss_limit_mb=2048 -malloc_limit_mb=1024 \
        -print_final_stats=1 "$corpus" "$seeds") >"$log" 2>&1
    rc=$?
    set -e
    if grep -q 'cannot run here' "$log"; then
        echo "fuzz $isa: not available on this CPU/build, skipped"
        continue
    fi
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
    speed=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log")
    cov=$(grep -E '^#[0-9]+.*(DONE|INITED|NEW|REDUCE|pulse)' "$log" | tail -n 1 |
          sed -n 's/.*\(cov: [0-9]* ft: [0-9]*\).*/\1/p')
    if [ $rc -eq 0 ]; then
        grep "^fuzz_call: table" "$log" || true
        echo "fuzz $isa: ${execs:-?} executions (${speed:-?}/s), $cov, no findings"
    else
        echo "fuzz $isa: FAILED (exit $rc) after ${execs:-?} executions; log: $log"
        grep -E -A10 '^fuzz_call: [a-z_]+:|ERROR: AddressSanitizer|runtime error|ERROR: libFuzzer: (timeout|out-of-memory|fuzz target exited)' "$log" |
            head -n 14
        status=1
    fi
done
exit $status
