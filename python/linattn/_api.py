"""The library's own entry points, one keyword per config field.

Arrays are float32 numpy arrays or CPU torch tensors whose last dimension is
contiguous; any other strides are passed to the library as they are, so no
input is copied. Outputs are of the kind of q (numpy array or torch tensor).
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


def _out(q, v):
    """An output of q's kind shaped like v."""
    if isinstance(q, _ndarray):
        return np.empty(v.shape, _float32)
    torch = sys.modules.get('torch')
    if torch is not None and isinstance(q, torch.Tensor) and q.device.type == 'cpu':
        return torch.empty(tuple(v.shape), dtype=torch.float32)
    return np.empty(getattr(v, 'shape', (1,)), _float32)  # the extension names q's fault


def _call(kind, layout, q, k, v, g, beta, o, s, z, gate, phi, algo, causal, normalize, eps,
          scale, chunk, num_threads, head_map, qk_l2norm, z_compensated=False):
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
             scale, chunk, num_threads, head_map, qk_l2norm, z_compensated)
    return o


def forward(q, k, v, g=None, *, o=None, s=None, z=None, layout='bhtd', gate=None,
            phi='elu1', algo='auto', causal=True, normalize=True, eps=1e-6, scale=1.0,
            chunk=0, num_threads=0, head_map='grouped', qk_l2norm=False, z_compensated=False):
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
    o: where to write [B, H, T, V] / [B, T, H, V]; made when None.
    """
    return _call(_FORWARD, layout, q, k, v, g, None, o, s, z, gate, phi, algo, causal,
                 normalize, eps, scale, chunk, num_threads, head_map, qk_l2norm, z_compensated)


# The decode path is the extension's own function: a Python frame in front
# of it would cost a quarter of a small step. It makes o with _out when o is
# None. Signature and documentation: help(linattn.step).
_ext.set_output_maker(_out)
step = _ext.step


def delta_forward(q, k, v, beta, g=None, *, o=None, s=None, layout='bhtd', gate=None,
                  phi='identity', algo='auto', causal=True, normalize=False, eps=1e-6,
                  scale=1.0, chunk=0, num_threads=0, head_map='grouped', qk_l2norm=False):
    """The delta rule over a whole sequence (linattn_delta_forward); returns o.

    Shapes as for forward; beta [B, H, T] ('bhtd') or [B, T, H] ('bthd'),
    values in [0, 2]. Gate none: DeltaNet; token: Gated DeltaNet; channel:
    Kimi Delta Attention. s [B, H, K, V] in/out as for forward; no z.
    """
    return _call(_DELTA_FORWARD, layout, q, k, v, g, beta, o, s,
                 None, gate, phi, algo, causal, normalize, eps, scale, chunk, num_threads,
                 head_map, qk_l2norm)


def delta_step(q, k, v, beta, g=None, *, s, o=None, gate=None, phi='identity', algo='auto',
               causal=True, normalize=False, eps=1e-6, scale=1.0, chunk=0, num_threads=0,
               head_map='grouped', qk_l2norm=False):
    """One decode token of the delta rule (linattn_delta_step); returns o.

    Shapes as for step; beta [B, H]; s [B, H, K, V] updated in place.
    """
    return _call(_DELTA_STEP, 'bhtd', q, k, v, g, beta, o, s, None, gate, phi, algo, causal,
                 normalize, eps, scale, chunk, num_threads, head_map, qk_l2norm)


def isa():
    """The name of the active kernel table: 'scalar', 'avx2', 'avx512', 'neon'."""
    return _ext.isa_name(_ext.get_isa())


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
