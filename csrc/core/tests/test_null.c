/* test_null.c: NULL and zero-size pointers through every family's rules, plans and kernels.
 *
 * Two guarantees, checked without relying on a fault at address 0 (page 0 is
 * readable in some sandboxes, so "it did not crash" would prove nothing):
 *
 * 1. NULL where elements exist is refused by the rules (WAVEPE_E_NULL, with a
 *    sentence), for every pointer of every family, before any kernel runs;
 *    plans refuse it too and return no plan.
 * 2. Problems with no elements need no data: their rules accept NULL, and
 *    their plans and kernels run over pointers to zero-size allocations, which
 *    AddressSanitizer (make ctest) reports the moment anything reads or writes
 *    them -- every ISA, every phase, every unit.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../alibi.h"
#include "../attention.h"
#include "../checked.h"
#include "../relbias.h"
#include "../rope.h"
#include "harness.h"

static int null_named(int status, const wavepe_error *err) {
    return status == WAVEPE_E_NULL && strstr(err->message, "NULL") != NULL;
}

/* ---- relbias ---------------------------------------------------------------------------- */

static void relbias_null(void) {
    float buf[256];
    wavepe_relbias_args a;
    a = wavepe_relbias_args_defaults();
    a.dtype = WAVEPE_F32;
    a.batch = 1, a.m = 3, a.n = 4, a.d = 2, a.rows = 5, a.r_lo = -2;
    a.q = buf, a.q_stride_g = 6, a.q_stride_m = 2, a.table = buf;
    a.bias = buf, a.bias_stride_g = 12, a.bias_stride_m = 4;
    a.grad = buf, a.grad_stride_g = 12, a.grad_stride_m = 4;
    a.dq = buf, a.dq_stride_g = 6, a.dq_stride_m = 2, a.dtable = buf;
    const unsigned all = WAVEPE_RELBIAS_FORWARD | WAVEPE_RELBIAS_GRAD_Q | WAVEPE_RELBIAS_GRAD_TABLE;
    wavepe_error err;
    CHECK(wavepe_relbias_validate(&a, all, &err) == WAVEPE_OK);
    const void **in[3] = {&a.q, &a.table, &a.grad};
    for (int i = 0; i < 3; ++i) {
        const void *keep = *in[i];
        *in[i] = NULL;
        CHECK(null_named(wavepe_relbias_validate(&a, all, &err), &err));
        wavepe_relbias_plan *plan = (wavepe_relbias_plan *)&a;
        CHECK(wavepe_relbias_plan_create(WAVEPE_ISA_SCALAR, &a, all, 1, &plan, &err) == WAVEPE_E_NULL && plan == NULL);
        *in[i] = keep;
    }
    void **out[3] = {&a.bias, &a.dq, &a.dtable};
    for (int i = 0; i < 3; ++i) {
        void *keep = *out[i];
        *out[i] = NULL;
        CHECK(null_named(wavepe_relbias_validate(&a, all, &err), &err));
        *out[i] = keep;
    }
}

static void relbias_empty(void *zero) {
    /* every size that can be 0 on its own, with every pointer either NULL or a zero-size allocation */
    const int64_t shapes[][5] = {{0, 3, 4, 2, 5}, {1, 0, 4, 2, 5}, {1, 3, 0, 2, 5}, {1, 3, 4, 0, 5}, {1, 3, 4, 2, 0}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; ++s)
        for (int use_null = 0; use_null < 2; ++use_null)
            for (int isa = 0; isa < 2; ++isa) {
                void *p = use_null ? NULL : zero;
                wavepe_relbias_args a;
                a = wavepe_relbias_args_defaults();
                a.dtype = WAVEPE_F32;
                a.batch = shapes[s][0], a.m = shapes[s][1], a.n = shapes[s][2], a.d = shapes[s][3];
                a.rows = shapes[s][4];
                a.q = p, a.table = p, a.bias = p, a.grad = p, a.dq = p, a.dtable = p;
                a.q_stride_m = a.d, a.q_stride_g = a.m * a.d, a.bias_stride_m = a.grad_stride_m = a.n;
                a.bias_stride_g = a.grad_stride_g = a.m * a.n, a.dq_stride_m = a.d, a.dq_stride_g = a.m * a.d;
                const int has_q = a.batch * a.m * a.d > 0, has_bias = a.batch * a.m * a.n > 0;
                const int has_t = a.rows * a.d > 0;
                /* forward: nothing to write unless the bias has elements (then q, table, bias are needed) */
                if (!has_bias) {
                    wavepe_relbias_plan *plan = NULL;
                    CHECK(wavepe_relbias_plan_create(isa ? wavepe_test_isa : WAVEPE_ISA_SCALAR, &a,
                                                     WAVEPE_RELBIAS_FORWARD, 2, &plan, NULL) == WAVEPE_OK);
                    if (plan != NULL) {
                        for (int ph = 0; ph < 3; ++ph)
                            CHECK(wavepe_relbias_run(plan, ph, 0, wavepe_relbias_units(plan, ph)) == WAVEPE_OK);
                        wavepe_relbias_plan_free(plan);
                    }
                }
                /* backward: dq needs grad + table, dT needs grad + q; all empty here when their output is */
                if (!has_q && !has_t) {
                    wavepe_relbias_plan *plan = NULL;
                    CHECK(wavepe_relbias_plan_create(isa ? wavepe_test_isa : WAVEPE_ISA_SCALAR, &a,
                                                     WAVEPE_RELBIAS_GRAD_Q | WAVEPE_RELBIAS_GRAD_TABLE, 2, &plan,
                                                     NULL) == WAVEPE_OK);
                    if (plan != NULL) {
                        for (int ph = 0; ph < 3; ++ph)
                            CHECK(wavepe_relbias_run(plan, ph, 0, wavepe_relbias_units(plan, ph)) == WAVEPE_OK);
                        wavepe_relbias_plan_free(plan);
                    }
                }
            }
}

