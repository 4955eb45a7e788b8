/* test_rope.c: RoPE kernels, scalar vs AVX2 vs a naive loop, and validation;
 * bfloat16 / float16 storage against the same loop (one rounding of the output). */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../checked.h"
#include "../half.h"
#include "../rope.h"
#include "harness.h"

/* One test problem.  q is stored (B, L, Hq, d) (the transposed layout users
 * get from a (B, L, H, d) projection) when q_transposed, else (B, Hq, L, d);
 * k is always (B, Hk, L, d); outputs are dense (B, H, L, d). */
typedef struct rope_case {
    int64_t batch, heads_q, heads_k, len, head_dim, rotary_pairs;
    int layout, inverse, q_transposed;
    int pos_mode; /* 0: offset, 1: (L,) array, 2: (B, L) array */
    int64_t offset;
    double scale, theta;
} rope_case;

static double naive_component(const rope_case *c, const double *inv, const double *x, double pos, int64_t j) {
    const int64_t half = c->head_dim / 2;
    int64_t i, partner;
    int first; /* j is the pair's first element (a) */
    if (c->layout == WAVEPE_ROPE_HALF) {
        i = j < half ? j : j - half;
        first = j < half;
        partner = first ? j + half : j - half;
    } else {
        i = j / 2;
        first = j % 2 == 0;
        partner = first ? j + 1 : j - 1;
    }
    if (i >= c->rotary_pairs) return x[j] * c->scale;
    const double angle = pos * inv[i];
    const double cs = cos(angle), sn = c->inverse ? -sin(angle) : sin(angle);
    const double a = first ? x[j] : x[partner], b = first ? x[partner] : x[j];
    return (first ? a * cs - b * sn : b * cs + a * sn) * c->scale;
}

typedef struct rope_buffers {
    double *q, *k, *pos_f;
    int64_t *positions;
    double *inv;
    int64_t q_numel, k_numel;
} rope_buffers;

static void fill(const rope_case *c, rope_buffers *buf, unsigned long long *seed) {
    buf->q_numel = c->batch * c->heads_q * c->len * c->head_dim;
    buf->k_numel = c->batch * c->heads_k * c->len * c->head_dim;
    buf->q = malloc(sizeof(double) * (size_t)(buf->q_numel + 1));
    buf->k = malloc(sizeof(double) * (size_t)(buf->k_numel + 1));
    buf->positions = malloc(sizeof(int64_t) * (size_t)(c->batch * c->len + 1));
    buf->inv = malloc(sizeof(double) * (size_t)(c->head_dim / 2 + 1));
    for (int64_t i = 0; i < buf->q_numel; ++i) buf->q[i] = test_uniform(seed, -2.0, 2.0);
    for (int64_t i = 0; i < buf->k_numel; ++i) buf->k[i] = test_uniform(seed, -2.0, 2.0);
    for (int64_t i = 0; i < c->head_dim / 2; ++i) buf->inv[i] = pow(c->theta, -2.0 * (double)i / (double)c->head_dim);
    for (int64_t b = 0; b < c->batch; ++b)
        for (int64_t l = 0; l < c->len; ++l)
            buf->positions[b * c->len + l] = c->offset + (c->pos_mode == 2 ? 7 * b : 0) + 3 * l - (l % 2);
}

static double position_of(const rope_case *c, const rope_buffers *buf, int64_t b, int64_t l) {
    if (c->pos_mode == 0) return (double)(c->offset + l);
    return (double)buf->positions[(c->pos_mode == 2 ? b * c->len : 0) + l];
}

/* Offset of q element (b, h, l, 0) in the stored layout. */
static int64_t q_at(const rope_case *c, int64_t b, int64_t h, int64_t l) {
    if (c->q_transposed) return ((b * c->len + l) * c->heads_q + h) * c->head_dim;
    return ((b * c->heads_q + h) * c->len + l) * c->head_dim;
}

