#include "nn/module.h"

#include "autograd/meta.h"
#include "tensor/ops.h"

namespace triad::nn {

Tensor Module::forward(const Tensor&) {
  throw Error("module " + type_name_ + " has no single-tensor forward; call its own entry point");
}

void Module::check_name(const std::string& name) const {
  TRIAD_CHECK(!name.empty() && name.find('.') == std::string::npos,
              type_name_ << ": invalid member name '" << name << "' (non-empty, no dots)");
  auto taken = [&](const auto& list) {
    for (const auto& [n, _] : list)
      if (n == name) return true;
    return false;
  };
  TRIAD_CHECK(!taken(params_) && !taken(buffers_) && !taken(children_),
              type_name_ << ": member '" << name << "' registered twice");
}

Tensor Module::register_parameter(const std::string& name, Tensor t, const TensorSplit& split) {
  check_name(name);
  TRIAD_CHECK(t.defined(), type_name_ << ": parameter '" << name << "' is undefined");
  TRIAD_ASSERT(!split.is_split() || split.dim < t.dim());
  set_requires_grad(t, true);
  params_.emplace_back(name, t);
  splits_.push_back(split);
  return t;
}

void Module::set_split(const std::string& name, const TensorSplit& split) {
  for (size_t i = 0; i < params_.size(); ++i)
    if (params_[i].first == name) {
      splits_[i] = split;
      return;
    }
  throw Error(type_name_ + ": no parameter '" + name + "' to split");
}

Tensor Module::register_buffer(const std::string& name, Tensor t) {
  check_name(name);
  buffers_.emplace_back(name, t);
  return t;
}

void Module::add_child(const std::string& name, ModulePtr m) {
  check_name(name);
  TRIAD_CHECK(m != nullptr, type_name_ << ": child module '" << name << "' is null");
  children_.emplace_back(name, std::move(m));
}

std::vector<std::pair<std::string, Tensor>> Module::named_parameters(bool recurse) const {
  std::vector<std::pair<std::string, Tensor>> out = params_;
  if (recurse)
    for (const auto& [cname, child] : children_)
      for (auto& [n, t] : child->named_parameters(true)) out.emplace_back(cname + "." + n, t);
  return out;
}

std::vector<std::pair<std::string, TensorSplit>> Module::named_splits(bool recurse) const {
  std::vector<std::pair<std::string, TensorSplit>> out;
  for (size_t i = 0; i < params_.size(); ++i) out.emplace_back(params_[i].first, splits_[i]);
  if (recurse)
    for (const auto& [cname, child] : children_)
      for (auto& [n, s] : child->named_splits(true)) out.emplace_back(cname + "." + n, s);
  return out;
}

std::vector<Tensor> Module::parameters(bool recurse) const {
  std::vector<Tensor> out;
  for (auto& [_, t] : named_parameters(recurse)) out.push_back(t);
  return out;
}

std::vector<std::pair<std::string, Tensor>> Module::named_buffers(bool recurse) const {
  std::vector<std::pair<std::string, Tensor>> out = buffers_;
  if (recurse)
    for (const auto& [cname, child] : children_)
      for (auto& [n, t] : child->named_buffers(true)) out.emplace_back(cname + "." + n, t);
  return out;
}

std::vector<std::pair<std::string, ModulePtr>> Module::named_modules(const ModulePtr& self) const {
  TRIAD_CHECK(self.get() == this, "named_modules: pass the module's own pointer");
  std::vector<std::pair<std::string, ModulePtr>> out{{"", self}};
  for (const auto& [cname, child] : children_)
    for (auto& [n, m] : child->named_modules(child)) out.emplace_back(n.empty() ? cname : cname + "." + n, m);
  return out;
}

int64_t Module::num_parameters() const {
  int64_t n = 0;
  for (const auto& [_, t] : named_parameters()) n += t.numel();
  return n;
}

void Module::train(bool on) {
  training_ = on;
  for (auto& [_, child] : children_) child->train(on);
}

void Module::zero_grad() {
  for (auto& [_, t] : named_parameters()) set_grad(t, Tensor());
}

void Module::to(Device device) {
  zero_grad();
  auto move = [device](const Tensor& t) {
    if (!t.defined() || t.device() == device) return;
    const Tensor moved = ops::to(t, device);
    TensorImpl& impl = t.impl();
    impl.storage = moved.storage();
    impl.offset = moved.offset();
    impl.strides = moved.strides();
  };
  for (const auto& [_, t] : named_parameters()) move(t);
  for (const auto& [_, t] : named_buffers()) move(t);
  const std::function<void(Module&)> move_states = [&](Module& m) {
    m.move_state(device);
    for (const auto& [_, child] : m.children_) move_states(*child);
  };
  move_states(*this);
}

void Module::run_hooks(const std::vector<ForwardHook>& hooks) {
  for (const ForwardHook& h : hooks) h(*this);
}

}  // namespace triad::nn
