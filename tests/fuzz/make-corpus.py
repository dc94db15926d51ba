#!/usr/bin/env python3
"""Writes the seed corpus of fuzz_call (tests/fuzz/corpus/): one small file
per kind of call worth starting from. The byte layout mirrors decode() in
fuzz_call.c; a byte 0 is always the ordinary choice.

    python3 tests/fuzz/make-corpus.py [DIR]      (default: tests/fuzz/corpus)
"""
import os
import struct
import sys

KINDS = {"forward": 0, "step": 1, "delta_forward": 2, "delta_step": 3}
GATES = {"none": 0, "head": 1, "token": 2, "channel": 3}
PHIS = {"elu1": 0, "relu": 1, "identity": 2}
ALGOS = {"auto": 0, "chunked": 1, "recurrent": 2}
EPS = {1e-6: 0, 0.0: 1, 1e-3: 2, 1.0: 3, "nan": 7, "inf": 8, "neg": 6}
SCALE = {1.0: 0, 0.125: 1, 0.0: 2, -1.0: 3, "huge": 5, "nan": 8, "inf": 9}
# hostile dimension bytes (pick_dim): 240 + index
DIM_HOSTILE = {0: 240, -1: 241, 2**31: 244, 2**32: 245, 2**26: 246, 2**34: 247,
               65536: 250, 200: 251, 1000: 252}
THREADS = {0: 0, 1: 1, 2: 2, 3: 3, 4: 4, -1: 200, 2**31 - 1: 201, 100000: 203, 64: 204}
CHUNK_HOSTILE = {-1: 200, 2**63 - 1: 202, 2**34: 203, 1000: 205}
# buffer order in fuzz_call.c
BUFS = ["q", "k", "v", "g", "beta", "o", "s", "z"]
STRIDES = {"contig": 0, "bthd": 3, "padded": 4, "broadcast": 5, "garbage_token": 6,
           "hostile": 7}


def dim(x, ordinary):
    if x in DIM_HOSTILE:
        return [DIM_HOSTILE[x]]
    assert 1 <= x <= ordinary
    return [x - 1]


def strides(mode, extra=()):
    out = [STRIDES[mode]]
    if mode == "padded":
        out += list(extra) or [1, 2, 1]
    elif mode == "broadcast":
        out += list(extra) or [2]          # bit 1: head stride 0
    elif mode == "garbage_token":
        out += list(extra) or [0xFF] * 8   # token stride -1
    elif mode == "hostile":
        out += list(extra) or [2, 0, 0, 0, 0, 0, 0, 0, 0] * 3  # -1 each (u64 unused)
    return out


def call(kind="forward", B=2, H=2, T=20, dk=8, dv=8, phi="elu1", gate="none",
         algo="auto", causal=1, normalize=None, eps=1e-6, scale=1.0, chunk=0,
         threads=1, qk_heads_byte=0, head_map=0, l2_flip=0, struct_byte=0,
         cfg_null=False, q="contig", k="contig", v="contig", o="contig", g="contig",
         beta="contig", k_same_as_q=False, state_byte=0, place=None, seed=1,
         regimes=None, raw_dims=None, g_head_byte=0, q_extra=(), o_extra=(), serve=(),
         ext=(), plan=None, packed_pool=(), zc=None, pool_strides=None):
    b = [KINDS[kind]]
    if raw_dims:
        b += raw_dims
    else:
        b += dim(B, 3) + dim(H, 4) + dim(T, 48) + dim(dk, 16) + dim(dv, 16)
    b += [PHIS[phi], GATES[gate], ALGOS[algo]]
    b += [0 if causal else 3]
    b += [2 if normalize is not None and normalize != (kind in ("forward", "step")) else 0]
    b += [EPS[eps], SCALE[scale]]
    b += [CHUNK_HOSTILE[chunk] if chunk in CHUNK_HOSTILE else chunk]
    b += [THREADS[threads]]
    b += [qk_heads_byte, head_map, 3 if l2_flip else 0, struct_byte]
    if struct_byte == 14:
        b += [40]  # struct_size 40
    b += [255 if cfg_null else 0]
    b += strides(q, q_extra)
    if k_same_as_q:
        b += [3]
    else:
        b += [0] + strides(k)[0:1] if k == "contig" else [0] + strides(k)
    b += strides(v) + strides(o, o_extra)
    if gate == "head":
        b += [g_head_byte]
    else:
        b += strides(g)
    b += strides(beta)
    b += [state_byte]
    place = place or {}
    for name in BUFS:
        b += place.get(name, [0])
    b += list(struct.pack(">Q", seed))
    regimes = regimes or {}
    b += [regimes.get(name, 0) for name in BUFS]
    # z_compensated: decode_zc(), after every byte below; then the pool's strides
    tail = zc is not None or pool_strides is not None
    serving = bool(serve) and serve[0] >= 128 and serve[0] % 6 != 0
    # the serving form: decode_serve() in fuzz_call.c
    b += list(serve) or ([0] if ext or tail else [])
    b += list(ext) or ([0] if plan is not None or packed_pool or tail else [])  # decode_ext()
    if plan is not None or packed_pool or (tail and serving):
        assert serving  # the serving form as a plan's units: run_plan()
        b += [plan or 0]
    # cu_seqlens with a pool: decode_packed_pool() in fuzz_call.c
    b += list(packed_pool) or ([0] if tail else [])
    if tail:
        b += [zc or 0]  # 0 off, 3 on, 240 / 241: -1 / 2 (refused)
    if pool_strides is not None:
        b += [pool_strides]  # decode_pool_strides()
    return bytes(b)


