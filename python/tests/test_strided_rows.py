"""fla-style functions on operands whose feature rows are strided.

transformers splits q, k and v out of a transposed convolution output, so
their last (head) dimension has a stride of T or more; fla's wrappers make
such inputs contiguous. linattn's functions copy exactly those operands (q,
k, v, a per-channel g) to C-contiguous ones, and read beta and per-token
gates through any strides. Each call here runs once on C-contiguous inputs
and once on the same values laid out with reversed strides (every dimension
strided, the last one included), through every path of _fla (one call,
cu_seqlens, a state pool in place, an initial state): results must be
bitwise the same, numpy and torch. The no-copy rule for the usual case is
checked on _rows itself.
"""

import numpy as np
import pytest

import linattn
from linattn import _fla

SEED = 3117
print(f'test_strided_rows: seed {SEED}')

B, T, HK, HV, K, V = 2, 70, 2, 4, 8, 6  # T over one 64-token chunk; grouped heads

# (function, gate argument and its per-head shape tail, takes beta)
FNS = {
    'chunk_linear_attn': (None, None, False),
    'fused_recurrent_linear_attn': (None, None, False),
    'chunk_simple_gla': ('g', (), False),
    'fused_recurrent_simple_gla': ('g', (), False),
    'chunk_gla': ('g', (K,), False),
    'fused_recurrent_gla': ('gk', (K,), False),
    'chunk_delta_rule': (None, None, True),
    'fused_recurrent_delta_rule': (None, None, True),
    'chunk_gated_delta_rule': ('g', (), True),
    'fused_recurrent_gated_delta_rule': ('g', (), True),
    'chunk_kda': ('g', (K,), True),
    'fused_recurrent_kda': ('g', (K,), True),
}
GROUPED = ('gated_delta', 'kda')  # functions that take fewer q/k heads than value heads


def reversed_strides(x):
    """x's values in a view whose strides run backwards (the last dimension
    has the largest stride), as a transposed buffer gives."""
    torch = _fla._torch_of(x)
    if torch is not None:
        buf = torch.empty(tuple(reversed(x.shape)), dtype=x.dtype)
        view = buf.permute(*reversed(range(x.dim())))
        view.copy_(x)
        return view
    view = np.empty(tuple(reversed(x.shape)), x.dtype).transpose()
    view[...] = x
    return view


def make(fn, kind, rng):
    gname, gtail, with_beta = FNS[fn]
    hk = HK if any(s in fn for s in GROUPED) else HV

    def r(*shape, lo=-1.0, hi=1.0):
        return (rng.random(shape, dtype=np.float32) * (hi - lo) + lo).astype(np.float32)

    args = [r(B, T, hk, K), r(B, T, hk, K), r(B, T, HV, V)]
    kw = {}
    if gname:
        kw[gname] = r(B, T, HV, *gtail, lo=-1.0, hi=0.0)
    if with_beta:
        kw['beta'] = r(B, T, HV, lo=0.0, hi=1.0)
    if 'delta' in fn or 'kda' in fn:
        kw['use_qk_l2norm_in_kernel'] = True
    if kind == 'torch':
        torch = pytest.importorskip('torch')
        args = [torch.from_numpy(a) for a in args]
        kw = {n: torch.from_numpy(x) if isinstance(x, np.ndarray) else x for n, x in kw.items()}
    return args, kw


