#include "autograd/meta.h"

namespace triad {

namespace {

AutogradMeta* meta(const Tensor& t) { return t.impl().autograd.get(); }

AutogradMeta& ensure_meta(const Tensor& t) {
  auto& slot = t.impl().autograd;
  if (!slot) slot = std::make_shared<AutogradMeta>();
  return *slot;
}

}  // namespace

bool requires_grad(const Tensor& t) {
  const AutogradMeta* m = meta(t);
  return m && m->requires_grad;
}

const Tensor& set_requires_grad(const Tensor& t, bool on) {
  AutogradMeta& m = ensure_meta(t);
  TRIAD_CHECK(!m.grad_fn, "set_requires_grad: only leaf tensors can change requires_grad (use detach)");
  TRIAD_CHECK(!on || is_floating(t.dtype()),
              "set_requires_grad: only floating tensors can require gradients, got " << t.str());
  m.requires_grad = on;
  return t;
}

bool is_leaf(const Tensor& t) {
  const AutogradMeta* m = meta(t);
  return !m || !m->grad_fn;
}

Tensor grad(const Tensor& t) {
  const AutogradMeta* m = meta(t);
  return m ? m->grad : Tensor();
}

void set_grad(const Tensor& t, const Tensor& g) {
  TRIAD_CHECK(!g.defined() || (g.shape() == t.shape() && g.dtype() == t.dtype()),
              "set_grad: gradient " << g.str() << " does not match tensor " << t.str());
  ensure_meta(t).grad = g;
}

const std::shared_ptr<Node>& grad_fn(const Tensor& t) {
  static const std::shared_ptr<Node> none;
  const AutogradMeta* m = meta(t);
  return m ? m->grad_fn : none;
}

Tensor detach(const Tensor& t) {
  auto impl = std::make_shared<TensorImpl>(t.impl());
  impl->autograd = nullptr;
  return Tensor(std::move(impl));
}

void register_hook(const Tensor& t, GradHook hook) {
  TRIAD_CHECK(requires_grad(t), "register_hook: tensor " << t.str() << " does not require grad");
  AutogradMeta& m = *meta(t);
  if (m.grad_fn) {
    auto& hooks = m.grad_fn->output_hooks;
    if (hooks.size() < size_t(m.grad_fn->num_outputs)) hooks.resize(m.grad_fn->num_outputs);
    hooks[m.output_nr].push_back(std::move(hook));
  } else {
    m.hooks.push_back(std::move(hook));
  }
}

void register_pre_accumulate_grad_hook(const Tensor& t, PreAccumulateHook hook) {
  TRIAD_CHECK(requires_grad(t) && is_leaf(t),
              "register_pre_accumulate_grad_hook: expected a leaf that requires grad, got " << t.str());
  meta(t)->pre_accumulate_hooks.push_back(std::move(hook));
}

void register_post_accumulate_grad_hook(const Tensor& t, PostAccumulateHook hook) {
  TRIAD_CHECK(requires_grad(t) && is_leaf(t),
              "register_post_accumulate_grad_hook: expected a leaf that requires grad, got " << t.str());
  meta(t)->post_accumulate_hooks.push_back(std::move(hook));
}

Edge gradient_edge(const Tensor& t) {
  if (!t.defined()) return {};
  AutogradMeta* m = meta(t);
  if (!m || !m->requires_grad) return {};
  if (m->grad_fn) return {m->grad_fn, m->output_nr};
  std::shared_ptr<Node> acc = m->grad_accumulator.lock();
  if (!acc) {
    acc = std::make_shared<AccumulateGrad>(t);
    m->grad_accumulator = acc;
  }
  return {acc, 0};
}

void set_history(const std::vector<Tensor>& outputs, const std::shared_ptr<Node>& node) {
  for (size_t i = 0; i < outputs.size(); ++i) {
    if (!outputs[i].defined()) continue;
    AutogradMeta& m = ensure_meta(outputs[i]);
    m.requires_grad = true;
    m.grad_fn = node;
    m.output_nr = int(i);
  }
}

}  // namespace triad
