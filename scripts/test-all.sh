#!/bin/sh
# The whole test suite, as the README and CI run it (after
# `scripts/install-deps.sh --test`):
#   1. native release build: every table this CPU can run (others are
#      reported as skipped), the SIMDe build of the AVX-512 table, dispatch
#      (LINATTN_ISA forcing, QEMU-emulated CPUs), the installed tree, the
#      fuzz corpus replayed and the threads test;
#   2. the kernels, delta, api, dispatch, tools, fuzz-corpus, threads, serve
#      and dtypes suites under AddressSanitizer + UBSan, built at -O1; of the
#      AVX-512 tables, the native ones where the CPU has AVX-512, else the
#      SIMDe one (each build alone takes minutes);
#   3. ThreadSanitizer over thread counts and concurrent calls (scripts/tsan.sh);
#   4. the fuzzer, 30 s per table this CPU can run (scripts/fuzz.sh; pass
#      FUZZ_SECONDS to change);
#   5. the Python tests, when the Python package is present (scripts/test-python.sh);
#   6. aarch64 cross build, scalar and NEON tables under QEMU (scripts/test-arm.sh).
# Prints every test log and each stage's wall time.
set -eu
cd "$(dirname "$0")/.."

setup() { # setup DIR [meson options...]
    dir=$1
    shift
    if [ -f "$dir/build.ninja" ] && [ /var/lib/dpkg/status -nt "$dir/meson-private/coredata.dat" ]; then
        # Packages changed since this directory was configured (the
        # README's first command, then --test): meson 1.0 keeps failed
        # header checks (SIMDe's) even through --clearcache, so configure
        # afresh, keeping the options.
        echo "test-all.sh: packages changed since $dir was configured: meson setup --wipe"
        meson setup --wipe "$dir" "$@"
    elif [ -f "$dir/build.ninja" ]; then
        meson configure --clearcache "$dir"
        meson setup --reconfigure "$dir" "$@"
    else
        meson setup "$dir" "$@"
    fi
}

times=""
stage_start=0
stage() { # stage NAME: closes the previous stage, opens the next
    now=$(date +%s)
    if [ -n "${stage_name:-}" ]; then
        times="$times$(printf '  %-28s %4ss' "$stage_name" $((now - stage_start)))
"
    fi
    stage_name=$1 stage_start=$now
    [ "$1" = done ] || echo "== $1 =="
}
all_start=$(date +%s)

if ! command -v clang >/dev/null 2>&1; then
    echo "test-all.sh: clang not found; run scripts/install-deps.sh --test first" >&2
    exit 1
fi

stage "native build and tests"
setup build
ninja -C build
# Which kernel tables this build has; one the README promises but the build
# lacks is named here, never skipped in silence. On an x86-64 CPU with AVX2
# the SIMDe-emulated AVX-512 table is the only test of the AVX-512 code on
# CPUs without AVX-512, so its absence fails the run.
tables=$(meson test -C build --list 2>/dev/null | grep -o 'kernels-[a-z0-9-]*' | sed 's/^kernels-//' | sort -u | tr '\n' ' ')
echo "test-all.sh: kernel tables built: $tables"
missing=""
if [ "$(uname -m)" = x86_64 ]; then
    for t in scalar avx2 avx512 avx512-simde; do
        case " $tables " in *" $t "*) ;; *) missing="$missing $t" ;; esac
    done
fi
if [ -n "$missing" ]; then
    echo "test-all.sh: tables NOT built (not tested):$missing"
    case " $missing " in
    *" avx512-simde "*)
        if grep -qw avx2 /proc/cpuinfo; then
            echo "test-all.sh: FAIL: this CPU has AVX2 but the SIMDe AVX-512 table was not built" \
                "(install libsimde-dev: scripts/install-deps.sh --test)" >&2
            exit 1
        fi ;;
    esac
fi
meson test -C build -v --print-errorlogs
skipped_native=$(python3 -c 'import json, sys
print(" ".join(t["name"] for t in map(json.loads, open(sys.argv[1])) if t.get("result") == "SKIP"))' \
    build/meson-logs/testlog.json 2>/dev/null || echo "(unknown: no python3)")

stage "AddressSanitizer + UBSan"
# One build of the AVX-512 sources, the one this CPU runs: the native
# tables where it has AVX-512, else their SIMDe twin (its -O1 ASan build
# is the longest compile of the run; the native tables', 2 x 100 s of CPU,
# would only report themselves skipped). meson test builds only what the
# suites below need.
if LINATTN_ISA=avx512 LINATTN_TEST_EXPECT=avx512 build/tests/test_dispatch >/dev/null 2>&1; then
    avx512_asan="-Davx512=true -Dsimde=disabled"
    asan_left_out="avx512-simde (the native avx512 tables run here)"
else
    avx512_asan="-Davx512=false -Dsimde=auto"
    asan_left_out="avx512, avx512bf16 (this CPU cannot run them)"
fi
echo "test-all.sh: ASan build leaves out the tables $asan_left_out"
# shellcheck disable=SC2086
setup build-asan -Doptimization=1 -Ddebug=true -Db_sanitize=address,undefined \
    -Db_lundef=false -Dc_args=-fno-sanitize-recover=all $avx512_asan
# allocator_may_return_null: the api suite asks for impossible workspaces
# and expects an error, not ASan's abort. malloc_fill_byte: every
# allocation (the library's workspaces too) starts as NaN, so a kernel
# that reads workspace it never wrote fails every time, not only when the
# heap happens to hold a bad value there.
nan_fill=malloc_fill_byte=255:max_malloc_fill_size=67108864
ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1:$nan_fill UBSAN_OPTIONS=print_stacktrace=1 \
    meson test -C build-asan -v --print-errorlogs \
    --suite kernels --suite delta --suite api --suite dispatch --suite tools \
    --suite fuzz --suite threads --suite serve --suite dtypes

stage "ThreadSanitizer"
sh scripts/tsan.sh

stage "fuzzing"
sh scripts/fuzz.sh "${FUZZ_SECONDS:-30}"

if [ -f scripts/test-python.sh ]; then
    stage "Python"
    sh scripts/test-python.sh
fi

stage "aarch64 under QEMU"
sh scripts/test-arm.sh

stage done
echo "== wall time per stage =="
printf '%s' "$times"
echo "== not run =="
echo "  tables not built:              ${missing:- none}"
echo "  native tests skipped:          ${skipped_native:-none}"
echo "  tables left out of ASan build: $asan_left_out"
echo "  total                        $(( $(date +%s) - all_start ))s"
