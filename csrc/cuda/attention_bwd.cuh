// attention_bwd.cuh: what the fused attention backward's two sources share -- attention_bwd.cu (the passes, their
// launches, every kernel but the tensor-core dK/dV's) and attention_bwd_dkdv_tc.cu (the tensor-core dK/dV's kernels):
// the device helpers both use, the tensor-core dK/dV's shared-memory layouts (the host sizes them), and the
// launchers attention_bwd_dkdv_tc.cu defines.
//
// Why two sources: the tensor-core dK/dV's code differs by compute capability (attention_bwd_dkdv_tc.cu's
// __CUDA_ARCH__ tests: spill-free variants for sm_100 and sm_120), the rest of the backward's does not -- so nvcc's
// front end runs for attention_bwd.cu twice (compute_80: sm_80's and sm_90's SASS; compute_100: sm_100's and sm_120's),
// and three times only for attention_bwd_dkdv_tc.cu (python/wavepe/_build/recipe.py: code_levels).
#pragma once

#include "attention_tile.cuh"

namespace wavepe_cuda {
namespace {

// s (the masked scores in the log2 domain, scores_log2_impl's) becomes dS = P (dP - D) (times 1 - tanh^2
// with a soft-cap), P = exp2(s - lse2) of the lane's rows (g, g + 8).  CAP as scores_log2_impl's.
template <int CAP, class A, int NT>
WAVEPE_DEVICE void dscores_of(A (&s)[NT][4], const A (&dp)[NT][4], const AttnParams &p, const A (&lse2)[2],
                              const A (&dl)[2]) {
    // with a soft-cap, the capped score's derivative 1 - tanh^2 = 1 - (s2 / cap)^2; without, icap = 0 and the
    // factor 1 (one loop for both)
    const A icap = CAP == 0 ? A(0) : A(p.cap_log2 > 0.0 ? p.icap_log2 : 0.0);
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const int ri = i / 2;
            const A s2 = s[nt][i], th = s2 * icap;
            // selection: a masked key's dP (dO . v, v possibly NaN) never reaches dS (nor its -inf score's factor)
            const bool none = s2 == neg_inf<A>() || lse2[ri] == neg_inf<A>();
            s[nt][i] = none ? A(0) : exp2_(s2 - lse2[ri]) * (dp[nt][i] - dl[ri]) * (A(1) - th * th);
        }
}

// acc -= dS |pos_q - n| over the warp's rows (first wm0) and the keys n0 .. (ALiBi's d loss / d slope; a
// masked pair's dS is 0).
template <class A, int NT>
WAVEPE_DEVICE void slope_grad(A &acc, const A (&ds)[NT][4], const AttnParams &p, int64_t wm0, int64_t n0) {
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const int64_t dist = p.a.q_offset + wm0 + frag_row(e) - (n0 + frag_col(nt, e));
            acc -= ds[nt][e] * A(dist < 0 ? -dist : dist);
        }
}

// Recompute of one warp's 16 query rows against the staged key block:
// dS (16 x B) in C fragments, from S (+ skewed bias), P and dP.  CAP as scores_log2_impl's: 0 no
// soft-cap, 1 a soft-cap, 2 p's (the dQ kernel); the dT kernel is instantiated per soft-cap instead
// (with CAP 2 it spilled its registers on sm_100).
template <class T, int B, int CAP = 2>
WAVEPE_DEVICE void warp_dscores(acc_t<T> (&ds)[B / 8][4], const AttnParams &p, const T *q_rows, const T *go_rows,
                                const T *Ks, const T *Vs, const T *t_rows, acc_t<T> *gw, bool warp_bias, int ld,
                                int gld, int ksteps, int64_t wm0, int64_t n0, const uint8_t *kmask,
                                const int64_t *wlo, const int64_t *whi, acc_t<T> scale,
                                acc_t<T> slope, const acc_t<T> (&lse2)[2], const acc_t<T> (&dl)[2]) {
    using A = acc_t<T>;
    constexpr int NT = B / 8;
    zero_frags(ds);
    warp_abt<T, NT>(ds, q_rows, ld, Ks, ld, ksteps);
    if (warp_bias) {
        warp_window_products<T, B>(gw, gld, q_rows, t_rows, ld, ksteps);
        __syncwarp();
        add_skewed_bias<A, NT, B>(ds, gw, gld);
        __syncwarp();
    }
    bool seen[2] = {false, false};  // (the forward's lse already says which rows are NaN)
    scores_log2_impl<CAP>(ds, p, wm0, n0, kmask, wlo, whi, scale * A(kLog2e), slope * A(kLog2e), seen);
    A dp[NT][4];
    zero_frags(dp);
    warp_abt<T, NT>(dp, go_rows, ld, Vs, ld, ksteps);
    dscores_of<CAP>(ds, dp, p, lse2, dl);
}

