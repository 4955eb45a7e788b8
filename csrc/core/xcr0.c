/* xcr0.c: XCR0, the register state the OS saves (xcr0.h). */
#include "xcr0.h"

#if defined(__x86_64__) || defined(_M_X64)
unsigned long long wavepe_xcr0(void) {
    unsigned int eax, edx;
    /* xgetbv with ecx = 0; spelled as asm so the file needs no -mxsave. */
    __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
    return ((unsigned long long)edx << 32) | eax;
}
#else
typedef int wavepe_xcr0_unused; /* (ISO C: a translation unit declares something) */
#endif
