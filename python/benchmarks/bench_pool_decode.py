"""What a pooled decode step costs through the fla-style function, over C.

Times fused_recurrent_gated_delta_rule with a state pool and
inplace_final_state=True (one token, B sequences, one thread) against
  - the bare C call (linattn_run n times on arguments read once,
    _ext.run_pool_loop): the floor;
  - the extension's run_pool with a preallocated o (the C call plus reading
    the arguments);
  - linattn.delta_step on a contiguous K-first state of the same shape;
and transformers' decode call (the cache's state in place, no slots),
through the fla function and through the drop-in's replacement. For
a K-first and a V-first pool, with numpy arrays and (when torch is
installed) torch tensors under torch.no_grad(), as a serving engine calls
it. Rounds interleave the variants so a busy machine slows them alike; each
keeps its best round (the layer's cost is a few microseconds beside a kernel
of 100 or more, so medians of a shared machine drown it). The tiny shape
(1 sequence, 2 heads, K = V = 16) shows the layers' cost alone. Run:
    python3 python/benchmarks/bench_pool_decode.py [B HV HK D]
(default 1 32 16 128: Qwen3-Next's Gated DeltaNet, a 2 MiB state per
sequence, then the tiny shape).
"""

import contextlib
import os
import sys
import time

os.environ.setdefault('OMP_NUM_THREADS', '1')

import numpy as np  # noqa: E402

import linattn  # noqa: E402
from linattn import _ext  # noqa: E402
from linattn._api import _DELTA_FORWARD  # noqa: E402

try:
    import torch  # noqa: E402
except ImportError:
    torch = None


def best_per_call(variants, n, rounds):
    """{name: best seconds per call} over interleaved rounds of n calls."""
    best = {name: float('inf') for name in variants}
    for _ in range(rounds):
        for name, fn in variants.items():
            t0 = time.perf_counter()
            r = fn(n)
            t = (r if r is not None else time.perf_counter() - t0) / n
            best[name] = min(best[name], t)
    return best


def one_shape(B, HV, HK, D, kind):
    rng = np.random.default_rng(0)
    q = rng.standard_normal((B, 1, HK, D), dtype=np.float32)
    k = rng.standard_normal((B, 1, HK, D), dtype=np.float32)
    v = rng.standard_normal((B, 1, HV, D), dtype=np.float32)
    g = -rng.random((B, 1, HV), dtype=np.float32)
    beta = rng.random((B, 1, HV), dtype=np.float32)
    slots = np.arange(B, dtype=np.int32)[::-1].copy() + 1
    s = np.zeros((B, HV, D, D), np.float32)
    os_ = np.empty((B, HV, D), np.float32)
    o = np.empty((B, 1, HV, D), np.float32)
    pools = {vf: np.zeros((B + 2, HV, D, D), np.float32) for vf in (False, True)}
    as_kind = (lambda x: x) if kind == 'numpy' else torch.from_numpy
    q, k, v, g, beta, slots, s, os_, o = (as_kind(x) for x in (q, k, v, g, beta, slots, s, os_, o))
    pools = {vf: as_kind(p) for vf, p in pools.items()}
    qs, ks, vs, gs, bs = q[:, 0], k[:, 0], v[:, 0], g[:, 0], beta[:, 0]
    scale = D ** -0.5

    def run_args(v_first):
        # the extension's argument list, as _fla._run_pool passes it: kind,
        # layout, q k v g beta o, pool z, gate phi algo causal normalize eps
        # scale chunk threads head_map qk_l2norm z_compensated, the input
        # stage (gate_act lower_bound beta_act A_log dt_bias), read/write/
        # snapshot slots, cu_seqlens, state_v_first
        return (_DELTA_FORWARD, 'bthd', q, k, v, g, beta, o, pools[v_first], None, 'token',
                'identity', 'recurrent', True, False, 1e-10, scale, 0, 0, 'grouped', True,
                False, 'none', None, 'none', None, None, slots, None, None, None, v_first)

    def loop(fn):
        def run(n):
            for _ in range(n):
                fn()
        return run

    variants = {'delta_step, contiguous K-first': loop(lambda: linattn.delta_step(
        qs, ks, vs, bs, gs, s=s, o=os_, num_threads=1, qk_l2norm=True, scale=scale))}
    for v_first in (False, True):
        name = 'V-first' if v_first else 'K-first'
        a = run_args(v_first)
        variants[f'C linattn_run, {name} pool'] = (
            lambda n, a=a: _ext.run_pool_loop(n, *a))
        variants[f'_ext.run_pool, {name} pool'] = loop(lambda a=a: _ext.run_pool(*a))
        variants[f'fla function, {name} pool'] = loop(
            lambda vf=v_first: linattn.fused_recurrent_gated_delta_rule(
                q, k, v, g=g, beta=beta, initial_state=pools[vf], ssm_state_indices=slots,
                inplace_final_state=True, state_v_first=vf, use_qk_l2norm_in_kernel=True))
    # transformers' decode (the integration's call): the cache's own state
    # [B, HV, K, V] in place, no slots; beside the K-first pool's C call
    variants['fla function, cache state in place'] = loop(
        lambda: linattn.fused_recurrent_gated_delta_rule(
            q, k, v, g=g, beta=beta, initial_state=s, output_final_state=True,
            inplace_final_state=True, use_qk_l2norm_in_kernel=True))
    if kind == 'torch':  # the same call through the transformers drop-in's replacement
        from linattn.integrations.transformers import make_replacement
        rep = make_replacement('gdn_recurrent', None)
        variants['transformers drop-in, in place'] = loop(
            lambda: rep(q, k, v, g=g, beta=beta, initial_state=s, output_final_state=True,
                        use_qk_l2norm_in_kernel=True))
    small = HV * D * D <= 1 << 16
    best = best_per_call(variants, 2000 if small else 100, 40 if small else 15)
    print(f'B={B} HV={HV} HK={HK} D={D}, {kind}, one thread, best round (us per call)')
    for name, t in best.items():
        extra = ''
        if name.startswith(('fla', '_ext', 'transformers')):
            pool = name.split(', ')[1]
            floor = best['C linattn_run, ' + (pool if pool.endswith('pool') else 'K-first pool')]
            extra = f'   (+{(t - floor) * 1e6:.1f} us over the C call)'
        print(f'  {name:34s} {t * 1e6:9.2f}{extra}')


def main():
    shapes = ([tuple(int(x) for x in sys.argv[1:5])] if len(sys.argv) == 5
              else [(1, 32, 16, 128), (1, 2, 1, 16)])
    print(f'isa {linattn.isa()}, Python {sys.version.split()[0]}, '
          f'torch {torch.__version__ if torch else "not installed"}')
    for shape in shapes:
        for kind in ('numpy', 'torch') if torch is not None else ('numpy',):
            ctx = torch.no_grad() if torch is not None else contextlib.nullcontext()
            with ctx:
                one_shape(*shape, kind)


if __name__ == '__main__':
    main()
