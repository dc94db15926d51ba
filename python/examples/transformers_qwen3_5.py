"""A tiny randomly initialised Qwen3.5-style model (no download) generating
64 greedy tokens on the CPU, without and with linattn for its Gated DeltaNet
layers; prints prefill and decode tokens/s and the largest logit difference.

    python examples/transformers_qwen3_5.py [--prompt 512] [--threads N]

Needs HF transformers with Qwen3.5 (5.x) and torch >= 2; exits with a
message otherwise.
"""

import argparse
import sys
import time

try:
    import torch
    import transformers
except ImportError as e:
    sys.exit(f'this example needs torch and HF transformers ({e})')

from linattn.integrations import transformers as lt


def run(model, ids, new):
    """Prefill and greedy decode timed apart: the prompt in one forward, then
    `new` one-token forwards on its cache (generate() would time both and
    its own bookkeeping together)."""
    with torch.no_grad():
        model(ids[:, :8], use_cache=True)  # warm-up: first-call costs out of the figures
        t0 = time.perf_counter()
        out = model(ids, use_cache=True)
        t1 = time.perf_counter()
        cache, tok, tokens = out.past_key_values, out.logits[:, -1:].argmax(-1), []
        t2 = time.perf_counter()
        for _ in range(new):
            tokens.append(tok)
            step = model(tok, past_key_values=cache, use_cache=True)
            cache, tok = step.past_key_values, step.logits[:, -1:].argmax(-1)
        t3 = time.perf_counter()
    return out.logits, torch.cat(tokens, 1), ids.shape[1] / (t1 - t0), new / (t3 - t2)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--prompt', type=int, default=512)
    ap.add_argument('--new', type=int, default=64)
    ap.add_argument('--threads', type=int, default=0)
    a = ap.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    if not hasattr(transformers, 'Qwen3_5TextConfig'):
        sys.exit(f'transformers {transformers.__version__} has no Qwen3.5 (Qwen3_5TextConfig)')
    torch.manual_seed(0)
    cfg = transformers.Qwen3_5TextConfig(
        vocab_size=1024, hidden_size=512, intermediate_size=1024, num_hidden_layers=4,
        num_attention_heads=8, num_key_value_heads=2, head_dim=64,
        linear_num_key_heads=4, linear_num_value_heads=8, linear_key_head_dim=64,
        linear_value_head_dim=64, full_attention_interval=4)
    model = transformers.Qwen3_5ForCausalLM(cfg).eval()
    ids = torch.randint(0, cfg.vocab_size, (1, a.prompt))

    base = run(model, ids, a.new)
    lt.apply_linattn(model, families='qwen3_5')
    try:
        fast = run(model, ids, a.new)
    finally:
        lt.revert_linattn()
    print(f'transformers {transformers.__version__}, torch {torch.__version__}, '
          f'{torch.get_num_threads()} threads, prompt {a.prompt}, {a.new} new tokens')
    for name, r in (('torch fallback', base), ('linattn', fast)):
        print(f'{name:15s} prefill {r[2]:9.1f} tok/s   decode {r[3]:8.2f} tok/s')
    diff = (fast[0] - base[0]).abs().max().item()
    print(f'max |logit difference| {diff:.3g} (relative {diff / base[0].abs().max().item():.3g}); '
          f'greedy tokens identical: {torch.equal(fast[1], base[1])}')


if __name__ == '__main__':
    main()
