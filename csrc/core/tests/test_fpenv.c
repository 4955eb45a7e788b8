/* test_fpenv.c: every kernel runs with subnormals flushed, and gives the
 * caller's floating-point state back bit for bit (fpenv.h). */
#include <float.h>
#include <string.h>

#include "../alibi.h"
#include "../attention.h"
#include "../checked.h"
#include "../fpenv.h"
#include "../relbias.h"
#include "../rope.h"
#include "../wavelet.h"
#include "harness.h"

#if defined(WAVEPE_FPENV_X86)
#define WAVEPE_TEST_FPENV 1
/* A caller's state no kernel would choose: every exception flag raised,
 * FTZ and DAZ off, round-to-nearest (so results stay comparable). */
#define CALLER_STATE 0x1FBFull
static void set_fp_word(unsigned long long w) { _mm_setcsr((unsigned)w); }
#elif defined(__aarch64__)
#define WAVEPE_TEST_FPENV 1
/* FPCR (the exception flags live in FPSR, which the kernels leave alone): FZ
 * off, round-to-nearest, and AHP (bit 26, half-precision format) set: a bit
 * no kernel touches, so a kernel that wrote FPCR wholesale would be caught. */
#define CALLER_STATE (1ull << 26)
static void set_fp_word(unsigned long long w) { __asm__ volatile("msr fpcr, %0" : : "r"(w)); }
#endif

/* AArch64 keeps the exception flags in FPSR: cleared before a kernel runs,
 * they must still be clear after it (its inexact results and flushed
 * subnormals raise some); x86's are part of CALLER_STATE. */
static void clear_flags(void) {
#if defined(__aarch64__)
    __asm__ volatile("msr fpsr, %0" : : "r"(0ull) : "memory");
#endif
}

static void check_state_kept(unsigned long long before, const char *what) {
    const unsigned long long after = wavepe_fpenv_word(), status = wavepe_fpenv_status_word();
    if (after != before || status != 0) {
        fprintf(stderr, "%s changed the caller's FP state: %#llx -> %#llx (status %#llx)\n", what, before, after,
                status);
        ++wavepe_test_failures;
    }
}

