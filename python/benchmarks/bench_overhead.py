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


def per_call(fn, n, repeats=7):
    best = float('inf')
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn(n)
        best = min(best, time.perf_counter() - t0)
    return best / n


def main():
    B, H, K, V = (int(x) for x in sys.argv[1:5]) if len(sys.argv) == 5 else (1, 4, 64, 64)
    n = 20000
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

    c = min(bare(n) / n for _ in range(7))
    rows = [('C loop (linattn_step)', c)]
    rows.append(('linattn.step, o given', per_call(given_o, n)))
    rows.append(('linattn.step, o made', per_call(new_o, n)))
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
        rows.append(('linattn.step, torch tensors', per_call(torch_step, n)))

    print(f'decode step B={B} H={H} K={K} V={V}, isa {linattn.isa()}, best of 7 x {n} calls')
    for name, t in rows:
        extra = '' if name.startswith('C') else f'  (+{(t - c) * 1e6:.2f} us)'
        print(f'  {name:30s} {t * 1e6:8.2f} us/call{extra}')


if __name__ == '__main__':
    main()