static void setup_args(const rope_case *c, const rope_buffers *buf, wavepe_rope_args *a, const void *q, void *q_out,
                       const void *k, void *k_out) {
    *a = wavepe_rope_args_defaults();
    const int64_t L = c->len, d = c->head_dim, Hq = c->heads_q, Hk = c->heads_k;
    a->batch = c->batch, a->len = L, a->head_dim = d;
    a->q.heads = Hq, a->q.in = q, a->q.out = q_out;
    if (c->q_transposed) {
        a->q.in_stride_b = L * Hq * d, a->q.in_stride_h = d, a->q.in_stride_l = Hq * d;
    } else {
        a->q.in_stride_b = Hq * L * d, a->q.in_stride_h = L * d, a->q.in_stride_l = d;
    }
    a->q.out_stride_b = Hq * L * d, a->q.out_stride_h = L * d, a->q.out_stride_l = d;
    a->k.heads = Hk, a->k.in = k, a->k.out = k_out;
    a->k.in_stride_b = a->k.out_stride_b = Hk * L * d;
    a->k.in_stride_h = a->k.out_stride_h = L * d;
    a->k.in_stride_l = a->k.out_stride_l = d;
    a->inv_freq = buf->inv, a->rotary_pairs = c->rotary_pairs, a->layout = c->layout;
    a->inverse = c->inverse, a->scale = c->scale, a->offset = c->offset;
    if (c->pos_mode > 0) {
        a->positions = buf->positions, a->pos_stride_l = 1, a->pos_stride_b = c->pos_mode == 2 ? L : 0;
    }
}

/* The spacing of half-type values at magnitude x (x >= 0): bfloat16 has 8
 * significant bits, float16 11 with subnormals below 2^-14. */
static double half_ulp(int dtype, double x) {
    int e;
    (void)frexp(x, &e); /* x = m 2^e, m in [0.5, 1): the leading bit is 2^(e-1) */
    if (dtype == WAVEPE_BF16) return ldexp(1.0, (e - 1 < -126 ? -126 : e - 1) - 7);
    return ldexp(1.0, (e - 1 < -14 ? -14 : e - 1) - 10);
}

static uint16_t half_from(int dtype, double x) {
    return dtype == WAVEPE_BF16 ? wp_f32_to_bf16((float)x) : wp_f32_to_f16((float)x);
}

static double half_value(int dtype, uint16_t h) {
    return dtype == WAVEPE_BF16 ? (double)wp_bf16_to_f32(h) : (double)wp_f16_to_f32(h);
}

/* The case with bfloat16 and float16 storage on every ISA.  The kernels widen
 * the (exact) inputs, compute in float32 and round the output once, so
 *   |y - exact| <= ulp_half(|exact| + e32) / 2 + e32,
 * e32 the float32 computation's error: a few float32 ulps of |a| + |b| (the
 * float32 check's 5e-7 (|a| + |b|) scale), plus 2^-126 for flush-to-zero. */
