"""Run the linear-attention layers of HF transformers models on linattn (CPU).

    import linattn.integrations.transformers as lt
    lt.apply_linattn()            # every supported family, models loaded now and later
    ...
    lt.revert_linattn()           # the original functions back

Families: Qwen3-Next and Qwen3.5 (Gated DeltaNet: transformers'
``torch_chunk_gated_delta_rule`` / ``torch_recurrent_gated_delta_rule``) and
Kimi Linear (KDA: ``torch_chunk_kda`` / ``torch_recurrent_kda``).

Which transformers: read in the modeling sources of huggingface/transformers
(stored snapshots, 2026-11, around 5.17: modeling_qwen3_5.py at 009e78d6,
modeling_kimi_linear.py at c1a44bc9, whose layout matches the 5.17 install
line for line where its traceback shows it, cache_utils.py's
LinearAttentionLayer, and an older 5.x modeling_qwen3_next.py at 01cdc608).
Two ways of calling are in use and both are covered: the layer's
``forward`` calls the module-level name (Qwen3.5 and Kimi Linear there, and
Qwen3-Next in the 5.17 run), or ``__init__`` binds it to an instance
attribute (older Qwen3-Next: ``self.chunk_gated_delta_rule =
chunk_gated_delta_rule or torch_chunk_gated_delta_rule``). The
module-level names are replaced, the layer classes' ``__init__`` is wrapped
so that layers built later get the replacement, and the layers of models
passed to ``apply_linattn(model)`` are switched in place. Run against
transformers 5.17 with torch 2.11 (CPU, Python 3.12) by the tiny-model
tests of test_transformers_integration.py; in this repository's CI they are
skipped (torch 1.13, no transformers).

Not registered: the ``kernels`` package's device mapping
(``from_pretrained(..., use_kernels=True)``). In transformers 5.x the
fallbacks are wrapped by ``use_kernel_func_from_hub_with_fallback(name,
"fla")``, which uses fla's function when fla imports and the torch fallback
otherwise, and hands the name to ``kernels.use_kernel_forward_from_hub``;
``kernels.register_kernel_mapping`` maps such a name, per device and mode,
to a kernel *repository* (``LayerRepository(repo_id=..., layer_name=...,
version=...)`` on the Hub, or ``LocalLayerRepository(repo_path=...,
package_name=..., layer_name=...)``), which ``kernels`` loads as a built
kernel package and swaps in when the model is kernelized. A mapping entry
cannot name a Python function: a "cpu" entry for linattn would need linattn
published in the ``kernels`` package layout, which is defined by the
``kernels`` package (not read here, and installed neither here nor on the
machine the tests ran on), so it could not be written exactly or tested.
``apply_linattn`` needs no ``kernels`` package.

What a replacement does, exactly as the torch fallback's contract:
``(query, key, value, g, beta, [chunk_size,] initial_state,
output_final_state, use_qk_l2norm_in_kernel, **kwargs) -> (o, state)`` with
q/k/v [B, T, H, D], g [B, T, H] (Gated DeltaNet) or [B, T, H, K] (KDA), beta
[B, T, H], state K-first [B, H, K, V] float32, scale K ** -0.5, l2norm
x / sqrt(|x|^2 + 1e-6), o in query's dtype. ``cu_seqlens`` (packed
sequences, B = 1) is passed on to linattn when given.

It falls back to the original function (unchanged results) for tensors not on
the CPU, and when autograd would need a backward (linattn has none: no
training).

Dtype: q, k, v and beta of a bf16/fp16 model go to linattn as they are (no
conversion copy): the library reads 16-bit values and computes in float32,
as the torch fallback does after its own conversion, and writes o in the
value's dtype (the query's, in these models), rounded once. g is float32 in
these models and is read in place (another float type would be converted, a
copy). The state is float32, as the fallback's; a cache the caller holds in
bfloat16 is read and written in bfloat16 (where the fallback would hand back
a float32 state).

The gate and beta activations are not fused here: the layers compute
``g = -exp(A_log) * softplus(a + dt_bias)`` (KDA: ``fused_kda_gate``) and
``beta = sigmoid(b)`` in their ``forward`` before calling the patched
function, whose arguments are the finished g and beta; the raw projections
and A_log / dt_bias are not among them. Fusing them would mean replacing the
layers' ``forward``, which this integration does not do.

Heads: Qwen3.5 passes q and k with their own (fewer) heads when fla is not
installed, and its fallback repeats them (value head h reads q/k head
h // (HV // HK)); linattn takes them grouped so, without the copy. Qwen3-Next
(in the version read) repeats them with ``repeat_interleave`` before calling,
and linattn then reads the expanded copies (not undone here).

Strides: the layers split q, k and v out of the transposed output of their
short convolution, so the head dimension of each has a stride of T (the
token count) during a prefill; linattn's fla-style functions copy such an
operand to a contiguous one (as fla's wrappers do) and read everything else
in place. A decode token (T = 1) copies nothing, and goes through the same
wrapper, which updates the cached state where it lies.
"""

