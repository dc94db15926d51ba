/* The portable table: every family, plain C, no -m flags. It is the
 * fallback for any family a SIMD table does not provide. */
#include "../table.h"

extern const la_additive_ops la_additive_scalar;
extern const la_delta_ops la_delta_scalar;

const la_table la_table_scalar = {
    .name = "scalar",
    .isa = LINATTN_ISA_SCALAR,
    .requires = 0,
    .additive = &la_additive_scalar,
    .delta = &la_delta_scalar,
};