static void check_case_half(const rope_case *c, const rope_buffers *buf) {
    const int64_t L = c->len, d = c->head_dim;
    const wavepe_isa isas[2] = {WAVEPE_ISA_SCALAR, wavepe_test_isa};
    uint16_t *qh = malloc(sizeof(uint16_t) * (size_t)(buf->q_numel + 1));
    uint16_t *kh = malloc(sizeof(uint16_t) * (size_t)(buf->k_numel + 1));
    uint16_t *qh_out = malloc(sizeof(uint16_t) * (size_t)(buf->q_numel + 1));
    uint16_t *kh_out = malloc(sizeof(uint16_t) * (size_t)(buf->k_numel + 1));
    const int dtypes[2] = {WAVEPE_BF16, WAVEPE_F16};
    for (int di = 0; di < 2; ++di) {
        const int dt = dtypes[di];
        for (int64_t i = 0; i < buf->q_numel; ++i) qh[i] = half_from(dt, buf->q[i]);
        for (int64_t i = 0; i < buf->k_numel; ++i) kh[i] = half_from(dt, buf->k[i]);
        for (int v = 0; v < 2; ++v) {
            wavepe_rope_args a;
            setup_args(c, buf, &a, qh, qh_out, kh, kh_out);
            a.dtype = dt;
            CHECK(wavepe_rope_validate(&a, NULL) == WAVEPE_OK);
            const int64_t rows = wavepe_rope_rows(&a);
            if (dt == WAVEPE_BF16) wavepe_rope_bf16(isas[v], &a, 0, rows);
            else wavepe_rope_f16(isas[v], &a, 0, rows);
            for (int t = 0; t < 2; ++t) {
                const int64_t H = t == 0 ? c->heads_q : c->heads_k;
                for (int64_t b = 0; b < c->batch; ++b)
                    for (int64_t h = 0; h < H; ++h)
                        for (int64_t l = 0; l < L; ++l) {
                            const uint16_t *xh = t == 0 ? qh + q_at(c, b, h, l) : kh + ((b * H + h) * L + l) * d;
                            const uint16_t *yh = (t == 0 ? qh_out : kh_out) + ((b * H + h) * L + l) * d;
                            double x[140];
                            for (int64_t j = 0; j < d; ++j) x[j] = half_value(dt, xh[j]);
                            const double pos = position_of(c, buf, b, l);
                            for (int64_t j = 0; j < d; ++j) {
                                const double mag = (fabs(x[j]) + 2.0) * fabs(c->scale); /* >= |a| + |b| */
                                const double want = naive_component(c, buf->inv, x, pos, j);
                                const double e32 = 5e-7 * mag + 0x1p-126;
                                CHECK_CLOSE(half_value(dt, yh[j]), want, 0, 0.5 * half_ulp(dt, fabs(want) + e32) + e32);
                            }
                        }
            }
        }
    }
    free(qh), free(kh), free(qh_out), free(kh_out);
}

/* Every bfloat16 / float16 bit pattern through the kernels with angle 0
 * (inv_freq = 0: cos = 1, sin = 0), so that y = round_half(x * scale): the
 * vector kernels' widening and narrowing (vf32_loadu_bf16 ...) must give the
 * bits of half.h's scalar conversions (torch's rounding for bf16, F16C's for
 * fp16), ties included (scale 1.5 makes many), and x itself for scale 1.  The
 * patterns fill the first half of each row (the a of each pair; b = 0). */
static void check_half_patterns(void) {
    const int64_t d = 64, L = 65536 / 32;
    uint16_t *x = calloc((size_t)(L * d), sizeof(uint16_t)), *y = malloc(sizeof(uint16_t) * (size_t)(L * d));
    double inv[32] = {0};
    for (int64_t p = 0; p < 65536; ++p) x[(p / 32) * d + p % 32] = (uint16_t)p;
    const double scales[3] = {1.0, 1.5, 1.0 + 0x1p-12};
    const int dtypes[2] = {WAVEPE_BF16, WAVEPE_F16};
    const wavepe_isa isas[2] = {WAVEPE_ISA_SCALAR, wavepe_test_isa};
    for (int di = 0; di < 2; ++di)
        for (int si = 0; si < 3; ++si)
            for (int v = 0; v < 2; ++v) {
                const int dt = dtypes[di];
                wavepe_rope_args a;
                a = wavepe_rope_args_defaults();
                a.dtype = dt, a.batch = 1, a.len = L, a.head_dim = d, a.inv_freq = inv, a.rotary_pairs = d / 2;
                a.scale = scales[si];
                a.q.heads = 1, a.q.in = x, a.q.out = y;
                a.q.in_stride_b = a.q.out_stride_b = a.q.in_stride_h = a.q.out_stride_h = L * d;
                a.q.in_stride_l = a.q.out_stride_l = d;
                CHECK(wavepe_rope_validate(&a, NULL) == WAVEPE_OK);
                if (dt == WAVEPE_BF16) wavepe_rope_bf16(isas[v], &a, 0, wavepe_rope_rows(&a));
                else wavepe_rope_f16(isas[v], &a, 0, wavepe_rope_rows(&a));
                int bad = 0;
                for (int64_t p = 0; p < 65536; ++p) {
                    const uint16_t in = (uint16_t)p, out = y[(p / 32) * d + p % 32];
                    const float xf = dt == WAVEPE_BF16 ? wp_bf16_to_f32(in) : wp_f16_to_f32(in);
                    if (dt == WAVEPE_BF16 && (in & 0x7F80u) == 0) continue; /* subnormal: read as 0 (fpenv.h) */
                    const float prod = xf * (float)a.scale;
                    const uint16_t want = dt == WAVEPE_BF16 ? wp_f32_to_bf16(prod) : wp_f32_to_f16(prod);
                    const int nan = xf != xf;
                    /* NaN: bf16 always 0x7FC0; fp16 a quiet NaN (its payload is the FMA's business) */
                    const int ok = nan ? (dt == WAVEPE_BF16 ? out == 0x7FC0u : (out & 0x7E00u) == 0x7E00u)
                                       : out == want && (si != 0 || out == in);
                    if (!ok && bad++ < 5)
                        fprintf(stderr, "%s %s scale %g: 0x%04x -> 0x%04x, expected 0x%04x\n", wavepe_dtype_name(dt),
                                wavepe_isa_name(isas[v]), a.scale, in, out, want);
                    CHECK(ok);
                }
            }
    free(x), free(y);
}