// lse (log2 domain) and D of query row m of (batch, head) bh.
template <class A>
WAVEPE_DEVICE void row_stat(A &lse2, A &dl, const AttnParams &p, int64_t bh, int64_t m) {
    const bool ok = m < p.a.m;
    const A l = ok ? static_cast<const A *>(p.a.lse)[bh * p.a.m + m] : neg_inf<A>();
    // -inf: the row saw no key; +inf: a zero-weight row (mark_neg_inf): both contribute nothing
    lse2 = l == neg_inf<A>() || l == -neg_inf<A>() ? neg_inf<A>() : l * A(kLog2e);
    dl = ok ? static_cast<const A *>(p.delta)[bh * p.a.m + m] : A(0);
}

// Per-lane lse (log2 domain) and D of the lane's two rows.
template <class A>
WAVEPE_DEVICE void row_stats(A (&lse2)[2], A (&dl)[2], const AttnParams &p, int64_t bh, int64_t wm0) {
#pragma unroll
    for (int ri = 0; ri < 2; ++ri) row_stat(lse2[ri], dl[ri], p, bh, wm0 + frag_row(2 * ri));
}

// The dK/dV kernel's elementwise step for a warp's 16 keys (rows rk) against the block's B query
// columns cq: st = S^T (q . k, + the bias G read transposed from gq when not null) becomes
// P^T = exp2(x - lse2) with x the scaled score (ALiBi, then the soft-cap when CAP) in the log2
// domain, and dpt = dP^T becomes dS^T = P^T (dP^T - D) (times 1 - tanh^2 when CAP).  Pairs outside
// the lane's keys' query columns [c_lo, c_hi) and rows without keys are 0 by selection (a masked
// pair's score or dP^T may be NaN).  dist0 = q_offset + m0 - (first key of the warp).
template <bool CAP, class A, int NT>
WAVEPE_DEVICE void dkdv_probs(A (&st)[NT][4], A (&dpt)[NT][4], const AttnParams &p, const A *gq, int gld, int wrow0,
                              int64_t dist0, const int (&c_lo)[2], const int (&c_hi)[2], const A *lse_s,
                              const A *delta_s, A scale_log2, A slope_log2) {
    constexpr int B = 8 * NT;
    const bool alibi = p.pos_enc == WAVEPE_CUDA_PE_ALIBI;
    const A cap = A(p.cap_log2), icap = A(p.icap_log2);
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const int rk = frag_row(e), cq = frag_col(nt, e);
            if (gq != nullptr) {
                const int g = cq / 16, r = cq % 16;
                st[nt][e] += gq[(g * 16 + r) * gld + r - (wrow0 + rk) + B - 1];
            }
            A x = st[nt][e] * scale_log2;
            if (alibi) {
                const int64_t dist = dist0 + (cq - rk);  // pos_q - n
                x -= slope_log2 * A(dist < 0 ? -dist : dist);
            }
            const A l2 = lse_s[cq];
            const bool masked = cq < c_lo[e / 2] || cq >= c_hi[e / 2] || l2 == neg_inf<A>();
            A ds = dpt[nt][e] - delta_s[cq];
            if constexpr (CAP) {
                const A th = tanh_(x * icap);
                x = cap * th;
                ds *= A(1) - th * th;
            }
            const A pr = exp2_(x - l2);
            st[nt][e] = masked ? A(0) : pr;
            dpt[nt][e] = masked ? A(0) : pr * ds;
        }
}

