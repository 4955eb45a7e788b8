/* test_attention.c: fused attention, scalar and the vector ISA under test,
 * every element type (float32, float64, bfloat16, float16), forward against
 * a naive double oracle (materialised scores, one row at a time), backward
 * vector against the scalar reference, validation of bad sizes. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../attention.h"
#include "../checked.h"
#include "../half.h"
#include "harness.h"

typedef struct {
    int64_t B, H, Hkv, M, N, d, off;
    int causal, bias; /* 0 none, 1 table, 2 alibi */
    int clamp, kpm;
    int packed; /* documents per batch row (cu_seqlens), 0: none */
    int64_t window; /* sliding window, 0: none */
    double softcap; /* logit soft-cap, 0: none */
} shape;

typedef struct {
    double *q, *k, *v, *table, *slopes, *dout;
    uint8_t *mask;
    int64_t R, r_lo;
    int32_t *cu; /* (B, packed + 1) document boundaries */
} inputs;

/* Keys grown along the sequence (key j times 1 + key_growth j / N) where nonzero: later key blocks then
 * hold scores well above every earlier one's, so a row's running maximum is passed by a block's -- within
 * the tiles' one-pass softmax's room and beyond it (group_softmax). */
static double key_growth;
/* table_tail (nonzero): a table of N + 5 rows whose rows at distances >= 35 are that small (past what a
 * weight in float32 can see: the tiles' forward leaves such windows out).  q_boost (nonzero): q times it,
 * k and the table divided by it (the same scores), where the table's entries alone would look negligible
 * without q's size; no float16 then (its range). */
static double table_tail, q_boost;

static void make_inputs(const shape *s, inputs *in, unsigned long long seed) {
    const int64_t nq = s->B * s->H * s->M * s->d, nk = s->B * s->Hkv * s->N * s->d;
    in->q = malloc(sizeof(double) * (size_t)(nq + 1));
    in->dout = malloc(sizeof(double) * (size_t)(nq + 1));
    in->k = malloc(sizeof(double) * (size_t)(nk + 1));
    in->v = malloc(sizeof(double) * (size_t)(nk + 1));
    for (int64_t i = 0; i < nq; ++i) in->q[i] = test_uniform(&seed, -1.5, 1.5), in->dout[i] = test_uniform(&seed, -1, 1);
    for (int64_t i = 0; i < nk; ++i) in->k[i] = test_uniform(&seed, -1.5, 1.5), in->v[i] = test_uniform(&seed, -1, 1);
    for (int64_t i = 0; i < nk && key_growth != 0.0; ++i) in->k[i] *= 1.0 + key_growth * (double)(i / s->d % s->N) / (double)s->N;
    /* a table with zero rows and zero column ranges, like a wavelet table */
    in->R = table_tail != 0.0 ? s->N + 5 : 37;
    in->r_lo = -5;
    in->table = malloc(sizeof(double) * (size_t)(in->R * s->d));
    for (int64_t r = 0; r < in->R; ++r)
        for (int64_t c = 0; c < s->d; ++c) {
            const int zero = (r % 11 == 4) || (r > 20 && c < s->d / 2);
            in->table[r * s->d + c] = zero ? 0.0 : test_uniform(&seed, -1, 1) * (r >= 40 && table_tail != 0.0 ? table_tail : 1.0);
        }
    for (int64_t i = 0; i < nq && q_boost != 0.0; ++i) in->q[i] *= q_boost;
    for (int64_t i = 0; i < nk && q_boost != 0.0; ++i) in->k[i] /= q_boost;
    for (int64_t i = 0; i < in->R * s->d && q_boost != 0.0; ++i) in->table[i] /= q_boost;
    in->slopes = malloc(sizeof(double) * (size_t)s->H);
    for (int64_t h = 0; h < s->H; ++h) in->slopes[h] = 0.5 / (double)(h + 1);
    in->mask = malloc((size_t)(s->B * s->N + 1));
    for (int64_t i = 0; i < s->B * s->N; ++i) in->mask[i] = s->kpm ? (test_uniform(&seed, 0, 1) < 0.2) : 0;
    if (s->kpm && s->N > 3) in->mask[0] = in->mask[1] = in->mask[2] = 1;
    /* documents of random lengths, an empty one and (where N allows) one of length 1 */
    in->cu = malloc(sizeof(int32_t) * (size_t)(s->B * (s->packed + 1) + 1));
    for (int64_t b = 0; b < s->B && s->packed > 0; ++b) {
        int32_t *cu = in->cu + b * (s->packed + 1);
        cu[0] = 0;
        cu[s->packed] = (int32_t)s->N;
        for (int i = 1; i < s->packed; ++i) cu[i] = (int32_t)test_uniform(&seed, 0, (double)s->N);
        for (int i = 1; i < s->packed; ++i) /* sort */
            for (int j = i; j > 1 && cu[j] < cu[j - 1]; --j) {
                const int32_t t = cu[j];
                cu[j] = cu[j - 1], cu[j - 1] = t;
            }
        if (s->packed >= 4) cu[2] = cu[1];                          /* an empty document */
        if (s->packed >= 5 && cu[3] + 1 <= cu[4]) cu[4] = cu[3] + 1; /* one of length 1 */
    }
}

/* The document of position pos in batch row b: keys [*lo, *hi) (all without packing). */
static void doc_of(const shape *s, const inputs *in, int64_t b, int64_t pos, int64_t *lo, int64_t *hi) {
    *lo = 0, *hi = s->N;
    if (s->packed == 0) return;
    const int32_t *cu = in->cu + b * (s->packed + 1);
    for (int i = 0; i < s->packed; ++i)
        if (cu[i] <= pos && pos < cu[i + 1]) *lo = cu[i], *hi = cu[i + 1];
}

static void free_inputs(inputs *in) {
    free(in->q), free(in->k), free(in->v), free(in->table), free(in->slopes), free(in->dout), free(in->mask);
    free(in->cu);
}

/* naive forward in double */
static void oracle(const shape *s, const inputs *in, double *out, double *lse) {
    const int64_t d = s->d, hg = s->H / s->Hkv;
    double *sc = malloc(sizeof(double) * (size_t)(s->N + 1));
    for (int64_t b = 0; b < s->B; ++b)
        for (int64_t h = 0; h < s->H; ++h)
            for (int64_t m = 0; m < s->M; ++m) {
                const double *q = in->q + ((b * s->H + h) * s->M + m) * d;
                const int64_t pos = s->off + m;
                int64_t dlo, dhi;
                doc_of(s, in, b, pos, &dlo, &dhi);
                double mx = -INFINITY;
                for (int64_t n = 0; n < s->N; ++n) {
                    const double *k = in->k + ((b * s->Hkv + h / hg) * s->N + n) * d;
                    if ((s->causal && n > pos) || in->mask[b * s->N + n] || n < dlo || n >= dhi ||
                        (s->window > 0 && llabs(pos - n) >= s->window)) {
                        sc[n] = -INFINITY;
                        continue;
                    }
                    double x = 0;
                    for (int64_t c = 0; c < d; ++c) x += q[c] * k[c];
                    if (s->bias == 1) {
                        int64_t i = pos - n - in->r_lo;
                        if (s->clamp) i = i < 0 ? 0 : (i >= in->R ? in->R - 1 : i);
                        if (i >= 0 && i < in->R)
                            for (int64_t c = 0; c < d; ++c) x += q[c] * in->table[i * d + c];
                    }
                    x *= 1.0 / sqrt((double)d);
                    if (s->bias == 2) x -= in->slopes[h] * (double)llabs(pos - n);
                    if (s->softcap > 0) x = s->softcap * tanh(x / s->softcap);
                    sc[n] = x;
                    if (x > mx) mx = x;
                }
                double l = 0;
                double *o = out + ((b * s->H + h) * s->M + m) * d;
                for (int64_t c = 0; c < d; ++c) o[c] = 0;
                if (mx == -INFINITY) {
                    lse[(b * s->H + h) * s->M + m] = -INFINITY;
                    continue;
                }
                for (int64_t n = 0; n < s->N; ++n) {
                    if (sc[n] == -INFINITY) continue;
                    const double p = exp(sc[n] - mx);
                    l += p;
                    const double *v = in->v + ((b * s->Hkv + h / hg) * s->N + n) * d;
                    for (int64_t c = 0; c < d; ++c) o[c] += p * v[c];
                }
                for (int64_t c = 0; c < d; ++c) o[c] /= l;
                lse[(b * s->H + h) * s->M + m] = mx + log(l);
            }
    free(sc);
}

