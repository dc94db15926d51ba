"""What a pooled decode step costs through the fla-style function.

Times fused_recurrent_gated_delta_rule with a state pool and
inplace_final_state=True (one token, B sequences) against linattn.delta_step
on a contiguous state of the same shape (the low-level call, itself about a
microsecond over the bare C step), both on one thread, and against the
extension's run_pool called directly with prebuilt index arrays (the C call
the function makes). Prints the per-call overhead of the fla layer, for a
K-first and a V-first pool. Run:
    python3 python/benchmarks/bench_pool_decode.py [B HV HK D]
(default 1 32 16 128: Qwen3-Next's Gated DeltaNet, a 2 MiB state per sequence).
"""

import os
import sys
import time

os.environ.setdefault('OMP_NUM_THREADS', '1')

import numpy as np  # noqa: E402

import linattn  # noqa: E402
from linattn import _ext  # noqa: E402
from linattn._api import _DELTA_FORWARD  # noqa: E402


def per_call(fn, n, repeats=7):
    best = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        best.append((time.perf_counter() - t0) / n)
    best.sort()
    return best[len(best) // 2]


def main():
    B, HV, HK, D = (int(x) for x in sys.argv[1:5]) if len(sys.argv) == 5 else (1, 32, 16, 128)
    rng = np.random.default_rng(0)
    q = rng.standard_normal((B, 1, HK, D), dtype=np.float32)
    k = rng.standard_normal((B, 1, HK, D), dtype=np.float32)
    v = rng.standard_normal((B, 1, HV, D), dtype=np.float32)
    g = -rng.random((B, 1, HV), dtype=np.float32)
    beta = rng.random((B, 1, HV), dtype=np.float32)
    slots = np.arange(B, dtype=np.int32)[::-1].copy() + 1
    n = 2000 if D <= 64 else 300

    # the contiguous step: q, k [B, HK, D], state [B, HV, D, D]
    s = np.zeros((B, HV, D, D), np.float32)
    qs, ks, vs = q[:, 0], k[:, 0], v[:, 0]
    gs, bs = g[:, 0], beta[:, 0]
    os_ = np.empty((B, HV, D), np.float32)
    t_step = per_call(lambda: linattn.delta_step(qs, ks, vs, bs, gs, s=s, o=os_, num_threads=1,
                                                 qk_l2norm=True, scale=D ** -0.5), n)
    print(f'shape B={B} HV={HV} HK={HK} D={D}, one thread')
    print(f'  linattn.delta_step (contiguous K-first)       {t_step * 1e6:9.1f} us')
    for v_first in (False, True):
        pool = np.zeros((B + 2, HV, D, D), np.float32)
        name = 'V-first' if v_first else 'K-first'

        def fla():
            linattn.fused_recurrent_gated_delta_rule(
                q, k, v, g=g, beta=beta, initial_state=pool, ssm_state_indices=slots,
                inplace_final_state=True, state_v_first=v_first, use_qk_l2norm_in_kernel=True)

        o = np.empty((B, 1, HV, D), np.float32)

        def bare():
            # the extension's argument list, as _fla._run_pool passes it: kind,
            # layout, q k v g beta o, pool z, gate phi algo causal normalize eps
            # scale chunk threads head_map qk_l2norm z_compensated, the input
            # stage (gate_act lower_bound beta_act A_log dt_bias), read/write/
            # snapshot slots, cu_seqlens, state_v_first
            _ext.run_pool(_DELTA_FORWARD, 'bthd', q, k, v, g, beta, o, pool, None, 'token',
                          'identity', 'recurrent', True, False, 1e-10, D ** -0.5, 0, 0,
                          'grouped', True, False, 'none', None, 'none', None, None,
                          slots, None, None, None, v_first)

        t_fla, t_bare = per_call(fla, n), per_call(bare, n)
        print(f'  fla function, {name} pool, in place          {t_fla * 1e6:9.1f} us'
              f'   (+{(t_fla - t_step) * 1e6:.1f} us over delta_step)')
        print(f'  _ext.run_pool, {name} pool                    {t_bare * 1e6:9.1f} us'
              f'   (fla layer: {(t_fla - t_bare) * 1e6:.1f} us per call)')


if __name__ == '__main__':
    main()
