"""flash-linear-attention's functions, by name, argument names and defaults.

Layout [B, T, H, D]; each returns (o, final_state), final_state None unless
output_final_state=True. q and k come after their feature map (the library
runs phi = identity) and the gated kernels do not normalise, as in fla.
scale=None means K ** -0.5. initial_state is [N, H, K, V] (N = B, or the
number of sequences with cu_seqlens) and is never modified: the final state
is a new array. With cu_seqlens, B must be 1 and the sequences lie packed
along T; each has its own state. Value heads may outnumber q/k heads
(grouped, as fla's GVA). Inputs are used in place through their strides;
copies are made only where fla's own options ask for a transformation
(reverse, state_v_first, g plus g_gamma), to bring g, A_log and dt_bias
to float32 when given in another float type, and where an operand's feature
rows are strided: q, k, v or a per-channel g whose last dimension has a
stride other than 1 (a view of a transposed tensor) is copied to a
C-contiguous one, as fla's wrappers do (the kernels read a row as
consecutive values). beta and per-token or per-head gates have no feature
axis and are read through any strides.

Types: q, k, v and beta float32, bfloat16 (torch) or float16 (torch,
numpy), read where they lie; o has v's dtype, as fla's. The state is
float32, or bfloat16 when initial_state (or the pool) is a bfloat16 tensor;
the final state has the dtype of initial_state (float32 when none is
given). use_gate_in_kernel (with A_log, dt_bias, lower_bound) and
use_beta_sigmoid_in_kernel / allow_neg_eigval run in the library's input
stage on the raw projections: nothing is computed or copied here.

Serving (vLLM's names): initial_state may be a pool of states
[slots, H, K, V] ([slots, H, V, K] with state_v_first), any strides;
ssm_state_indices [N] names each sequence's slot (read and written;
negative: padding), [N, S] its per-token slots (the state after token j
goes to indices[n][j], the read slot is indices[n][num_accepted_tokens[n]
- 1]); inplace_final_state=True writes the pool where it lies and returns
it. cu_seqlens and the pool form are one linattn_run call.
"""

import sys
import warnings

import numpy as np

from . import _ext
from ._api import _DELTA_FORWARD, _FORWARD, _call, _no_backward, _out, as_numpy, wrap

_BTHD = 'bthd'


def _segments(cu_seqlens, B, T):
    if cu_seqlens is None:
        return None
    if B != 1:
        raise ValueError(f'The batch size is expected to be 1 rather than {B} when using '
                         f'`cu_seqlens`. Please flatten variable-length inputs before processing.')
    if hasattr(cu_seqlens, 'tolist'):
        cu_seqlens = cu_seqlens.tolist()
    cu = [int(x) for x in cu_seqlens]
    if len(cu) < 2 or cu[0] != 0 or cu[-1] != T or any(a > b for a, b in zip(cu, cu[1:])):
        raise ValueError(f'cu_seqlens must rise from 0 to T = {T}, got {cu}')
    return list(zip(cu, cu[1:]))


def _torch_of(x):
    """The torch module when x is a torch tensor, else None."""
    torch = sys.modules.get('torch')
    return torch if torch is not None and isinstance(x, torch.Tensor) else None


def _flip(x):
    """x reversed along the token axis (a copy)."""
    if x is None:
        return None
    torch = _torch_of(x)
    return torch.flip(x, [1]) if torch else np.ascontiguousarray(x[:, ::-1])


def _check_grad(q, k, v, g, beta):
    """A tensor that needs a gradient is refused: linattn has no backward."""
    torch = sys.modules.get('torch')
    if torch is not None and torch.is_grad_enabled():
        for name, x in (('q', q), ('k', k), ('v', v), ('g', g), ('beta', beta)):
            if isinstance(x, torch.Tensor) and x.requires_grad:
                raise RuntimeError(_no_backward(name))


def _as_f32(x, name):
    """g, A_log, dt_bias, g_gamma: float32 as given; another float type is
    converted (a copy: the library reads these in float32 only); any other
    type goes on to the extension, which names it."""
    if x is None:
        return None
    torch = _torch_of(x)
    if torch is not None:
        if x.dtype != torch.float32 and x.is_floating_point():
            return x.to(torch.float32)  # still tracked: a gradient need is caught after
        return x
    if not isinstance(x, np.ndarray):
        x = np.asarray(x)
    if x.dtype != np.float32 and x.dtype.kind == 'f':
        return x.astype(np.float32)
    return x


def _rows(x):
    """x with its last (feature) dimension contiguous: x itself when that
    dimension's stride is 1 (or its size is 1), else a C-contiguous copy.
    The kernels read a feature row as consecutive floats; fla's wrappers make
    every input contiguous, and callers pass views whose rows are strided
    (transformers splits q, k, v out of a transposed convolution output).
    Other dimensions are read through their strides, so the usual case
    copies nothing. Written for the decode path: a few attribute reads."""
    if type(x) is np.ndarray:
        if x.ndim == 0 or x.strides[-1] == x.itemsize or x.shape[-1] <= 1:
            return x
        return np.ascontiguousarray(x)
    try:  # a torch tensor; anything else goes on to the extension, which names it
        if x.is_contiguous() or x.stride(-1) == 1 or x.shape[-1] <= 1:
            return x
    except (AttributeError, TypeError, IndexError, RuntimeError):
        return x
    return x.contiguous()


