// selftest.cpp: kernels that break, one each, the rules the emulator checks (cuda_emu.h), and one that
// keeps them; tests/test_cuda_emu.py runs each and expects the launch to fail naming the breach -- a
// check that nothing breaks could stop working unseen.  Built into the emulator's library only.
#include "../common.cuh"

namespace {

using namespace wavepe_cuda;

enum Case {
    kKeepsTheRules = 0,            // shuffles, an ldmatrix and an mma, every lane at the same lines
    kShufflesAtTwoLines = 1,       // half a warp's lanes shuffle at one line, half at another
    kSyncwarpBesideShuffle = 2,    // half at a __syncwarp, half at a shuffle
    kLanesExitBeforeShuffle = 3,   // half the lanes return, the others shuffle
    kSyncthreadsAtTwoLines = 4,    // the block's warps at two __syncthreads
    kLdmatrixBeforeBarrier = 5,    // warp 1 reads by ldmatrix what warp 0's cp.async landed, with no __syncthreads
    // not breaches: ldmatrix rows that share banks, for the bank-conflict count (wavepe_emu_ldmatrix_bank_conflicts)
    kLdmatrixRowsInOneBankGroup = 6,  // 4 distinct rows (each given twice) 128 bytes apart: all in banks 0-3 -> 4
    kLdmatrixRowsUnaligned = 7,       // 8 rows 40 bytes apart (not 16-byte aligned): 2 words in banks 0, 1, 8-11, 30, 31 -> 2
};
// (Not a case: lanes at two different mma or ldmatrix calls.  The emulator knows those by the line in
// cuda_emu.cpp, the same for every call, so it cannot tell them apart -- cuda_emu.h, what it cannot check.)

// 64 threads (two warps); 512 bytes of dynamic shared memory: an 8 x 8 bf16 matrix (warp 0's) at 0.
// out[thread]: a shuffle's result; out[64 + 4 * lane ...]: warp 0's mma result (C = A B + 1, A and B from
// the ldmatrix of a matrix whose element (r, c) is r + c / 8 and from the lane's fragments, see below);
// out[192 .. 194]: three __byte_perm results' bits.
__global__ void selftest_kernel(int which, const __nv_bfloat16 *matrix, float *out) {
    WAVEPE_SHARED_BASE(smem);
    const int lane = int(threadIdx.x) % 32, warp = int(threadIdx.x) / 32;
    if (which == kLanesExitBeforeShuffle && lane < 16) return;
    float v = float(threadIdx.x);
    if (which == kShufflesAtTwoLines && lane < 16) {
        v = __shfl_xor_sync(kFullMask, v, 1);
    } else if (which == kSyncwarpBesideShuffle && lane < 16) {
        __syncwarp();
    } else {
        v = __shfl_xor_sync(kFullMask, v, 1);
    }
    out[threadIdx.x] = v;
    if (which == kSyncthreadsAtTwoLines) {
        if (warp == 0) {
            __syncthreads();
        } else {
            __syncthreads();
        }
    }
    // warp 0 copies the 8 x 8 matrix (8 rows of 16 bytes) into shared memory
    if (warp == 0 && lane < 8) cp_async16(smem + 16 * lane, matrix + 8 * lane, true);
    cp_async_commit();
    cp_async_wait<0>();
    if (which != kLdmatrixBeforeBarrier) __syncthreads();
    if (which == kLdmatrixBeforeBarrier && warp == 0) return;
    // every lane gives row lane % 8 of the matrix: the four matrices of the x4 are the same one (cases 6 and 7: rows
    // elsewhere, the results not checked)
    uint32_t a[4];
    ldmatrix_x4(a, smem + (which == kLdmatrixRowsInOneBankGroup ? 128 * (lane % 4)
                           : which == kLdmatrixRowsUnaligned   ? 40 * (lane % 8)
                                                               : 16 * (lane % 8)));
    if (warp != 0) return;
    const uint32_t b[2] = {a[0], a[1]};
    float c[4] = {1.f, 1.f, 1.f, 1.f};
    mma16816<__nv_bfloat16>(c, a, b);
    for (int i = 0; i < 4; ++i) out[64 + 4 * lane + i] = c[i];
    // out[192 ..]: __byte_perm's bits (PTX's prmt, as the dQ's skewed_ds_products takes 16-bit halves with it)
    if (lane == 0) {
        const uint32_t perm[3] = {__byte_perm(0x03020100u, 0x07060504u, 0x7531u),
                                  __byte_perm(0x11112222u, 0x33334444u, 0x5432u),
                                  __byte_perm(0x11112222u, 0x33334444u, 0x7610u)};
        memcpy(out + 192, perm, sizeof(perm));
    }
}

}  // namespace

// which: a Case; matrix: 64 bf16 (8 x 8, row-major); out: 64 + 128 + 3 floats.  Returns the launch's cudaError
// (wavepe_emu_last_message() says why it failed).
extern "C" __attribute__((visibility("default"))) int wavepe_emu_selftest(int which, const void *matrix, float *out) {
    return int(launch(selftest_kernel, dim3(1), dim3(64), 512, nullptr, which,
                      static_cast<const __nv_bfloat16 *>(matrix), out));
}
