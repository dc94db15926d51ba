"""linattn.integrations.transformers: the replacements for transformers'
torch fallbacks (Gated DeltaNet and KDA), in the fallbacks' calling
convention, against a float64 recurrence written here; the patch/undo logic
on fake modeling modules; and, where transformers with torch >= 2 is
importable, tiny random Qwen3-Next / Qwen3.5 / Kimi Linear models with and
without the patch."""

import types

import numpy as np
import pytest

torch = pytest.importorskip('torch')
lt = pytest.importorskip('linattn.integrations.transformers')

SEED = 2511
print(f'test_transformers_integration: seed {SEED}')


def ref(q, k, v, g, beta, s0=None, l2=True):
    """float64 delta rule, [B, T, H, D] in, (o [B, T, H, V], S [B, H, K, V]);
    g [B, T, H] (per head) or [B, T, H, K] (per key channel)."""
    q, k, v, g, beta = (x.detach().double() for x in (q, k, v, g, beta))
    if q.shape[2] != v.shape[2]:  # grouped q/k heads, as the fallbacks repeat them
        q, k = (x.repeat_interleave(v.shape[2] // x.shape[2], dim=2) for x in (q, k))
    B, T, H, K = q.shape
    V = v.shape[-1]
    if l2:
        q = q / torch.sqrt((q * q).sum(-1, keepdim=True) + 1e-6)
        k = k / torch.sqrt((k * k).sum(-1, keepdim=True) + 1e-6)
    q = q * K ** -0.5
    S = torch.zeros(B, H, K, V, dtype=torch.float64) if s0 is None else s0.double().clone()
    o = torch.zeros(B, T, H, V, dtype=torch.float64)
    for t in range(T):
        d = g[:, t].exp()
        S = S * (d[..., None, None] if d.dim() == 2 else d[..., None])
        u = beta[:, t, :, None] * (v[:, t] - torch.einsum('bhkv,bhk->bhv', S, k[:, t]))
        S = S + k[:, t, :, :, None] * u[:, :, None, :]
        o[:, t] = torch.einsum('bhkv,bhk->bhv', S, q[:, t])
    return o, S


def inputs(B, T, Hk, H, K, V, kda, dtype, gen, expand=True):
    """expand: q and k repeated to the value heads before the call, as
    Qwen3-Next's layer does (and Qwen3.5's with fla < 0.5); without it they
    keep Hk heads, as Qwen3.5's layer passes them to the torch fallback,
    which repeats them itself (value head h reads q/k head h // (H // Hk))."""
    def r(*s):
        return torch.randn(*s, generator=gen)
    q = r(B, T, Hk, K)
    k = r(B, T, Hk, K)
    if H != Hk and expand:
        q = q.repeat_interleave(H // Hk, dim=2)
        k = k.repeat_interleave(H // Hk, dim=2)
    # value a strided view of a packed projection, as after torch.split
    packed = r(B, T, H * V + 3)
    v = packed[..., :H * V].reshape(B, T, H, V)
    g = -torch.nn.functional.softplus(r(B, T, H, K) if kda else r(B, T, H))  # float32, as the models
    beta = torch.sigmoid(r(B, T, H))
    q, k, v, beta = (x.to(dtype) for x in (q, k, v, beta))
    return q, k, v, g, beta


def close(got, want, tol):
    got = got.detach().double()
    err = (got - want).abs().max().item() / max(want.abs().max().item(), 1e-30)
    assert err <= tol, f'relative error {err:.3g} > {tol}'


FALLBACK_CALLED = []


def fake_fallback(*a, **kw):
    FALLBACK_CALLED.append((a, kw))
    return 'fallback'


@pytest.mark.parametrize('kda', [False, True], ids=['gdn', 'kda'])
@pytest.mark.parametrize('dtype', [torch.float32, torch.bfloat16], ids=['f32', 'bf16'])
@pytest.mark.parametrize('heads', [(2, 2, True), (2, 4, True), (2, 4, False)],
                         ids=['mha', 'repeated', 'grouped'])
@pytest.mark.parametrize('l2', [True, False], ids=['l2', 'nol2'])
@pytest.mark.parametrize('with_state', [False, True], ids=['zero', 'h0'])
def test_prefill_then_decode(kda, dtype, heads, l2, with_state):
    gen = torch.Generator().manual_seed(SEED)
    Hk, H, expand = heads
    B, T, K, V = 2, 70, 16, 12  # T over one 64-token chunk, not a multiple
    chunk = lt.make_replacement('kda_chunk' if kda else 'gdn_chunk', fake_fallback)
    rec = lt.make_replacement('kda_recurrent' if kda else 'gdn_recurrent', fake_fallback)
    q, k, v, g, beta = inputs(B, T + 3, Hk, H, K, V, kda, dtype, gen, expand)
    s0 = torch.randn(B, H, K, V, generator=gen) * 0.1 if with_state else None
    tol = 2e-4 if dtype == torch.float32 else 1e-2  # bf16: the output's rounding
    want, wS = ref(q, k, v, g, beta, s0, l2)
    # prefill, in the model's keyword form
    o, S = chunk(q[:, :T], k[:, :T], v[:, :T], g=g[:, :T], beta=beta[:, :T],
                 initial_state=s0, output_final_state=True, use_qk_l2norm_in_kernel=l2)
    assert o.dtype == dtype and o.shape == (B, T, H, V)
    assert S.dtype == torch.float32 and S.shape == (B, H, K, V)  # K-first, as the fallback
    close(o, want[:, :T], tol)
    # decode with the carried state, one token per call
    for t in range(T, T + 3):
        o1, S = rec(q[:, t:t + 1], k[:, t:t + 1], v[:, t:t + 1], g=g[:, t:t + 1],
                    beta=beta[:, t:t + 1], initial_state=S, output_final_state=True,
                    use_qk_l2norm_in_kernel=l2)
        assert o1.dtype == dtype
        close(o1, want[:, t:t + 1], tol)
    close(S, wS, 2e-4 if dtype == torch.float32 else 1e-2)
    assert not FALLBACK_CALLED


@pytest.mark.parametrize('kda', [False, True], ids=['gdn', 'kda'])
def test_decode_updates_the_cached_state_in_place(kda):
    """A decode call returns the state tensor it was given, updated, as
    transformers' cache expects of the returned state; and its result is the
    fallback's (the reference) whether or not the update is in place."""
    gen = torch.Generator().manual_seed(SEED + 7)
    B, Hk, H, K, V = 2, 2, 4, 16, 12
    rec = lt.make_replacement('kda_recurrent' if kda else 'gdn_recurrent', fake_fallback)
    q, k, v, g, beta = inputs(B, 1, Hk, H, K, V, kda, torch.float32, gen)
    S0 = torch.randn(B, H, K, V, generator=gen) * 0.1
    want, wS = ref(q, k, v, g, beta, S0.clone(), True)
    S = S0.clone()
    o, S1 = rec(q, k, v, g=g, beta=beta, initial_state=S, output_final_state=True,
                use_qk_l2norm_in_kernel=True)
    assert S1 is S
    close(o, want, 2e-4)
    close(S, wS, 2e-4)
    # without a final state the given state is left alone
    S = S0.clone()
    o, none = rec(q, k, v, g=g, beta=beta, initial_state=S, output_final_state=False,
                  use_qk_l2norm_in_kernel=True)
    assert none is None and torch.equal(S, S0)
    close(o, want, 2e-4)


@pytest.mark.parametrize('kind', ['gdn_chunk', 'gdn_recurrent', 'kda_chunk', 'kda_recurrent'])
@pytest.mark.parametrize('dtype', [torch.bfloat16, torch.float16], ids=['bf16', 'f16'])
def test_16bit_inputs_reach_linattn_as_they_are(kind, dtype, monkeypatch):
    """The replacement hands the model's 16-bit q, k, v, beta and its float32
    g to linattn's function as the very tensors it was given (no conversion
    copy in the integration), and the output is in the query's dtype."""
    gen = torch.Generator().manual_seed(SEED + 11)
    kda = kind.startswith('kda')
    q, k, v, g, beta = inputs(1, 6, 2, 2, 8, 8, kda, dtype, gen)
    seen = {}
    real = lt._LINATTN[kind]

    def spy(query, key, value, **kw):
        seen.update(q=query, k=key, v=value, g=kw['g'], beta=kw['beta'])
        return real(query, key, value, **kw)

    monkeypatch.setitem(lt._LINATTN, kind, spy)
    f = lt.make_replacement(kind, fake_fallback)
    o, S = f(q, k, v, g=g, beta=beta, initial_state=None, output_final_state=True,
             use_qk_l2norm_in_kernel=True)
    for name, x in (('q', q), ('k', k), ('v', v), ('g', g), ('beta', beta)):
        assert seen[name] is x, name
    assert o.dtype == dtype and S.dtype == torch.float32
    want, wS = ref(q, k, v, g, beta)
    close(o, want, 1e-2)
    close(S, wS, 1e-3)


def test_decode_with_a_bf16_cached_state_stays_bf16_in_place():
    gen = torch.Generator().manual_seed(SEED + 12)
    q, k, v, g, beta = inputs(2, 1, 2, 4, 16, 12, False, torch.bfloat16, gen)
    S0 = (torch.randn(2, 4, 16, 12, generator=gen) * 0.1).to(torch.bfloat16)
    want, wS = ref(q, k, v, g, beta, S0.clone(), True)
    rec = lt.make_replacement('gdn_recurrent', fake_fallback)
    S = S0.clone()
    o, S1 = rec(q, k, v, g=g, beta=beta, initial_state=S, output_final_state=True,
                use_qk_l2norm_in_kernel=True)
    assert S1 is S and S.dtype == torch.bfloat16
    close(o, want, 1e-2)
    close(S, wS, 1e-2)  # the state rounded to bf16 once


@pytest.mark.parametrize('kind', ['gdn_chunk', 'kda_chunk'])
def test_positional_and_no_final_state(kind):
    gen = torch.Generator().manual_seed(SEED + 1)
    kda = kind.startswith('kda')
    q, k, v, g, beta = inputs(1, 9, 2, 2, 8, 8, kda, torch.float32, gen)
    f = lt.make_replacement(kind, fake_fallback)
    # positional: chunk_size, initial_state, output_final_state, use_qk_l2norm_in_kernel
    o, S = f(q, k, v, g, beta, 64, None, False, True)
    assert S is None
    close(o, ref(q, k, v, g, beta)[0], 2e-4)
    rec = lt.make_replacement(kind.replace('chunk', 'recurrent'), fake_fallback)
    o, S = rec(q, k, v, g, beta, None, True, True)  # recurrent fallback: no chunk_size
    close(o, ref(q, k, v, g, beta)[0], 2e-4)
    close(S, ref(q, k, v, g, beta)[1], 2e-4)
    with pytest.raises(TypeError):
        f(q, k, v, g, beta, 64, None, False, True, 'extra')
    with pytest.raises(TypeError, match='multiple values'):
        f(q, k, v, g, beta, 64, None, initial_state=None)


def test_cu_seqlens_packed_sequences():
    gen = torch.Generator().manual_seed(SEED + 2)
    q, k, v, g, beta = inputs(1, 20, 2, 2, 8, 8, True, torch.float32, gen)
    f = lt.make_replacement('kda_chunk', fake_fallback)
    o, S = f(q, k, v, g=g, beta=beta, initial_state=None, output_final_state=True,
             use_qk_l2norm_in_kernel=True, cu_seqlens=torch.tensor([0, 7, 20]))
    for n, (a, b) in enumerate([(0, 7), (7, 20)]):
        wo, wS = ref(q[:, a:b], k[:, a:b], v[:, a:b], g[:, a:b], beta[:, a:b])
        close(o[:, a:b], wo, 2e-4)
        close(S[n:n + 1], wS, 2e-4)


def layer_views(B, T, Hk, H, K, V, gen):
    """q, k, v as the Gated DeltaNet / KDA layers make them: one depthwise
    convolution output [B, conv_dim, T] (contiguous), transposed to
    [B, T, conv_dim] and split along its last dimension, each part viewed as
    [B, T, heads, D]: the head dimension has a stride of T elements."""
    conv = torch.randn(B, 2 * Hk * K + H * V, T, generator=gen)
    mixed = conv.transpose(1, 2)
    q, k, v = torch.split(mixed, [Hk * K, Hk * K, H * V], dim=-1)
    return q.reshape(B, T, Hk, K), k.reshape(B, T, Hk, K), v.reshape(B, T, H, V)


@pytest.mark.parametrize('kind', ['gdn_chunk', 'gdn_recurrent', 'kda_chunk', 'kda_recurrent'])
@pytest.mark.parametrize('T', [1, 70])
def test_layer_views_with_strided_rows_bitwise_as_contiguous(kind, T):
    """transformers hands the replacement views whose feature rows are
    strided (the failure seen with transformers 5.17: 'v: the last dimension
    must be contiguous'); the result must be bitwise that of contiguous
    copies, for prefill and for a decode step with a carried state."""
    gen = torch.Generator().manual_seed(SEED + 21)
    B, Hk, H, K, V = 2, 2, 4, 16, 12
    q, k, v = layer_views(B, T, Hk, H, K, V, gen)
    if T > 1:
        assert v.stride(-1) == T  # the case that failed
    kda = kind.startswith('kda')
    g = -torch.nn.functional.softplus(torch.randn(B, T, H, *((K,) if kda else ()), generator=gen))
    beta = torch.sigmoid(torch.randn(B, T, H, generator=gen))
    s0 = torch.randn(B, H, K, V, generator=gen) * 0.1
    f = lt.make_replacement(kind, fake_fallback)
    # initial_state is updated in place by a decode call: each gets its own
    got_o, got_s = f(q, k, v, g=g, beta=beta, initial_state=s0.clone(), output_final_state=True,
                     use_qk_l2norm_in_kernel=True)
    want_o, want_s = f(q.contiguous(), k.contiguous(), v.contiguous(), g=g, beta=beta,
                       initial_state=s0.clone(), output_final_state=True,
                       use_qk_l2norm_in_kernel=True)
    assert torch.equal(got_o, want_o) and torch.equal(got_s, want_s)
    close(got_o, ref(q, k, v, g, beta, s0)[0], 2e-4)
    assert not FALLBACK_CALLED


def test_non_cpu_and_autograd_go_to_the_original():
    gen = torch.Generator().manual_seed(SEED + 3)
    q, k, v, g, beta = inputs(1, 4, 2, 2, 8, 8, False, torch.float32, gen)
    f = lt.make_replacement('gdn_chunk', fake_fallback)
    FALLBACK_CALLED.clear()
    meta = [x.to('meta') for x in (q, k, v, g, beta)]  # stands in for a CUDA tensor
    assert f(*meta, initial_state=None, output_final_state=True) == 'fallback'
    qg = q.clone().requires_grad_()
    assert f(qg, k, v, g, beta) == 'fallback'  # no backward in linattn
    with torch.no_grad():
        assert f(qg, k, v, g, beta)[0].shape == (1, 4, 2, 8)
    assert len(FALLBACK_CALLED) == 2
    FALLBACK_CALLED.clear()


# --- patch / undo on fake modeling modules ----------------------------------

def torch_chunk_gated_delta_rule(query, key, value, g, beta, chunk_size=64, initial_state=None,
                                 output_final_state=False, use_qk_l2norm_in_kernel=False):
    return 'chunk-fallback'


def torch_recurrent_gated_delta_rule(query, key, value, g, beta, initial_state,
                                     output_final_state, use_qk_l2norm_in_kernel=False):
    return 'recurrent-fallback'


def fake_qwen3_next(drop=None):
    mod = types.ModuleType('fake_modeling_qwen3_next')
    mod.torch_chunk_gated_delta_rule = torch_chunk_gated_delta_rule
    mod.torch_recurrent_gated_delta_rule = torch_recurrent_gated_delta_rule

    class Qwen3NextGatedDeltaNet(torch.nn.Module):
        def __init__(self):
            super().__init__()
            # as transformers: fla's kernel or the module's fallback, bound at init
            self.chunk_gated_delta_rule = mod.torch_chunk_gated_delta_rule
            self.recurrent_gated_delta_rule = mod.torch_recurrent_gated_delta_rule

    mod.Qwen3NextGatedDeltaNet = Qwen3NextGatedDeltaNet
    if drop:
        delattr(mod, drop)
    return mod


def test_apply_and_revert_on_a_fake_module():
    mod = fake_qwen3_next()
    before = torch.nn.Sequential(mod.Qwen3NextGatedDeltaNet())
    lt.apply_linattn(before, families='qwen3_next', modules={'qwen3_next': mod})
    try:
        assert lt.is_applied('qwen3_next')
        after = mod.Qwen3NextGatedDeltaNet()  # a model loaded afterwards
        for layer in (before[0], after):
            assert layer.chunk_gated_delta_rule._linattn_kind == 'gdn_chunk'
            assert layer.recurrent_gated_delta_rule._linattn_kind == 'gdn_recurrent'
        assert mod.torch_chunk_gated_delta_rule._linattn_kind == 'gdn_chunk'
        assert mod.torch_chunk_gated_delta_rule.__wrapped__ is torch_chunk_gated_delta_rule
        lt.apply_linattn(families='qwen3_next', modules={'qwen3_next': mod})  # twice: no-op
    finally:
        lt.revert_linattn()
    assert not lt.is_applied()
    assert mod.torch_chunk_gated_delta_rule is torch_chunk_gated_delta_rule
    assert mod.torch_recurrent_gated_delta_rule is torch_recurrent_gated_delta_rule
    for layer in (before[0], after, mod.Qwen3NextGatedDeltaNet()):
        assert layer.chunk_gated_delta_rule is torch_chunk_gated_delta_rule
        assert layer.recurrent_gated_delta_rule is torch_recurrent_gated_delta_rule


def test_kimi_names_of_transformers_5_17():
    """transformers 5.17's Kimi Linear module names its fallbacks
    chunk_kimi_delta_attention / recurrent_kimi_delta_attention (read on a
    machine with 5.17; later sources torch_chunk_kda / torch_recurrent_kda)
    and its layer calls them by module-level name: those are replaced, run
    linattn on CPU tensors, and are given back."""
    mod = types.ModuleType('fake_kimi_linear_5_17')

    def chunk_kimi_delta_attention(query, key, value, g, beta, chunk_size=64, initial_state=None,
                                   output_final_state=False, use_qk_l2norm_in_kernel=False,
                                   **kwargs):
        return 'torch chunk'

    def recurrent_kimi_delta_attention(query, key, value, g, beta, initial_state,
                                       output_final_state, use_qk_l2norm_in_kernel=False,
                                       **kwargs):
        return 'torch recurrent'

    class KimiLinearDeltaAttention(torch.nn.Module):
        pass

    mod.chunk_kimi_delta_attention = chunk_kimi_delta_attention
    mod.recurrent_kimi_delta_attention = recurrent_kimi_delta_attention
    mod.KimiLinearDeltaAttention = KimiLinearDeltaAttention
    lt.apply_linattn(families='kimi_linear', modules={'kimi_linear': mod})
    try:
        assert mod.chunk_kimi_delta_attention._linattn_kind == 'kda_chunk'
        assert mod.recurrent_kimi_delta_attention._linattn_kind == 'kda_recurrent'
        gen = torch.Generator().manual_seed(SEED + 9)
        q, k, v, g, beta = inputs(1, 5, 2, 2, 8, 8, True, torch.float32, gen)
        o, s = mod.chunk_kimi_delta_attention(q, k, v, g=g, beta=beta, initial_state=None,
                                              output_final_state=True,
                                              use_qk_l2norm_in_kernel=True)
        o2, s2 = mod.recurrent_kimi_delta_attention(q, k, v, g=g, beta=beta,
                                                    initial_state=torch.zeros_like(s),
                                                    output_final_state=True,
                                                    use_qk_l2norm_in_kernel=True)
        assert torch.allclose(o, o2, rtol=1e-4, atol=1e-5)
        assert torch.allclose(s, s2, rtol=1e-4, atol=1e-5)
    finally:
        lt.revert_linattn()
    assert mod.chunk_kimi_delta_attention is chunk_kimi_delta_attention
    assert mod.recurrent_kimi_delta_attention is recurrent_kimi_delta_attention


def test_fla_kernel_bound_by_a_layer_keeps_non_cpu_tensors():
    mod = fake_qwen3_next()
    layer = mod.Qwen3NextGatedDeltaNet()

    def fla_kernel(*a, **kw):
        return 'fla'
    fla_kernel.__module__ = 'fla.ops.gated_delta_rule.chunk'
    layer.chunk_gated_delta_rule = fla_kernel
    lt.apply_linattn(torch.nn.Sequential(layer), families='qwen3_next',
                     modules={'qwen3_next': mod})
    try:
        assert layer.chunk_gated_delta_rule.__wrapped__ is fla_kernel
        assert layer.recurrent_gated_delta_rule._linattn_kind == 'gdn_recurrent'
        gen = torch.Generator().manual_seed(SEED + 4)
        q, k, v, g, beta = inputs(1, 4, 2, 2, 8, 8, False, torch.float32, gen)
        meta = [x.to('meta') for x in (q, k, v, g, beta)]
        assert layer.chunk_gated_delta_rule(*meta, initial_state=None) == 'fla'
        o, _ = layer.chunk_gated_delta_rule(q, k, v, g=g, beta=beta, initial_state=None,
                                            use_qk_l2norm_in_kernel=True)
        close(o, ref(q, k, v, g, beta)[0], 2e-4)
    finally:
        lt.revert_linattn()
    assert layer.chunk_gated_delta_rule is fla_kernel
    assert layer.recurrent_gated_delta_rule is torch_recurrent_gated_delta_rule


def test_missing_function_names_it_and_the_version():
    mod = fake_qwen3_next(drop='torch_recurrent_gated_delta_rule')
    with pytest.raises(lt.IntegrationError,
                       match=r'torch_recurrent_gated_delta_rule is not there in transformers'):
        lt.apply_linattn(families='qwen3_next', modules={'qwen3_next': mod})
    assert not lt.is_applied()
    assert mod.torch_chunk_gated_delta_rule is torch_chunk_gated_delta_rule  # nothing changed


def test_unknown_family():
    with pytest.raises(ValueError, match='qwen9'):
        lt.apply_linattn(families='qwen9')


def test_missing_transformers_is_a_clear_error():
    try:
        import transformers  # noqa: F401
        pytest.skip('transformers is importable here; the missing-package error is not reachable')
    except ImportError:
        pass
    with pytest.raises(lt.IntegrationError, match='needs HF transformers'):
        lt.apply_linattn()


# --- real tiny models (transformers with torch >= 2 only) --------------------

def _real_transformers():
    if int(torch.__version__.split('.')[0]) < 2:
        pytest.skip(f'torch {torch.__version__} < 2: transformers 5 cannot run here')
    return pytest.importorskip('transformers', reason='transformers is not installed here')


# Tiny configurations built from the configs' own fields (no download).
# Kimi Linear: its defaults are the 48B checkpoint's (vocab 163840, token ids
# 163584..163839, 256 experts), so the token ids must be set inside the tiny
# vocabulary (an embedding's padding_idx must be < vocab_size), and the KDA
# layer sizes are given as the checkpoint's linear_attn_config, which every
# KimiLinearConfig read for this test takes (head_dim, num_heads,
# short_conv_kernel_size; kda_layers / full_attn_layers, 1-based, make the
# layer types). The number of routed experts is given as num_local_experts,
# the name the router and the experts read (a field, or an attribute_map
# alias of n_routed_experts, depending on the version). MLA (the one
# full-attention layer, no query LoRA) and MoE sizes are small; one group of
# experts; layer 1 is dense (first_k_dense_replace defaults to 1), layers
# 2-4 MoE.
TINY = {
    'qwen3_next': ('Qwen3NextConfig', 'Qwen3NextForCausalLM', dict(
        vocab_size=128, hidden_size=64, intermediate_size=96, num_hidden_layers=4,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16,
        linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=16,
        linear_value_head_dim=16, num_experts=4, num_experts_per_tok=2,
        moe_intermediate_size=32, shared_expert_intermediate_size=32,
        full_attention_interval=4)),
    'qwen3_5': ('Qwen3_5TextConfig', 'Qwen3_5ForCausalLM', dict(
        vocab_size=128, hidden_size=64, intermediate_size=96, num_hidden_layers=4,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16,
        linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=16,
        linear_value_head_dim=16, full_attention_interval=4)),
    'kimi_linear': ('KimiLinearConfig', 'KimiLinearForCausalLM', dict(
        vocab_size=128, hidden_size=64, intermediate_size=96, num_hidden_layers=4,
        num_attention_heads=4, num_key_value_heads=4,
        pad_token_id=0, bos_token_id=1, eos_token_id=2,
        linear_attn_config={'head_dim': 16, 'num_heads': 4, 'short_conv_kernel_size': 4,
                            'kda_layers': [1, 2, 3], 'full_attn_layers': [4]},
        kv_lora_rank=16, qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16,
        moe_intermediate_size=32, num_local_experts=4, num_experts_per_tok=2)),
}

# Functions the tiny models' linear-attention layers must reach through the
# patch: the chunked one for a prefill, the recurrent one for a decode step.
REACHED = {'qwen3_next': ('gdn_chunk', 'gdn_recurrent'), 'qwen3_5': ('gdn_chunk', 'gdn_recurrent'),
           'kimi_linear': ('kda_chunk', 'kda_recurrent')}


@pytest.mark.parametrize('family', list(TINY))
def test_tiny_model_logits_and_greedy_tokens(family, monkeypatch):
    """A tiny random model's logits and 8 greedy tokens with and without the
    patch; the patch must be reached (prefill and decode), or equal results
    would prove nothing."""
    tr = _real_transformers()
    cfg_name, model_name, kw = TINY[family]
    if not hasattr(tr, cfg_name) or not hasattr(tr, model_name):
        pytest.skip(f'transformers {tr.__version__} has no {model_name}')
    calls = {}

    def counting(kind, fn):
        def spy(*a, **k):
            calls[kind] = calls.get(kind, 0) + 1
            return fn(*a, **k)
        return spy
    for kind in REACHED[family]:
        monkeypatch.setitem(lt._LINATTN, kind, counting(kind, lt._LINATTN[kind]))
    torch.manual_seed(SEED)
    cfg = getattr(tr, cfg_name)(**kw)
    model = getattr(tr, model_name)(cfg).eval()
    ids = torch.randint(0, kw['vocab_size'], (1, 80))
    with torch.no_grad():
        base = model(ids).logits
        base_gen = model.generate(ids, max_new_tokens=8, do_sample=False)
        assert not calls, f'linattn ran before apply_linattn: {calls}'
        lt.apply_linattn(model, families=family)
        try:
            got = model(ids).logits
            got_gen = model.generate(ids, max_new_tokens=8, do_sample=False)
        finally:
            lt.revert_linattn()
    print(f'{family}: transformers {tr.__version__}, linattn calls {calls}, '
          f'{got_gen.shape[1] - ids.shape[1]} tokens generated')
    chunk, recurrent = REACHED[family]
    assert calls.get(chunk), f'{family}: the patched {chunk} was never called (calls: {calls})'
    if got_gen.shape[1] > ids.shape[1] + 1:  # at least one decode step with the cache
        assert calls.get(recurrent), \
            f'{family}: the patched {recurrent} was never called on decode (calls: {calls})'
    err = ((got - base).abs().max() / base.abs().max()).item()
    assert err <= 1e-4, f'{family}: logits differ by {err:.3g} relative'
    assert torch.equal(got_gen, base_gen)
