/* linattn: linear attention kernels for CPUs.
 *
 * One stable C API. Every entry point checks its arguments, returns a status
 * and writes nothing when the arguments are bad. Computation runs on the
 * kernel table picked at load time for this CPU (see linattn_set_isa). */
#ifndef LINATTN_H
#define LINATTN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(LINATTN_BUILDING) && defined(__GNUC__)
#define LINATTN_API __attribute__((visibility("default")))
#else
#define LINATTN_API
#endif

#define LINATTN_VERSION_MAJOR 0
#define LINATTN_VERSION_MINOR 4
#define LINATTN_VERSION_PATCH 0

typedef enum {
    LINATTN_OK = 0,
    LINATTN_E_NULL,    /* a required pointer is NULL, or s/z not given as a pair */
    LINATTN_E_SHAPE,   /* a dimension < 1, or byte counts overflow */
    LINATTN_E_STRIDE,  /* a negative stride */
    LINATTN_E_ARG,     /* bad enum, eps, scale, chunk, struct_size, gate values */
    LINATTN_E_ISA,     /* the requested instruction set cannot run here */
    LINATTN_E_NOMEM,   /* workspace allocation failed */
    LINATTN_E_OVERLAP  /* an output overlaps itself, an input or another output */
} linattn_status;

/* Never NULL, also for codes not in the enum. */
LINATTN_API const char *linattn_strerror(linattn_status s);
/* "MAJOR.MINOR.PATCH" */
LINATTN_API const char *linattn_version(void);
/* Why the last call on this thread failed, naming the field or value at
 * fault and what was expected; "success" after a call that returned OK.
 * Thread-local; never NULL; valid until this thread's next linattn call. */
LINATTN_API const char *linattn_last_error(void);

typedef enum {
    LINATTN_ISA_AUTO = 0,
    LINATTN_ISA_SCALAR,
    LINATTN_ISA_AVX2,   /* AVX2 + FMA */
    LINATTN_ISA_AVX512, /* AVX-512F */
    LINATTN_ISA_NEON    /* AArch64 Advanced SIMD */
} linattn_isa;

/* 1 when this build has the table and this CPU can run it. AUTO: 1. */
LINATTN_API int linattn_isa_available(linattn_isa isa);
/* Makes isa the active table for the whole process; AUTO picks the best
 * available one. LINATTN_E_ISA (and no change) when it cannot run here. */
LINATTN_API linattn_status linattn_set_isa(linattn_isa isa);
/* The active table, never AUTO. When LINATTN_ISA named a table that cannot
 * run, this is the best available one, but compute calls return
 * LINATTN_E_ISA until linattn_set_isa succeeds. */
LINATTN_API linattn_isa linattn_get_isa(void);
/* "auto", "scalar", "avx2", "avx512", "neon"; "unknown" otherwise. */
LINATTN_API const char *linattn_isa_name(linattn_isa isa);
/* The machine whose measured tuning data (AUTO's algorithm, chunks, tiles)
 * the tables use on this CPU, chosen once from its vendor, family and
 * model: "zen4" (AMD Zen 1 to 4), "zen5" (AMD Zen 5 and later),
 * "sapphire_rapids" (Intel with AVX-512), "other" (none of these). A
 * table without an entry for it uses its first one. Never NULL. */
LINATTN_API const char *linattn_tuning_name(void);

typedef enum {
    LINATTN_PHI_ELU1 = 0, /* elu(x) + 1 */
    LINATTN_PHI_RELU,     /* max(x, 0) */
    LINATTN_PHI_IDENTITY  /* x */
} linattn_phi;

typedef enum {
    LINATTN_GATE_NONE = 0, /* no decay */
    LINATTN_GATE_HEAD,     /* g[h]: one log-decay per head (RetNet) */
    LINATTN_GATE_TOKEN,    /* g[b,h,t]: one per token (Mamba-2 SSD) */
    LINATTN_GATE_CHANNEL   /* g[b,h,t,0..dk-1]: one per key channel (GLA) */
} linattn_gate;

typedef enum {
    LINATTN_ALGO_AUTO = 0,
    LINATTN_ALGO_CHUNKED,  /* matrix-shaped chunks: prefill */
    LINATTN_ALGO_RECURRENT /* token by token */
} linattn_algo;

/* How value heads read q/k heads when there are fewer q/k heads. */
typedef enum {
    LINATTN_HEADS_GROUPED = 0, /* value head h reads q/k head h / (heads / qk_heads) */
    LINATTN_HEADS_TILED        /* value head h reads q/k head h % qk_heads */
} linattn_head_map;

/* Element types. bfloat16 and float16 are IEEE-style 16-bit values in
 * uint16_t storage; arithmetic inside a call is float32, and a 16-bit
 * output or state is rounded to nearest, ties to even, once when written. */
typedef enum {
    LINATTN_F32 = 0,
    LINATTN_BF16,
    LINATTN_F16
} linattn_dtype;

/* The type of each tensor (linattn_run). q, k, v, beta and o take any of
 * the three; the state s takes F32 or BF16 (its normaliser z, and g,
 * A_log and dt_bias are always float32). */
