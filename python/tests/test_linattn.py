"""linattn's Python package against float64 references written from the maths.

The references below run the recurrences token by token in float64:

  additive: S_t = L_t S_{t-1} + kh_t v_t^T,  z_t = L_t z_{t-1} + kh_t,
            o_t = qh_t^T S_t [/ (qh_t . z_t + eps)]
  delta:    S = L_t S;  u = beta_t (v_t - S^T kh_t);  S += kh_t u^T;  o_t = S^T qh_t

with qh = scale * nrm(phi(q)), kh = nrm(phi(k)), L_t = exp(g) (per head,
token or key channel) and nrm the optional L2 normalisation.
"""

import inspect
import os

import numpy as np
import pytest

import linattn

# fixed unless LINATTN_TEST_SEED says otherwise; printed by every test
SEED = int(os.environ.get('LINATTN_TEST_SEED', '0') or 0) or 1234
RNG = np.random.default_rng(SEED)


@pytest.fixture(autouse=True)
def _print_seed():
    """The seed, in every test's captured output (shown when it fails)."""
    print(f'LINATTN_TEST_SEED={SEED}')
    yield


# --- references (float64, [B, H, T, D]) ------------------------------------

def phi_ref(x, phi):
    if phi == 'elu1':
        return np.where(x > 0, x + 1, np.exp(np.minimum(x, 0)))
    if phi == 'relu':
        return np.maximum(x, 0)
    return x


def nrm_ref(x):
    return x / np.sqrt((x * x).sum(-1, keepdims=True) + 1e-6)


