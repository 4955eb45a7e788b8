/* attention_blocks_none.h: no block engine (attention_engine.h's block operations) -- every instantiation
 * but the amx ISA's bf16 / fp16: every key block runs group by group on the vector engine.  Each operation
 * says "not on blocks" (0) or does nothing; all are constants to the compiler, so the algorithm's block
 * branches compile away.  Part of attention_simd.h's template (ATTN_BLOCKS_FILE). */

static inline int FN(blk_p16)(void) { return 0; }
static inline VT FN(blk_weights16)(VT arg) { return arg; }
static inline void FN(blk_p_store)(uint16_t *p, VT e) { (void)p, (void)e; }
static inline void FN(blk_p_store2)(uint16_t *p, VT lo, VT hi) { (void)p, (void)lo, (void)hi; }
static inline T FN(blk_p_room)(void) { return (T)0; }
static inline void FN(blk_work_init)(FN(work) * w) { (void)w; }
static inline int FN(blk_work_alloc)(FN(work) * w, const wavepe_attention_plan *p, int64_t rows, int64_t bwd,
                                     int narrow) {
    (void)w, (void)p, (void)rows, (void)bwd, (void)narrow;
    return WAVEPE_OK;
}
static inline void FN(blk_work_free)(FN(work) * w) { (void)w; }
static inline void FN(blk_fwd_begin)(FN(work) * w, int64_t units, int64_t more) { (void)w, (void)units, (void)more; }
static inline int FN(blk_defer_groups)(FN(work) * w, const S *qbase, int late) {
    (void)w, (void)qbase, (void)late;
    return 0;
}
static inline void FN(blk_pack_rows)(FN(work) * w, const S *qbase, int64_t qs, int64_t rows) {
    (void)w, (void)qbase, (void)qs, (void)rows;
}
static inline int FN(blk_rows_on_tiles)(const FN(work) * w) {
    (void)w;
    return 0;
}
static inline int FN(blk_fwd_block)(FN(work) * w, FN(group) * groups, int64_t ngroups, const FN(kblock) * kb,
                                    int64_t b, int64_t hk, int wide) {
    (void)w, (void)groups, (void)ngroups, (void)kb, (void)b, (void)hk, (void)wide;
    return 0;
}
static inline int FN(blk_bwd_sums_on_tiles)(const FN(work) * w) {
    (void)w;
    return 0;
}
static inline int FN(blk_bwd_table_on_tiles)(const FN(work) * w, const T *dt_slot) {
    (void)w, (void)dt_slot;
    return 0;
}
static inline void FN(blk_bwd_head)(FN(work) * w, int64_t b, int64_t h) { (void)w, (void)b, (void)h; }
static inline int FN(blk_bwd_pack_block)(FN(work) * w, const FN(kblock) * kb) {
    (void)w, (void)kb;
    return 0;
}
static inline int FN(blk_bwd_key_block)(FN(work) * w, const FN(kblock) * kb, int scores_tiled) {
    (void)w, (void)kb, (void)scores_tiled;
    return 0;
}
static inline void FN(blk_bwd_dout_rows)(FN(work) * w, const S *doblk, int64_t dos, int64_t rows) {
    (void)w, (void)doblk, (void)dos, (void)rows;
}
static inline void FN(blk_bwd_key_block_end)(FN(work) * w, T *dk, T *dv, int64_t nk) {
    (void)w, (void)dk, (void)dv, (void)nk;
}
static inline int FN(blk_bwd_products)(FN(work) * w, int64_t m0, int64_t rows, const int64_t *jl_all,
                                       const int64_t *jv_all, int64_t *pos) {
    (void)w, (void)m0, (void)rows, (void)jl_all, (void)jv_all, (void)pos;
    return 0;
}
static inline void FN(blk_bwd_group_rows)(FN(work) * w, const FN(group) * g, int64_t gi, const FN(kblock) * kb,
                                          int64_t rows, const int64_t *pos, const int64_t *jv_all,
                                          const int64_t *jv, int64_t jmax, FN(score_rows) * sr,
                                          const T **dpr) {
    (void)w, (void)g, (void)gi, (void)kb, (void)rows, (void)pos, (void)jv_all, (void)jv, (void)jmax, (void)sr,
        (void)dpr;
}
static inline int FN(blk_bwd_dq_tiled)(const FN(work) * w, int tiled) {
    (void)w, (void)tiled;
    return 0;
}
static inline int64_t FN(blk_bwd_sums)(FN(work) * w, int64_t m0, int64_t rows, int64_t jvb, int64_t jbround,
                                       const FN(kblock) * kb, const int64_t *jv_all, T *dt_slot, int tiled,
                                       int table_tiled) {
    (void)w, (void)m0, (void)rows, (void)jbround, (void)kb, (void)jv_all, (void)dt_slot, (void)tiled,
        (void)table_tiled;
    return jvb;
}