/* Fill args for dense tensors of element type dtype (a wavepe_dtype; f64 = 1 / 0 for the
 * float64 / float32 callers). */
static void set_args(wavepe_attention_args *a, int dtype, const shape *s, const inputs *in, void *q, void *k, void *v,
                     void *table, void *slopes, void *out, void *lse) {
    *a = wavepe_attention_args_defaults();
    a->dtype = dtype;
    a->batch = s->B, a->heads = s->H, a->kv_heads = s->Hkv, a->m = s->M, a->n = s->N, a->d = s->d;
    a->q_offset = s->off, a->causal = s->causal, a->scale = 1.0 / sqrt((double)s->d);
    a->window = s->window, a->softcap = s->softcap;
    a->q = q, a->k = k, a->v = v, a->out = out, a->lse = lse;
    const int64_t qs[3] = {s->H * s->M * s->d, s->M * s->d, s->d}, ks[3] = {s->Hkv * s->N * s->d, s->N * s->d, s->d};
    memcpy(a->q_strides, qs, sizeof qs), memcpy(a->out_strides, qs, sizeof qs), memcpy(a->dout_strides, qs, sizeof qs);
    memcpy(a->k_strides, ks, sizeof ks), memcpy(a->v_strides, ks, sizeof ks);
    if (s->bias == 1) a->table = table, a->table_rows = in->R, a->r_lo = in->r_lo, a->clamp = s->clamp;
    if (s->bias == 2) a->slopes = slopes;
    if (s->kpm) a->key_padding_mask = in->mask, a->kpm_stride = s->N;
    if (s->packed) a->cu_seqlens = in->cu, a->cu_len = s->packed + 1, a->cu_stride = s->packed + 1;
}

/* x converted to element type dtype (WAVEPE_F32 = 0, WAVEPE_F64 = 1: the f64 flag of the callers). */
static void *conv(const double *x, int64_t n, int dtype) {
    void *p = malloc((size_t)(n + 1) * (size_t)wavepe_dtype_size(dtype));
    for (int64_t i = 0; i < n; ++i) {
        switch (dtype) {
        case WAVEPE_F64: ((double *)p)[i] = x[i]; break;
        case WAVEPE_BF16: ((uint16_t *)p)[i] = wp_f32_to_bf16((float)x[i]); break;
        case WAVEPE_F16: ((uint16_t *)p)[i] = wp_f32_to_f16((float)x[i]); break;
        default: ((float *)p)[i] = (float)x[i]; break;
        }
    }
    return p;
}

static double get(const void *p, int64_t i, int dtype) {
    switch (dtype) {
    case WAVEPE_F64: return ((const double *)p)[i];
    case WAVEPE_BF16: return wp_bf16_to_f32(((const uint16_t *)p)[i]);
    case WAVEPE_F16: return wp_f16_to_f32(((const uint16_t *)p)[i]);
    default: return ((const float *)p)[i];
    }
}

/* x rounded to element type dtype, back in double (the values a kernel of that type reads). */
static double *rounded(const double *x, int64_t n, int dtype) {
    void *c = conv(x, n, dtype);
    double *r = malloc(sizeof(double) * (size_t)(n + 1));
    for (int64_t i = 0; i < n; ++i) r[i] = get(c, i, dtype);
    free(c);
    return r;
}

/* Half a unit in the last place, relative, of a half type's rounding (0 for float32 / float64). */
static double half_ulp(int dtype) { return dtype == WAVEPE_BF16 ? 0x1p-8 : dtype == WAVEPE_F16 ? 0x1p-11 : 0.0; }

static int run_all(wavepe_attention_plan *plan) {
    for (int phase = 0; phase < 2; ++phase) {
        const int64_t units = wavepe_attention_units(plan, phase);
        /* uneven split into three ranges, as a thread pool might (the tiled forward's first call then runs
         * every unit: check_units_taken) */
        const int64_t cut1 = units / 3, cut2 = units - units / 5;
        int st = wavepe_attention_run(plan, phase, 0, cut1);
        if (st == WAVEPE_OK) st = wavepe_attention_run(plan, phase, cut2, units);
        if (st == WAVEPE_OK) st = wavepe_attention_run(plan, phase, cut1, cut2);
        if (st != WAVEPE_OK) return st;
    }
    return WAVEPE_OK;
}

/* A case's oracle and scalar side, kept by the first ISA pass that runs it: the suite runs once per vector ISA
 * (test_main.c) and both are the same in every pass -- computed and checked against each other once, then each later
 * pass compares its vector kernels with the kept values (on a CPU without AVX-512, make ctest-simde's four passes ran
 * the float64 oracle and the scalar forward and backward four times).  Kept to the end of the process (reachable:
 * not a leak to LeakSanitizer). */
typedef struct scalar_side {
    struct scalar_side *next;
    shape s;
    unsigned long long seed;
    double key_growth, table_tail, q_boost; /* the inputs' globals */
    int dtype;
    double *want, *want_lse;   /* the oracle (float64: float32's, of the unrounded inputs) */
    void *out, *grads[5];      /* the scalar forward's output, its backward's dq, dk, dv, dtable, dslopes */
} scalar_side;
static scalar_side *scalar_sides;

static int same_case(const scalar_side *c, const shape *s, unsigned long long seed, int dtype) {
    const shape *t = &c->s;
    return t->B == s->B && t->H == s->H && t->Hkv == s->Hkv && t->M == s->M && t->N == s->N && t->d == s->d &&
           t->off == s->off && t->causal == s->causal && t->bias == s->bias && t->clamp == s->clamp &&
           t->kpm == s->kpm && t->packed == s->packed && t->window == s->window && t->softcap == s->softcap &&
           c->seed == seed && c->key_growth == key_growth && c->table_tail == table_tail && c->q_boost == q_boost &&
           c->dtype == dtype;
}

static void *copy_of(const void *p, size_t bytes) {
    void *c = malloc(bytes);
    memcpy(c, p, bytes);
    return c;
}

/* forward (both ISAs, every type) against the oracle; backward vector vs scalar.
 * Half types: the oracle of the rounded inputs (what the kernels read); the
 * output is float32 arithmetic rounded once, so within the float32
 * tolerance plus half an ulp of the half type -- and bf16 under avx512bf16
 * (P rounded to bf16 for P V, check_bf16dot) plus 2^-8 max|v|, |v| <= 1. */
