/* rope_avx512bf16.c: the avx512bf16 ISA's rope kernels: rope_avx512.c again, named *_avx512bf16 (isa_table.h). */
#define WAVEPE_AVX512BF16
#include "rope_avx512.c"