/* Run one case in float64 and float32 on every ISA; compare with the naive
 * loop (error model: a few ulp of |a| + |b| of the pair) and ISAs with each
 * other. */
static void check_case(const rope_case *c, unsigned long long *seed) {
    rope_buffers buf;
    fill(c, &buf, seed);
    const int64_t L = c->len, d = c->head_dim;
    const wavepe_isa isas[2] = {WAVEPE_ISA_SCALAR, wavepe_test_isa};
    double *q_out = malloc(sizeof(double) * (size_t)(buf.q_numel + 1));
    double *k_out = malloc(sizeof(double) * (size_t)(buf.k_numel + 1));
    float *q32 = malloc(sizeof(float) * (size_t)(buf.q_numel + 1)), *k32 = malloc(sizeof(float) * (size_t)(buf.k_numel + 1));
    float *q32_out = malloc(sizeof(float) * (size_t)(buf.q_numel + 1));
    float *k32_out = malloc(sizeof(float) * (size_t)(buf.k_numel + 1));
    for (int64_t i = 0; i < buf.q_numel; ++i) q32[i] = (float)buf.q[i];
    for (int64_t i = 0; i < buf.k_numel; ++i) k32[i] = (float)buf.k[i];
    for (int v = 0; v < 2; ++v) {
        wavepe_rope_args a;
        setup_args(c, &buf, &a, buf.q, q_out, buf.k, k_out);
        CHECK(wavepe_rope_validate(&a, NULL) == WAVEPE_OK);
        const int64_t rows = wavepe_rope_rows(&a);
        /* two ranges, as two threads would split them */
        wavepe_rope_f64(isas[v], &a, 0, rows / 2);
        wavepe_rope_f64(isas[v], &a, rows / 2, rows);
        setup_args(c, &buf, &a, q32, q32_out, k32, k32_out);
        wavepe_rope_f32(isas[v], &a, 0, rows);
        for (int t = 0; t < 2; ++t) {
            const int64_t H = t == 0 ? c->heads_q : c->heads_k;
            for (int64_t b = 0; b < c->batch; ++b)
                for (int64_t h = 0; h < H; ++h)
                    for (int64_t l = 0; l < L; ++l) {
                        const double *x = t == 0 ? buf.q + q_at(c, b, h, l) : buf.k + ((b * H + h) * L + l) * d;
                        const float *x32 = t == 0 ? q32 + q_at(c, b, h, l) : k32 + ((b * H + h) * L + l) * d;
                        const int64_t o = ((b * H + h) * L + l) * d;
                        const double *y = (t == 0 ? q_out : k_out) + o;
                        const float *y32 = (t == 0 ? q32_out : k32_out) + o;
                        double x32d[140];
                        for (int64_t j = 0; j < d; ++j) x32d[j] = x32[j];
                        const double pos = position_of(c, &buf, b, l);
                        for (int64_t j = 0; j < d; ++j) {
                            const double mag = (fabs(x[j]) + 2.0) * fabs(c->scale); /* >= |a| + |b| */
                            CHECK_CLOSE(y[j], naive_component(c, buf.inv, x, pos, j), 0, 8e-16 * mag);
                            CHECK_CLOSE(y32[j], naive_component(c, buf.inv, x32d, pos, j), 0, 5e-7 * mag);
                        }
                    }
        }
    }
    check_case_half(c, &buf);
    free(buf.q), free(buf.k), free(buf.positions), free(buf.inv);
    free(q_out), free(k_out), free(q32), free(k32), free(q32_out), free(k32_out);
}