void test_fpenv(void) {
#if defined(WAVEPE_TEST_FPENV)
    const unsigned long long saved = wavepe_fpenv_word();
    set_fp_word(CALLER_STATE);
    const unsigned long long caller = wavepe_fpenv_word();
    const wavepe_isa isas[2] = {WAVEPE_ISA_SCALAR, wavepe_test_isa};
    for (int v = 0; v < 2; ++v) {
        const wavepe_isa isa = isas[v];
        /* wavelets: psi(t) for subnormal t reads t as 0 (ricker(0) = 1); tails
         * that would be subnormal come out 0 */
        float x[20], y[20];
        for (int i = 0; i < 20; ++i) x[i] = i < 10 ? 1e-40f * (float)(i + 1) : 13.0f + 0.01f * (float)i;
        clear_flags();
        wavepe_wavelet_f32(isa, WAVEPE_WAVELET_RICKER, 20, x, 1, y, 1);
        check_state_kept(caller, "wavepe_wavelet_f32");
        for (int i = 0; i < 20; ++i) {
            CHECK(!(y[i] != 0.0f && fabsf(y[i]) < FLT_MIN)); /* never subnormal */
            if (i < 10) CHECK(y[i] == 1.0f);
        }
        /* relbias: q subnormal reads as 0, whatever the table */
        float q[4 * 8], table[3 * 8], bias[4 * 4];
        for (int i = 0; i < 32; ++i) q[i] = 3e-39f;
        for (int i = 0; i < 24; ++i) table[i] = 1.0f;
        wavepe_relbias_args ra = wavepe_relbias_args_defaults();
        ra.batch = 1, ra.m = 4, ra.n = 4, ra.d = 8, ra.rows = 3, ra.r_lo = 0, ra.causal = 1;
        ra.q = q, ra.q_stride_g = 32, ra.q_stride_m = 8, ra.table = table;
        ra.bias = bias, ra.bias_stride_g = 16, ra.bias_stride_m = 4;
        char ws[4096] __attribute__((aligned(64)));
        const int64_t bytes = wavepe_relbias_f32_workspace_bytes(isa, &ra, WAVEPE_RELBIAS_FORWARD);
        CHECK(bytes <= (int64_t)sizeof(ws));
        ra.workspace = bytes > 0 ? ws : NULL;
        wavepe_relbias_f32_prepare(isa, &ra, WAVEPE_RELBIAS_FORWARD, 0, wavepe_relbias_f32_chunks(isa, &ra));
        clear_flags();
        wavepe_relbias_f32(isa, &ra, 0, 4);
        check_state_kept(caller, "wavepe_relbias_f32");
        for (int i = 0; i < 16; ++i) CHECK(bias[i] == 0.0f);
        /* alibi and rope keep the state too */
        const float slope = 0.5f;
        float ab[2 * 3];
        wavepe_alibi_args aa = wavepe_alibi_args_defaults();
        aa.dtype = WAVEPE_F32, aa.heads = 1, aa.m = 2, aa.n = 3, aa.causal = 1;
        aa.slopes = &slope, aa.out = ab, aa.out_stride_h = 6, aa.out_stride_m = 3;
        clear_flags();
        wavepe_alibi_f32(isa, &aa, 0, 2);
        check_state_kept(caller, "wavepe_alibi_f32");
        float rx[1 * 1 * 2 * 4], ry[8];
        for (int i = 0; i < 8; ++i) rx[i] = i < 4 ? 1e-41f : 1.0f;
        const double inv_freq[2] = {1.0, 0.01};
        wavepe_rope_args ro;
        ro = wavepe_rope_args_defaults();
        ro.batch = 1, ro.len = 2, ro.head_dim = 4, ro.inv_freq = inv_freq, ro.rotary_pairs = 2, ro.scale = 1.0;
        ro.q.heads = 1, ro.q.in = rx, ro.q.in_stride_b = 8, ro.q.in_stride_h = 8, ro.q.in_stride_l = 4;
        ro.q.out = ry, ro.q.out_stride_b = 8, ro.q.out_stride_h = 8, ro.q.out_stride_l = 4;
        clear_flags();
        wavepe_rope_f32(isa, &ro, 0, wavepe_rope_rows(&ro));
        check_state_kept(caller, "wavepe_rope_f32");
        for (int i = 0; i < 4; ++i) CHECK(ry[i] == 0.0f); /* subnormal inputs rotate as zeros */
        /* attention: q subnormal = q zero, so every row averages the values it sees */
        float aq[3 * 4], ak[3 * 4], av[3 * 4], out[3 * 4], lse[3];
        for (int i = 0; i < 12; ++i) aq[i] = 2e-39f, ak[i] = 1.0f, av[i] = (float)(i / 4);
        wavepe_attention_args at = wavepe_attention_args_defaults();
        at.batch = 1, at.heads = 1, at.kv_heads = 1, at.m = 3, at.n = 3, at.d = 4, at.causal = 1, at.scale = 1.0;
        at.q = aq, at.k = ak, at.v = av, at.out = out, at.lse = lse;
        const int64_t st[3] = {12, 12, 4};
        memcpy(at.q_strides, st, sizeof(st)), memcpy(at.k_strides, st, sizeof(st));
        memcpy(at.v_strides, st, sizeof(st)), memcpy(at.out_strides, st, sizeof(st));
        wavepe_attention_plan *plan = NULL;
        CHECK(wavepe_attention_fwd_plan(isa, &at, &plan, NULL) == WAVEPE_OK);
        if (plan) {
            clear_flags();
            for (int ph = 0; ph < 2; ++ph) wavepe_attention_run(plan, ph, 0, wavepe_attention_units(plan, ph));
            check_state_kept(caller, "wavepe_attention_run");
            wavepe_attention_plan_free(plan);
            for (int m = 0; m < 3; ++m)
                for (int c = 0; c < 4; ++c) CHECK_CLOSE(out[m * 4 + c], 0.5 * m, 1e-6, 1e-6);
        }
    }
    set_fp_word(saved);
#endif
}