def _zeros(q, shape):
    """A float32 zero state of q's kind."""
    torch = _torch_of(q)
    return torch.zeros(shape, dtype=torch.float32) if torch else np.zeros(shape, np.float32)


def _state_copy(x, q, v_first=False):
    """A C-contiguous copy of state x in its own dtype ([N, H, V, K] read
    K-first when v_first), of q's kind where the dtype allows."""
    torch = _torch_of(x)
    ok = (x.dtype in (torch.float32, torch.bfloat16) if torch is not None
          else isinstance(x, np.ndarray) and x.dtype == np.float32)
    if not ok:
        raise TypeError(f'initial_state: dtype {getattr(x, "dtype", type(x).__name__)}; '
                        f'linattn keeps the state in float32 or bfloat16 (torch)')
    if torch is not None:
        x = x.detach()
        if v_first:
            x = x.transpose(2, 3)
        return x.clone(memory_format=torch.contiguous_format)
    x = np.array(x.transpose(0, 1, 3, 2) if v_first else x, order='C')
    if _torch_of(q) is not None:
        return sys.modules['torch'].from_numpy(x)
    return x


def _v_first(st):
    """A K-first state [N, H, K, V] as a new V-first one."""
    torch = _torch_of(st)
    if torch is not None:
        return st.transpose(2, 3).contiguous()
    return np.ascontiguousarray(st.transpose(0, 1, 3, 2))


def _kind_of(x, q):
    """x (numpy) as a tensor sharing its memory when q is a tensor."""
    return wrap(x, _torch_of(q) is not None) if isinstance(x, np.ndarray) else x


_I32, _I64 = np.dtype(np.int32), np.dtype(np.int64)


def _ints(x, name, dtype, tensor_ok=False):
    """x as a C-contiguous numpy integer array (a copy only to change dtype).
    tensor_ok: a C-contiguous CPU torch tensor of that dtype is returned as
    it is, for the extension to read in place (converting it cost a decode
    step 2 us)."""
    if type(x) is np.ndarray and x.dtype == dtype and x.flags.c_contiguous and x.ndim in (1, 2):
        return x  # the decode loop's case: no numpy call
    if not isinstance(x, np.ndarray) and hasattr(x, 'numpy'):
        torch = _torch_of(x) if tensor_ok else None
        if (torch is not None and x.dtype == (torch.int32 if dtype == _I32 else torch.int64)
                and x.ndim in (1, 2) and x.is_contiguous()):
            return x  # the extension refuses it if it is not on the CPU
        x = x.detach().numpy()
    a = np.ascontiguousarray(x, dtype=dtype)
    if a.ndim not in (1, 2):
        raise ValueError(f'{name}: expected [N] or [N, K], got shape {list(a.shape)}')
    return a


def _bthd_shape(q, v, scale):
    """B, T, K, H (value heads), V of fla's [B, T, H, D] q and v, and the
    scale (fla's default K ** -0.5 for None)."""
    if getattr(q, 'ndim', None) != 4 or getattr(v, 'ndim', None) != 4:
        for name, x in (('q', q), ('v', v)):
            if not hasattr(x, 'ndim') or not hasattr(x, 'shape'):
                raise TypeError(f'{name}: expected a numpy array or CPU torch tensor, '
                                f'got {type(x).__name__}')
        raise ValueError(f'q, k, v: expected [B, T, H, D] arrays, got q {q.shape}, v {v.shape}')
    B, T, _, K = q.shape
    _, _, H, V = v.shape
    return B, T, K, H, V, K ** -0.5 if scale is None else scale


_NO_ACT = ('none', None, 'none', None, None)  # gate_act, lower bound, beta_act, A_log, dt_bias


