// attention_bwd_dkdv_tc.cu: the fused attention backward's tensor-core dK/dV kernels (attention_bwd.cu says what the
// backward computes, and launches these through launch_tc_dkdv: attention_bwd.cuh).  A source of their own because
// their code differs by compute capability (the __CUDA_ARCH__ tests below: the variants ptxas keeps free of spills on
// sm_100 and sm_120) and the rest of the backward's does not: only this one needs nvcc's front end for sm_120 apart.
#include "arch_tuning.cuh"
#include "attention_bwd.cuh"

namespace wavepe_cuda {
namespace {


// ---- the tensor-core dK/dV of the models' head dims ------------------------------------------
// bf16/fp16, head_dim 64, 128 or 256, 16-byte rows of q, k, v and dO (and the table's) (use_tc_dkdv): the
// FlashAttention-2 loop of the key side.  A CTA owns 64 keys of a (batch, kv head) (warp w: keys
// 16w .. 16w+15; at 256 one of two column slices of their dK and dV: TcDkdvLayout), K and V staged once, and
// walks the query blocks of every head of its GQA group that can see them (BM = 32 queries at head_dim 128,
// 64 at 64, 16 at 256): per block, by ldmatrix from rows padded
// by 16 bytes (no bank conflict), S^T = K_w Q^T and dP^T = V_w dO^T on the tensor cores, P^T and
// dS^T = P^T (dP^T - D) in registers, then dV += P^T dO and dK += dS^T Q with P^T, dS^T as the A
// operands straight from their C fragments (warp_rb: ldmatrix.trans of dO and Q).  Q, dO, and the rows'
// lse and D have two buffers: the next block's copies are in flight while this one is computed, one
// barrier a block (two with the table's bias, where its window is copied at the block's start).  A block runs one
// of two loops: the interior blocks -- whole blocks every query of
// which sees every key, no padding or soft-cap -- without masks (the scale folded into the exponent's
// FFMA; with ALiBi a loop of its own adding -slope |distance|; rows that saw no key, lse -inf, give 0
// by selection as before); the others through dkdv_probs, as attn_bwd_dkdv_kernel.  With a relative
// table (TABLE: a kernel of its own) the interior blocks whose window meets the table (the band) take a
// loop of their own before the others, and they and the masked blocks meeting the table add the bias:
// each warp its own G^T = T_win Q^T (the window rows its 16 keys meet) on the tensor cores, skewed into S^T's
// fragments by shuffles (add_transposed_bias); the window has one buffer, refilled at the next block's start --
// a ring: the next query block's window shares all but BM of its rows with this one's, and only those BM are
// copied.
// The order of a CTA's query blocks kq (key_block_queries), the band's interior blocks [bb, be) (bb = be = kq.ie:
// none), part the band split's (1: the blocks beyond the band only, 2: the others, 0: all).
WAVEPE_DEVICE TcDkdvOrder tc_dkdv_order(const KeyBlockQueries &kq, int64_t bb, int64_t be, int part) {
    const int n_head = int(kq.ib - kq.i_start), n_pre = int(bb - kq.ib);
    TcDkdvOrder o{{n_head + int(kq.i_end - kq.ie), int(be - bb), n_pre + int(kq.ie - be), 0},
                  {n_head, int(be - bb), n_pre, 0},
                  {int(kq.i_start), int(bb), int(kq.ib), 0},
                  {int(kq.ie) - n_head, 0, int(be) - n_pre, 0},
                  {3, 3, 3, 3}};
    if (part == 1) o.n[0] = o.n[1] = 0;  // (the band's blocks never run in the table-free instance)
    if (part == 2) o.n[2] = 0;
    for (int ph = 2; ph >= 0; --ph) o.next_phase[ph == 0 ? 3 : ph - 1] = o.n[ph] > 0 ? ph : o.next_phase[ph];
    return o;
}

// A CTA's place in its order: the head of the group, the index in the phase's blocks, the phase (0 masked, 1 the
// band's interior, 2 other interior, 3 done) and the buffer of Q and dO the block lands in.
struct TcDkdvCursor {
    int h, u, phase, buf;
};
// the block of (phase, u): the order's two ranges of the phase (read from shared memory: no branch)
WAVEPE_DEVICE int tc_dkdv_block(const TcDkdvOrder *ord, int phase, int u) {
    return u < ord->split[phase] ? ord->start0[phase] + u : ord->start1[phase] + u;
}
WAVEPE_DEVICE TcDkdvCursor tc_dkdv_next(const TcDkdvOrder *ord, TcDkdvCursor c, int group) {
    c.buf ^= 1;
    if (++c.u == ord->n[c.phase]) {
        c.u = 0;
        if (++c.h == group) {
            c.h = 0;
            c.phase = ord->next_phase[c.phase];
        }
    }
    return c;
}

// A tensor-core dK/dV CTA's keys n0 .. n0 + BN - 1 of (batch b, kv head hk): each one's queries (load_key_queries,
// after a barrier) and its K and V rows (cp.async, zero rows for keys no query sees; the caller commits).
template <class T, int BN, int D, int LD>
WAVEPE_DEVICE void tc_dkdv_load_keys(const AttnParams &p, int64_t b, int64_t hk, int64_t n0, T *Ks, T *Vs, int64_t *qlo,
                                     int64_t *qhi, uint8_t *kmask) {
    const T *kg = static_cast<const T *>(p.a.k) + b * p.a.k_strides[0] + hk * p.a.k_strides[1];
    const T *vg = static_cast<const T *>(p.a.v) + b * p.a.v_strides[0] + hk * p.a.v_strides[1];
    load_key_queries(qlo, qhi, kmask, BN, p, b, n0);
    __syncthreads();
    load_tile_async(Ks, LD, BN, D, D, [&](int r) -> const T * {
        return kmask[r] ? nullptr : kg + (n0 + r) * p.a.k_strides[2];
    });
    load_tile_async(Vs, LD, BN, D, D, [&](int r) -> const T * {
        return kmask[r] ? nullptr : vg + (n0 + r) * p.a.v_strides[2];
    });
}

// Where a staged query block's dO rows are read from: its first row (null: no block), whether the block is whole
// (interior, or not in the masked phase 0: every row < M) and how many of its rows lie below M.  tc_dkdv_stage
// answers it, so that the kernel with dO in one buffer (GONE) copies the block's dO after its second barrier
// (tc_dkdv_stage_dout) without deriving the block's address again (48 instructions a block fewer on sm_90).
template <class T> struct DoutRows {
    const T *first;
    bool whole;
    int64_t below_m;
};

// Stage query block c of (batch b, kv head hk) into buffer c.buf of Q's and dO's BM-row tiles (cp.async, NTHREADS
// threads; the caller commits), its rows' lse (log2 domain) and D by plain stores (visible after the next barrier).
// INTERIOR: c is an interior block (or none), every row < M -- the copies without per-row tests.  WHAT: 1 its Q, lse
// and D, 3 all (GONE, dO in one buffer -- TcDkdvTiles --, stages a block's dO later: tc_dkdv_stage_dout).  Returns
// where its dO rows are (unread but by GONE's steps: the compiler drops it).
template <class T, int BM, int D, int LD, int NTHREADS, bool INTERIOR, int WHAT = 3, bool GONE = false>
WAVEPE_DEVICE DoutRows<T> tc_dkdv_stage(const AttnParams &p, const TcDkdvOrder *ord, const TcDkdvCursor &c,
                                        int64_t b, int64_t hk, T *Q0, T *dO0, float *lse0, float *delta0) {
    static_assert(WHAT == 1 || WHAT == 3, "Q, lse and D; with or without dO");
    if (INTERIOR ? c.phase != 1 && c.phase != 2 : c.phase >= 3) return {nullptr, false, 0};
    const int64_t h = hk * p.group + c.h, m0 = int64_t(tc_dkdv_block(ord, c.phase, c.u)) * BM;
    T *const Qb = Q0 + c.buf * BM * LD, *const dOb = dO0 + (GONE ? 0 : c.buf * BM * LD);
    const T *qg = static_cast<const T *>(p.a.q) + b * p.a.q_strides[0] + h * p.a.q_strides[1];
    const T *gog = static_cast<const T *>(p.a.dout) + b * p.a.dout_strides[0] + h * p.a.dout_strides[1];
    const int64_t qs = p.a.q_strides[2], gs = p.a.dout_strides[2];
    if (INTERIOR || c.phase != 0) {
        if constexpr (WHAT & 1) load_rows_async<T, BM, D, LD, NTHREADS>(Qb, qg + m0 * qs, qs);
        if constexpr (WHAT & 2) load_rows_async<T, BM, D, LD, NTHREADS>(dOb, gog + m0 * gs, gs);
    } else {
        if constexpr (WHAT & 1)
            load_tile_async(Qb, LD, BM, D, D,
                            [&](int r) -> const T * { return m0 + r < p.a.m ? qg + (m0 + r) * qs : nullptr; });
        if constexpr (WHAT & 2)
            load_tile_async(dOb, LD, BM, D, D, [&](int r) -> const T * {
                return m0 + r < p.a.m ? gog + (m0 + r) * gs : nullptr;
            });
    }
    static_assert(BM <= NTHREADS, "a row per thread");
    const int r = threadIdx.x;
    if ((WHAT & 1) && r < BM) {
        const int64_t m = m0 + r, row = (b * p.a.heads + h) * p.a.m + m;
        const bool ok = INTERIOR || m < p.a.m;
        const float l = ok ? static_cast<const float *>(p.a.lse)[row] : neg_inf<float>();
        // (row_stats: -inf, a row that saw no key, and +inf, a zero-weight row, contribute nothing)
        lse0[c.buf * BM + r] = l == neg_inf<float>() || l == -neg_inf<float>() ? neg_inf<float>() : l * float(kLog2e);
        delta0[c.buf * BM + r] = ok ? static_cast<const float *>(p.delta)[row] : 0.f;
    }
    return {gog + m0 * gs, INTERIOR || c.phase != 0, p.a.m - m0};
}

// GONE's copy of a block's dO rows (src: tc_dkdv_stage's answer) into dO's one buffer, the copies tc_dkdv_stage's WHAT
// = 3 makes (cp.async, NTHREADS threads; the caller commits).  INTERIOR: as tc_dkdv_stage's.  (tc_dkdv_stage keeps
// its own two calls: with its dO copies made here, ptxas allocated the other dK/dV kernels' registers anew -- 8 bytes
// spilled in the wide dK/dV on sm_90, 40 in the table instance at 128 on sm_100, its main loops 0.1 heavier.)
template <class T, int BM, int D, int LD, int NTHREADS, bool INTERIOR>
WAVEPE_DEVICE void tc_dkdv_stage_dout(const DoutRows<T> &src, int64_t stride, T *dO0) {
    if (src.first == nullptr) return;
    if (INTERIOR || src.whole)
        load_rows_async<T, BM, D, LD, NTHREADS>(dO0, src.first, stride);
    else
        load_tile_async(dO0, LD, BM, D, D,
                        [&](int r) -> const T * { return r < src.below_m ? src.first + r * stride : nullptr; });
}

// The skew of add_transposed_bias's exchange among the 8 lanes of a column: a tile X of C fragments (S^T: rows the
// warp's keys r, columns the queries c) takes X[r][c] = Y[c - r + 15][c] from Y (G^T: 32 rows, two m-tiles; the
// same 16 columns).  Element 2 a + b of lane (g, t)'s tile j -- r = g + 8 a, c = 8 j + 2 t + b -- is Y's row u =
// c - r + 15 of the same column: lane (u mod 8, t), its 8-row group u / 8 (m-tile u / 16, element 2 ((u / 8) mod 2)
// + b).  Over the 8 lanes g of a column u takes 8 consecutive values, so the lanes (g', t) it reads are distinct:
// g' = (k_b - g) mod 8, k_b = (7 + 2 t + b) mod 8, and each knows which group its one reader wants -- R = j - a +
// 1 + off_b, off_b = [2 t + b > 0] - [g' > k_b] (-1, 0 or 1).  Checked over all lanes and elements in numpy
// (2026-11-29) and by every table test of the dK/dV.
struct SkewColumn {
    int src[2];                  // the lane step b reads
    bool down[2], up[2];         // its reader's group: off_b -1, +1 (else 0)
    WAVEPE_DEVICE SkewColumn() {
        const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
#pragma unroll
        for (int b = 0; b < 2; ++b) {
            const int k = (7 + 2 * t + b) & 7, off = int(2 * t + b > 0) - int(g > k);
            src[b] = (((k - g) & 7) << 2) | t;
            down[b] = off < 0;
            up[b] = off > 0;
        }
    }
    // element b of the pair, from the lane's element of Y's groups d, d + 1, d + 2 (d = j - a)
    WAVEPE_DEVICE float take(int b, float r0, float r1, float r2) const {
        return __shfl_sync(kFullMask, down[b] ? r0 : up[b] ? r2 : r1, src[b]);
    }
};

// st[nt][e] (the warp's key row r = frag_row(e) -- key 16 w + r of the block --, query column c = frag_col(nt, e) of
// the chunk) += the bias q_c . T_win[c - (16 w + r) + BN - 1], on the tensor cores and in registers: for each 16
// query columns 16 h .. of the chunk, G^T = T_win[x0 + 16 h .. x0 + 16 h + 31] Q_h^T (two m-tiles of the window,
// x0 = the chunk's first column + BN - 16 - 16 w; the window's A fragments by ldmatrix from the ring -- row x at
// (x + ring) mod W --, Q's B fragments as warp_abt_ldm's, brow) and S^T[r][c] += G^T[c mod 16 - r + 15][c]: the same
// column, the row skewed -- an exchange among the 8 lanes of a column by shuffles (SkewColumn).  2 KS HMMA a
// 8-column tile of S^T, twice its own products' KS.  (Until 2026-11-29 all warps computed G = Q T_win^T of the
// block into shared memory, read back transposed after a barrier: its stores 2-way bank-conflicted -- no layout
// serves both the stores and the skewed reads, docs/CUDA.md -- and 12.4 KiB of the CTA at head_dim 128.)
template <class T, int NT, int BN, int W, int KS, int LD>
WAVEPE_DEVICE void add_transposed_bias(float (&st)[NT][4], const T *Qc, const T *Ts, int x0, int ring, int brow) {
    static_assert(NT % 2 == 0, "16 query columns at a time");
    const int lane = threadIdx.x & 31;
    const SkewColumn sk;  // (here, not held through the block: registers)
    // (dK and dV's accumulators are live: fully unrolled, ptxas spilled 40-150 bytes on sm_90 at head_dim 64 and 128,
    // unrolled by 2 at 128 too; a static count takes such a loop's body once)
    [[maybe_unused]] constexpr int UNROLL = KS > 8 ? 4 : KS > 4 ? 1 : 2;
#pragma unroll
    for (int h = 0; h < NT / 2; ++h) {
        const T *trow[2];
#pragma unroll
        for (int mt = 0; mt < 2; ++mt) {
            const int x = x0 + 16 * h + 16 * mt + (lane & 15) + ring;
            trow[mt] = Ts + (x < W ? x : x - W) * LD + 8 * (lane >> 4);
        }
        float gt[2][2][4];  // [m-tile][n-tile]
        zero_frags(gt[0]);
        zero_frags(gt[1]);
        const T *qrow = Qc + 16 * h * LD + brow;
        // (the addresses stepped, not recomputed from ks: a loop not unrolled took 5 IMAD a step for them)
#pragma unroll UNROLL
        for (int ks = 0; ks < KS; ++ks, qrow += 16, trow[0] += 16, trow[1] += 16) {
            uint32_t qf[4];
            ldmatrix_x4(qf, qrow);
#pragma unroll
            for (int mt = 0; mt < 2; ++mt) {
                uint32_t tf[4];
                ldmatrix_x4(tf, trow[mt]);
                mma16816<T>(gt[mt][0], tf, qf);
                mma16816<T>(gt[mt][1], tf, qf + 2);
            }
        }
        // Y's 8-row group R of n-tile j, element b
        auto y = [&](int R, int j, int b) {
            R = R < 0 ? 0 : R;  // (group -1 is never read: off_b -1 needs 2 t + b > 0 or g' > 7)
            return gt[R >> 1][j][2 * (R & 1) + b];
        };
#pragma unroll
        for (int j = 0; j < 2; ++j)
#pragma unroll
            for (int a = 0; a < 2; ++a)
#pragma unroll
                for (int b = 0; b < 2; ++b) {
                    const int d = j - a;
                    st[2 * h + j][2 * a + b] += sk.take(b, y(d, j, b), y(d + 1, j, b), y(d + 2, j, b));
                }
    }
}

// dkdv_probs on an interior block: st = S^T becomes P^T = exp2(x - lse2) (interior_score's x), dpt = dP^T
// becomes dS^T = P^T (dP^T - D) (times 1 - th^2 with a soft-cap); a query that saw no key (lse2 -inf)
// gives 0 by selection.  MT m-tiles of 16 keys (m-tile mt 16 mt keys after the first), each query column's lse
// and D read once for them; d0 = the distance pos_q - n of the lane's first element (row g, column 2 t) of m-tile 0.
template <int KIND, int MT, int NT>
WAVEPE_DEVICE void dkdv_probs_interior(float (&st)[MT][NT][4], float (&dpt)[MT][NT][4], const float *lse_s,
                                       const float *delta_s, const AttnParams &p, float scale_log2, float slope_log2,
                                       float d0) {
    const int t4 = threadIdx.x & 3;
    const float cap = float(p.cap_log2), k = scale_log2 * float(p.icap_log2);
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
        float2 l, dl;
        copy8(&l, lse_s + nt * 8 + 2 * t4);
        copy8(&dl, delta_s + nt * 8 + 2 * t4);
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const float le = e % 2 ? l.y : l.x, de = e % 2 ? dl.y : dl.x;
                float x, th = 0.f;
                if constexpr (KIND == kPlain)
                    x = fma_(st[mt][nt][e], scale_log2, -le);
                else
                    x = interior_score<KIND>(st[mt][nt][e], scale_log2, slope_log2,
                                             d0 + float(nt * 8 + e % 2 - 8 * (e / 2) - 16 * mt), cap, k, th) - le;
                const float pr = exp2_(x);
                const bool dead = le == neg_inf<float>();
                const float ds = dpt[mt][nt][e] - de;
                dpt[mt][nt][e] = dead ? 0.f : pr * (KIND == kCap ? ds * (1.f - th * th) : ds);
                st[mt][nt][e] = dead ? 0.f : pr;
            }
    }
}

