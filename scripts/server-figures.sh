#!/bin/sh
# Every figure of issue 26 in one run (a few minutes on an idle machine), as
# JSON lines of linattn-bench plus scripts/tune.py's tables and tuning
# entries: for a machine borrowed briefly (a many-core Xeon), so that its
# figures can be set beside this project's in docs/kernels.md.
#   sh scripts/server-figures.sh [BENCH] [OUT_DIR]
# BENCH defaults to build/tools/linattn-bench; OUT_DIR to figures-<host>.
# QUICK=1: tiny shapes and short timings, to check the script (the figures
# mean nothing then).
set -eu
cd "$(dirname "$0")/.."
bench=${1:-build/tools/linattn-bench}
out=${2:-figures-$(hostname)}
mkdir -p "$out"
ncpu=$(getconf _NPROCESSORS_ONLN)
quick=
[ "${QUICK:-0}" = 1 ] && quick=--quick
run() { # run NAME ARGS...: one JSON file per figure
    name=$1
    shift
    echo "== $name: $*" >&2
    "$bench" --json $quick "$@" >"$out/$name.json"
}
grep -m1 "model name" /proc/cpuinfo >"$out/cpu.txt" || true
grep -m1 -E "^(cpu family|model)\s" /proc/cpuinfo >>"$out/cpu.txt" || true
# one thread: the recurrent forms against the in-run FMA peak, every table
run delta-recurrent --isa all --family delta --kernel recurrent --gate all
run additive-default --isa all --kernel all
run additive-identity --isa all --kernel all --phi identity --normalize 0 \
    --shape 1,8,4096,128,128
run additive-identity64 --isa all --kernel all --phi identity --normalize 0
# threads: Gated DeltaNet prefill and decode step, 1, 8 and all threads
for t in 1 8 "$ncpu"; do
    run "delta-prefill-t$t" --family delta --kernel recurrent --gate token --threads "$t"
    run "delta-step-t$t" --family delta --decode 2000 --gate token --threads "$t"
done
# whole-model decode: 36 layers, B = 1 and 8, one thread and all (each row
# also against the two-pass reference), and through a V-first pool
run model --model 36 --threads "$ncpu"
run model-vfirst --model 36 --threads "$ncpu" --pool vfirst
# an additive model's decode: 24 layers of 4 large heads (GLA, RetNet:
# dk 256, dv 512, no normaliser), each head's columns shared over threads
run model-additive --model 24 --family additive --normalize 0 --phi identity \
    --shape 1,4,1,256,512 --threads "$ncpu"
# the delta rule's decode with heads wider than its 128-column tile (fla's
# Gated DeltaNet layer: dk 256, dv 512), whose rows are read in pieces
run model-delta-wide --model 24 --family delta --gate token --shape 1,4,1,256,512 \
    --threads "$ncpu"
# a bfloat16 state's decode step over a float32 one's (the bf16_state goal):
# B = 8 and B = 32 (from memory), the table AUTO runs (avx512bf16 where the
# CPU has AVX512-BF16) and the plain avx512 table beside it
run goals-step --family delta --kernel step --gate token --goals
run goals-step-b32 --family delta --kernel step --gate token --goals --shape 32,32,1,128,128
LINATTN_TEST_CPU_OFF=avx512bf16 run goals-step-b32-no-bf16 --family delta --kernel step \
    --gate token --goals --shape 32,32,1,128,128
# serving pools' decode steps against the contiguous call
serve="$(dirname "$bench")/linattn-serve-bench"
if [ -n "$quick" ]; then
    "$serve" --quick >"$out/serve-quick.json"
else
    for c in pool_decode pool_decode_bf16 pool_decode_threads; do
        echo "== serve $c" >&2
        "$serve" "$c" >"$out/serve-$c.json"
    done
fi
# AUTO's crossover and chunk lengths, and the la_tuning entries they give,
# for the table this CPU dispatches to (every table's, the scalar one's
# included, ran past the device bundle's 400 s on the Xeon)
python3 scripts/tune.py --isa auto --chunks --bench "$bench" $quick >"$out/tune.md"
echo "figures in $out" >&2
