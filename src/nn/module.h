// Module: the unit users build models from. A module owns named parameters, buffers and
// child modules, registered in its constructor; traversal is depth-first in registration
// order, so parameter names and order are stable (checkpoints and ZeRO units rely on it).
//
// Parameters are Tensor handles shared with the module's members: code that repoints a
// parameter's storage (ZeRO's flat buffers) changes it everywhere at once.
//
// Forward hooks run around every call made through operator() or call(): pre hooks before
// the forward, post hooks after it (ZeRO-3 gathers and releases a unit's parameters there).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "nn/tensor_split.h"
#include "tensor/tensor.h"

namespace triad::nn {

class Module;
using ModulePtr = std::shared_ptr<Module>;
using ForwardHook = std::function<void(Module&)>;
using ForwardOutputHook = std::function<void(Module&, const Tensor& output)>;

class Module {
 public:
  explicit Module(std::string type_name) : type_name_(std::move(type_name)) {}
  virtual ~Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  const std::string& type_name() const { return type_name_; }

  // The single-tensor forward most layers have. Modules with other signatures define their
  // own entry point and run it through call() so hooks still fire.
  virtual Tensor forward(const Tensor& x);
  template <class F>
  auto call(F&& f) {
    run_hooks(pre_hooks_);
    auto y = f();
    if constexpr (std::is_same_v<decltype(y), Tensor>)
      for (const ForwardOutputHook& h : output_hooks_) h(*this, y);
    run_hooks(post_hooks_);
    return y;
  }
  Tensor operator()(const Tensor& x) {
    return call([&] { return forward(x); });
  }

  std::vector<std::pair<std::string, Tensor>> named_parameters(bool recurse = true) const;
  std::vector<Tensor> parameters(bool recurse = true) const;
  // How each parameter is split over tensor-parallel ranks (nn/tensor_split.h), in the
  // order and with the names of named_parameters(); replicated unless its layer says so.
  std::vector<std::pair<std::string, TensorSplit>> named_splits(bool recurse = true) const;
  // Changes the split recorded for this module's own parameter `name` (a model marks the
  // replicated parameters that sequence parallelism leaves with partial gradients).
  void set_split(const std::string& name, const TensorSplit& split);
  std::vector<std::pair<std::string, Tensor>> named_buffers(bool recurse = true) const;
  // This module (named "") and every descendant, depth-first, with dotted names.
  std::vector<std::pair<std::string, ModulePtr>> named_modules(const ModulePtr& self) const;
  const std::vector<std::pair<std::string, ModulePtr>>& children() const { return children_; }
  int64_t num_parameters() const;

  void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }
  // Drops every parameter's accumulated gradient.
  void zero_grad();
  // Moves every parameter and buffer to `device` in place: each keeps its TensorImpl, so
  // every holder of the handle sees the new storage (as Note [Flat parameters] repoints
  // them). Accumulated gradients are dropped. For a model not yet trained or flattened.
  // Then each module (this one, every descendant) moves what else it holds (move_state).
  void to(Device device);

  void register_forward_pre_hook(ForwardHook hook) { pre_hooks_.push_back(std::move(hook)); }
  void register_forward_hook(ForwardHook hook) { post_hooks_.push_back(std::move(hook)); }
  // Runs after a forward that returns a Tensor, with that output, before the post hooks
  // (ZeRO-3 hooks the output's gradient to re-gather parameters for the backward).
  void register_forward_output_hook(ForwardOutputHook hook) { output_hooks_.push_back(std::move(hook)); }

 protected:
  // Registers a parameter (it becomes a leaf that requires grad) and returns it.
  Tensor register_parameter(const std::string& name, Tensor t, const TensorSplit& split = {});
  Tensor register_buffer(const std::string& name, Tensor t);
  // Moves what the module holds besides its parameters and buffers (a quantized layer's
  // packed weight) to `device`; Module::to calls it. Nothing by default.
  virtual void move_state(Device) {}
  template <class M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> m) {
    add_child(name, m);
    return m;
  }

 private:
  void add_child(const std::string& name, ModulePtr m);
  void check_name(const std::string& name) const;
  void run_hooks(const std::vector<ForwardHook>& hooks);

  std::string type_name_;
  bool training_ = true;
  std::vector<std::pair<std::string, Tensor>> params_;
  std::vector<TensorSplit> splits_;  // of params_
  std::vector<std::pair<std::string, Tensor>> buffers_;
  std::vector<std::pair<std::string, ModulePtr>> children_;
  std::vector<ForwardHook> pre_hooks_, post_hooks_;
  std::vector<ForwardOutputHook> output_hooks_;
};

// An ordered list of modules, named "0", "1", ...
class ModuleList : public Module {
 public:
  ModuleList() : Module("ModuleList") {}
  template <class M>
  std::shared_ptr<M> push_back(std::shared_ptr<M> m) {
    return register_module(std::to_string(children().size()), std::move(m));
  }
  size_t size() const { return children().size(); }
  const ModulePtr& operator[](size_t i) const { return children()[i].second; }
};

}  // namespace triad::nn