def expand_heads(x, H, head_map='grouped'):
    """q/k [B, Hk, T, K] -> [B, H, T, K] as the value heads read them."""
    Hk = x.shape[1]
    if Hk == H:
        return x
    return np.repeat(x, H // Hk, axis=1) if head_map == 'grouped' else np.tile(x, (1, H // Hk, 1, 1))


def decay_ref(g, gate, B, H, T, K):
    """exp(g) as [B, H, T, K] (broadcast over channels when per head/token)."""
    g = np.asarray(g, np.float64)
    if gate == 'none':
        lg = np.zeros((B, H, T, 1))
    elif gate == 'head':
        lg = np.broadcast_to(g.reshape(-1, H)[:, :, None, None], (B, H, T, 1))
    elif gate == 'token':
        lg = g[..., None]
    else:
        lg = g
    return np.broadcast_to(np.exp(lg), (B, H, T, K))


def additive_ref(q, k, v, g=None, gate='none', phi='elu1', scale=1.0, normalize=True, eps=1e-6,
                 s0=None, z0=None, causal=True, qk_l2norm=False, head_map='grouped'):
    q, k, v = (np.asarray(x, np.float64) for x in (q, k, v))
    B, H, T, V = v.shape
    q, k = expand_heads(q, H, head_map), expand_heads(k, H, head_map)
    K = q.shape[-1]
    qh, kh = phi_ref(q, phi), phi_ref(k, phi)
    if qk_l2norm:
        qh, kh = nrm_ref(qh), nrm_ref(kh)
    qh = qh * scale
    S = np.zeros((B, H, K, V)) if s0 is None else np.array(s0, np.float64)
    z = np.zeros((B, H, K)) if z0 is None else np.array(z0, np.float64)
    o = np.empty((B, H, T, V))
    if not causal:
        S = S + np.einsum('bhtk,bhtv->bhkv', kh, v)
        z = z + kh.sum(2)
        o = np.einsum('bhtk,bhkv->bhtv', qh, S)
        if normalize:
            o /= np.einsum('bhtk,bhk->bht', qh, z)[..., None] + eps
        return o, S, z
    L = decay_ref(g, gate, B, H, T, K)
    for t in range(T):
        S = L[:, :, t, :, None] * S + kh[:, :, t, :, None] * v[:, :, t, None, :]
        z = L[:, :, t] * z + kh[:, :, t]
        o[:, :, t] = np.einsum('bhk,bhkv->bhv', qh[:, :, t], S)
        if normalize:
            o[:, :, t] /= np.einsum('bhk,bhk->bh', qh[:, :, t], z)[..., None] + eps
    return o, S, z


def delta_ref(q, k, v, beta, g=None, gate='none', phi='identity', scale=1.0, s0=None,
              qk_l2norm=False, head_map='grouped'):
    q, k, v, beta = (np.asarray(x, np.float64) for x in (q, k, v, beta))
    B, H, T, V = v.shape
    q, k = expand_heads(q, H, head_map), expand_heads(k, H, head_map)
    K = q.shape[-1]
    qh, kh = phi_ref(q, phi), phi_ref(k, phi)
    if qk_l2norm:
        qh, kh = nrm_ref(qh), nrm_ref(kh)
    qh = qh * scale
    S = np.zeros((B, H, K, V)) if s0 is None else np.array(s0, np.float64)
    L = decay_ref(g, gate, B, H, T, K)
    o = np.empty((B, H, T, V))
    for t in range(T):
        S = L[:, :, t, :, None] * S
        u = beta[:, :, t, None] * (v[:, :, t] - np.einsum('bhkv,bhk->bhv', S, kh[:, :, t]))
        S = S + kh[:, :, t, :, None] * u[:, :, None, :]
        o[:, :, t] = np.einsum('bhkv,bhk->bhv', S, qh[:, :, t])
    return o, S


def bthd(x):
    """[B, T, H, ...] <-> [B, H, T, ...]"""
    return None if x is None else np.swapaxes(np.asarray(x), 1, 2)


def close(got, want, tol=3e-4):
    got = np.asarray(got, np.float64)
    want = np.asarray(want, np.float64)
    assert got.shape == want.shape, (got.shape, want.shape)
    scale = max(1.0, float(np.abs(want).max(initial=0)))
    err = float(np.abs(got - want).max(initial=0))
    assert err <= tol * scale, f'max error {err:.3g} > {tol * scale:.3g}'


# --- inputs -----------------------------------------------------------------

def f32(*shape, lo=-1.0, hi=1.0):
    return RNG.uniform(lo, hi, shape).astype(np.float32)


def make_gate(gate, B, H, T, K, layout='bhtd', lo=-2.0):
    if gate == 'none':
        return None
    if gate == 'head':
        return f32(H, lo=lo, hi=-0.01)
    shape = (B, H, T) if gate == 'token' else (B, H, T, K)
    if layout == 'bthd':
        shape = (B, T, H) + shape[3:]
    return f32(*shape, lo=lo, hi=0.0)


def gate_bhtd(g, gate, layout):
    if g is None or gate == 'head' or layout == 'bhtd':
        return g
    return bthd(g)


B, H, K, V = 2, 3, 5, 7  # odd feature sizes on purpose


# --- low-level: forward -----------------------------------------------------

@pytest.mark.parametrize('T', [1, 17, 70])
@pytest.mark.parametrize('gate', ['none', 'head', 'token', 'channel'])
@pytest.mark.parametrize('algo', ['auto', 'chunked', 'recurrent'])
@pytest.mark.parametrize('phi,normalize', [('elu1', True), ('relu', False),
                                           ('identity', False)])
def test_forward(T, gate, algo, phi, normalize):
    q, k, v = f32(B, H, T, K), f32(B, H, T, K), f32(B, H, T, V, lo=-0.3, hi=5)
    g = make_gate(gate, B, H, T, K)
    s0, z0 = f32(B, H, K, V), f32(B, H, K, lo=0, hi=1)
    s, z = s0.copy(), z0.copy()
    o = linattn.forward(q, k, v, g, s=s, z=z, phi=phi, normalize=normalize, algo=algo,
                        scale=0.7, chunk=16 if algo == 'chunked' else 0)
    want, S, Z = additive_ref(q, k, v, g, gate, phi, 0.7, normalize, s0=s0, z0=z0)
    close(o, want)
    close(s, S)
    if normalize:
        close(z, Z)


def test_forward_zero_state_and_defaults():
    T = 9
    q, k, v = f32(B, H, T, K), f32(B, H, T, K), f32(B, H, T, V)
    o = linattn.forward(q, k, v)
    close(o, additive_ref(q, k, v)[0])
    assert o.dtype == np.float32 and o.shape == (B, H, T, V) and o.flags.c_contiguous


def test_forward_noncausal():
    T = 11
    q, k, v = f32(B, H, T, K), f32(B, H, T, K), f32(B, H, T, V)
    s, z = np.zeros((B, H, K, V), np.float32), np.zeros((B, H, K), np.float32)
    o = linattn.forward(q, k, v, causal=False, s=s, z=z)
    want, S, Z = additive_ref(q, k, v, causal=False)
    close(o, want)
    close(s, S)
    close(z, Z)


def test_forward_layout_bthd_and_out():
    T = 13
    q, k, v = f32(B, T, H, K), f32(B, T, H, V)[..., :K].copy(), f32(B, T, H, V)
    g = make_gate('channel', B, H, T, K, 'bthd')
    o = np.full((B, T, H, V), np.nan, np.float32)
    got = linattn.forward(q, k, v, g, o=o, layout='bthd', phi='identity', normalize=False)
    assert got is o
    close(o, bthd(additive_ref(bthd(q), bthd(k), bthd(v), bthd(g), 'channel', 'identity',
                               normalize=False)[0]))


@pytest.mark.parametrize('head_map', ['grouped', 'tiled'])
def test_forward_grouped_heads(head_map):
    T, Hk, Hv = 10, 2, 6
    q, k, v = f32(B, Hk, T, K), f32(B, Hk, T, K), f32(B, Hv, T, V)
    g = make_gate('token', B, Hv, T, K)
    o = linattn.forward(q, k, v, g, head_map=head_map, qk_l2norm=True)
    close(o, additive_ref(q, k, v, g, 'token', head_map=head_map, qk_l2norm=True)[0])


def test_forward_split_carries_state():
    T = 40
    q, k, v = f32(B, H, T, K), f32(B, H, T, K), f32(B, H, T, V)
    g = make_gate('channel', B, H, T, K)
    s, z = np.zeros((B, H, K, V), np.float32), np.zeros((B, H, K), np.float32)
    o1 = linattn.forward(q[:, :, :25], k[:, :, :25], v[:, :, :25], g[:, :, :25], s=s, z=z)
    o2 = linattn.forward(q[:, :, 25:], k[:, :, 25:], v[:, :, 25:], g[:, :, 25:], s=s, z=z)
    close(np.concatenate([o1, o2], 2), additive_ref(q, k, v, g, 'channel')[0])


def test_forward_threads_bitwise():
    T = 50
    q, k, v = f32(B, 4, T, K), f32(B, 4, T, K), f32(B, 4, T, V)
    a = linattn.forward(q, k, v, num_threads=1)
    b = linattn.forward(q, k, v, num_threads=2)
    assert np.array_equal(a, b)


# --- low-level: step --------------------------------------------------------

@pytest.mark.parametrize('gate', ['none', 'head', 'token', 'channel'])
@pytest.mark.parametrize('normalize', [True, False])
def test_step(gate, normalize):
    q, k, v = f32(B, H, K), f32(B, H, K), f32(B, H, V)
    g = make_gate(gate, B, H, 1, K)
    if gate in ('token', 'channel'):
        g = g[:, :, 0]  # [B, H] / [B, H, K]
    s0, z0 = f32(B, H, K, V), f32(B, H, K, lo=0, hi=1)
    s, z = s0.copy(), z0.copy()
    o = linattn.step(q, k, v, g, s=s, z=z if normalize else None, normalize=normalize)
    gt = None if g is None else (g if gate == 'head' else g[:, :, None])
    want, S, Z = additive_ref(q[:, :, None], k[:, :, None], v[:, :, None], gt, gate,
                              normalize=normalize, s0=s0, z0=z0)
    close(o, want[:, :, 0])
    close(s, S)
    if normalize:
        close(z, Z)


def test_step_sequence_matches_forward():
    T = 12
    q, k, v = f32(B, H, T, K), f32(B, H, T, K), f32(B, H, T, V)
    s, z = np.zeros((B, H, K, V), np.float32), np.zeros((B, H, K), np.float32)
    outs = [linattn.step(q[:, :, t], k[:, :, t], v[:, :, t], s=s, z=z) for t in range(T)]
    close(np.stack(outs, 2), linattn.forward(q, k, v), tol=1e-5)


def test_step_z_compensated_keeps_a_long_run_accurate():
    # z starts at 2**20, where float32 values are 0.125 apart, and gains
    # phi(k) ~ 0.37 per step: a plain float sum rounds at every step, the
    # compensated state carries what the rounding lost to the next step.
    T, Bz, Hz, Kz, Vz, z0 = 2000, 1, 2, 8, 4, 2.0 ** 20
    rng = np.random.default_rng(5)
    q = rng.uniform(-1, 1, (T, Bz, Hz, Kz)).astype(np.float32)
    k = rng.uniform(-1.2, -0.8, (T, Bz, Hz, Kz)).astype(np.float32)
    v = rng.uniform(-1, 1, (T, Bz, Hz, Vz)).astype(np.float32)
    s1, s2 = np.zeros((Bz, Hz, Kz, Vz), np.float32), np.zeros((Bz, Hz, Kz, Vz), np.float32)
    z1 = np.full((Bz, Hz, Kz), z0, np.float32)
    z2 = np.zeros((Bz, Hz, 2, Kz), np.float32)  # sums, then their rounding errors
    z2[:, :, 0] = z0
    for t in range(T):
        o1 = linattn.step(q[t], k[t], v[t], s=s1, z=z1, num_threads=1)
        o2 = linattn.step(q[t], k[t], v[t], s=s2, z=z2, num_threads=1, z_compensated=True)
    kh = phi_ref(k.astype(np.float64), 'elu1')
    z_want = z0 + kh.sum(0)
    S = np.einsum('tbhk,tbhv->bhkv', kh, v.astype(np.float64))
    qh = phi_ref(q[-1].astype(np.float64), 'elu1')
    o_want = np.einsum('bhk,bhkv->bhv', qh, S) / (np.einsum('bhk,bhk->bh', qh, z_want)[..., None]
                                                  + 1e-6)
    err_plain = np.abs(z1 - z_want).max()
    err_comp = np.abs(z2[:, :, 0].astype(np.float64) + z2[:, :, 1] - z_want).max()
    assert err_plain > 1.0  # the plain sum has drifted by several units ...
    assert err_comp < 1e-3  # ... the compensated one by far less than a float step
    assert np.abs(o2 - o_want).max() < np.abs(o1 - o_want).max() / 4
    close(s1, s2, tol=0)  # only z is compensated

    # A recurrent forward continues the compensated state; a chunked one
    # folds the error into the sums and leaves the second half zero.
    T2 = 40
    qf, kf, vf = (np.ascontiguousarray(x[:T2].transpose(1, 2, 0, 3)) for x in (q, k, v))
    z_want2 = z_want + kh[:T2].sum(0)
    for algo, tol in (('recurrent', 1e-3), ('chunked', 1.0)):
        s, z = s2.copy(), z2.copy()
        linattn.forward(qf, kf, vf, s=s, z=z, z_compensated=True, algo=algo)
        assert np.abs(z[:, :, 0].astype(np.float64) + z[:, :, 1] - z_want2).max() < tol
        if algo == 'chunked':
            assert (z[:, :, 1] == 0).all()
    with pytest.raises(ValueError, match=r'expected 4 dimensions \[B, H, 2, K\]'):
        linattn.step(q[0], k[0], v[0], s=s1, z=z1, z_compensated=True)
    with pytest.raises(ValueError, match=r'z: expected shape \[B, H, 2, K\]'):
        linattn.forward(qf, kf, vf, s=s1, z=np.zeros((Bz, Hz, 3, Kz), np.float32),
                        z_compensated=True)


# --- low-level: delta rule --------------------------------------------------

@pytest.mark.parametrize('T', [1, 19, 70])
@pytest.mark.parametrize('gate', ['none', 'head', 'token', 'channel'])
@pytest.mark.parametrize('algo', ['auto', 'chunked', 'recurrent'])
def test_delta_forward(T, gate, algo):
    q, k, v = f32(B, H, T, K), f32(B, H, T, K), f32(B, H, T, V, lo=-0.3, hi=5)
    beta = f32(B, H, T, lo=0, hi=1)
    g = make_gate(gate, B, H, T, K)
    s0 = f32(B, H, K, V)
    s = s0.copy()
    o = linattn.delta_forward(q, k, v, beta, g, s=s, qk_l2norm=True, algo=algo, scale=K ** -0.5)
    want, S = delta_ref(q, k, v, beta, g, gate, scale=K ** -0.5, s0=s0, qk_l2norm=True)
    close(o, want)
    close(s, S)


@pytest.mark.parametrize('gate', ['none', 'token', 'channel'])
def test_delta_step(gate):
    q, k, v, beta = f32(B, H, K), f32(B, H, K), f32(B, H, V), f32(B, H, lo=0, hi=2)
    g = make_gate(gate, B, H, 1, K)
    if g is not None:
        g = g[:, :, 0]
    s0 = f32(B, H, K, V)
    s = s0.copy()
    o = linattn.delta_step(q, k, v, beta, g, s=s, qk_l2norm=True)
    want, S = delta_ref(q[:, :, None], k[:, :, None], v[:, :, None], beta[:, :, None],
                        None if g is None else g[:, :, None], gate, s0=s0, qk_l2norm=True)
    close(o, want[:, :, 0])
    close(s, S)


def test_delta_grouped_heads():
    T, Hk, Hv = 15, 2, 4
    q, k, v = f32(B, Hk, T, K), f32(B, Hk, T, K), f32(B, Hv, T, V)
    beta, g = f32(B, Hv, T, lo=0, hi=1), make_gate('token', B, Hv, T, K)
    o = linattn.delta_forward(q, k, v, beta, g, qk_l2norm=True)
    close(o, delta_ref(q, k, v, beta, g, 'token', qk_l2norm=True)[0])


# --- strided views ----------------------------------------------------------

def test_strided_views_of_packed_qkv():
    T = 21
    qkv = f32(B, T, 3, H, 8)  # one projection output, sliced without copying
    q, k, v = qkv[:, :, 0, :, :K], qkv[:, :, 1, :, :K], qkv[:, :, 2]
    assert not q.flags.c_contiguous
    g = make_gate('token', B, H, T, K, 'bthd')
    o, _ = linattn.chunk_simple_gla(q, k, v, g, scale=0.5)
    want = additive_ref(bthd(q), bthd(k), bthd(v), bthd(g), 'token', 'identity', 0.5, False)[0]
    close(o, bthd(want))
    # The same views through the low-level call, in the library's axis order.
    o2 = linattn.forward(bthd(q), bthd(k), bthd(v), bthd(g), phi='identity', normalize=False,
                         scale=0.5)
    close(o2, want)


def test_broadcast_shared_kv():
    T = 8
    q = f32(B, H, T, K)
    k = np.broadcast_to(f32(B, 1, T, K), (B, H, T, K))  # head stride 0: multi-query
    v = np.broadcast_to(f32(B, 1, T, V), (B, H, T, V))
    o = linattn.forward(q, k, v)
    close(o, additive_ref(q, k, v)[0])


# --- fla-named functions ----------------------------------------------------

def fla_inputs(T, Hk=H, Hv=H, lo=-1.0):
    return (f32(B, T, Hk, K, lo=lo), f32(B, T, Hk, K, lo=lo), f32(B, T, Hv, V, lo=-0.3, hi=5))


def fla_additive(q, k, v, g=None, gate='none', scale=None, s0=None, normalize=False,
                 z0=None):
    scale = K ** -0.5 if scale is None else scale
    o, S, Z = additive_ref(bthd(q), bthd(k), bthd(v), gate_bhtd(g, gate, 'bthd'), gate,
                           'identity', scale, normalize, 1e-10, s0, z0)
    return bthd(o), S, Z


@pytest.mark.parametrize('fn', ['chunk_linear_attn', 'fused_recurrent_linear_attn'])
@pytest.mark.parametrize('normalize', [False, True])
@pytest.mark.parametrize('T', [1, 33])
def test_fla_linear_attn(fn, normalize, T):
    q, k, v = fla_inputs(T, lo=0.1)  # positive features keep q . z away from 0
    s0, z0 = f32(B, H, K, V), f32(B, 1, H, K, lo=0, hi=1)
    init = (s0, z0) if normalize else s0
    o, st = getattr(linattn, fn)(q, k, v, initial_state=init, output_final_state=True,
                                 normalize=normalize)
    want, S, Z = fla_additive(q, k, v, s0=s0, normalize=normalize, z0=z0.reshape(B, H, K))
    close(o, want)
    if normalize:
        close(st[0], S)
        close(st[1], Z.reshape(B, 1, H, K))
    else:
        close(st, S)
    o2, st2 = getattr(linattn, fn)(q, k, v, normalize=normalize)
    assert st2 is None
    close(o2, fla_additive(q, k, v, normalize=normalize)[0])


def test_fla_linear_attn_defaults():
    import inspect
    assert inspect.signature(linattn.chunk_linear_attn).parameters['normalize'].default is True
    p = inspect.signature(linattn.fused_recurrent_linear_attn).parameters
    assert p['normalize'].default is False and p['reverse'].default is False


def test_fla_fused_recurrent_reverse():
    T = 14
    q, k, v = fla_inputs(T)
    g = f32(B, T, H, lo=-1, hi=0)
    o, st = linattn.fused_recurrent_simple_gla(q, k, v, g, reverse=True, output_final_state=True)
    flip = lambda x: x[:, ::-1]
    want, S, _ = fla_additive(flip(q), flip(k), flip(v), flip(g), 'token')
    close(o, flip(want))
    close(st, S)


@pytest.mark.parametrize('fn', ['chunk_simple_gla', 'fused_recurrent_simple_gla'])
@pytest.mark.parametrize('which', ['g', 'g_gamma', 'both', 'neither'])
def test_fla_simple_gla(fn, which):
    T = 29
    q, k, v = fla_inputs(T)
    g = f32(B, T, H, lo=-3, hi=0) if which in ('g', 'both') else None
    gg = f32(H, lo=-1, hi=-0.01) if which in ('g_gamma', 'both') else None
    s0 = f32(B, H, K, V)
    o, st = getattr(linattn, fn)(q, k, v, g=g, g_gamma=gg, initial_state=s0,
                                 output_final_state=True)
    if which == 'both':
        gt, gate = g + gg, 'token'
    else:
        gt, gate = (g, 'token') if g is not None else (gg, 'head') if gg is not None else (None, 'none')
    want, S, _ = fla_additive(q, k, v, gt, gate, s0=s0)
    close(o, want)
    close(st, S)
    assert not np.shares_memory(st, s0)


@pytest.mark.parametrize('fn,gname', [('chunk_gla', 'g'), ('fused_recurrent_gla', 'gk')])
@pytest.mark.parametrize('T', [1, 45])
def test_fla_gla(fn, gname, T):
    q, k, v = fla_inputs(T)
    g = f32(B, T, H, K, lo=-5, hi=0)
    s0 = f32(B, H, K, V)
    o, st = getattr(linattn, fn)(q, k, v, **{gname: g}, scale=0.3, initial_state=s0,
                                 output_final_state=True)
    want, S, _ = fla_additive(q, k, v, g, 'channel', 0.3, s0)
    close(o, want)
    close(st, S)


def test_fla_gla_state_v_first():
    T = 6
    q, k, v = fla_inputs(T)
    g = f32(B, T, H, K, lo=-1, hi=0)
    s0 = f32(B, H, V, K)
    o, st = linattn.chunk_gla(q, k, v, g, initial_state=s0, output_final_state=True,
                              state_v_first=True)
    want, S, _ = fla_additive(q, k, v, g, 'channel', s0=s0.transpose(0, 1, 3, 2))
    close(o, want)
    close(st, S.transpose(0, 1, 3, 2))


def _state_fns():
    return sorted(n for n in linattn.__all__ if callable(getattr(linattn, n))
                  and 'initial_state' in inspect.signature(getattr(linattn, n)).parameters)


def test_every_state_function_takes_state_v_first():
    """A V-first pool passed to a function without the keyword would be
    read K-first: with K == V, wrong results and no error."""
    fns = _state_fns()
    assert 'chunk_linear_attn' in fns and 'fused_recurrent_kda' in fns
    missing = [n for n in fns if 'state_v_first' not in
               inspect.signature(getattr(linattn, n)).parameters]
    assert not missing, f'no state_v_first: {missing}'


@pytest.mark.parametrize('fn,kw', [
    ('chunk_linear_attn', {'normalize': False}),
    ('chunk_linear_attn', {'normalize': True}),
    ('fused_recurrent_linear_attn', {}),
    ('chunk_retention', {}),
    ('chunk_delta_rule', {'beta': 'beta', 'use_qk_l2norm_in_kernel': True}),
    ('fused_recurrent_delta_rule', {'beta': 'beta', 'use_qk_l2norm_in_kernel': True}),
])
@pytest.mark.parametrize('T', [1, 9])
def test_state_v_first_is_the_transposed_state(fn, kw, T):
    """state_v_first=True reads and returns [N, H, V, K]: the K-first call's
    results on the transposed state (K == V, so a state read the wrong way
    round would go unnoticed by its shape)."""
    q, k, v = fla_inputs(T)
    kw = dict(kw)
    if 'beta' in kw:
        kw['beta'] = f32(B, T, H, lo=0, hi=1)
    s0 = f32(B, H, K, V, lo=-0.3, hi=0.3)
    init = s0
    init_t = np.ascontiguousarray(s0.transpose(0, 1, 3, 2))
    if kw.get('normalize'):
        z0 = f32(B, 1, H, K, lo=0.5, hi=1.5)
        init, init_t = (s0, z0), (init_t, z0)
    f = getattr(linattn, fn)
    o, st = f(q, k, v, initial_state=init, output_final_state=True, **kw)
    o_t, st_t = f(q, k, v, initial_state=init_t, output_final_state=True, state_v_first=True,
                  **kw)
    if kw.get('normalize'):
        np.testing.assert_array_equal(st_t[1], st[1])
        st, st_t = st[0], st_t[0]
    assert st_t.shape == (B, H, V, K)
    # the delta rule's V-first kernels sum along K: equal to rounding
    np.testing.assert_allclose(o_t, o, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(st_t, st.transpose(0, 1, 3, 2), rtol=1e-5, atol=1e-5)


def test_fla_retention():
    T, Hr = 37, 4
    q, k, v = fla_inputs(T, Hr, Hr)
    o, st = linattn.chunk_retention(q, k, v, output_final_state=True)
    gamma = np.log(1 - 2.0 ** (-5.0 - np.arange(Hr)))  # RetNet's per-head decays
    o_ref, S, _ = additive_ref(bthd(q), bthd(k), bthd(v), gamma, 'head', 'identity',
                               K ** -0.5, False)
    close(o, bthd(o_ref))
    close(st, S)


@pytest.mark.parametrize('fn', ['chunk_gated_delta_rule', 'fused_recurrent_gated_delta_rule'])
@pytest.mark.parametrize('l2', [True, False])
@pytest.mark.parametrize('T', [1, 40])
def test_fla_gated_delta_rule(fn, l2, T):
    Hk, Hv = 2, 4  # grouped value heads (fla's GVA)
    q, k, v = fla_inputs(T, Hk, Hv)
    if not l2:  # the unnormalised delta rule needs |k| small to stay stable
        k = (k / np.sqrt(K)).astype(np.float32)
    g, beta = f32(B, T, Hv, lo=-3, hi=0), f32(B, T, Hv, lo=0, hi=1)
    s0 = f32(B, Hv, K, V)
    o, st = getattr(linattn, fn)(q, k, v, g=g, beta=beta, initial_state=s0,
                                 output_final_state=True, use_qk_l2norm_in_kernel=l2)
    want, S = delta_ref(bthd(q), bthd(k), bthd(v), bthd(beta), bthd(g), 'token',
                        scale=K ** -0.5, s0=s0, qk_l2norm=l2)
    close(o, bthd(want))
    close(st, S)


def test_fla_fused_recurrent_gated_delta_rule_options():
    T = 9
    q, k, v = fla_inputs(T)
    g, gk = f32(B, T, H, lo=-1, hi=0), f32(B, T, H, K, lo=-1, hi=0)
    logits = f32(B, T, H, lo=-3, hi=3)
    o, _ = linattn.fused_recurrent_gated_delta_rule(
        q, k, v, g=g, gk=gk, beta=logits, use_qk_l2norm_in_kernel=True,
        use_beta_sigmoid_in_kernel=True, allow_neg_eigval=True)
    beta = 2 / (1 + np.exp(-logits.astype(np.float64)))
    want = delta_ref(bthd(q), bthd(k), bthd(v), bthd(beta), bthd(gk + g[..., None]), 'channel',
                     scale=K ** -0.5, qk_l2norm=True)[0]
    close(o, bthd(want))
    # beta None means ones; no gate means the plain delta rule.
    o, _ = linattn.fused_recurrent_gated_delta_rule(q, k, v, use_qk_l2norm_in_kernel=True)
    close(o, bthd(delta_ref(bthd(q), bthd(k), bthd(v), np.ones((B, H, T)), scale=K ** -0.5,
                            qk_l2norm=True)[0]))


def test_fla_gated_delta_rule_gate_in_kernel():
    T = 7
    q, k, v = fla_inputs(T)
    a, A_log, dt_bias = f32(B, T, H, lo=-2, hi=2), f32(H), f32(H)
    beta = f32(B, T, H, lo=0, hi=1)
    o, _ = linattn.chunk_gated_delta_rule(q, k, v, a, beta, use_qk_l2norm_in_kernel=True,
                                          use_gate_in_kernel=True, A_log=A_log,
                                          dt_bias=dt_bias)
    x = a.astype(np.float64) + dt_bias
    g = -np.exp(A_log.astype(np.float64)) * np.log1p(np.exp(x))
    close(o, bthd(delta_ref(bthd(q), bthd(k), bthd(v), bthd(beta), bthd(g), 'token',
                            scale=K ** -0.5, qk_l2norm=True)[0]))


@pytest.mark.parametrize('fn', ['chunk_delta_rule', 'fused_recurrent_delta_rule'])
def test_fla_delta_rule(fn):
    T = 33
    q, k, v = fla_inputs(T)
    beta = f32(B, T, H, lo=0, hi=1)
    s0 = f32(B, H, K, V)
    o, st = getattr(linattn, fn)(q, k, v, beta, initial_state=s0, output_final_state=True,
                                 use_qk_l2norm_in_kernel=True)
    want, S = delta_ref(bthd(q), bthd(k), bthd(v), bthd(beta), scale=K ** -0.5, s0=s0,
                        qk_l2norm=True)
    close(o, bthd(want))
    close(st, S)


@pytest.mark.parametrize('fn', ['chunk_kda', 'fused_recurrent_kda'])
@pytest.mark.parametrize('T', [1, 41])
def test_fla_kda(fn, T):
    Hk, Hv = 3, 6
    q, k, v = fla_inputs(T, Hk, Hv)
    g, beta = f32(B, T, Hv, K, lo=-5, hi=0), f32(B, T, Hv, lo=0, hi=1)
    s0 = f32(B, Hv, K, V)
    o, st = getattr(linattn, fn)(q, k, v, g, beta, initial_state=s0, output_final_state=True,
                                 use_qk_l2norm_in_kernel=True)
    want, S = delta_ref(bthd(q), bthd(k), bthd(v), bthd(beta), bthd(g), 'channel',
                        scale=K ** -0.5, s0=s0, qk_l2norm=True)
    close(o, bthd(want))
    close(st, S)


# --- cu_seqlens -------------------------------------------------------------

CU_CASES = [
    ('chunk_linear_attn', {'normalize': False}),
    ('chunk_linear_attn', {'normalize': True}),
    ('fused_recurrent_linear_attn', {'reverse': True}),
    ('fused_recurrent_linear_attn', {'reverse': True, 'normalize': True}),
    ('fused_recurrent_simple_gla', {'g': 'token', 'reverse': True}),
    ('chunk_simple_gla', {'g': 'token'}),
    ('chunk_gla', {'g': 'channel'}),
    ('fused_recurrent_gla', {'gk': 'channel', 'reverse': True}),
    ('chunk_retention', {}),
    ('chunk_gated_delta_rule', {'g': 'token', 'beta': True, 'use_qk_l2norm_in_kernel': True}),
    ('chunk_delta_rule', {'beta': True, 'use_qk_l2norm_in_kernel': True}),
    ('chunk_kda', {'g': 'channel', 'beta': True, 'use_qk_l2norm_in_kernel': True}),
]


@pytest.mark.parametrize('fn,opts', CU_CASES, ids=[f'{f}-{i}' for i, (f, _) in enumerate(CU_CASES)])
def test_cu_seqlens_matches_one_call_per_sequence(fn, opts):
    lens = [5, 1, 12, 0, 7]
    cu = np.cumsum([0] + lens)
    T, N = cu[-1], len(lens)
    q, k, v = f32(1, T, H, K, lo=0.1), f32(1, T, H, K, lo=0.1), f32(1, T, H, V)
    kw = dict(opts)
    args = [q, k, v]
    if 'g' in kw or 'gk' in kw:
        name = 'g' if 'g' in kw else 'gk'
        kw[name] = f32(1, T, H, lo=-2, hi=0) if kw[name] == 'token' else f32(1, T, H, K, lo=-2, hi=0)
    if kw.pop('beta', False):
        kw['beta'] = f32(1, T, H, lo=0, hi=1)
    normalize = kw.get('normalize', False)
    s0 = f32(N, H, K, V)
    z0 = f32(N, 1, H, K, lo=0, hi=1)
    init = (s0, z0) if normalize else s0
    f = getattr(linattn, fn)
    o, st = f(*args, initial_state=init, output_final_state=True, cu_seqlens=cu, **kw)
    for n in range(N):
        sl = slice(cu[n], cu[n + 1])
        if lens[n] == 0:  # an empty sequence passes its state through
            np.testing.assert_array_equal(st[0][n] if normalize else st[n],
                                          s0[n])
            continue
        kwn = {a: (b[:, sl] if isinstance(b, np.ndarray) else b) for a, b in kw.items()}
        initn = (s0[n:n + 1], z0[n:n + 1]) if normalize else s0[n:n + 1]
        on, stn = f(q[:, sl], k[:, sl], v[:, sl], initial_state=initn, output_final_state=True,
                    **kwn)
        close(o[:, sl], on, tol=1e-5)
        if normalize:
            close(st[0][n:n + 1], stn[0], tol=1e-5)
            close(st[1][n:n + 1], stn[1], tol=1e-5)
        else:
            close(st[n:n + 1], stn, tol=1e-5)


@pytest.mark.parametrize('fn', ['fused_recurrent_linear_attn', 'chunk_simple_gla',
                                'fused_recurrent_simple_gla'])
def test_cu_seqlens_is_one_c_call(fn, monkeypatch):
    """Packed sequences go to the library in one call, reverse=True too
    (the token axis reversed is the sequences reversed, in reverse order)."""
    from linattn import _fla
    calls = []
    run_pool = _fla._ext.run_pool
    monkeypatch.setattr(_fla._ext, 'run_pool', lambda *a: calls.append(1) or run_pool(*a))
    monkeypatch.setattr(_fla, '_call', lambda *a: pytest.fail('a call per sequence'))
    q, k, v = f32(1, 9, H, K, lo=0.1), f32(1, 9, H, K, lo=0.1), f32(1, 9, H, V)
    kw = {'reverse': True} if 'fused' in fn else {}
    getattr(linattn, fn)(q, k, v, cu_seqlens=[0, 4, 4, 9], output_final_state=True, **kw)
    assert len(calls) == 1


def test_cu_seqlens_as_list_and_torch_style_errors():
    q, k, v = fla_inputs(6)
    with pytest.raises(ValueError, match='batch size'):
        linattn.chunk_simple_gla(q, k, v, cu_seqlens=[0, 3, 6])
    q, k, v = q[:1], k[:1], v[:1]
    with pytest.raises(ValueError, match='cu_seqlens'):
        linattn.chunk_simple_gla(q, k, v, cu_seqlens=[0, 3, 5])
    with pytest.raises(ValueError, match='initial_state'):
        linattn.chunk_simple_gla(q, k, v, cu_seqlens=[0, 3, 6], initial_state=f32(1, H, K, V))
    o, st = linattn.chunk_simple_gla(q, k, v, cu_seqlens=[0, 3, 6], output_final_state=True)
    assert st.shape == (2, H, K, V)


# --- state pools (vLLM / sglang conventions) ----------------------------------

POOL_FNS = ['chunk_gated_delta_rule', 'fused_recurrent_gated_delta_rule', 'chunk_kda',
            'fused_recurrent_kda', 'chunk_simple_gla', 'fused_recurrent_simple_gla',
            'chunk_gla', 'fused_recurrent_gla']


def _pool_args(fn, T):
    q, k, v = f32(1, T, H, K, lo=0.1), f32(1, T, H, K, lo=0.1), f32(1, T, H, V)
    kw = {}
    if 'gated_delta' in fn or 'simple_gla' in fn:
        kw['g'] = f32(1, T, H, lo=-1, hi=0)
    else:
        kw['gk' if fn == 'fused_recurrent_gla' else 'g'] = f32(1, T, H, K, lo=-1, hi=0)
    if 'delta' in fn or 'kda' in fn:
        kw['beta'] = f32(1, T, H, lo=0, hi=1)
        kw['use_qk_l2norm_in_kernel'] = True
    return q, k, v, kw


def _cut(kw, sl):
    return {a: (b[:, sl] if isinstance(b, np.ndarray) else b) for a, b in kw.items()}


@pytest.mark.parametrize('fn', POOL_FNS)
@pytest.mark.parametrize('v_first', [False, True])
def test_pool_ssm_state_indices_in_place(fn, v_first):
    """[N] indices: sequence n reads and writes slot idx[n] of the pool, in
    place (the same object back, no copy), -1 is padding, other slots stay."""
    lens = [6, 0, 9, 3]
    cu = np.cumsum([0] + lens)
    T, N = int(cu[-1]), len(lens)
    q, k, v, kw = _pool_args(fn, T)
    idx = np.array([5, 1, -1, 2], np.int32)
    shape = (8, H, V, K) if v_first else (8, H, K, V)
    pool = f32(*shape, lo=-0.3, hi=0.3)
    pool0 = pool.copy()
    f = getattr(linattn, fn)
    o, st = f(q, k, v, initial_state=pool, ssm_state_indices=idx, inplace_final_state=True,
              state_v_first=v_first, cu_seqlens=cu, **kw)
    assert st is pool
    for n in range(N):
        sl = slice(cu[n], cu[n + 1])
        if idx[n] < 0:
            continue
        h0 = pool0[idx[n]:idx[n] + 1]
        if lens[n] == 0:
            np.testing.assert_array_equal(pool[idx[n]], pool0[idx[n]])
            continue
        on, sn = f(q[:, sl], k[:, sl], v[:, sl], initial_state=h0, output_final_state=True,
                   state_v_first=v_first, **_cut(kw, sl))
        if v_first:
            # short calls of either family run the V-first kernels in place:
            # their dot products sum along K, so equal to rounding
            np.testing.assert_allclose(o[:, sl], on, rtol=1e-5, atol=1e-5)
            np.testing.assert_allclose(pool[idx[n]], sn[0], rtol=1e-5, atol=1e-5)
            continue
        np.testing.assert_array_equal(o[:, sl], on)
        np.testing.assert_array_equal(pool[idx[n]], sn[0])
    for slot in (0, 3, 4, 6, 7):
        np.testing.assert_array_equal(pool[slot], pool0[slot])


@pytest.mark.parametrize('fn', ['fused_recurrent_gated_delta_rule', 'fused_recurrent_kda'])
def test_pool_spec_indices_and_num_accepted_tokens(fn):
    """[N, K] indices (speculative decoding): sequence n starts from slot
    idx[n, num_accepted_tokens[n] - 1]; the state after its token j goes to
    slot idx[n, j], and nothing else is written. The same bits as decoding
    the pool token by token ([N] indices, in place), each token's state
    first copied into the slot it goes to."""
    Ks, lens = 4, [4, 2, 3]
    cu = np.cumsum([0] + lens)
    T, N = int(cu[-1]), len(lens)
    q, k, v, kw = _pool_args(fn, T)
    idx = np.arange(N * Ks, dtype=np.int32).reshape(N, Ks)
    acc = np.array([1, 3, 2])
    pool = f32(N * Ks + 2, H, V, K, lo=-0.3, hi=0.3)
    ref = pool.copy()
    f = getattr(linattn, fn)
    o, _ = f(q, k, v, initial_state=pool, ssm_state_indices=idx, num_accepted_tokens=acc,
             inplace_final_state=True, state_v_first=True, cu_seqlens=cu, **kw)
    for n in range(N):
        at = idx[n, acc[n] - 1]
        for t in range(lens[n]):
            sl = slice(cu[n] + t, cu[n] + t + 1)
            ref[idx[n, t]] = ref[at]
            at = idx[n, t]
            on, _ = f(q[:, sl], k[:, sl], v[:, sl], initial_state=ref,
                      ssm_state_indices=idx[n, t:t + 1], inplace_final_state=True,
                      state_v_first=True, **_cut(kw, sl))
            np.testing.assert_array_equal(o[:, sl], on)
    np.testing.assert_array_equal(pool, ref)


def test_pool_decode_in_place_allocates_no_state():
    """A batched decode step on a 2 MiB pool with inplace_final_state=True
    allocates nothing of the state's size and writes the pool in place."""
    import tracemalloc
    Hd, D, slots, Bd = 8, 64, 16, 4
    pool = f32(slots, Hd, D, D, lo=-0.1, hi=0.1)
    q, k, v = f32(Bd, 1, Hd, D), f32(Bd, 1, Hd, D), f32(Bd, 1, Hd, D)
    g, beta = f32(Bd, 1, Hd, lo=-1, hi=0), f32(Bd, 1, Hd, lo=0, hi=1)
    idx = np.array([3, 9, -1, 0], np.int32)
    before = pool.copy()
    args = dict(initial_state=pool, ssm_state_indices=idx, inplace_final_state=True,
                state_v_first=True, use_qk_l2norm_in_kernel=True)
    linattn.fused_recurrent_gated_delta_rule(q, k, v, g=g, beta=beta, **args)  # warm up
    tracemalloc.start()
    o, st = linattn.fused_recurrent_gated_delta_rule(q, k, v, g=g, beta=beta, **args)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert st is pool
    assert peak < pool.nbytes // slots, peak  # less than one slot's state
    assert not np.array_equal(pool[3], before[3])
    np.testing.assert_array_equal(pool[[1, 2, 4, 5]], before[[1, 2, 4, 5]])


def test_pool_errors_name_the_sequence():
    q, k, v, kw = _pool_args('chunk_gated_delta_rule', 6)
    pool = f32(4, H, K, V)
    with pytest.raises(Exception, match='sequence 1'):
        linattn.chunk_gated_delta_rule(q, k, v, initial_state=pool, inplace_final_state=True,
                                       ssm_state_indices=np.array([0, 4], np.int32),
                                       cu_seqlens=[0, 3, 6], **kw)
    with pytest.raises(Exception, match='both write slot 2'):
        linattn.chunk_gated_delta_rule(q, k, v, initial_state=pool, inplace_final_state=True,
                                       ssm_state_indices=np.array([2, 2], np.int32),
                                       cu_seqlens=[0, 3, 6], **kw)
    with pytest.raises(ValueError, match='ssm_state_indices'):
        linattn.chunk_gated_delta_rule(q, k, v, initial_state=pool, inplace_final_state=True,
                                       ssm_state_indices=np.array([0], np.int32),
                                       cu_seqlens=[0, 3, 6], **kw)


def test_torch_pool_in_place():
    torch = _torch()
    T = 5
    q, k, v, kw = _pool_args('fused_recurrent_gated_delta_rule', T)
    pool = torch.from_numpy(f32(3, H, V, K, lo=-0.3, hi=0.3))
    ref = pool.numpy().copy()
    tq, tk, tv = (torch.from_numpy(x) for x in (q, k, v))
    tkw = {a: (torch.from_numpy(b) if isinstance(b, np.ndarray) else b) for a, b in kw.items()}
    o, st = linattn.fused_recurrent_gated_delta_rule(
        tq, tk, tv, initial_state=pool, ssm_state_indices=torch.tensor([2]),
        inplace_final_state=True, state_v_first=True, **tkw)
    assert st is pool and isinstance(o, torch.Tensor)
    on, sn = linattn.fused_recurrent_gated_delta_rule(
        q, k, v, initial_state=ref[2:3], output_final_state=True, state_v_first=True, **kw)
    np.testing.assert_allclose(o.numpy(), on, rtol=1e-5, atol=1e-5)  # V-first kernels
    np.testing.assert_allclose(pool[2].numpy(), sn[0], rtol=1e-5, atol=1e-5)


# --- torch ------------------------------------------------------------------

def _torch():
    torch = pytest.importorskip('torch', reason='torch is not installed')
    torch.manual_seed(SEED)  # the torch tests draw from torch's global generator
    return torch


def test_torch_fla_functions_return_tensors():
    torch = _torch()
    T = 19
    qkv = torch.rand(B, T, 3, H, 8) * 2 - 1
    q, k, v = qkv[:, :, 0, :, :K], qkv[:, :, 1, :, :K], qkv[:, :, 2]
    g = torch.nn.functional.logsigmoid(torch.randn(B, T, H, K))
    s0 = torch.randn(B, H, K, 8)
    o, st = linattn.chunk_gla(q, k, v, g, initial_state=s0, output_final_state=True)
    assert isinstance(o, torch.Tensor) and isinstance(st, torch.Tensor)
    assert o.dtype == torch.float32 and o.shape == (B, T, H, 8)
    o_np, st_np = linattn.chunk_gla(q.numpy(), k.numpy(), v.numpy(), g.numpy(),
                                    initial_state=s0.numpy(), output_final_state=True)
    assert np.array_equal(o.numpy(), o_np) and np.array_equal(st.numpy(), st_np)
    want, S, _ = fla_additive(q.numpy(), k.numpy(), v.numpy(), g.numpy(), 'channel',
                              s0=s0.numpy())
    close(o, want)
    close(st, S)


def test_torch_delta_and_low_level():
    torch = _torch()
    T = 11
    q, k, v = torch.randn(B, T, H, K), torch.randn(B, T, H, K), torch.randn(B, T, H, V)
    g = torch.nn.functional.logsigmoid(torch.randn(B, T, H))
    beta = torch.rand(B, T, H)
    o, st = linattn.chunk_gated_delta_rule(q, k, v, g, beta, use_qk_l2norm_in_kernel=True,
                                           output_final_state=True)
    assert isinstance(o, torch.Tensor) and isinstance(st, torch.Tensor)
    close(o, bthd(delta_ref(bthd(q.numpy()), bthd(k.numpy()), bthd(v.numpy()),
                            bthd(beta.numpy()), bthd(g.numpy()), 'token', scale=K ** -0.5,
                            qk_l2norm=True)[0]))
    # Low level: o is a tensor; s as a tensor is updated in place.
    s = torch.zeros(B, H, K, V)
    z = torch.zeros(B, H, K)
    ot = linattn.step(q[:, 0], k[:, 0], v[:, 0], s=s, z=z)
    assert isinstance(ot, torch.Tensor)
    assert float(s.abs().sum()) > 0


def test_torch_tensors_read_in_place_match_numpy():
    # The extension reads tensors itself: contiguous ones through their
    # shape alone, others through their strides, subclasses (Parameter)
    # through attribute lookups by name. Each must address what numpy does.
    torch = _torch()
    T = 5
    qkv = torch.randn(B, T, 3, H, K)
    v = torch.randn(B, T, H, V)
    cases = {
        'contiguous': (qkv[:, 0, 0].contiguous(), qkv[:, 0, 1].contiguous(), v[:, 0].contiguous()),
        'strided': (qkv[:, 0, 0], qkv[:, 0, 1], v[:, 0]),
        'size-1 batch': (qkv[:1, 0, 0], qkv[:1, 0, 1], v[:1, 0]),
        'parameter': (torch.nn.Parameter(qkv[:, 0, 0].contiguous(), requires_grad=False),
                      qkv[:, 0, 1], v[:, 0]),
    }
    s0, z0 = torch.randn(B, H, K, V), torch.rand(B, H, K)
    for name, (q, k, vt) in cases.items():
        n = q.shape[0]
        s, z = s0[:n].clone(), z0[:n].clone()
        sn, zn = s0[:n].numpy().copy(), z0[:n].numpy().copy()
        o = linattn.step(q, k, vt, s=s, z=z)
        on = linattn.step(q.detach().numpy(), k.numpy(), vt.numpy(), s=sn, z=zn)
        assert isinstance(o, torch.Tensor), name
        assert np.array_equal(o.numpy(), on) and np.array_equal(s.numpy(), sn), name
        assert np.array_equal(z.numpy(), zn), name
    # [B, T, H, D] views of a packed tensor, read in place by forward.
    q, k = qkv[:, :, 0], qkv[:, :, 1]
    o = linattn.forward(q, k, v, layout='bthd')
    assert np.array_equal(o.numpy(), linattn.forward(q.numpy(), k.numpy(), v.numpy(),
                                                     layout='bthd'))
    with pytest.raises(ValueError, match='C-contiguous'):
        linattn.step(q[:, 0], k[:, 0], v[:, 0], s=torch.zeros(B, H, V, K).transpose(2, 3),
                     z=torch.zeros(B, H, K))


def test_step_arguments():
    q, v = f32(B, H, K), f32(B, H, V)
    s, z = np.zeros((B, H, K, V), np.float32), np.zeros((B, H, K), np.float32)
    assert linattn.step(q=q, k=q, v=v, g=None, s=s, z=z).shape == (B, H, V)
    with pytest.raises(TypeError, match="missing required argument 's'"):
        linattn.step(q, q, v)
    with pytest.raises(TypeError, match='unexpected keyword'):
        linattn.step(q, q, v, s=s, z=z, layout='bthd')
    with pytest.raises(TypeError, match='multiple values'):
        linattn.step(q, q, v, None, g=None, s=s, z=z)
    with pytest.raises(TypeError, match='positional'):
        linattn.step(q, q, v, None, s)
    with pytest.raises(ValueError, match='expected one of'):
        linattn.step(q, q, v, s=s, z=z, phi='gelu')
    assert 'z_compensated' in str(inspect.signature(linattn.step))


def test_torch_requires_grad_input_is_used_without_copy():
    # With autograd on it is an error (no backward pass; see
    # test_fla_requires_grad_is_an_error); under no_grad it runs, uncopied.
    torch = _torch()
    q = torch.randn(B, H, 4, K, requires_grad=True)
    k, v = torch.randn(B, H, 4, K), torch.randn(B, H, 4, V)
    with pytest.raises(RuntimeError, match='q: requires_grad=True'):
        linattn.forward(q, k, v)
    with torch.no_grad():
        o = linattn.forward(q, k, v)
    close(o, additive_ref(q.detach().numpy(), k.numpy(), v.numpy())[0])


def test_torch_errors():
    torch = _torch()
    q = torch.randn(B, 4, H, K)
    with pytest.raises(TypeError, match='float32'):
        linattn.chunk_simple_gla(q.double(), q.double(), q.double())
    with pytest.raises(ValueError, match='CPU'):
        meta = torch.empty(B, 4, H, K, device='meta')
        linattn.chunk_simple_gla(meta, meta, meta)
    # strided feature rows: the fla functions copy them (as fla does) and
    # give what contiguous rows give; the low-level calls below refuse them
    qt = torch.randn(B, 4, H, 2 * K)[..., ::2]
    assert torch.equal(linattn.chunk_simple_gla(qt, qt, qt)[0],
                       linattn.chunk_simple_gla(*(qt.contiguous(),) * 3)[0])
    # The low-level calls read tensors in the extension itself.
    v = torch.randn(B, H, 4, V)
    with pytest.raises(ValueError, match='meta'):
        meta = torch.empty(B, H, 4, K, device='meta')
        linattn.forward(meta, meta, v, o=torch.empty(B, H, 4, V))
    with pytest.raises(TypeError, match='float32'):
        linattn.forward(q.double(), q.double(), v)
    with pytest.raises(TypeError, match='dense'):
        sp = torch.randn(B, H, 4, K).to_sparse()
        linattn.forward(sp, sp, v)
    with pytest.raises(ValueError, match='contiguous'):
        qt = torch.randn(B, H, 4, 2 * K)[..., ::2]
        linattn.forward(qt, qt, v)
    o = torch.full((B, H, 4, V), 7.0)
    g = torch.full((B, H, 4), 0.25)
    with pytest.raises(ValueError, match='log'):
        linattn.forward(torch.randn(B, H, 4, K), torch.randn(B, H, 4, K), v, g, o=o)
    assert bool((o == 7.0).all())


# --- errors: a Python exception, nothing written ----------------------------

def sentinel_outputs(shape_o, shape_s):
    return np.full(shape_o, 7.0, np.float32), np.full(shape_s, 3.0, np.float32)


def assert_untouched(o, s):
    assert (o == 7.0).all() and (s == 3.0).all()


def test_error_dtype():
    q = f32(B, H, 4, K)
    with pytest.raises(TypeError, match='float32'):
        linattn.forward(q.astype(np.float64), q, q)
    with pytest.raises(TypeError, match='k: dtype int32; linattn takes float32, bfloat16 or '
                                        'float16'):
        linattn.forward(q, q.astype(np.int32), q)
    with pytest.raises(TypeError, match='g: dtype float16; linattn takes float32 here'):
        linattn.forward(q, q, q, -np.ones((B, H, 4), np.float16))
    with pytest.raises(TypeError, match='s: dtype float16; linattn takes float32 or bfloat16'):
        linattn.forward(q, q, q, s=np.zeros((B, H, K, K), np.float16),
                        z=np.zeros((B, H, K), np.float32))
    with pytest.raises(TypeError, match='numpy array'):
        linattn.forward(q.tolist(), q, q)


def test_error_last_dim_not_contiguous():
    q = f32(B, H, 4, 2 * K)[..., ::2]
    o, s = sentinel_outputs((B, H, 4, K), (B, H, K, K))
    with pytest.raises(ValueError, match='last dimension must be contiguous'):
        linattn.forward(q, q, f32(B, H, 4, K), o=o, s=s, z=np.zeros((B, H, K), np.float32))
    assert_untouched(o, s)


def test_error_mismatched_shapes():
    q, v = f32(B, H, 4, K), f32(B, H, 4, V)
    with pytest.raises(ValueError, match='k: tokens'):
        linattn.forward(q, f32(B, H, 5, K), v)
    with pytest.raises(ValueError, match='v: batch'):
        linattn.forward(q, q, f32(B + 1, H, 4, V))
    with pytest.raises(ValueError, match='expected 4 dimensions'):
        linattn.forward(q[0], q[0], v[0])
    with pytest.raises(ValueError, match='o: V'):
        linattn.forward(q, q, v, o=np.empty((B, H, 4, V + 1), np.float32))
    with pytest.raises(ValueError, match='g: tokens'):
        linattn.forward(q, q, v, f32(B, H, 5, lo=-1, hi=0))
    with pytest.raises(ValueError, match='s: expected shape'):
        linattn.forward(q, q, v, s=np.zeros((B, H, V, K), np.float32),
                        z=np.zeros((B, H, K), np.float32))
    with pytest.raises(ValueError, match='C-contiguous'):
        s = np.zeros((B, H, V, K), np.float32).transpose(0, 1, 3, 2)
        linattn.forward(q, q, v, s=s, z=np.zeros((B, H, K), np.float32))
    with pytest.raises(ValueError, match='initial_state'):
        linattn.chunk_simple_gla(bthd(q), bthd(q), bthd(v), initial_state=f32(B, H, V, K))


def test_error_library_messages_and_nothing_written():
    T = 6
    q, v = f32(B, H, T, K), f32(B, H, T, V)
    o, s = sentinel_outputs((B, H, T, V), (B, H, K, V))
    z = np.full((B, H, K), 3.0, np.float32)
    g = f32(B, H, T, lo=-1, hi=0)
    g[1, 2, 4] = 0.5
    with pytest.raises(ValueError, match=r'g\[b=1,h=2,t=4\].*log'):
        linattn.forward(q, q, v, g, o=o, s=s, z=z)
    assert_untouched(o, s)
    assert (z == 3.0).all()
    assert 'g[b=1,h=2,t=4]' in linattn.last_error()
    with pytest.raises(ValueError, match='eps'):
        linattn.forward(q, q, v, o=o, s=s, z=z, eps=-1.0)
    with pytest.raises(ValueError, match='stride'):  # a reversed view: negative strides
        linattn.forward(q[:, :, ::-1], q, v, o=o, s=s, z=z)
    with pytest.raises(ValueError, match='overlap'):
        linattn.forward(q, q, v, o=v)
    with pytest.raises(ValueError):
        linattn.forward(q, q, v, o=o, s=s, z=z, chunk=-1)
    with pytest.raises(ValueError):  # s and z come as a pair when normalising
        linattn.forward(q, q, v, o=o, s=s)
    with pytest.raises(ValueError):  # a gate needs causal
        linattn.forward(q, q, v, g, o=o, causal=False)
    assert_untouched(o, s)
    with pytest.raises(ValueError, match='beta'):
        bad = f32(B, H, T, lo=0, hi=1)
        bad[0, 0, 0] = 3.0
        linattn.delta_forward(q, q, v, bad, o=o, s=s)
    with pytest.raises(ValueError, match='normalize'):
        linattn.delta_forward(q, q, v, f32(B, H, T, lo=0, hi=1), o=o, s=s, normalize=True)
    with pytest.raises(ValueError):  # q/k heads must divide the value heads
        linattn.forward(f32(B, 2, T, K), f32(B, 2, T, K), v, o=o)
    assert_untouched(o, s)
    with pytest.raises(ValueError):  # step needs s
        linattn.step(q[:, :, 0], q[:, :, 0], v[:, :, 0], s=None)
    assert linattn.last_error()


def test_error_read_only_output_and_bad_names():
    q, v = f32(B, H, 3, K), f32(B, H, 3, V)
    o = np.empty((B, H, 3, V), np.float32)
    o.flags.writeable = False
    with pytest.raises(ValueError, match='read-only'):
        linattn.forward(q, q, v, o=o)
    for kw in ({'phi': 'gelu'}, {'algo': 'fast'}, {'gate': 'daily'}, {'head_map': 'x'},
               {'layout': 'thbd'}):
        with pytest.raises(ValueError, match='expected one of'):
            linattn.forward(q, q, v, **kw)
    with pytest.raises(ValueError, match='gate'):
        linattn.forward(q, q, v, f32(B, H, 3, lo=-1, hi=0), gate='none')
    with pytest.raises(ValueError, match='no gate kind'):
        linattn.forward(q, q, v, f32(1, B, H, 3, K, lo=-1, hi=0))


def test_error_fla_unsupported_options():
    q, k, v = fla_inputs(3)
    with pytest.raises(NotImplementedError):
        linattn.fused_recurrent_gla(q, k, v, gv=f32(B, 3, H, V, lo=-1, hi=0))
    with pytest.raises(ValueError, match='allow_neg_eigval'):
        linattn.chunk_gated_delta_rule(q, k, v, f32(B, 3, H, lo=-1, hi=0),
                                       f32(B, 3, H, lo=0, hi=1), allow_neg_eigval=True)
    with pytest.raises(DeprecationWarning):
        linattn.chunk_simple_gla(q, k, v, head_first=True)


# --- ISA selection ----------------------------------------------------------

def test_isa_selection():
    names = ['scalar', 'avx2', 'avx512', 'neon']
    best = linattn.isa()
    assert best in names
    assert linattn.tuning() in ('zen4', 'zen5', 'sapphire_rapids', 'other')
    assert linattn.isa_available('scalar') and linattn.isa_available('auto')
    T = 30
    q, k, v = f32(B, H, T, K), f32(B, H, T, K), f32(B, H, T, V)
    g = make_gate('channel', B, H, T, K)
    want = additive_ref(q, k, v, g, 'channel')[0]
    try:
        for name in names:
            if linattn.isa_available(name):
                linattn.set_isa(name)
                assert linattn.isa() == name
                close(linattn.forward(q, k, v, g), want)
            else:
                with pytest.raises(RuntimeError):
                    linattn.set_isa(name)
    finally:
        linattn.set_isa('auto')
    assert linattn.isa() == best
    with pytest.raises(ValueError):
        linattn.set_isa('sse9')


def test_version():
    assert linattn.version().count('.') == 2
    assert linattn.__version__ == linattn.version()


# --- keyword arguments and gradients ----------------------------------------

FLA_FUNCTIONS = ['chunk_linear_attn', 'fused_recurrent_linear_attn', 'chunk_simple_gla',
                 'fused_recurrent_simple_gla', 'chunk_gla', 'fused_recurrent_gla',
                 'chunk_retention', 'chunk_gated_delta_rule', 'fused_recurrent_gated_delta_rule',
                 'chunk_delta_rule', 'fused_recurrent_delta_rule', 'chunk_kda',
                 'fused_recurrent_kda']


def _fla_args(fn, B=1, T=5, H=2, K=4, V=3, seed=7):
    """Valid positional arguments for fn, numpy float32, gates <= 0."""
    r = np.random.default_rng(seed)
    q, k, v = (r.standard_normal((B, T, H, d), dtype=np.float32) for d in (K, K, V))
    if fn in ('chunk_gla', 'fused_recurrent_gla'):
        return q, k, v, -r.random((B, T, H, K), dtype=np.float32)
    if fn == 'chunk_simple_gla' or fn == 'fused_recurrent_simple_gla':
        return q, k, v, -r.random((B, T, H), dtype=np.float32)
    if fn == 'chunk_gated_delta_rule':
        return q, k, v, -r.random((B, T, H), dtype=np.float32), r.random((B, T, H), dtype=np.float32)
    if fn in ('chunk_kda', 'fused_recurrent_kda'):
        return (q, k, v, -r.random((B, T, H, K), dtype=np.float32),
                r.random((B, T, H), dtype=np.float32))
    if fn in ('chunk_delta_rule', 'fused_recurrent_delta_rule'):
        return q, k, v, r.random((B, T, H), dtype=np.float32)
    return q, k, v


@pytest.mark.parametrize('fn', FLA_FUNCTIONS)
def test_fla_unknown_keyword_warns_once_by_name(fn):
    f = getattr(linattn, fn)
    args = _fla_args(fn)
    want = f(*args, output_final_state=True)
    name = f'output_final_sate_{fn}'  # misspelt, and new to the once-per-name record
    with pytest.warns(UserWarning, match=f"{fn}: unknown keyword argument '{name}'"):
        got = f(*args, output_final_state=True, **{name: True})
    np.testing.assert_array_equal(got[0], want[0])  # ignored: same result
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter('error')
        f(*args, **{name: True})               # the second time: no warning
        f(*args, chunk_size=64, cu_seqlens_cpu=None)  # fla's, accepted and ignored
    with pytest.raises(DeprecationWarning, match='head_first'):
        f(*args, head_first=True)


@pytest.mark.parametrize('fn', ['chunk_simple_gla', 'fused_recurrent_delta_rule'])
def test_fla_requires_grad_is_an_error(fn):
    torch = pytest.importorskip('torch')
    args = [torch.from_numpy(a) for a in _fla_args(fn)]
    args[1].requires_grad_(True)
    with pytest.raises(RuntimeError, match='k: requires_grad=True, but linattn has no backward'):
        getattr(linattn, fn)(*args)
    with torch.no_grad():  # no gradient asked for: runs
        o, _ = getattr(linattn, fn)(*args)
    assert isinstance(o, torch.Tensor) and not o.requires_grad
    with pytest.raises(RuntimeError, match='no backward'):
        linattn.forward(args[0].transpose(1, 2), args[1].transpose(1, 2), args[2].transpose(1, 2))
