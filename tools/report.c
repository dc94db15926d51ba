/* Output of linattn-bench: the one JSON writer (one object per line), the
 * readable tables and the sweep CSV. Every writer takes a bench_result, so a
 * column means the same thing in all of them. */
#include <math.h>
#include <stdio.h>

#include "bench.h"

/* ---- JSON ---------------------------------------------------------------- */

static void json_num(const char *key, double x)
{
    if (isfinite(x))
        printf(",\"%s\":%.6g", key, x);
    else if (!isnan(x))
        printf(",\"%s\":null", key);
}

static void json_str(const char *key, const char *s)
{
    if (s != NULL) /* names are fixed identifiers: nothing to escape */
        printf(",\"%s\":\"%s\"", key, s);
}

static void json_int(const char *key, int64_t x)
{
    if (x >= 0)
        printf(",\"%s\":%lld", key, (long long)x);
}

void bench_json(const bench_result *r)
{
    const bench_shape s = r->sh;
    printf("{\"kernel\":\"%s\"", r->kernel);
    json_str("mode", r->mode);
    json_str("case", r->what);
    json_str("family", bench_family_names[r->family]);
    json_str("isa", r->isa);
    json_str("tuning", linattn_tuning_name()); /* the machine's tuning entries */
    json_str("gate", bench_gate_names[r->gate]);
    json_str("phi", bench_phi_names[r->phi]);
    json_int("normalize", r->normalize);
    json_int("qk_l2norm", r->qk_l2norm);
    json_int("B", s.B);
    json_int("H", s.H);
    json_int("qk_heads", s.qk_heads ? s.qk_heads : s.H);
    json_int("T", s.T);
    json_int("dk", s.dk);
    json_int("dv", s.dv);
    json_str("layout", r->layout);
    json_str("dtype", r->dtype);
    json_str("state", r->state);
    json_str("act", r->act);
    json_str("pool", r->pool);
    json_int("threads", r->threads);
    json_int("chunk", r->chunk);
    json_int("tokens", r->tokens);
    json_int("layers", r->layers);
    if (r->baseline)
        printf(",\"baseline\":true");
    json_num("seconds", r->sec);
    json_num("tokens_per_s", r->tokens_per_s);
    json_num("gflops", r->gflops);
    json_num("peak_gflops", r->peak);
    json_num("frac_peak", r->frac_peak);
    json_num("pct_peak", 100 * r->frac_peak);
    json_num("peak_gflops_threads", r->peak_threads);
    json_num("frac_peak_threads", r->frac_peak_threads);
    json_num("gbps", r->gbps);
    json_num("bound_gbps", r->bound);
    json_num("frac_bound", r->frac_bound);
    json_num("pct_bound", 100 * r->frac_bound);
    json_num("us_per_token", r->us_per_token);
    json_num("us_per_layer", r->us_per_layer);
    json_num("bound_two_pass_gbps", r->bound_two_pass);
    json_num("frac_two_pass", r->frac_two_pass);
    json_num("us_p50", r->us_p50);
    json_num("us_p99", r->us_p99);
    json_num("us_max", r->us_max);
    json_num("ns_per_call", r->ns_per_call);
    json_num("x_faster", r->speedup);
    json_num("max_abs_diff_chunked", r->maxdiff);
    json_num("seconds_ref", r->sec_ref);
    json_num("ratio", r->ratio);
    json_num("ratio_min", r->ratio_min);
    json_num("ratio_max", r->ratio_max);
    if (r->repeats > 0)
        printf(",\"repeats\":%d", r->repeats);
    json_num("goal", r->goal);
    if (!isnan(r->goal) && !isnan(r->ratio))
        printf(",\"met\":%s", r->ratio <= r->goal ? "true" : "false");
    printf("}\n");
}

/* ---- tables -------------------------------------------------------------- */

/* "12.3 M": tokens/s at a glance. */
const char *bench_si(char *buf, size_t len, double x)
{
    static const char *const unit[] = {"", "K", "M", "G", "T"};
    int u = 0;
    while (fabs(x) >= 999.5 && u < 4) { /* 999.5 and up print as 1e+03 */
        x /= 1000;
        u++;
    }
    snprintf(buf, len, "%.3g %s", x, unit[u]);
    return buf;
}

void bench_table_legend(const bench_options *op)
{
    if (op->json)
        return;
    puts("tokens/s: B*H*T tokens per second, each head's tokens counted (step: B*H per call)\n"
         "GFLOP/s: useful FLOPs of the family's model (--help); frac peak: GFLOP/s over the\n"
         "FMA peak of the threads used; frac bound: step GB/s over the read-modify-write\n"
         "bound; x faster: how many times faster this row is than forward_chunked of the first\n"
         "ISA listed (the row's tokens/s over that one's, same case: above 1 = faster)\n");
}

void bench_table_header(const bench_options *op)
{
    if (op->json)
        return;
    printf("%-17s %-6s %-14s %-8s %4s %3s %3s %6s %4s %4s %3s %10s %8s %9s %8s %7s %10s %8s\n",
           "kernel", "isa", "gate", "phi", "norm", "B", "H", "T", "dk", "dv", "thr", "tokens/s",
           "GFLOP/s", "frac peak", "x faster", "GB/s", "frac bound", "us/token");
}

