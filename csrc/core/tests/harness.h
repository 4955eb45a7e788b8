/* harness.h: a minimal test harness for the C core (no dependencies).
 * Built with -fsanitize=address,undefined by `make ctest`. */
#ifndef WAVEPE_TEST_HARNESS_H
#define WAVEPE_TEST_HARNESS_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "../isa.h"

extern int wavepe_test_failures;
/* the vector variant the tests compare with the scalar one (test_main.c) */
extern wavepe_isa wavepe_test_isa;

#define CHECK(cond)                                                                              \
    do {                                                                                         \
        if (!(cond)) {                                                                           \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);             \
            ++wavepe_test_failures;                                                              \
        }                                                                                        \
    } while (0)

/* |a - b| <= atol + rtol |b| */
#define CHECK_CLOSE(a, b, rtol, atol)                                                            \
    do {                                                                                         \
        const double a_ = (double)(a), b_ = (double)(b);                                         \
        if (!(fabs(a_ - b_) <= (atol) + (rtol)*fabs(b_)) && !(isnan(a_) && isnan(b_))) {        \
            fprintf(stderr, "%s:%d: %s = %.17g, expected %s = %.17g\n", __FILE__, __LINE__, #a,  \
                    a_, #b, b_);                                                                 \
            ++wavepe_test_failures;                                                              \
        }                                                                                        \
    } while (0)

/* Deterministic pseudo-random numbers (xorshift64*), uniform in [lo, hi). */
static inline double test_uniform(unsigned long long *state, double lo, double hi) {
    unsigned long long x = *state;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *state = x;
    return lo + (hi - lo) * ((double)((x * 0x2545F4914F6CDD1DULL) >> 11) / 9007199254740992.0);
}

#endif