// (the kernel, attn_bwd_dkdv_tc_kernel, below: QC query columns a chunk).  GONE: dO in one buffer (TcDkdvTiles): a
// block's dO is read by dP^T's and dV's products only, so the next block's dO is staged after a second barrier, once
// every warp has its dV, under dK += dS^T Q (its Q, two buffers, at the step's start as elsewhere)
template <class T, int D, bool TABLE, int QC, bool GONE = false>
WAVEPE_DEVICE void dkdv_tc_cta(const AttnParams &p) {
    using Lay = TcDkdvTiles<T, D, GONE>;
    // DT: the accumulators' 8-column tiles, of the CTA's column slice
    constexpr int BN = Lay::BN, BM = Lay::BM, LD = Lay::LD, NT = QC / 8, DT = D / 8 / Lay::CS, KS = D / 16;
    static_assert(Traits<T>::kTensorCore && BM % QC == 0, "the tensor-core dK/dV takes bf16/fp16, whole chunks");
    static_assert(!GONE || (!TABLE && QC == BM), "dO in one buffer: no table, one chunk a block");
    WAVEPE_SHARED_BASE(smem);
    constexpr bool has_table = TABLE;  // (a kernel of its own: the others keep their registers)
    // the band split: 1, the table-free instance over the interior blocks beyond the band (at head_dim 256; at 64 and
    // 128 the wide dK/dV's); 2, the table's over the others, adding the first's sums
    const int part = D == 256 || TABLE ? p.band_part : 0;
    const Lay L(has_table);
    T *const Ks = reinterpret_cast<T *>(smem + L.plan.off[L.k]);
    T *const Vs = reinterpret_cast<T *>(smem + L.plan.off[L.v]);
    T *const Ts = reinterpret_cast<T *>(smem + L.plan.off[L.t]);
    T *const Q0 = reinterpret_cast<T *>(smem + L.plan.off[L.q]);
    T *const dO0 = reinterpret_cast<T *>(smem + L.plan.off[L.go]);
    float *const lse0 = reinterpret_cast<float *>(smem + L.plan.off[L.lse]);
    float *const delta0 = reinterpret_cast<float *>(smem + L.plan.off[L.delta]);
    uint8_t *const kmask = smem + L.plan.off[L.mask];
    int64_t *const qlo = reinterpret_cast<int64_t *>(smem + L.plan.off[L.rows]), *const qhi = qlo + BN;
    const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;

    const int64_t nblocks = ceil_div(p.a.n, BN);
    const int64_t cta = blockIdx.x / Lay::CS, nb = cta % nblocks, bhk = cta / nblocks;
    const int col0 = int(blockIdx.x % Lay::CS) * (D / Lay::CS);  // the CTA's columns of dK and dV
    const int64_t b = bhk / p.a.kv_heads, hk = bhk % p.a.kv_heads;
    const int64_t n0 = nb * BN, wn0 = n0 + 16 * warp;
    tc_dkdv_load_keys<T, BN, D, LD>(p, b, hk, n0, Ks, Vs, qlo, qhi, kmask);
    // The query blocks in the order taken: every head's [i_start, ib) and [ie, i_end) -- masks, padding,
    // soft-cap, the last partial block --, then every head's interior blocks in the table's band [bb, be)
    // (their window meets the table), then every head's other interior blocks [ib, bb) and [be, ie)
    // (three loops, none inside a loop over the heads); the n-th block of the CTA lands in buffer n % 2.
    const bool capped = p.cap_log2 > 0.0;
    // does the window of query block m0 (table rows c - BN + 1 .. c + BM - 1, c = q_offset + m0 - n0 - r_lo)
    // meet the table?
    auto block_bias = [&](int64_t m0) {
        const int64_t c = p.a.q_offset + m0 - n0 - p.a.r_lo;
        return has_table && table_rows_hit(p, c - (BN - 1), c + BM - 1);
    };
    // The order, in shared memory (read where used: 10 values fewer held in registers through the loops,
    // which dK's and dV's accumulators fill); 32-bit block indices (tc_backward_applies bounds M).
    TcDkdvOrder *const ord = reinterpret_cast<TcDkdvOrder *>(smem + L.plan.off[L.order]);
    if (threadIdx.x == 0) {
        KeyBlockQueries kq = key_block_queries(qlo, qhi, BN, BM, p);
        if (capped && p.pos_enc == WAVEPE_CUDA_PE_ALIBI) kq.ib = kq.ie = kq.i_end;  // (as the forward's; padding
                                                                                    // leaves no interior by itself)
        int64_t bb = kq.ie, be = kq.ie;
        if (has_table || part == 1) dkdv_band_blocks(p, n0, BN, BM, kq, bb, be);
        // (at 64 and 128 the second partial takes the blocks the wide dK/dV left: where it took none, all)
        const bool split = D == 256 || (part == 2 && dkdv_band_split_blocks(p, b, n0, BM, kq, bb, be));
        *ord = tc_dkdv_order(kq, bb, be, split ? part : 0);
    }
    __syncthreads();
    using Cursor = TcDkdvCursor;
    auto next_of = [=](Cursor c) { return tc_dkdv_next(ord, c, p.group); };
    // the block's first query row (the order read again where used: fewer registers held)
    auto row0 = [=](const Cursor &c) { return int64_t(tc_dkdv_block(ord, c.phase, c.u)) * BM; };
    // does block c need the table's window (a band block, or a masked one whose window meets the table)?
    auto needs_window = [&](const Cursor &c) {
        return c.phase == 1 || (c.phase == 0 && has_table && block_bias(row0(c)));
    };
    // The window of query block m0 + BM is that of m0 moved BM rows on: its rows 0 .. BN - 1 are m0's BM .. BM + BN -
    // 1, so after m0's only its last BM rows are copied, over m0's first BM -- a third of the window at head_dim 128,
    // half at 64, a fifth at 256.  Row w of the current window sits at (w + ring) mod (BM + BN); a whole window is
    // copied at ring 0.  win: the query block whose window the buffer holds once the copies in flight land.
    constexpr int W = BM + BN;
    int ring = 0;
    int64_t win = -1;
    auto stage_window = [&](int64_t m0) {  // the window of query block m0, whole (cp.async; the caller commits)
        ring = 0;
        load_window_async<T, W, D, LD, 128>(Ts, p, p.a.q_offset + m0 - n0 - p.a.r_lo, BN);
        win = m0;
    };
    auto stage_window_next = [&](int64_t m0) {  // ... or, where the buffer holds m0 - BM's, its last BM rows
        if (win != m0 - BM) return stage_window(m0);
        // rows BN .. BN + BM - 1 where m0 - BM's rows 0 .. BM - 1 are (ring is a multiple of BM: no wrap)
        load_window_async<T, BM, D, LD, 128>(Ts + ring * LD, p, p.a.q_offset + m0 - n0 - p.a.r_lo + BN, BN);
        ring = ring + BM < W ? ring + BM : ring + BM - W;
        win = m0;
    };
    // (tc_dkdv_stage; WHAT: 1 Q, lse and D, 3 and dO)
    auto stage = [&](auto interior_tag, const Cursor &c, auto what_tag) {
        return tc_dkdv_stage<T, BM, D, LD, 128, decltype(interior_tag)::value, decltype(what_tag)::value, GONE>(
            p, ord, c, b, hk, Q0, dO0, lse0, delta0);
    };
    using QOnly = std::integral_constant<int, 1>;
    using QAnddO = std::integral_constant<int, 3>;
    using QFirst = std::conditional_t<GONE, QOnly, QAnddO>;  // (what a step stages at its start)
    using Interior = std::true_type;
    using AnyBlock = std::false_type;

    float dk[DT][4], dv[DT][4];
    zero_frags(dk);
    zero_frags(dv);
    const float scale_log2 = float(p.a.scale) * float(kLog2e);
    // the lanes' ldmatrix addresses: A = the warp's 16 key rows, B = 16 query rows at a time
    const int arow = (16 * warp + (lane & 15)) * LD + 8 * (lane >> 4);
    const int brow = ((lane & 7) + 8 * (lane >> 4)) * LD + 8 * ((lane >> 3) & 1);
    Cursor cur{0, 0, ord->next_phase[3], 0};  // (the first phase with blocks)
    stage(AnyBlock{}, cur, QAnddO{});
    if (cur.phase < 3 && needs_window(cur)) stage_window(row0(cur));
    cp_async_commit();  // (with K and V)
    // BIAS: 0 the block has no table bias, 1 it has (the band), 2 it has if its window meets the table (masked
    // blocks of a table's call).  The window has one buffer, which every warp reads while it computes a block with
    // the bias: a block's window is copied at its step's start, after the barrier (its latency under S^T's products),
    // unless the previous block had no bias -- then during that one.
    auto step = [&](auto kind_tag, auto bias_tag, const Cursor &c) {
        constexpr int kind = decltype(kind_tag)::value, BIAS = decltype(bias_tag)::value;
        cp_async_wait<0>();
        __syncthreads();  // block c has landed; every warp is done with the previous block's buffer and the window
        const Cursor nxt = next_of(c);
        const int64_t h = hk * p.group + c.h, m0 = row0(c);
        bool bias = false, pending = false;  // pending: block c's window copied at this step
        if constexpr (BIAS != 0) {
            bias = BIAS == 1 || block_bias(m0);
            if (bias && win != m0) {  // CTA-uniform
                stage_window_next(m0);
                cp_async_commit();
                pending = true;
            }
        }
        // (the interior blocks come last; nxt_dout: where the next block's dO is, for GONE's copy below)
        [[maybe_unused]] const DoutRows<T> nxt_dout =
            kind != kMasked ? stage(Interior{}, nxt, QFirst{}) : stage(AnyBlock{}, nxt, QFirst{});
        if constexpr (BIAS != 0) {
            // the next block's first row, -1 when it needs no window: staged now where the buffer is free
            const int64_t next_m0 = !bias && nxt.phase < 3 && needs_window(nxt) ? row0(nxt) : -1;
            if (next_m0 >= 0 && win != next_m0) stage_window(next_m0);
        }
        cp_async_commit();
        // block c's window copied at this step has landed (its group before the next block's) and is visible
        auto window_landed = [&] {
            if (pending) {  // CTA-uniform
                cp_async_wait<1>();
                __syncthreads();
                pending = false;
            }
        };
        const T *const Qb = Q0 + c.buf * BM * LD, *const dOb = dO0 + (GONE ? 0 : c.buf * BM * LD);
        const float *const lse_s = lse0 + c.buf * BM, *const delta_s = delta0 + c.buf * BM;
        const float slope_log2 = head_slope<T>(p, h) * float(kLog2e);
        int c_lo[2] = {0, 0}, c_hi[2] = {BM, BM};
        if constexpr (GONE) {
            // every warp meets the second barrier: those whose keys no query of the block sees skip the products.
            // (The products and probabilities below are the chunk loop's with c0 = 0 and no bias, written out: one
            // lambda for both, measured 2026-11-30, moved ptxas's choices in the head_dim-64 instances -- sm_90's
            // table instance 3.8 -> 4.0 other instructions an HMMA, 237 -> 188 registers -- and this kernel's on sm_120.)
            bool live = true;
            if constexpr (kind == kMasked) {
                live = wn0 < p.a.n && lane_key_columns(p, qlo, qhi, warp, m0, BM, c_lo, c_hi);  // warp-uniform
            }
            float st1[1][NT][4], dpt1[1][NT][4];  // (one m-tile: dkdv_probs_interior's)
            float(&st)[NT][4] = st1[0], (&dpt)[NT][4] = dpt1[0];
            if (live) {
                zero_frags(st);
                warp_abt_ldm<T, NT, KS, LD>(st, Ks + arow, Qb + brow);
                zero_frags(dpt);
                warp_abt_ldm<T, NT, KS, LD>(dpt, Vs + arow, dOb + brow);
                if constexpr (kind == kMasked) {
                    if (p.cap_log2 > 0.0)  // uniform
                        dkdv_probs<true>(st, dpt, p, static_cast<const float *>(nullptr), 0, 16 * warp,
                                         p.a.q_offset + m0 - wn0, c_lo, c_hi, lse_s, delta_s, scale_log2, slope_log2);
                    else
                        dkdv_probs<false>(st, dpt, p, static_cast<const float *>(nullptr), 0, 16 * warp,
                                          p.a.q_offset + m0 - wn0, c_lo, c_hi, lse_s, delta_s, scale_log2, slope_log2);
                } else {
                    const float d0 = float(p.a.q_offset + m0 - wn0 + 2 * (lane & 3) - (lane >> 2));
                    dkdv_probs_interior<kind>(st1, dpt1, lse_s, delta_s, p, scale_log2, slope_log2, d0);
                }
                warp_rb<T, NT, DT>(dv, st, dOb + col0, LD, DT, nullptr);
            }
            __syncthreads();  // every warp is done with dO
            if (kind != kMasked)
                tc_dkdv_stage_dout<T, BM, D, LD, 128, true>(nxt_dout, p.a.dout_strides[2], dO0);
            else
                tc_dkdv_stage_dout<T, BM, D, LD, 128, false>(nxt_dout, p.a.dout_strides[2], dO0);
            cp_async_commit();
            if (live) warp_rb<T, NT, DT>(dk, dpt, Qb + col0, LD, DT, nullptr);
        } else {
            if constexpr (kind == kMasked) {
                window_landed();  // (before a warp leaves the step)
                if (wn0 >= p.a.n) return;  // warp-uniform
                if (!lane_key_columns(p, qlo, qhi, warp, m0, BM, c_lo, c_hi)) return;  // (no query sees a key)
            }
            // QC query columns at a time (registers: S^T and dP^T of 16 x QC beside dK and dV's 16 x D; the
            // table's instance at head_dim 128 on sm_120 takes its two chunks one after the other)
#pragma unroll(TABLE && D == 128 && QC == 16 ? 1 : BM / QC)
            for (int c0 = 0; c0 < BM; c0 += QC) {
                float st1[1][NT][4], dpt1[1][NT][4];  // (one m-tile: dkdv_probs_interior's)
                float(&st)[NT][4] = st1[0], (&dpt)[NT][4] = dpt1[0];
                zero_frags(st);
                warp_abt_ldm<T, NT, KS, LD>(st, Ks + arow, Qb + c0 * LD + brow);
                if (BIAS != 0 && bias) {
                    window_landed();
                    add_transposed_bias<T, NT, BN, W, KS, LD>(st, Qb + c0 * LD, Ts, c0 + BN - 16 - 16 * warp, ring, brow);
                }
                zero_frags(dpt);
                warp_abt_ldm<T, NT, KS, LD>(dpt, Vs + arow, dOb + c0 * LD + brow);
                if constexpr (kind == kMasked) {
                    const int lo[2] = {c_lo[0] - c0, c_lo[1] - c0}, hi[2] = {c_hi[0] - c0, c_hi[1] - c0};
                    if (p.cap_log2 > 0.0)  // uniform
                        dkdv_probs<true>(st, dpt, p, static_cast<const float *>(nullptr), 0, 16 * warp,
                                         p.a.q_offset + m0 + c0 - wn0, lo, hi, lse_s + c0, delta_s + c0, scale_log2,
                                         slope_log2);
                    else
                        dkdv_probs<false>(st, dpt, p, static_cast<const float *>(nullptr), 0, 16 * warp,
                                          p.a.q_offset + m0 + c0 - wn0, lo, hi, lse_s + c0, delta_s + c0, scale_log2,
                                          slope_log2);
                } else {
                    const float d0 = float(p.a.q_offset + m0 + c0 - wn0 + 2 * (lane & 3) - (lane >> 2));
                    dkdv_probs_interior<kind>(st1, dpt1, lse_s + c0, delta_s + c0, p, scale_log2, slope_log2, d0);
                }
                warp_rb<T, NT, DT>(dv, st, dOb + c0 * LD + col0, LD, DT, nullptr);
                warp_rb<T, NT, DT>(dk, dpt, Qb + c0 * LD + col0, LD, DT, nullptr);
            }
        }
    };
    using Masked = std::integral_constant<int, kMasked>;
    using NoBias = std::integral_constant<int, 0>;
    using Band = std::integral_constant<int, 1>;
    using MaybeBias = std::integral_constant<int, 2>;
    if constexpr (has_table) {
        for (int64_t t = 0, n = p.group * ord->n[0]; t < n; ++t, cur = next_of(cur)) step(Masked{}, MaybeBias{}, cur);
    } else {
        for (int64_t t = 0, n = p.group * ord->n[0]; t < n; ++t, cur = next_of(cur)) step(Masked{}, NoBias{}, cur);
    }
    if (capped) {  // (CTA-uniform; never with ALiBi)
        using Cap = std::integral_constant<int, kCap>;
        if constexpr (TABLE)
            for (int64_t t = 0, n = p.group * ord->n[1]; t < n; ++t, cur = next_of(cur)) step(Cap{}, Band{}, cur);
        for (int64_t t = 0, n = p.group * ord->n[2]; t < n; ++t, cur = next_of(cur)) step(Cap{}, NoBias{}, cur);
    } else if (!TABLE && p.pos_enc == WAVEPE_CUDA_PE_ALIBI) {
        using Alibi = std::integral_constant<int, kAlibi>;
        for (int64_t t = 0, n = p.group * ord->n[2]; t < n; ++t, cur = next_of(cur)) step(Alibi{}, NoBias{}, cur);
    } else {
        using Plain = std::integral_constant<int, kPlain>;
        if constexpr (TABLE)
            for (int64_t t = 0, n = p.group * ord->n[1]; t < n; ++t, cur = next_of(cur)) step(Plain{}, Band{}, cur);
        for (int64_t t = 0, n = p.group * ord->n[2]; t < n; ++t, cur = next_of(cur)) step(Plain{}, NoBias{}, cur);
    }

    if (wn0 >= p.a.n) return;  // after the last barrier
    const float scale = float(p.a.scale);
    const int64_t kv_rows = p.a.batch * p.a.kv_heads * p.a.n;
#pragma unroll
    for (int ri = 0; ri < 2; ++ri) {
        const int64_t n = wn0 + frag_row(2 * ri);
        if (n >= p.a.n) continue;
        const int64_t row = (b * p.a.kv_heads + hk) * p.a.n + n;
        T *dkr = static_cast<T *>(p.a.dk) + row * p.a.d;
        T *dvr = static_cast<T *>(p.a.dv) + row * p.a.d;
        float *sk = static_cast<float *>(p.split_dkv) + row * p.a.d, *sv = sk + kv_rows * p.a.d;  // (band split)
#pragma unroll
        for (int dt = 0; dt < DT; ++dt) {
            const int col = col0 + dt * 8 + 2 * (lane & 3);
            if (part == 1) {  // the sums beyond the band, for the second launch
                *reinterpret_cast<float2 *>(sk + col) = float2{dk[dt][2 * ri], dk[dt][2 * ri + 1]};
                *reinterpret_cast<float2 *>(sv + col) = float2{dv[dt][2 * ri], dv[dt][2 * ri + 1]};
                continue;
            }
            if (part == 2) {
                const float2 k2 = *reinterpret_cast<const float2 *>(sk + col), v2 = *reinterpret_cast<const float2 *>(sv + col);
                dk[dt][2 * ri] += k2.x, dk[dt][2 * ri + 1] += k2.y, dv[dt][2 * ri] += v2.x, dv[dt][2 * ri + 1] += v2.y;
            }
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                dkr[col + e] = from_acc<T>(dk[dt][2 * ri + e] * scale);
                dvr[col + e] = from_acc<T>(dv[dt][2 * ri + e]);
            }
        }
    }
}

