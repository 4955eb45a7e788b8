/* test_main.c: runs every C core test; exit status 1 on any failure. */
#include <stdio.h>

#include "../isa.h"
#include "harness.h"

int wavepe_test_failures = 0;

void test_checked(void);
void test_wavelet(void);
void test_alibi(void);
void test_attention(void);
void test_relbias(void);
void test_rope(void);
void test_null(void);

int main(void) {
    printf("wavepe core tests, cpu isa: %s\n", wavepe_isa_name(wavepe_cpu_isa()));
    test_checked();
    test_wavelet();
    test_alibi();
    test_attention();
    test_relbias();
    test_rope();
    test_null();
    if (wavepe_test_failures) {
        printf("%d check(s) failed\n", wavepe_test_failures);
        return 1;
    }
    printf("all core tests passed\n");
    return 0;
}
