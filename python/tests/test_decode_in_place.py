"""A serving engine's decode call of the fla-style functions (a state pool
updated in place, one slot per sequence), and transformers' (the cache's
state in place, no slots), goes through the extension's
in_place(), which does the Python layer's work there; a call it cannot take
as it is (an operand to convert or copy, a tensor that needs a gradient, a
fault) goes back to that layer. These tests compare the two paths bit for
bit, check that the fast one is taken, and check every way back."""

import os

import numpy as np
import pytest

import linattn
from linattn import _ext

SEED = (int(os.environ.get('LINATTN_TEST_SEED', '0') or 0)
        or int.from_bytes(os.urandom(4), 'little'))
RNG = np.random.default_rng(SEED)


@pytest.fixture(autouse=True)
def _print_seed():
    """The seed, in every test's captured output (shown when it fails)."""
    print(f'LINATTN_TEST_SEED={SEED}')
    yield

H, K, V, SLOTS = 4, 9, 6, 6  # odd feature sizes on purpose
FNS = ['chunk_gated_delta_rule', 'fused_recurrent_gated_delta_rule', 'chunk_delta_rule',
       'fused_recurrent_delta_rule', 'chunk_kda', 'fused_recurrent_kda', 'chunk_simple_gla',
       'fused_recurrent_simple_gla', 'chunk_gla', 'fused_recurrent_gla',
       'fused_recurrent_linear_attn']


def f32(*shape, lo=-1.0, hi=1.0):
    return RNG.uniform(lo, hi, shape).astype(np.float32)


def args_of(fn, B, T):
    q, k, v = f32(B, T, H, K, lo=0.1), f32(B, T, H, K, lo=0.1), f32(B, T, H, V)
    kw = {}
    if 'gated_delta' in fn or 'simple_gla' in fn:
        kw['g'] = f32(B, T, H, lo=-1, hi=0)
    elif 'gla' in fn or 'kda' in fn:
        kw['gk' if fn == 'fused_recurrent_gla' else 'g'] = f32(B, T, H, K, lo=-1, hi=0)
    if 'delta' in fn or 'kda' in fn:
        kw['beta'] = f32(B, T, H, lo=0, hi=1)
        kw['use_qk_l2norm_in_kernel'] = True
    return q, k, v, kw


class Spy:
    """Wraps _ext.in_place; taken records whether each call returned o."""

    def __init__(self, monkeypatch, general=False):
        self.taken = []
        real = _ext.in_place

        def spy(*a):
            o = None if general else real(*a)
            self.taken.append(o is not None)
            return o
        monkeypatch.setattr(_ext, 'in_place', spy)


def run(fn, q, k, v, kw, pool, idx, v_first):
    if v_first:
        kw = dict(kw, state_v_first=True)
    return getattr(linattn, fn)(q, k, v, initial_state=pool, ssm_state_indices=idx,
                                inplace_final_state=True, **kw)


K_FIRST_ONLY = ('chunk_delta_rule', 'fused_recurrent_delta_rule', 'fused_recurrent_linear_attn')


@pytest.mark.parametrize('fn, v_first', [(f, vf) for f in FNS for vf in (False, True)
                                         if not (vf and f in K_FIRST_ONLY)])
@pytest.mark.parametrize('T', [1, 2])
@pytest.mark.parametrize('slots', ['slots', 'a state per sequence'])
def test_fast_path_gives_the_general_paths_bits(fn, v_first, T, slots, monkeypatch):
    B = 3
    q, k, v, kw = args_of(fn, B, T)
    # -1: a padding row; without slots (transformers' cache) sequence n is state n
    idx = np.array([4, -1, 0], np.int32) if slots == 'slots' else None
    pool0 = f32(SLOTS if slots == 'slots' else B, H, *((V, K) if v_first else (K, V)),
                lo=-0.3, hi=0.3)
    fast = Spy(monkeypatch)
    pool = pool0.copy()
    o, st = run(fn, q, k, v, kw, pool, idx, v_first)
    assert fast.taken == [True] and st is pool
    Spy(monkeypatch, general=True)
    pool_g = pool0.copy()
    o_g, _ = run(fn, q, k, v, kw, pool_g, idx, v_first)
    np.testing.assert_array_equal(pool, pool_g)
    assert o.flags.c_contiguous and o.dtype == np.float32
    if idx is None:
        np.testing.assert_array_equal(o, o_g)
        assert not np.array_equal(pool, pool0)
        return
    np.testing.assert_array_equal(o[[0, 2]], o_g[[0, 2]])  # a padding row's o is not written
    assert not np.array_equal(pool[4], pool0[4])
    np.testing.assert_array_equal(pool[[1, 2, 3, 5]], pool0[[1, 2, 3, 5]])