// QC: 32 query columns a chunk (one block at head_dim 128, two at 64), 16 at 256 (16-row blocks) and in the table's
// instance at head_dim 128 on sm_120, whose G^T products and skew left ptxas no register for 32 there (it spilled
// 24 bytes, CUDA 13.0; on sm_80 / sm_90 / sm_100: 254-255 registers, no spill -- until 2026-11-29, G in shared
// memory, sm_100 spilled too) -- its K / V fragments read twice as often.  The emulator runs the variant of the
// compute capability it emulates (WAVEPE_EMU_CC_MAJOR).
template <class T, int D, bool TABLE>
WAVEPE_DEVICE void dkdv_tc_chunked(const AttnParams &p) {
    constexpr int QC = D > 128 ? 16 : 32;
#if defined(WAVEPE_CUDA_EMU)
    if (TABLE && D == 128 && device_cc_major() >= 12)
        dkdv_tc_cta<T, D, TABLE, 16>(p);
    else
        dkdv_tc_cta<T, D, TABLE, QC>(p);
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 1200
    dkdv_tc_cta<T, D, TABLE, TABLE && D == 128 ? 16 : QC>(p);
#else
    dkdv_tc_cta<T, D, TABLE, QC>(p);
#endif
}
template <class T, int D, bool TABLE>
__global__ void __launch_bounds__(128) attn_bwd_dkdv_tc_kernel(AttnParams p) {
    dkdv_tc_chunked<T, D, TABLE>(p);
}
// dO in one buffer (TcDkdvTiles' GONE), a block's queries in one chunk (16 at head_dim 256, 64 at 64: S^T's and dP^T's
// 32 accumulators a lane each beside dK's and dV's 32 at 64), no table: on 99 KiB devices at 256, on 100 KiB SMs at
// 64 (use_tc_dkdv_gone) -- there below compute capability 10 only: at 64 on sm_100 and sm_120 a stub the host never
// launches (ptxas spilled 16 / 4-20 bytes, CUDA 13.0; an sm_100 SM holds three CTAs of the two buffers anyway).  The
// emulator runs it whatever the compute capability it emulates.
template <class T, int D>
__global__ void __launch_bounds__(128) attn_bwd_dkdv_tc_gone_kernel(AttnParams p) {
    [[maybe_unused]] constexpr int QC = D == 256 ? 16 : 64;  // (the block's rows: dkdv_tc_cta asserts it)
#if !defined(WAVEPE_CUDA_EMU) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 1000
    if constexpr (D == 64)
        __trap();
    else
        dkdv_tc_cta<T, D, false, QC, true>(p);
#else
    dkdv_tc_cta<T, D, false, QC, true>(p);
#endif
}

