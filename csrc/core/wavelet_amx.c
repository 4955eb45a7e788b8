/* wavelet_amx.c: the amx ISA's wavelet kernels: wavelet_avx512bf16.c again, named *_amx (isa_table.h). */
#define WAVEPE_AMX
#include "wavelet_avx512bf16.c"