static void check_shape(const shape *s, unsigned long long seed, int expect_kind) {
    inputs in;
    make_inputs(s, &in, seed);
    const int64_t nq = s->B * s->H * s->M * s->d, nk = s->B * s->Hkv * s->N * s->d, nl = s->B * s->H * s->M;
    double *want = malloc(sizeof(double) * (size_t)(nq + 1)), *want_lse = malloc(sizeof(double) * (size_t)(nl + 1));
    for (int dtype = WAVEPE_F32; dtype <= (q_boost != 0.0 ? WAVEPE_BF16 : WAVEPE_F16); ++dtype) {
        const int f64 = dtype == WAVEPE_F64, acc = wavepe_dtype_acc(dtype);
        const double u = half_ulp(dtype);
        const int64_t counts[5] = {nq, nk, nk, in.R * s->d, s->H};
        const scalar_side *kept = scalar_sides;
        while (kept && !same_case(kept, s, seed, dtype)) kept = kept->next;
        if (kept) {
            memcpy(want, kept->want, sizeof(double) * (size_t)(nq + 1));
            memcpy(want_lse, kept->want_lse, sizeof(double) * (size_t)(nl + 1));
        } else if (dtype == WAVEPE_F32 || dtype == WAVEPE_BF16 || dtype == WAVEPE_F16) {
            inputs rin = in; /* the inputs as the kernels of this type read them */
            rin.q = rounded(in.q, nq, dtype), rin.k = rounded(in.k, nk, dtype), rin.v = rounded(in.v, nk, dtype);
            rin.table = rounded(in.table, in.R * s->d, dtype);
            if (dtype == WAVEPE_F32) /* float32: against the unrounded oracle, as always */
                free(rin.q), free(rin.k), free(rin.v), free(rin.table), rin = in;
            oracle(s, &rin, want, want_lse);
            if (dtype != WAVEPE_F32) free(rin.q), free(rin.k), free(rin.v), free(rin.table);
        }
        void *q = conv(in.q, nq, dtype), *k = conv(in.k, nk, dtype), *v = conv(in.v, nk, dtype);
        void *tab = conv(in.table, in.R * s->d, dtype), *sl = conv(in.slopes, s->H, acc);
        void *dout = conv(in.dout, nq, dtype);
        void *grads[2][5];
        void *out_scalar = NULL; /* both backwards read the scalar forward's output (their saved output must be
                                    the same: avx512bf16's bf16 differs from it by P's rounding) */
        for (int isa = 0; isa < 2; ++isa) {
            if (isa == 0 && kept) { /* the scalar side, as an earlier pass ran and checked it */
                out_scalar = copy_of(kept->out, 8 * (size_t)(nq + 1));
                for (int g = 0; g < 5; ++g) grads[0][g] = copy_of(kept->grads[g], 8 * (size_t)(counts[g] + 1));
                continue;
            }
            const wavepe_isa which = isa ? wavepe_test_isa : WAVEPE_ISA_SCALAR;
            void *out = calloc((size_t)nq + 1, 8), *lse = calloc((size_t)nl + 1, 8);
            wavepe_attention_args a;
            set_args(&a, dtype, s, &in, q, k, v, tab, sl, out, lse);
            wavepe_attention_plan *plan;
            CHECK(wavepe_attention_fwd_plan(which, &a, &plan, NULL) == WAVEPE_OK);
            if (isa && which != WAVEPE_ISA_SCALAR && expect_kind >= 0) CHECK(wavepe_attention_plan_kind(plan) == expect_kind);
            CHECK(run_all(plan) == WAVEPE_OK);
            wavepe_attention_plan_free(plan);
            const double tol = f64 ? 1e-12 : 2e-5;
            /* P rounded to the input type for P V: avx512bf16's bf16 forward, the amx ISA's tiles (bf16, fp16) */
            const double pv = which == WAVEPE_ISA_AMX && u > 0                   ? 2 * u
                              : dtype == WAVEPE_BF16 && which == WAVEPE_ISA_AVX512BF16 ? 0x1p-8
                                                                                   : 0.0;
            for (int64_t i = 0; i < nq; ++i) CHECK_CLOSE(get(out, i, dtype), want[i], tol + u, tol + pv);
            for (int64_t i = 0; i < nl; ++i) { /* lse: float32 whatever the half type */
                if (want_lse[i] == -INFINITY) CHECK(get(lse, i, acc) == -INFINITY);
                else CHECK_CLOSE(get(lse, i, acc), want_lse[i], tol, tol);
            }
            /* backward */
            void *dq = calloc((size_t)nq + 1, 8), *dk = calloc((size_t)nk + 1, 8), *dv = calloc((size_t)nk + 1, 8);
            void *dt = calloc((size_t)(in.R * s->d) + 1, 8), *dsl = calloc((size_t)s->H + 1, 8);
            a.dout = dout;
            if (isa) a.out = out_scalar;
            a.dq = dq, a.dk = dk, a.dv = dv;
            if (s->bias == 1) a.dtable = dt;
            if (s->bias == 2) a.dslopes = dsl;
            CHECK(wavepe_attention_bwd_plan(which, &a, &plan, NULL) == WAVEPE_OK);
            CHECK(run_all(plan) == WAVEPE_OK);
            wavepe_attention_plan_free(plan);
            grads[isa][0] = dq, grads[isa][1] = dk, grads[isa][2] = dv, grads[isa][3] = dt, grads[isa][4] = dsl;
            if (isa) free(out);
            else out_scalar = out;
            free(lse);
        }
        if (!kept) { /* kept for the later passes */
            scalar_side *c = calloc(1, sizeof *c);
            c->next = scalar_sides, c->s = *s, c->seed = seed, c->dtype = dtype;
            c->key_growth = key_growth, c->table_tail = table_tail, c->q_boost = q_boost;
            c->want = copy_of(want, sizeof(double) * (size_t)(nq + 1));
            c->want_lse = copy_of(want_lse, sizeof(double) * (size_t)(nl + 1));
            c->out = copy_of(out_scalar, 8 * (size_t)(nq + 1));
            for (int g = 0; g < 5; ++g) c->grads[g] = copy_of(grads[0][g], 8 * (size_t)(counts[g] + 1));
            scalar_sides = c;
        }
        free(out_scalar);
        const double tol = f64 ? 1e-10 : 1e-4;
        for (int g = 0; g < 5; ++g) {
            const int gt = g == 4 ? acc : dtype; /* dslopes: the accumulator type */
            if (q_boost != 0.0) { /* (dk and the table's gradient grow with q, their absolute tolerance not) */
                free(grads[0][g]), free(grads[1][g]);
                continue;
            }
            /* the amx ISA's bf16 backward rounds P and dS to bf16 for its accumulating products: a gradient
             * moves by up to 2^-8 of the sum of its terms' magnitudes (tests/tolerances.py, grad_atol) */
            double ds_atol = 0.0;
            if (wavepe_test_isa == WAVEPE_ISA_AMX && dtype == WAVEPE_BF16)
                for (int64_t i = 0; i < counts[g]; ++i) ds_atol = fmax(ds_atol, 0x1p-7 * fabs(get(grads[0][g], i, gt)));
            for (int64_t i = 0; i < counts[g]; ++i) /* half types: each side rounded once, maybe apart */
                CHECK_CLOSE(get(grads[1][g], i, gt), get(grads[0][g], i, gt), tol + 2 * u, tol + ds_atol);
            free(grads[0][g]), free(grads[1][g]);
        }
        free(q), free(k), free(v), free(tab), free(sl), free(dout);
    }
    free(want), free(want_lse);
    free_inputs(&in);
}

