/* alibi_amx.c: the amx ISA's alibi kernels: alibi_avx512bf16.c again, named *_amx (isa_table.h). */
#define WAVEPE_AMX
#include "alibi_avx512bf16.c"