// qlo[c], qhi[c] = the positions [lo, hi) of the queries that see key n0 + c of batch row b, c < bn
// (shared memory; a __syncthreads makes them visible): key_queries -- its document's, from the key on
// when causal, within the window: the keys of wavepe_attention_keys read the other way -- cut to the
// queries there are.  Keys no query sees (absent, padded, no query in their document, past the last
// query's position, before the first one's window) get [0, 0) and kmask[c] = 1: zero rows, their
// dK, dV are 0 whatever they hold.
// (key_query_range: key n's range, each of them)
WAVEPE_DEVICE void key_query_range(const AttnParams &p, int64_t b, int64_t n, int64_t &lo, int64_t &hi) {
    lo = hi = 0;
    if (n < p.a.n && !(p.a.key_padding_mask != nullptr && p.a.key_padding_mask[b * p.a.kpm_stride + n] != 0)) {
        key_queries(p, b, n, lo, hi);
        if (lo < p.a.q_offset) lo = p.a.q_offset;
        if (hi > p.a.q_offset + p.a.m) hi = p.a.q_offset + p.a.m;
    }
    if (lo >= hi) lo = hi = 0;
}
WAVEPE_DEVICE void load_key_queries(int64_t *qlo, int64_t *qhi, uint8_t *kmask, int bn, const AttnParams &p,
                                    int64_t b, int64_t n0) {
    for (int c = threadIdx.x; c < bn; c += blockDim.x) {
        int64_t lo, hi;
        key_query_range(p, b, n0 + c, lo, hi);
        qlo[c] = lo;
        qhi[c] = hi;
        kmask[c] = lo >= hi ? 1 : 0;
    }
}

// The query blocks of bm rows a CTA of bn keys visits (load_key_queries' ranges, after its barrier):
// [i_start, i_end), those holding a query that sees one of the keys (the ranges are non-decreasing in
// the key, empty ones aside; causality and the window bound them); and of them the interior [ib, ie):
// whole blocks (< M) whose every query sees every key (none padded, absent or in another document,
// all within the causal frontier and the window) -- empty (ib = ie = i_end) where there is none.
struct KeyBlockQueries {
    int64_t i_start, i_end, ib, ie;
};
// (key_block_queries_of: key c's range from range(c, lo, hi), c < bn)
template <class Range>
WAVEPE_DEVICE KeyBlockQueries key_block_queries_of(Range range, int bn, int bm, const AttnParams &p) {
    int64_t lo = INT64_MAX, hi = INT64_MIN, lo_max = INT64_MIN, hi_min = INT64_MAX;
    for (int c = 0; c < bn; ++c) {
        int64_t klo, khi;
        range(c, klo, khi);
        if (klo < khi) {
            lo = klo < lo ? klo : lo;
            hi = khi > hi ? khi : hi;
        }
        // (a key no query sees, [0, 0), leaves no interior: a block's rows cannot be both >= 0 and < 0)
        lo_max = klo > lo_max ? klo : lo_max;
        hi_min = khi < hi_min ? khi : hi_min;
    }
    KeyBlockQueries r{0, 0, 0, 0};
    if (lo < hi) {  // within [q_offset, q_offset + M)
        r.i_start = (lo - p.a.q_offset) / bm;
        r.i_end = ceil_div(hi - p.a.q_offset, bm);
    }
    // block i: rows at positions q_offset + i bm .. + bm - 1 within [lo_max, hi_min), i < M / bm
    int64_t ib = -floor_div(-(lo_max - p.a.q_offset), bm), ie = floor_div(hi_min - p.a.q_offset - bm, bm) + 1;
    if (ie > p.a.m / bm) ie = p.a.m / bm;
    ib = ib < r.i_start ? r.i_start : ib;
    ie = ie > r.i_end ? r.i_end : ie;
    if (ie <= ib) ib = ie = r.i_end;
    r.ib = ib;
    r.ie = ie;
    return r;
}
WAVEPE_DEVICE KeyBlockQueries key_block_queries(const int64_t *qlo, const int64_t *qhi, int bn, int bm,
                                               const AttnParams &p) {
    return key_block_queries_of([&](int c, int64_t &lo, int64_t &hi) { lo = qlo[c], hi = qhi[c]; }, bn, bm, p);
}