/* The tiled forward's units are taken: one call over a single unit's range (the last, or the first) runs
 * every unit no call has begun, and its outputs are those of one call over them all, bit for bit; a call
 * over a range already done changes nothing. */
static void check_units_taken(const shape *s) {
    if (wavepe_test_isa == WAVEPE_ISA_SCALAR) return; /* (no vector ISA: the scalar plans assign their units) */
    inputs in;
    make_inputs(s, &in, 3000);
    const int64_t nq = s->B * s->H * s->M * s->d, nk = s->B * s->Hkv * s->N * s->d, nl = s->B * s->H * s->M;
    const int dtypes[2] = {WAVEPE_F32, WAVEPE_BF16};
    for (int di = 0; di < 2; ++di) {
        const int dtype = dtypes[di], acc = wavepe_dtype_acc(dtype);
        const size_t esz = (size_t)wavepe_dtype_size(dtype), asz = (size_t)wavepe_dtype_size(acc);
        void *q = conv(in.q, nq, dtype), *k = conv(in.k, nk, dtype), *v = conv(in.v, nk, dtype);
        void *tab = conv(in.table, in.R * s->d, dtype), *sl = conv(in.slopes, s->H, acc);
        void *out[3], *lse[3];
        for (int run = 0; run < 3; ++run) {
            out[run] = calloc((size_t)nq + 1, esz), lse[run] = calloc((size_t)nl + 1, asz);
            wavepe_attention_args a;
            set_args(&a, dtype, s, &in, q, k, v, tab, sl, out[run], lse[run]);
            wavepe_attention_plan *plan;
            CHECK(wavepe_attention_fwd_plan(wavepe_test_isa, &a, &plan, NULL) == WAVEPE_OK);
            CHECK(wavepe_attention_plan_kind(plan) == 1);
            const int64_t units = wavepe_attention_units(plan, 0);
            CHECK(units >= 4);
            if (run == 0) CHECK(wavepe_attention_run(plan, 0, 0, units) == WAVEPE_OK);
            if (run == 1) CHECK(wavepe_attention_run(plan, 0, units - 1, units) == WAVEPE_OK);
            if (run == 2) { /* every unit done by the first call: the later ones write nothing */
                CHECK(wavepe_attention_run(plan, 0, 0, 1) == WAVEPE_OK);
                unsigned char *done = malloc((size_t)nq * esz), *marks = malloc((size_t)nq * esz);
                memcpy(done, out[2], (size_t)nq * esz);
                memset(out[2], 0xA5, (size_t)nq * esz);
                memset(marks, 0xA5, (size_t)nq * esz);
                CHECK(wavepe_attention_run(plan, 0, 1, units) == WAVEPE_OK);
                CHECK(wavepe_attention_run(plan, 0, 0, units) == WAVEPE_OK);
                CHECK(memcmp(out[2], marks, (size_t)nq * esz) == 0);
                memcpy(out[2], done, (size_t)nq * esz);
                free(done), free(marks);
            }
            CHECK(wavepe_attention_units(plan, 1) == 0);
            wavepe_attention_plan_free(plan);
        }
        for (int run = 1; run < 3; ++run) {
            CHECK(memcmp(out[run], out[0], (size_t)nq * esz) == 0);
            CHECK(memcmp(lse[run], lse[0], (size_t)nl * asz) == 0);
        }
        for (int run = 0; run < 3; ++run) free(out[run]), free(lse[run]);
        free(q), free(k), free(v), free(tab), free(sl);
    }
    free_inputs(&in);
}

/* Backward of the scalar reference against central differences (double): a clamped table, and a
 * window with a soft-cap (its 1 - tanh^2 factor). */
static void check_gradient_fd(shape s) {
    inputs in;
    make_inputs(&s, &in, 77);
    const int64_t nq = s.H * s.M * s.d, nk = s.N * s.d, nl = s.H * s.M;
    double *out = calloc((size_t)nq, 8), *lse = calloc((size_t)nl, 8);
    double *dq = calloc((size_t)nq, 8), *dk = calloc((size_t)nk, 8), *dv = calloc((size_t)nk, 8);
    double *dt = calloc((size_t)(in.R * s.d), 8);
    wavepe_attention_args a;
    set_args(&a, 1, &s, &in, in.q, in.k, in.v, in.table, in.slopes, out, lse);
    wavepe_attention_plan *plan;
    CHECK(wavepe_attention_fwd_plan(WAVEPE_ISA_SCALAR, &a, &plan, NULL) == WAVEPE_OK);
    CHECK(run_all(plan) == WAVEPE_OK);
    wavepe_attention_plan_free(plan);
    a.dout = in.dout, a.dq = dq, a.dk = dk, a.dv = dv, a.dtable = dt;
    CHECK(wavepe_attention_bwd_plan(WAVEPE_ISA_SCALAR, &a, &plan, NULL) == WAVEPE_OK);
    CHECK(run_all(plan) == WAVEPE_OK);
    wavepe_attention_plan_free(plan);
    /* loss = sum(out * dout); perturb a few entries of q, k, table */
    double *targets[3] = {in.q, in.k, in.table};
    double *grads[3] = {dq, dk, dt};
    const int64_t idx[3][3] = {{0, 7, 20}, {1, 9, 25}, {3 * 3 + 1, 4 * 3, 6 * 3 + 2}};
    double *o2 = calloc((size_t)nq, 8), *l2 = calloc((size_t)nl, 8);
    for (int t = 0; t < 3; ++t)
        for (int j = 0; j < 3; ++j) {
            double *x = &targets[t][idx[t][j]];
            const double x0 = *x, hstep = 1e-6;
            double f[2];
            for (int sgn = 0; sgn < 2; ++sgn) {
                *x = x0 + (sgn ? hstep : -hstep);
                wavepe_attention_args b;
                set_args(&b, 1, &s, &in, in.q, in.k, in.v, in.table, in.slopes, o2, l2);
                CHECK(wavepe_attention_fwd_plan(WAVEPE_ISA_SCALAR, &b, &plan, NULL) == WAVEPE_OK);
                CHECK(run_all(plan) == WAVEPE_OK);
                wavepe_attention_plan_free(plan);
                f[sgn] = 0;
                for (int64_t i = 0; i < nq; ++i) f[sgn] += o2[i] * in.dout[i];
            }
            *x = x0;
            CHECK_CLOSE(grads[t][idx[t][j]], (f[1] - f[0]) / (2 * hstep), 1e-6, 1e-8);
        }
    free(out), free(lse), free(dq), free(dk), free(dv), free(dt), free(o2), free(l2);
    free_inputs(&in);
}

/* mark_neg_inf: batch 0's keys all score -inf (k[..., 0] = -inf, q[..., 0] > 0): NaN rows without the flag,
 * out = 0 and lse = +inf with it; batch 1's keys only in the second half (finite rows, the same either way).
 * The backward of the marked rows: nothing (dk = dv = 0 for batch 0; dq = 0 outside column 0, where the
 * vector kernels' block product adds 0 * -inf). */
