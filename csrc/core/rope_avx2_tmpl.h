/* rope_avx2_tmpl.h: the AVX2+FMA RoPE kernel, written once for an element type
 * T and included by rope_avx2.c for float and double.  The including file
 * defines T, VT (its vector), VL (lanes), FN (name suffixing), KERNEL (the
 * entry point declared in rope.h) and the V_*
 * operations, including V_SINCOS(pos, f, &s, &c): sin and cos of the VL
 * angles pos * f[0..VL-1], formed in double. */

typedef struct FN(table) {
    _Alignas(32) T c[BLOCK][2 * CHUNK];
    _Alignas(32) T s[BLOCK][2 * CHUNK];
} FN(table);

static void FN(build_table)(const wavepe_rope_args *a, const rope_row *r, int64_t i0, int64_t nc, FN(table) * t) {
    const VT scale = V_SET1((T)a->scale);
    const VT sin_flip = V_SET1(a->inverse ? (T)-0.0 : (T)0.0);
    const VT pair_sign = V_PAIR_SIGN; /* (-0, +0) per pair: sin of the first element negated */
    const double *inv = a->inv_freq + i0;
    _Alignas(32) double inv_tail[VL] = {0};
    const int64_t full = nc & ~(int64_t)(VL - 1);
    if (nc > full) memcpy(inv_tail, inv + full, (size_t)(nc - full) * sizeof(double));
    for (int64_t p = 0; p < r->n; ++p) {
        const __m256d pos = _mm256_set1_pd(rope_position(a, r->b, r->l0 + p));
        for (int64_t i = 0; i < nc; i += VL) {
            const double *f = i < full ? inv + i : inv_tail; /* zero-padded tail: same code path */
            VT s, c;
            V_SINCOS(pos, f, &s, &c);
            c = V_MUL(c, scale);
            s = V_XOR(V_MUL(s, scale), sin_flip);
            if (a->layout == WAVEPE_ROPE_HALF) {
                V_STORE(&t->c[p][i], c);
                V_STORE(&t->s[p][i], s);
            } else {
                const VT c_lo = V_UNPACKLO(c, c), c_hi = V_UNPACKHI(c, c);
                const VT s_lo = V_UNPACKLO(s, s), s_hi = V_UNPACKHI(s, s);
                V_STORE(&t->c[p][2 * i], V_PERMUTE2F128(c_lo, c_hi, 0x20));
                V_STORE(&t->c[p][2 * i + VL], V_PERMUTE2F128(c_lo, c_hi, 0x31));
                V_STORE(&t->s[p][2 * i], V_XOR(V_PERMUTE2F128(s_lo, s_hi, 0x20), pair_sign));
                V_STORE(&t->s[p][2 * i + VL], V_XOR(V_PERMUTE2F128(s_lo, s_hi, 0x31), pair_sign));
            }
        }
    }
}

static inline void FN(rotate_half)(const T *x, T *y, int64_t half, int64_t i0, int64_t nc, const T *c, const T *s) {
    const T *xa = x + i0, *xb = x + half + i0;
    T *ya = y + i0, *yb = y + half + i0;
    int64_t i = 0;
    for (; i + VL <= nc; i += VL) {
        const VT va = V_LOADU(xa + i), vb = V_LOADU(xb + i);
        const VT vc = V_LOAD(c + i), vs = V_LOAD(s + i);
        V_STOREU(ya + i, V_FMSUB(va, vc, V_MUL(vb, vs)));
        V_STOREU(yb + i, V_FMADD(vb, vc, V_MUL(va, vs)));
    }
    for (; i < nc; ++i) {
        const T va = xa[i], vb = xb[i];
        ya[i] = S_FMA(va, c[i], -(vb * s[i]));
        yb[i] = S_FMA(vb, c[i], va * s[i]);
    }
}

static inline void FN(rotate_interleaved)(const T *x, T *y, int64_t i0, int64_t nc, const T *c, const T *s) {
    const T *xo = x + 2 * i0;
    T *yo = y + 2 * i0;
    const int64_t n = 2 * nc;
    int64_t j = 0;
    for (; j + VL <= n; j += VL) {
        const VT v = V_LOADU(xo + j);
        const VT swapped = V_SWAP_PAIRS(v); /* (b, a) per pair */
        V_STOREU(yo + j, V_FMADD(v, V_LOAD(c + j), V_MUL(swapped, V_LOAD(s + j))));
    }
    for (; j < n; j += 2) {
        const T va = xo[j], vb = xo[j + 1];
        yo[j] = S_FMA(va, c[j], vb * s[j]);
        yo[j + 1] = S_FMA(vb, c[j + 1], va * s[j + 1]);
    }
}

static inline void FN(pass_row)(const rope_pass *p, T scale, const T *x, T *y) {
    if (x == y && scale == (T)1) return;
    for (int64_t j = p->lo1; j < p->hi1; ++j) y[j] = x[j] * scale;
    for (int64_t j = p->lo2; j < p->hi2; ++j) y[j] = x[j] * scale;
}

void KERNEL(const wavepe_rope_args *a, int64_t row_begin, int64_t row_end) {
    FN(table) table;
    const rope_pass pass = rope_passthrough(a);
    const T scale = (T)a->scale;
    const int large = is_large(a, (int64_t)sizeof(T));
    const int64_t half = a->head_dim / 2;
    const wavepe_rope_tensor *tensors[2] = {&a->q, &a->k};
    for (int64_t row = row_begin; row < row_end; ++row) {
        const rope_row r = rope_row_at(a, row);
        for (int64_t i0 = 0; i0 == 0 || i0 < a->rotary_pairs; i0 += CHUNK) {
            const int64_t left = a->rotary_pairs - i0;
            const int64_t nc = left < CHUNK ? left : CHUNK;
            FN(build_table)(a, &r, i0, nc, &table);
            for (int t = 0; t < 2; ++t) {
                const wavepe_rope_tensor *ten = tensors[t];
                for (int64_t h = 0; h < ten->heads; ++h) {
                    for (int64_t p = 0; p < r.n; ++p) {
                        const int64_t l = r.l0 + p;
                        const T *x = (const T *)ten->in + rope_in_at(ten, r.b, h, l);
                        T *y = (T *)ten->out + rope_out_at(ten, r.b, h, l);
                        if (large) prefetch_next_head(a, t, r.b, h, l, (int64_t)sizeof(T));
                        if (a->layout == WAVEPE_ROPE_HALF)
                            FN(rotate_half)(x, y, half, i0, nc, table.c[p], table.s[p]);
                        else
                            FN(rotate_interleaved)(x, y, i0, nc, table.c[p], table.s[p]);
                        if (i0 == 0) FN(pass_row)(&pass, scale, x, y);
                    }
                }
            }
        }
    }
}
