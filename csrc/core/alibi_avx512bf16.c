/* alibi_avx512bf16.c: the avx512bf16 ISA's alibi kernels: alibi_avx512.c again, named *_avx512bf16 (isa_table.h). */
#define WAVEPE_AVX512BF16
#include "alibi_avx512.c"