/* ---- rope ------------------------------------------------------------------------------- */

static void rope_null_and_empty(void *zero) {
    double x[64], inv[2] = {1.0, 0.5};
    int64_t pos[4] = {0, 1, 2, 3};
    wavepe_rope_args a;
    a = wavepe_rope_args_defaults();
    a.dtype = WAVEPE_F64, a.batch = 1, a.len = 4, a.head_dim = 4, a.rotary_pairs = 2, a.scale = 1.0;
    a.inv_freq = inv, a.positions = pos, a.pos_stride_l = 1;
    a.q.heads = 2, a.q.in = x, a.q.out = x;
    a.q.in_stride_b = a.q.out_stride_b = 32, a.q.in_stride_h = a.q.out_stride_h = 16;
    a.q.in_stride_l = a.q.out_stride_l = 4;
    wavepe_error err;
    CHECK(wavepe_rope_validate(&a, &err) == WAVEPE_OK);
    wavepe_rope_args b = a;
    b.q.in = NULL;
    CHECK(null_named(wavepe_rope_validate(&b, &err), &err));
    b = a, b.q.out = NULL;
    CHECK(null_named(wavepe_rope_validate(&b, &err), &err));
    b = a, b.inv_freq = NULL;
    CHECK(null_named(wavepe_rope_validate(&b, &err), &err));
    b = a, b.k.heads = 1; /* k has elements, its pointers are NULL */
    CHECK(null_named(wavepe_rope_validate(&b, &err), &err));
    wavepe_rope_plan *plan = (wavepe_rope_plan *)&a;
    b = a, b.q.in = NULL;
    CHECK(wavepe_rope_plan_create(WAVEPE_ISA_SCALAR, &b, &plan, NULL) == WAVEPE_E_NULL && plan == NULL);
    /* empty: no batch, no positions, no heads, no pairs */
    for (int which = 0; which < 4; ++which)
        for (int isa = 0; isa < 2; ++isa) {
            b = a;
            b.q.in = b.q.out = zero, b.inv_freq = zero, b.positions = zero;
            if (which == 0) b.batch = 0;
            if (which == 1) b.len = 0;
            if (which == 2) b.q.heads = 0;
            if (which == 3) b.head_dim = 0, b.rotary_pairs = 0;
            CHECK(wavepe_rope_validate(&b, NULL) == WAVEPE_OK);
            CHECK(wavepe_rope_plan_create(isa ? wavepe_test_isa : WAVEPE_ISA_SCALAR, &b, &plan, NULL) == WAVEPE_OK);
            if (plan != NULL) {
                CHECK(wavepe_rope_run(plan, 0, 0, wavepe_rope_units(plan, 0)) == WAVEPE_OK);
                wavepe_rope_plan_free(plan);
            }
        }
}

/* ---- alibi ------------------------------------------------------------------------------ */

static void alibi_null_and_empty(void *zero) {
    float slopes[2] = {0.5f, 0.25f}, out[2 * 3 * 4];
    wavepe_alibi_args a = {WAVEPE_F32, 2, 3, 4, 0, 1, slopes, out, 12, 4};
    wavepe_error err;
    CHECK(wavepe_alibi_validate(&a, &err) == WAVEPE_OK);
    wavepe_alibi_args b = a;
    b.slopes = NULL;
    CHECK(null_named(wavepe_alibi_validate(&b, &err), &err));
    b = a, b.out = NULL;
    CHECK(null_named(wavepe_alibi_validate(&b, &err), &err));
    for (int which = 0; which < 3; ++which)
        for (int isa = 0; isa < 2; ++isa) {
            b = a;
            b.slopes = zero, b.out = zero;
            if (which == 0) b.heads = 0;
            if (which == 1) b.m = 0;
            if (which == 2) b.n = 0;
            wavepe_alibi_plan *plan = NULL;
            CHECK(wavepe_alibi_plan_create(isa ? wavepe_test_isa : WAVEPE_ISA_SCALAR, &b, &plan, NULL) == WAVEPE_OK);
            if (plan != NULL) {
                CHECK(wavepe_alibi_run(plan, 0, 0, wavepe_alibi_units(plan, 0)) == WAVEPE_OK);
                wavepe_alibi_plan_free(plan);
            }
        }
}