// ---- the wide tensor-core dK/dV ---------------------------------------------------------------------
// Head dim 64 and 128 without a table (wide_dkdv): FlashAttention-2's split of the key side in two dimensions.  A
// CTA of 8 warps owns 128 keys of a (batch, kv head) -- K and V staged once -- and walks query blocks of 64 rows
// in attn_bwd_dkdv_tc_kernel's order (the masked blocks, then the interior ones: tc_dkdv_order; Q, dO, lse and D in
// two buffers, the next block's copies in flight), each block in two phases:
//  1. warp w (key group kw = w % 4: keys 32 kw .. 32 kw + 31; query half w / 4: the block's rows 32 (w / 4) ..)
//     computes S^T = K Q^T and dP^T = V dO^T of its 32 x 32 pairs -- each K / V fragment it reads feeds 4 HMMA,
//     each Q / dO fragment 2: 256 bytes of shared memory an HMMA, the 16-key warps' 384 -- then P^T and dS^T
//     (dkdv_probs on masked blocks, dkdv_probs_interior on the others), stored as bf16 / fp16 into the CTA's
//     P^T and dS^T tiles (rows 16 bytes longer than the block: the C fragments' stores and ldmatrix's reads hit 32
//     distinct banks);
//  2. after a barrier, warps 0-3 take dV += P^T dO of their key group over all D columns, warps 4-7 dK += dS^T Q
//     (ab_products_smem: P^T's, dS^T's fragments by ldmatrix, each dO / Q fragment by ldmatrix.trans feeding two
//     HMMA): 160 bytes an HMMA at head dim 128, 192 at 64.
// The main loop moves 256 bytes of shared memory an HMMA at 128 (the SASS's static count: the copies of Q and dO, the
// rows' statistics and the P^T, dS^T stores included), 303 at 64 -- at or near the line an H100's SM serves at the
// tensor rate, where the 16-key warps' 379 / 363 are over it (docs/CUDA.md, "Shared-memory traffic"); the price: two
// barriers a block, not one, and 175 KiB of shared memory at 128 (one CTA, 8 warps an SM: not on an A100, whose 163
// KiB keep the 16-key kernel; 111 KiB at 64).  Registers: one accumulator tile a warp (32 keys x D: 128 a lane at
// 128), S^T's and dP^T's 64 beside it in phase 1 -- 255 at 128, so an instance per kind of interior block (KIND:
// kPlain, kAlibi, kCap), and the masked blocks computed whole (dkdv_probs' selection), no warp skipped: with the
// skips' state ptxas spilled.
template <class T, int D, int KIND, int PMT>
WAVEPE_DEVICE void dkdv_tc_wide_cta(const AttnParams &p) {
    using Lay = TcDkdvWideLayout<T, D>;
    constexpr int BN = Lay::BN, BM = Lay::BM, LD = Lay::LD, PLD = Lay::PLD, KS = D / 16, DT = D / 8;
    static_assert(Traits<T>::kTensorCore && (D == 64 || D == 128), "the wide dK/dV: bf16/fp16, head dim 64 or 128");
    WAVEPE_SHARED_BASE(smem);
    const Lay L;
    T *const Ks = reinterpret_cast<T *>(smem + L.plan.off[L.k]);
    T *const Vs = reinterpret_cast<T *>(smem + L.plan.off[L.v]);
    T *const Q0 = reinterpret_cast<T *>(smem + L.plan.off[L.q]);
    T *const dO0 = reinterpret_cast<T *>(smem + L.plan.off[L.go]);
    T *const Pt = reinterpret_cast<T *>(smem + L.plan.off[L.pt]);
    T *const dSt = reinterpret_cast<T *>(smem + L.plan.off[L.dst]);
    float *const lse0 = reinterpret_cast<float *>(smem + L.plan.off[L.lse]);
    float *const delta0 = reinterpret_cast<float *>(smem + L.plan.off[L.delta]);
    uint8_t *const kmask = smem + L.plan.off[L.mask];
    int64_t *const qlo = reinterpret_cast<int64_t *>(smem + L.plan.off[L.rows]), *const qhi = qlo + BN;
    TcDkdvOrder *const ord = reinterpret_cast<TcDkdvOrder *>(smem + L.plan.off[L.order]);
    // the CTA's batch row, kv head and first key, in shared memory too: read where used after the prologue (fewer
    // registers held through the loops, as the order)
    int64_t *const cta = reinterpret_cast<int64_t *>(smem + L.plan.off[L.cta]);
    const int warp = threadIdx.x / 32, lane = threadIdx.x & 31, kw = warp & 3, half = warp >> 2;

    const int64_t nblocks = ceil_div(p.a.n, BN);
    const int64_t nb = blockIdx.x % nblocks, bhk = blockIdx.x / nblocks;
    const int64_t b = bhk / p.a.kv_heads, hk = bhk % p.a.kv_heads;
    const int64_t n0 = nb * BN;
    tc_dkdv_load_keys<T, BN, D, LD>(p, b, hk, n0, Ks, Vs, qlo, qhi, kmask);
    constexpr bool capped = KIND == kCap;
    // the band split's first partial (a table's call, bwd_dkdv_band_split; 0 else): the interior blocks beyond the
    // table's band only, their sums left in split_dkv for the 16-key table instance (dkdv_band_split_blocks)
    const int part = p.band_part;
    if (threadIdx.x == 0) {
        KeyBlockQueries kq = key_block_queries(qlo, qhi, BN, BM, p);
        if (capped && p.pos_enc == WAVEPE_CUDA_PE_ALIBI) kq.ib = kq.ie = kq.i_end;  // (as attn_bwd_dkdv_tc_kernel)
        int64_t bb = kq.ie, be = kq.ie;
        if (part == 1) dkdv_band_blocks(p, n0, BN, BM, kq, bb, be);
        *ord = tc_dkdv_order(kq, bb, be, part);
        cta[0] = b, cta[1] = hk, cta[2] = n0;
    }
    __syncthreads();

    float acc[2][DT][4];  // warps 0-3: dV of the key group, 4-7: dK (unscaled)
    zero_frags(acc[0]);
    zero_frags(acc[1]);
    const float scale_log2 = float(p.a.scale) * float(kLog2e);
    // the lanes' ldmatrix addresses: phase 1, A = the key group's rows of K / V, B = the query half's rows of Q / dO;
    // phase 2, A = the key group's rows of P^T (dV) or dS^T (dK)
    const int arow = (32 * kw + (lane & 15)) * LD + 8 * (lane >> 4);
    const int brow = (32 * half + (lane & 7) + 8 * (lane >> 4)) * LD + 8 * ((lane >> 3) & 1);
    const T *const prow = (half ? dSt : Pt) + (32 * kw + (lane & 15)) * PLD + 8 * (lane >> 4);
    TcDkdvCursor cur{0, 0, ord->next_phase[3], 0};  // (the first phase with blocks)
    tc_dkdv_stage<T, BM, D, LD, 256, false>(p, ord, cur, b, hk, Q0, dO0, lse0, delta0);
    cp_async_commit();  // (with K and V)
    auto step = [&](auto kind_tag, const TcDkdvCursor &c) {
        constexpr int kind = decltype(kind_tag)::value;
        cp_async_wait<0>();
        __syncthreads();  // block c has landed; every warp is done with the previous block's buffers and P^T, dS^T
        const TcDkdvCursor nxt = tc_dkdv_next(ord, c, p.group);
        tc_dkdv_stage<T, BM, D, LD, 256, kind != kMasked>(p, ord, nxt, cta[0], cta[1], Q0, dO0, lse0, delta0);
        cp_async_commit();
        const int64_t h = cta[1] * p.group + c.h, m0 = int64_t(tc_dkdv_block(ord, c.phase, c.u)) * BM;
        const T *const Qb = Q0 + c.buf * BM * LD, *const dOb = dO0 + c.buf * BM * LD;
        const int c0 = 32 * half;  // the warp's query columns in phase 1
        const float *const lse_s = lse0 + c.buf * BM + c0, *const delta_s = delta0 + c.buf * BM + c0;
        const float slope_log2 = head_slope<T>(p, h) * float(kLog2e);
        // phase 1 in passes of PMT of the warp's two m-tiles of 16 keys: both at once (sm_80, sm_90), or one a pass
        // (sm_100 at head dim 128: S^T's and dP^T's 32 registers live, not 64 -- ptxas spilled 20-48 bytes there with
        // both; each Q / dO fragment then read twice, K's and V's once as before)
        const int64_t dist0 = p.a.q_offset + m0 + c0 - (cta[2] + 32 * kw);  // pos_q - n of the warp's (0, 0)
#pragma unroll
        for (int p0 = 0; p0 < 2; p0 += PMT) {
            float st[PMT][4][4], dpt[PMT][4][4];
#pragma unroll
            for (int mt = 0; mt < PMT; ++mt) {
                zero_frags(st[mt]);
                zero_frags(dpt[mt]);
            }
            qk_products_rows<T, 4, KS, LD, PMT, qk_unroll<KS>()>(st, Ks + arow + 16 * p0 * LD, Qb + brow);
            qk_products_rows<T, 4, KS, LD, PMT, qk_unroll<KS>()>(dpt, Vs + arow + 16 * p0 * LD, dOb + brow);
            if constexpr (kind == kMasked) {
#pragma unroll
                for (int mt = 0; mt < PMT; ++mt) {
                    // the lane's keys (rows g, g + 8 of the m-tile) are seen by the half's columns [c_lo, c_hi)
                    int c_lo[2], c_hi[2];
#pragma unroll
                    for (int ri = 0; ri < 2; ++ri) {
                        const int k = 32 * kw + 16 * (p0 + mt) + frag_row(2 * ri);
                        const int64_t lo = qlo[k] - (p.a.q_offset + m0 + c0), hi = qhi[k] - (p.a.q_offset + m0 + c0);
                        c_lo[ri] = lo < 0 ? 0 : (lo > 32 ? 32 : int(lo));
                        c_hi[ri] = hi < 0 ? 0 : (hi > 32 ? 32 : int(hi));
                    }
                    dkdv_probs<capped>(st[mt], dpt[mt], p, static_cast<const float *>(nullptr), 0, 0,
                                       dist0 - 16 * (p0 + mt), c_lo, c_hi, lse_s, delta_s, scale_log2, slope_log2);
                }
            } else {
                const float d0 = float(dist0 - 16 * p0 + 2 * (lane & 3) - (lane >> 2));
                dkdv_probs_interior<kind>(st, dpt, lse_s, delta_s, p, scale_log2, slope_log2, d0);
            }
            // P^T and dS^T of the warp's pairs into the CTA's tiles
#pragma unroll
            for (int mt = 0; mt < PMT; ++mt)
#pragma unroll
                for (int nt = 0; nt < 4; ++nt)
#pragma unroll
                    for (int hp = 0; hp < 2; ++hp) {
                        const int at =
                            (32 * kw + 16 * (p0 + mt) + (lane >> 2) + 8 * hp) * PLD + c0 + 8 * nt + 2 * (lane & 3);
                        *reinterpret_cast<uint32_t *>(Pt + at) = pack2<T>(st[mt][nt][2 * hp], st[mt][nt][2 * hp + 1]);
                        *reinterpret_cast<uint32_t *>(dSt + at) = pack2<T>(dpt[mt][nt][2 * hp], dpt[mt][nt][2 * hp + 1]);
                    }
        }
        __syncthreads();  // P^T and dS^T are whole
        const T *const bt = half ? Qb : dOb;
        ab_products_smem<T, BM / 16, DT, 2>(acc, prow, PLD, bt, LD);
    };
    // the masked blocks, then the interior ones (the cursor's phase says where it is: no counters held)
    for (; cur.phase == 0; cur = tc_dkdv_next(ord, cur, p.group)) step(std::integral_constant<int, kMasked>{}, cur);
    for (; cur.phase == 2; cur = tc_dkdv_next(ord, cur, p.group)) step(std::integral_constant<int, KIND>{}, cur);

    // warps 0-3 write dV, 4-7 dK (times the scale) of their key group; the band split's first partial their sums
    // (split_dkv: dK's then dV's rows, as attn_bwd_dkdv_tc_kernel reads them)
    T *const out = static_cast<T *>(half ? p.a.dk : p.a.dv);
    const float mul = half ? float(p.a.scale) : 1.f;
    const int64_t kv_rows = p.a.batch * p.a.kv_heads * p.a.n;
#pragma unroll
    for (int mt = 0; mt < 2; ++mt)
#pragma unroll
        for (int ri = 0; ri < 2; ++ri) {
            const int64_t n = cta[2] + 32 * kw + 16 * mt + frag_row(2 * ri);
            if (n >= p.a.n) continue;
            const int64_t row = (cta[0] * p.a.kv_heads + cta[1]) * p.a.n + n;
            if (part == 1) {
                float *const s = static_cast<float *>(p.split_dkv) + (row + (half ? 0 : kv_rows)) * p.a.d;
#pragma unroll
                for (int dt = 0; dt < DT; ++dt)
                    *reinterpret_cast<float2 *>(s + dt * 8 + 2 * (lane & 3)) =
                        float2{acc[mt][dt][2 * ri], acc[mt][dt][2 * ri + 1]};
                continue;
            }
            T *const r = out + row * p.a.d;
#pragma unroll
            for (int dt = 0; dt < DT; ++dt)
#pragma unroll
                for (int e = 0; e < 2; ++e) r[dt * 8 + 2 * (lane & 3) + e] = from_acc<T>(acc[mt][dt][2 * ri + e] * mul);
        }
}
// The kernel: phase 1 a pass of both m-tiles, but for one m-tile a pass at head dim 128 on sm_100 (PMT above: no
// spill there, 250-254 registers; at 64, where both at once do not spill, one a pass would read 386 bytes of shared
// memory an HMMA, not 306); at head dim 128 on sm_120 a stub the host never launches (ptxas spilled 12-68 bytes,
// CUDA 13.0, and its 99 KiB would not hold the tiles anyway: wide_dkdv asks the device).  The emulator runs the
// variant of the compute capability it emulates (WAVEPE_EMU_CC_MAJOR).
template <class T, int D, int KIND>
__global__ void __launch_bounds__(256, 1) attn_bwd_dkdv_tc_wide_kernel(AttnParams p) {
#if defined(WAVEPE_CUDA_EMU)
    if (D == 128 && device_cc_major() >= 10)
        dkdv_tc_wide_cta<T, D, KIND, 1>(p);
    else
        dkdv_tc_wide_cta<T, D, KIND, 2>(p);
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 1200
    if constexpr (D == 128)
        __trap();
    else
        dkdv_tc_wide_cta<T, D, KIND, 2>(p);
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 1000
    dkdv_tc_wide_cta<T, D, KIND, D == 128 ? 1 : 2>(p);
#else
    dkdv_tc_wide_cta<T, D, KIND, 2>(p);
#endif
}

}  // namespace

