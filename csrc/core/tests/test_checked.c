/* test_checked.c: overflow-checked size arithmetic. */
#include <stdint.h>

#include "../checked.h"
#include "harness.h"

void test_checked(void) {
    int64_t out;
    CHECK(!wavepe_mul_overflow(1 << 20, 1 << 20, &out) && out == (int64_t)1 << 40);
    CHECK(wavepe_mul_overflow(INT64_MAX / 2 + 1, 2, &out));
    CHECK(wavepe_add_overflow(INT64_MAX, 1, &out));
    const int64_t ok[3] = {8, 2048, 2048};
    int64_t count = 0;
    CHECK(wavepe_checked_numel(3, ok, 4, &count) == WAVEPE_OK && count == 8 * 2048 * 2048);
    const int64_t big[3] = {1 << 30, 1 << 30, 1 << 30};
    CHECK(wavepe_checked_numel(3, big, 4, NULL) == WAVEPE_E_OVERFLOW);
    const int64_t bytes_overflow[2] = {(int64_t)1 << 31, (int64_t)1 << 31}; /* 2^62 elems * 4 bytes */
    CHECK(wavepe_checked_numel(2, bytes_overflow, 4, NULL) == WAVEPE_E_OVERFLOW);
    const int64_t negative[2] = {4, -1};
    CHECK(wavepe_checked_numel(2, negative, 4, NULL) == WAVEPE_E_NEGATIVE_SIZE);
    const int64_t empty[2] = {0, (int64_t)1 << 62};
    CHECK(wavepe_checked_numel(2, empty, 4, &count) == WAVEPE_OK && count == 0);
}