/* inverse(forward(x)) == x, in place, both dtypes and ISAs. */
static void check_round_trip(int layout, int64_t d, double offset, unsigned long long *seed) {
    const int64_t L = 21, H = 3;
    double x[21 * 3 * 130], y[21 * 3 * 130];
    float xf[21 * 3 * 130];
    double inv[65];
    for (int64_t i = 0; i < d / 2; ++i) inv[i] = pow(10000.0, -2.0 * (double)i / (double)d);
    for (int64_t i = 0; i < L * H * d; ++i) y[i] = x[i] = test_uniform(seed, -1.0, 1.0), xf[i] = (float)x[i];
    const wavepe_isa isas[2] = {WAVEPE_ISA_SCALAR, wavepe_test_isa};
    for (int v = 0; v < 2; ++v) {
        wavepe_rope_args a;
        a = wavepe_rope_args_defaults();
        a.batch = 1, a.len = L, a.head_dim = d, a.inv_freq = inv, a.rotary_pairs = d / 2, a.layout = layout;
        a.scale = 1.0, a.offset = (int64_t)offset;
        a.q.heads = H, a.q.in = y, a.q.out = y; /* in place */
        a.q.in_stride_b = a.q.out_stride_b = H * L * d;
        a.q.in_stride_h = a.q.out_stride_h = L * d;
        a.q.in_stride_l = a.q.out_stride_l = d;
        CHECK(wavepe_rope_validate(&a, NULL) == WAVEPE_OK);
        wavepe_rope_f64(isas[v], &a, 0, wavepe_rope_rows(&a));
        a.inverse = 1;
        wavepe_rope_f64(isas[v], &a, 0, wavepe_rope_rows(&a));
        for (int64_t i = 0; i < L * H * d; ++i) CHECK_CLOSE(y[i], x[i], 0, 4e-16);
        float yf[21 * 3 * 130];
        memcpy(yf, xf, sizeof(float) * (size_t)(L * H * d));
        a.q.in = yf, a.q.out = yf, a.inverse = 0;
        wavepe_rope_f32(isas[v], &a, 0, wavepe_rope_rows(&a));
        a.inverse = 1;
        wavepe_rope_f32(isas[v], &a, 0, wavepe_rope_rows(&a));
        for (int64_t i = 0; i < L * H * d; ++i) CHECK_CLOSE(yf[i], xf[i], 0, 4e-7);
        memcpy(y, x, sizeof(double) * (size_t)(L * H * d));
    }
}

