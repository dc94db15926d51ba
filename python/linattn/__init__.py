"""linattn: linear attention kernels for CPUs, on numpy arrays and torch tensors.

flash-linear-attention's functions by name ([B, T, H, D] layout, returning
(o, final_state)) and the C library's entry points (forward, step,
delta_forward, delta_step) with one keyword per config field.
"""

from ._api import (delta_forward, delta_step, forward, isa, isa_available, last_error,
                   set_isa, step, tuning, version)
from ._fla import (chunk_delta_rule, chunk_gated_delta_rule, chunk_gla, chunk_kda,
                   chunk_linear_attn, chunk_retention, chunk_simple_gla,
                   fused_recurrent_delta_rule, fused_recurrent_gated_delta_rule,
                   fused_recurrent_gla, fused_recurrent_kda, fused_recurrent_linear_attn,
                   fused_recurrent_simple_gla)

__version__ = version()

__all__ = [
    'forward', 'step', 'delta_forward', 'delta_step',
    'isa', 'set_isa', 'isa_available', 'tuning', 'last_error', 'version',
    'chunk_linear_attn', 'fused_recurrent_linear_attn',
    'chunk_simple_gla', 'fused_recurrent_simple_gla',
    'chunk_gla', 'fused_recurrent_gla', 'chunk_retention',
    'chunk_gated_delta_rule', 'fused_recurrent_gated_delta_rule',
    'chunk_delta_rule', 'fused_recurrent_delta_rule',
    'chunk_kda', 'fused_recurrent_kda',
]