def _run_pool(kind, q, k, v, g, gate, beta, scale, initial_state, output_final_state,
              cu_seqlens, normalize, state_v_first, qk_l2norm, chunk, algo,
              ssm_state_indices, num_accepted_tokens, inplace_final_state, act):
    """One linattn_run call: the state as a pool addressed by strides (no
    copy in place), slots from vLLM's index forms, cu_seqlens in C."""
    _check_grad(q, k, v, g, beta)
    B, T, K, H, V, scale = _bthd_shape(q, v, scale)
    cu = None
    if cu_seqlens is not None:
        if B != 1:
            raise ValueError(f'The batch size is expected to be 1 rather than {B} when using '
                             f'`cu_seqlens`. Please flatten variable-length inputs before '
                             f'processing.')
        cu = _ints(cu_seqlens, 'cu_seqlens', _I64, True)
    N = B if cu is None else len(cu) - 1
    pool, zpool = initial_state, None
    if isinstance(pool, tuple):
        pool, zpool = pool if normalize else (pool[0], None)
    rd = wr = snap = None
    if ssm_state_indices is not None:
        if pool is None:
            raise ValueError('ssm_state_indices needs initial_state: the state pool')
        idx = _ints(ssm_state_indices, 'ssm_state_indices', _I32, True)
        if idx.shape[0] != N:
            raise ValueError(f'ssm_state_indices: {idx.shape[0]} rows for {N} sequences')
        if idx.ndim == 1:
            rd = idx  # read and write the same slot
        else:
            # vLLM's [N, K] form: read the slot of the last accepted token;
            # the state after token j goes to idx[n, j], nothing else is written
            idx = _ints(idx, 'ssm_state_indices', _I32)
            Ks = idx.shape[1]
            if num_accepted_tokens is None:
                rd = np.ascontiguousarray(idx[:, 0])
            else:
                acc = _ints(num_accepted_tokens, 'num_accepted_tokens', _I64)
                if acc.shape != (N,) or (acc < 1).any() or (acc > Ks).any():
                    raise ValueError(f'num_accepted_tokens: expected [{N}] values in 1..{Ks}')
                rd = np.ascontiguousarray(idx[np.arange(N), acc - 1])
            wr = np.full(N, -1, np.int32)
            lens = np.full(N, T, np.int64) if cu is None else np.diff(_ints(cu, 'cu_seqlens', _I64))
            if (lens > Ks).any():
                raise ValueError(f'ssm_state_indices [N, {Ks}]: a sequence has more than '
                                 f'{Ks} tokens')
            # library snapshot j is the state after token len - K + j
            src = np.arange(Ks)[None, :] - (Ks - lens)[:, None]
            snap = np.where(src >= 0, idx[np.arange(N)[:, None], np.clip(src, 0, Ks - 1)],
                            -1).astype(np.int32)
            rd = np.where(idx[:, 0] < 0, -1, rd).astype(np.int32)  # a padded row
    elif pool is not None:
        shape = tuple(pool.shape)
        want = (N, H, V, K) if state_v_first else (N, H, K, V)
        if shape != want:
            raise ValueError(f'initial_state: expected shape {list(want)}, got {list(shape)}')
    made = False
    if pool is None and (output_final_state or inplace_final_state):
        pool = _zeros(q, (N, H, V, K) if state_v_first else (N, H, K, V))
        made = True
    elif pool is not None and not inplace_final_state:
        pool = _state_copy(pool, q)  # the caller's stays; its dtype is kept
        made = True
    z = None
    if normalize and pool is not None:
        slots = pool.shape[0]
        if zpool is None:
            if not made:
                raise ValueError('normalize with an in-place pool needs initial_state = '
                                 '(S, z) with z [slots, 1, H, K]')
            z = np.zeros((slots, H, K), np.float32)
        else:
            z = as_numpy(zpool, 'initial_state[1]')[0]
            if not inplace_final_state:
                z = np.array(z, np.float32)
            z = z.reshape(slots, H, K)
    o = _out(q, v)  # [B, T, H, V], as v
    _ext.run_pool(kind, _BTHD, q, k, v, g, beta, o, pool, z, gate, 'identity', algo, True,
                  normalize, 1e-10, float(scale), chunk, 0, 'grouped', qk_l2norm, False, *act,
                  rd, wr, snap, cu, state_v_first)
    final = None
    if inplace_final_state:
        final = initial_state
    elif output_final_state:
        final = _kind_of(pool, q)
        if normalize:
            final = (final, wrap(z.reshape(-1, 1, H, K), _torch_of(q) is not None))
    return o, final