static void check_validation(void) {
    double q[2 * 4 * 8], out[2 * 4 * 8], inv[4] = {1.0, 0.1, 0.01, 0.001};
    int64_t pos[4] = {0, 1, 2, 3};
    wavepe_rope_args a;
    a = wavepe_rope_args_defaults();
    a.batch = 1, a.len = 4, a.head_dim = 8, a.inv_freq = inv, a.rotary_pairs = 4, a.scale = 1.0;
    a.q.heads = 2, a.q.in = q, a.q.out = out;
    a.q.in_stride_b = a.q.out_stride_b = 64, a.q.in_stride_h = a.q.out_stride_h = 32;
    a.q.in_stride_l = a.q.out_stride_l = 8;
    CHECK(wavepe_rope_validate(&a, NULL) == WAVEPE_OK);
    wavepe_rope_args bad = a;
    bad.head_dim = 7;
    CHECK(wavepe_rope_validate(&bad, NULL) == WAVEPE_E_INVALID);
    bad = a, bad.rotary_pairs = 5;
    CHECK(wavepe_rope_validate(&bad, NULL) == WAVEPE_E_INVALID);
    bad = a, bad.rotary_pairs = -1;
    CHECK(wavepe_rope_validate(&bad, NULL) == WAVEPE_E_INVALID);
    bad = a, bad.layout = 2;
    CHECK(wavepe_rope_validate(&bad, NULL) == WAVEPE_E_INVALID);
    bad = a, bad.scale = NAN;
    CHECK(wavepe_rope_validate(&bad, NULL) == WAVEPE_E_INVALID);
    /* inv_freq values are data: the plan (host memory) checks them, the rules cannot */
    double inv_nan[4] = {1.0, NAN, 0.0, 0.0};
    wavepe_rope_plan *plan = NULL;
    wavepe_error err = {{0}};
    a.dtype = WAVEPE_F64;
    bad = a, bad.inv_freq = inv_nan;
    CHECK(wavepe_rope_validate(&bad, NULL) == WAVEPE_OK);
    CHECK(wavepe_rope_plan_create(WAVEPE_ISA_SCALAR, &bad, &plan, &err) == WAVEPE_E_INVALID && plan == NULL);
    CHECK(strstr(err.message, "inv_freq[1]") != NULL);
    bad.rotary_pairs = 1; /* only the pairs that rotate are read */
    CHECK(wavepe_rope_plan_create(WAVEPE_ISA_SCALAR, &bad, &plan, NULL) == WAVEPE_OK);
    CHECK(wavepe_rope_units(plan, 0) == 1 && wavepe_rope_units(plan, 1) == 0);
    CHECK(wavepe_rope_run(plan, 0, 0, 1) == WAVEPE_OK);
    wavepe_rope_plan_free(plan);
    bad = a, bad.rotary_pairs = 5;
    CHECK(wavepe_rope_validate(&bad, &err) == WAVEPE_E_INVALID);
    CHECK(strstr(err.message, "rotary_pairs must be in [0, head_dim/2 = 4], got 5") != NULL);
    bad = a, bad.inv_freq = NULL;
    CHECK(wavepe_rope_validate(&bad, NULL) == WAVEPE_E_NULL);
    bad = a, bad.q.out = NULL;
    CHECK(wavepe_rope_validate(&bad, NULL) == WAVEPE_E_NULL);
    bad = a, bad.k.heads = 1; /* k pointers NULL while k has elements */
    CHECK(wavepe_rope_validate(&bad, NULL) == WAVEPE_E_NULL);
    bad = a, bad.len = -1;
    CHECK(wavepe_rope_validate(&bad, NULL) == WAVEPE_E_NEGATIVE_SIZE);
    bad = a, bad.k.heads = -2;
    CHECK(wavepe_rope_validate(&bad, NULL) == WAVEPE_E_NEGATIVE_SIZE);
    bad = a, bad.batch = (int64_t)1 << 40, bad.len = (int64_t)1 << 20;
    CHECK(wavepe_rope_validate(&bad, NULL) == WAVEPE_E_OVERFLOW);
    bad = a, bad.q.in_stride_h = INT64_MAX / 2;
    CHECK(wavepe_rope_validate(&bad, NULL) == WAVEPE_E_OVERFLOW);
    bad = a, bad.q.out_stride_l = INT64_MIN;
    CHECK(wavepe_rope_validate(&bad, NULL) == WAVEPE_E_OVERFLOW);
    bad = a, bad.offset = INT64_MAX - 2;
    CHECK(wavepe_rope_validate(&bad, NULL) == WAVEPE_E_OVERFLOW);
    bad.positions = pos, bad.pos_stride_l = 1; /* an array ignores the offset */
    CHECK(wavepe_rope_validate(&bad, NULL) == WAVEPE_OK);
    bad.pos_stride_l = INT64_MAX / 2;
    CHECK(wavepe_rope_validate(&bad, NULL) == WAVEPE_E_OVERFLOW);
    /* empty problems need no data at all */
    wavepe_rope_args empty;
    empty = wavepe_rope_args_defaults();
    empty.batch = 3, empty.len = 0, empty.head_dim = 8, empty.q.heads = 4, empty.rotary_pairs = 0, empty.scale = 1;
    CHECK(wavepe_rope_validate(&empty, NULL) == WAVEPE_OK);
    CHECK(wavepe_rope_rows(&empty) == 0);
    empty.len = 17;
    empty.q.heads = 0;
    CHECK(wavepe_rope_validate(&empty, NULL) == WAVEPE_OK);
    CHECK(wavepe_rope_rows(&empty) == 3 * ((17 + WAVEPE_ROPE_POS_BLOCK - 1) / WAVEPE_ROPE_POS_BLOCK));
}

