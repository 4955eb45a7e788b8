/* simd_type_end.h: undoes simd_type.h after a template instantiation. */
#undef T
#undef VT
#undef MT
#undef VL
#undef V
#undef M
#undef WP_TNAME
#undef T_FMA
#undef FN
#undef WP_TYPE_F32
#undef WP_TYPE_F64