def _run(kind, q, k, v, g=None, gate='none', beta=None, scale=None, initial_state=None,
         output_final_state=False, cu_seqlens=None, normalize=False, reverse=False,
         state_v_first=False, qk_l2norm=False, chunk=0, algo='auto', ssm_state_indices=None,
         num_accepted_tokens=None, inplace_final_state=False, act=_NO_ACT, tried=False):
    if (inplace_final_state and cu_seqlens is None and num_accepted_tokens is None
            and not normalize and not reverse and not chunk and not tried):
        # a serving engine's (or transformers') decode step: the extension
        # does this layer's work when no operand needs converting, else it
        # returns None (tried: the caller has had that None already)
        o = _ext.in_place(kind, q, k, v, g, gate, beta, scale, initial_state,
                          ssm_state_indices, state_v_first, qk_l2norm, algo, *act)
        if o is not None:
            return o, initial_state
    g = _as_f32(g, 'g')
    # operands whose last dimension is a feature row: q, k [.., K], v [.., V]
    # and a per-channel gate [.., K]; beta and a per-token or per-head gate
    # have no feature axis and are read through any strides
    q, k, v = _rows(q), _rows(k), _rows(v)
    if gate == 'channel':
        g = _rows(g)
    if ssm_state_indices is not None or inplace_final_state or (cu_seqlens is not None and
                                                                  not reverse):
        if reverse:
            raise NotImplementedError('reverse=True with a state pool or in place')
        return _run_pool(kind, q, k, v, g, gate, beta, scale, initial_state,
                         output_final_state, cu_seqlens, normalize, state_v_first, qk_l2norm,
                         chunk, algo, ssm_state_indices, num_accepted_tokens,
                         inplace_final_state, act)
    if reverse and cu_seqlens is not None:
        return _run_reversed_packed(kind, q, k, v, g, gate, beta, scale, initial_state,
                                    output_final_state, cu_seqlens, normalize, state_v_first,
                                    qk_l2norm, chunk, algo, act)
    _check_grad(q, k, v, g, beta)
    torch_out = _torch_of(q) is not None
    B, T, K, H, V, scale = _bthd_shape(q, v, scale)
    N = B

    z_init = None
    if isinstance(initial_state, tuple):
        initial_state, z_init = initial_state if normalize else (initial_state[0], None)
    s = z = None
    if initial_state is not None:
        want = (N, H, V, K) if state_v_first else (N, H, K, V)
        if tuple(initial_state.shape) != want:
            raise ValueError(f'initial_state: expected shape {list(want)}, '
                             f'got {list(initial_state.shape)}')
        s = _state_copy(initial_state, q, state_v_first)  # its dtype: float32 or bfloat16
    elif output_final_state or z_init is not None:
        s = _zeros(q, (N, H, K, V))
    if normalize and s is not None:
        if z_init is None:
            z = np.zeros((N, H, K), np.float32)
        else:
            z0 = as_numpy(z_init, 'initial_state[1]')[0]
            if z0.shape != (N, 1, H, K) or z0.dtype != np.float32:
                raise ValueError(f'initial_state[1]: expected float32 [{N}, 1, {H}, {K}], '
                                 f'got {z0.dtype} {list(z0.shape)}')
            z = np.array(z0.reshape(N, H, K), np.float32, order='C')

    o = _out(q, v)  # [B, T, H, V], as v
    if reverse:  # the tokens backwards: copies, as the C API takes no negative strides
        timed = gate in ('token', 'channel')  # g has a token axis to flip
        q, k, v, beta = _flip(q), _flip(k), _flip(v), _flip(beta)
        g = _flip(g) if timed else g
    _call(kind, _BTHD, q, k, v, g, beta, o, s, z, gate, 'identity', algo, True, normalize,
          1e-10, float(scale), chunk, 0, 'grouped', qk_l2norm, False, *act)
    if reverse:
        o = _flip(o)

    final = None
    if output_final_state:
        final = _v_first(s) if state_v_first else s
        if normalize:
            final = (final, wrap(z.reshape(N, 1, H, K), torch_out))
    return o, final


def _first_axis_reversed(x):
    """x with its first axis reversed (a copy)."""
    torch = _torch_of(x)
    return torch.flip(x, [0]) if torch else np.ascontiguousarray(x[::-1])


def _run_reversed_packed(kind, q, k, v, g, gate, beta, scale, initial_state, output_final_state,
                         cu_seqlens, normalize, state_v_first, qk_l2norm, chunk, algo, act):
    """reverse=True on packed sequences in one C call: the token axis
    reversed holds every sequence reversed, in reverse order, at offsets
    T - cu_seqlens read backwards, so the states go in (and come out) in
    reverse order too."""
    B, T = q.shape[:2]
    segs = _segments(cu_seqlens, B, T)
    cu = np.array([0] + [end for _, end in segs], np.int64)
    mirrored = np.ascontiguousarray(T - cu[::-1])
    timed = gate in ('token', 'channel')  # g has a token axis to flip
    init = initial_state
    if init is not None:
        init = (tuple(_first_axis_reversed(x) for x in init) if isinstance(init, tuple)
                else _first_axis_reversed(init))
    o, final = _run_pool(kind, _flip(q), _flip(k), _flip(v), _flip(g) if timed else g, gate,
                         _flip(beta), scale, init, output_final_state, mirrored, normalize,
                         state_v_first, qk_l2norm, chunk, algo, None, None, False, act)
    if final is not None:
        final = (tuple(_first_axis_reversed(x) for x in final) if isinstance(final, tuple)
                 else _first_axis_reversed(final))
    return _flip(o), final


def _pool(ssm_state_indices, num_accepted_tokens, inplace_final_state, tried=False):
    """_run's serving keywords (tried: see _run)."""
    return dict(ssm_state_indices=ssm_state_indices, num_accepted_tokens=num_accepted_tokens,
                inplace_final_state=inplace_final_state, tried=tried)


# fla keyword arguments that are accepted and do not change the result on the
# CPU (GPU tuning and bookkeeping); any other unknown keyword warns, once per
# function and name: transformers passes its attention keyword arguments
# through to the kernel, so an error would break a drop-in, and silence would
# hide a misspelt argument (output_final_sate=True returning no state).
_IGNORED = frozenset({'chunk_size', 'cu_seqlens_cpu', 'chunk_indices', 'disable_recompute'})
_warned = set()


def _kwargs(fn, kwargs, used=()):
    """Checks fn's **kwargs: head_first is an error, as in fla; names in
    used are read by fn; the rest warn unless fla accepts and ignores them."""
    if 'head_first' in kwargs:
        raise DeprecationWarning(
            'head_first has been removed. Inputs must be in `[B, T, H, ...]` format.')
    for name in kwargs:
        if name in used or name in _IGNORED or (fn, name) in _warned:
            continue
        _warned.add((fn, name))
        warnings.warn(f'linattn.{fn}: unknown keyword argument {name!r} ignored',
                      stacklevel=3)


