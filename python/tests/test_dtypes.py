"""16-bit inputs, a bfloat16 state and the fused gate / beta activations.

Every result is checked against a float64 recurrence run on the same rounded
inputs (the 16-bit values widened exactly), so the only error allowed beyond
float32 arithmetic is the output's one rounding to its 16-bit type. The
activations are checked against g and beta computed in float64 torch from
the raw projections. The no-copy checks count the allocations the Python
side makes during a call (torch's profiler for tensors, tracemalloc for
numpy): they see every conversion copy the package or torch/numpy would
make, but not the C library's own workspace (plain malloc), which is not a
copy of an input.
"""

import tracemalloc

import numpy as np
import pytest

import linattn

torch = pytest.importorskip('torch')

SEED = 2426
print(f'test_dtypes: seed {SEED}')

B, T, H, K, V = 2, 37, 3, 5, 7  # odd sizes; T over no chunk boundary in particular
# The output's rounding (relative to the largest |o|): bf16 keeps 8 bits, f16 11.
TOL = {torch.bfloat16: 8e-3, torch.float16: 1.5e-3, torch.float32: 3e-4}


def gen(seed=0):
    return torch.Generator().manual_seed(SEED + seed)


def rnd(*shape, g, lo=-1.0, hi=1.0):
    return torch.rand(*shape, generator=g) * (hi - lo) + lo


