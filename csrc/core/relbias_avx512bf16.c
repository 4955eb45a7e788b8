/* relbias_avx512bf16.c: the avx512bf16 ISA's relbias kernels: relbias_avx512.c again, named *_avx512bf16 (isa_table.h). */
#define WAVEPE_AVX512BF16
#include "relbias_avx512.c"