template <class T, int D>
cudaError_t launch_tc_dkdv(TcDkdvKernel kernel, const AttnParams &p, int64_t ctas, size_t smem, cudaStream_t stream) {
    switch (kernel) {
    case TcDkdvKernel::kTwoBuffers:
        return launch_tc(attn_bwd_dkdv_tc_kernel<T, D, false>, ctas, smem, stream, p);
    case TcDkdvKernel::kTable:
        return launch_tc(attn_bwd_dkdv_tc_kernel<T, D, true>, ctas, smem, stream, p);
    case TcDkdvKernel::kOneBuffer:
        if constexpr (D == 64 || D == 256) return launch_tc(attn_bwd_dkdv_tc_gone_kernel<T, D>, ctas, smem, stream, p);
        break;
    case TcDkdvKernel::kWidePlain:
    case TcDkdvKernel::kWideAlibi:
    case TcDkdvKernel::kWideCap:
        if constexpr (D <= 128)
            return launch_tc(kernel == TcDkdvKernel::kWideCap     ? attn_bwd_dkdv_tc_wide_kernel<T, D, kCap>
                             : kernel == TcDkdvKernel::kWideAlibi ? attn_bwd_dkdv_tc_wide_kernel<T, D, kAlibi>
                                                                  : attn_bwd_dkdv_tc_wide_kernel<T, D, kPlain>,
                             ctas, smem, stream, p, 256);
        break;
    }
    return cudaErrorInvalidValue;
}

