/* The library's accuracy contract (docs/api.md), stated once for every test:
 * per (batch, head), max |x - ref| <= LA_TOL_REL * max(1, max |ref|), for the
 * outputs and for the final state, against the double oracle; chunked and
 * recurrent results of one table agree within the same bound. */
#ifndef LA_TEST_TOLERANCE_H
#define LA_TEST_TOLERANCE_H

#define LA_TOL_REL 2e-4

/* One op of a SIMD table against the scalar table's same op on the same
 * inputs (test_ops.c): max |x - ref| <= LA_TOL_OP * max(1, max |ref|) per
 * output array. Both compute in float from identical operands, so they
 * differ only by summation order, FMA contraction and the exp of each ISA
 * (SLEEF vs libm, 1 ulp each): far below the end-to-end bound. */
#define LA_TOL_OP 1e-5

#endif
