/* fpenv.h: the floating-point environment every kernel runs in.
 *
 * Subnormal numbers cost a microcode assist per operation on Intel cores
 * (tens to hundreds of cycles; AMD's barely notice), and wavelet tables,
 * softmax tails and half-precision inputs produce them routinely: a call that
 * meets them can run 20x slower than the same call on normal numbers.  So
 * every kernel entry point of the core runs with flush-to-zero (results below
 * the normal range become 0) and denormals-are-zero (subnormal inputs read as
 * 0) -- on x86 the FTZ and DAZ bits of MXCSR, on AArch64 FPCR.FZ -- and puts
 * the caller's state back, bit for bit, before it returns (on AArch64 the
 * exception flags live in FPSR, apart from FPCR: both are put back).  Each thread that
 * runs a kernel range does this for itself (MXCSR is per thread), so callers
 * owning the threading need do nothing.
 *
 * The numerical contract that follows (docs/DEVELOPING.md): a subnormal input
 * behaves as a zero of the same sign, and no output is subnormal.  Nothing
 * above the normal range changes.
 */
#ifndef WAVEPE_FPENV_H
#define WAVEPE_FPENV_H

#if defined(__x86_64__) || defined(_M_X64) || defined(__i386__)
#include <xmmintrin.h>
#define WAVEPE_FPENV_X86 1
#endif

typedef struct wavepe_fpenv {
    unsigned long long saved;        /* MXCSR; FPCR */
    unsigned long long saved_status; /* FPSR (AArch64; x86 keeps its flags in MXCSR) */
} wavepe_fpenv;

/* MXCSR: FTZ is bit 15, DAZ bit 6. */
#define WAVEPE_MXCSR_FTZ_DAZ 0x8040u

static inline wavepe_fpenv wavepe_fpenv_enter(void) {
    wavepe_fpenv env;
#if defined(WAVEPE_FPENV_X86)
    const unsigned csr = _mm_getcsr();
    env.saved = csr;
    env.saved_status = 0;
    if ((csr & WAVEPE_MXCSR_FTZ_DAZ) != WAVEPE_MXCSR_FTZ_DAZ) _mm_setcsr(csr | WAVEPE_MXCSR_FTZ_DAZ);
#elif defined(__aarch64__)
    unsigned long long fpcr, fpsr;
    __asm__ volatile("mrs %0, fpcr" : "=r"(fpcr));
    __asm__ volatile("mrs %0, fpsr" : "=r"(fpsr));
    env.saved = fpcr;
    env.saved_status = fpsr;
    if (!(fpcr & (1ull << 24))) __asm__ volatile("msr fpcr, %0" : : "r"(fpcr | (1ull << 24)) : "memory");
#else
    env.saved = env.saved_status = 0; /* other architectures: the caller's environment as it is */
#endif
    return env;
}

static inline void wavepe_fpenv_leave(wavepe_fpenv env) {
#if defined(WAVEPE_FPENV_X86)
    /* restores the exception flags too: the caller sees exactly its own state */
    _mm_setcsr((unsigned)env.saved);
#elif defined(__aarch64__)
    __asm__ volatile("msr fpcr, %0" : : "r"(env.saved) : "memory");
    __asm__ volatile("msr fpsr, %0" : : "r"(env.saved_status) : "memory"); /* the caller's flags, exactly */
#else
    (void)env;
#endif
}

/* The current thread's raw control/status word (MXCSR, FPCR; 0 elsewhere)
 * and AArch64's status word (FPSR; 0 elsewhere): for tests that check the
 * caller's state survives every operation. */
static inline unsigned long long wavepe_fpenv_word(void) {
#if defined(WAVEPE_FPENV_X86)
    return _mm_getcsr();
#elif defined(__aarch64__)
    unsigned long long fpcr;
    __asm__ volatile("mrs %0, fpcr" : "=r"(fpcr));
    return fpcr;
#else
    return 0;
#endif
}

static inline unsigned long long wavepe_fpenv_status_word(void) {
#if defined(__aarch64__)
    unsigned long long fpsr;
    __asm__ volatile("mrs %0, fpsr" : "=r"(fpsr));
    return fpsr;
#else
    return 0;
#endif
}

#endif
