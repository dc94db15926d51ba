/* Private to linattn-bench: the types and functions its source files share.
 *
 *   options.c      the command line (getopt_long) and --help
 *   cases.c        the case table (family x gate x phi x normalize x kernel),
 *                  configs, buffers and the one place that calls the library
 *   measure.c      timing, the FLOP models, peak and bandwidth bound
 *   report.c       the JSON writer, the table, the sweep CSV
 *   peak.c         the per-ISA FMA and read-modify-write loops
 *   quadratic.c    the O(T^2) baseline
 *   linattn-bench.c  the modes: default table, --decode, --sweep
 *   model.c        the --model mode: whole-model decode against an RMW bound
 *   goals.c        --goals: the input stage's goal ratios (16-bit inputs, fused
 *                  activations, a bfloat16 state), each against its float32 /
 *                  precomputed twin timed in the same run */
#ifndef LINATTN_BENCH_H
#define LINATTN_BENCH_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <linattn.h>

/* ---- vocabulary: every name is parsed once into one of these ---------- */

typedef enum { FAM_ADDITIVE, FAM_DELTA, FAM_COUNT } bench_family;

typedef enum {
    K_CHUNKED,   /* causal forward, ALGO_CHUNKED */
    K_RECURRENT, /* causal forward, ALGO_RECURRENT */
    K_NONCAUSAL, /* additive, gate none */
    K_STEP,      /* one token per (b, h) on a carried state */
    K_QUADRATIC, /* the plain-C O(T^2) baseline: additive, gate none */
    K_COUNT
} bench_kernel;

/* The library's gates plus two strong-decay variants: the same layouts as
 * TOKEN and CHANNEL with g = -8 everywhere, so chunk-long decay products
 * underflow and any subnormal arithmetic in a kernel shows as a slowdown. */
typedef enum {
    G_NONE,
    G_HEAD,
    G_TOKEN,
    G_CHANNEL,
    G_STRONG_TOKEN,
    G_STRONG_CHANNEL,
    G_COUNT
} bench_gate;

enum { PHI_COUNT = LINATTN_PHI_IDENTITY + 1 };

/* Memory layouts of the forward inputs and outputs: [B][H][T][D] (the
 * library's default strides), [B][T][H][D] (PyTorch's and fla's), and q, k,
 * v packed in one [B][T][qk heads*dk + qk heads*dk + H*dv] projection
 * output (o, g and beta then [B][T][H][...]). */
typedef enum { L_BHTD, L_BTHD, L_PACKED, L_COUNT } bench_layout;

#define BENCH_STRONG_G (-8.0f)

extern const char *const bench_family_names[FAM_COUNT];
extern const char *const bench_kernel_names[K_COUNT]; /* as in the JSON */
extern const char *const bench_gate_names[G_COUNT];
extern const char *const bench_phi_names[PHI_COUNT];
extern const char *const bench_layout_names[L_COUNT];
linattn_gate bench_library_gate(bench_gate g);

/* ---- options ---------------------------------------------------------- */

typedef struct {
    int64_t B, H, T, dk, dv;
    int64_t qk_heads; /* 0: q and k have H heads */
} bench_shape;

typedef struct {
    int json, quick;
    int isa_given, isa_all;
    linattn_isa isa;
    int threads;
    int shape_given;
    bench_shape shape; /* --shape */
    int kernels_given, families_given;
    /* Bit masks: bit i selects value i of the enum (or normalize i). */
    unsigned families, kernels, gates, phis, normalizes;
    int64_t chunk;
    bench_layout layout;
    const char *sweep;
    int64_t decode;
    int64_t model; /* --model L: layers */
    /* --pool: the model's states as a serving pool per layer (slot b for
     * sequence b) in this layout, through linattn_run; POOL_NONE: the
     * contiguous step */
    enum { POOL_NONE, POOL_KFIRST, POOL_VFIRST } pool;
    int gates_given;
    double min_time; /* seconds of timed calls per case */
    /* --dtype: q, k, v, beta and o; --state: the step's state; --act: the
     * gate and beta activations fused into the call (linattn_run) */
    linattn_dtype dtype, state;
    int act;
    int goals; /* --goals: the goal section after the table */
} bench_options;

bench_options bench_parse_args(int argc, char **argv);
/* One past the last ISA the library names: ISAs are LINATTN_ISA_SCALAR up to
 * this, so a new table shows up here without a change to the tool. */
int bench_isa_end(void);

/* ---- cases ------------------------------------------------------------ */

/* One row group of the case table: a family with its gate, phi and
 * normaliser, and the kernels to run with them (bits of bench_kernel). */
typedef struct {
    bench_family family;
    bench_gate gate;
    linattn_phi phi;
    int normalize;
    int qk_l2norm;
    unsigned kernels;
} bench_case;

