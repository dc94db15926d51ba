"""The library's own entry points, one keyword per config field.

Arrays are numpy arrays or CPU torch tensors whose last dimension is
contiguous; any other strides are passed to the library as they are, so no
input is copied. q, k, v, beta and o may each be float32, bfloat16 (torch)
or float16 (torch, numpy), the state s float32 or bfloat16 (torch); the
pointer and the type go to the library, which converts while it reads and
rounds once when it writes. g, z, A_log and dt_bias are float32. Outputs are
of the kind of q (numpy array or torch tensor) and of v's dtype, as fla's.
"""

import sys

import numpy as np

from . import _ext

_ndarray = np.ndarray
_float32 = np.float32

ISA = {'auto': 0, 'scalar': 1, 'avx2': 2, 'avx512': 3, 'neon': 4}

_FORWARD, _STEP, _DELTA_FORWARD, _DELTA_STEP = range(4)


def _lookup(table, value, name):
    try:
        return table[value]
    except (KeyError, TypeError):
        keys = ', '.join(repr(k) for k in table if k is not None)
        raise ValueError(f'{name}={value!r}: expected one of {keys}') from None


def _no_backward(name):
    return (f'{name}: requires_grad=True, but linattn has no backward pass (forward only); '
            f'call it under torch.no_grad() or torch.inference_mode(), or pass {name}.detach()')


def as_numpy(x, name):
    """(numpy view of x, True when x is a torch tensor); never copies."""
    if isinstance(x, _ndarray):
        return x, False
    torch = sys.modules.get('torch')
    if torch is not None and isinstance(x, torch.Tensor):
        if x.device.type != 'cpu':
            raise ValueError(f'{name}: tensor on {x.device}; linattn computes on CPU tensors')
        if x.dtype != torch.float32:
            raise TypeError(f'{name}: dtype {x.dtype}; linattn takes float32')
        if x.requires_grad and torch.is_grad_enabled():
            # Detaching would return an output without a gradient, silently.
            raise RuntimeError(_no_backward(name))
        return x.detach().numpy(), True
    raise TypeError(f'{name}: expected a float32 numpy array or CPU torch tensor, '
                    f'got {type(x).__name__}')


def wrap(a, as_torch):
    """a as a torch tensor sharing its memory when as_torch, else a."""
    if as_torch:
        return sys.modules['torch'].from_numpy(a)
    return a


_float16 = np.dtype(np.float16)


def _out(q, v, shape=None):
    """An output of q's kind shaped like v (or shape), of v's dtype when
    the library can write it and v is of q's kind (fla: o = empty_like(v)),
    else float32."""
    if isinstance(q, _ndarray):
        shape = tuple(v.shape) if shape is None else shape
        dt = v.dtype if isinstance(v, _ndarray) and v.dtype == _float16 else _float32
        return np.empty(shape, dt)
    torch = sys.modules.get('torch')
    if torch is not None and isinstance(q, torch.Tensor) and q.is_cpu:
        v_dtype = v.dtype if isinstance(v, torch.Tensor) else None
        if shape is None and v_dtype in (torch.float32, torch.bfloat16, torch.float16):
            # half the cost of torch.empty(shape, dtype=...), which a decode step feels
            return torch.empty_like(v, memory_format=torch.contiguous_format)
        dt = v_dtype if v_dtype in (torch.bfloat16, torch.float16) else torch.float32
        return torch.empty(tuple(v.shape) if shape is None else shape, dtype=dt)
    return np.empty(getattr(v, 'shape', (1,)), _float32)  # the extension names q's fault


def _call(kind, layout, q, k, v, g, beta, o, s, z, gate, phi, algo, causal, normalize, eps,
          scale, chunk, num_threads, head_map, qk_l2norm, z_compensated=False,
          gate_act='none', gate_lower_bound=None, beta_act='none', A_log=None, dt_bias=None):
    # Everything goes to the extension as it is: it reads numpy arrays
    # through the buffer protocol and tensors through their pointer and
    # strides, and names ('elu1', 'bthd') and flags itself. Only o, when
    # not given, is made here, of q's kind.
    torch = sys.modules.get('torch')
    if torch is not None and torch.is_grad_enabled():
        for name, x in (('q', q), ('k', k), ('v', v), ('g', g), ('beta', beta)):
            if isinstance(x, torch.Tensor) and x.requires_grad:
                raise RuntimeError(_no_backward(name))
    if o is None:
        o = _out(q, v)
    _ext.run(kind, layout, q, k, v, g, beta, o, s, z, gate, phi, algo, causal, normalize, eps,
             scale, chunk, num_threads, head_map, qk_l2norm, z_compensated, gate_act,
             gate_lower_bound, beta_act, A_log, dt_bias)
    return o


