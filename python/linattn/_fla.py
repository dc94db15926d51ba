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
(reverse, state_v_first, beta sigmoid, gate activation, g plus g_gamma).

Serving (vLLM's names): initial_state may be a pool of states
[slots, H, K, V] ([slots, H, V, K] with state_v_first), any strides;
ssm_state_indices [N] names each sequence's slot (read and written;
negative: padding), [N, S] its per-token slots (the state after token j
goes to indices[n][j], the read slot is indices[n][num_accepted_tokens[n]
- 1]); inplace_final_state=True writes the pool where it lies and returns
it. cu_seqlens and the pool form are one linattn_run call.
"""

import warnings

import numpy as np

from . import _ext
from ._api import _DELTA_FORWARD, _FORWARD, _call, as_numpy, wrap

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


def _flip(x):
    return None if x is None else np.ascontiguousarray(x[:, ::-1])


_I32, _I64, _F32 = np.dtype(np.int32), np.dtype(np.int64), np.dtype(np.float32)


def _ints(x, name, dtype):
    """x as a C-contiguous numpy integer array (a copy only to change dtype)."""
    if type(x) is np.ndarray and x.dtype == dtype and x.flags.c_contiguous and x.ndim in (1, 2):
        return x  # the decode loop's case: no numpy call
    if not isinstance(x, np.ndarray) and hasattr(x, 'numpy'):
        x = x.detach().numpy()
    a = np.ascontiguousarray(x, dtype=dtype)
    if a.ndim not in (1, 2):
        raise ValueError(f'{name}: expected [N] or [N, K], got shape {list(a.shape)}')
    return a


def _bthd_shape(q, v, scale):
    """B, T, K, H (value heads), V of fla's [B, T, H, D] q and v, and the
    scale (fla's default K ** -0.5 for None)."""
    if q.ndim != 4 or v.ndim != 4:
        raise ValueError(f'q, k, v: expected [B, T, H, D] arrays, got q {q.shape}, v {v.shape}')
    B, T, _, K = q.shape
    return B, T, K, v.shape[2], v.shape[3], K ** -0.5 if scale is None else scale


def _run_pool(kind, q, k, v, g, gate, beta, scale, initial_state, output_final_state,
              cu_seqlens, normalize, state_v_first, qk_l2norm, chunk, algo,
              ssm_state_indices, num_accepted_tokens, inplace_final_state):
    """One linattn_run call: the state as a pool addressed by strides (no
    copy in place), slots from vLLM's index forms, cu_seqlens in C."""
    qn, torch_out = as_numpy(q, 'q')
    vn = as_numpy(v, 'v')[0]
    B, T, K, H, V, scale = _bthd_shape(qn, vn, scale)
    cu = None
    if cu_seqlens is not None:
        if B != 1:
            raise ValueError(f'The batch size is expected to be 1 rather than {B} when using '
                             f'`cu_seqlens`. Please flatten variable-length inputs before '
                             f'processing.')
        cu = _ints(cu_seqlens, 'cu_seqlens', _I64)
    N = B if cu is None else len(cu) - 1
    pool, zpool = initial_state, None
    if isinstance(pool, tuple):
        pool, zpool = pool if normalize else (pool[0], None)
    rd = wr = snap = None
    if ssm_state_indices is not None:
        if pool is None:
            raise ValueError('ssm_state_indices needs initial_state: the state pool')
        idx = _ints(ssm_state_indices, 'ssm_state_indices', _I32)
        if idx.shape[0] != N:
            raise ValueError(f'ssm_state_indices: {idx.shape[0]} rows for {N} sequences')
        if idx.ndim == 1:
            rd = idx  # read and write the same slot
        else:
            # vLLM's [N, K] form: read the slot of the last accepted token;
            # the state after token j goes to idx[n, j], nothing else is written
            Ks = idx.shape[1]
            if num_accepted_tokens is None:
                rd = np.ascontiguousarray(idx[:, 0])
            else:
                acc = _ints(num_accepted_tokens, 'num_accepted_tokens', _I64)
                if acc.shape != (N,) or (acc < 1).any() or (acc > Ks).any():
                    raise ValueError(f'num_accepted_tokens: expected [{N}] values in 1..{Ks}')
                rd = np.ascontiguousarray(idx[np.arange(N), acc - 1])
            wr = np.full(N, -1, np.int32)
            lens = np.full(N, T, np.int64) if cu is None else np.diff(cu)
            if (lens > Ks).any():
                raise ValueError(f'ssm_state_indices [N, {Ks}]: a sequence has more than '
                                 f'{Ks} tokens')
            # library snapshot j is the state after token len - K + j
            src = np.arange(Ks)[None, :] - (Ks - lens)[:, None]
            snap = np.where(src >= 0, idx[np.arange(N)[:, None], np.clip(src, 0, Ks - 1)],
                            -1).astype(np.int32)
            rd = np.where(idx[:, 0] < 0, -1, rd).astype(np.int32)  # a padded row
    elif pool is not None:
        shape = tuple(as_numpy(pool, 'initial_state')[0].shape)
        want = (N, H, V, K) if state_v_first else (N, H, K, V)
        if shape != want:
            raise ValueError(f'initial_state: expected shape {list(want)}, got {list(shape)}')
    made = False
    if pool is None and (output_final_state or inplace_final_state):
        pool = np.zeros((N, H, V, K) if state_v_first else (N, H, K, V), np.float32)
        made = True
    elif pool is not None and not inplace_final_state:
        pool = np.array(as_numpy(pool, 'initial_state')[0], np.float32)  # the caller's stays
        made = True
    z = None
    if normalize and pool is not None:
        slots = as_numpy(pool, 'initial_state')[0].shape[0]
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
    if type(pool) is np.ndarray and pool.dtype != _F32:
        raise TypeError(f'initial_state: dtype {pool.dtype}; linattn takes float32')
    o = np.empty((B, T, H, V), np.float32)
    _ext.run_pool(kind, _BTHD, q, k, v, g, beta, o, pool, z, gate, 'identity', algo, True,
                  normalize, 1e-10, float(scale), chunk, 0, 'grouped', qk_l2norm, False,
                  rd, wr, snap, cu, state_v_first)
    final = None
    if inplace_final_state:
        final = initial_state
    elif output_final_state:
        final = wrap(pool, torch_out)
        if normalize:
            final = (final, wrap(z.reshape(-1, 1, H, K), torch_out))
    return wrap(o, torch_out), final


def _run(kind, q, k, v, g=None, gate='none', beta=None, scale=None, initial_state=None,
         output_final_state=False, cu_seqlens=None, normalize=False, reverse=False,
         state_v_first=False, qk_l2norm=False, chunk=0, algo='auto', ssm_state_indices=None,
         num_accepted_tokens=None, inplace_final_state=False):
    if ssm_state_indices is not None or inplace_final_state or (cu_seqlens is not None and
                                                                  not reverse):
        if reverse:
            raise NotImplementedError('reverse=True with a state pool or in place')
        return _run_pool(kind, q, k, v, g, gate, beta, scale, initial_state,
                         output_final_state, cu_seqlens, normalize, state_v_first, qk_l2norm,
                         chunk, algo, ssm_state_indices, num_accepted_tokens,
                         inplace_final_state)
    q, torch_out = as_numpy(q, 'q')
    k = as_numpy(k, 'k')[0]
    v = as_numpy(v, 'v')[0]
    if g is not None:
        g = as_numpy(g, 'g')[0]
    if beta is not None:
        beta = as_numpy(beta, 'beta')[0]
    B, T, K, H, V, scale = _bthd_shape(q, v, scale)
    segs = _segments(cu_seqlens, B, T)
    N = B if segs is None else len(segs)

    z_init = None
    if isinstance(initial_state, tuple):
        initial_state, z_init = initial_state if normalize else (initial_state[0], None)
    s = z = None
    if initial_state is not None:
        h0 = as_numpy(initial_state, 'initial_state')[0]
        want = (N, H, V, K) if state_v_first else (N, H, K, V)
        if h0.shape != want:
            raise ValueError(f'initial_state: expected shape {list(want)}, got {list(h0.shape)}')
        if h0.dtype != np.float32:
            raise TypeError(f'initial_state: dtype {h0.dtype}; linattn takes float32')
        s = np.array(h0.transpose(0, 1, 3, 2) if state_v_first else h0, np.float32, order='C')
    elif output_final_state or z_init is not None:
        s = np.zeros((N, H, K, V), np.float32)
    if normalize and s is not None:
        if z_init is None:
            z = np.zeros((N, H, K), np.float32)
        else:
            z0 = as_numpy(z_init, 'initial_state[1]')[0]
            if z0.shape != (N, 1, H, K) or z0.dtype != np.float32:
                raise ValueError(f'initial_state[1]: expected float32 [{N}, 1, {H}, {K}], '
                                 f'got {z0.dtype} {list(z0.shape)}')
            z = np.array(z0.reshape(N, H, K), np.float32, order='C')

    o = np.empty((B, T, H, V), np.float32)
    timed = gate in ('token', 'channel')  # g has a token axis to cut and flip

    def call(sl, n):
        qs, ks, vs, os_ = q[:, sl], k[:, sl], v[:, sl], o[:, sl]
        gs = g[:, sl] if timed else g
        bs = beta[:, sl] if beta is not None else None
        if reverse:
            qs, ks, vs, bs = _flip(qs), _flip(ks), _flip(vs), _flip(bs)
            gs = _flip(gs) if timed else gs
            os_ = np.empty(vs.shape, np.float32)
        _call(kind, _BTHD, qs, ks, vs, gs, bs, os_,
              None if s is None else s[n], None if z is None else z[n],
              gate, 'identity', algo, True, normalize, 1e-10, float(scale), chunk, 0,
              'grouped', qk_l2norm)
        if reverse:
            o[:, sl] = os_[:, ::-1]

    if segs is None:
        call(slice(None), slice(None))
    else:
        for n, (bos, eos) in enumerate(segs):
            if eos > bos:  # an empty sequence passes its state through
                call(slice(bos, eos), slice(n, n + 1))

    final = None
    if output_final_state:
        st = np.ascontiguousarray(s.transpose(0, 1, 3, 2)) if state_v_first else s
        final = wrap(st, torch_out)
        if normalize:
            final = (final, wrap(z.reshape(N, 1, H, K), torch_out))
    return wrap(o, torch_out), final


def _pool(ssm_state_indices, num_accepted_tokens, inplace_final_state):
    return dict(ssm_state_indices=ssm_state_indices, num_accepted_tokens=num_accepted_tokens,
                inplace_final_state=inplace_final_state)


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
    a = as_numpy(a, 'g')[0]
    return np.add(a, as_numpy(b, 'g')[0], dtype=np.float32)


def _beta(beta, q, v, use_sigmoid, allow_neg_eigval):
    if allow_neg_eigval and not use_sigmoid:
        raise ValueError('`allow_neg_eigval=True` requires `use_beta_sigmoid_in_kernel=True`.')
    if beta is None:
        qn = as_numpy(q, 'q')[0]
        return np.ones(qn.shape[:2] + (as_numpy(v, 'v')[0].shape[2],), np.float32)
    if not use_sigmoid:
        return beta
    b = as_numpy(beta, 'beta')[0]
    if b.dtype != np.float32:
        raise TypeError(f'beta: dtype {b.dtype}; linattn takes float32')
    out = np.negative(b)
    np.exp(out, out=out)
    out += 1
    np.reciprocal(out, out=out)
    if allow_neg_eigval:
        out *= 2
    return out


def _gate_in_kernel(g, A_log, dt_bias, channel):
    """fla's fused gate activation, g = -exp(A_log) * softplus(g + dt_bias)."""
    if A_log is None:
        raise ValueError('`A_log` must be provided when `use_gate_in_kernel=True`.')
    if g is None:
        raise ValueError('`g` (raw pre-activation) must be provided when '
                         '`use_gate_in_kernel=True`.')
    x = np.array(as_numpy(g, 'g')[0], np.float32)
    H = x.shape[2]
    if dt_bias is not None:
        bias = as_numpy(dt_bias, 'dt_bias')[0]
        x += bias.reshape((H, -1) if channel else (H,))
    a = np.exp(as_numpy(A_log, 'A_log')[0].astype(np.float32))
    np.logaddexp(np.float32(0), x, out=x)
    x *= -(a[:, None] if channel else a)
    return x


# --- linear attention -------------------------------------------------------

def chunk_linear_attn(q, k, v, scale=None, initial_state=None, output_final_state=False,
                      normalize=True, cu_seqlens=None,
                      ssm_state_indices=None, num_accepted_tokens=None, inplace_final_state=False, **kwargs):
    """fla.ops.linear_attn.chunk_linear_attn. With normalize, o is divided by
    q . (sum of k) + 1e-10 and the state is the pair (S [N, H, K, V],
    z [N, 1, H, K])."""
    _kwargs('chunk_linear_attn', kwargs)
    return _run(_FORWARD, q, k, v, scale=scale, initial_state=initial_state,
                output_final_state=output_final_state, cu_seqlens=cu_seqlens,
                normalize=normalize, algo='auto',
                **_pool(ssm_state_indices, num_accepted_tokens, inplace_final_state))


def fused_recurrent_linear_attn(q, k, v, scale=None, initial_state=None,
                                output_final_state=False, reverse=False, normalize=False,
                                cu_seqlens=None,
                                ssm_state_indices=None, num_accepted_tokens=None,
                                inplace_final_state=False, **kwargs):
    """fla.ops.linear_attn.fused_recurrent_linear_attn (normalize off by default)."""
    _kwargs('fused_recurrent_linear_attn', kwargs)
    return _run(_FORWARD, q, k, v, scale=scale, initial_state=initial_state,
                output_final_state=output_final_state, cu_seqlens=cu_seqlens,
                normalize=normalize, reverse=reverse, algo='recurrent',
                **_pool(ssm_state_indices, num_accepted_tokens, inplace_final_state))


# --- gated linear attention -------------------------------------------------

def _simple_gla(q, k, v, g, g_gamma, scale, initial_state, output_final_state, state_v_first,
                cu_seqlens, reverse, algo, chunk, pool):
    if g is not None and g_gamma is not None:
        H = as_numpy(g_gamma, 'g_gamma')[0].shape[0]
        g, gate = _add(g, as_numpy(g_gamma, 'g_gamma')[0].reshape(1, 1, H)), 'token'
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
    _kwargs('fused_recurrent_simple_gla', kwargs)
    return _simple_gla(q, k, v, g, g_gamma, scale, initial_state, output_final_state,
                       state_v_first, cu_seqlens, reverse, 'recurrent', 0,
                       _pool(ssm_state_indices, num_accepted_tokens, inplace_final_state))


def chunk_gla(q, k, v, g, scale=None, initial_state=None, output_final_state=False,
              state_v_first=False, cu_seqlens=None, cu_seqlens_cpu=None,
              ssm_state_indices=None, num_accepted_tokens=None, inplace_final_state=False, **kwargs):
    """fla.ops.gla.chunk_gla: g [B, T, H, K] per-channel log-decay."""
    _kwargs('chunk_gla', kwargs)
    return _run(_FORWARD, q, k, v, g, 'channel', scale=scale, initial_state=initial_state,
                output_final_state=output_final_state, cu_seqlens=cu_seqlens,
                state_v_first=state_v_first, algo='auto',
                **_pool(ssm_state_indices, num_accepted_tokens, inplace_final_state))


def fused_recurrent_gla(q, k, v, gk=None, gv=None, scale=None, initial_state=None,
                        output_final_state=False, reverse=False, state_v_first=False,
                        cu_seqlens=None,
                        ssm_state_indices=None, num_accepted_tokens=None,
                        inplace_final_state=False, **kwargs):
    """fla.ops.gla.fused_recurrent_gla: gk [B, T, H, K]; gv (value-channel
    decay) is not supported."""
    _kwargs('fused_recurrent_gla', kwargs)
    if gv is not None:
        raise NotImplementedError('gv (a decay per value channel) is not supported by linattn')
    return _run(_FORWARD, q, k, v, gk, 'channel' if gk is not None else 'none', scale=scale,
                initial_state=initial_state, output_final_state=output_final_state,
                cu_seqlens=cu_seqlens, reverse=reverse, state_v_first=state_v_first,
                algo='recurrent',
                **_pool(ssm_state_indices, num_accepted_tokens, inplace_final_state))


def chunk_retention(q, k, v, scale=None, initial_state=None, output_final_state=False,
                    cu_seqlens=None,
                    ssm_state_indices=None, num_accepted_tokens=None,
                    inplace_final_state=False, **kwargs):
    """fla.ops.retention.chunk_retention: RetNet's fixed per-head decays,
    log(1 - 2 ** (-5 - h)) for head h."""
    _kwargs('chunk_retention', kwargs, ('chunk_size',))
    H = as_numpy(q, 'q')[0].shape[2]
    g_gamma = np.log(1 - np.float32(2) ** (-5 - np.arange(H, dtype=np.float32)))
    return _run(_FORWARD, q, k, v, g_gamma.astype(np.float32), 'head', scale=scale,
                initial_state=initial_state, output_final_state=output_final_state,
                cu_seqlens=cu_seqlens, algo='auto', chunk=kwargs.get('chunk_size') or 0,
                **_pool(ssm_state_indices, num_accepted_tokens, inplace_final_state))


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
    _kwargs('chunk_gated_delta_rule', kwargs, ('use_gate_in_kernel', 'A_log', 'dt_bias'))
    if cp_context is not None:
        raise NotImplementedError('cp_context (context parallelism) is not supported')
    if kwargs.get('use_gate_in_kernel'):
        g = _gate_in_kernel(g, kwargs.get('A_log'), kwargs.get('dt_bias'), False)
    beta = _beta(beta, q, v, use_beta_sigmoid_in_kernel, allow_neg_eigval)
    return _run(_DELTA_FORWARD, q, k, v, g, 'token', beta, scale, initial_state,
                output_final_state, cu_seqlens, state_v_first=state_v_first,
                qk_l2norm=use_qk_l2norm_in_kernel, algo='auto',
                **_pool(ssm_state_indices, num_accepted_tokens, inplace_final_state))


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
    _kwargs('fused_recurrent_gated_delta_rule', kwargs)
    if gv is not None:
        raise NotImplementedError('gv (a decay per value channel) is not supported by linattn')
    if use_gate_in_kernel:
        g = _gate_in_kernel(g, A_log, dt_bias, False)
    beta = _beta(beta, q, v, use_beta_sigmoid_in_kernel, allow_neg_eigval)
    if g is not None and gk is not None:
        g, gate = _add(gk, as_numpy(g, 'g')[0][..., None]), 'channel'
    elif gk is not None:
        g, gate = gk, 'channel'
    else:
        gate = 'token' if g is not None else 'none'
    return _run(_DELTA_FORWARD, q, k, v, g, gate, beta, scale, initial_state,
                output_final_state, cu_seqlens, state_v_first=state_v_first,
                qk_l2norm=use_qk_l2norm_in_kernel, algo='recurrent',
                **_pool(ssm_state_indices, num_accepted_tokens, inplace_final_state))


def chunk_delta_rule(q, k, v, beta, scale=None, initial_state=None, output_final_state=False,
                     use_qk_l2norm_in_kernel=False, cu_seqlens=None, cu_seqlens_cpu=None,

                     ssm_state_indices=None, num_accepted_tokens=None,
                     inplace_final_state=False, **kwargs):
    """fla.ops.delta_rule.chunk_delta_rule (DeltaNet): beta [B, T, H]."""
    _kwargs('chunk_delta_rule', kwargs)
    return _run(_DELTA_FORWARD, q, k, v, None, 'none', beta, scale, initial_state,
                output_final_state, cu_seqlens, qk_l2norm=use_qk_l2norm_in_kernel,
                algo='auto',
                **_pool(ssm_state_indices, num_accepted_tokens, inplace_final_state))


def fused_recurrent_delta_rule(q, k, v, beta=None, scale=None, initial_state=None,
                               output_final_state=False, use_qk_l2norm_in_kernel=False,
                               cu_seqlens=None,
                               ssm_state_indices=None, num_accepted_tokens=None,
                               inplace_final_state=False, **kwargs):
    """fla.ops.delta_rule.fused_recurrent_delta_rule: beta None means ones."""
    _kwargs('fused_recurrent_delta_rule', kwargs)
    beta = _beta(beta, q, v, False, False)
    return _run(_DELTA_FORWARD, q, k, v, None, 'none', beta, scale, initial_state,
                output_final_state, cu_seqlens, qk_l2norm=use_qk_l2norm_in_kernel,
                algo='recurrent',
                **_pool(ssm_state_indices, num_accepted_tokens, inplace_final_state))


def _kda(q, k, v, g, beta, A_log, dt_bias, scale, initial_state, output_final_state,
         use_qk_l2norm_in_kernel, use_gate_in_kernel, use_beta_sigmoid_in_kernel,
         allow_neg_eigval, lower_bound, state_v_first, cu_seqlens, algo, pool):
    if use_gate_in_kernel:
        if lower_bound is not None:
            raise NotImplementedError('lower_bound gate activations are not supported; '
                                      'pass the activated log-decay as g')
        g = _gate_in_kernel(g, A_log, dt_bias, True)
    beta = _beta(beta, q, v, use_beta_sigmoid_in_kernel, allow_neg_eigval)
    return _run(_DELTA_FORWARD, q, k, v, g, 'channel', beta, scale, initial_state,
                output_final_state, cu_seqlens, state_v_first=state_v_first,
                qk_l2norm=use_qk_l2norm_in_kernel, algo=algo, **pool)


def chunk_kda(q, k, v, g, beta, scale=None, initial_state=None, output_final_state=False,
              use_qk_l2norm_in_kernel=False, use_gate_in_kernel=False,
              use_beta_sigmoid_in_kernel=False, allow_neg_eigval=False, safe_gate=False,
              lower_bound=None, disable_recompute=False, return_intermediate_states=False,
              state_v_first=False, cu_seqlens=None, cu_seqlens_cpu=None, cp_context=None,

              ssm_state_indices=None, num_accepted_tokens=None,
              inplace_final_state=False, **kwargs):
    """fla.ops.kda.chunk_kda (Kimi Delta Attention): g [B, T, HV, K]
    per-channel log-decay, beta [B, T, HV]."""
    _kwargs('chunk_kda', kwargs, ('A_log', 'dt_bias'))
    if cp_context is not None:
        raise NotImplementedError('cp_context (context parallelism) is not supported')
    if return_intermediate_states:
        raise NotImplementedError('return_intermediate_states is not supported')
    return _kda(q, k, v, g, beta, kwargs.get('A_log'), kwargs.get('dt_bias'), scale,
                initial_state, output_final_state, use_qk_l2norm_in_kernel,
                use_gate_in_kernel, use_beta_sigmoid_in_kernel, allow_neg_eigval,
                lower_bound if safe_gate else None, state_v_first, cu_seqlens, 'auto',
                _pool(ssm_state_indices, num_accepted_tokens, inplace_final_state))


def fused_recurrent_kda(q, k, v, g, beta, A_log=None, dt_bias=None, scale=None,
                        initial_state=None, output_final_state=False,
                        use_qk_l2norm_in_kernel=False, use_gate_in_kernel=False,
                        use_beta_sigmoid_in_kernel=False, allow_neg_eigval=False,
                        lower_bound=None, state_v_first=False, cu_seqlens=None,
                        ssm_state_indices=None, num_accepted_tokens=None,
                        inplace_final_state=False, **kwargs):
    """fla.ops.kda.fused_recurrent_kda."""
    _kwargs('fused_recurrent_kda', kwargs)
    return _kda(q, k, v, g, beta, A_log, dt_bias, scale, initial_state, output_final_state,
                use_qk_l2norm_in_kernel, use_gate_in_kernel, use_beta_sigmoid_in_kernel,
                allow_neg_eigval, lower_bound, state_v_first, cu_seqlens, 'recurrent',
                _pool(ssm_state_indices, num_accepted_tokens, inplace_final_state))
