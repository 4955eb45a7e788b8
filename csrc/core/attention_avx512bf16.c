/* attention_avx512bf16.c: the avx512bf16 ISA's attention kernels: attention_avx512.c again, named
 * *_avx512bf16 (isa_table.h), whose bfloat16 scores q . k use vdpbf16ps (attention_simd.h). */
#define WAVEPE_AVX512BF16
#include "attention_avx512.c"