typedef struct {
    linattn_dtype q, k, v, beta, o, s;
} linattn_dtypes;

/* Gates computed in the kernel's input stage from raw projections a (g's
 * array and strides hold a instead of the log-decay; A_log [H], dt_bias
 * [H], or [H][dk] with LINATTN_GATE_CHANNEL; dt_bias NULL reads as 0):
 *   SOFTPLUS:        g = -exp(A_log[h]) * softplus(a + dt_bias)   (Gated DeltaNet, KDA)
 *   BOUNDED_SIGMOID: g = lower_bound * sigmoid(exp(A_log[h]) * (a + dt_bias))  (KDA) */
typedef enum {
    LINATTN_GATE_ACT_NONE = 0,
    LINATTN_GATE_ACT_SOFTPLUS,
    LINATTN_GATE_ACT_BOUNDED_SIGMOID
} linattn_gate_act;

/* beta computed from logits b in the input stage: sigmoid(b), or
 * 2 sigmoid(b) (negative eigenvalues allowed, fla's allow_neg_eigval). */
typedef enum {
    LINATTN_BETA_ACT_NONE = 0,
    LINATTN_BETA_ACT_SIGMOID,
    LINATTN_BETA_ACT_SIGMOID2
} linattn_beta_act;

/* Strides in elements. The feature dimension is always contiguous. */
typedef struct {
    int64_t batch, head, token;
} linattn_strides;

typedef struct {
    size_t struct_size; /* sizeof(linattn_config); set by linattn_config_init */
    int64_t batch, heads, seq_len, dk, dv;
    linattn_phi phi;   /* ELU1 */
    linattn_gate gate; /* NONE */
    linattn_algo algo; /* AUTO */
    int causal;        /* 1 */
    int normalize;     /* 1 */
    float eps;         /* 1e-6f */
    float scale;       /* 1.0f */
    int64_t chunk;     /* 0 = library's choice */
    int num_threads;   /* 0 = library default (fewer for small calls), 1 = calling thread only */
    linattn_strides q, k, v, o, g; /* init: contiguous [B][H][T][D] ([B][H][T][dk] for g) */
    /* Appended in 0.2.0; a caller built against 0.1 (smaller struct_size)
     * gets the defaults. */
    int64_t qk_heads;          /* 0 = heads; else q and k have qk_heads heads (divides heads) */
    linattn_head_map head_map; /* GROUPED */
    int qk_l2norm;             /* 0; 1: q and k scaled to unit L2 norm after phi */
    linattn_strides beta;      /* delta rule only; init: contiguous [B][H][T] */
    /* 0; 1: z is [B][H][2][dk], the normaliser and the rounding error its
     * float sum has not absorbed (zero it with z), carried across calls so
     * that a long run of linattn_step calls keeps z accurate. */
    int z_compensated;
    /* Appended in 0.4.0, read by linattn_run only (the four calls above
     * take float32 and refuse other values here). */
    linattn_dtypes dtype;       /* every tensor LINATTN_F32 */
    linattn_gate_act gate_act;  /* NONE: g holds log-decays */
    float gate_lower_bound;     /* BOUNDED_SIGMOID's bound, finite and < 0 */
    linattn_beta_act beta_act;  /* NONE: beta holds the values in [0, 2] */
} linattn_config;

/* Defaults as commented above; all strides contiguous. */
LINATTN_API void linattn_config_init(linattn_config *cfg, int64_t batch, int64_t heads,
                                     int64_t seq_len, int64_t dk, int64_t dv);
/* Sets cfg->gate and cfg->g to the contiguous layout of that gate kind:
 * HEAD [H] (batch stride 0), TOKEN [B][H][T], CHANNEL [B][H][T][dk].
 * Call it after linattn_config_init and before changing g strides. */
LINATTN_API void linattn_config_set_gate(linattn_config *cfg, linattn_gate gate);
/* A config for linattn_step / linattn_delta_step on per-token buffers:
 * q, k [B][H][dk], v, o [B][H][dv] contiguous (token strides 0), g [B][H]
 * (TOKEN) or [B][H][dk] (CHANNEL) once a gate is set, beta [B][H]. */
LINATTN_API void linattn_config_init_step(linattn_config *cfg, int64_t batch, int64_t heads,
                                          int64_t dk, int64_t dv);

/* Whole sequence. s: [B][H][dk][dv], z: [B][H][dk], contiguous, in/out: read
 * as the initial state and overwritten with the final state; NULL means a
 * zero initial state and no final state (with normalize = 1, s and z are both
 * NULL or both given; with normalize = 0, z is ignored). g: NULL unless
 * cfg->gate != NONE; its values must be finite and <= 0. */
LINATTN_API linattn_status linattn_forward(const linattn_config *cfg, const float *q,
                                           const float *k, const float *v, const float *g,
                                           float *o, float *s, float *z);

/* One decode step: one token per (b, h), addressed by the batch and head
 * strides (seq_len and token strides ignored). s required, and z when
 * normalising. Its workspace is on the stack up to dk = dv = 400; a larger
 * head allocates it once per call (linattn_plan_run never allocates). */