def forward(q, k, v, g=None, *, o=None, s=None, z=None, layout='bhtd', gate=None,
            phi='elu1', algo='auto', causal=True, normalize=True, eps=1e-6, scale=1.0,
            chunk=0, num_threads=0, head_map='grouped', qk_l2norm=False, z_compensated=False,
            gate_act='none', gate_lower_bound=None, A_log=None, dt_bias=None):
    """Whole-sequence linear attention (linattn_forward); returns o.

    layout 'bhtd': q, k [B, Hk, T, K], v [B, H, T, V] (the C library's order);
    'bthd': [B, T, Hk, K] and [B, T, H, V] (flash-linear-attention's).
    H value heads read Hk = H / group q/k heads (head_map 'grouped' or 'tiled').
    g: None; [H] or [B, H] (gate 'head'); [B, H, T] or [B, T, H] ('token');
    [B, H, T, K] or [B, T, H, K] ('channel'); log-decays, <= 0. gate=None
    picks the kind from g's dimensions.
    s [B, H, K, V] and z [B, H, K] (C-contiguous, float32) are read as the
    initial state and overwritten with the final one; None = zero state.
    z_compensated=True: z is [B, H, 2, K], the sums z[:, :, 0] and the
    rounding error they have not absorbed z[:, :, 1] (the normaliser is
    their sum; zeros to start); see step. A chunked forward folds the error
    into the sums and leaves z[:, :, 1] zero.
    o: where to write [B, H, T, V] / [B, T, H, V]; made when None, of v's
    dtype.
    Types: q, k, v, o float32, bfloat16 or float16; s float32 or bfloat16;
    g, z float32.
    gate_act 'softplus': g holds raw projections a, and the library uses
    -exp(A_log[h]) * softplus(a + dt_bias); 'bounded_sigmoid':
    gate_lower_bound * sigmoid(exp(A_log[h]) * (a + dt_bias)) with
    gate_lower_bound < 0. A_log [H]; dt_bias None, [H], or with a channel
    gate [H, K] or [H * K]; float32.
    """
    return _call(_FORWARD, layout, q, k, v, g, None, o, s, z, gate, phi, algo, causal,
                 normalize, eps, scale, chunk, num_threads, head_map, qk_l2norm, z_compensated,
                 gate_act, gate_lower_bound, 'none', A_log, dt_bias)


# The decode path is the extension's own function: a Python frame in front
# of it would cost a quarter of a small step. It makes o with _out when o is
# None. Signature and documentation: help(linattn.step).
_ext.set_output_maker(_out)
step = _ext.step


def delta_forward(q, k, v, beta, g=None, *, o=None, s=None, layout='bhtd', gate=None,
                  phi='identity', algo='auto', causal=True, normalize=False, eps=1e-6,
                  scale=1.0, chunk=0, num_threads=0, head_map='grouped', qk_l2norm=False,
                  gate_act='none', gate_lower_bound=None, beta_act='none', A_log=None,
                  dt_bias=None):
    """The delta rule over a whole sequence (linattn_delta_forward); returns o.

    Shapes as for forward; beta [B, H, T] ('bhtd') or [B, T, H] ('bthd'),
    values in [0, 2]. Gate none: DeltaNet; token: Gated DeltaNet; channel:
    Kimi Delta Attention. s [B, H, K, V] in/out as for forward; no z.
    Types and gate_act as for forward; beta float32, bfloat16 or float16.
    beta_act 'sigmoid': beta holds logits b and the library uses
    sigmoid(b); 'sigmoid2': 2 * sigmoid(b) (fla's allow_neg_eigval).
    """
    return _call(_DELTA_FORWARD, layout, q, k, v, g, beta, o, s,
                 None, gate, phi, algo, causal, normalize, eps, scale, chunk, num_threads,
                 head_map, qk_l2norm, False, gate_act, gate_lower_bound, beta_act, A_log,
                 dt_bias)


def delta_step(q, k, v, beta, g=None, *, s, o=None, gate=None, phi='identity', algo='auto',
               causal=True, normalize=False, eps=1e-6, scale=1.0, chunk=0, num_threads=0,
               head_map='grouped', qk_l2norm=False, gate_act='none', gate_lower_bound=None,
               beta_act='none', A_log=None, dt_bias=None):
    """One decode token of the delta rule (linattn_delta_step); returns o.

    Shapes as for step; beta [B, H]; s [B, H, K, V] updated in place.
    Types, gate_act and beta_act as for delta_forward.
    """
    return _call(_DELTA_STEP, 'bhtd', q, k, v, g, beta, o, s, None, gate, phi, algo, causal,
                 normalize, eps, scale, chunk, num_threads, head_map, qk_l2norm, False,
                 gate_act, gate_lower_bound, beta_act, A_log, dt_bias)


def isa():
    """The name of the active kernel table: 'scalar', 'avx2', 'avx512', 'neon'."""
    return _ext.isa_name(_ext.get_isa())


def tuning():
    """The machine whose measured tuning data the kernels use on this CPU:
    'zen4', 'zen5', 'sapphire_rapids' or 'other' (linattn_tuning_name)."""
    return _ext.tuning_name()


def set_isa(name):
    """Make a kernel table active for the whole process ('auto' = best)."""
    _ext.set_isa(_lookup(ISA, name, 'isa'))


def isa_available(name):
    """True when this build has the table and this CPU can run it."""
    return _ext.isa_available(_lookup(ISA, name, 'isa'))


def last_error():
    """Why the last linattn call on this thread failed ('success' after one that did not)."""
    return _ext.last_error()


def version():
    """The C library's version, 'MAJOR.MINOR.PATCH'."""
    return _ext.version()
