/* test_main.c: runs every C core test; exit status 1 on any failure.
 *
 * The tests compare each kernel's scalar reference with a vector variant
 * (wavepe_test_isa) and both with oracles; the whole suite runs once per
 * vector ISA of isa_table.h that this build has and this machine can run
 * (x86-64: AVX2, AVX-512 -- on a CPU without AVX-512, a build against SIMDe,
 * `make ctest-simde`, runs the AVX-512 kernels on AVX2; AArch64: NEON, under
 * qemu-user with `make ctest-aarch64`). */
#include <stdio.h>

#include "../fpenv.h"
#include "../isa.h"
#include "harness.h"

int wavepe_test_failures = 0;
wavepe_isa wavepe_test_isa = WAVEPE_ISA_SCALAR;

void test_checked(void);
void test_fpenv(void);
void test_wavelet(void);
void test_alibi(void);
void test_attention(void);
void test_relbias(void);
void test_rope(void);
void test_null(void);
void test_isa_table(void);
void test_vocabulary(void);
void test_half(void);
void test_tiles(void);
void test_scratch(void);

int main(void) {
    printf("wavepe core tests, cpu isa: %s; runs here:", wavepe_isa_name(wavepe_cpu_isa()));
    for (int isa = 0; isa < WAVEPE_ISA_COUNT; ++isa)
        if (wavepe_isa_supported((wavepe_isa)isa)) printf(" %s", wavepe_isa_name((wavepe_isa)isa));
    printf("\n");
    test_checked();
    test_scratch();
    test_isa_table();
    test_vocabulary();
    test_tiles();
    int runs = 0;
    for (int isa = 0; isa < WAVEPE_ISA_COUNT; ++isa) {
        if (isa == WAVEPE_ISA_SCALAR || !wavepe_isa_supported((wavepe_isa)isa)) continue;
        wavepe_test_isa = (wavepe_isa)isa;
        const int before = wavepe_test_failures;
        /* the families other than attention run another ISA's kernels on some (isa_table.h's kernel_isa:
         * avx512's on avx512bf16 and amx), which that ISA's pass -- always among these, the CPU runs it -- tests */
        const wavepe_isa kernels = wavepe_isa_kernel_isa(wavepe_test_isa);
        const int own_kernels = kernels == wavepe_test_isa;
        CHECK(own_kernels || wavepe_isa_supported(kernels));
        test_fpenv();
        test_half();
        if (own_kernels) test_wavelet();
        if (own_kernels) test_alibi();
        test_attention();
        if (own_kernels) test_relbias();
        if (own_kernels) test_rope();
        test_null();
        const char *result = wavepe_test_failures == before ? "ok" : "FAILED";
        if (own_kernels)
            printf("  scalar and %s kernels: %s\n", wavepe_isa_name(wavepe_test_isa), result);
        else
            printf("  scalar and %s kernels: %s (wavelet, alibi, relbias, rope: %s's, tested in its pass)\n",
                   wavepe_isa_name(wavepe_test_isa), result, wavepe_isa_name(kernels));
        ++runs;
    }
    if (runs == 0) { /* no vector ISA: the scalar kernels against the oracles */
        test_fpenv();
        test_half();
        test_wavelet();
        test_alibi();
        test_attention();
        test_relbias();
        test_rope();
        test_null();
    }
    if (wavepe_test_failures) {
        printf("%d check(s) failed\n", wavepe_test_failures);
        return 1;
    }
    printf("all core tests passed\n");
    return 0;
}