static void check_mark_neg_inf(const shape *s, int expect_kind) {
    inputs in;
    make_inputs(s, &in, 4242);
    const int64_t nq = s->B * s->H * s->M * s->d, nk = s->B * s->Hkv * s->N * s->d, nl = s->B * s->H * s->M;
    for (int64_t i = 0; i < nq; i += s->d) in.q[i] = fabs(in.q[i]) + 0.5;
    for (int64_t b = 0; b < s->B; ++b)
        for (int64_t hk = 0; hk < s->Hkv; ++hk)
            for (int64_t n = b == 0 ? 0 : s->N / 2; n < s->N; ++n) in.k[((b * s->Hkv + hk) * s->N + n) * s->d] = -INFINITY;
    for (int f64 = 0; f64 < 2; ++f64) {
        void *q = conv(in.q, nq, f64), *k = conv(in.k, nk, f64), *v = conv(in.v, nk, f64);
        void *tab = conv(in.table, in.R * s->d, f64), *sl = conv(in.slopes, s->H, f64), *dout = conv(in.dout, nq, f64);
        for (int isa = 0; isa < 2; ++isa) {
            const wavepe_isa which = isa ? wavepe_test_isa : WAVEPE_ISA_SCALAR;
            void *out[2], *lse[2];
            wavepe_attention_args a;
            for (int mark = 0; mark < 2; ++mark) {
                out[mark] = calloc((size_t)nq + 1, 8), lse[mark] = calloc((size_t)nl + 1, 8);
                set_args(&a, f64, s, &in, q, k, v, tab, sl, out[mark], lse[mark]);
                a.mark_neg_inf = mark;
                wavepe_attention_plan *plan;
                CHECK(wavepe_attention_fwd_plan(which, &a, &plan, NULL) == WAVEPE_OK);
                if (isa && which != WAVEPE_ISA_SCALAR) CHECK(wavepe_attention_plan_kind(plan) == expect_kind);
                CHECK(run_all(plan) == WAVEPE_OK);
                wavepe_attention_plan_free(plan);
            }
            const int64_t rows0 = s->H * s->M; /* batch 0's rows come first */
            for (int64_t i = 0; i < nl; ++i) {
                const double l0 = get(lse[0], i, f64), l1 = get(lse[1], i, f64);
                if (i < rows0) {
                    CHECK(isnan(l0) && l1 == INFINITY);
                    for (int64_t c = 0; c < s->d; ++c)
                        CHECK(isnan(get(out[0], i * s->d + c, f64)) && get(out[1], i * s->d + c, f64) == 0.0);
                } else {
                    CHECK(isfinite(l1) && l1 == l0);
                    for (int64_t c = 0; c < s->d; ++c) CHECK(get(out[1], i * s->d + c, f64) == get(out[0], i * s->d + c, f64));
                }
            }
            void *dq = calloc((size_t)nq + 1, 8), *dk = calloc((size_t)nk + 1, 8), *dv = calloc((size_t)nk + 1, 8);
            void *dt = calloc((size_t)(in.R * s->d) + 1, 8), *dsl = calloc((size_t)s->H + 1, 8);
            set_args(&a, f64, s, &in, q, k, v, tab, sl, out[1], lse[1]);
            a.dout = dout, a.dq = dq, a.dk = dk, a.dv = dv;
            if (s->bias == 1) a.dtable = dt;
            if (s->bias == 2) a.dslopes = dsl;
            wavepe_attention_plan *plan;
            CHECK(wavepe_attention_bwd_plan(which, &a, &plan, NULL) == WAVEPE_OK);
            CHECK(run_all(plan) == WAVEPE_OK);
            wavepe_attention_plan_free(plan);
            for (int64_t i = 0; i < rows0; ++i)
                for (int64_t c = 1; c < s->d; ++c) CHECK(get(dq, i * s->d + c, f64) == 0.0);
            for (int64_t i = 0; i < s->Hkv * s->N * s->d; ++i) CHECK(get(dk, i, f64) == 0.0 && get(dv, i, f64) == 0.0);
            free(dq), free(dk), free(dv), free(dt), free(dsl);
            for (int mark = 0; mark < 2; ++mark) free(out[mark]), free(lse[mark]);
        }
        free(q), free(k), free(v), free(tab), free(sl), free(dout);
    }
    free_inputs(&in);
}

/* Tiles of a row (queries [q0, q1) x keys [k0, k1), the boundaries shifted by k0, q_offset = q0 - k0: what
 * wavepe.distributed's ring calls) with the whole row's out and lse: their backward sums to the row's
 * (the key blocks' query ranges must come from the documents as they are, past the tile's keys). */
static void check_tiles_sum(const shape *s) {
    inputs in;
    make_inputs(s, &in, 777);
    const int64_t nq = s->B * s->H * s->M * s->d, nk = s->B * s->Hkv * s->N * s->d, nl = s->B * s->H * s->M;
    const int64_t cuts[] = {0, 37, 101, 150, s->N};
    const int ncuts = 5, cl = s->packed + 1;
    int32_t *shifted = malloc(sizeof(int32_t) * (size_t)(s->B * cl + 1));
    for (int isa = 0; isa < 2; ++isa) {
        const wavepe_isa which = isa ? wavepe_test_isa : WAVEPE_ISA_SCALAR;
        double *out = calloc((size_t)nq + 1, 8), *lse = calloc((size_t)nl + 1, 8);
        double *whole[3], *sum[3];
        const int64_t counts[3] = {nq, nk, nk};
        for (int g = 0; g < 3; ++g) whole[g] = calloc((size_t)counts[g] + 1, 8), sum[g] = calloc((size_t)counts[g] + 1, 8);
        wavepe_attention_args a;
        set_args(&a, 1, s, &in, in.q, in.k, in.v, in.table, in.slopes, out, lse);
        wavepe_attention_plan *plan;
        CHECK(wavepe_attention_fwd_plan(which, &a, &plan, NULL) == WAVEPE_OK);
        CHECK(run_all(plan) == WAVEPE_OK);
        wavepe_attention_plan_free(plan);
        a.dout = in.dout, a.dq = whole[0], a.dk = whole[1], a.dv = whole[2];
        CHECK(wavepe_attention_bwd_plan(which, &a, &plan, NULL) == WAVEPE_OK);
        CHECK(run_all(plan) == WAVEPE_OK);
        wavepe_attention_plan_free(plan);
        for (int qi = 0; qi + 1 < ncuts; ++qi)
            for (int ki = 0; ki + 1 < ncuts; ++ki) {
                const int64_t q0 = cuts[qi], q1 = cuts[qi + 1], k0 = cuts[ki], k1 = cuts[ki + 1];
                const int64_t tq = s->B * s->H * (q1 - q0) * s->d, tk = s->B * s->Hkv * (k1 - k0) * s->d;
                double *dq = calloc((size_t)tq + 1, 8), *dk = calloc((size_t)tk + 1, 8), *dv = calloc((size_t)tk + 1, 8);
                double *tlse = malloc(sizeof(double) * (size_t)(s->B * s->H * (q1 - q0) + 1));
                for (int64_t bh = 0; bh < s->B * s->H; ++bh)
                    for (int64_t m = q0; m < q1; ++m) tlse[bh * (q1 - q0) + m - q0] = lse[bh * s->M + m];
                for (int64_t i = 0; i < s->B * cl && s->packed; ++i) shifted[i] = in.cu[i] - (int32_t)k0;
                wavepe_attention_args t = a;
                t.m = q1 - q0, t.n = k1 - k0, t.q_offset = q0 - k0;
                t.q = in.q + q0 * s->d, t.out = out + q0 * s->d, t.dout = in.dout + q0 * s->d;
                t.k = in.k + k0 * s->d, t.v = in.v + k0 * s->d;
                t.lse = tlse, t.cu_seqlens = s->packed ? shifted : NULL;
                t.dq = dq, t.dk = dk, t.dv = dv;
                CHECK(wavepe_attention_bwd_plan(which, &t, &plan, NULL) == WAVEPE_OK);
                CHECK(run_all(plan) == WAVEPE_OK);
                wavepe_attention_plan_free(plan);
                for (int64_t bh = 0; bh < s->B * s->H; ++bh)
                    for (int64_t m = 0; m < q1 - q0; ++m)
                        for (int64_t c = 0; c < s->d; ++c)
                            sum[0][(bh * s->M + q0 + m) * s->d + c] += dq[(bh * (q1 - q0) + m) * s->d + c];
                for (int64_t bh = 0; bh < s->B * s->Hkv; ++bh)
                    for (int64_t n = 0; n < k1 - k0; ++n)
                        for (int64_t c = 0; c < s->d; ++c) {
                            sum[1][(bh * s->N + k0 + n) * s->d + c] += dk[(bh * (k1 - k0) + n) * s->d + c];
                            sum[2][(bh * s->N + k0 + n) * s->d + c] += dv[(bh * (k1 - k0) + n) * s->d + c];
                        }
                free(dq), free(dk), free(dv), free(tlse);
            }
        for (int g = 0; g < 3; ++g) {
            for (int64_t i = 0; i < counts[g]; ++i) CHECK_CLOSE(sum[g][i], whole[g][i], 1e-10, 1e-12);
            free(whole[g]), free(sum[g]);
        }
        free(out), free(lse);
    }
    free(shifted);
    free_inputs(&in);
}