void bench_table_row(const bench_result *r)
{
    char tok[32], sp[16] = "-", gb[16] = "-", fb[16] = "-", us[16] = "-";
    if (!isnan(r->speedup))
        snprintf(sp, sizeof sp, "%.2fx", r->speedup);
    if (!isnan(r->gbps)) {
        snprintf(gb, sizeof gb, "%.1f", r->gbps);
        snprintf(fb, sizeof fb, "%.2f", r->frac_bound);
        snprintf(us, sizeof us, "%.2f", r->us_per_token);
    }
    printf("%-17s %-6s %-14s %-8s %4d %3lld %3lld %6lld %4lld %4lld %3d %10s %8.2f %9.3f %8s "
           "%7s %10s %8s%s\n",
           r->kernel, r->isa, bench_gate_names[r->gate], bench_phi_names[r->phi], r->normalize,
           (long long)r->sh.B, (long long)r->sh.H, (long long)r->sh.T, (long long)r->sh.dk,
           (long long)r->sh.dv, r->threads, bench_si(tok, sizeof tok, r->tokens_per_s),
           r->gflops, r->frac_peak, sp, gb, fb, us, r->baseline ? "  baseline" : "");
}

void bench_family_heading(const bench_options *op, bench_family f, bench_shape fwd,
                          bench_shape stp)
{
    if (op->json)
        return;
    printf("%s family (%s), forward B=%lld H=%lld T=%lld dk=%lld dv=%lld, step B=%lld "
           "H=%lld dk=%lld dv=%lld",
           bench_family_names[f],
           f == FAM_DELTA ? "linattn_delta_forward, linattn_delta_step"
                          : "linattn_forward, linattn_step",
           (long long)fwd.B, (long long)fwd.H, (long long)fwd.T, (long long)fwd.dk,
           (long long)fwd.dv, (long long)stp.B, (long long)stp.H, (long long)stp.dk,
           (long long)stp.dv);
    if (fwd.qk_heads)
        printf(", %lld q/k heads", (long long)fwd.qk_heads);
    printf("\n");
}

void bench_print(const bench_options *op, const bench_result *r)
{
    if (op->json)
        bench_json(r);
    else
        bench_table_row(r);
    fflush(stdout);
}

void bench_decode_header(void)
{
    printf("%-8s %-6s %-14s %-8s %4s %10s %9s %9s %9s %10s %7s %10s\n", "family", "isa", "gate",
           "phi", "norm", "us/token", "p50", "p99", "max", "tokens/s", "GB/s", "frac bound");
}

void bench_decode_row(const bench_result *r)
{
    char tok[32];
    printf("%-8s %-6s %-14s %-8s %4d %10.2f %9.2f %9.2f %9.2f %10s %7.1f %10.2f\n",
           bench_family_names[r->family], r->isa, bench_gate_names[r->gate],
           bench_phi_names[r->phi], r->normalize, r->us_per_token, r->us_p50, r->us_p99,
           r->us_max, bench_si(tok, sizeof tok, r->tokens_per_s), r->gbps, r->frac_bound);
    fflush(stdout);
}

/* ---- the sweep CSV ------------------------------------------------------- */

void bench_csv_header(FILE *f)
{
    fprintf(f, "kernel,isa,gate,B,H,T,dk,dv,threads,seconds,tokens_per_s,gflops,peak_gflops,"
               "pct_peak,frac_peak,family,phi,normalize\n");
}

void bench_csv_row(FILE *f, const bench_result *r)
{
    const bench_shape s = r->sh;
    fprintf(f, "%s,%s,%s,%lld,%lld,%lld,%lld,%lld,%d,%.6g,%.6g,%.6g,%.6g,%.6g,%.6g,%s,%s,%d\n",
            r->kernel, r->isa, bench_gate_names[r->gate], (long long)s.B, (long long)s.H,
            (long long)s.T, (long long)s.dk, (long long)s.dv, r->threads, r->sec,
            r->tokens_per_s, r->gflops, r->peak, 100 * r->frac_peak, r->frac_peak,
            bench_family_names[r->family], bench_phi_names[r->phi], r->normalize);
}

/* ---- what the rows are compared with ---------------------------------- */

void bench_peaks_text(const bench_options *op, const linattn_isa *isas, int n)
{
    for (int i = 0; i < n; i++)
        bench_peak(op, isas[i]); /* measured before any row, JSON or not */
    if (op->json)
        return;
    printf("peak, 1 core, this run (before the first row; rows divide by the highest recheck):");
    for (int i = 0; i < n; i++)
        printf("  %s %.1f GFLOP/s (%s)", linattn_isa_name(isas[i]), bench_peak(op, isas[i]),
               bench_peak_desc(isas[i]));
    printf("\n");
}

void bench_bound_text(const bench_options *op, const linattn_isa *isas, int n, int64_t floats)
{
    for (int i = 0; i < n; i++)
        bench_bound(op, isas[i], floats);
    if (op->json)
        return;
    const double kib = (double)floats * sizeof(float) / 1024;
    printf("bound, 1 core, RMW s = s*a + b over %.4g %s (a step state):",
           kib >= 1024 ? kib / 1024 : kib, kib >= 1024 ? "MiB" : "KiB");
    for (int i = 0; i < n; i++)
        printf("  %s %.1f GB/s", linattn_isa_name(isas[i]), bench_bound(op, isas[i], floats));
    printf("\n");
}
