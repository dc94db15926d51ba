#!/usr/bin/env python3
"""Plot a linattn-bench --sweep CSV: tokens/s against T, log-log, one line
per (kernel, isa, dk). The title names the machine (MACHINE, else the CPU
model of /proc/cpuinfo), today's date, the shape and the threads.

usage: plot_sweep.py SWEEP.csv OUT.png [MACHINE]
"""
import csv
import datetime
import sys
from collections import defaultdict

from machine import cpu_model

try:
    import matplotlib
except ImportError:
    sys.exit("plot_sweep.py: needs matplotlib (Debian: apt install python3-matplotlib, "
             "then run it with /usr/bin/python3)")

matplotlib.use("Agg")  # files only: no display on build machines
import matplotlib.pyplot as plt  # noqa: E402  (after the backend choice)


def main(argv):
    if len(argv) not in (3, 4):
        sys.stderr.write(__doc__)
        return 2
    src, out = argv[1], argv[2]
    machine = argv[3] if len(argv) == 4 else cpu_model()
    lines = defaultdict(list)
    shapes, threads = set(), set()
    with open(src, newline="") as f:
        for row in csv.DictReader(f):
            key = (row["kernel"], row["isa"], int(row["dk"]), row.get("gate", "none"))
            lines[key].append((int(row["T"]), float(row["tokens_per_s"])))
            shapes.add((row["B"], row["H"]))
            threads.add(row["threads"])
    if not lines:
        sys.stderr.write(f"plot_sweep.py: no rows in {src}\n")
        return 1

    gates = {k[3] for k in lines}
    fig, ax = plt.subplots(figsize=(9, 6))
    # colour: ISA; line style: kernel; marker: head size
    styles = {"forward_chunked": "-", "forward_recurrent": "--", "quadratic": ":"}
    colours = {"avx512": "tab:red", "avx2": "tab:blue", "neon": "tab:green",
               "scalar": "tab:gray", "c": "black"}
    markers = ["o", "s", "^", "D"]
    dks = sorted({k[2] for k in lines})
    for (kernel, isa, dk, gate), pts in sorted(lines.items()):
        pts.sort()
        label = f"{kernel} {isa} dk={dk}" + (f" gate={gate}" if len(gates) > 1 else "")
        ax.plot([t for t, _ in pts], [y for _, y in pts], styles.get(kernel, "-."),
                color=colours.get(isa), marker=markers[dks.index(dk) % len(markers)],
                markersize=4, label=label)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("sequence length T")
    ax.set_ylabel("tokens/s (B*H*T per second)")
    shape = ", ".join(f"B={b} H={h}" for b, h in sorted(shapes))
    nthreads = "/".join(sorted(threads, key=int))
    ax.set_title(f"linattn-bench sweep: {machine}, {datetime.date.today()}\n"
                 f"{shape}, dk = dv, {nthreads} thread(s)", fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
