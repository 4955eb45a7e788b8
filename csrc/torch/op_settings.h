// op_settings.h: a family's settings list (csrc/core/settings.h) in the torch binding.
//
// From WAVEPE_<FAMILY>_SETTINGS, in its order:
//   - the schema's setting arguments, appended after the op's own arguments, each with the list's
//     default (`bool causal=0` is how a schema spells False), so that a setting added to the list
//     leaves every existing caller -- positional ones included -- computing what it computed:
//         m.def("rel_bias(Tensor q, Tensor table, SymInt k_len"
//               WAVEPE_RELBIAS_SETTINGS(WAVEPE_SCHEMA_SETTING) ") -> Tensor");
//   - the op body's parameters, after its own (TORCH_BOX unboxes them by type):
//         Tensor rel_bias(const Tensor& q, const Tensor& table, int64_t k_len
//                         WAVEPE_RELBIAS_SETTINGS(WAVEPE_OP_SETTING_PARAM))
//   - the struct fill: WAVEPE_RELBIAS_SETTINGS(WAVEPE_OP_SETTING_FILL) sets a.<name> for each.
// So a setting added to the family's list reaches every op of the family, on every device,
// without a change here or in the bindings.
#pragma once

#include <cstdint>

#define WAVEPE_SCHEMA_TYPE_INT "SymInt"
#define WAVEPE_SCHEMA_TYPE_BOOL "bool"
#define WAVEPE_SCHEMA_TYPE_REAL "float"
#define WAVEPE_SCHEMA_SETTING(kind, name, def) ", " WAVEPE_SCHEMA_TYPE_##kind " " #name "=" #def

namespace wavepe {
using op_setting_INT = int64_t;
using op_setting_BOOL = bool;
using op_setting_REAL = double;
}  // namespace wavepe

#define WAVEPE_OP_SETTING_PARAM(kind, name, def) , wavepe::op_setting_##kind name
#define WAVEPE_OP_SETTING_FILL(kind, name, def) a.name = static_cast<wavepe_setting_##kind>(name);
