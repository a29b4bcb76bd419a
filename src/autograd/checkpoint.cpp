#include "autograd/checkpoint.h"

#include "autograd/engine.h"
#include "autograd/record.h"
#include "tensor/random.h"

namespace triad {

std::vector<Tensor> checkpoint(const Segment& segment, const std::vector<Tensor>& inputs) {
  if (!GradMode::enabled()) return segment(inputs);
  const GeneratorState rng = default_generator().state(), tp_rng = tensor_parallel_generator().state();
  std::vector<Tensor> outputs;
  {
    NoGradGuard no_grad;
    outputs = segment(inputs);
  }
  std::vector<Tensor> saved;
  for (const Tensor& t : inputs) saved.push_back(detach(t));
  std::vector<bool> needs;
  for (const Tensor& t : inputs) needs.push_back(requires_grad(t));

  // `segment` is copied: the closure outlives this call.
  return record("checkpoint", inputs, outputs, [segment, saved, needs, rng, tp_rng](const Grads& grads) {
    std::vector<Tensor> replay_inputs;
    for (size_t i = 0; i < saved.size(); ++i) {
      Tensor t = detach(saved[i]);
      if (needs[i]) set_requires_grad(t);
      replay_inputs.push_back(t);
    }
    const GeneratorState after = default_generator().state(), tp_after = tensor_parallel_generator().state();
    default_generator().set_state(rng);
    tensor_parallel_generator().set_state(tp_rng);
    std::vector<Tensor> replay;
    {
      EnableGradGuard enable;
      replay = segment(replay_inputs);
    }
    default_generator().set_state(after);
    tensor_parallel_generator().set_state(tp_after);
    std::vector<Tensor> roots, root_grads;
    for (size_t i = 0; i < replay.size(); ++i) {
      if (!grads[i].defined() || !requires_grad(replay[i])) continue;
      roots.push_back(replay[i]);
      root_grads.push_back(grads[i]);
    }
    if (!roots.empty()) backward(roots, root_grads);
    Grads input_grads;
    for (size_t i = 0; i < replay_inputs.size(); ++i)
      input_grads.push_back(needs[i] ? grad(replay_inputs[i]) : Tensor());
    return input_grads;
  });
}

}  // namespace triad