template <class T, int D>
cudaError_t launch_tc_dkdv_band_parts(const AttnParams &p, int64_t ctas, cudaStream_t stream) {
    using Lay = TcDkdvLayout<T, D>;
    return launch_band_parts(
        p, [](bool w) { return w ? attn_bwd_dkdv_tc_kernel<T, D, true> : attn_bwd_dkdv_tc_kernel<T, D, false>; },
        [](bool w) { return Lay(w).plan.total; }, ctas, stream);
}

// the instances launch_dkdv asks for: bf16 and fp16 at the tensor-core backward's head dims
#define WAVEPE_TC_DKDV(T, D)                                                                                            \
    template cudaError_t launch_tc_dkdv<T, D>(TcDkdvKernel, const AttnParams &, int64_t, size_t, cudaStream_t);         \
    template cudaError_t launch_tc_dkdv_band_parts<T, D>(const AttnParams &, int64_t, cudaStream_t);
WAVEPE_TC_DKDV(__half, 64)
WAVEPE_TC_DKDV(__half, 128)
WAVEPE_TC_DKDV(__half, 256)
WAVEPE_TC_DKDV(__nv_bfloat16, 64)
WAVEPE_TC_DKDV(__nv_bfloat16, 128)
WAVEPE_TC_DKDV(__nv_bfloat16, 256)
#undef WAVEPE_TC_DKDV

}  // namespace wavepe_cuda
