/* attention_mk.h: the vector FMA micro-kernels of the CPU attention and the packing they read, BLIS-like:
 * register-blocked 6 x NR tiles (NR = 2 vectors) in loops over packed operands.  Part of attention_simd.h
 * (its template parameters: simd_type.h; NR and the block sizes), included once per instantiation: the
 * vector-FMA engine (attention_engine_fma.h) is these, and the algorithm's own float32 products (the
 * backward's dV, dK, dQ and the table gradient, the decoding kernels) call them on every engine.
 *
 *   mk_nt   C = init + A_packed . B_packed   A: 6 rows k-major [k][6],
 *           B: a strip of NR columns k-major [k][NR] (q . k and q . T scores)
 *   mk_gen  C += A . B, A read through (row, k) strides (row-major, or
 *           transposed), B = rows of a row-major matrix (P V, dS K, P^T dO...) */

/* Lanes [0, n) of the stored elements at p, widened (n clamped to [0, VL]),
 * zero elsewhere; elements past n are never read. */
static inline VT FN(s_loadu_n)(const S *p, int64_t n) {
#if defined(WP_STORAGE_HALF)
    if (n >= VL) return S_LOADU(p);
    S buf[VL] = {0};
    for (int64_t i = 0; i < n; ++i) buf[i] = p[i];
    return S_LOADU(buf);
#else
    return V(loadu_n)(p, n);
#endif
}

#if defined(WP_STORAGE_HALF)
/* n stored elements widened to float32 (attention.c's pack_table, for the table window a
 * decoding step packs on every call): the ISA's own conversion, where half.h's portable one
 * is ~15 integer operations per 4 float16 elements (fp16, 1 x 32768 keys: pack_table and the
 * widening 1.07 % -> 0.43 % of a decoding call's samples; test_half.c checks both agree). */
void FN(attn_widen)(const S *src, T *dst, int64_t n) {
    int64_t i = 0;
    for (; i + VL <= n; i += VL) V(storeu)(dst + i, S_LOADU(src + i));
    for (; i < n; ++i) dst[i] = S_TO_T(src[i]);
}
#endif

/* v's lanes [0, n) stored at p (n clamped to [0, VL]), rounded once to S. */
static inline void FN(s_storeu_n)(S *p, VT v, int64_t n) {
#if defined(WP_STORAGE_HALF)
    if (n >= VL) {
        S_STOREU(p, v);
        return;
    }
    T buf[VL];
    V(storeu)(buf, v);
    for (int64_t i = 0; i < n; ++i) p[i] = T_TO_S(buf[i]);
#else
    V(storeu_n)(p, v, n);
#endif
}

/* out[c*NR + lane] = src[lane*ks + c] for NR rows (lanes) and d columns:
 * register transposes of ATTN_TB x ATTN_TB blocks, scalar for the last
 * d % ATTN_TB columns.  Half types: VL columns of the NR rows are widened
 * into a float32 tile first, then transposed the same way. */
__attribute__((unused)) static void FN(transpose_strip)(T *restrict out, const S *src, int64_t ks, int64_t d) {
#if defined(WP_STORAGE_HALF)
    T tile[NR * VL];
    for (int64_t c0 = 0; c0 < d; c0 += VL) {
        const int64_t w = d - c0 < VL ? d - c0 : VL;
        for (int lane = 0; lane < NR; ++lane) V(storeu)(tile + lane * VL, FN(s_loadu_n)(src + lane * ks + c0, w));
        if (w == VL) {
            for (int cb = 0; cb < VL; cb += ATTN_TB)
                for (int g = 0; g < NR / ATTN_TB; ++g)
                    V(transpose)(tile + g * ATTN_TB * VL + cb, VL, out + (c0 + cb) * NR + g * ATTN_TB, NR);
        } else {
            for (int64_t c = 0; c < w; ++c)
                for (int lane = 0; lane < NR; ++lane) out[(c0 + c) * NR + lane] = tile[lane * VL + c];
        }
    }
#else
    int64_t c0 = 0;
    for (; c0 + ATTN_TB <= d; c0 += ATTN_TB)
        for (int g = 0; g < NR / ATTN_TB; ++g)
            V(transpose)(src + g * ATTN_TB * ks + c0, ks, out + c0 * NR + g * ATTN_TB, NR);
    for (; c0 < d; ++c0)
        for (int lane = 0; lane < NR; ++lane) out[c0 * NR + lane] = src[lane * ks + c0];
#endif
}

/* ---- micro-kernels -------------------------------------------------------------- */

/* C[t][0..NR) += (x0, x1) for a row t < rows: the accumulating micro-kernels' write-back
 * (mk_gen, mk_dpv; c, ldc and rows from the kernel). */
#define MK_ACC(t, x0, x1)                                                                         \
    if (rows > t) {                                                                               \
        V(storeu)(c + t * ldc, V(add)(V(loadu)(c + t * ldc), x0));                                   \
        V(storeu)(c + t * ldc + VL, V(add)(V(loadu)(c + t * ldc + VL), x1));                         \
    }

