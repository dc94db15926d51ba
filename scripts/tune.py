#!/usr/bin/env python3
"""Measure the choices each kernel table makes from measurements, on this
machine, and print them as Markdown tables to paste into docs/kernels.md:

  crossover  chunked against value-tiled recurrent forward, per table, dk
             and gate (AUTO's choice: `additive_chunked_above_dk`);
  chunks     the chunked forward's tokens/s against the chunk length, and
             the library's default (`additive_chunk`);
  struct     each table's `la_tuning` entry (src/tuning.h) for this machine,
             from the two tables above, to paste into the table's source.

Each figure is the best of --repeat runs of linattn-bench (one thread,
B=1, H=8, elu+1 normalised, T=4096; T=2048 at dk=256); the cases compared
run in turn within each round, so that a change in the machine's load
falls on all of them. Where the winner's margin is no larger than the
runs' spread (best over worst of either case), the tables say so and the
entry prints `?` for that field with a comment naming it: on a shared
host (a 2-vCPU Zen 3 spread 20-30%) keep the entry's value or rerun with
a larger --repeat. Run it on an idle machine: the bench's in-run FMA peak
is printed with each table so that figures from different machines
compare as fractions of their peak.

usage: tune.py [--bench PATH] [--isa NAME|all] [--repeat N] [--chunks] [--quick]
  --quick   tiny shapes, short timings, one run: checks that the script and
            the bench agree (the figures mean nothing)
"""
import argparse
import datetime
import json
import subprocess
import sys

from machine import cpu_model

GATES = ("none", "token", "channel")
CHUNKS = (16, 24, 32, 48, 64)


def bench_once(args, kernel, shape, gate, chunk=None):
    """One run's tokens/s per ISA: {isa: (tokens_per_s, row)}."""
    cmd = [args.bench, "--json", "--isa", args.isa, "--kernel", kernel, "--gate", gate,
           "--shape", ",".join(str(x) for x in shape), "--threads", "1"]
    if chunk is not None:
        cmd += ["--chunk", str(chunk)]
    if args.quick:
        cmd.insert(1, "--quick")  # short timings; the shape above still applies
    got = {}
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    for line in out.splitlines():
        if not line.startswith("{"):
            continue
        row = json.loads(line)
        if row.get("kernel") != kernel or row.get("baseline") or "tokens_per_s" not in row:
            continue
        got[row["isa"]] = (row["tokens_per_s"], row)
        TUNING_SEEN.add(row.get("tuning", "?"))
    return got


def interleaved(args, runs):
    """runs: {name: (kernel, shape, gate, chunk)}, each run --repeat times,
    one after another in each round, so that a change in the machine's load
    falls on all of them. Returns {name: {isa: Figure}}."""
    seen = {name: {} for name in runs}
    for _ in range(args.repeat):
        for name, (kernel, shape, gate, chunk) in runs.items():
            for isa, (tps, row) in bench_once(args, kernel, shape, gate, chunk).items():
                seen[name].setdefault(isa, []).append((tps, row))
    return {name: {isa: Figure(v) for isa, v in per.items()} for name, per in seen.items()}


class Figure:
    """A case's runs: the best (what the table prints: a busy machine only
    slows a run down) and the spread, best over worst."""

    def __init__(self, runs):
        self.best, self.row = max(runs, key=lambda r: r[0])
        worst = min(r[0] for r in runs)
        self.spread = self.best / worst if worst > 0 else float("inf")


def decided(margin, *figures):
    """Whether a margin between figures stands out of their runs' spread:
    with one run each there is no spread to compare, so it stands."""
    return margin > max(f.spread for f in figures)


def mtok(x):
    return "%.3g" % (x / 1e6)