def _add(a, b):
    """a + b in float32 (a new array), for fla options that combine two gates."""
    a, b = _as_f32(a, 'g'), _as_f32(b, 'g')
    torch = _torch_of(a)
    if torch is not None and not isinstance(b, torch.Tensor):
        b = torch.from_numpy(np.asarray(b))
    elif torch is None and _torch_of(b) is not None:
        b = b.numpy()
    return a + b


def _beta(beta, q, v, use_sigmoid, allow_neg_eigval):
    """(beta, beta_act): the library applies fla's in-kernel sigmoid to the
    logits as it reads them (2 sigmoid with allow_neg_eigval)."""
    if allow_neg_eigval and not use_sigmoid:
        raise ValueError('`allow_neg_eigval=True` requires `use_beta_sigmoid_in_kernel=True`.')
    act = ('sigmoid2' if allow_neg_eigval else 'sigmoid') if use_sigmoid else 'none'
    if beta is None:  # fla: ones (activated too when asked)
        B, T = q.shape[:2]
        torch = _torch_of(q)
        shape = (B, T, v.shape[2])
        beta = torch.ones(shape, dtype=torch.float32) if torch else np.ones(shape, np.float32)
    return beta, act


def _gate_act(g, A_log, dt_bias, lower_bound, H, K=None):
    """The library's gate activation for fla's use_gate_in_kernel: g holds the
    raw projections; -exp(A_log) * softplus(g + dt_bias), or with
    lower_bound: lower_bound * sigmoid(exp(A_log) * (g + dt_bias)) (A_log None:
    lower_bound * sigmoid(g + dt_bias), as fla). K: a per-channel gate, whose
    dt_bias is [H * K] or [H, K]."""
    if g is None:
        raise ValueError('`g` (raw pre-activation) must be provided when '
                         '`use_gate_in_kernel=True`.')
    if A_log is None:
        if lower_bound is None:
            raise ValueError('`A_log` must be provided when `use_gate_in_kernel=True`.')
        A_log = np.zeros(H, np.float32)  # exp(0) = 1: fla's scale when A_log is None
    A_log = _as_f32(A_log, 'A_log')
    dt_bias = _as_f32(dt_bias, 'dt_bias')
    if lower_bound is None:
        return ('softplus', None, A_log, dt_bias)
    return ('bounded_sigmoid', float(lower_bound), A_log, dt_bias)


def _act(gate, beta_act):
    """The extension's (gate_act, lower bound, beta_act, A_log, dt_bias)."""
    gate_act, lower, A_log, dt_bias = gate or ('none', None, None, None)
    return (gate_act, lower, beta_act, A_log, dt_bias)


# --- linear attention -------------------------------------------------------

def chunk_linear_attn(q, k, v, scale=None, initial_state=None, output_final_state=False,
                      normalize=True, cu_seqlens=None, state_v_first=False,
                      ssm_state_indices=None, num_accepted_tokens=None, inplace_final_state=False,
                      **kwargs):
    """fla.ops.linear_attn.chunk_linear_attn. With normalize, o is divided by
    q . (sum of k) + 1e-10 and the state is the pair (S [N, H, K, V],
    z [N, 1, H, K])."""
    if kwargs:
        _kwargs('chunk_linear_attn', kwargs)
    return _run(_FORWARD, q, k, v, scale=scale, initial_state=initial_state,
                output_final_state=output_final_state, cu_seqlens=cu_seqlens,
                normalize=normalize, state_v_first=state_v_first, algo='auto',
                ssm_state_indices=ssm_state_indices, num_accepted_tokens=num_accepted_tokens,
                inplace_final_state=inplace_final_state)


def fused_recurrent_linear_attn(q, k, v, scale=None, initial_state=None,
                                output_final_state=False, reverse=False, normalize=False,
                                cu_seqlens=None, state_v_first=False,
                                ssm_state_indices=None, num_accepted_tokens=None,
                                inplace_final_state=False, **kwargs):
    """fla.ops.linear_attn.fused_recurrent_linear_attn (normalize off by default)."""
    if kwargs:
        _kwargs('fused_recurrent_linear_attn', kwargs)
    return _run(_FORWARD, q, k, v, scale=scale, initial_state=initial_state,
                output_final_state=output_final_state, cu_seqlens=cu_seqlens,
                normalize=normalize, reverse=reverse, state_v_first=state_v_first,
                algo='recurrent',
                ssm_state_indices=ssm_state_indices, num_accepted_tokens=num_accepted_tokens,
                inplace_final_state=inplace_final_state)


# --- gated linear attention -------------------------------------------------

def _simple_gla(q, k, v, g, g_gamma, scale, initial_state, output_final_state, state_v_first,
                cu_seqlens, reverse, algo, chunk, pool):
    if g is not None and g_gamma is not None:
        g_gamma = _as_f32(g_gamma, 'g_gamma')
        g, gate = _add(g, g_gamma.reshape(1, 1, g_gamma.shape[0])), 'token'
    elif g is not None:
        gate = 'token'
    elif g_gamma is not None:
        g, gate = g_gamma, 'head'
    else:
        gate = 'none'
    return _run(_FORWARD, q, k, v, g, gate, scale=scale, initial_state=initial_state,
                output_final_state=output_final_state, cu_seqlens=cu_seqlens,
                reverse=reverse, state_v_first=state_v_first, algo=algo, chunk=chunk, **pool)