/* Angles beyond the vector reduction's range go through libm, and positions
 * near 1e6 keep full accuracy (the angle is a double product). */
static void check_large_positions(unsigned long long *seed) {
    const int64_t offsets[3] = {1000000, 123456789, (int64_t)1 << 45};
    for (int i = 0; i < 3; ++i) {
        for (int layout = 0; layout < 2; ++layout) {
            rope_case c = {1, 2, 1, 19, 64, 32, layout, 0, 0, 1, offsets[i], 1.0, 10000.0};
            check_case(&c, seed);
        }
    }
    /* inv_freq of 1 at position 2^45: every lane of the first vector overflows the range */
    rope_case c = {2, 1, 1, 5, 16, 8, WAVEPE_ROPE_HALF, 1, 0, 2, ((int64_t)1 << 42) + 5, 0.5, 2.0};
    check_case(&c, seed);
}

/* Problems of 32 MiB and more take the AVX2 kernels' large-input path
 * (prefetching the next head, across q into k): the bits must be those of the
 * same heads rotated one at a time, for both layouts and dtypes. */
#define CHECK_LARGE_PATH(T, KERNEL, DTYPE, FROM_DOUBLE)                                                                 \
    do {                                                                                           \
        const int64_t L = 4096, d = 128, H = (int64_t)(16 << 20) / (L * d * (int64_t)sizeof(T));   \
        const int64_t n = H * L * d; /* q and k: 16 MiB each */                                    \
        T *q = malloc(sizeof(T) * (size_t)n), *k = malloc(sizeof(T) * (size_t)n);                  \
        T *qo = malloc(sizeof(T) * (size_t)n), *ko = malloc(sizeof(T) * (size_t)n);                \
        T *one = malloc(sizeof(T) * (size_t)(L * d));                                              \
        for (int64_t i = 0; i < n; ++i)                                                            \
            q[i] = FROM_DOUBLE(test_uniform(&seed, -1, 1)), k[i] = FROM_DOUBLE(test_uniform(&seed, -1, 1)); \
        for (int layout = 0; layout < 2; ++layout) {                                               \
            wavepe_rope_args a;                                                                    \
            a = wavepe_rope_args_defaults();                                                       \
            a.dtype = DTYPE, a.batch = 1, a.len = L, a.head_dim = d, a.inv_freq = inv, a.rotary_pairs = 60; \
            a.layout = layout, a.scale = 1.0, a.offset = 3;                                        \
            a.q.heads = H, a.q.in = q, a.q.out = qo;                                               \
            a.q.in_stride_b = a.q.out_stride_b = n, a.q.in_stride_h = a.q.out_stride_h = L * d;    \
            a.q.in_stride_l = a.q.out_stride_l = d;                                                \
            a.k = a.q, a.k.in = k, a.k.out = ko;                                                   \
            CHECK(wavepe_rope_validate(&a, NULL) == WAVEPE_OK);                                          \
            KERNEL(wavepe_test_isa, &a, 0, wavepe_rope_rows(&a));                                 \
            wavepe_rope_args h1 = a;                                                               \
            h1.q.heads = 1, h1.k.heads = 0, h1.q.out = one;                                        \
            for (int t = 0; t < 2; ++t)                                                            \
                for (int64_t h = 0; h < H; ++h) {                                                  \
                    h1.q.in = (t == 0 ? q : k) + h * L * d;                                        \
                    KERNEL(wavepe_test_isa, &h1, 0, wavepe_rope_rows(&h1));                       \
                    CHECK(memcmp(one, (t == 0 ? qo : ko) + h * L * d, sizeof(T) * (size_t)(L * d)) == 0); \
                }                                                                                  \
        }                                                                                          \
        free(q), free(k), free(qo), free(ko), free(one);                                           \
    } while (0)