/* C[t][0..NR) = init[t][0..NR) (or 0) + sum_k ap[k*6 + t] * bp[k*NR + 0..NR), t < 6. */
static inline void FN(mk_nt)(int64_t kc, const T *restrict ap, const T *restrict bp, T *restrict c, int64_t ldc,
                             const T *const *init) {
    VT c00, c01, c10, c11, c20, c21, c30, c31, c40, c41, c50, c51;
    if (init != NULL) {
        c00 = V(loadu)(init[0]), c01 = V(loadu)(init[0] + VL);
        c10 = V(loadu)(init[1]), c11 = V(loadu)(init[1] + VL);
        c20 = V(loadu)(init[2]), c21 = V(loadu)(init[2] + VL);
        c30 = V(loadu)(init[3]), c31 = V(loadu)(init[3] + VL);
        c40 = V(loadu)(init[4]), c41 = V(loadu)(init[4] + VL);
        c50 = V(loadu)(init[5]), c51 = V(loadu)(init[5] + VL);
    } else {
        c00 = c01 = c10 = c11 = c20 = c21 = c30 = c31 = c40 = c41 = c50 = c51 = V(zero)();
    }
    for (int64_t k = 0; k < kc; ++k) {
        const VT b0 = V(loadu)(bp), b1 = V(loadu)(bp + VL);
        VT a;
        a = V(bcast)(ap + 0), c00 = V(fmadd)(a, b0, c00), c01 = V(fmadd)(a, b1, c01);
        a = V(bcast)(ap + 1), c10 = V(fmadd)(a, b0, c10), c11 = V(fmadd)(a, b1, c11);
        a = V(bcast)(ap + 2), c20 = V(fmadd)(a, b0, c20), c21 = V(fmadd)(a, b1, c21);
        a = V(bcast)(ap + 3), c30 = V(fmadd)(a, b0, c30), c31 = V(fmadd)(a, b1, c31);
        a = V(bcast)(ap + 4), c40 = V(fmadd)(a, b0, c40), c41 = V(fmadd)(a, b1, c41);
        a = V(bcast)(ap + 5), c50 = V(fmadd)(a, b0, c50), c51 = V(fmadd)(a, b1, c51);
        ap += ATTN_MR;
        bp += NR;
    }
    V(storeu)(c + 0 * ldc, c00), V(storeu)(c + 0 * ldc + VL, c01);
    V(storeu)(c + 1 * ldc, c10), V(storeu)(c + 1 * ldc + VL, c11);
    V(storeu)(c + 2 * ldc, c20), V(storeu)(c + 2 * ldc + VL, c21);
    V(storeu)(c + 3 * ldc, c30), V(storeu)(c + 3 * ldc + VL, c31);
    V(storeu)(c + 4 * ldc, c40), V(storeu)(c + 4 * ldc + VL, c41);
    V(storeu)(c + 5 * ldc, c50), V(storeu)(c + 5 * ldc + VL, c51);
}

/* C[t][0..NR) += sum_k a[t*a_st + k*a_sk] * b[k*b_sk + 0..NR) for t < rows (1..6).
 * Columns >= cols of b are read as 0 (masked loads: b may be a caller's row of
 * length < NR).  C is scratch with NR columns per row. */
static inline void FN(mk_gen)(int64_t kc, const T *a, int64_t a_st, int64_t a_sk, const T *b, int64_t b_sk, int cols,
                              T *c, int64_t ldc, int rows) {
    const T *a0 = a, *a1 = rows > 1 ? a + a_st : a, *a2 = rows > 2 ? a + 2 * a_st : a;
    const T *a3 = rows > 3 ? a + 3 * a_st : a, *a4 = rows > 4 ? a + 4 * a_st : a, *a5 = rows > 5 ? a + 5 * a_st : a;
    VT c00, c01, c10, c11, c20, c21, c30, c31, c40, c41, c50, c51;
    c00 = c01 = c10 = c11 = c20 = c21 = c30 = c31 = c40 = c41 = c50 = c51 = V(zero)();
#define MK_GEN_STEP(B0, B1)                                                                       \
    do {                                                                                          \
        const int64_t o = k * a_sk;                                                               \
        const VT b0 = (B0), b1 = (B1);                                                            \
        VT av;                                                                                    \
        av = V(bcast)(a0 + o), c00 = V(fmadd)(av, b0, c00), c01 = V(fmadd)(av, b1, c01);                 \
        av = V(bcast)(a1 + o), c10 = V(fmadd)(av, b0, c10), c11 = V(fmadd)(av, b1, c11);                 \
        av = V(bcast)(a2 + o), c20 = V(fmadd)(av, b0, c20), c21 = V(fmadd)(av, b1, c21);                 \
        av = V(bcast)(a3 + o), c30 = V(fmadd)(av, b0, c30), c31 = V(fmadd)(av, b1, c31);                 \
        av = V(bcast)(a4 + o), c40 = V(fmadd)(av, b0, c40), c41 = V(fmadd)(av, b1, c41);                 \
        av = V(bcast)(a5 + o), c50 = V(fmadd)(av, b0, c50), c51 = V(fmadd)(av, b1, c51);                 \
    } while (0)
    if (cols >= NR) {
        for (int64_t k = 0; k < kc; ++k) MK_GEN_STEP(V(loadu)(b + k * b_sk), V(loadu)(b + k * b_sk + VL));
    } else {
        const int64_t n0 = cols, n1 = cols - VL; /* lanes to read (loadu_n clamps) */
        for (int64_t k = 0; k < kc; ++k)
            MK_GEN_STEP(V(loadu_n)(b + k * b_sk, n0), V(loadu_n)(b + k * b_sk + VL, n1));
    }
#undef MK_GEN_STEP
    MK_ACC(0, c00, c01)
    MK_ACC(1, c10, c11)
    MK_ACC(2, c20, c21)
    MK_ACC(3, c30, c31)
    MK_ACC(4, c40, c41)
    MK_ACC(5, c50, c51)
}

