/* Private declarations shared by api.c, driver.c, dispatch.c and cpu.c. */
#ifndef LINATTN_INTERNAL_H
#define LINATTN_INTERNAL_H

#include "kernels.h"

/* cpu.c: 1 when this CPU (and OS) can run code of that ISA. */
int la_cpu_has(linattn_isa isa);

/* dispatch.c */
/* The table compute calls use, or NULL while a forced ISA cannot run. */
const la_kernels *la_active_table(void);
/* Every table compiled into this build, test-only ones included. */
const la_kernels *const *la_all_tables(int *count);
/* 1 when this CPU can run table t. */
int la_table_runnable(const la_kernels *t);
/* Tests: make t the active table (must be runnable). */
void la_force_table(const la_kernels *t);

/* driver.c: run a validated call on table t. ALGO_AUTO runs sequences of at
 * most this many tokens token by token, longer ones in chunks. */
#define LA_AUTO_RECURRENT_MAX_T 16
linattn_status la_run_forward(const la_kernels *t, const linattn_config *cfg, const float *q,
                              const float *k, const float *v, const float *g, float *o,
                              float *s, float *z);
void la_run_step(const la_kernels *t, const linattn_config *cfg, const float *q,
                 const float *k, const float *v, const float *g, float *o, float *s, float *z);
/* The chunk the driver uses for cfg on table t. */
int64_t la_chunk_for(const la_kernels *t, const linattn_config *cfg);

#endif
