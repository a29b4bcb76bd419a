// ZeRO units: groups of parameters that are flattened, sharded and communicated together.
// A wrap policy picks the modules that become units — by type name (e.g. every "Block"),
// or any module holding at least min_params parameters — so it works for any model
// written against the layer API. Parameters left outside every unit (for a GPT: the
// embeddings, the tied head and the final norm) form one root unit.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "nn/module.h"

namespace triad::zero {

struct WrapPolicy {
  std::vector<std::string> module_types = {"Block"};
  int64_t min_params = 0;  // 0: off
  std::vector<std::string> module_names;  // modules that are units by their dotted name (tied ones)
};

struct Unit {
  std::string name;                                    // the module's dotted name ("" for the root unit)
  nn::Module* module;                                  // the module whose forward the unit's parameters serve
  std::vector<std::pair<std::string, Tensor>> params;  // full dotted names, model order
};

// Units in forward order of their modules (the root unit first). Every parameter of the
// model is in exactly one unit.
std::vector<Unit> make_units(const nn::ModulePtr& model, const WrapPolicy& policy);

}  // namespace triad::zero
