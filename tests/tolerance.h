/* The library's accuracy contract (docs/api.md), stated once for every test:
 * per (batch, head), max |x - ref| <= LA_TOL_REL * max(1, max |ref|), for the
 * outputs and for the final state, against the double oracle; chunked and
 * recurrent results of one table agree within the same bound. */
#ifndef LA_TEST_TOLERANCE_H
#define LA_TEST_TOLERANCE_H

#define LA_TOL_REL 2e-4

#endif