// The table's band among the interior query blocks [kq.ib, kq.ie) of a CTA of bn keys from n0, blocks of bm rows:
// [bb, be), the blocks whose window (table rows of distances i bm + q_offset - n0 - bn + 1 .. i bm + q_offset - n0
// + bm - 1, less r_lo) meets the table's rows [0, R): i bm in [c - bm + 1, c + R + bn - 2], c = n0 + r_lo -
// q_offset; every interior block with clamped edges; none, bb = be = kq.ie, without an interior.  (The dK/dV's, and
// the host's count of them through the band split's partition, dkdv_band_split_blocks.)
WAVEPE_DEVICE void dkdv_band_blocks(const AttnParams &p, int64_t n0, int bn, int bm, const KeyBlockQueries &kq,
                                    int64_t &bb, int64_t &be) {
    bb = be = kq.ie;
    if (kq.ib >= kq.ie) return;
    const int64_t c = n0 + p.a.r_lo - p.a.q_offset;
    bb = p.a.clamp ? kq.ib : floor_div(c, bm);
    be = p.a.clamp ? kq.ie : floor_div(c + p.a.table_rows + bn - 2, bm) + 1;
    bb = bb < kq.ib ? kq.ib : bb > kq.ie ? kq.ie : bb;
    be = be < bb ? bb : be > kq.ie ? kq.ie : be;
}

// The dK/dV's band split at head_dim 64 and 128 (bwd_dkdv_band_split): the wide dK/dV (128 keys a CTA, query blocks
// of 64 rows) runs the first partial -- the interior blocks beyond its band --, the 16-key table instance (64 keys,
// blocks of bm rows, bm dividing 64) the second.  So that every (key, query) pair falls in exactly one, the 16-key
// CTA takes the interior [ib, ie) and band [bb, be) of the 128-key group holding its keys (key_block_queries_of over
// the group's keys, dkdv_band_blocks: the wide CTA's own), in its blocks of bm rows: its phase 0 the blocks before
// and after the group's interior -- its own masked ones and any of its own interior ones the group's keys do not
// all see (its masked loop, adding the bias where the window meets the table) --, phase 1 the group's band; the
// blocks between, the first partial's.  For the group's rows these are interior blocks of the CTA too (rows that
// see a group's every key see each of its keys).  False (kq, bb, be as they were) where the group has no interior:
// the first partial took none of its blocks, the CTA takes them all.
// GN, GM: the first partial's CTA's keys and query blocks -- the wide dK/dV's (128, 64) at 64 and 128; at 256, for the
// band split onto the general dK/dV (bwd_band_split_on_general), the tensor-core dK/dV's (64, 16).
template <int GN = 128, int GM = 64>
WAVEPE_DEVICE bool dkdv_band_split_blocks(const AttnParams &p, int64_t b, int64_t n0, int bm, KeyBlockQueries &kq,
                                          int64_t &bb, int64_t &be) {
    const int64_t g0 = n0 - n0 % GN;
    const KeyBlockQueries g = key_block_queries_of(
        [&](int c, int64_t &lo, int64_t &hi) { key_query_range(p, b, g0 + c, lo, hi); }, GN, GM, p);
    if (g.ib >= g.ie) return false;
    int64_t gbb, gbe;
    dkdv_band_blocks(p, g0, GN, GM, g, gbb, gbe);
    const int64_t r = GM / bm;
    kq.ib = g.ib * r, kq.ie = g.ie * r, bb = gbb * r, be = gbe * r;
    return true;
}

// The dK/dV kernels' query columns [c_lo[ri], c_hi[ri]) of a block of bq queries from m0 that see the lane's keys
// (rows g, g + 8 of the warp's 16: ri = 0, 1; qlo / qhi, each key's queries): 32-bit, once a block.  Does some lane
// of the warp have one (warp-uniform)?
WAVEPE_DEVICE bool lane_key_columns(const AttnParams &p, const int64_t *qlo, const int64_t *qhi, int warp, int64_t m0,
                                    int bq, int (&c_lo)[2], int (&c_hi)[2]) {
#pragma unroll
    for (int ri = 0; ri < 2; ++ri) {
        const int k = 16 * warp + frag_row(2 * ri);
        const int64_t lo = qlo[k] - (p.a.q_offset + m0), hi = qhi[k] - (p.a.q_offset + m0);
        c_lo[ri] = lo < 0 ? 0 : (lo > bq ? bq : int(lo));
        c_hi[ri] = hi < 0 ? 0 : (hi > bq ? bq : int(hi));
    }
    return warp_any(c_lo[0] < c_hi[0] || c_lo[1] < c_hi[1]);
}