# 0.4.0 fields (decode_ext() in fuzz_call.c): element types per tensor
# (pick_enum: 0 F32, 1 BF16, 2 F16, 240 out of range), gate_act (1 softplus,
# 2 bounded sigmoid), lower bound (index into its table), beta_act (1
# sigmoid, 2 2 sigmoid), A_log mode (0 valid, 3 NULL, 4 88.5, 5 NaN, 6 88,
# 7 -inf), dt_bias mode (0 NULL, 1 valid, 3 NaN, 4 inf, 5 1e30, 6 -FLT_MAX).
# m: 1 the fields as given; 3 / 7 a 0.3 config (260 / 264 bytes) that must
# ignore them.
DT = {"f32": 0, "bf16": 1, "f16": 2, "bad": 240}
LOWER = {-5: 0, -1: 1, "-0": 2, 0: 3, 1: 4, "nan": 5, "-inf": 6, "-max": 7, -1e-30: 8, -100: 9}


def ext(q="f32", k=None, v=None, beta=None, o="f32", s="f32", gate_act=0, lower=-5, beta_act=0,
        alog=0, bias=0, m=1):
    k = k or q
    v = v or q
    beta = beta or q
    return [m] + [DT[x] for x in (q, k, v, beta, o, s)] + [gate_act, LOWER[lower], beta_act,
                                                         alog, bias]


# A pool's strides (decode_pool_strides() in fuzz_call.c): the state's layout, a pad of
# 1, 2, 3 or 5 elements, z's layout, and bit 7 (a variant of heads_outer, interleaved, and
# of z's heads_outer and overlap: padded, and z_head -1). "refused" takes kind 0-7 instead
# of pad and variant: 0 heads overlap, 1 slots overlap, 2 slot stride 0, 3 rows overlap,
# 4 heads outer onto the next head, 5 head and slot strides 2 and 3 heads (interleaved),
# 6 head stride -1, 7 slot stride -1.
S_LAYOUT = {"natural": 0, "slot": 1, "head": 2, "rows": 3, "all": 4, "heads_outer": 5,
            "interleaved": 6, "refused": 7}
Z_LAYOUT = {"natural": 0, "padded": 1, "heads_outer": 2, "overlap": 3}
PAD = {1: 0, 2: 1, 3: 2, 5: 3}


def strides_byte(layout="natural", pad=1, z="natural", variant=0, kind=None):
    if kind is not None:
        assert layout == "refused"
        pad, variant = [1, 2, 3, 5][kind & 3], kind >> 2
    return S_LAYOUT[layout] | PAD[pad] << 3 | Z_LAYOUT[z] << 5 | variant << 7


# serving form byte (>= 128; % 6 picks the form): decode_serve() in fuzz_call.c
SERVE = {"run": 133, "pool": 134, "pool_vfirst": 135, "slots": 136, "slots_vfirst": 196,
         "cu": 137}