#if defined(__x86_64__) || defined(_M_X64)
/* One bf16 forward of shape s with the given ISA into out (B*H*M*d bf16) and lse (float32). */
static void bf16_forward(wavepe_isa isa, const shape *s, const inputs *in, const void *q, const void *k,
                         const void *v, const void *tab, const void *sl, void *out, void *lse, int mark_neg_inf) {
    wavepe_attention_args a;
    set_args(&a, WAVEPE_BF16, s, in, (void *)q, (void *)k, (void *)v, (void *)tab, (void *)sl, out, lse);
    a.mark_neg_inf = mark_neg_inf;
    wavepe_attention_plan *plan;
    CHECK(wavepe_attention_fwd_plan(isa, &a, &plan, NULL) == WAVEPE_OK);
    CHECK(run_all(plan) == WAVEPE_OK);
    wavepe_attention_plan_free(plan);
}

/* avx512bf16's bfloat16 scores, bias window (vdpbf16ps on the stored pairs, attention_engine_pairs.h's mk_dp) and P V (mk_dpv) against the
 * float64 oracle of the rounded inputs, with the bound of the scores' rounding:
 *   |score - exact| <= (d + 3) 2^-24 scale sum_c |q_c k_c| (to first order; + the bias, alike):
 *   exact bf16 products, ceil(d/2) steps of two rounded additions each (d in all), the scale and the
 *   bias in one fused multiply-add; the float32 path's own bound is alike ((d + 2) 2^-24 ...: scale q_c
 *   rounded, d fused multiply-adds).  With |q|, |k| <= 1.5,
 *   sum_c |q_c k_c| <= 2.25 d.  A score error ds moves lse by at most ds and out by at most
 *   2 ds max|v| (softmax weights move by sum_j |dp_j| <= 2 ds), |v| <= 1; the rest (exp, P V, the
 *   divide) is the float32 path's, within check_shape's 2e-5, except that the wide forward's P is
 *   rounded to bf16 for P V: out moves by at most 2^-8 max|v| = 2^-8 more; out is rounded once to bf16
 *   (half an ulp, 2^-8 relative).
 * The same inputs under avx512 (the float32 path) agree within the same bounds but not bit for bit
 * (one lse and one out at least differ: the new kernels ran).  The tables are zero in columns < 3 and >= d - 3, so that
 * q . T runs over pairs cut at both ends (odd first or last column).  Non-finite q / k: NaN and inf where
 * avx512 has them (the products are of the same elements), also with mark_neg_inf and an inf in q where the
 * table is zero (column 2) facing keys that are all negative there (every score -inf: out 0, lse +inf). */
