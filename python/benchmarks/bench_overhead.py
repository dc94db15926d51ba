"""What a decode step costs through Python, over the bare C call.

Times linattn_step called n times from C (linattn._ext.step_loop) against
linattn.step called n times from Python, on the same buffers, and prints the
difference per call. Run: python3 python/benchmarks/bench_overhead.py [B H K V]
"""

import sys
import time

import numpy as np

import linattn
from linattn import _ext


def timed(fn, n):
    t0 = time.perf_counter()
    fn(n)
    return (time.perf_counter() - t0) / n


def main():
    B, H, K, V = (int(x) for x in sys.argv[1:5]) if len(sys.argv) == 5 else (1, 4, 64, 64)
    n, repeats = 20000, 9
    rng = np.random.default_rng(0)
    q, k = (rng.standard_normal((B, H, K), dtype=np.float32) for _ in range(2))
    v = rng.standard_normal((B, H, V), dtype=np.float32)
    o = np.empty((B, H, V), np.float32)
    s, z = np.zeros((B, H, K, V), np.float32), np.zeros((B, H, K), np.float32)

    def bare(n):
        return _ext.step_loop(q, k, v, o, s, z, n)

    def given_o(n):
        for _ in range(n):
            linattn.step(q, k, v, s=s, z=z, o=o, num_threads=1)

    def new_o(n):
        for _ in range(n):
            linattn.step(q, k, v, s=s, z=z, num_threads=1)

    variants = [('C loop (linattn_step)', bare),
                ('linattn.step, o given', given_o), ('linattn.step, o made', new_o)]
    try:
        import torch
    except ImportError:
        torch = None
    if torch is not None:
        tq, tk, tv = (torch.from_numpy(x) for x in (q, k, v))
        ts, tz, to = (torch.from_numpy(x) for x in (s, z, o))

        def torch_step(n):
            for _ in range(n):
                linattn.step(tq, tk, tv, s=ts, z=tz, o=to, num_threads=1)
        variants.append(('linattn.step, torch tensors', torch_step))

    # Rounds interleave the variants so that a busy machine slows them alike;
    # each keeps its best round.
    best = [float('inf')] * len(variants)
    for _ in range(repeats):
        for i, (_, fn) in enumerate(variants):
            best[i] = min(best[i], timed(fn, n))
    c = best[0]
    rows = [(name, t) for (name, _), t in zip(variants, best)]
    print(f'decode step B={B} H={H} K={K} V={V}, isa {linattn.isa()}, best of {repeats} x {n} calls')
    for name, t in rows:
        extra = '' if name.startswith('C') else f'  (+{(t - c) * 1e6:.2f} us)'
        print(f'  {name:30s} {t * 1e6:8.2f} us/call{extra}')


if __name__ == '__main__':
    main()