def chunk_simple_gla(q, k, v, g=None, g_gamma=None, scale=None, initial_state=None,
                     output_final_state=False, state_v_first=False, cu_seqlens=None,
                     cu_seqlens_cpu=None,
                     ssm_state_indices=None, num_accepted_tokens=None,
                     inplace_final_state=False, **kwargs):
    """fla.ops.simple_gla.chunk_simple_gla: g [B, T, H] per-token log-decay
    and/or g_gamma [H] per-head log-decay."""
    if kwargs:
        _kwargs('chunk_simple_gla', kwargs, ('chunk_size',))
    return _simple_gla(q, k, v, g, g_gamma, scale, initial_state, output_final_state,
                       state_v_first, cu_seqlens, False, 'auto',
                       kwargs.get('chunk_size') or 0,
                       _pool(ssm_state_indices, num_accepted_tokens, inplace_final_state))


def fused_recurrent_simple_gla(q, k, v, g=None, g_gamma=None, scale=None, initial_state=None,
                               output_final_state=False, reverse=False, state_v_first=False,
                               cu_seqlens=None,
                               ssm_state_indices=None, num_accepted_tokens=None,
                               inplace_final_state=False, **kwargs):
    """fla.ops.simple_gla.fused_recurrent_simple_gla."""
    if kwargs:
        _kwargs('fused_recurrent_simple_gla', kwargs)
    return _simple_gla(q, k, v, g, g_gamma, scale, initial_state, output_final_state,
                       state_v_first, cu_seqlens, reverse, 'recurrent', 0,
                       _pool(ssm_state_indices, num_accepted_tokens, inplace_final_state))


def chunk_gla(q, k, v, g, scale=None, initial_state=None, output_final_state=False,
              state_v_first=False, cu_seqlens=None, cu_seqlens_cpu=None,
              ssm_state_indices=None, num_accepted_tokens=None, inplace_final_state=False, **kwargs):
    """fla.ops.gla.chunk_gla: g [B, T, H, K] per-channel log-decay."""
    if kwargs:
        _kwargs('chunk_gla', kwargs)
    return _run(_FORWARD, q, k, v, g, 'channel', scale=scale, initial_state=initial_state,
                output_final_state=output_final_state, cu_seqlens=cu_seqlens,
                state_v_first=state_v_first, algo='auto',
                ssm_state_indices=ssm_state_indices, num_accepted_tokens=num_accepted_tokens,
                inplace_final_state=inplace_final_state)


def fused_recurrent_gla(q, k, v, gk=None, gv=None, scale=None, initial_state=None,
                        output_final_state=False, reverse=False, state_v_first=False,
                        cu_seqlens=None,
                        ssm_state_indices=None, num_accepted_tokens=None,
                        inplace_final_state=False, **kwargs):
    """fla.ops.gla.fused_recurrent_gla: gk [B, T, H, K]; gv (value-channel
    decay) is not supported."""
    if kwargs:
        _kwargs('fused_recurrent_gla', kwargs)
    if gv is not None:
        raise NotImplementedError('gv (a decay per value channel) is not supported by linattn')
    return _run(_FORWARD, q, k, v, gk, 'channel' if gk is not None else 'none', scale=scale,
                initial_state=initial_state, output_final_state=output_final_state,
                cu_seqlens=cu_seqlens, reverse=reverse, state_v_first=state_v_first,
                algo='recurrent',
                ssm_state_indices=ssm_state_indices, num_accepted_tokens=num_accepted_tokens,
                inplace_final_state=inplace_final_state)


def chunk_retention(q, k, v, scale=None, initial_state=None, output_final_state=False,
                    cu_seqlens=None, state_v_first=False,
                    ssm_state_indices=None, num_accepted_tokens=None,
                    inplace_final_state=False, **kwargs):
    """fla.ops.retention.chunk_retention: RetNet's fixed per-head decays,
    log(1 - 2 ** (-5 - h)) for head h."""
    if kwargs:
        _kwargs('chunk_retention', kwargs, ('chunk_size',))
    H = q.shape[2]
    g_gamma = np.log(1 - np.float32(2) ** (-5 - np.arange(H, dtype=np.float32)))
    return _run(_FORWARD, q, k, v, g_gamma.astype(np.float32), 'head', scale=scale,
                initial_state=initial_state, output_final_state=output_final_state,
                cu_seqlens=cu_seqlens, state_v_first=state_v_first, algo='auto',
                chunk=kwargs.get('chunk_size') or 0,
                ssm_state_indices=ssm_state_indices, num_accepted_tokens=num_accepted_tokens,
                inplace_final_state=inplace_final_state)


# --- delta rule -------------------------------------------------------------

