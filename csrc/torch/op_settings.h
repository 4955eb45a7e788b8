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
}  // namespace wavepe

#define WAVEPE_SCHEMA_SETTING(kind, name, def) +wavepe::schema_setting_##kind(#name, def)
#define WAVEPE_OP_SETTING_PARAM(kind, name, def) , wavepe::op_setting_##kind name
#define WAVEPE_OP_SETTING_FILL(kind, name, def) a.name = static_cast<wavepe_setting_##kind>(name);
