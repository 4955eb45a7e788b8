/* relbias_amx.c: the amx ISA's relbias kernels: relbias_avx512bf16.c again, named *_amx (isa_table.h). */
#define WAVEPE_AMX
#include "relbias_avx512bf16.c"
