/* rope_amx.c: the amx ISA's rope kernels: rope_avx512bf16.c again, named *_amx (isa_table.h). */
#define WAVEPE_AMX
#include "rope_avx512bf16.c"