def delta_ref(q, k, v, beta, g=None, s0=None, l2=True, scale=None):
    """float64 delta rule on [B, T, H, D] tensors; g [B, T, H] or [B, T, H, K]
    (log-decays) or None; returns (o [B, T, H, V], S [B, H, K, V])."""
    q, k, v, beta = (x.double() for x in (q, k, v, beta))
    Bq, Tq, Hq, Kq = q.shape
    Hv, Vv = v.shape[2], v.shape[3]
    if Hv != Hq:
        q = q.repeat_interleave(Hv // Hq, dim=2)
        k = k.repeat_interleave(Hv // Hq, dim=2)
    if l2:
        q = q / torch.sqrt((q * q).sum(-1, keepdim=True) + 1e-6)
        k = k / torch.sqrt((k * k).sum(-1, keepdim=True) + 1e-6)
    q = q * (Kq ** -0.5 if scale is None else scale)
    S = torch.zeros(Bq, Hv, Kq, Vv, dtype=torch.float64) if s0 is None else s0.double().clone()
    o = torch.zeros(Bq, Tq, Hv, Vv, dtype=torch.float64)
    for t in range(Tq):
        if g is not None:
            d = g[:, t].double().exp()
            S = S * (d[..., None, None] if d.dim() == 2 else d[..., None])
        u = beta[:, t, :, None] * (v[:, t] - torch.einsum('bhkv,bhk->bhv', S, k[:, t]))
        S = S + k[:, t, :, :, None] * u[:, :, None, :]
        o[:, t] = torch.einsum('bhkv,bhk->bhv', S, q[:, t])
    return o, S


def additive_ref(q, k, v, s0=None, z0=None):
    """float64 normalised linear attention, elu + 1, [B, H, T, D]."""
    q, k, v = (x.double() for x in (q, k, v))
    qh = torch.where(q > 0, q + 1, q.clamp(max=0).exp())
    kh = torch.where(k > 0, k + 1, k.clamp(max=0).exp())
    Bq, Hq, Tq, Kq = q.shape
    S = torch.zeros(Bq, Hq, Kq, v.shape[3], dtype=torch.float64) if s0 is None else s0.double()
    z = torch.zeros(Bq, Hq, Kq, dtype=torch.float64) if z0 is None else z0.double()
    o = torch.zeros(Bq, Hq, Tq, v.shape[3], dtype=torch.float64)
    for t in range(Tq):
        S = S + kh[:, :, t, :, None] * v[:, :, t, None, :]
        z = z + kh[:, :, t]
        o[:, :, t] = (torch.einsum('bhk,bhkv->bhv', qh[:, :, t], S)
                      / (torch.einsum('bhk,bhk->bh', qh[:, :, t], z)[..., None] + 1e-6))
    return o, S, z


def close(got, want, tol):
    got = torch.as_tensor(np.asarray(got, np.float64) if isinstance(got, np.ndarray) else got)
    got, want = got.double(), torch.as_tensor(want).double()
    assert got.shape == want.shape, (got.shape, want.shape)
    err = (got - want).abs().max().item() / max(want.abs().max().item(), 1e-30)
    assert err <= tol, f'relative error {err:.3g} > {tol}'


def qkv(dtype, g, Hk=H, Hv=H, T_=T):
    q = rnd(B, T_, Hk, K, g=g).to(dtype)
    k = rnd(B, T_, Hk, K, g=g).to(dtype)
    v = rnd(B, T_, Hv, V, g=g).to(dtype)
    return q, k, v


DTYPES = [torch.bfloat16, torch.float16]
DT_IDS = ['bf16', 'f16']


# --- 16-bit torch inputs ----------------------------------------------------

@pytest.mark.parametrize('dtype', DTYPES, ids=DT_IDS)
@pytest.mark.parametrize('fn', ['chunk_gated_delta_rule', 'fused_recurrent_gated_delta_rule'])
def test_gated_delta_rule_16bit(dtype, fn):
    r = gen(1)
    q, k, v = qkv(dtype, r, Hk=3, Hv=6)
    gl = rnd(B, T, 6, g=r, lo=-2, hi=0)  # float32, as models keep it
    beta = rnd(B, T, 6, g=r, lo=0, hi=1).to(dtype)
    s0 = rnd(B, 6, K, V, g=r) * 0.5
    o, S = getattr(linattn, fn)(q, k, v, g=gl, beta=beta, initial_state=s0,
                                output_final_state=True, use_qk_l2norm_in_kernel=True)
    assert o.dtype == dtype and o.shape == (B, T, 6, V)  # fla: o = empty_like(v)
    assert S.dtype == torch.float32
    want, wS = delta_ref(q, k, v, beta, gl, s0)
    close(o, want, TOL[dtype])
    close(S, wS, 3e-4)  # the float32 state is not rounded to 16 bits


@pytest.mark.parametrize('dtype', DTYPES, ids=DT_IDS)
@pytest.mark.parametrize('fn', ['chunk_kda', 'fused_recurrent_kda'])
def test_kda_16bit(dtype, fn):
    r = gen(2)
    q, k, v = qkv(dtype, r)
    gk = rnd(B, T, H, K, g=r, lo=-2, hi=0).to(dtype)  # a 16-bit g is converted (a copy)
    beta = rnd(B, T, H, g=r, lo=0, hi=1).to(dtype)
    o, S = getattr(linattn, fn)(q, k, v, gk, beta, output_final_state=True,
                                use_qk_l2norm_in_kernel=True)
    assert o.dtype == dtype and S.dtype == torch.float32
    want, wS = delta_ref(q, k, v, beta, gk.float())
    close(o, want, TOL[dtype])
    close(S, wS, 3e-4)


@pytest.mark.parametrize('dtype', DTYPES, ids=DT_IDS)
def test_low_level_forward_and_delta_16bit(dtype):
    r = gen(3)
    q, k, v = (x.transpose(1, 2) for x in qkv(dtype, r))  # [B, H, T, D] strided views
    o = linattn.forward(q, k, v)
    assert o.dtype == dtype
    close(o, additive_ref(q, k, v)[0], TOL[dtype])
    beta = rnd(B, H, T, g=r, lo=0, hi=1).to(dtype)
    o = linattn.delta_forward(q, k, v, beta, qk_l2norm=True, scale=K ** -0.5)
    assert o.dtype == dtype
    want = delta_ref(*(x.transpose(1, 2) for x in (q, k, v, beta)))[0].transpose(1, 2)
    close(o, want, TOL[dtype])
    # mixed types: float32 q and k, 16-bit v; o given in float32
    o32 = torch.empty(B, H, T, V)
    linattn.forward(q.float(), k.float(), v, o=o32)
    close(o32, additive_ref(q, k, v)[0], 3e-4)


@pytest.mark.parametrize('dtype', DTYPES, ids=DT_IDS)
def test_16bit_output_is_the_float32_result_rounded_once(dtype):
    """The library computes in float32 and rounds o once: o in 16 bits is the
    float32 call's o rounded to 16 bits, within one unit of the last place."""
    r = gen(4)
    q, k, v = qkv(dtype, r)
    beta = rnd(B, T, H, g=r, lo=0, hi=1).to(dtype)
    gl = rnd(B, T, H, g=r, lo=-1, hi=0)
    o16, _ = linattn.fused_recurrent_gated_delta_rule(q, k, v, g=gl, beta=beta,
                                                      use_qk_l2norm_in_kernel=True)
    o32, _ = linattn.fused_recurrent_gated_delta_rule(q.float(), k.float(), v.float(), g=gl,
                                                      beta=beta.float(),
                                                      use_qk_l2norm_in_kernel=True)
    ulp = torch.finfo(dtype).eps * o32.abs().clamp(min=torch.finfo(dtype).tiny)
    assert ((o16.float() - o32).abs() <= ulp).all()


def test_step_16bit_and_bf16_state():
    r = gen(5)
    q, k, v = (rnd(B, H, d, g=r).to(torch.bfloat16) for d in (K, K, V))
    s = (rnd(B, H, K, V, g=r) * 0.3).to(torch.bfloat16)
    z = rnd(B, H, K, g=r, lo=0.5, hi=1.5)
    s0, z0 = s.clone(), z.clone()
    o = linattn.step(q, k, v, s=s, z=z)
    assert o.dtype == torch.bfloat16 and s.dtype == torch.bfloat16
    want, wS, wz = additive_ref(q[:, :, None], k[:, :, None], v[:, :, None], s0, z0)
    close(o, want[:, :, 0], TOL[torch.bfloat16])
    close(s, wS, TOL[torch.bfloat16])  # the state rounded to bf16 once per step
    close(z, wz, 3e-4)


def test_step_gate_act():
    """linattn.step's own keywords: a raw per-token gate with A_log, dt_bias."""
    r = gen(15)
    q, k, v = (rnd(B, H, d, g=r).to(torch.float16) for d in (K, K, V))
    a = rnd(B, H, g=r, lo=-3, hi=3)
    A_log, dt_bias = rnd(H, g=r), rnd(H, g=r)
    s, z = rnd(B, H, K, V, g=r) * 0.3, rnd(B, H, K, g=r, lo=0.5, hi=1.5)
    s0, z0 = s.clone(), z.clone()
    o = linattn.step(q, k, v, a, s=s, z=z, gate_act='softplus', A_log=A_log, dt_bias=dt_bias)
    d = (-A_log.double().exp() * softplus(a.double() + dt_bias.double())).exp()
    qh, kh = (torch.where(x > 0, x + 1, x.clamp(max=0).exp()) for x in (q.double(), k.double()))
    S = d[..., None, None] * s0.double() + kh[..., None] * v.double()[:, :, None, :]
    zz = d[..., None] * z0.double() + kh
    want = torch.einsum('bhk,bhkv->bhv', qh, S) / (torch.einsum('bhk,bhk->bh', qh, zz)[..., None]
                                                  + 1e-6)
    assert o.dtype == torch.float16
    close(o, want, TOL[torch.float16])
    close(s, S, 3e-4)
    close(z, zz, 3e-4)


# --- numpy float16 ----------------------------------------------------------

def test_numpy_float16():
    r = gen(6)
    q, k, v = qkv(torch.float16, r)
    beta = rnd(B, T, H, g=r, lo=0, hi=1).to(torch.float16)
    gl = rnd(B, T, H, g=r, lo=-2, hi=0)
    qn, kn, vn, bn, gn = (x.numpy() for x in (q, k, v, beta, gl))
    assert qn.dtype == np.float16
    o, S = linattn.chunk_gated_delta_rule(qn, kn, vn, gn, bn, output_final_state=True,
                                          use_qk_l2norm_in_kernel=True)
    assert isinstance(o, np.ndarray) and o.dtype == np.float16 and S.dtype == np.float32
    want, wS = delta_ref(q, k, v, beta, gl)
    close(o, want, TOL[torch.float16])
    close(S, wS, 3e-4)
    # the library's own entry point, [B, H, T, D] views of the same memory
    o = linattn.forward(*(np.swapaxes(x, 1, 2) for x in (qn, kn, vn)))
    assert o.dtype == np.float16
    close(o, additive_ref(*(x.transpose(1, 2) for x in (q, k, v)))[0], TOL[torch.float16])


# --- no copies --------------------------------------------------------------

def torch_bytes_allocated(fn):
    """Bytes torch's CPU allocator hands out while fn runs (each op's own:
    empty_like's event also counts the empty it calls)."""
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as p:
        out = fn()
    return sum(e.self_cpu_memory_usage for e in p.events() if e.self_cpu_memory_usage > 0), out


@pytest.mark.parametrize('dtype', DTYPES, ids=DT_IDS)
def test_torch_16bit_inputs_are_not_copied(dtype):
    """With 16-bit q, k, v and beta logits, a raw gate (use_gate_in_kernel)
    and the beta sigmoid in the kernel, torch allocates o and nothing else
    during the call: no float32 (or any) copy of an input, no activated g or
    beta. (The library's workspace is malloc'd in C and not seen here.)"""
    r = gen(7)
    Tl = 512
    q, k, v = qkv(dtype, r, T_=Tl)
    a = rnd(B, Tl, H, g=r)
    b = rnd(B, Tl, H, g=r, lo=-3, hi=3).to(dtype)
    A_log, dt_bias = rnd(H, g=r), rnd(H, g=r)

    def call():
        return linattn.chunk_gated_delta_rule(
            q, k, v, a, b, use_qk_l2norm_in_kernel=True, use_gate_in_kernel=True,
            A_log=A_log, dt_bias=dt_bias, use_beta_sigmoid_in_kernel=True)
    call()
    nbytes, (o, _) = torch_bytes_allocated(call)
    assert nbytes == o.numel() * o.element_size(), (nbytes, o.numel() * o.element_size())
    # the check sees a conversion: the same call on float32 copies made inside
    nbytes_conv, _ = torch_bytes_allocated(lambda: linattn.chunk_gated_delta_rule(
        q.float(), k.float(), v.float(), a, b, use_gate_in_kernel=True, A_log=A_log,
        use_beta_sigmoid_in_kernel=True))
    assert nbytes_conv >= 3 * q.numel() * 4


def test_numpy_float16_inputs_are_not_copied():
    """tracemalloc follows numpy's allocations: during the call the peak is
    o (float16) plus small change, far below one float32 copy of q."""
    r = gen(8)
    Tl = 1024
    q, k, v = (x.numpy() for x in qkv(torch.float16, r, T_=Tl))
    b = rnd(B, Tl, H, g=r, lo=-3, hi=3).to(torch.float16).numpy()
    a = rnd(B, Tl, H, g=r).numpy()
    A_log, dt_bias = rnd(H, g=r).numpy(), rnd(H, g=r).numpy()
    o = np.empty((B, Tl, H, V), np.float16)

    def call():
        linattn.chunk_gated_delta_rule(q, k, v, a, b, use_gate_in_kernel=True, A_log=A_log,
                                       dt_bias=dt_bias, use_beta_sigmoid_in_kernel=True,
                                       allow_neg_eigval=True)
    call()
    tracemalloc.start()
    try:
        call()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < o.nbytes + q.nbytes // 2, (peak, o.nbytes, q.nbytes)
    # and it sees a copy when one is made
    tracemalloc.start()
    try:
        q.astype(np.float32)
        assert tracemalloc.get_traced_memory()[1] >= q.nbytes * 2
    finally:
        tracemalloc.stop()


# --- activations ------------------------------------------------------------

def softplus(x):
    return torch.nn.functional.softplus(x.double())


@pytest.mark.parametrize('fn', ['chunk_gated_delta_rule', 'fused_recurrent_gated_delta_rule'])
@pytest.mark.parametrize('neg', [False, True], ids=['sigmoid', 'sigmoid2'])
@pytest.mark.parametrize('dtype', [torch.float32, torch.bfloat16], ids=['f32', 'bf16'])
def test_gdn_gate_and_beta_in_kernel(fn, neg, dtype):
    r = gen(9)
    q, k, v = qkv(dtype, r)
    a = rnd(B, T, H, g=r, lo=-3, hi=3)
    b = rnd(B, T, H, g=r, lo=-4, hi=4).to(dtype)
    A_log, dt_bias = rnd(H, g=r), rnd(H, g=r)
    o, S = getattr(linattn, fn)(q, k, v, g=a, beta=b, output_final_state=True,
                                use_qk_l2norm_in_kernel=True, use_gate_in_kernel=True,
                                A_log=A_log, dt_bias=dt_bias, use_beta_sigmoid_in_kernel=True,
                                allow_neg_eigval=neg)
    gl = -A_log.double().exp() * softplus(a.double() + dt_bias.double())
    beta = torch.sigmoid(b.double()) * (2 if neg else 1)
    want, wS = delta_ref(q, k, v, beta, gl)
    close(o, want, TOL[dtype])
    close(S, wS, 3e-4)


@pytest.mark.parametrize('fn', ['chunk_kda', 'fused_recurrent_kda'])
@pytest.mark.parametrize('form', ['softplus', 'bounded', 'bounded_no_A'])
@pytest.mark.parametrize('bias', ['flat', 'matrix', 'none'])
def test_kda_gate_in_kernel(fn, form, bias):
    r = gen(10)
    q, k, v = qkv(torch.bfloat16, r)
    a = rnd(B, T, H, K, g=r, lo=-3, hi=3)
    beta = rnd(B, T, H, g=r, lo=0, hi=1).to(torch.bfloat16)
    A_log = None if form == 'bounded_no_A' else rnd(H, g=r)
    db = rnd(H, K, g=r)
    dt_bias = {'flat': db.reshape(H * K), 'matrix': db, 'none': None}[bias]
    lb = None if form == 'softplus' else -3.0
    o, S = getattr(linattn, fn)(q, k, v, a, beta, A_log=A_log, dt_bias=dt_bias,
                                output_final_state=True, use_qk_l2norm_in_kernel=True,
                                use_gate_in_kernel=True, lower_bound=lb)
    x = a.double() + (db.double() if dt_bias is not None else 0)
    if form == 'softplus':
        gl = -A_log.double().exp()[:, None] * softplus(x)
    else:
        sc = 1.0 if A_log is None else A_log.double().exp()[:, None]
        gl = lb * torch.sigmoid(sc * x)
    want, wS = delta_ref(q, k, v, beta, gl)
    close(o, want, TOL[torch.bfloat16])
    close(S, wS, 3e-4)


def test_low_level_activations():
    r = gen(11)
    q, k, v = (x.transpose(1, 2) for x in qkv(torch.float32, r))
    a = rnd(B, H, T, g=r, lo=-3, hi=3)
    b = rnd(B, H, T, g=r, lo=-3, hi=3)
    A_log, dt_bias = rnd(H, g=r), rnd(H, g=r)
    o = linattn.delta_forward(q, k, v, b, a, gate='token', qk_l2norm=True, scale=K ** -0.5,
                              gate_act='softplus', A_log=A_log, dt_bias=dt_bias,
                              beta_act='sigmoid')
    gl = -A_log.double().exp()[:, None] * softplus(a.double() + dt_bias.double()[:, None])
    want = delta_ref(*(x.transpose(1, 2) for x in (q, k, v, torch.sigmoid(b.double()), gl)))[0]
    close(o, want.transpose(1, 2), 3e-4)


# --- the bfloat16 state -----------------------------------------------------

@pytest.mark.parametrize('fn', ['chunk_gated_delta_rule', 'fused_recurrent_gated_delta_rule'])
def test_bf16_state_round_trip(fn):
    """initial_state bf16 -> the state is kept in bf16 and returned in bf16;
    two calls carrying it match one call within the state's rounding."""
    r = gen(12)
    q, k, v = qkv(torch.bfloat16, r)
    gl = rnd(B, T, H, g=r, lo=-1, hi=0)
    beta = rnd(B, T, H, g=r, lo=0, hi=1).to(torch.bfloat16)
    s0 = (rnd(B, H, K, V, g=r) * 0.5).to(torch.bfloat16)
    s0_copy = s0.clone()
    f = getattr(linattn, fn)
    o, S = f(q, k, v, g=gl, beta=beta, initial_state=s0, output_final_state=True,
             use_qk_l2norm_in_kernel=True)
    assert S.dtype == torch.bfloat16 and torch.equal(s0, s0_copy)  # the given one untouched
    want, wS = delta_ref(q, k, v, beta, gl, s0)
    close(o, want, TOL[torch.bfloat16])
    close(S, wS, TOL[torch.bfloat16])
    # carried across two calls: the state is rounded once in between
    m = 20
    o1, S1 = f(q[:, :m], k[:, :m], v[:, :m], g=gl[:, :m], beta=beta[:, :m], initial_state=s0,
               output_final_state=True, use_qk_l2norm_in_kernel=True)
    o2, S2 = f(q[:, m:], k[:, m:], v[:, m:], g=gl[:, m:], beta=beta[:, m:], initial_state=S1,
               output_final_state=True, use_qk_l2norm_in_kernel=True)
    assert S1.dtype == S2.dtype == torch.bfloat16
    close(torch.cat([o1, o2], 1), want, 2 * TOL[torch.bfloat16])
    close(S2, wS, 2 * TOL[torch.bfloat16])
    # without a given state, the final state is float32
    _, S = f(q, k, v, g=gl, beta=beta, output_final_state=True, use_qk_l2norm_in_kernel=True)
    assert S.dtype == torch.float32


def test_bf16_pool_in_place():
    r = gen(13)
    q, k, v = qkv(torch.bfloat16, r, T_=1)
    gl = rnd(B, 1, H, g=r, lo=-1, hi=0)
    beta = rnd(B, 1, H, g=r, lo=0, hi=1).to(torch.bfloat16)
    pool = (rnd(5, H, K, V, g=r) * 0.5).to(torch.bfloat16)
    before = pool.clone()
    idx = torch.tensor([3, 1], dtype=torch.int32)
    o, S = linattn.fused_recurrent_gated_delta_rule(
        q, k, v, g=gl, beta=beta, initial_state=pool, ssm_state_indices=idx,
        inplace_final_state=True, use_qk_l2norm_in_kernel=True)
    assert S is pool and pool.dtype == torch.bfloat16
    want, wS = delta_ref(q, k, v, beta, gl, before[[3, 1]])
    close(o, want, TOL[torch.bfloat16])
    close(pool[[3, 1]], wS, TOL[torch.bfloat16])
    assert torch.equal(pool[[0, 2, 4]], before[[0, 2, 4]])


# --- errors -----------------------------------------------------------------

def test_dtype_errors():
    r = gen(14)
    q, k, v = qkv(torch.float32, r, T_=4)
    beta = rnd(B, 4, H, g=r, lo=0, hi=1)
    gl = rnd(B, 4, H, g=r, lo=-1, hi=0)
    f = linattn.chunk_gated_delta_rule
    # float64 is refused, not converted: a hidden copy of every input
    with pytest.raises(TypeError, match='q: dtype torch.float64; linattn takes float32, '
                                        'bfloat16 or float16'):
        f(q.double(), k, v, gl, beta)
    with pytest.raises(TypeError, match='v: dtype torch.int32'):
        f(q, k, v.int(), gl, beta)
    with pytest.raises(TypeError, match='beta: dtype torch.int64'):
        f(q, k, v, gl, beta.long())
    with pytest.raises(TypeError, match='initial_state: dtype torch.float16; linattn keeps '
                                        'the state in float32 or bfloat16'):
        f(q, k, v, gl, beta, initial_state=torch.zeros(B, H, K, V, dtype=torch.float16))
    with pytest.raises(TypeError, match='initial_state: dtype float16; linattn takes float32 '
                                        'or bfloat16'):
        f(q, k, v, gl, beta, initial_state=torch.zeros(4, H, K, V, dtype=torch.float16),
          ssm_state_indices=torch.tensor([0, 1], dtype=torch.int32), inplace_final_state=True)
    with pytest.raises(TypeError, match='g: dtype torch.int64'):
        f(q, k, v, gl.long(), beta)
    # g, A_log, dt_bias in another float type are converted (small copies)
    o, _ = f(q, k, v, gl.double(), beta)
    close(o, f(q, k, v, gl, beta)[0], 0)
    # the activations' parameters
    with pytest.raises(ValueError, match='A_log'):
        f(q, k, v, gl, beta, use_gate_in_kernel=True)
    with pytest.raises(ValueError, match='A_log: expected shape'):
        f(q, k, v, gl, beta, use_gate_in_kernel=True, A_log=torch.zeros(H + 1))
    with pytest.raises(ValueError, match='dt_bias'):
        f(q, k, v, gl, beta, use_gate_in_kernel=True, A_log=torch.zeros(H),
          dt_bias=torch.zeros(H, K))
    with pytest.raises(ValueError, match='allow_neg_eigval'):
        f(q, k, v, gl, beta, allow_neg_eigval=True)
    with pytest.raises(ValueError, match='gate_lower_bound = 1: the bounded sigmoid'):
        linattn.chunk_kda(q, k, v, gl[..., None].repeat(1, 1, 1, K), beta,
                          use_gate_in_kernel=True, lower_bound=1.0)
    # the low-level names
    with pytest.raises(ValueError, match="gate_act='tanh'"):
        linattn.delta_forward(q, k, v, beta, gate_act='tanh', layout='bthd')
    with pytest.raises(ValueError, match="beta_act='relu'"):
        linattn.delta_forward(q, k, v, beta, beta_act='relu', layout='bthd')
