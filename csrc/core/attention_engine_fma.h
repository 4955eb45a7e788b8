/* attention_engine_fma.h: the vector-FMA matrix engine of the CPU attention (attention_engine.h's
 * interface) -- every ISA's, every type's but bfloat16 where paired bf16 dot products run
 * (attention_engine_pairs.h).  Its operands are float32 (float64 for double), the stored elements widened
 * once as they are packed; its products are attention_mk.h's micro-kernels: each sum a chain of fused
 * multiply-adds, within d * 2^-24 * sum |q_c k_c| (float32) of the exact one.  Part of attention_simd.h's
 * template. */

static inline FN(eng_scratch) FN(eng_scratch_sizes)(int64_t d, int64_t dpad, int64_t rpad, int bwd, int narrow) {
    FN(eng_scratch) e = {0};
    e.kp = narrow ? 0 : ATTN_BNMAX * d;
    e.vp = bwd ? ATTN_BBN * d : narrow ? 0 : ATTN_FBN * dpad;
    e.dop = bwd ? rpad * d : 0;
    return e;
}

static inline void FN(eng_pack_group)(FN(work) * w, FN(group) * g, int64_t gi, const S *const *rp, int nrows,
                                      int64_t d) {
    (void)w, (void)gi, (void)rp, (void)nrows, (void)d;
    g->qb = NULL; /* the scores read g->qp */
}

static inline void FN(eng_pack_dout_group)(FN(work) * w, int64_t gi, const S *const *rp, int nrows, int64_t d) {
    FN(pack_rows)(w->dop + gi * ATTN_MR * d, rp, nrows, d, (T)1);
}

static inline void FN(eng_pack_fwd_block)(FN(work) * w, const FN(kblock) * kb) {
    const int64_t d = w->p->a.d;
    FN(pack_strips)(w->kp, kb->k, kb->ks, kb->nk, d);
    FN(pack_panels)(w->vp, ATTN_FBN, kb->v, kb->vs, kb->nk, d, kb->masked ? w->kpm : NULL);
}

static inline void FN(eng_pack_bwd_block)(FN(work) * w, const FN(kblock) * kb) {
    const int64_t d = w->p->a.d;
    FN(pack_strips)(w->kp, kb->k, kb->ks, kb->nk, d);
    FN(pack_strips)(w->vp, kb->v, kb->vs, kb->nk, d);
}

static inline void FN(eng_score_strip)(const FN(work) * w, const FN(group) * g, int64_t st, const T *const *init,
                                       T *out, int64_t ldo) {
    const int64_t d = w->p->a.d;
    FN(mk_nt)(d, g->qp, w->kp + st * d * NR, out, ldo, init);
}

static inline void FN(eng_window_strip)(const wavepe_attention_plan *p, const FN(group) * g, int64_t st,
                                        int64_t clo, int64_t chi, T *out, int64_t ldo) {
    const T *tp = (const T *)p->tpack;
    FN(mk_nt)(chi - clo, g->qp + clo * ATTN_MR, tp + (st * p->a.d + clo) * NR, out, ldo, NULL);
}

static inline void FN(eng_dp_strip)(const FN(work) * w, int64_t gi, int64_t st, T *out, int64_t ldo) {
    const int64_t d = w->p->a.d;
    FN(mk_nt)(d, w->dop + gi * ATTN_MR * d, w->vp + st * d * NR, out, ldo, NULL);
}

static inline void FN(eng_group_pv)(FN(work) * w, const FN(group) * g, const FN(kblock) * kb,
                                    const int64_t jl[ATTN_MR], const int64_t jv[ATTN_MR], T *o, int64_t ldo) {
    (void)kb;
    FN(rows_times_panels)(g, jl, jv, w->s, ATTN_SLD, w->vp, ATTN_FBN, w->p->a.d, o, ldo);
}
