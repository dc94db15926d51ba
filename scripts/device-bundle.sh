#!/bin/sh
# A copy of this tree's tests and benchmarks for a machine without a
# compiler (a borrowed server): the binaries, the shared libraries they
# load, the Python package with its extension built for that machine's
# interpreter, and DIR/run.sh, which runs the native tests and prints every
# serving and server figure in one go (about 5 minutes on 16 cores).
# Build here, carry DIR, run `bash DIR/run.sh` there (QUICK=1: tiny
# shapes, to check the script; its figures mean nothing then).
#   sh scripts/device-bundle.sh [DIR]        DIR defaults to device/
# PYTHON_INCLUDE: the target interpreter's headers (e.g. a pyenv 3.12's
# include/python3.12); PYTHON_EXT_SUFFIX its extension suffix (default
# .cpython-312-x86_64-linux-gnu.so). Without PYTHON_INCLUDE the Python part
# is left out (run.sh says so).
# VARIANTS="NAME:FLAGS ...": also the library of a build with those C flags
# (comma-separated, e.g. pad:-DLA_DELTA_PACK_PAD=16), in DIR/variants/NAME,
# so that a script there can time it against this tree's library in one
# run: LD_LIBRARY_PATH=DIR/variants/NAME:DIR/lib DIR/bin/linattn-bench ...
set -eu
cd "$(dirname "$0")/.."
here=$PWD
dir=${1:-device}
build="build-device"
case "$dir" in /*) ;; *) dir=$here/$dir ;; esac
mkdir -p "$dir"
git check-ignore -q "$dir" || {
    echo "device-bundle: $dir is not git-ignored (the device tool carries ignored paths)" >&2
    exit 1
}
[ -d "$build" ] || meson setup "$build" --buildtype=release -Dsimde=disabled >/dev/null
ninja -C "$build" >/dev/null
rm -rf "$dir"
mkdir -p "$dir/bin" "$dir/lib"
for f in tools/linattn-bench tools/linattn-serve-bench tests/test_api tests/test_delta \
    tests/test_dispatch tests/test_dtypes tests/test_kernels tests/test_ops tests/test_serve \
    examples/continuous_batching examples/ggml_op; do
    cp "$build/$f" "$dir/bin/"
done
# every library the binaries load but the C runtime's
for f in "$dir"/bin/*; do ldd "$f"; done | awk '$2 == "=>" && $3 ~ /^\// {print $3}' | sort -u |
    grep -v -E '/(libc|libm|libpthread|libdl|librt|ld-linux[^/]*)\.so' | while read -r lib; do
    cp -L "$lib" "$dir/lib/"
done
cp -L "$build/liblinattn.so.2" "$dir/lib/" # for the Python extension
for v in ${VARIANTS:-}; do
    name=${v%%:*}
    flags=$(echo "${v#*:}" | tr ',' ' ')
    vb=build-device-$name
    if [ -d "$vb" ]; then
        meson configure "$vb" -Dc_args="$flags" >/dev/null
    else
        meson setup "$vb" --buildtype=release -Dsimde=disabled -Dtests=false \
            -Dc_args="$flags" >/dev/null
    fi
    ninja -C "$vb" >"$vb/device-bundle.log" 2>&1 || {
        echo "device-bundle: variant $name ($flags) does not build; see $vb/device-bundle.log" >&2
        exit 1
    }
    mkdir -p "$dir/variants/$name"
    cp -L "$vb/liblinattn.so.2" "$dir/variants/$name/"
done
cp -r scripts "$dir/scripts"
if [ -n "${PYTHON_INCLUDE:-}" ]; then
    suffix=${PYTHON_EXT_SUFFIX:-.cpython-312-x86_64-linux-gnu.so}
    mkdir -p "$dir/py/linattn"
    cp python/linattn/*.py "$dir/py/linattn/"
    cp -r python/linattn/integrations "$dir/py/linattn/"
    cp -r python/tests python/benchmarks "$dir/py/"
    # shellcheck disable=SC2016 # $ORIGIN is the loader's, not the shell's
    gcc -shared -fPIC -O2 -std=c11 -I"$PYTHON_INCLUDE" -Iinclude python/linattn/_ext.c \
        -o "$dir/py/linattn/_ext$suffix" -L"$dir/lib" -l:liblinattn.so.2 \
        -Wl,-rpath,'$ORIGIN/../../lib'
fi
cat >"$dir/run.sh" <<'EOF'
#!/bin/bash
# Written by scripts/device-bundle.sh: native tests, then every figure.
X=$(cd "$(dirname "$0")" && pwd)
export LD_LIBRARY_PATH=$X/lib
W=$(mktemp -d)
T0=$(date +%s)
step() { echo "== [$(($(date +%s) - T0)) s] $*"; }
step "native tests (each table this CPU runs, then through dispatch)"
for t in delta dtypes kernels; do
    for table in avx512 avx2; do
        LINATTN_TEST_TABLE=$table timeout 150 "$X/bin/test_$t" >"$W/$t-$table.log" 2>&1
        echo "test_$t[$table] rc=$?"
    done &
done
for t in ops serve api dispatch; do timeout 150 "$X/bin/test_$t" >"$W/$t.log" 2>&1; echo "test_$t rc=$?"; done
wait
grep -h -E "Failures: [1-9]|Errors: [1-9]|:[FE]:" "$W"/*.log | head -20
"$X/bin/continuous_batching" >/dev/null && echo "example continuous_batching ok"
"$X/bin/ggml_op" >/dev/null && echo "example ggml_op ok"
step "serve bench (ratios to the contiguous call; varlen and plan: 2 threads)"
if [ "${QUICK:-0}" = 1 ]; then # QUICK=1: tiny shapes, to check this script
    "$X/bin/linattn-serve-bench" --quick
else
    timeout 150 "$X/bin/linattn-serve-bench"
fi
step "server figures (linattn-bench JSON, one file per figure, under \$OUT/figures when set)"
F=${OUT:-$W}/figures
timeout 400 sh "$X/scripts/server-figures.sh" "$X/bin/linattn-bench" "$F" >/dev/null 2>&1
echo "server-figures rc=$?"
python3 - "$F" <<'PY'
import glob, json, os, sys
for path in sorted(glob.glob(os.path.join(sys.argv[1], '*.json'))):
    print('--', os.path.basename(path)[:-5])
    for line in open(path):
        if not line.startswith('{'):
            continue
        r = json.loads(line)
        if 'frac_peak' not in r and 'frac_bound' not in r:
            continue
        what = ' '.join(str(r.get(k, '')) for k in ('isa', 'kernel', 'gate', 'phi', 'dk'))
        figs = ' '.join('%s %.3g' % (k, r[k]) for k in ('frac_peak', 'frac_peak_threads',
                        'frac_bound', 'us_per_layer', 'us_p50') if k in r)
        print('  %s t%s B%s %s: %s' % (what, r.get('threads'), r.get('B'), r.get('mode', ''), figs))
PY
if [ -d "$X/py" ]; then
    step "python: decode fast path tests and overhead"
    (cd /tmp && PYTHONPATH=$X/py timeout 120 python3 -m pytest -q -p no:cacheprovider \
        "$X/py/tests/test_decode_in_place.py" 2>&1 | tail -n 2)
    (cd /tmp && PYTHONPATH=$X/py timeout 120 python3 "$X/py/benchmarks/bench_pool_decode.py" 2>&1 | tail -n 20)
else
    echo "python: not bundled (PYTHON_INCLUDE unset when it was built)"
fi
step done
EOF
chmod +x "$dir/run.sh"
du -sh "$dir" | awk '{print "device-bundle: " $2 ", " $1}'
