/* settings.h: an op family's settings, listed once.
 *
 * A family's settings are the scalar arguments its caller chooses -- flags,
 * positions, scales -- as opposed to the sizes and pointers the bindings
 * derive from tensors.  Each family lists them once, in its header, as an
 * X-macro in the one argument order of every layer:
 *
 *     #define WAVEPE_<FAMILY>_SETTINGS(X)  X(KIND, name, default)  ...
 *
 * KIND is INT (an int64_t field; SymInt in the torch schema; int64 in NumPy),
 * BOOL (an int holding 0 or 1; bool; bool) or REAL (a double; float;
 * float64); a family may add a kind of its own (rope.h: LAYOUT, an int enum
 * spelled as a string in the schema, with its typedef wavepe_setting_LAYOUT
 * and the binding's conversions in csrc/torch/rope_op.cpp).  `default` is
 * the value a caller that does not set the field
 * gets from wavepe_<family>_args_defaults().  From the one list:
 *   - the fields of wavepe_<family>_args (WAVEPE_SETTING_FIELD, here);
 *   - their defaults (WAVEPE_SETTING_DEFAULT, here);
 *   - the torch schemas' setting arguments, the binding's parameters and the
 *     struct fill (csrc/torch/op_settings.h);
 *   - the NumPy layer's setting arguments: the gufunc's scalar operands, its
 *     signature and docstring (csrc/numpy/relbias_gufuncs.c), the argument
 *     parsing of alibi_bias (csrc/numpy/alibi_functions.c); the RoPE gufunc
 *     keeps operands of its own (explicit positions, one `mode`);
 *   - the CUDA emulator's ctypes mirror and its defaults (tests/cuda_emu.py
 *     reads the list from the header; the compiler's offsets check it).
 * The rule a setting must obey is written in the family's validate function.
 */
#ifndef WAVEPE_SETTINGS_H
#define WAVEPE_SETTINGS_H

#include <stdint.h>

typedef int64_t wavepe_setting_INT;
typedef int wavepe_setting_BOOL;
typedef double wavepe_setting_REAL;

/* One field of the args struct. */
#define WAVEPE_SETTING_FIELD(kind, name, def) wavepe_setting_##kind name;
/* One statement setting the field of `a` (an args struct) to its default. */
#define WAVEPE_SETTING_DEFAULT(kind, name, def) a.name = (def);

#endif /* WAVEPE_SETTINGS_H */
