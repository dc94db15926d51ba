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

/* A tile of nv vectors (the last wl lanes wide) in sub-tiles of sub_nv
 * vectors, in order: for each, x0 is its first vector, k its vectors and
 * kwl the lanes of its last. A whole sub-tile (k = sub_nv, every vector
 * full) runs WHOLE(g, sub_nv) with the gate a constant (LA_PER_GATE,
 * gate.h), any other RAGGED(k) through LA_TILE_SWITCH. sub_nv is an
 * integer literal, as for LA_TILE_SWITCH; LA_VW comes from the ISA
 * vocabulary. */
#define LA_SUB_TILES(nv, wl, sub_nv, gate, WHOLE, RAGGED)                                         \
    for (int x0 = 0; x0 < (nv); x0 += (sub_nv)) {                                                \
        const int k = (nv) - x0 < (sub_nv) ? (nv) - x0 : (sub_nv);                                \
        const int64_t kwl = x0 + k == (nv) ? (wl) : LA_VW;                                        \
        if (kwl == LA_VW && k == (sub_nv))                                                        \
            LA_PER_GATE(gate, WHOLE, sub_nv);                                                     \
        else                                                                                      \
            LA_TILE_SWITCH(k, sub_nv, RAGGED);                                                    \
    }

#define LA_TILE_CASES_1(CALL) case 1: CALL(1); break;
#define LA_TILE_CASES_2(CALL) LA_TILE_CASES_1(CALL) case 2: CALL(2); break;
#define LA_TILE_CASES_3(CALL) LA_TILE_CASES_2(CALL) case 3: CALL(3); break;
#define LA_TILE_CASES_4(CALL) LA_TILE_CASES_3(CALL) case 4: CALL(4); break;
#define LA_TILE_CASES_5(CALL) LA_TILE_CASES_4(CALL) case 5: CALL(5); break;
#define LA_TILE_CASES_6(CALL) LA_TILE_CASES_5(CALL) case 6: CALL(6); break;
#define LA_TILE_CASES_7(CALL) LA_TILE_CASES_6(CALL) case 7: CALL(7); break;
#define LA_TILE_CASES_8(CALL) LA_TILE_CASES_7(CALL) case 8: CALL(8); break;

#endif
