#include "autograd/record.h"

namespace triad {

bool any_requires_grad(const std::vector<Tensor>& inputs) {
  if (!GradMode::enabled()) return false;
  for (const Tensor& t : inputs)
    if (t.defined() && requires_grad(t)) return true;
  return false;
}

std::vector<Tensor> record(const char* name, const std::vector<Tensor>& inputs, std::vector<Tensor> outputs,
                           BackwardFn backward) {
  if (!any_requires_grad(inputs)) return outputs;
  auto node = std::make_shared<FunctionNode>(name, int(outputs.size()), std::move(backward));
  node->next.reserve(inputs.size());
  for (const Tensor& t : inputs) node->next.push_back(gradient_edge(t));
  // Outputs that are views of an input share its storage but get their own impl here, so
  // attaching history never touches the input's handle.
  for (Tensor& out : outputs)
    if (out.defined() && out.impl().autograd) out = detach(out);
  set_history(outputs, node);
  return outputs;
}

}  // namespace triad
