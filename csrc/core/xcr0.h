/* xcr0.h: which x86 register state the operating system saves (XCR0), read by the detectors of the
 * vector ISAs (isa.c) and of the tiles (tiles.c).  Its own file so that neither detector depends on
 * the other for it. */
#ifndef WAVEPE_XCR0_H
#define WAVEPE_XCR0_H

#if defined(__x86_64__) || defined(_M_X64)
/* XCR0 (xgetbv, ecx = 0).  Call only where cpuid says OSXSAVE. */
unsigned long long wavepe_xcr0(void);
#endif

#endif