static void check_bf16dot(void) {
    /* B, H, Hkv, M, N, d, off, causal, bias, clamp, kpm, packed */
    const shape shapes[] = {
        {2, 2, 1, 40, 300, 20, 260, 1, 1, 0, 0, 0, 0, 0.0},  /* tiled, table bias, GQA */
        {1, 2, 2, 50, 290, 9, 240, 1, 2, 0, 1, 0, 0, 0.0},   /* odd d (a padded pair), ALiBi, key padding */
        {1, 1, 1, 13, 77, 1, 0, 0, 0, 0, 0, 0, 0, 0.0},      /* d = 1: one pair, half padding */
        {1, 3, 3, 101, 101, 33, 0, 0, 1, 1, 0, 0, 0, 0.0},   /* odd d, clamped table */
        {2, 2, 1, 3, 700, 24, 697, 1, 1, 0, 1, 0, 0, 0.0},   /* decode path (split keys), 6-row groups */
        {1, 2, 1, 120, 400, 12, 250, 1, 1, 0, 0, 6, 0, 0.0}, /* packed documents */
    };
    int any_differs = 0, any_out_differs = 0;
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; ++si) {
        const shape *s = &shapes[si];
        inputs in;
        make_inputs(s, &in, 5150 + si);
        for (int64_t r = 0; r < in.R; ++r)
            for (int64_t c = 0; c < s->d; ++c)
                if (s->d >= 8 && (c < 3 || c >= s->d - 3)) in.table[r * s->d + c] = 0.0;
        const int64_t nq = s->B * s->H * s->M * s->d, nk = s->B * s->Hkv * s->N * s->d, nl = s->B * s->H * s->M;
        inputs rin = in;
        rin.q = rounded(in.q, nq, WAVEPE_BF16), rin.k = rounded(in.k, nk, WAVEPE_BF16);
        rin.v = rounded(in.v, nk, WAVEPE_BF16), rin.table = rounded(in.table, in.R * s->d, WAVEPE_BF16);
        double *want = malloc(sizeof(double) * (size_t)(nq + 1)), *want_lse = malloc(sizeof(double) * (size_t)(nl + 1));
        oracle(s, &rin, want, want_lse);
        void *q = conv(in.q, nq, WAVEPE_BF16), *k = conv(in.k, nk, WAVEPE_BF16), *v = conv(in.v, nk, WAVEPE_BF16);
        void *tab = conv(in.table, in.R * s->d, WAVEPE_BF16), *sl = conv(in.slopes, s->H, WAVEPE_F32);
        const double scale = 1.0 / sqrt((double)s->d);
        const double ds = ((double)s->d + 3) * 0x1p-24 * scale * 2.25 * (double)s->d;
        void *out[2], *lse[2];
        for (int which = 0; which < 2; ++which) {
            out[which] = calloc((size_t)nq + 1, 2), lse[which] = calloc((size_t)nl + 1, 4);
            bf16_forward(which ? WAVEPE_ISA_AVX512BF16 : WAVEPE_ISA_AVX512, s, &in, q, k, v, tab, sl, out[which],
                         lse[which], 0);
            for (int64_t i = 0; i < nq; ++i)
                CHECK_CLOSE(get(out[which], i, WAVEPE_BF16), want[i], 0x1p-8, 2e-5 + 2 * ds + 0x1p-8);
            for (int64_t i = 0; i < nl; ++i) {
                if (want_lse[i] == -INFINITY) CHECK(get(lse[which], i, WAVEPE_F32) == -INFINITY);
                else CHECK_CLOSE(get(lse[which], i, WAVEPE_F32), want_lse[i], 2e-5, 2e-5 + ds);
            }
        }
        for (int64_t i = 0; i < nl; ++i) any_differs |= get(lse[0], i, WAVEPE_F32) != get(lse[1], i, WAVEPE_F32);
        for (int64_t i = 0; i < nq; ++i) any_out_differs |= get(out[0], i, WAVEPE_BF16) != get(out[1], i, WAVEPE_BF16);

        /* non-finite elements: infs in query rows, a NaN key (causal: the last), an inf key */
        uint16_t *qh = q, *kh = k;
        qh[1 * s->d] = wp_f32_to_bf16(INFINITY);
        if (nq > 3 * s->d) qh[3 * s->d + s->d - 1] = wp_f32_to_bf16(-INFINITY);
        if (s->causal) kh[(s->N - 1) * s->d] = wp_f32_to_bf16(NAN); /* seen by the last rows only */
        if (s->N > 5) kh[5 * s->d + s->d / 2] = wp_f32_to_bf16(INFINITY);
        for (int mark = 0; mark < 2; ++mark) {
            if (mark && s->d >= 8) { /* row 2: q = +inf at column 2, every key -0.5 there (and key 5 finite) */
                qh[2 * s->d + 2] = wp_f32_to_bf16(INFINITY);
                if (s->N > 5) kh[5 * s->d + s->d / 2] = wp_f32_to_bf16(0.25f);
                for (int64_t j = 0; j < nk / s->d; ++j) kh[j * s->d + 2] = wp_f32_to_bf16(-0.5f);
            }
            for (int which = 0; which < 2; ++which)
                bf16_forward(which ? WAVEPE_ISA_AVX512BF16 : WAVEPE_ISA_AVX512, s, &in, q, k, v, tab, sl, out[which],
                             lse[which], mark);
            for (int64_t i = 0; i < nq; ++i) {
                const double x = get(out[1], i, WAVEPE_BF16), y = get(out[0], i, WAVEPE_BF16);
                if (isnan(y) || isinf(y)) CHECK((isnan(x) && isnan(y)) || x == y);
                else CHECK_CLOSE(x, y, 2 * 0x1p-8, 4e-5 + 4 * ds + 0x1p-8);
            }
            for (int64_t i = 0; i < nl; ++i) {
                const double x = get(lse[1], i, WAVEPE_F32), y = get(lse[0], i, WAVEPE_F32);
                if (isnan(y) || isinf(y)) CHECK((isnan(x) && isnan(y)) || x == y);
                else CHECK_CLOSE(x, y, 4e-5, 4e-5 + 2 * ds);
            }
            if (mark && s->d >= 8 && s->bias == 1 && !s->kpm && s->M > 2) /* the case it sets up: out 0, lse +inf */
                CHECK(get(lse[1], 2, WAVEPE_F32) == INFINITY);
        }
        for (int which = 0; which < 2; ++which) free(out[which]), free(lse[which]);
        free(q), free(k), free(v), free(tab), free(sl), free(want), free(want_lse);
        free(rin.q), free(rin.k), free(rin.v), free(rin.table);
        free_inputs(&in);
    }
    CHECK(any_differs);
    CHECK(any_out_differs);
}
#endif

