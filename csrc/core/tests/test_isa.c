/* test_isa.c: the ISA table (isa_table.h) and what is generated from it:
 * names, per-ISA detection, the WAVEPE_ISA override, lane counts, the
 * kernels the families other than attention run on each. */
#define _POSIX_C_SOURCE 200809L /* setenv, strdup */
#include <stdlib.h>
#include <string.h>

#include "../checked.h"
#include "../isa.h"
#include "../tiles.h"
#include "harness.h"

void test_isa_table(void) {
    const char *isa_before = getenv("WAVEPE_ISA");
    char *saved = isa_before ? strdup(isa_before) : NULL;
    const char *force = getenv("WAVEPE_FORCE_SCALAR");
    CHECK(force == NULL || force[0] == '\0' || strcmp(force, "0") == 0); /* the override below needs it unset */

    CHECK(strcmp(wavepe_isa_name(WAVEPE_ISA_SCALAR), "scalar") == 0);
    CHECK(wavepe_isa_supported(WAVEPE_ISA_SCALAR));
    CHECK(!wavepe_isa_supported((wavepe_isa)WAVEPE_ISA_COUNT) && !wavepe_isa_supported((wavepe_isa)-1));
    CHECK(strcmp(wavepe_isa_name((wavepe_isa)WAVEPE_ISA_COUNT), "unknown") == 0);
    CHECK(wavepe_isa_lanes_f32(WAVEPE_ISA_SCALAR) == 1 && wavepe_isa_lanes_f64(WAVEPE_ISA_SCALAR) == 1);
    CHECK(wavepe_isa_kernel_isa((wavepe_isa)WAVEPE_ISA_COUNT) == WAVEPE_ISA_SCALAR);

    /* an ISA of another architecture never runs: detection is per ISA, not a chain */
#if defined(__x86_64__) || defined(_M_X64)
    CHECK(!wavepe_isa_supported(WAVEPE_ISA_NEON));
    CHECK(!wavepe_isa_supported(WAVEPE_ISA_AVX512) || wavepe_isa_supported(WAVEPE_ISA_AVX2));
    /* avx512bf16 is AVX-512 plus AVX512_BF16: never without avx512; amx is avx512bf16 plus tiles (emulated
     * where the CPU has none): wherever avx512bf16 runs, and the default only with the instructions */
    CHECK(!wavepe_isa_supported(WAVEPE_ISA_AVX512BF16) || wavepe_isa_supported(WAVEPE_ISA_AVX512));
    CHECK(wavepe_isa_supported(WAVEPE_ISA_AMX) == wavepe_isa_supported(WAVEPE_ISA_AVX512BF16));
    CHECK((wavepe_cpu_isa() == WAVEPE_ISA_AMX) == (wavepe_isa_supported(WAVEPE_ISA_AMX) && wavepe_tiles_hardware(NULL)));
    CHECK(wavepe_isa_lanes_f32(WAVEPE_ISA_AVX512BF16) == wavepe_isa_lanes_f32(WAVEPE_ISA_AVX512));
    CHECK(wavepe_isa_lanes_f32(WAVEPE_ISA_AMX) == wavepe_isa_lanes_f32(WAVEPE_ISA_AVX512));
    /* their extensions serve the attention alone: the other families run the avx512 kernels on both */
    CHECK(wavepe_isa_kernel_isa(WAVEPE_ISA_AVX512BF16) == WAVEPE_ISA_AVX512);
    CHECK(wavepe_isa_kernel_isa(WAVEPE_ISA_AMX) == WAVEPE_ISA_AVX512);
#elif defined(__aarch64__)
    CHECK(!wavepe_isa_supported(WAVEPE_ISA_AVX2) && !wavepe_isa_supported(WAVEPE_ISA_AVX512));
    CHECK(!wavepe_isa_supported(WAVEPE_ISA_AVX512BF16));
    CHECK(wavepe_isa_supported(WAVEPE_ISA_NEON)); /* every AArch64 Linux CPU wavepe targets has it */
    CHECK(wavepe_cpu_isa() == WAVEPE_ISA_NEON);
#else
    CHECK(wavepe_cpu_isa() == WAVEPE_ISA_SCALAR);
#endif

    int best = WAVEPE_ISA_SCALAR; /* the last that runs, amx with emulated tiles excepted (it is there for tests) */
    for (int i = 0; i < WAVEPE_ISA_COUNT; ++i) {
        const wavepe_isa isa = (wavepe_isa)i;
        const char *name = wavepe_isa_name(isa);
        for (int j = 0; j < i; ++j) CHECK(strcmp(name, wavepe_isa_name((wavepe_isa)j)) != 0);
        const int f32 = wavepe_isa_lanes_f32(isa), f64 = wavepe_isa_lanes_f64(isa);
        if (i != WAVEPE_ISA_SCALAR) CHECK(f32 >= 4 && f32 == 2 * f64);
        /* the kernels the other families run here: its own, or those of an ISA with its own kernels, the same
         * lanes, that runs wherever this one does */
        const wavepe_isa kernels = wavepe_isa_kernel_isa(isa);
        CHECK(wavepe_isa_kernel_isa(kernels) == kernels);
        CHECK(wavepe_isa_lanes_f32(kernels) == f32 && wavepe_isa_lanes_f64(kernels) == f64);
        CHECK(!wavepe_isa_supported(isa) || wavepe_isa_supported(kernels));
        if (wavepe_isa_supported(isa) && (isa != WAVEPE_ISA_AMX || wavepe_tiles_hardware(NULL))) best = i;
        /* WAVEPE_ISA=<name>: that ISA where it runs, an error naming it where not */
        setenv("WAVEPE_ISA", name, 1);
        wavepe_isa got = (wavepe_isa)WAVEPE_ISA_COUNT;
        char message[256] = "";
        const int status = wavepe_active_isa_checked(&got, message, sizeof(message));
        if (wavepe_isa_supported(isa)) {
            CHECK(status == WAVEPE_OK && got == isa && wavepe_active_isa() == isa);
        } else {
            CHECK(status == WAVEPE_E_INVALID && got == wavepe_cpu_isa() && strstr(message, name) != NULL);
            CHECK(wavepe_active_isa() == wavepe_cpu_isa());
        }
    }
    /* the last one of the table that runs -- or avx512 where that is avx512bf16 on an Intel CPU (isa.c) */
    CHECK(wavepe_cpu_isa() == (wavepe_isa)best ||
          (best == WAVEPE_ISA_AVX512BF16 && wavepe_cpu_isa() == WAVEPE_ISA_AVX512));

    setenv("WAVEPE_ISA", "sse9", 1);
    wavepe_isa got;
    char message[256] = "";
    CHECK(wavepe_active_isa_checked(&got, message, sizeof(message)) == WAVEPE_E_INVALID);
    for (int i = 0; i < WAVEPE_ISA_COUNT; ++i) CHECK(strstr(message, wavepe_isa_name((wavepe_isa)i)) != NULL);

    if (saved) {
        setenv("WAVEPE_ISA", saved, 1);
        free(saved);
    } else {
        unsetenv("WAVEPE_ISA");
    }
}