/* The cases of `family` the options select, at most `max`; returns how
 * many. `sweep`: only chunked, recurrent and quadratic. */
int bench_cases(const bench_options *op, bench_family family, int sweep, bench_case *out,
                int max);
/* The forward and step shapes of a family under the options. */
bench_shape bench_forward_shape(const bench_options *op, bench_family family);
bench_shape bench_step_shape(const bench_options *op, bench_family family);
/* A shape of the family (the delta family reads H/2 q/k heads, H if odd). */
bench_shape bench_make_shape(bench_family f, int64_t B, int64_t H, int64_t T, int64_t dk,
                             int64_t dv);

/* Inputs and outputs of one shape: q, k [B][qk heads][T][dk], v and the
 * two outputs [B][H][T][dv], g and g_strong [B][H][T][dk] (large enough
 * for every gate), beta [B][H][T]; s, z the state [B][H][dk][dv], [B][H][dk]
 * (for the step). */
typedef struct {
    bench_shape sh;
    float *qkv; /* L_PACKED: the one buffer q, k and v point into */
    float *q, *k, *v, *g, *g_strong, *beta, *o[2], *s, *z;
    /* --dtype bf16/f16: the same values in that type (q16..beta16 point into
     * qkv16 as q..beta into qkv), the outputs in that type; --state bf16:
     * the state. NULL when not asked. */
    linattn_dtype dt;
    void *qkv16, *q16, *k16, *v16, *beta16, *o16[2];
    uint16_t *s16;
    /* the gate activation's parameters: A_log [H], dt_bias [H][dk] (the
     * raw projections and beta logits are g and beta themselves) */
    float *A_log, *dt_bias;
    /* a step's state as a pool (s or s16 its base), or NULL */
    const linattn_state_pool *pool;
} bench_data;

/* The buffers of shape s in the options' layout (the sizes do not depend
 * on it; L_PACKED puts q, k and v in one buffer), with 16-bit copies when
 * op->dtype or op->state asks for them. */
bench_data bench_data_alloc(const bench_options *op, bench_shape s, int with_state);
void bench_data_free(bench_data *d);

linattn_config bench_config(const bench_options *op, const bench_case *c, bench_kernel k,
                            bench_shape s);
float bench_scale(const bench_case *c, bench_shape s);
/* One call of kernel k of the case on d, output into o (d->o[i]; a 16-bit
 * output into d->o16[i]); dies on an error. A config with 16-bit types, a
 * bfloat16 state or activations goes through linattn_run, the float32 one
 * through the call the family names. */
void bench_call(const bench_case *c, bench_kernel k, const linattn_config *cfg,
                const bench_data *d, float *o);
/* Output i of d as floats (a 16-bit output widened into d->o[i]). */
const float *bench_output(const bench_data *d, int i, int64_t n);
extern const char *const bench_dtype_names[3]; /* "f32", "bf16", "f16" */
/* Bytes of the state a step reads and writes (S in op->state, z float32). */
int64_t bench_state_bytes(const bench_options *op, bench_family f, bench_shape s,
                          int normalize);

/* ---- measurement ------------------------------------------------------ */

double bench_now(void);
typedef void (*bench_fn)(void *ctx);
/* Seconds per call of f(ctx), best of several samples (measure.c). */
double bench_time_call(bench_fn f, void *ctx, double min_time);
/* FMA peak of one core for isa, GFLOP/s, measured once per run. */
double bench_peak(const bench_options *op, linattn_isa isa);
/* The same loop on nt threads at once, their total GFLOP/s, measured once
 * per (isa, nt): below nt times bench_peak where threads share a core's FMA
 * units (SMT siblings, a VM's vCPUs) or run at a lower all-core clock. */
double bench_peak_threads(const bench_options *op, linattn_isa isa, int nt);
/* Read-modify-write bandwidth of one core over n floats, GB/s. */
double bench_bound(const bench_options *op, linattn_isa isa, int64_t n);
/* The FLOP models of every family (measure.c says what they count). */
double bench_flops_per_token(bench_family f, bench_shape s, bench_gate g, int normalize);
/* Floats of the state a step reads and writes. */
int64_t bench_state_floats(bench_family f, bench_shape s, int normalize);
/* Threads a kernel keeps busy with num_threads = threads. */
int bench_threads_used(bench_family f, bench_kernel k, bench_shape s, int normalize, int threads);