/* ---- attention -------------------------------------------------------------------------- */

static void attention_args(wavepe_attention_args *a, int64_t b, int64_t h, int64_t m, int64_t n, void *p) {
    *a = wavepe_attention_args_defaults();
    a->dtype = WAVEPE_F32, a->batch = b, a->heads = h, a->kv_heads = h > 0 ? h : 1, a->m = m, a->n = n, a->d = 4;
    a->scale = 0.5, a->causal = 1;
    a->q = a->k = a->v = p, a->out = a->lse = p;
    a->dout = p, a->dq = a->dk = a->dv = p;
    const int64_t qs[3] = {h * m * 4, m * 4, 4}, ks[3] = {a->kv_heads * n * 4, n * 4, 4};
    memcpy(a->q_strides, qs, sizeof qs), memcpy(a->out_strides, qs, sizeof qs), memcpy(a->dout_strides, qs, sizeof qs);
    memcpy(a->k_strides, ks, sizeof ks), memcpy(a->v_strides, ks, sizeof ks);
}

static void attention_null_and_empty(void *zero) {
    float buf[4096];
    wavepe_attention_args a;
    attention_args(&a, 1, 2, 3, 5, buf);
    wavepe_error err;
    CHECK(wavepe_attention_validate(&a, 1, &err) == WAVEPE_OK);
    const void **in[4] = {&a.q, &a.k, &a.v, &a.dout};
    for (int i = 0; i < 4; ++i) {
        const void *keep = *in[i];
        *in[i] = NULL;
        CHECK(null_named(wavepe_attention_validate(&a, 1, &err), &err));
        wavepe_attention_plan *plan = (wavepe_attention_plan *)&a;
        CHECK(wavepe_attention_bwd_plan(WAVEPE_ISA_SCALAR, &a, &plan, NULL) == WAVEPE_E_NULL && plan == NULL);
        *in[i] = keep;
    }
    void **out[5] = {&a.out, &a.lse, &a.dq, &a.dk, &a.dv};
    for (int i = 0; i < 5; ++i) {
        void *keep = *out[i];
        *out[i] = NULL;
        CHECK(null_named(wavepe_attention_validate(&a, 1, &err), &err));
        *out[i] = keep;
    }
    /* no queries (B = 0, H = 0 or M = 0) and no keys (N = 0): zero-size data, every ISA, both directions */
    const int64_t shapes[][4] = {{0, 2, 3, 5}, {1, 2, 0, 5}, {1, 2, 3, 0}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; ++s)
        for (int isa = 0; isa < 2; ++isa) {
            const int64_t m = shapes[s][2], n = shapes[s][3];
            attention_args(&a, shapes[s][0], shapes[s][1], m, n, zero);
            if (n == 0 && m > 0) continue; /* queries without keys write 0 outputs: they need real buffers */
            /* keys without queries: the backward writes zero dk, dv (outputs with elements) */
            float dkv[2][2 * 5 * 4];
            if (a.batch * a.kv_heads * n > 0) a.dk = dkv[0], a.dv = dkv[1];
            for (int backward = 0; backward < 2; ++backward) {
                wavepe_attention_plan *plan = NULL;
                const wavepe_isa which = isa ? wavepe_test_isa : WAVEPE_ISA_SCALAR;
                const int status = backward ? wavepe_attention_bwd_plan(which, &a, &plan, &err)
                                            : wavepe_attention_fwd_plan(which, &a, &plan, &err);
                CHECK(status == WAVEPE_OK);
                if (plan == NULL) continue;
                for (int ph = 0; ph < 3; ++ph)
                    CHECK(wavepe_attention_run(plan, ph, 0, wavepe_attention_units(plan, ph)) == WAVEPE_OK);
                wavepe_attention_plan_free(plan);
            }
            if (a.dk == dkv[0])
                for (int i = 0; i < 2 * 5 * 4; ++i) CHECK(dkv[0][i] == 0.0f && dkv[1][i] == 0.0f);
        }
}

void test_null(void) {
    /* a zero-size allocation: AddressSanitizer reports any access through it */
    void *zero = malloc(0);
    relbias_null();
    relbias_empty(zero);
    rope_null_and_empty(zero);
    alibi_null_and_empty(zero);
    attention_null_and_empty(zero);
    free(zero);
}
