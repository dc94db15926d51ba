"""A Gated DeltaNet layer on torch CPU tensors, with linattn and in pure torch.

The layer as in Qwen3-Next / fla's GatedDeltaNet: projections to q, k, v
(fewer q/k heads than value heads), a causal depthwise short convolution
with SiLU, the gate g = -exp(A_log) * softplus(a + dt_bias) and
beta = sigmoid(b), the gated delta rule with L2-normalised q and k, then an
RMS norm gated by SiLU(z) and the output projection. The kernel runs once
through linattn.chunk_gated_delta_rule and once as a token loop in torch;
the script prints both times and the largest difference of the outputs.

    python3 python/examples/gated_deltanet_layer.py [T]
"""

import sys
import time

try:
    import torch
    import torch.nn.functional as F
except ImportError:
    print('torch is not installed (Debian: apt-get install python3-torch); nothing to run')
    sys.exit(0)

import linattn


def delta_rule_torch(q, k, v, g, beta, scale):
    """Reference: the recurrence token by token. q, k [B,T,H,K]; v [B,T,HV,V]."""
    B, T, H, K = q.shape
    HV, V = v.shape[2], v.shape[3]
    q = F.normalize(q, dim=-1, eps=1e-6).repeat_interleave(HV // H, dim=2) * scale
    k = F.normalize(k, dim=-1, eps=1e-6).repeat_interleave(HV // H, dim=2)
    S = q.new_zeros(B, HV, K, V)
    o = torch.empty(B, T, HV, V)
    for t in range(T):
        S = S * g[:, t].exp()[..., None, None]
        u = beta[:, t, :, None] * (v[:, t] - torch.einsum('bhkv,bhk->bhv', S, k[:, t]))
        S = S + k[:, t, :, :, None] * u[:, :, None, :]
        o[:, t] = torch.einsum('bhkv,bhk->bhv', S, q[:, t])
    return o


class GatedDeltaNet(torch.nn.Module):
    def __init__(self, d_model=512, heads=4, v_heads=8, head_k=64, head_v=64, conv=4):
        super().__init__()
        self.h, self.hv, self.dk, self.dv = heads, v_heads, head_k, head_v
        key, val = heads * head_k, v_heads * head_v
        self.qkv = torch.nn.Linear(d_model, 2 * key + val, bias=False)
        self.ab = torch.nn.Linear(d_model, 2 * v_heads, bias=False)
        self.z = torch.nn.Linear(d_model, val, bias=False)
        self.conv = torch.nn.Parameter(torch.randn(conv, 2 * key + val) / conv)
        self.A_log = torch.nn.Parameter(torch.empty(v_heads).uniform_(0, 2.7))
        self.dt_bias = torch.nn.Parameter(torch.randn(v_heads) * 0.5)
        self.norm = torch.nn.Parameter(torch.ones(head_v))
        self.out = torch.nn.Linear(val, d_model, bias=False)

    def forward(self, x, kernel):
        B, T, _ = x.shape
        key = self.h * self.dk
        # Causal depthwise short convolution: y[t] = sum_i w[i] * x[t - W + 1 + i].
        qkv = self.qkv(x)
        W = self.conv.shape[0]
        padded = F.pad(qkv, (0, 0, W - 1, 0))
        qkv = F.silu(sum(self.conv[i] * padded[:, i:i + T] for i in range(W)))
        # Views into one tensor: the kernel reads them through their strides.
        q = qkv[..., :key].unflatten(-1, (self.h, self.dk))
        k = qkv[..., key:2 * key].unflatten(-1, (self.h, self.dk))
        v = qkv[..., 2 * key:].unflatten(-1, (self.hv, self.dv))
        a, b = self.ab(x).chunk(2, dim=-1)
        g = -self.A_log.exp() * F.softplus(a + self.dt_bias)
        beta = b.sigmoid()
        t0 = time.perf_counter()
        o = kernel(q, k, v, g.contiguous(), beta.contiguous(), self.dk ** -0.5)
        self.kernel_time = time.perf_counter() - t0
        z = self.z(x).unflatten(-1, (self.hv, self.dv))
        o = o * torch.rsqrt(o.pow(2).mean(-1, keepdim=True) + 1e-6) * self.norm * F.silu(z)
        return self.out(o.flatten(-2))


def linattn_kernel(q, k, v, g, beta, scale):
    o, _ = linattn.chunk_gated_delta_rule(q, k, v, g, beta, scale=scale,
                                          use_qk_l2norm_in_kernel=True)
    return o


def timed(layer, x, kernel):
    """(output, best layer time, best kernel time) over 3 runs."""
    best, best_kernel = float('inf'), float('inf')
    for _ in range(3):
        t0 = time.perf_counter()
        y = layer(x, kernel)
        best = min(best, time.perf_counter() - t0)
        best_kernel = min(best_kernel, layer.kernel_time)
    return y, best, best_kernel


def main():
    T = int(sys.argv[1]) if len(sys.argv) > 1 else 512
    torch.manual_seed(0)
    layer = GatedDeltaNet()
    x = torch.randn(2, T, 512)
    with torch.no_grad():
        y_la, t_la, k_la = timed(layer, x, linattn_kernel)
        y_ref, t_ref, k_ref = timed(layer, x, delta_rule_torch)
    diff = (y_la - y_ref).abs().max().item()
    print(f'Gated DeltaNet layer, x {list(x.shape)}, linattn isa {linattn.isa()}, '
          f'torch {torch.__version__} ({torch.get_num_threads()} threads)')
    print(f'  with linattn:    layer {t_la * 1e3:8.1f} ms, kernel {k_la * 1e3:8.1f} ms')
    print(f'  with pure torch: layer {t_ref * 1e3:8.1f} ms, kernel {k_ref * 1e3:8.1f} ms')
    print(f'  max |difference| of outputs:  {diff:.2e} (outputs up to '
          f'{y_ref.abs().max().item():.2f})')


if __name__ == '__main__':
    main()
