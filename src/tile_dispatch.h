/* Private: calls a register-tiled kernel with its vector count as a
 * compile-time constant. The kernels keep one accumulator per vector of a
 * tile in registers; a constant count at each call site lets the compiler
 * unroll over them instead of spilling an array.
 *
 *   #define RUN(k) tile_kernel(..., k, wl)
 *   LA_TILE_SWITCH(nv, LA_XXX_NV, RUN);
 *   #undef RUN
 *
 * expands RUN(1) ... RUN(max_nv), one per case of nv in [1, max_nv].
 * max_nv must expand to an integer literal from 1 to 8. */
#ifndef LA_TILE_DISPATCH_H
#define LA_TILE_DISPATCH_H

#define LA_TILE_SWITCH(nv, max_nv, CALL) LA_TILE_SWITCH_(nv, max_nv, CALL)
/* one more level, so that max_nv is expanded before it is pasted */
#define LA_TILE_SWITCH_(nv, max_nv, CALL)                                    \
    do {                                                                     \
        switch (nv) {                                                        \
            LA_TILE_CASES_##max_nv(CALL)                                     \
        }                                                                    \
    } while (0)

#define LA_TILE_CASES_1(CALL) case 1: CALL(1); break;
#define LA_TILE_CASES_2(CALL) LA_TILE_CASES_1(CALL) case 2: CALL(2); break;
#define LA_TILE_CASES_3(CALL) LA_TILE_CASES_2(CALL) case 3: CALL(3); break;
#define LA_TILE_CASES_4(CALL) LA_TILE_CASES_3(CALL) case 4: CALL(4); break;
#define LA_TILE_CASES_5(CALL) LA_TILE_CASES_4(CALL) case 5: CALL(5); break;
#define LA_TILE_CASES_6(CALL) LA_TILE_CASES_5(CALL) case 6: CALL(6); break;
#define LA_TILE_CASES_7(CALL) LA_TILE_CASES_6(CALL) case 7: CALL(7); break;
#define LA_TILE_CASES_8(CALL) LA_TILE_CASES_7(CALL) case 8: CALL(8); break;

#endif
