/* attention_amx.c: the amx ISA's attention kernels: attention_avx512bf16.c again, named *_amx (isa_table.h) -- its bf16 / fp16 block products on AMX tiles (attention_blocks_tiles.h, tiles.h). */
#define WAVEPE_AMX
#include "attention_avx512bf16.c"
