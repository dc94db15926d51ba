/* The portable table: every family, plain C, no -m flags. It is the
 * fallback for any family a SIMD table does not provide. */
#include "../table.h"

extern const la_additive_ops la_additive_scalar;
extern const la_delta_ops la_delta_scalar;
extern const la_stage_ops la_stage_scalar;

/* One entry, for every CPU. Measured on Zen 4 (x86-64 baseline build, B=1,
 * H=8, dk = dv, T = 4096; 2048 at 256; two days' runs): the recurrent form
 * is faster at dk = 64 (1.02-1.15x none, 1.16-1.3x token, 1.5-1.6x channel)
 * and with a channel gate at 128 (1.2-1.3x); without one at 128 the two are
 * within the runs' spread (0.83-1.04x), and at 256 the chunked form is
 * 1.1-1.5x faster. Chunks: the intra-chunk part costs C*(dk+dv) per token
 * and pairwise exps for CHANNEL, so short chunks are cheapest for plain C. */
static const la_tuning tuning_scalar[] = {
    {
        .uarch = LA_UARCH_ZEN4,
        .additive_chunked_above_dk = {64, 64, 128}, /* none, token, channel */
        .additive_chunk = {{32, 32, 16}, {32, 32, 16}},
        LA_DELTA_TUNING_ZEN4,
        .delta_pack_from_T = LA_TUNE_NEVER,
        .delta_pair_from_T = {LA_TUNE_NEVER, LA_TUNE_NEVER, LA_TUNE_NEVER},
        .additive_pack_from_T = LA_TUNE_NEVER,
        .additive_quad_from_T = {LA_TUNE_NEVER, LA_TUNE_NEVER, LA_TUNE_NEVER},
    },
};

const la_table la_table_scalar = {
    .name = "scalar",
    .isa = LINATTN_ISA_SCALAR,
    .requires = 0,
    .additive = &la_additive_scalar,
    .delta = &la_delta_scalar,
    .stage = &la_stage_scalar,
    .tuning = tuning_scalar,
    .ntuning = 1,
};