def seeds():
    s = {}
    for kind in KINDS:
        for gate in GATES:
            s[f"{kind}-{gate}"] = call(kind=kind, gate=gate, H=3, T=24,
                                       phi="identity" if "delta" in kind else "elu1")
    s["forward-relu-noncausal"] = call(phi="relu", causal=0)
    s["forward-identity-unnormalised"] = call(phi="identity", normalize=0, gate="token")
    s["forward-chunked-long"] = call(B=1, H=1, T=200, dk=16, dv=16, algo="chunked",
                                     gate="channel", threads=2)
    s["forward-recurrent-long"] = call(B=1, H=1, T=200, algo="recurrent", gate="token",
                                       threads=3)
    s["forward-heads-threads"] = call(B=3, H=4, T=40, gate="head", threads=3)
    s["forward-chunk-1"] = call(gate="token", chunk=1, algo="chunked")
    s["forward-chunk-odd"] = call(gate="channel", chunk=7, algo="chunked", T=30)
    s["forward-chunk-huge"] = call(gate="token", chunk=2**63 - 1, algo="chunked")
    s["forward-threads-intmax"] = call(threads=2**31 - 1, gate="token", algo="chunked")
    s["step-threads-100000"] = call(kind="step", threads=100000, B=3, H=4)
    # rows wider than the register columns (avx2: 64, avx512: 128 or 256),
    # the rest summed in o; without the normaliser shared over threads
    s["step-wide-rows-200"] = call(kind="step", B=1, H=2, dk=5, dv=200, gate="token",
                                   normalize=0, phi="identity", threads=2)
    s["step-wide-rows-1000"] = call(kind="step", B=1, H=1, dk=3, dv=1000, gate="channel")
    s["forward-wide-rows-short"] = call(B=1, H=1, T=3, dk=7, dv=1000, gate="none",
                                        normalize=0, phi="relu", threads=2)
    # delta steps on whole rows wider than a register tile (sums past the
    # registers in the workspace and in o), over two threads and alone
    s["delta-step-wide-rows-200"] = call(kind="delta_step", B=1, H=2, dk=5, dv=200,
                                         gate="token", phi="identity", threads=2)
    s["delta-step-wide-rows-1000"] = call(kind="delta_step", B=1, H=1, dk=3, dv=1000,
                                          gate="channel", phi="identity")
    s["forward-reset-gate"] = call(gate="token", algo="chunked", T=40,
                                   regimes={"g": 2}, normalize=0, phi="identity")
    s["forward-reset-channel"] = call(gate="channel", algo="chunked", T=40,
                                      regimes={"g": 2}, normalize=0)
    s["forward-strong-decay"] = call(gate="token", algo="chunked", T=48, regimes={"g": 1})
    s["forward-flt-max-gate"] = call(gate="head", regimes={"g": 5}, algo="chunked")
    s["forward-bad-gate-values"] = call(gate="token", regimes={"g": 6})
    s["forward-eps-nan"] = call(eps="nan")
    s["forward-scale-inf"] = call(scale="inf")
    s["forward-chunk-negative"] = call(chunk=-1)
    s["forward-struct-v01"] = call(struct_byte=10, qk_heads_byte=200)   # garbage qk_heads
    s["forward-struct-small"] = call(struct_byte=14)
    s["forward-grouped-heads"] = call(H=4, qk_heads_byte=2, gate="token")
    s["forward-tiled-heads"] = call(H=4, qk_heads_byte=2, head_map=1, gate="channel")
    s["forward-qk-l2norm"] = call(l2_flip=1, gate="token")
    s["forward-k-aliases-q"] = call(place={"k": [12, 0, 0]})
    s["forward-o-over-q"] = call(place={"q": [15, 0]})
    s["forward-s-over-v"] = call(place={"s": [12, 2, 3]})
    s["forward-misaligned"] = call(place={n: [16 * (i + 1) + 1] for i, n in enumerate(BUFS)})
    s["forward-bthd"] = call(q="bthd", k="bthd", v="bthd", o="bthd", gate="token", H=4)
    s["forward-padded"] = call(q="padded", v="padded", o="padded", gate="channel",
                               g="padded")
    s["forward-mqa"] = call(k="broadcast", v="broadcast", H=4)
    s["forward-negative-stride"] = call(q="hostile")
    s["forward-o-self-overlap"] = call(o="broadcast", o_extra=[4])  # token stride 0
    s["forward-null-q"] = call(place={"q": [13]})
    s["forward-state-null"] = call(state_byte=1, gate="token")
    s["forward-state-unpaired"] = call(state_byte=240)
    s["forward-values-huge"] = call(regimes={"q": 4, "k": 4, "v": 4})
    s["forward-values-tiny"] = call(regimes={"q": 5, "k": 5, "v": 5, "s": 5}, phi="identity",
                                    normalize=0)
    s["forward-values-nan"] = call(regimes={"v": 6, "q": 6})
    s["forward-values-inf"] = call(regimes={"k": 7}, gate="channel")
    s["forward-values-mixed"] = call(regimes={"q": 8, "k": 8, "v": 8, "s": 8, "z": 8})
    s["forward-unnormalised-garbage-z"] = call(normalize=0, place={"z": [14]})
    s["forward-huge-state"] = call(dk=2**31, dv=2**31, state_byte=1)
    s["forward-huge-seq"] = call(T=2**34, chunk=2**34, dk=2**26, q="broadcast",
                                 q_extra=[7], state_byte=1)
    s["forward-zero-dims"] = call(B=0)
    s["forward-cfg-null"] = call(cfg_null=True)
    s["step-garbage-seq-len"] = call(kind="step", T=-1, q="garbage_token", v="garbage_token",
                                     o="garbage_token", gate="token")
    s["step-step-shaped"] = call(kind="step", T=2**34, gate="channel")
    s["step-no-state"] = call(kind="step", state_byte=1)
    s["delta-forward-beta-edges"] = call(kind="delta_forward", gate="token",
                                         regimes={"beta": 2}, phi="identity")
    s["delta-forward-beta-invalid"] = call(kind="delta_forward", regimes={"beta": 3})
    s["delta-forward-normalize"] = call(kind="delta_forward", normalize=1)
    s["delta-forward-long"] = call(kind="delta_forward", B=1, H=1, T=200, gate="channel",
                                   algo="chunked", threads=2, phi="identity")
    s["delta-step-grouped"] = call(kind="delta_step", H=4, qk_heads_byte=2, gate="token")
    # The serving form through linattn_run: pools, slots, snapshots, cu_seqlens.
    s["serve-run-forward"] = call(gate="token", serve=[SERVE["run"]])
    s["serve-pool-delta"] = call(kind="delta_forward", gate="token", phi="identity",
                                 serve=[SERVE["pool"]])
    s["serve-pool-vfirst-forward"] = call(gate="channel", threads=2, serve=[SERVE["pool_vfirst"]])
    s["serve-pool-vfirst-step"] = call(kind="delta_step", gate="token", phi="identity", B=3,
                                       serve=[SERVE["pool_vfirst"]])
    # slots: read = write = (n + 1) % B, one snapshot each (skipped: -1)
    s["serve-slots-permuted"] = call(kind="delta_forward", B=3, gate="token", phi="identity",
                                     threads=2, serve=[SERVE["slots_vfirst"], 3 | 2 << 2,
                                                       2, 2, 2, 2, 2, 2, 1, 1, 1])
    # every sequence writes slot 0: refused
    s["serve-slots-conflict"] = call(kind="forward", B=3, gate="token",
                                     serve=[SERVE["slots"], 3, 0, 6, 0, 6, 0, 6])
    # snapshots K = 4 into slots past the pool
    s["serve-snapshots-bad"] = call(kind="delta_forward", B=2, gate="token", phi="identity",
                                    serve=[SERVE["slots"], 3 | 4 << 2, 0, 0, 0, 0] + [3] * 8)
    # a bfloat16 V-first pool: one-token calls run in place on the V-first kernel;
    # then with slots (reversed, each read and written in place, the middle one padding)
    s["serve-pool-vfirst-step-bf16"] = call(kind="delta_step", gate="token", phi="identity", B=3,
                                            serve=[SERVE["pool_vfirst"]], ext=ext(s="bf16"))
    s["serve-slots-vfirst-bf16"] = call(kind="delta_forward", B=3, T=1, gate="channel",
                                        phi="identity", serve=[SERVE["slots_vfirst"], 3, 7, 7, 1,
                                                               1, 7, 7], ext=ext(s="bf16"))
    # speculative verification on a V-first pool: K = T = 2 snapshots, no write slot, so each
    # token steps in place in its own slot (one sequence, all in its read slot; then two)
    s["serve-spec-vfirst"] = call(kind="delta_forward", B=1, T=2, gate="token", phi="identity",
                                  serve=[SERVE["slots_vfirst"], 3 | 3 << 2, 0, 1, 0, 6])
    s["serve-spec-vfirst-2seqs"] = call(kind="delta_forward", B=2, T=2, gate="channel",
                                        phi="identity", threads=2,
                                        serve=[SERVE["slots_vfirst"], 3 | 3 << 2, 0, 1, 0, 1,
                                               0, 6, 2, 9])
    # slots the reference follows (hostile_slot() picks from n, -1, (n + 1) % B, B, ...):
    # sequence 0 new (read -1) into slot 0, its snapshot of token T - 2 there too (the final
    # state wins); 1 reads slot 1, stores no final state, snapshots token T - 2 to slot 2;
    # 2 is padding, its snapshot slots (1, read by 1, and 0) never written
    s["serve-slots-fresh-snapshots"] = call(kind="delta_forward", B=3, T=5, gate="token",
                                            phi="identity", threads=2,
                                            serve=[SERVE["slots"], 3 | 3 << 2, 1, 0, 0, 1, 8, 1,
                                                   0, 1, 0, 1, 0, 7])
    # a pool of B + 2 slots (use & 128): sequence 0 moves slot 0 to slot B, 1 steps in place,
    # slot B + 1 is named by no one
    s["serve-slots-pool-larger"] = call(kind="delta_step", B=2, gate="token", phi="identity",
                                        serve=[SERVE["slots"], 128 | 3, 0, 3, 0, 0])
    s["serve-slots-pool-larger-additive"] = call(B=2, T=3, gate="token", normalize=1,
                                                 serve=[SERVE["slots_vfirst"], 128 | 3, 0, 3,
                                                        0, 0])
    # the additive family's z through slots: 0 -> 1, padding, a new sequence into slot 2;
    # slot 0's s and z are read, never written
    s["serve-slots-additive-z"] = call(B=3, T=6, gate="channel", normalize=1, threads=2,
                                       serve=[SERVE["slots"], 3 | 2 << 2, 0, 2, 1, 1, 1, 0,
                                              1, 6, 1])
    # V-first decode: slot 0 -> 1, two padding sequences; slot 2 is named by no one
    s["serve-slots-vfirst-step-unnamed"] = call(kind="delta_step", B=3, gate="channel",
                                                phi="identity",
                                                serve=[SERVE["slots_vfirst"], 3, 0, 2, 1, 1, 8, 5])
    # plans (the units run in ranges: 1 one by one from the last, 2 the second half then
    # the first, 3 runs of 1 + (byte >> 2 & 15) % 5; + 64 the ranges on two threads at
    # once; + 128 refused ranges first): the same bits as linattn_run
    s["serve-plan-pool-vfirst-backwards"] = call(kind="delta_forward", B=3, gate="channel",
                                                 phi="identity", threads=2,
                                                 serve=[SERVE["pool_vfirst"]], plan=1 | 128)
    s["serve-plan-cu-halves"] = call(B=1, T=40, gate="token", serve=[SERVE["cu"], 3], plan=2)
    s["serve-plan-pool-vfirst-two-threads"] = call(kind="delta_step", B=3, H=4, gate="token",
                                                   phi="identity",
                                                   serve=[SERVE["pool_vfirst"]], plan=1 | 64)
    s["serve-plan-cu-runs-two-threads"] = call(kind="delta_forward", B=1, T=40, gate="channel",
                                               phi="identity", serve=[SERVE["cu"], 3],
                                               plan=3 | 1 << 2 | 64)
    s["serve-plan-slots-runs"] = call(kind="delta_forward", B=3, T=5, gate="token",
                                      phi="identity",
                                      serve=[SERVE["slots"], 3 | 3 << 2, 1, 0, 0, 1, 8, 1,
                                             0, 1, 0, 1, 0, 7], plan=3 | 1 << 2 | 128)
    s["serve-plan-contiguous-bf16"] = call(kind="delta_step", B=3, H=4, gate="token",
                                           phi="identity", serve=[SERVE["run"]],
                                           ext=ext(q="bf16", o="bf16", s="bf16"), plan=1)
    # a 1 x 1 state is K-first and V-first at once: its plan stepped it on the V-first op,
    # whose bits differ from linattn_run's K-first kernels (a fuzz finding on avx2, T 20)
    s["serve-plan-contiguous-1x1-state"] = call(kind="forward", B=3, H=4, T=5, dk=1, dv=1,
                                                phi="relu", gate="token", serve=[SERVE["run"]],
                                                plan=1)
    s["serve-plan-refused"] = call(kind="forward", B=3, gate="token",
                                   serve=[SERVE["slots"], 3, 0, 6, 0, 6, 0, 6], plan=2 | 128)
    # packed sequences with a pool (decode_packed_pool(): bit 0 pool, 1 two more slots,
    # 2 V-first, 3 / 4 read / write slots given, >> 5 picks K from 0 1 2 3 4 -1 1 2), then
    # each sequence's read and write slot and its snapshot slots (hostile_slot() over N):
    # 3 sequences; 0 new into extra slot 3, its token len - 2 to slot 2; 1 in place;
    # 2 padding; slots 0 and 4 named by no one
    s["serve-cu-pool-slots"] = call(B=1, T=40, gate="token", normalize=1, threads=2,
                                    serve=[SERVE["cu"], 2],
                                    packed_pool=[91, 1, 3, 0, 0, 8, 1, 7, 1, 1, 1, 6, 0])
    # speculative verification of 2 packed sequences of 3 tokens on a V-first pool: every
    # token's state to a slot (sequence 0: slots 2, 0, 0; 1: its own slot 1 three times)
    s["serve-cu-pool-vfirst-spec"] = call(kind="delta_forward", B=1, T=6, gate="channel",
                                          phi="identity", serve=[SERVE["cu"], 1],
                                          packed_pool=[127, 0, 1, 0, 1, 3, 6, 0, 0, 2, 0])
    # empty sequences (T = 2 over 4): 0 new and empty, so slot 0 gets zeros; 2 empty, its
    # slot 2 copied to slot 3; 3 padding
    s["serve-cu-pool-empty-sequences"] = call(kind="delta_forward", B=1, T=2, gate="token",
                                              phi="identity", serve=[SERVE["cu"], 3], plan=1,
                                              packed_pool=[25, 1, 0, 0, 0, 0, 2, 1, 1])
    # one sequence, a pool of B - 1 = 0 slots: refused, nothing written
    s["serve-pool-no-slot"] = call(kind="delta_forward", B=1, T=2, gate="token", phi="identity",
                                   serve=[SERVE["slots_vfirst"], 32 | 64, 0, 0])
    s["serve-cu-4seqs"] = call(B=1, T=40, gate="token", threads=2, serve=[SERVE["cu"], 3])
    s["serve-cu-delta"] = call(kind="delta_forward", B=1, T=33, gate="channel", phi="identity",
                               serve=[SERVE["cu"], 2])
    s["serve-cu-bad-end"] = call(B=1, T=40, serve=[SERVE["cu"], 3 | 5 << 2])
    s["serve-cu-falling"] = call(kind="delta_forward", B=1, T=40, phi="identity",
                                 serve=[SERVE["cu"], 3 | 7 << 2])
    # z_compensated (z as [2][dk] a head, the normaliser then its compensation): every
    # form, a head's columns over 3 threads, steps, a non-causal call, pools, packed
    # sequences with a pool and snapshots, and the bad values
    s["zc-recurrent-columns-threads"] = call(B=1, H=1, T=40, dk=9, dv=16, gate="token",
                                             algo="recurrent", threads=3, zc=3)
    s["zc-chunked-channel"] = call(T=33, gate="channel", algo="chunked", threads=2, zc=3)
    s["zc-step"] = call(kind="step", gate="token", zc=3)
    s["zc-noncausal"] = call(T=30, causal=0, zc=3)
    # 3 sequences in place in a pool of 5, K = 2: sequence 0's token 3 to slot 3, sequence
    # 1's last token to its own slot too
    s["zc-pool-slots-snapshots"] = call(B=3, T=5, gate="token",
                                        serve=[SERVE["slots"], 3 | 3 << 2 | 128] + [0] * 6
                                        + [3, 1, 1, 2, 1, 1], zc=3)
    s["zc-cu-pool"] = call(B=1, T=40, gate="token", threads=2, serve=[SERVE["cu"], 2],
                           packed_pool=[91, 1, 3, 0, 0, 8, 1, 7, 1, 1, 1, 6, 0], zc=3)
    s["zc-plan-vfirst"] = call(kind="step", B=3, H=4, gate="token",
                               serve=[SERVE["pool_vfirst"]], plan=1 | 64, zc=3)
    s["zc-bad-minus-one"] = call(zc=240)
    s["zc-bad-two"] = call(kind="step", zc=241)
    # Pools with the strides engines keep (strides_byte()): padded slots, heads and rows,
    # heads outer ([H][slots]), heads interleaved along the columns (neither row nor column
    # stride 1), z likewise; padding between states is NaN, poisoned, and must keep its bits
    ps, d = strides_byte, dict(kind="delta_forward", phi="identity")
    s["pool-strides-slot-kfirst-z"] = call(gate="token", serve=[SERVE["pool"]],
                                           pool_strides=ps("slot", 3, z="padded"))
    s["pool-strides-head-vfirst-step"] = call(kind="delta_step", B=3, gate="token",
                                              phi="identity", serve=[SERVE["pool_vfirst"]],
                                              pool_strides=ps("head", 1))
    s["pool-strides-rows-kfirst-bf16"] = call(T=6, gate="channel", serve=[SERVE["pool"]],
                                              ext=ext(s="bf16"), pool_strides=ps("rows", 1), **d)
    s["pool-strides-rows-vfirst-step-bf16"] = call(kind="delta_step", B=3, gate="token",
                                                   phi="identity", serve=[SERVE["pool_vfirst"]],
                                                   ext=ext(s="bf16"), pool_strides=ps("rows", 3))
    s["pool-strides-rows-vfirst-short"] = call(T=5, gate="token", serve=[SERVE["pool_vfirst"]],
                                               pool_strides=ps("rows", 5), **d)
    s["pool-strides-all-vfirst-long"] = call(T=30, dk=9, gate="channel", threads=2,
                                             serve=[SERVE["pool_vfirst"]],
                                             pool_strides=ps("all", 2), **d)
    s["pool-strides-all-vfirst-additive-zc"] = call(T=12, gate="channel",
                                                    serve=[SERVE["pool_vfirst"]], zc=3,
                                                    pool_strides=ps("all", 1, z="padded"))
    # slots read and written in turn ((n + 1) % B), [H][slots] states and z
    s["pool-strides-heads-outer-step"] = call(kind="step", B=3, H=3, gate="channel",
                                              serve=[SERVE["slots"], 3] + [2] * 6,
                                              pool_strides=ps("heads_outer", z="heads_outer"))
    s["pool-strides-heads-outer-vfirst-plan"] = call(kind="delta_step", B=3, H=4, gate="token",
                                                     phi="identity",
                                                     serve=[SERVE["pool_vfirst"]], plan=1 | 64,
                                                     ext=ext(s="bf16"),
                                                     pool_strides=ps("heads_outer", 2,
                                                                     variant=1))
    s["pool-strides-interleaved-kfirst"] = call(T=8, H=3, gate="token", serve=[SERVE["pool"]],
                                                pool_strides=ps("interleaved"), **d)
    s["pool-strides-interleaved-vfirst-additive"] = call(H=2, gate="head",
                                                         serve=[SERVE["pool_vfirst"]],
                                                         pool_strides=ps("interleaved", 3,
                                                                         z="padded", variant=1))
    # speculative verification on a V-first pool with padded columns (serve-cu-pool-vfirst-
    # spec), and snapshots into a padded K-first pool of 5 slots (zc-pool-slots-snapshots)
    s["pool-strides-spec-vfirst-rows"] = call(B=1, T=6, gate="channel", serve=[SERVE["cu"], 1],
                                              packed_pool=[127, 0, 1, 0, 1, 3, 6, 0, 0, 2, 0],
                                              pool_strides=ps("rows", 3), **d)
    s["pool-strides-snapshots-all"] = call(B=3, T=5, gate="token",
                                           serve=[SERVE["slots"], 3 | 3 << 2 | 128] + [0] * 6
                                           + [3, 1, 1, 2, 1, 1], zc=3,
                                           pool_strides=ps("all", 5, z="padded"))
    s["pool-strides-cu-heads-outer"] = call(B=1, T=40, gate="token", threads=2,
                                            serve=[SERVE["cu"], 2],
                                            packed_pool=[91, 1, 3, 0, 0, 8, 1, 7, 1, 1, 1, 6, 0],
                                            pool_strides=ps("heads_outer", 3, z="heads_outer",
                                                            variant=1))
    # strides the library refuses: heads, slots, z heads aliasing (E_OVERLAP), a negative
    # head stride on one head (E_STRIDE); a negative z_head where no z is read is ignored;
    # head and slot strides 2 and 3 heads never collide on 3 heads and 2 slots but are
    # refused by the library's conservative rule
    s["pool-strides-heads-alias"] = call(T=4, gate="token", serve=[SERVE["pool"]],
                                         pool_strides=ps("refused", kind=0), **d)
    s["pool-strides-slots-alias-vfirst"] = call(kind="step", B=3, gate="token",
                                                serve=[SERVE["pool_vfirst"]],
                                                pool_strides=ps("refused", kind=1))
    s["pool-strides-negative-head"] = call(kind="delta_step", H=1, gate="token", phi="identity",
                                           serve=[SERVE["pool"]], ext=ext(s="bf16"),
                                           pool_strides=ps("refused", kind=6))
    s["pool-strides-z-alias"] = call(T=4, gate="token", serve=[SERVE["pool"]],
                                     pool_strides=ps("natural", z="overlap"))
    s["pool-strides-z-negative-unread"] = call(T=4, gate="token", serve=[SERVE["pool"]],
                                               pool_strides=ps("natural", z="overlap",
                                                               variant=1), **d)
    s["pool-strides-interleave-refused"] = call(H=3, T=4, gate="token", serve=[SERVE["pool"]],
                                                pool_strides=ps("refused", kind=5))
    # 0.4.0: element types and the input stage's activations (linattn_run).
    run = [SERVE["run"]]
    bf16 = dict(q="bf16", o="bf16", s="bf16")
    d = dict(kind="delta_forward", phi="identity")
    s["dtypes-forward-bf16"] = call(gate="token", serve=run, ext=ext(**bf16))
    s["dtypes-forward-f16-chunked"] = call(gate="channel", algo="chunked", T=40, serve=run,
                                           ext=ext(q="f16", o="f16"))
    s["dtypes-step-bf16-state"] = call(kind="step", gate="token", serve=run, ext=ext(**bf16))
    s["dtypes-delta-f16"] = call(gate="token", serve=run, ext=ext(q="f16", beta="f16"), **d)
    s["dtypes-delta-mixed-step"] = call(kind="delta_step", phi="identity", gate="channel",
                                        serve=run, ext=ext(q="bf16", k="f16", v="f32",
                                                           beta="bf16", o="f16", s="bf16"))
    s["dtypes-delta-step-wide-bf16-state"] = call(kind="delta_step", H=2, dk=7, dv=200,
                                                  gate="token", phi="identity", serve=run,
                                                  ext=ext(**bf16))
    s["dtypes-delta-recurrent-long"] = call(B=1, H=1, T=200, algo="recurrent", gate="token",
                                            serve=run, ext=ext(**bf16), **d)
    s["dtypes-softplus-token"] = call(gate="token", serve=run,
                                      ext=ext(q="bf16", gate_act=1, bias=1, beta_act=1), **d)
    s["dtypes-softplus-channel"] = call(gate="channel", algo="chunked", T=30, serve=run,
                                        ext=ext(q="bf16", gate_act=1, bias=1, beta_act=2), **d)
    s["dtypes-softplus-no-bias"] = call(gate="token", serve=run, ext=ext(gate_act=1))
    s["dtypes-bounded-channel"] = call(gate="channel", serve=run,
                                       ext=ext(q="f16", o="bf16", gate_act=2, bias=1))
    s["dtypes-bounded-delta-threads"] = call(B=3, H=4, T=40, gate="channel", threads=3,
                                             serve=run, ext=ext(**bf16, gate_act=2, bias=1,
                                                                beta_act=1), **d)
    s["dtypes-grouped-tiled"] = call(H=4, qk_heads_byte=2, head_map=1, gate="token", serve=run,
                                     ext=ext(**bf16, gate_act=1, bias=1), **d)
    s["dtypes-strided"] = call(q="bthd", k="bthd", v="padded", o="padded", gate="channel",
                               g="padded", serve=run, ext=ext(q="f16", o="f16", gate_act=1))
    s["dtypes-misaligned"] = call(place={n: [16 * (i + 1)] for i, n in enumerate(BUFS)},
                                  gate="token", serve=run, ext=ext(**bf16, beta_act=1), **d)
    s["dtypes-k-aliases-q"] = call(place={"k": [12, 0, 0]}, serve=run, ext=ext(q="bf16"))
    s["dtypes-o-over-q"] = call(place={"q": [15, 0]}, serve=run, ext=ext(q="bf16", o="bf16"))
    s["dtypes-pool-bf16"] = call(gate="token", serve=[SERVE["pool"]], ext=ext(**bf16), **d)
    s["dtypes-pool-vfirst-bf16"] = call(gate="channel", serve=[SERVE["pool_vfirst"]],
                                        ext=ext(**bf16, gate_act=1))
    s["dtypes-cu-bf16"] = call(B=1, T=40, gate="token", serve=[SERVE["cu"], 3],
                               ext=ext(q="bf16", o="f16", gate_act=1, beta_act=1), **d)
    s["dtypes-raw-gate-nan"] = call(gate="token", regimes={"g": 6}, serve=run,
                                    ext=ext(gate_act=1))
    s["dtypes-raw-gate-huge"] = call(gate="channel", regimes={"g": 4}, serve=run,
                                     ext=ext(gate_act=1, bias=5))
    s["dtypes-beta-logits-inf"] = call(gate="token", regimes={"beta": 7}, serve=run,
                                       ext=ext(beta_act=1), **d)
    s["dtypes-beta-bf16-out-of-range"] = call(regimes={"beta": 3}, serve=run,
                                              ext=ext(q="bf16"), **d)
    s["dtypes-alog-null"] = call(gate="token", serve=run, ext=ext(gate_act=1, alog=3))
    s["dtypes-alog-big"] = call(gate="token", serve=run, ext=ext(gate_act=1, alog=4), **d)
    s["dtypes-alog-nan"] = call(gate="channel", serve=run, ext=ext(gate_act=2, alog=5))
    s["dtypes-alog-88"] = call(gate="channel", serve=run, ext=ext(gate_act=1, alog=6), **d)
    s["dtypes-alog-neg-inf"] = call(gate="token", serve=run, ext=ext(gate_act=1, alog=7))
    s["dtypes-bias-nan"] = call(gate="channel", serve=run, ext=ext(gate_act=1, bias=3), **d)
    s["dtypes-bias-inf"] = call(gate="token", serve=run, ext=ext(gate_act=2, bias=4))
    s["dtypes-bias-lowest"] = call(gate="token", serve=run, ext=ext(gate_act=1, bias=6), **d)
    s["dtypes-bound-zero"] = call(gate="token", serve=run, ext=ext(gate_act=2, lower=0))
    s["dtypes-bound-nan"] = call(gate="channel", serve=run, ext=ext(gate_act=2, lower="nan"))
    s["dtypes-bound-neg-inf"] = call(gate="token", serve=run, ext=ext(gate_act=2, lower="-inf"))
    s["dtypes-gate-act-head"] = call(gate="head", serve=run, ext=ext(gate_act=1))
    s["dtypes-gate-act-none"] = call(gate="none", serve=run, ext=ext(gate_act=2))
    s["dtypes-beta-act-additive"] = call(gate="token", serve=run, ext=ext(beta_act=1))
    s["dtypes-bad-enum"] = call(serve=run, ext=ext(q="bad"))
    s["dtypes-bad-state-enum"] = call(serve=run, ext=ext(s="bad"), **d)
    s["dtypes-f16-state"] = call(serve=run, ext=ext(s="f16"), **d)
    s["dtypes-float32-call"] = call(gate="token", ext=ext(q="bf16"))
    s["dtypes-float32-call-act"] = call(gate="token", ext=ext(gate_act=1), **d)
    s["dtypes-config-0.3-run"] = call(gate="token", serve=run, ext=ext(q="bad", m=3))
    s["dtypes-config-0.3-padded-run"] = call(gate="channel", serve=run,
                                             ext=ext(**bf16, gate_act=1, m=7), **d)
    s["dtypes-config-0.3-float32"] = call(gate="token", ext=ext(q="bf16", m=7), **d)
    # a float16 o past 65504 (large v into a bfloat16 state): stored as infinity, which the
    # model must accept (the fuzzer stopped on such a call on avx2)
    s["dtypes-delta-step-f16-o-overflow"] = call(
        kind="delta_step", phi="identity", gate="channel", regimes={"v": 3, "g": 1, "s": 2},
        serve=run, ext=ext(q="bf16", k="f16", v="f32", beta="bf16", o="f16", s="bf16"))
    # Inputs the fuzzer found, kept byte for byte as regression seeds.
    # a delta step with causal = -1 through a plan: the plan checked the
    # step as a forward with causal set to 1, so it ran what linattn_run
    # refuses (cfg->causal must be 0 or 1 on a step too)
    s["found-plan-step-causal-flag"] = bytes(
        [3, 2, 3, 19, 7, 32, 50, 200, 83, 254, 85, 0, 0, 0, 1] + [0] * 28 + [1] + [0] * 8
        + [133, 1, 1, 1, 1, 1, 1, 99, 102, 103, 45, 62, 100, 118, 1, 0, 0, 0, 0, 0, 1])
    s["found-avx2-token-stride-T1"] = bytes(
        [0, 19, 9, 0, 3, 0, 0, 1, 16, 0, 0, 0, 0, 47] + [118] * 31 + [15, 0])
    # additive quads under a token gate, v near 2^127 and k near 2^-135:
    # the scaled tile took v / d and overflowed where the state did not
    s["found-avx512-quads-large-v"] = bytes(
        [0, 1, 1, 39, 7, 7, 151, 2, 2, 1, 0, 2, 0, 91, 0, 13, 194, 194, 0, 0] + [194] * 15
        + [0] * 10 + [115, 114, 0, 2, 0, 0, 0, 0])
    # a packed additive call whose beta, which it ignores, lies inside z,
    # which a packed call has no memory for: the model made beta's pointer
    # from z's NULL (UBSan)
    s["found-avx2-alias-of-no-memory"] = bytes(
        [0, 0, 0, 251, 15, 15, 215, 1, 0, 0, 0, 3, 0, 0, 0, 2] + [0] * 16
        + [252, 255, 0] + [187] * 9 + [127, 251, 58, 0, 112, 97, 0, 0] + [167] * 6
        + [0] * 6 + [1] + [0] * 8)
    # the slots form (V-first) with B = 200, past the 8 sequences it takes
    # slots for: it fell back to the plain pool's form, whose reference
    # reads the state K-first, but kept the V-first strides (a harness
    # bug: every table's state looked transposed to the reference)
    s["found-avx2-slots-vfirst-large-batch"] = bytes(
        [0, 251, 2, 0, 1, 1, 7, 7, 2, 2] + [0] * 6 + [1] + [0] * 9 + [164, 0, 0, 1] + [0] * 4
        + [164, 0, 0, 1] + [0] * 5 + list(b"s is NU") + [0, 37, 41, 0, 0, 196, 15, 0, 1]
        + [255] * 7 + [37, 0, 0, 115, 36, 104, 136, 58, 24, 0, 0, 0])[:71]
    # (cut after the 71 bytes its decoder read: byte 71 is now the pool's strides)
    # scale 1e30 and eps 0 make inf / inf in a few output columns: 4 threads
    # split each head's 200 columns at 100, so those columns ran on a
    # partial register tile, where one thread ran them on a full one, and
    # their NaNs came out with the other sign (x86 keeps the first
    # operand's NaN); a NaN's sign and payload are not part of determinism
    s["found-avx512-nan-sign-column-split"] = bytes(
        [212, 0, 5, 238, 35, 251, 36, 229, 0, 29, 0, 1, 65, 0, 114, 7, 1, 0, 1] + [0] * 17
        + list(b"success") + [0, 128, 5, 7, 238, 0, 35, 36, 251, 229] + [0] * 5
        + [252, 7, 7, 0, 3, 7, 0, 3, 96])
    # a pool call (0 slots, strides that do not nest) whose shapes address
    # more than the small buffers a call to refuse gets: la_check scanned
    # the channel gate's values before the pool was checked and read past
    # g (ASan); the values are now read after every structural check
    s["found-scalar-gate-scan-before-pool"] = bytes(
        [0, 0, 2, 7, 252] + list(b"pool=") + [0, 0, 0, 2, 0, 0, 0, 2] + [0] * 11
        + [59, 0, 1] + [0] * 8 + [238] * 17 + [18, 0, 0, 0] + [238] * 9 + [0])
    # a non-causal elu+1 call normalised by a z near -0.4 with keys near -85:
    # avx512 cut those features (e^k, about 1e-37) to 0 as it cuts decays
    # below e^-80, and o came out 0 where the reference has 1.5e-36
    s["found-avx512-elu-features-below-80"] = bytes(
        [0, 6, 252, 1, 0, 0, 0, 0, 60, 63, 0, 0, 0, 0, 6] + [0] * 17 + [255, 0, 0, 0, 7, 0, 255]
        + [0] * 5 + [2, 1, 3, 19, 7, 7, 2, 2] + [0] * 7)
    return s


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "corpus")
    os.makedirs(out, exist_ok=True)
    for name, data in seeds().items():
        with open(os.path.join(out, name), "wb") as f:
            f.write(data)
    print(f"{len(seeds())} seeds in {out}")


if __name__ == "__main__":
    main()