/* One row of output. Fields that do not apply are NAN (numbers) or NULL. */
typedef struct {
    const char *kernel, *isa, *mode, *what, *layout;
    bench_family family;
    bench_gate gate;
    linattn_phi phi;
    int normalize, qk_l2norm;
    bench_shape sh;
    int threads, baseline;
    int64_t chunk, tokens, layers;
    double sec; /* per call (quadratic: per head) */
    double tokens_per_s, gflops, peak, frac_peak;
    double peak_threads, frac_peak_threads; /* threads > 1: against bench_peak_threads */
    double gbps, bound, frac_bound, us_per_token;
    double speedup, maxdiff, maxref;
    double ns_per_call, us_p50, us_p99, us_max, us_per_layer;
    /* --model: the two-pass pattern's GB/s (tools/model.c) and gbps over it */
    double bound_two_pass, frac_two_pass;
    const char *dtype, *state, *act; /* the types and activations of the call */
    const char *pool; /* --model --pool: kfirst or vfirst */
    /* goal rows (--goals): seconds over the reference's, median and range
     * of the repeats, the goal it is held to, the reference's seconds */
    double ratio, ratio_min, ratio_max, goal, sec_ref;
    int repeats;
} bench_result;

bench_result bench_new_result(const bench_options *op, const bench_case *c, bench_kernel k,
                              linattn_isa isa, bench_shape s);
/* tokens_per_s, gflops and the peak columns for `tokens` tokens in `sec`
 * seconds on isa (the peak of the threads the row used). */
void bench_set_rates(const bench_options *op, bench_result *r, linattn_isa isa,
                     double tokens, double sec);
/* us_per_token, GB/s and the bound columns of a step taking `sec`. */
void bench_set_step_rates(const bench_options *op, bench_result *r, linattn_isa isa,
                          double sec);

/* ---- report ----------------------------------------------------------- */

void bench_json(const bench_result *r);
void bench_table_legend(const bench_options *op);
void bench_table_header(const bench_options *op);
void bench_table_row(const bench_result *r);
void bench_family_heading(const bench_options *op, bench_family f, bench_shape fwd,
                          bench_shape stp);
/* Row through the JSON writer or the table, as the options say. */
void bench_print(const bench_options *op, const bench_result *r);
/* "peak, 1 core, this run (...): ..." and the bound over `floats` (0: none). */
void bench_peaks_text(const bench_options *op, const linattn_isa *isas, int n);
void bench_bound_text(const bench_options *op, const linattn_isa *isas, int n, int64_t floats);
void bench_decode_header(void);
void bench_decode_row(const bench_result *r);
void bench_csv_header(FILE *f);
void bench_csv_row(FILE *f, const bench_result *r);
const char *bench_si(char *buf, size_t len, double x);

/* ---- helpers (measure.c) ---------------------------------------------- */

_Noreturn void bench_die(const char *fmt, ...);
float *bench_alloc(int64_t n);
/* Uniform in [lo, hi], deterministic. */
void bench_fill(float *x, int64_t n, float lo, float hi, unsigned seed);
void bench_use_isa(linattn_isa isa);

/* ---- peak.c: the per-ISA measuring loops ------------------------------ */

/* Floating-point operations of one iteration of bench_fma_loop(isa). */
double bench_fma_flops_per_iter(linattn_isa isa);
/* Runs `iters` iterations of the register-blocked FMA loop of isa; returns
 * a value derived from every result so the work cannot be dropped. */
float bench_fma_loop(linattn_isa isa, int64_t iters);
/* One read-modify-write pass s[i] = s[i] * a + b over n floats with the
 * vector width of isa. */
void bench_rmw_pass(linattn_isa isa, float *s, size_t n);
/* The sum of s[0..n) with the ISA's vectors, four sums apart (a read-only
 * pass that does not wait on its adds). */
float bench_read_pass(linattn_isa isa, const float *s, size_t n);
/* What the loops of isa are, for the report ("12 x zmm vfmadd", ...). */
const char *bench_peak_desc(linattn_isa isa);

/* ---- model.c ---------------------------------------------------------- */

/* --model L: one token through L layers' delta steps, each on its own
 * state, at 1 thread and all threads, B = 1 and 8 (or --shape's B). */
void bench_run_model(const bench_options *op, linattn_isa isa);

/* ---- goals.c ---------------------------------------------------------- */

/* The goal rows of the isas listed (see goals.c). */
void bench_run_goals(const bench_options *op, const linattn_isa *isas, int n);

/* ---- quadratic.c ------------------------------------------------------ */

/* The O(T^2) masked-attention reference of one (b, h), gate NONE, causal,
 * contiguous [T][d] rows: o_t = sum_{j<=t} (qh_t . kh_j) v_j, divided by
 * (sum_{j<=t} qh_t . kh_j + eps) when normalising. `work` holds
 * T*dk + dk + T floats. */
void bench_quadratic_head(int64_t T, int64_t dk, int64_t dv, linattn_phi phi, float scale,
                          int normalize, float eps, const float *q, const float *k,
                          const float *v, float *o, float *work);

#endif /* LINATTN_BENCH_H */