void test_attention(void) {
    /* B, H, Hkv, M, N, d, off, causal, bias, clamp, kpm */
    const shape shapes[] = {
        {1, 1, 1, 1, 1, 4, 0, 1, 0, 0, 0, 0, 0, 0.0},       /* narrow decode: one key block (here one key) */
        {2, 4, 2, 7, 40, 5, 33, 1, 1, 0, 0, 0, 0, 0.0},     /* decode, one key block, 14 rows per kv head */
        {1, 2, 1, 100, 300, 20, 200, 1, 1, 0, 0, 0, 0, 0.0},
        {1, 3, 3, 101, 101, 16, 0, 0, 1, 1, 0, 0, 0, 0.0},
        {1, 2, 2, 50, 290, 9, 240, 1, 2, 0, 1, 0, 0, 0.0},
        {2, 2, 1, 3, 700, 24, 697, 1, 1, 0, 1, 0, 0, 0.0},  /* decode path */
        {1, 2, 1, 2, 600, 8, 10, 0, 2, 0, 0, 0, 0, 0.0},    /* decode, not causal */
        {1, 1, 1, 70, 30, 17, -20, 1, 0, 0, 0, 0, 0, 0.0},   /* rows with no key */
        {1, 2, 2, 33, 260, 33, 5, 0, 1, 0, 1, 0, 0, 0.0},
        {1, 1, 1, 0, 5, 4, 0, 1, 1, 0, 0, 0, 0, 0.0},
        {1, 1, 1, 4, 0, 4, 0, 1, 1, 0, 0, 0, 0, 0.0},
        {1, 3, 3, 1, 900, 20, 899, 1, 1, 0, 1, 0, 0, 0.0},  /* narrow decoding: one row */
        {1, 2, 1, 1, 530, 13, 529, 1, 2, 0, 0, 0, 0, 0.0},  /* narrow: two heads share a kv head */
        {1, 1, 1, 2, 777, 7, 900, 0, 1, 1, 0, 0, 0, 0.0},   /* narrow, two rows, clamped table */
        /* packed sequences: documents along the row (cu_seqlens) */
        {2, 4, 2, 300, 300, 20, 0, 1, 1, 0, 0, 6, 0, 0.0},
        {1, 2, 1, 257, 257, 16, 0, 0, 1, 1, 0, 5, 0, 0.0},
        {1, 2, 2, 190, 190, 9, 0, 1, 2, 0, 1, 7, 0, 0.0},
        {2, 3, 1, 600, 600, 8, 0, 0, 0, 0, 0, 9, 0, 0.0},
        {1, 2, 1, 120, 400, 12, 250, 1, 1, 0, 0, 6, 0, 0.0}, /* a chunk of queries inside a packed row */
        {1, 2, 1, 3, 700, 24, 697, 1, 1, 0, 1, 5, 0, 0.0},   /* decode path */
        {1, 2, 2, 1, 530, 13, 300, 0, 2, 0, 0, 4, 0, 0.0},   /* narrow decode, not causal */
        /* sliding windows (Mistral's rule when causal, |r| < window otherwise) and logit soft-caps */
        {1, 2, 1, 500, 500, 16, 0, 1, 1, 0, 0, 0, 37, 0.0},    /* tiled: blocks outside every row's window */
        {2, 2, 2, 300, 300, 9, 0, 0, 2, 0, 1, 0, 50, 0.0},     /* not causal, ALiBi, padding */
        {1, 4, 2, 3, 1500, 20, 1497, 1, 1, 0, 0, 0, 200, 0.0}, /* decode: chunks of the window only */
        {1, 2, 1, 1, 2000, 8, 1999, 1, 1, 0, 1, 0, 5, 0.0},    /* narrow decode, a window of 5 */
        {1, 2, 1, 1, 300, 8, 100, 0, 0, 0, 0, 0, 64, 0.0},     /* narrow decode, not causal */
        {1, 2, 1, 257, 257, 16, 0, 1, 1, 0, 0, 5, 40, 0.0},    /* packed documents and a window */
        {1, 2, 1, 100, 300, 20, 200, 1, 1, 0, 0, 0, 0, 1.5},   /* soft-cap that bites (scores reach ~3) */
        {1, 3, 3, 101, 101, 16, 0, 0, 2, 0, 1, 0, 0, 0.8},     /* soft-cap, ALiBi, padding */
        {2, 2, 1, 3, 700, 24, 697, 1, 1, 0, 0, 0, 0, 2.0},     /* soft-cap, decode */
        {1, 4, 2, 200, 400, 12, 200, 1, 1, 1, 1, 0, 60, 1.0},  /* window, soft-cap, clamp, padding, GQA */
        {1, 2, 1, 1, 530, 13, 529, 1, 2, 0, 0, 0, 100, 0.9},   /* narrow decode: window and soft-cap */
    };
    const int kinds[] = {2, 2, 1, 1, 1, 2, 2, 1, 1, -1, -1, 2, 2, 2, 1, 1, 1, 1, 1, 2, 2,
                         1, 1, 2, 2, 2, 1, 1, 1, 2, 1, 2};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; ++i) check_shape(&shapes[i], 1000 + i, kinds[i]);
    /* scores rising block after block (key_growth): table bias, and none with padding */
    key_growth = 8.0;
    check_shape(&(shape){1, 2, 1, 300, 800, 16, 500, 1, 1, 0, 0, 0, 0, 0.0}, 2000, -1);
    check_shape(&(shape){1, 2, 2, 200, 700, 8, 500, 1, 0, 0, 1, 0, 0, 0.0}, 2001, -1);
    key_growth = 0.0;
    /* a table's far rows below what float32 weights can see (left out of the tiles' windows), and the same
     * scores with q 2^28 times larger, k and the table smaller: nothing may be left out there */
    table_tail = 0x1p-40;
    check_shape(&(shape){1, 2, 1, 300, 300, 16, 0, 1, 1, 0, 0, 0, 0, 0.0}, 2100, -1);
    check_shape(&(shape){1, 1, 1, 200, 330, 24, 130, 0, 1, 0, 1, 0, 0, 0.0}, 2101, -1);
    table_tail = 0.0, q_boost = 0x1p28;
    check_shape(&(shape){1, 2, 1, 300, 300, 16, 0, 1, 1, 0, 0, 0, 0, 0.0}, 2102, -1);
    q_boost = 0.0;
    /* several query blocks a head on every ISA (the forward's blocks: 96 to 384 rows), GQA */
    check_units_taken(&(shape){1, 4, 2, 800, 800, 16, 0, 1, 1, 0, 0, 0, 0, 0.0});
    check_gradient_fd((shape){1, 2, 1, 5, 9, 3, 3, 1, 1, 1, 0, 0, 0, 0.0});
    check_gradient_fd((shape){1, 2, 1, 5, 9, 3, 3, 1, 1, 1, 0, 0, 4, 0.7});
    check_gradient_fd((shape){1, 2, 1, 5, 9, 3, 3, 0, 1, 0, 0, 0, 3, 0.5});
    /* B, H, Hkv, M, N, d, off, causal, bias, clamp, kpm, packed */
    const shape marked[] = {
        {2, 2, 1, 40, 40, 8, 0, 1, 1, 0, 0, 0, 0, 0.0},    /* tiled, causal, table */
        {2, 2, 2, 30, 50, 9, -5, 0, 2, 0, 0, 0, 0, 0.0},   /* tiled, not causal, ALiBi */
        {2, 4, 2, 3, 700, 16, 697, 1, 1, 0, 0, 0, 0, 0.0}, /* decode path (split keys) */
        {2, 1, 1, 1, 600, 8, 599, 0, 0, 0, 0, 0, 0, 0.0},  /* narrow decode */
    };
    const int marked_kinds[] = {1, 1, 2, 2};
    for (size_t i = 0; i < sizeof marked / sizeof marked[0]; ++i) check_mark_neg_inf(&marked[i], marked_kinds[i]);
    const shape rows[] = {
        {2, 2, 1, 201, 201, 8, 0, 1, 1, 0, 0, 6, 0, 0.0}, /* packed, causal, table */
        {1, 2, 2, 201, 201, 8, 0, 0, 2, 0, 0, 5, 0, 0.0}, /* packed, not causal, ALiBi */
        {1, 2, 1, 201, 201, 8, 0, 0, 0, 0, 0, 0, 0, 0.0}, /* not packed, not causal: tiles with q_offset <= -M */
        {1, 2, 1, 201, 201, 8, 0, 1, 1, 0, 0, 0, 45, 0.0}, /* a window: key blocks bound their queries */
        {1, 2, 2, 201, 201, 8, 0, 0, 2, 0, 0, 4, 30, 1.2}, /* not causal, window, soft-cap, packed */
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; ++i) check_tiles_sum(&rows[i]);
#if defined(__x86_64__) || defined(_M_X64)
    if (wavepe_test_isa == WAVEPE_ISA_AVX512BF16) check_bf16dot();
#endif

    /* validation */
    wavepe_attention_args a;
    a = wavepe_attention_args_defaults();
    a.batch = 1, a.heads = 3, a.kv_heads = 2, a.m = 4, a.n = 4, a.d = 4, a.scale = 1.0;
    wavepe_error err = {{0}};
    CHECK(wavepe_attention_validate(&a, 0, &err) == WAVEPE_E_INVALID); /* 3 heads over 2 kv heads */
    CHECK(strstr(err.message, "H=3 must be a multiple of k's heads H_kv=2") != NULL);
    a.kv_heads = 1;
    a.scale = NAN;
    CHECK(wavepe_attention_validate(&a, 0, NULL) == WAVEPE_E_INVALID);
    a.scale = 1.0;
    a.m = -1;
    CHECK(wavepe_attention_validate(&a, 0, NULL) == WAVEPE_E_NEGATIVE_SIZE);
    a.m = (int64_t)1 << 40, a.batch = (int64_t)1 << 30;
    CHECK(wavepe_attention_validate(&a, 0, NULL) == WAVEPE_E_OVERFLOW);
    a.m = 4, a.batch = 1;
    a.q_offset = (int64_t)1 << 61;
    CHECK(wavepe_attention_validate(&a, 0, &err) == WAVEPE_E_OVERFLOW);
    CHECK(strstr(err.message, "q_offset=2305843009213693952") != NULL);
    a.q_offset = 0;
    CHECK(wavepe_attention_validate(&a, 0, NULL) == WAVEPE_E_NULL);
    wavepe_attention_plan *plan = (wavepe_attention_plan *)&a;
    CHECK(wavepe_attention_fwd_plan(WAVEPE_ISA_SCALAR, &a, &plan, NULL) == WAVEPE_E_NULL && plan == NULL);
    a.dtype = 7; /* not an element type */
    float buf[64];
    a.q = a.k = a.v = buf, a.out = buf, a.lse = buf;
    CHECK(wavepe_attention_validate(&a, 0, &err) == WAVEPE_E_INVALID);
    CHECK(wavepe_attention_fwd_plan(WAVEPE_ISA_SCALAR, &a, &plan, &err) == WAVEPE_E_INVALID && plan == NULL);
    CHECK(strstr(err.message, "dtype=7") != NULL);
}