/* ---- packing ------------------------------------------------------------------------- */

/* dst[c*6 + t] = scale * rows[t][c] for t < nrows, 0 for the other rows. */
static void FN(pack_rows)(T *restrict dst, const S *const *rows, int nrows, int64_t d, T scale) {
#if defined(WP_STORAGE_HALF)
    T tile[ATTN_MR * VL]; /* VL columns of the rows, widened */
    const VT vs = V(set1)(scale);
    for (int64_t c0 = 0; c0 < d; c0 += VL) {
        const int64_t w = d - c0 < VL ? d - c0 : VL;
        for (int t = 0; t < ATTN_MR; ++t)
            V(storeu)(tile + t * VL, t < nrows ? V(mul)(vs, FN(s_loadu_n)(rows[t] + c0, w)) : V(zero)());
        for (int64_t c = 0; c < w; ++c)
            for (int t = 0; t < ATTN_MR; ++t) dst[(c0 + c) * ATTN_MR + t] = tile[t * VL + c];
    }
#else
    for (int64_t c = 0; c < d; ++c)
        for (int t = 0; t < ATTN_MR; ++t) dst[c * ATTN_MR + t] = t < nrows ? scale * rows[t][c] : (T)0;
#endif
}

/* Keys [0, nk) of a row-major (stride ks) matrix into strips of NR keys,
 * k-major: dst[(s*d + c)*NR + lane] = src[(s*NR + lane)*ks + c]; keys past nk
 * are zero. */
__attribute__((unused)) static void FN(pack_strips)(T *restrict dst, const S *src, int64_t ks, int64_t nk, int64_t d) {
    const int64_t nstrip = (nk + NR - 1) / NR;
    for (int64_t s = 0; s < nstrip; ++s) {
        T *out = dst + s * d * NR;
        const int64_t lanes = nk - s * NR < NR ? nk - s * NR : NR;
        if (lanes == NR) {
            FN(transpose_strip)(out, src + s * NR * ks, ks, d);
            continue;
        }
        for (int64_t c = 0; c < d; ++c)
            for (int64_t lane = 0; lane < NR; ++lane)
                out[c * NR + lane] = lane < lanes ? S_TO_T(src[(s * NR + lane) * ks + c]) : (T)0;
    }
}

/* Rows [0, nk) of a row-major matrix (stride vs, d columns) as column panels
 * of NR: dst[(s*ldp + j)*NR + c] = src[j*vs + s*NR + c], zero past column d.
 * The panels are the contiguous B operand of P V-type products.  Rows whose
 * additive key mask kpm[j] is not 0 (padded keys; kpm may be NULL) are packed
 * as zeros: a masked key's value or key never reaches a product, whatever it
 * holds (0 * NaN would). */
static void FN(pack_panels)(T *restrict dst, int64_t ldp, const S *src, int64_t vs, int64_t nk, int64_t d,
                            const T *kpm) {
    const int64_t full = d / NR, rest = d - full * NR;
    for (int64_t j = 0; j < nk; ++j) {
        const S *row = src + j * vs;
        if (kpm != NULL && kpm[j] != (T)0) {
            for (int64_t st = 0; st <= full; ++st) {
                if (st == full && !rest) break;
                T *o = dst + (st * ldp + j) * NR;
                V(storeu)(o, V(zero)());
                V(storeu)(o + VL, V(zero)());
            }
            continue;
        }
        for (int64_t st = 0; st < full; ++st) {
            T *o = dst + (st * ldp + j) * NR;
            V(storeu)(o, S_LOADU(row + st * NR));
            V(storeu)(o + VL, S_LOADU(row + st * NR + VL));
        }
        if (rest) {
            T *o = dst + (full * ldp + j) * NR;
            V(storeu)(o, FN(s_loadu_n)(row + full * NR, rest));
            V(storeu)(o + VL, FN(s_loadu_n)(row + full * NR + VL, rest - VL));
        }
    }
}