def chunk_gated_delta_rule(q, k, v, g, beta, scale=None, initial_state=None,
                           output_final_state=False, use_qk_l2norm_in_kernel=False,
                           use_beta_sigmoid_in_kernel=False, allow_neg_eigval=False,
                           state_v_first=False, cu_seqlens=None, cu_seqlens_cpu=None,
                           chunk_indices=None, cp_context=None,
                           ssm_state_indices=None, num_accepted_tokens=None,
                           inplace_final_state=False, **kwargs):
    """fla.ops.gated_delta_rule.chunk_gated_delta_rule (Gated DeltaNet):
    q, k [B, T, H, K], v [B, T, HV, V], g and beta [B, T, HV]."""
    if kwargs:
        _kwargs('chunk_gated_delta_rule', kwargs, ('use_gate_in_kernel', 'A_log', 'dt_bias'))
    if cp_context is not None:
        raise NotImplementedError('cp_context (context parallelism) is not supported')
    gact = None
    if kwargs.get('use_gate_in_kernel'):
        gact = _gate_act(g, kwargs.get('A_log'), kwargs.get('dt_bias'), None, v.shape[2])
    beta, bact = _beta(beta, q, v, use_beta_sigmoid_in_kernel, allow_neg_eigval)
    return _run(_DELTA_FORWARD, q, k, v, g, 'token', beta, scale, initial_state,
                output_final_state, cu_seqlens, state_v_first=state_v_first,
                qk_l2norm=use_qk_l2norm_in_kernel, algo='auto', act=_act(gact, bact),
                ssm_state_indices=ssm_state_indices, num_accepted_tokens=num_accepted_tokens,
                inplace_final_state=inplace_final_state)


def fused_recurrent_gated_delta_rule(q, k, v, g=None, gk=None, gv=None, beta=None, scale=None,
                                     initial_state=None, output_final_state=False,
                                     use_qk_l2norm_in_kernel=False, use_gate_in_kernel=False,
                                     A_log=None, dt_bias=None, use_beta_sigmoid_in_kernel=False,
                                     allow_neg_eigval=False, state_v_first=False,
                                     cu_seqlens=None,
                                     ssm_state_indices=None, num_accepted_tokens=None,
                                     inplace_final_state=False, **kwargs):
    """fla.ops.gated_delta_rule.fused_recurrent_gated_delta_rule: g [B, T, HV]
    and/or gk [B, T, HV, K]; beta None means ones; gv is not supported."""
    tried = False
    if (inplace_final_state and beta is not None and gk is None and gv is None and not kwargs
            and not (use_gate_in_kernel or use_beta_sigmoid_in_kernel or allow_neg_eigval)
            and cu_seqlens is None and num_accepted_tokens is None):
        # a decode step in place (transformers, serving engines): _run's first
        # branch without the layers above it, 0.3-0.5 us of a call; None from
        # the extension (an operand to convert) goes the whole way, tried
        o = _ext.in_place(_DELTA_FORWARD, q, k, v, g, 'none' if g is None else 'token', beta,
                          scale, initial_state, ssm_state_indices, state_v_first,
                          use_qk_l2norm_in_kernel, 'recurrent', *_NO_ACT)
        if o is not None:
            return o, initial_state
        tried = True
    if kwargs:
        _kwargs('fused_recurrent_gated_delta_rule', kwargs)
    if gv is not None:
        raise NotImplementedError('gv (a decay per value channel) is not supported by linattn')
    gact = None
    if use_gate_in_kernel:
        if gk is not None:
            raise NotImplementedError('use_gate_in_kernel=True with gk: pass the activated '
                                      'log-decays as g')
        gact = _gate_act(g, A_log, dt_bias, None, v.shape[2])
    beta, bact = _beta(beta, q, v, use_beta_sigmoid_in_kernel, allow_neg_eigval)
    if g is not None and gk is not None:
        g, gate = _add(gk, _as_f32(g, 'g')[..., None]), 'channel'
    elif gk is not None:
        g, gate = gk, 'channel'
    else:
        gate = 'token' if g is not None else 'none'
    return _run(_DELTA_FORWARD, q, k, v, g, gate, beta, scale, initial_state,
                output_final_state, cu_seqlens, state_v_first=state_v_first,
                qk_l2norm=use_qk_l2norm_in_kernel, algo='recurrent', act=_act(gact, bact),
                ssm_state_indices=ssm_state_indices, num_accepted_tokens=num_accepted_tokens,
                inplace_final_state=inplace_final_state, tried=tried)


def chunk_delta_rule(q, k, v, beta, scale=None, initial_state=None, output_final_state=False,
                     use_qk_l2norm_in_kernel=False, cu_seqlens=None, cu_seqlens_cpu=None,
                     state_v_first=False, ssm_state_indices=None, num_accepted_tokens=None,
                     inplace_final_state=False, **kwargs):
    """fla.ops.delta_rule.chunk_delta_rule (DeltaNet): beta [B, T, H]."""
    if kwargs:
        _kwargs('chunk_delta_rule', kwargs)
    return _run(_DELTA_FORWARD, q, k, v, None, 'none', beta, scale, initial_state,
                output_final_state, cu_seqlens, state_v_first=state_v_first,
                qk_l2norm=use_qk_l2norm_in_kernel, algo='auto',
                ssm_state_indices=ssm_state_indices, num_accepted_tokens=num_accepted_tokens,
                inplace_final_state=inplace_final_state)


