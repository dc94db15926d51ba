/* The command line of linattn-bench. Every name is turned into an enum (a
 * bit in a mask) here; nothing after parsing compares strings. */
#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

/* Bad command line: exit status 2. */
_Noreturn static void usage_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("linattn-bench: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputs("\nTry 'linattn-bench --help'.\n", stderr);
    va_end(ap);
    exit(2);
}

static void usage(void)
{
    fputs("usage: linattn-bench [options]\n"
          "\n"
          "Measures the linattn kernels through the public API and compares each with\n"
          "the FMA peak and the memory bandwidth of one core, both measured in the same\n"
          "run. Output: a table, or one JSON object per line with --json.\n"
          "\n"
          "Without options: the active ISA (auto-dispatch, or the one LINATTN_ISA names),\n"
          "the additive family, gate none, phi elu1, normalize 1, 1 thread; the forwards\n"
          "on B=1 H=8 T=4096 dk=dv=64 (forward_chunked, forward_recurrent, noncausal),\n"
          "the step on B=1 H=32 dk=dv=128, the baselines (the scalar table's chunked\n"
          "forward and the plain-C quadratic reference), each row's \"x faster\" than the\n"
          "active ISA's chunked forward, max |chunked - recurrent|, and the time of a\n"
          "tiny call and of a call rejected at argument checking (with --threads N above\n"
          "1, also of a tiny call with a head for each of N threads: the cost of starting\n"
          "and joining the team).\n"
          "\n"
          "Selection (each takes one name, or all):\n"
          "  --isa NAME|all        ",
          stdout);
    for (int i = LINATTN_ISA_SCALAR; i < bench_isa_end(); i++)
        printf("%s, ", linattn_isa_name((linattn_isa)i));
    fputs("auto; all: every table this\n"
          "                        CPU and build can run (default: the active one)\n"
          "  --family NAME|all     additive (default), delta\n"
          "  --kernel NAME|all     forward_chunked (or chunked), forward_recurrent (or\n"
          "                        recurrent), noncausal, step, quadratic (default all)\n"
          "  --gate NAME|all       none (default), head, token, channel, strong-token,\n"
          "                        strong-channel\n"
          "  --phi NAME|all        elu1 (default), relu, identity\n"
          "  --normalize 0|1|all   the additive normaliser (default 1)\n"
          "  --shape B,H,T,dk,dv   forward shape; the step takes its B, H, dk, dv\n"
          "  --threads N           num_threads of the calls (default 1)\n"
          "  --chunk N             chunk length of the chunked kernels (0 = library's)\n"
          "  --layout NAME         forward memory layout: bhtd (default: [B][H][T][D]),\n"
          "                        bthd ([B][T][H][D], PyTorch's), packed (q, k, v in\n"
          "                        one [B][T][...] buffer, o and gates [B][T][H][...])\n"
          "  --dtype f32|bf16|f16  the type of q, k, v, beta and o (default f32); not\n"
          "                        f32: every call goes through linattn_run\n"
          "  --state f32|bf16      the type of the step's state (default f32)\n"
          "  --act on|off          on: g holds raw gate projections, computed in the call\n"
          "                        as -exp(A_log) softplus(g + dt_bias) (token and channel\n"
          "                        gates), and delta's beta holds logits (sigmoid); off\n"
          "                        (default): g and beta precomputed\n"
          "  --goals               after the table, the goal rows: each time over its\n"
          "                        float32 / precomputed twin, timed alternately in this\n"
          "                        run (see Goals below)\n"
          "\n"
          "Modes (instead of the default table):\n"
          "  --decode N            decode latency: N consecutive steps on one state,\n"
          "                        each timed: mean, p50, p99, max microseconds\n"
          "  --model L             whole-model decode: one token steps L layers' delta\n"
          "                        states in turn (linattn_delta_step, Qwen3-Next shape,\n"
          "                        gate token unless --gate; with --family additive,\n"
          "                        linattn_step on the step shape, with --phi and\n"
          "                        --normalize), B = 1 and 8 unless --shape,\n"
          "                        at 1 thread and all threads (--threads N above 1, else\n"
          "                        the CPUs online); against a read-modify-write pass over\n"
          "                        the same total bytes on the same threads, this run\n"
          "  --pool kfirst|vfirst  with --model: each layer's states in a serving pool\n"
          "                        of that layout (K-first [dk][dv] or V-first [dv][dk]\n"
          "                        per head, slot b for sequence b; an additive\n"
          "                        normaliser's z beside it), stepped through\n"
          "                        linattn_run\n"
          "  --sweep FILE.csv      tokens/s against T = 256..65536 for dk = dv = 64 and\n"
          "                        128: chunked, recurrent and quadratic (T <= 8192) of\n"
          "                        every ISA unless --isa; B = H = 1 unless --shape;\n"
          "                        with --quick T = 64..256, dk = dv = 16 and 32\n"
          "\n"
          "Output:\n"
          "  --json                one JSON object per line instead of the table\n"
          "  --quick               tiny shapes and short timings (a smoke test):\n"
          "                        forward T=256 dk=dv=16 with H=2 (delta: 4 value\n"
          "                        heads, 2 q/k heads), step H=4 dk=dv=16\n"
          "  --help                this text\n"
          "\n",
          stdout);
    /* In pieces: C11 compilers need only take string literals of 4095 bytes. */
    fputs("Families:\n"
          "  additive  linattn_forward / linattn_step, with the selected phi and\n"
          "            normaliser.\n"
          "  delta     linattn_delta_forward / linattn_delta_step on the shape of\n"
          "            Qwen3-Next's Gated DeltaNet layer: B=1, 32 value heads reading 16\n"
          "            q/k heads, T=4096, dk=dv=128; identity phi, L2-normalised q and k,\n"
          "            scale dk^-1/2, no normaliser (--phi and --normalize do not apply);\n"
          "            gates none, token, channel and the strong ones. --shape sets H\n"
          "            value heads and H/2 q/k heads (H when H is odd).\n"
          "\n"
          "Gates: g is uniform in [-1, 0]. strong-token and strong-channel are the token\n"
          "and channel gates with g = -8 for every token and channel: decay products over\n"
          "a chunk underflow, so a kernel that computes with subnormal floats shows a\n"
          "slowdown against the plain token and channel rows.\n"
          "\n",
          stdout);
    fputs("Goals (--goals; delta family, ratio = time / reference time, median and\n"
          "range of interleaved repeats, \"met\" when the median is within the goal):\n"
          "  bf16_prefill  forward_chunked with bf16 q, k, v, beta and o over float32, on\n"
          "                every ISA listed, gate token (goal <= 1.05)\n"
          "  fused_act     forward_chunked with the gate (softplus) and beta (sigmoid)\n"
          "                computed in the call over precomputed g and beta, q/k L2 norm in\n"
          "                both, gates token (Gated DeltaNet) and channel (KDA; dt_bias\n"
          "                [H][dk]) (goal <= 1.05)\n"
          "  bf16_state    linattn_run DELTA_STEP with a bf16 state over a float32 one,\n"
          "                B=8 (--shape: its B) H=32 dk=dv=128, gate token: 16 MiB of\n"
          "                float32 state, beyond L2 (goal <= 0.6); both rows also as a\n"
          "                fraction of the bound (state bytes read and written at the\n"
          "                bandwidth of an RMW pass over the float32 state's bytes)\n"
          "  The forwards take the delta shape with T=1024 (or --shape); --quick: tiny\n"
          "  shapes.\n"
          "\n",
          stdout);
    fputs("Columns (JSON keys):\n"
          "  tokens/s (tokens_per_s)  B*H*T tokens per second: every head's tokens count,\n"
          "                           so it is B*H times the sequence positions per\n"
          "                           second; for the step, B*H tokens per call\n"
          "  GFLOP/s (gflops)         useful FLOPs per second by the family's model,\n"
          "                           per token and value head (step: per (b, h)):\n"
          "                             additive 4*dk*dv, + 4*dk when normalising,\n"
          "                                      + dk*dv when gated\n"
          "                             delta    6*dk*dv (S^T k, rank-1 update, S^T q)\n"
          "                           every algorithm and the quadratic baseline are\n"
          "                           charged the same\n"
          "  (peak_gflops)            FMA peak of one core for the row's ISA (12\n"
          "                           independent vector FMAs; scalar: fmaf), times the\n"
          "                           threads used\n"
          "  frac peak (frac_peak)    gflops / peak_gflops, a fraction (1 = peak); the JSON\n"
          "                           also has pct_peak = 100 * frac_peak. Chunked kernels\n"
          "                           execute more than the useful FLOPs, so they cannot\n"
          "                           reach 1; the scalar table may exceed 1 where the\n"
          "                           compiler vectorised it\n"
          "  (peak_gflops_threads)    with threads > 1: the same FMA loop run on all the\n"
          "                           row's threads at once, their total (below threads x\n"
          "                           one core where threads share cores' FMA units or\n"
          "                           the all-core clock is lower); frac_peak_threads =\n"
          "                           gflops / peak_gflops_threads\n"
          "  thr (threads)            threads used: N for the forwards and the delta\n"
          "                           step, min(N, B*H) for the additive step and the\n"
          "                           non-causal forward, 1 for quadratic\n"
          "  x faster (x_faster)      times faster than forward_chunked of the first ISA\n"
          "                           listed (the active one): the row's tokens/s over\n"
          "                           that one's, same case (0.07x: 14x slower)\n"
          "  GB/s (gbps)              step: one read and one write of the state (S, and z\n"
          "                           when normalising) per call\n"
          "  frac bound (frac_bound)  gbps / bound_gbps, the bandwidth of a read-modify-\n"
          "                           write pass over a buffer the size of the step state\n"
          "                           on one core; pct_bound = 100 * frac_bound\n"
          "  us/token (us_per_token)  step: microseconds per call\n"
          "JSON only: family, phi, normalize, qk_l2norm, qk_heads, layout (forwards),\n"
          "dtype, state, act (the --dtype, --state and --act of the call),\n"
          "goal rows (kernel \"goal\"): case, ratio, ratio_min, ratio_max, repeats,\n"
          "goal, met, seconds, seconds_ref,\n"
          "chunk, seconds (per call; quadratic: per head), baseline,\n"
          "max_abs_diff_chunked, and for --decode mode, tokens, us_p50, us_p99, us_max;\n"
          "--model mode: layers, us_per_layer (us_per_token: all layers),\n"
          "bound_two_pass_gbps (a read-only pass and then a read-modify-write pass\n"
          "per head's block of state, over the same bytes and threads: a K-first\n"
          "step's access pattern without its arithmetic), frac_two_pass, pool\n"
          "(--pool: kfirst or vfirst);\n"
          "overhead rows: case (tiny_forward, rejected_null_q, tiny_forward_team),\n"
          "ns_per_call.\n"
          "\n"
          "Exit status: 0 ok, 1 a run-time failure, 2 a bad command line or an ISA that\n"
          "cannot run here.\n",
          stdout);
}

