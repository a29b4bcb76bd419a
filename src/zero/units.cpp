#include "zero/units.h"

#include <algorithm>
#include <set>

namespace triad::zero {

std::vector<Unit> make_units(const nn::ModulePtr& model, const WrapPolicy& policy) {
  // Bottom-up (deepest modules first), as size-based wrapping needs: a module becomes a
  // unit when its type is listed, or when the parameters no unit below it took reach
  // min_params. Units are then put in forward (pre-)order, the root unit first.
  const auto modules = model->named_modules(model);
  std::set<const TensorImpl*> taken;
  std::vector<std::pair<size_t, Unit>> found;  // (pre-order position, unit)
  for (size_t i = modules.size(); i-- > 1;) {
    const auto& [name, module] = modules[i];
    std::vector<std::pair<std::string, Tensor>> params;
    for (const auto& [pname, p] : module->named_parameters())
      if (!taken.count(p.impl_ptr().get())) params.emplace_back(name + "." + pname, p);
    int64_t count = 0;
    for (const auto& [_, p] : params) count += p.numel();
    const bool by_type = std::find(policy.module_types.begin(), policy.module_types.end(), module->type_name()) !=
                         policy.module_types.end();
    const bool by_size = policy.min_params > 0 && count >= policy.min_params;
    const bool by_name = std::find(policy.module_names.begin(), policy.module_names.end(), name) !=
                         policy.module_names.end();
    if (params.empty() || !(by_type || by_size || by_name)) continue;
    for (const auto& [_, p] : params) taken.insert(p.impl_ptr().get());
    found.emplace_back(i, Unit{name, module.get(), std::move(params)});
  }
  std::sort(found.begin(), found.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<Unit> units{{"", model.get(), {}}};
  for (const auto& [pname, p] : model->named_parameters())
    if (!taken.count(p.impl_ptr().get())) units[0].params.emplace_back(pname, p);
  if (units[0].params.empty()) units.clear();
  for (auto& [_, u] : found) units.push_back(std::move(u));
  return units;
}

}  // namespace triad::zero