import functools
import importlib
import weakref

from .. import _fla

# (modeling module, layer class, [(module-level name, instance attribute, kind)])
_FAMILIES = {
    'qwen3_next': ('transformers.models.qwen3_next.modeling_qwen3_next',
                   'Qwen3NextGatedDeltaNet',
                   [('torch_chunk_gated_delta_rule', 'chunk_gated_delta_rule', 'gdn_chunk'),
                    ('torch_recurrent_gated_delta_rule', 'recurrent_gated_delta_rule',
                     'gdn_recurrent')]),
    'qwen3_5': ('transformers.models.qwen3_5.modeling_qwen3_5',
                'Qwen3_5GatedDeltaNet',
                [('torch_chunk_gated_delta_rule', 'chunk_gated_delta_rule', 'gdn_chunk'),
                 ('torch_recurrent_gated_delta_rule', 'recurrent_gated_delta_rule',
                  'gdn_recurrent')]),
    # transformers 5.17 names them chunk_ / recurrent_kimi_delta_attention
    # (same signatures, looked up by module-level name when the layer runs);
    # later sources torch_chunk_kda / torch_recurrent_kda
    'kimi_linear': ('transformers.models.kimi_linear.modeling_kimi_linear',
                    'KimiLinearDeltaAttention',
                    [(('torch_chunk_kda', 'chunk_kimi_delta_attention'), 'chunk_kda', 'kda_chunk'),
                     (('torch_recurrent_kda', 'recurrent_kimi_delta_attention'), 'recurrent_kda',
                      'kda_recurrent')]),
}

_LINATTN = {
    'gdn_chunk': _fla.chunk_gated_delta_rule,
    'gdn_recurrent': _fla.fused_recurrent_gated_delta_rule,
    'kda_chunk': _fla.chunk_kda,
    'kda_recurrent': _fla.fused_recurrent_kda,
}

# What apply_linattn changed, for revert_linattn: family -> saved originals.
_applied = {}


class IntegrationError(RuntimeError):
    """transformers is missing, or its modeling code no longer matches."""


def _transformers_version():
    try:
        import transformers
        return getattr(transformers, '__version__', 'unknown')
    except ImportError:
        return None


def _import_module(family):
    name = _FAMILIES[family][0]
    try:
        return importlib.import_module(name)
    except ImportError as e:
        ver = _transformers_version()
        if ver is None:
            raise IntegrationError(
                'linattn.integrations.transformers needs HF transformers, which is not '
                'importable here') from e
        raise IntegrationError(f'{name} cannot be imported from transformers {ver}: {e}') from e


def _torch():
    import torch
    return torch


def _wants_grad(tensors):
    torch = _torch()
    return torch.is_grad_enabled() and any(
        t is not None and getattr(t, 'requires_grad', False) for t in tensors)


def _on_cpu(tensors):
    # is_cpu rather than device.type == 'cpu': making six device objects
    # cost a decode call 1.4 us
    for t in tensors:
        if t is not None and not t.is_cpu:
            return False
    return True