// The tensor-core backward's blocks at head_dim 256, which the band split onto the general kernels follows
// (bwd_band_split_on_general: the first partial on the tensor cores, the second here): a dK/dV CTA's 64 keys in query
// blocks of 16 rows, a dQ CTA's 64 rows in key blocks of 16 keys (checked at TcDkdvTiles and TcDqTiles).
constexpr int kTc256DkdvKeys = 64, kTc256DkdvRows = 16, kTc256DqRows = 64, kTc256DqKeys = 16;

// The second partial of the band split onto the general kernels (p.band_part 2: bwd_band_split_on_general) -- bf16 /
// fp16 at head_dim 256 only: the other instances carry none of it.
template <class T, int DMAX>
constexpr bool kGeneralBandSplit = Traits<T>::kTensorCore && DMAX == 256;

// The query blocks a tensor-core dK/dV CTA takes, in phases, each over the heads of its GQA group in turn:
// 0, those with masks, [i_start, ib) and [ie, i_end) (key_block_queries); 1, the interior blocks in the
// table's band, [bb, be); 2, the other interior ones, [ib, bb) and [be, ie).  Per phase p (3: none): n[p]
// blocks a head, the u-th at start0[p] + u for u < split[p], else at start1[p] + u; next_phase[p] the next
// phase with blocks (next_phase[3]: the first).
struct TcDkdvOrder {
    int n[4], split[4], start0[4], start1[4], next_phase[4];
};

// With a relative table, the window's BM + BN rows (one buffer; the bias reaches the scores in registers:
// add_transposed_bias).
// Head dim 256: query blocks of 16 rows (Q's and dO's two buffers 33 KiB, the CTA 101 KiB: two share an H100's
// SM), and each CTA owns one of CS = 2 column slices of dK and dV (128 columns: 2 x 64 accumulators a lane, as
// at 128), recomputing S^T and dP^T over the whole head dim -- 1.5x the products of one CTA holding all 256
// columns, which a warp's registers cannot.
// GONE: dO in one buffer (attn_bwd_dkdv_tc_gone_kernel) -- at head_dim 256 without a table the two buffers take the
// CTA to 102,800 bytes, 1,424 past the 99 KiB of sm_86, sm_89 and sm_120; with one, 94,352.  At 64 the two buffers'
// 57,488 bytes hold one CTA on those 100 KiB SMs; with one, 48,272, two.
template <class T, int D, bool GONE = false>
struct TcDkdvTiles {
    static_assert(D == 64 || D == 128 || D == 256, "the tensor-core dK/dV's head dims");
    static_assert(!GONE || D == 64 || D == 256, "dO in one buffer: head_dim 64 or 256");
    static constexpr int BN = 64, BM = D <= 64 ? 64 : D <= 128 ? 32 : 16, LD = D + int(16 / sizeof(T)),
                         CS = D <= 128 ? 1 : 2;
    // (CS named here too: where the host alone sizes an instance -- the dO-in-one-buffer one at 64 on sm_100 / sm_120,
    // a stub there -- nvcc's -Werror would take the unread member for an error)
    static_assert(CS == 1 || D == 256, "column slices: head_dim 256");
    SmemPlan plan;
    int k, v, q, go, lse, delta, mask, rows, order, t;
    __host__ __device__ explicit TcDkdvTiles(bool table) {
        k = plan.add(sizeof(T) * BN * LD);
        v = plan.add(sizeof(T) * BN * LD);
        q = plan.add(2 * sizeof(T) * BM * LD);  // two buffers of each
        go = plan.add((GONE ? 1 : 2) * sizeof(T) * BM * LD);
        lse = plan.add(2 * sizeof(float) * BM);
        delta = plan.add(2 * sizeof(float) * BM);
        mask = plan.add(BN);
        rows = plan.add(2 * BN * sizeof(int64_t));  // each key's queries [lo, hi)
        order = plan.add(sizeof(TcDkdvOrder));
        t = plan.add(table ? sizeof(T) * (BM + BN) * LD : 0);
    }
};
template <class T, int D>
using TcDkdvLayout = TcDkdvTiles<T, D, false>;
static_assert(TcDkdvLayout<__half, 256>::BN == kTc256DkdvKeys && TcDkdvLayout<__half, 256>::BM == kTc256DkdvRows,
              "the band split onto the general dK/dV follows these blocks");