def crossover(args, shapes):
    """Prints the table; returns {(isa, dk, gate): True where chunked is
    faster, None where the two are within their runs' spread}."""
    won = {}
    print("| table | dk=dv | T | gate | chunked | recurrent | faster | spread | peak GFLOP/s |")
    print("|---|---|---|---|---|---|---|---|---|")
    for (B, H, T, dk) in shapes:
        for gate in GATES:
            shape = (B, H, T, dk, dk)
            got = interleaved(args, {"c": ("forward_chunked", shape, gate, None),
                                     "r": ("forward_recurrent", shape, gate, None)})
            c, r = got["c"], got["r"]
            for isa in sorted(set(c) & set(r)):
                tc, tr = c[isa].best, r[isa].best
                margin = max(tc, tr) / min(tc, tr)
                spread = max(c[isa].spread, r[isa].spread)
                if decided(margin, c[isa], r[isa]):
                    faster = "%s (%.2fx)" % ("recurrent" if tr > tc else "chunked", margin)
                    won[(isa, dk, gate)] = tc >= tr
                else:
                    faster = "neither: %.2fx within the spread" % margin
                    won[(isa, dk, gate)] = None
                print("| %s | %d | %d | %s | %s | %s | %s | %.2fx | %.0f |" % (
                    isa, dk, T, gate, mtok(tc), mtok(tr), faster, spread,
                    r[isa].row["peak_gflops"]))
    return won


def chunks(args, shapes):
    """Prints the table; returns {(isa, dk, gate): the fastest chunk, or
    None where it is not faster than the library's default by more than
    the runs' spread}."""
    bests = {}
    print("| table | dk=dv | gate | " + " | ".join("chunk %d" % n for n in CHUNKS) +
          " | default | best | spread |")
    print("|---|---|---|" + "---|" * (len(CHUNKS) + 3))
    for (B, H, T, dk) in shapes:
        for gate in GATES:
            shape = (B, H, T, dk, dk)
            runs = {n: ("forward_chunked", shape, gate, n) for n in CHUNKS}
            runs[0] = ("forward_chunked", shape, gate, 0)
            got = interleaved(args, runs)
            for isa in sorted(got[0]):
                figures = {n: got[n][isa] for n in CHUNKS if isa in got[n]}
                best = max(figures, key=lambda n: figures[n].best)
                default = got[0][isa]
                spread = max([f.spread for f in figures.values()] + [default.spread])
                margin = figures[best].best / default.best
                bests[(isa, dk, gate)] = best if decided(margin, figures[best], default) else None
                print("| %s | %d | %s | %s | %s | %s | %.2fx |" % (
                    isa, dk, gate, " | ".join(mtok(figures[n].best) for n in CHUNKS),
                    mtok(default.best),
                    best if bests[(isa, dk, gate)]
                    else "default (%d not faster by more than the spread)" % best,
                    spread))
    return bests


# the library's key for this CPU, as every bench row names it ("tuning":
# linattn_tuning_name), so that the script never repeats src/cpu.c
TUNING_SEEN = set()


def cpu_key():
    """vendor, family, model from /proc/cpuinfo (for the entry's comment),
    and the la_uarch key the library reported in the bench's rows."""
    if len(TUNING_SEEN) != 1:
        raise RuntimeError("the bench rows name %s tuning entries, not one (a build older "
                           "than linattn_tuning_name?)" % (sorted(TUNING_SEEN) or "no"))
    key = "LA_UARCH_" + next(iter(TUNING_SEEN)).upper()
    info = {}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if ":" in line:
                    k, v = (x.strip() for x in line.split(":", 1))
                    info.setdefault(k, v)
    except OSError:
        pass
    vendor, family = info.get("vendor_id", "?"), int(info.get("cpu family", "0") or 0)
    model = info.get("model", "?")
    return "%s family %d model %s" % (vendor, family, model), key


def threshold(won, isa, gate, dks):
    """additive_chunked_above_dk for one gate: the largest dk measured where
    the recurrent form won, when the chunked form won at every larger one;
    "?" when a case of the gate was within its runs' spread."""
    if any((isa, dk, gate) in won and won[(isa, dk, gate)] is None for dk in dks):
        return "?"  # a case within its runs' spread: the entry's comment names it
    above = "0"
    for dk in sorted(dks):
        if won.get((isa, dk, gate)) is False:
            above = str(dk)
    # a recurrent win above a chunked one: the recurrent form up to there
    return "LA_TUNE_NEVER" if above == str(max(dks)) else above