def _run(kind, query, key, value, g, beta, initial_state, output_final_state,
         use_qk_l2norm_in_kernel, cu_seqlens):
    """linattn's fla-style function on the inputs as they are (float32, bf16
    or fp16, read in place); o in query's dtype, the state float32 (as
    transformers' fallback returns it) unless the given state is bf16.

    Decode (the recurrent kinds, one sequence per batch row, a float32
    state): the state is updated where it lies and returned as the final
    state, so a token copies no state. transformers stores the returned
    tensor as the cache entry it passed in, the same object, so the cache
    ends as it would with the fallback's new tensor."""
    torch = _torch()
    in_place = False
    if initial_state is not None:
        if initial_state.dtype not in (torch.float32, torch.bfloat16):
            initial_state = initial_state.to(torch.float32)  # as the fallback does
        in_place = (output_final_state and cu_seqlens is None and not kind.endswith('_chunk')
                    and initial_state.dim() == 4)
    o, state = _LINATTN[kind](
        query, key, value, g=g, beta=beta,
        initial_state=initial_state, output_final_state=bool(output_final_state),
        use_qk_l2norm_in_kernel=bool(use_qk_l2norm_in_kernel), cu_seqlens=cu_seqlens,
        inplace_final_state=in_place)
    if o.dtype != query.dtype:
        o = o.to(query.dtype)
    return o, (state if output_final_state else None)


def make_replacement(kind, original):
    """The drop-in for transformers' torch fallback `original` (kind:
    gdn_chunk, gdn_recurrent, kda_chunk, kda_recurrent)."""
    if kind not in _LINATTN:
        raise ValueError(f'kind: {kind!r}; one of {sorted(_LINATTN)}')
    # Positional tail as in the fallbacks: chunk: (chunk_size, initial_state,
    # output_final_state, use_qk_l2norm_in_kernel); recurrent: (initial_state,
    # output_final_state, use_qk_l2norm_in_kernel). chunk_size is not read:
    # linattn picks its own chunk, and results do not depend on it.
    names = (('chunk_size',) if kind.endswith('_chunk') else ()) + (
        'initial_state', 'output_final_state', 'use_qk_l2norm_in_kernel')

    def replacement(query, key, value, g, beta, *args, **kwargs):
        bound = kwargs  # the models pass keywords: no copy then
        if args:
            if len(args) > len(names):
                raise TypeError(f'{kind}: {len(args) + 5} positional arguments, at most '
                                f'{len(names) + 5}')
            bound = dict(zip(names, args))
            for n in bound:
                if n in kwargs:
                    raise TypeError(f'{kind}: got multiple values for argument {n!r}')
            bound.update(kwargs)
        state = bound.get('initial_state')
        tensors = (query, key, value, g, beta, state)
        if not _on_cpu(tensors) or _wants_grad(tensors):
            return original(query, key, value, g, beta, *args, **kwargs)
        return _run(kind, query, key, value, g, beta, state,
                    bound.get('output_final_state', False),
                    bound.get('use_qk_l2norm_in_kernel', False), bound.get('cu_seqlens'))

    if original is not None:
        functools.update_wrapper(replacement, original)
    replacement.__wrapped__ = original
    replacement._linattn_kind = kind
    return replacement


def _lookup(module, family, name):
    if not hasattr(module, name):
        raise IntegrationError(
            f'{module.__name__}.{name} is not there in transformers '
            f'{_transformers_version()}: the linattn integration for {family} was written for '
            f'a version that has it')
    return getattr(module, name)


def _resolve(module, family, names):
    """The module-level name of a function that transformers versions spell
    differently (names: one, or a tuple of the spellings, newest first)."""
    names = (names,) if isinstance(names, str) else names
    for name in names:
        if hasattr(module, name):
            return name
    return _lookup(module, family, ' or '.join(names))