def strided(args, kw):
    sargs = [reversed_strides(a) for a in args]
    q = sargs[0]
    assert (q.stride(-1) if hasattr(q, 'stride') else q.strides[-1] // q.itemsize) > 1
    return sargs, {n: reversed_strides(x) if hasattr(x, 'shape') else x for n, x in kw.items()}


def same(a, b, what):
    if isinstance(a, tuple):  # normalized linear attention's (S, z)
        assert isinstance(b, tuple) and len(a) == len(b), what
        for x, y in zip(a, b):
            same(x, y, what)
        return
    a = a.numpy() if hasattr(a, 'numpy') else a
    b = b.numpy() if hasattr(b, 'numpy') else b
    assert a.shape == b.shape and np.array_equal(a, b), f'{what} differs'


def state0(rng, kind, n=B):
    s = (rng.standard_normal((n, HV, K, V)) * 0.1).astype(np.float32)
    if kind == 'torch':
        import torch
        return torch.from_numpy(s)
    return s


@pytest.mark.parametrize('kind', ['numpy', 'torch'])
@pytest.mark.parametrize('fn', list(FNS))
def test_strided_rows_bitwise_as_contiguous(fn, kind):
    rng = np.random.default_rng(SEED)
    args, kw = make(fn, kind, rng)
    s0 = state0(rng, kind)
    f = getattr(linattn, fn)
    want_o, want_s = f(*args, initial_state=s0, output_final_state=True, **kw)
    sargs, skw = strided(args, kw)
    got_o, got_s = f(*sargs, initial_state=s0, output_final_state=True, **skw)
    same(got_o, want_o, 'o')
    same(got_s, want_s, 'final state')
    for a, b in zip(args, sargs):  # the caller's views are read only
        same(b, a, 'input')


@pytest.mark.parametrize('kind', ['numpy', 'torch'])
@pytest.mark.parametrize('fn', ['chunk_gated_delta_rule', 'fused_recurrent_gated_delta_rule',
                                'chunk_kda', 'fused_recurrent_kda', 'chunk_gla',
                                'fused_recurrent_simple_gla'])
def test_strided_rows_through_cu_seqlens_and_an_in_place_pool(fn, kind):
    """The other call path (_run_pool): packed sequences, and a decode into a
    state pool in place."""
    rng = np.random.default_rng(SEED + 1)
    args, kw = make(fn, kind, rng)
    args = [a[:1] for a in args]
    kw = {n: x[:1] if hasattr(x, 'shape') else x for n, x in kw.items()}
    f = getattr(linattn, fn)
    cu = np.array([0, 23, T], np.int64)
    want = f(*args, cu_seqlens=cu, output_final_state=True, **kw)
    sargs, skw = strided(args, kw)
    got = f(*sargs, cu_seqlens=cu, output_final_state=True, **skw)
    assert _fla._torch_of(sargs[2]) is None or sargs[2].stride(-1) > 1
    same(got[0], want[0], 'o (cu_seqlens)')
    same(got[1], want[1], 'final states (cu_seqlens)')
    # one token into slot 2 of a pool of 3, in place
    def first(a, kw):  # token 0, keeping the views' strides
        return [x[:, :1] for x in a], {n: x[:, :1] if hasattr(x, 'shape') else x
                                       for n, x in kw.items()}
    one, kw1 = first(args, kw)
    pools = [state0(rng, kind, 3) for _ in range(2)]
    pools[1][...] = pools[0]
    idx = np.array([2], np.int32)
    want_o, _ = f(*one, initial_state=pools[0], ssm_state_indices=idx, inplace_final_state=True,
                  **kw1)
    sone, skw1 = first(sargs, skw)
    got_o, _ = f(*sone, initial_state=pools[1], ssm_state_indices=idx, inplace_final_state=True,
                 **skw1)
    same(got_o, want_o, 'o (pool)')
    same(pools[1], pools[0], 'pool')


@pytest.mark.parametrize('kind', ['numpy', 'torch'])
def test_rows_copies_only_strided_rows(kind):
    rng = np.random.default_rng(SEED + 2)
    x = rng.random((2, 5, 3, 4), dtype=np.float32)
    if kind == 'torch':
        torch = pytest.importorskip('torch')
        x = torch.from_numpy(x)
        sliced = x[:, ::2]                              # strided tokens, contiguous rows
        expanded = x[:, :1].expand(2, 5, 3, 4)          # stride 0 over tokens
        col = x[..., :1]                                # one column: rows of size 1
        rows = x.transpose(2, 3)                        # strided rows
        assert rows.stride(-1) != 1
    else:
        sliced, expanded = x[:, ::2], np.broadcast_to(x[:, :1], (2, 5, 3, 4))
        col, rows = x[..., :1], x.transpose(0, 1, 3, 2)
    for y in (x, sliced, expanded, col):
        assert _fla._rows(y) is y
    c = _fla._rows(rows)
    assert c is not rows
    same(c, rows, 'copy')
    if kind == 'torch':
        assert c.is_contiguous()
    else:
        assert c.flags.c_contiguous
    assert _fla._rows(None) is None