LINATTN_API linattn_status linattn_step(const linattn_config *cfg, const float *q,
                                        const float *k, const float *v, const float *g,
                                        float *o, float *s, float *z);

/* The delta rule (DeltaNet; Gated DeltaNet with gate TOKEN; Kimi Delta
 * Attention with gate CHANNEL), per value head, no normaliser:
 *   S = L_t S;  u_t = beta_t (v_t - S^T kh_t);  S += kh_t u_t^T;  o_t = S^T qh_t
 * beta: one value in [0, 2] per (b, h, t), addressed by cfg->beta. normalize
 * must be 0 and causal 1. s: [B][H][dk][dv] as for linattn_forward. */
LINATTN_API linattn_status linattn_delta_forward(const linattn_config *cfg, const float *q,
                                                 const float *k, const float *v,
                                                 const float *g, const float *beta, float *o,
                                                 float *s);
/* One token per (b, h) of the delta rule; s required; in place. */
LINATTN_API linattn_status linattn_delta_step(const linattn_config *cfg, const float *q,
                                              const float *k, const float *v, const float *g,
                                              const float *beta, float *o, float *s);

/* ==== 0.3.0: state pools, packed sequences, snapshots and plans. Everything
 * below goes through one operand struct and one entry point; the four calls
 * above are the same computation with one contiguous state per (b, h) and
 * the library's own threads. ==== */

/* The four computations. */
typedef enum {
    LINATTN_OP_FORWARD = 0, /* linattn_forward */
    LINATTN_OP_STEP,        /* linattn_step */
    LINATTN_OP_DELTA_FORWARD,
    LINATTN_OP_DELTA_STEP
} linattn_op;

/* Where the recurrent states live. Strides in elements of the state's
 * type (z: floats, its elements contiguous). */
typedef struct {
    int64_t slots;                  /* slots in the pool; every index is checked against it */
    int64_t slot, head, row, col;   /* s strides: slot, value head, key row i, value column j */
    int64_t z_slot, z_head;         /* z strides (normalising additive calls) */
    /* Per sequence n: read slot (NULL: n), write slot (NULL: the read
     * slot). Negative read: zero initial state; negative write: the final
     * state is not written; both: padding, nothing read or written. */
    const int32_t *read_slots, *write_slots;
    /* K snapshot slots per sequence ([N][K] int32, NULL with K = 0): the
     * state after token len_n - K + j goes to snapshot_slots[n*K + j]
     * (negative, or before the sequence's first token: skipped). */
    const int32_t *snapshot_slots;
    int64_t snapshots; /* K */
} linattn_state_pool;

typedef struct {
    size_t struct_size; /* sizeof(linattn_operands); set by linattn_operands_init */
    /* As in the calls above, each of the type cfg->dtype names (0.4.0:
     * typeless pointers; a float * still converts without a cast). */
    const void *q, *k, *v;
    const float *g;
    const void *beta;
    void *o;
    void *s; /* the state: contiguous [B][H][dk][dv] without a pool, else the pool */
    float *z;
    /* NULL (pool.slots = 0): s is [B][H][dk][dv] contiguous as in the
     * calls above. Else the pool form below. */
    const linattn_state_pool *pool;
    /* Packed sequences: NULL, or num_seqs + 1 rising offsets into the
     * token axis (batch must be 1, cu_seqlens[num_seqs] = seq_len). */
    const int64_t *cu_seqlens;
    int64_t num_seqs;
    /* Appended in 0.4.0: the gate activation's parameters (see
     * linattn_gate_act), float32, contiguous. */
    const float *A_log, *dt_bias;
} linattn_operands;

LINATTN_API void linattn_operands_init(linattn_operands *ops);

/* Any op, pool or contiguous state, packed or not, on the library's threads. */
LINATTN_API linattn_status linattn_run(linattn_op op, const linattn_config *cfg,
                                       const linattn_operands *ops);

/* Host threads: a validated call whose work units any thread may run. */
typedef struct linattn_plan linattn_plan;
/* Checks everything linattn_run checks and sizes every workspace. The plan
 * keeps pointers to the caller's buffers, not copies. */
LINATTN_API linattn_status linattn_plan_create(linattn_plan **plan, linattn_op op,
                                               const linattn_config *cfg,
                                               const linattn_operands *ops);
LINATTN_API int64_t linattn_plan_units(const linattn_plan *plan);
/* Bytes of workspace one running thread needs (64-byte aligned). */
LINATTN_API size_t linattn_plan_workspace_size(const linattn_plan *plan);
/* Runs units [first, first + count); concurrent calls on disjoint ranges,
 * each with its own workspace, are allowed. No allocation, no locks. */
LINATTN_API linattn_status linattn_plan_run(const linattn_plan *plan, int64_t first,
                                            int64_t count, void *workspace);
LINATTN_API void linattn_plan_destroy(linattn_plan *plan);

#ifdef __cplusplus
}
#endif

#endif /* LINATTN_H */
