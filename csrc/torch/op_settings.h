// op_settings.h: a family's settings list (csrc/core/settings.h) in the torch binding.
//
// From WAVEPE_<FAMILY>_SETTINGS, in its order:
//   - the schema's setting arguments, appended after the op's own arguments, each with the list's
//     default, so that a setting added to the list with a neutral default leaves every existing
//     caller -- positional ones included -- computing what it computed:
//         m.def((std::string("rel_bias(Tensor q, Tensor table, SymInt k_len")
//                WAVEPE_RELBIAS_SETTINGS(WAVEPE_SCHEMA_SETTING) + ") -> Tensor").c_str());
//   - the op body's parameters, after its own (TORCH_BOX unboxes them by type):
//         Tensor rel_bias(const Tensor& q, const Tensor& table, int64_t k_len
//                         WAVEPE_RELBIAS_SETTINGS(WAVEPE_OP_SETTING_PARAM))
//   - the struct fill: WAVEPE_RELBIAS_SETTINGS(WAVEPE_OP_SETTING_FILL) sets a.<name> for each.
// So a setting added to the family's list reaches every op of the family, on every device,
// without a change here or in the bindings.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>

#include "torch_common.h"

namespace wavepe {

// ", <schema type> <name>=<default>" for one setting.  Built at registration (m.def parses its
// string at once): a schema spells a bool default False / True and a float default with a point
// (`bool c=0` parses, but hands the kernel an int).
inline std::string schema_setting_INT(const char* name, int64_t def) {
    return std::string(", SymInt ") + name + "=" + std::to_string(def);
}
inline std::string schema_setting_BOOL(const char* name, int def) {
    return std::string(", bool ") + name + (def ? "=True" : "=False");
}
inline std::string schema_setting_REAL(const char* name, double def) {
    char text[40];
    std::snprintf(text, sizeof text, "%.17g", def);
    std::string s = std::string(", float ") + name + "=" + text;
    return std::strpbrk(text, ".en") ? s : s + ".0";
}

using op_setting_INT = int64_t;
using op_setting_BOOL = bool;
using op_setting_REAL = double;

// The struct field's value of a parameter.
inline int64_t setting_value_INT(int64_t v) { return v; }
inline int setting_value_BOOL(bool v) { return v ? 1 : 0; }
inline double setting_value_REAL(double v) { return v; }

inline int64_t unbox_setting_INT(StableIValue v) { return torch::stable::detail::to<int64_t>(v); }
inline bool unbox_setting_BOOL(StableIValue v) { return torch::stable::detail::to<bool>(v); }
inline double unbox_setting_REAL(StableIValue v) { return torch::stable::detail::to<double>(v); }
}  // namespace wavepe

#define WAVEPE_SCHEMA_SETTING(kind, name, def) +wavepe::schema_setting_##kind(#name, def)
#define WAVEPE_OP_SETTING_PARAM(kind, name, def) , wavepe::op_setting_##kind name
#define WAVEPE_OP_SETTING_FILL(kind, name, def) a.name = wavepe::setting_value_##kind(name);
// For a hand-written boxed kernel: unbox each setting from the stack, in order, then pass them on.
#define WAVEPE_OP_SETTING_UNBOX(kind, name, def) const auto name = wavepe::unbox_setting_##kind(stack[next++]);
#define WAVEPE_OP_SETTING_PASS(kind, name, def) , name
#define WAVEPE_OP_SETTING_COUNT(kind, name, def) +1