def struct(won, bests, dks):
    cpu, key = cpu_key()
    isas = sorted({k[0] for k in won})
    for isa in isas:
        print("/* %s table: scripts/tune.py on %s (%s), %s */" %
              (isa, cpu_model(), cpu, datetime.date.today().isoformat()))
        print("{")
        print("    .uarch = %s," % key)
        unsure = ["%s dk %d" % (g, dk) for (i, dk, g), w in sorted(won.items())
                  if i == isa and w is None]
        unsure += ["chunk %s dk %d" % (g, dk) for (i, dk, g), b in sorted(bests.items())
                   if i == isa and b is None]
        if unsure:
            print("    /* not told apart here (a margin within the runs' spread, or no")
            print("     * chunk faster than the default): keep the entry's value, or rerun")
            print("     * with a larger --repeat on an idle machine, for:")
            for i in range(0, len(unsure), 4):
                print("     * %s%s" % (", ".join(unsure[i:i + 4]),
                                       " */" if i + 4 >= len(unsure) else ","))
        print("    .additive_chunked_above_dk = {%s}," %
              ", ".join(threshold(won, isa, g, dks) for g in GATES))
        if bests:
            # row 0 is used for dk, dv <= 64, row 1 above: the nearest dk measured
            measured = sorted({k[1] for k in bests if k[0] == isa})
            small = [d for d in measured if d <= 64] or measured[:1]
            large = [d for d in measured if d > 64] or small
            rows = []
            for dk in (small[-1], large[0]):
                rows.append("{%s}" % ", ".join(str(bests.get((isa, dk, g)) or "?")
                                               for g in GATES))
            print("    .additive_chunk = {%s}," % ", ".join(rows))
        else:
            print("    /* .additive_chunk: run with --chunks */")
        print("    LA_DELTA_TUNING_ZEN4, /* the delta family: not measured by tune.py */")
        # tune.py cannot force these (they change kernels, not call options):
        # docs/kernels.md measured each with variant builds, one field at a time
        print("    /* from variant builds (docs/kernels.md), to fill in: .delta_pack_from_T,")
        print("     * .delta_pack_columns, .delta_pair_from_T, .delta_pair_below_T,")
        print("     * .additive_pack_from_T,")
        print("     * .additive_quad_from_T, .delta_step_columns, .delta_step_fuse,")
        print("     * .delta_step_bf16_sweep_fetch, .delta_step_rows_bytes,")
        print("     * .delta_vfirst_read_ahead, .delta_vfirst_dot_interleave,")
        print("     * .additive_fetch_tokens */")
        print("},")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bench", default="build/tools/linattn-bench")
    p.add_argument("--isa", default="all", help="a table name, or all this CPU can run")
    p.add_argument("--repeat", type=int, default=2,
                   help="runs per figure (best kept; 2 or more give a spread)")
    p.add_argument("--chunks", action="store_true", help="also the chunk-length table")
    p.add_argument("--quick", action="store_true", help="tiny shapes, one run")
    args = p.parse_args()
    if args.repeat < 1:
        p.error("--repeat takes a positive count")
    if args.quick:
        args.repeat = 1
        shapes = [(1, 2, 64, 16)]
    else:
        shapes = [(1, 8, 4096, 64), (1, 8, 4096, 128), (1, 8, 2048, 256)]
    print("Measured with scripts/tune.py on %s, %s: one thread, B=1, H=%d, elu+1 "
          "normalised; millions of tokens/s, best of %d.\n" %
          (cpu_model(), datetime.date.today().isoformat(), shapes[0][1], args.repeat))
    try:
        won = crossover(args, shapes)
        bests = {}
        if args.chunks:
            print()
            bests = chunks(args, shapes[:2])
        print()
        struct(won, bests, [s[3] for s in shapes])
    except (OSError, subprocess.CalledProcessError, RuntimeError) as e:
        sys.exit("tune.py: running %s failed: %s" % (args.bench, e))
    return 0


if __name__ == "__main__":
    sys.exit(main())