def _bind(layer, attr, kind, module_repl, saved):
    """Point one layer's attribute at linattn; saved[attr] gets what to give
    back. Whatever the layer had is what non-CPU tensors still reach: the
    module's fallback, or fla's kernel (a CUDA path) wrapped per layer."""
    cur = vars(layer).get(attr, _MISSING)
    if cur is _MISSING and not hasattr(type(layer), attr):
        return  # this version looks the module-level name up at call time
    if getattr(cur, '_linattn_kind', None):
        saved[attr], fn = cur.__wrapped__, cur  # bound by __init__ while patched
    elif cur is _MISSING or cur is None or cur is module_repl.__wrapped__:
        saved[attr], fn = cur, module_repl
    else:
        saved[attr], fn = cur, make_replacement(kind, cur)
    setattr(layer, attr, fn)


def _patch_layer(layer, st):
    saved = {}
    for attr, (kind, repl) in st['attrs'].items():
        _bind(layer, attr, kind, repl, saved)
    return saved


_MISSING = object()


def _families(names):
    if names is None:
        return list(_FAMILIES)
    names = [names] if isinstance(names, str) else list(names)
    for n in names:
        if n not in _FAMILIES:
            raise ValueError(f'model family {n!r}; supported: {sorted(_FAMILIES)}')
    return names


def apply_linattn(model=None, families=None, modules=None):
    """Make the Gated DeltaNet / KDA layers run on linattn for CPU tensors.

    model: a loaded model (or a list of them) whose layers are switched now;
    layers built after this call get linattn through their class's __init__.
    families: 'qwen3_next', 'qwen3_5', 'kimi_linear' or a list (default all;
    a family whose modeling module transformers lacks is an error only when
    named explicitly). modules: {family: module object} to use instead of
    importing transformers' (tests). Calling it twice is harmless."""
    explicit = families is not None
    done = []
    for fam in _families(families):
        if fam in _applied:
            continue
        if modules and fam in modules:
            mod = modules[fam]
        else:
            try:
                mod = _import_module(fam)
            except IntegrationError:
                if explicit or _transformers_version() is None:
                    raise
                continue  # this transformers predates the family
        modname, clsname, entries = _FAMILIES[fam]
        cls = _lookup(mod, fam, clsname)
        entries = [(_resolve(mod, fam, names), attr, kind) for names, attr, kind in entries]
        originals = {name: _lookup(mod, fam, name) for name, _, _ in entries}
        repl = {name: make_replacement(kind, originals[name]) for name, _, kind in entries}
        attrs = {attr: (kind, repl[name]) for name, attr, kind in entries}
        for name in repl:
            setattr(mod, name, repl[name])
        init = cls.__init__
        st = {'module': mod, 'cls': cls, 'init': init, 'originals': originals,
              'attrs': attrs, 'layers': weakref.WeakKeyDictionary()}

        @functools.wraps(init)
        def patched_init(self, *a, _init=init, _st=st, **kw):
            _init(self, *a, **kw)
            _st['layers'][self] = _patch_layer(self, _st)
        cls.__init__ = patched_init
        _applied[fam] = st
        done.append(fam)
    if model is not None:
        for m in (model if isinstance(model, (list, tuple)) else [model]):
            _patch_model(m)
    return done


def _patch_model(model):
    for layer in model.modules():
        for fam, st in _applied.items():
            if isinstance(layer, st['cls']) and layer not in st['layers']:
                st['layers'][layer] = _patch_layer(layer, st)


def revert_linattn():
    """Undo apply_linattn: the module-level functions and the classes'
    __init__ restored, and every layer it switched (those still alive, loaded
    before or after apply_linattn) given back what it had."""
    for fam, st in list(_applied.items()):
        mod = st['module']
        for name, fn in st['originals'].items():
            setattr(mod, name, fn)
        st['cls'].__init__ = st['init']
        for layer, saved in list(st['layers'].items()):
            _restore(layer, saved, st['originals'])
        del _applied[fam]


def _restore(layer, saved, originals):
    for attr, old in saved.items():
        if old is _MISSING:
            try:
                delattr(layer, attr)
            except AttributeError:
                pass
        else:
            setattr(layer, attr, old)


def is_applied(family=None):
    """Whether apply_linattn is in effect (for one family, or any)."""
    return bool(_applied) if family is None else family in _applied