// The interior blocks' scores (every pair seen): KIND kPlain x = s scale_log2, kAlibi x = s scale_log2 -
// slope_log2 |dist|, kCap x = cap tanh(s scale_log2 / cap) (tanh_exp2, as the forward's interior blocks;
// th = the tanh, for the derivative 1 - th^2), all in the log2 domain.
// (kPrefix: the wide dQ's masked blocks whose keys every row sees from the first on: attn_bwd_dq_tc_cta)
enum { kMasked, kPlain, kAlibi, kCap, kPrefix };
template <int KIND>
WAVEPE_DEVICE float interior_score(float s, float scale_log2, float slope_log2, float dist, float cap, float k,
                                   float &th) {
    if constexpr (KIND == kAlibi) return s * scale_log2 - slope_log2 * fabsf(dist);
    if constexpr (KIND == kCap) {
        th = tanh_exp2(s * k);
        return cap * th;
    }
    return s * scale_log2;
}

// The wide tensor-core dK/dV's shared memory (attn_bwd_dkdv_tc_wide_kernel: attention_bwd_dkdv_tc.cu says how
// it is used).
template <class T, int D>
struct TcDkdvWideLayout {
    static constexpr int BN = 128, BM = 64, LD = D + int(16 / sizeof(T)), PLD = BM + int(16 / sizeof(T));
    SmemPlan plan;
    int k, v, q, go, pt, dst, lse, delta, mask, rows, order, cta;
    __host__ __device__ TcDkdvWideLayout() {
        k = plan.add(sizeof(T) * BN * LD);
        v = plan.add(sizeof(T) * BN * LD);
        q = plan.add(2 * sizeof(T) * BM * LD);  // two buffers of each
        go = plan.add(2 * sizeof(T) * BM * LD);
        pt = plan.add(sizeof(T) * BN * PLD);  // P^T and dS^T of the block (keys x queries)
        dst = plan.add(sizeof(T) * BN * PLD);
        lse = plan.add(2 * sizeof(float) * BM);
        delta = plan.add(2 * sizeof(float) * BM);
        mask = plan.add(BN);
        rows = plan.add(2 * BN * sizeof(int64_t));  // each key's queries [lo, hi)
        order = plan.add(sizeof(TcDkdvOrder));
        cta = plan.add(3 * sizeof(int64_t));  // the CTA's batch row, kv head and first key
    }
};

}  // namespace

// The tensor-core dK/dV's instances (attention_bwd_dkdv_tc.cu), for launch_dkdv (attention_bwd.cu), which chooses among
// them: kTwoBuffers and kTable attn_bwd_dkdv_tc_kernel without and with the table's window, kOneBuffer
// attn_bwd_dkdv_tc_gone_kernel (head dim 64 and 256), the wide ones attn_bwd_dkdv_tc_wide_kernel (head dim 64 and
// 128) by the kind of their interior blocks.
enum class TcDkdvKernel { kTwoBuffers, kTable, kOneBuffer, kWidePlain, kWideAlibi, kWideCap };
// Launch one over ctas CTAs with smem bytes of shared memory (cudaErrorInvalidValue: no such instance at head dim D).
template <class T, int D>
cudaError_t launch_tc_dkdv(TcDkdvKernel kernel, const AttnParams &p, int64_t ctas, size_t smem, cudaStream_t stream);
// kTwoBuffers / kTable by launch_band_parts: the table's where the call has one, the band split's two parts where
// p.band_part is set.
template <class T, int D>
cudaError_t launch_tc_dkdv_band_parts(const AttnParams &p, int64_t ctas, cudaStream_t stream);

}  // namespace wavepe_cuda