def fused_recurrent_delta_rule(q, k, v, beta=None, scale=None, initial_state=None,
                               output_final_state=False, use_qk_l2norm_in_kernel=False,
                               cu_seqlens=None, state_v_first=False,
                               ssm_state_indices=None, num_accepted_tokens=None,
                               inplace_final_state=False, **kwargs):
    """fla.ops.delta_rule.fused_recurrent_delta_rule: beta None means ones."""
    if kwargs:
        _kwargs('fused_recurrent_delta_rule', kwargs)
    beta = _beta(beta, q, v, False, False)[0]
    return _run(_DELTA_FORWARD, q, k, v, None, 'none', beta, scale, initial_state,
                output_final_state, cu_seqlens, state_v_first=state_v_first,
                qk_l2norm=use_qk_l2norm_in_kernel, algo='recurrent',
                ssm_state_indices=ssm_state_indices, num_accepted_tokens=num_accepted_tokens,
                inplace_final_state=inplace_final_state)


def _kda(q, k, v, g, beta, A_log, dt_bias, scale, initial_state, output_final_state,
         use_qk_l2norm_in_kernel, use_gate_in_kernel, use_beta_sigmoid_in_kernel,
         allow_neg_eigval, lower_bound, state_v_first, cu_seqlens, algo, pool):
    gact = None
    if use_gate_in_kernel:
        gact = _gate_act(g, A_log, dt_bias, lower_bound, v.shape[2], q.shape[3])
    beta, bact = _beta(beta, q, v, use_beta_sigmoid_in_kernel, allow_neg_eigval)
    return _run(_DELTA_FORWARD, q, k, v, g, 'channel', beta, scale, initial_state,
                output_final_state, cu_seqlens, state_v_first=state_v_first,
                qk_l2norm=use_qk_l2norm_in_kernel, algo=algo, act=_act(gact, bact), **pool)


def chunk_kda(q, k, v, g, beta, scale=None, initial_state=None, output_final_state=False,
              use_qk_l2norm_in_kernel=False, use_gate_in_kernel=False,
              use_beta_sigmoid_in_kernel=False, allow_neg_eigval=False, safe_gate=False,
              lower_bound=None, disable_recompute=False, return_intermediate_states=False,
              state_v_first=False, cu_seqlens=None, cu_seqlens_cpu=None, cp_context=None,

              ssm_state_indices=None, num_accepted_tokens=None,
              inplace_final_state=False, **kwargs):
    """fla.ops.kda.chunk_kda (Kimi Delta Attention): g [B, T, HV, K]
    per-channel log-decay, beta [B, T, HV]."""
    if kwargs:
        _kwargs('chunk_kda', kwargs, ('A_log', 'dt_bias', 'chunk_size'))
    if cp_context is not None:
        raise NotImplementedError('cp_context (context parallelism) is not supported')
    if return_intermediate_states:
        raise NotImplementedError('return_intermediate_states is not supported')
    if safe_gate and use_gate_in_kernel:  # fla's checks; the gate is the same without it
        if lower_bound is None:
            raise ValueError('`lower_bound` must be specified when `safe_gate=True` and '
                             '`use_gate_in_kernel=True`.')
        if not -5 <= lower_bound < 0:
            raise ValueError(f'`lower_bound` must be in the safe range [-5, 0), got '
                             f'{lower_bound}.')
    return _kda(q, k, v, g, beta, kwargs.get('A_log'), kwargs.get('dt_bias'), scale,
                initial_state, output_final_state, use_qk_l2norm_in_kernel,
                use_gate_in_kernel, use_beta_sigmoid_in_kernel, allow_neg_eigval,
                lower_bound, state_v_first, cu_seqlens, 'auto',
                _pool(ssm_state_indices, num_accepted_tokens, inplace_final_state))


def fused_recurrent_kda(q, k, v, g, beta, A_log=None, dt_bias=None, scale=None,
                        initial_state=None, output_final_state=False,
                        use_qk_l2norm_in_kernel=False, use_gate_in_kernel=False,
                        use_beta_sigmoid_in_kernel=False, allow_neg_eigval=False,
                        lower_bound=None, state_v_first=False, cu_seqlens=None,
                        ssm_state_indices=None, num_accepted_tokens=None,
                        inplace_final_state=False, **kwargs):
    """fla.ops.kda.fused_recurrent_kda."""
    tried = False
    if (inplace_final_state and beta is not None and not kwargs
            and not (use_gate_in_kernel or use_beta_sigmoid_in_kernel or allow_neg_eigval)
            and cu_seqlens is None and num_accepted_tokens is None):
        # a decode step in place, as in fused_recurrent_gated_delta_rule
        o = _ext.in_place(_DELTA_FORWARD, q, k, v, g, 'channel', beta, scale, initial_state,
                          ssm_state_indices, state_v_first, use_qk_l2norm_in_kernel,
                          'recurrent', *_NO_ACT)
        if o is not None:
            return o, initial_state
        tried = True
    if kwargs:
        _kwargs('fused_recurrent_kda', kwargs)
    return _kda(q, k, v, g, beta, A_log, dt_bias, scale, initial_state, output_final_state,
                use_qk_l2norm_in_kernel, use_gate_in_kernel, use_beta_sigmoid_in_kernel,
                allow_neg_eigval, lower_bound, state_v_first, cu_seqlens, 'recurrent',
                _pool(ssm_state_indices, num_accepted_tokens, inplace_final_state, tried))