def test_torch_fast_path(monkeypatch):
    torch = pytest.importorskip('torch', reason='torch is not installed')
    fn = 'fused_recurrent_gated_delta_rule'
    q, k, v, kw = args_of(fn, 2, 1)
    pool0 = f32(SLOTS, H, V, K, lo=-0.3, hi=0.3)
    want_pool = pool0.copy()
    want_o, _ = run(fn, q, k, v, kw, want_pool, np.array([1, 3], np.int32), True)
    t = {a: torch.from_numpy(b) if isinstance(b, np.ndarray) else b for a, b in kw.items()}
    pool = torch.from_numpy(pool0.copy())
    fast = Spy(monkeypatch)
    with torch.no_grad():
        o, st = run(fn, *(torch.from_numpy(x) for x in (q, k, v)), t, pool,
                    torch.tensor([1, 3], dtype=torch.int32), True)
    assert fast.taken == [True] and st is pool
    assert isinstance(o, torch.Tensor) and o.dtype == torch.float32 and o.is_contiguous()
    np.testing.assert_array_equal(o.numpy(), want_o)
    np.testing.assert_array_equal(pool.numpy(), want_pool)


@pytest.mark.parametrize('case', ['strided rows', 'int64 slots', 'slots as a list',
                                  'float64 gate', 'slots not contiguous'])
def test_ways_back_give_the_same_result(case, monkeypatch):
    """Calls the extension does not take as they are: the Python layer
    converts or copies, with the same result."""
    fn = 'fused_recurrent_gated_delta_rule'
    q, k, v, kw = args_of(fn, 2, 1)
    idx = np.array([5, 2], np.int32)
    pool0 = f32(SLOTS, H, V, K, lo=-0.3, hi=0.3)
    want_pool = pool0.copy()
    want_o, _ = run(fn, q, k, v, kw, want_pool, idx, True)
    if case == 'strided rows':
        wide = np.zeros(q.shape[:3] + (2 * K,), np.float32)
        wide[..., ::2] = q
        q = wide[..., ::2]
    elif case == 'int64 slots':
        idx = idx.astype(np.int64)
    elif case == 'slots as a list':
        idx = [5, 2]
    elif case == 'float64 gate':
        kw = dict(kw, g=kw['g'].astype(np.float64))

    else:
        idx = np.array([5, 0, 2, 0], np.int32)[::2]
    spy = Spy(monkeypatch)
    pool = pool0.copy()
    o, _ = run(fn, q, k, v, kw, pool, idx, True)
    assert spy.taken == [False]
    np.testing.assert_array_equal(o, want_o)
    np.testing.assert_array_equal(pool, want_pool)


def test_permuted_operands_are_taken_and_o_is_c_ordered(monkeypatch):
    """q, k, v with contiguous rows in any order of the other axes are read
    where they lie; o is C-ordered whatever v's layout, as fla's."""
    fn = 'fused_recurrent_gated_delta_rule'
    q, k, v, kw = args_of(fn, 3, 1)
    idx = np.array([2, 0, 5], np.int32)
    pool0 = f32(SLOTS, H, V, K, lo=-0.3, hi=0.3)
    want_pool = pool0.copy()
    want_o, _ = run(fn, q, k, v, kw, want_pool, idx, True)

    def permuted(x):  # heads outermost in memory, rows still contiguous
        return np.ascontiguousarray(x.transpose(2, 1, 0, 3)).transpose(2, 1, 0, 3)
    spy = Spy(monkeypatch)
    pool = pool0.copy()
    o, _ = run(fn, permuted(q), permuted(k), permuted(v), kw, pool, idx, True)
    assert spy.taken == [True] and o.flags.c_contiguous
    np.testing.assert_array_equal(o, want_o)
    np.testing.assert_array_equal(pool, want_pool)