static void check_large_path(void) {
    double inv[64];
    for (int64_t i = 0; i < 64; ++i) inv[i] = pow(10000.0, -2.0 * (double)i / 128.0);
    unsigned long long seed = 99;
    CHECK_LARGE_PATH(float, wavepe_rope_f32, WAVEPE_F32, (float));
    CHECK_LARGE_PATH(double, wavepe_rope_f64, WAVEPE_F64, (double));
#define BF16_OF(x) wp_f32_to_bf16((float)(x))
#define F16_OF(x) wp_f32_to_f16((float)(x))
    CHECK_LARGE_PATH(uint16_t, wavepe_rope_bf16, WAVEPE_BF16, BF16_OF);
    CHECK_LARGE_PATH(uint16_t, wavepe_rope_f16, WAVEPE_F16, F16_OF);
#undef BF16_OF
#undef F16_OF
}

void test_rope(void) {
    unsigned long long seed = 7;
    const int64_t dims[4] = {2, 6, 10, 130};
    for (int di = 0; di < 4; ++di) {
        const int64_t d = dims[di], half = d / 2;
        const int64_t pairs[4] = {0, half / 4 > 0 ? half / 4 : 1, half / 2, half};
        for (int pi = 0; pi < 4; ++pi)
            for (int layout = 0; layout < 2; ++layout)
                for (int pos_mode = 0; pos_mode < 3; ++pos_mode) {
                    const int inverse = (pi + pos_mode) % 2, transposed = (pi + layout) % 2;
                    const double scale = pi == 2 ? 1.25 : 1.0;
                    rope_case c = {2, 3, pos_mode == 1 ? 0 : 2, 37, d, pairs[pi], layout, inverse, transposed,
                                   pos_mode, pos_mode == 0 ? -5 : 11, scale, 500.0};
                    check_case(&c, &seed);
                }
    }
    /* one position, one head (decode), and a length that is a multiple of the block */
    rope_case one = {1, 1, 1, 1, 128, 64, WAVEPE_ROPE_HALF, 0, 0, 0, 4095, 1.0, 10000.0};
    check_case(&one, &seed);
    rope_case blocks = {1, 4, 2, 2 * WAVEPE_ROPE_POS_BLOCK, 128, 48, WAVEPE_ROPE_INTERLEAVED, 0, 1, 1, 0, 1.0, 1e4};
    check_case(&blocks, &seed);
    for (int layout = 0; layout < 2; ++layout) {
        check_round_trip(layout, 128, 0, &seed);
        check_round_trip(layout, 130, 1e6, &seed);
        check_round_trip(layout, 6, 77, &seed);
    }
    /* fp16 outputs in its subnormal range (scale 1e-5: |y| < 6.1e-5) */
    rope_case tiny = {1, 2, 1, 19, 40, 20, WAVEPE_ROPE_HALF, 0, 0, 0, 3, 1e-5, 1e4};
    check_case(&tiny, &seed);
    tiny.layout = WAVEPE_ROPE_INTERLEAVED;
    check_case(&tiny, &seed);
    check_half_patterns();
    check_large_positions(&seed);
    check_large_path();
    check_validation();
}
