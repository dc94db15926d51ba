/* The threads suite's assertion. Its programs are also built by
 * scripts/tsan.sh, whose build leaves the Check suites out, so they use no
 * test framework: the first failed condition prints where and why, and
 * exits 1. */
#ifndef LINATTN_TESTS_THREADS_CHECK_H
#define LINATTN_TESTS_THREADS_CHECK_H

#include <stdio.h>
#include <stdlib.h>

#define CHECK(cond, ...)                                                                  \
    do {                                                                                  \
        if (!(cond)) {                                                                    \
            fprintf(stderr, "%s:%d: ", __FILE__, __LINE__);                               \
            fprintf(stderr, __VA_ARGS__);                                                 \
            fputc('\n', stderr);                                                          \
            exit(1);                                                                      \
        }                                                                                 \
    } while (0)

#endif