static int64_t parse_int(const char *opt, const char *s, int64_t lo, int64_t hi)
{
    char *end;
    errno = 0;
    const long long x = strtoll(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0' || x < lo || x > hi)
        usage_error("%s: '%s' is not an integer in [%lld, %lld]", opt, s, (long long)lo,
                    (long long)hi);
    return x;
}

static bench_shape parse_shape(const char *s)
{
    int64_t v[5];
    const char *p = s;
    for (int i = 0; i < 5; i++) {
        char item[32];
        const size_t len = strcspn(p, ",");
        if (len == 0 || len >= sizeof item || (i < 4) != (p[len] == ','))
            usage_error("--shape: '%s' is not B,H,T,dk,dv", s);
        memcpy(item, p, len);
        item[len] = '\0';
        v[i] = parse_int("--shape", item, 1, 1 << 24);
        p += len + 1;
    }
    return (bench_shape){v[0], v[1], v[2], v[3], v[4], 0};
}

/* `s` among names[0..n-1] or "all" (every bit of `all`); a bit mask. */
static unsigned parse_name(const char *opt, const char *s, const char *const *names, int n,
                           unsigned all)
{
    if (strcmp(s, "all") == 0)
        return all;
    for (int i = 0; i < n; i++)
        if (strcmp(s, names[i]) == 0)
            return 1u << i;
    char list[256] = "";
    for (int i = 0; i < n; i++) {
        strncat(list, names[i], sizeof list - strlen(list) - 1);
        strncat(list, ", ", sizeof list - strlen(list) - 1);
    }
    usage_error("%s: unknown value '%s' (%sall)", opt, s, list);
}

static linattn_isa parse_isa(const char *s)
{
    for (int i = LINATTN_ISA_AUTO; i < bench_isa_end(); i++)
        if (strcmp(s, linattn_isa_name((linattn_isa)i)) == 0)
            return (linattn_isa)i;
    usage_error("--isa: unknown ISA '%s'", s);
}

static unsigned parse_kernel(const char *s)
{
    if (strcmp(s, "chunked") == 0)
        return 1u << K_CHUNKED;
    if (strcmp(s, "recurrent") == 0)
        return 1u << K_RECURRENT;
    return parse_name("--kernel", s, bench_kernel_names, K_COUNT, (1u << K_COUNT) - 1);
}

static unsigned parse_normalize(const char *s)
{
    static const char *const names[] = {"0", "1"};
    return parse_name("--normalize", s, names, 2, 3u);
}

enum {
    OPT_JSON = 256,
    OPT_QUICK,
    OPT_ISA,
    OPT_FAMILY,
    OPT_THREADS,
    OPT_SHAPE,
    OPT_KERNEL,
    OPT_GATE,
    OPT_PHI,
    OPT_NORMALIZE,
    OPT_CHUNK,
    OPT_LAYOUT,
    OPT_SWEEP,
    OPT_DECODE,
    OPT_MODEL,
    OPT_POOL,
    OPT_DTYPE,
    OPT_STATE,
    OPT_ACT,
    OPT_GOALS,
};

/* One of the first n dtype names (the state takes f32 and bf16 only). */
static linattn_dtype parse_dtype(const char *opt, const char *s, int n)
{
    const unsigned m = parse_name(opt, s, bench_dtype_names, n, 0);
    if (m == 0)
        usage_error("%s takes one type, not all", opt);
    return (linattn_dtype)__builtin_ctz(m);
}

bench_options bench_parse_args(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"help", no_argument, NULL, 'h'},
        {"json", no_argument, NULL, OPT_JSON},
        {"quick", no_argument, NULL, OPT_QUICK},
        {"isa", required_argument, NULL, OPT_ISA},
        {"family", required_argument, NULL, OPT_FAMILY},
        {"threads", required_argument, NULL, OPT_THREADS},
        {"shape", required_argument, NULL, OPT_SHAPE},
        {"kernel", required_argument, NULL, OPT_KERNEL},
        {"gate", required_argument, NULL, OPT_GATE},
        {"phi", required_argument, NULL, OPT_PHI},
        {"normalize", required_argument, NULL, OPT_NORMALIZE},
        {"chunk", required_argument, NULL, OPT_CHUNK},
        {"layout", required_argument, NULL, OPT_LAYOUT},
        {"sweep", required_argument, NULL, OPT_SWEEP},
        {"decode", required_argument, NULL, OPT_DECODE},
        {"model", required_argument, NULL, OPT_MODEL},
        {"pool", required_argument, NULL, OPT_POOL},
        {"dtype", required_argument, NULL, OPT_DTYPE},
        {"state", required_argument, NULL, OPT_STATE},
        {"act", required_argument, NULL, OPT_ACT},
        {"goals", no_argument, NULL, OPT_GOALS},
        {NULL, 0, NULL, 0},
    };
    bench_options op = {
        .threads = 1,
        .families = 1u << FAM_ADDITIVE,
        .kernels = (1u << K_COUNT) - 1,
        .gates = 1u << G_NONE,
        .phis = 1u << LINATTN_PHI_ELU1,
        .normalizes = 1u << 1,
        .min_time = 0.2,
    };
    opterr = 0; /* the messages below name the option and exit with 2 */
    for (;;) {
        const int c = getopt_long(argc, argv, ":h", longopts, NULL);
        if (c == -1)
            break;
        const char *val = optarg;
        switch (c) {
        case 'h': usage(); exit(0);
        case OPT_JSON: op.json = 1; break;
        case OPT_QUICK: op.quick = 1; break;
        case OPT_ISA:
            op.isa_given = 1;
            op.isa_all = strcmp(val, "all") == 0;
            if (!op.isa_all)
                op.isa = parse_isa(val);
            break;
        case OPT_FAMILY:
            op.families_given = 1;
            op.families = parse_name("--family", val, bench_family_names, FAM_COUNT,
                                     (1u << FAM_COUNT) - 1);
            break;
        case OPT_THREADS: op.threads = (int)parse_int("--threads", val, 1, 1024); break;
        case OPT_SHAPE:
            op.shape_given = 1;
            op.shape = parse_shape(val);
            break;
        case OPT_KERNEL:
            op.kernels_given = 1;
            op.kernels = parse_kernel(val);
            break;
        case OPT_GATE:
            op.gates_given = 1;
            op.gates = parse_name("--gate", val, bench_gate_names, G_COUNT, (1u << G_COUNT) - 1);
            break;
        case OPT_PHI:
            op.phis = parse_name("--phi", val, bench_phi_names, PHI_COUNT, (1u << PHI_COUNT) - 1);
            break;
        case OPT_NORMALIZE: op.normalizes = parse_normalize(val); break;
        case OPT_CHUNK: op.chunk = parse_int("--chunk", val, 0, 1 << 24); break;
        case OPT_LAYOUT: {
            const unsigned m = parse_name("--layout", val, bench_layout_names, L_COUNT, 0);
            if (m == 0 || (m & (m - 1)))
                usage_error("--layout takes one of bhtd, bthd, packed");
            op.layout = (bench_layout)__builtin_ctz(m);
            break;
        }
        case OPT_SWEEP: op.sweep = val; break;
        case OPT_DECODE: op.decode = parse_int("--decode", val, 1, 100000000); break;
        case OPT_MODEL: op.model = parse_int("--model", val, 1, 4096); break;
        case OPT_POOL:
            if (strcmp(val, "kfirst") == 0)
                op.pool = POOL_KFIRST;
            else if (strcmp(val, "vfirst") == 0)
                op.pool = POOL_VFIRST;
            else
                usage_error("--pool takes kfirst or vfirst, not '%s'", val);
            break;
        case OPT_DTYPE: op.dtype = parse_dtype("--dtype", val, 3); break;
        case OPT_STATE: op.state = parse_dtype("--state", val, 2); break;
        case OPT_ACT: {
            static const char *const onoff[] = {"off", "on"};
            const unsigned m = parse_name("--act", val, onoff, 2, 0);
            if (m == 0)
                usage_error("--act takes on or off");
            op.act = m == 2u;
            break;
        }
        case OPT_GOALS: op.goals = 1; break;
        case ':': usage_error("%s needs a value", argv[optind - 1]);
        default: usage_error("unknown option '%s'", argv[optind - 1]);
        }
    }
    if (optind < argc)
        usage_error("unexpected argument '%s'", argv[optind]);
    if ((op.sweep != NULL) + (op.decode != 0) + (op.model != 0) > 1)
        usage_error("--sweep, --decode and --model are separate runs");
    if (op.pool != POOL_NONE && !op.model)
        usage_error("--pool goes with --model");
    /* --model runs the delta rule unless --family says otherwise */
    if (op.model && !op.families_given)
        op.families = 1u << FAM_DELTA;
    if (op.goals && (op.sweep || op.decode || op.model))
        usage_error("--goals follows the default table, not --sweep, --decode or --model");
    if (op.quick)
        op.min_time = 0.01;
    bench_options run = op;
    if (op.decode || op.model)
        run.kernels = 1u << K_STEP;
    int cases = 0;
    for (int f = 0; f < FAM_COUNT; f++) {
        bench_case cs[G_COUNT * PHI_COUNT * 2];
        if (run.families & (1u << f))
            cases += bench_cases(&run, (bench_family)f, op.sweep != NULL, cs,
                                 (int)(sizeof cs / sizeof *cs));
    }
    if (cases == 0)
        usage_error("no case to run: the selected families have none of the selected "
                    "kernels with the selected gates (noncausal and quadratic run with "
                    "gate none only; delta has no noncausal, quadratic or head gate)");
    return op;
}