def test_torch_ways_back(monkeypatch):
    torch = pytest.importorskip('torch', reason='torch is not installed')
    fn = 'fused_recurrent_gated_delta_rule'
    q, k, v, kw = args_of(fn, 2, 1)
    tq, tk, tv = (torch.from_numpy(x) for x in (q, k, v))
    t = {a: torch.from_numpy(b) if isinstance(b, np.ndarray) else b for a, b in kw.items()}
    pool0 = torch.from_numpy(f32(SLOTS, H, V, K, lo=-0.3, hi=0.3))
    want_pool = pool0.clone()
    want_o, _ = run(fn, tq, tk, tv, t, want_pool, torch.tensor([1, 4], dtype=torch.int32), True)
    # int64 slots (torch's default integer type): converted by the layer
    spy = Spy(monkeypatch)
    pool = pool0.clone()
    o, _ = run(fn, tq, tk, tv, t, pool, torch.tensor([1, 4]), True)
    assert spy.taken == [False]
    assert torch.equal(o, want_o) and torch.equal(pool, want_pool)
    # a bfloat16 gate: converted to float32 by the layer
    spy = Spy(monkeypatch)
    pool = pool0.clone()
    tb = dict(t, g=t['g'].to(torch.bfloat16))
    o, _ = run(fn, tq, tk, tv, tb, pool, torch.tensor([1, 4], dtype=torch.int32), True)
    assert spy.taken == [False]
    want_pool = pool0.clone()
    tw = dict(t, g=t['g'].to(torch.bfloat16).float())
    want_o, _ = run(fn, tq, tk, tv, tw, want_pool, torch.tensor([1, 4], dtype=torch.int32), True)
    assert torch.equal(o, want_o) and torch.equal(pool, want_pool)
    # a tensor that needs a gradient: refused by name, nothing written
    spy = Spy(monkeypatch)
    pool = pool0.clone()
    with torch.enable_grad(), pytest.raises(RuntimeError, match='k: requires_grad'):
        run(fn, tq, tk.clone().requires_grad_(), tv, t, pool,
            torch.tensor([1, 4], dtype=torch.int32), True)
    assert spy.taken == [False] and torch.equal(pool, pool0)
    # the same tensor without autograd: taken
    spy = Spy(monkeypatch)
    with torch.no_grad():
        run(fn, tq, tk.clone().requires_grad_(), tv, t, pool,
            torch.tensor([1, 4], dtype=torch.int32), True)
    assert spy.taken == [True]


@pytest.mark.parametrize('case', ['slot out of range', 'one slot for two sequences',
                                  'two sequences, one slot', 'pool of the wrong shape',
                                  'no pool', 'no slots, a state too many'])
@pytest.mark.parametrize('fn', ['fused_recurrent_gated_delta_rule', 'fused_recurrent_kda'])
def test_faults_write_nothing(fn, case, monkeypatch):
    """The fault is named by the Python layer, the extension asked once
    (both functions ask it before their own argument handling)."""
    q, k, v, kw = args_of(fn, 2, 1)
    idx = np.array([1, 4], np.int32)
    pool = f32(SLOTS, H, V, K)
    if case == 'slot out of range':
        idx, err, match = np.array([1, SLOTS], np.int32), Exception, 'sequence 1'
    elif case == 'one slot for two sequences':
        idx, err, match = np.array([1], np.int32), ValueError, 'ssm_state_indices'
    elif case == 'two sequences, one slot':
        idx, err, match = np.array([3, 3], np.int32), Exception, 'both write slot 3'
    elif case == 'pool of the wrong shape':
        pool, err, match = f32(SLOTS, H, K + 1, V), ValueError, 'initial_state'
    elif case == 'no slots, a state too many':
        idx, pool, err, match = None, f32(3, H, V, K), ValueError, 'initial_state'
    else:
        err, match = ValueError, 'needs initial_state'
    pool0 = pool.copy()
    spy = Spy(monkeypatch)
    with pytest.raises(err, match=match):
        run(fn, q, k, v, kw, None if case == 'no pool' else pool, idx, True)
    assert spy.taken == [False]
    np.testing.assert_array_equal(pool, pool0)
