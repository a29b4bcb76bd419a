#include "engine/step_recording.h"

#include "tensor/allocator.h"
#include "tensor/error.h"
#include "tensor/loss_scale_math.h"
#include "tensor/ops.h"
#include "tensor/random.h"

namespace triad::engine {

StepRecording::StepRecording(Device device, const std::vector<Tensor>& inputs, const std::vector<Tensor>& targets)
    : device_(device) {
  TRIAD_CHECK(!inputs.empty() && inputs.size() == targets.size(),
              "recorded step: " << inputs.size() << " inputs and " << targets.size() << " targets");
  for (size_t m = 0; m < inputs.size(); ++m) {
    inputs_.push_back(Tensor::empty(inputs[m].shape(), inputs[m].dtype(), device));
    targets_.push_back(Tensor::empty(targets[m].shape(), targets[m].dtype(), device));
  }
  losses_ = Tensor::zeros({int64_t(inputs.size())}, DType::f32, device);
  grad_norm_ = Tensor::zeros({1}, DType::f64, device);
  outcome_ = Tensor::zeros({kStepOutcome}, DType::f64, device);
}

void StepRecording::load(const std::vector<Tensor>& inputs, const std::vector<Tensor>& targets) {
  TRIAD_CHECK(inputs.size() == inputs_.size() && targets.size() == targets_.size(),
              "recorded step: " << inputs.size() << " micro-batches, recorded with " << inputs_.size());
  const auto put = [&](const Tensor& buffer, const Tensor& given, size_t m, const char* what) {
    TRIAD_CHECK(given.shape() == buffer.shape() && given.dtype() == buffer.dtype(),
                "recorded step: micro-batch " << m << "'s " << what << " are " << given.str() << ", recorded as "
                                              << buffer.str() << " (a recorded step has fixed shapes)");
    if (given.device().is_cpu())
      copy_from_host(buffer, ops::contiguous(given));
    else
      ops::copy_(buffer, given);
  };
  for (size_t m = 0; m < inputs.size(); ++m) {
    put(inputs_[m], inputs[m], m, "inputs");
    put(targets_[m], targets[m], m, "targets");
  }
}

bool StepRecording::run(const std::function<void()>& step) {
  if (graph_) {
    graph_->replay();
    return false;
  }
  const GeneratorState dropout = default_generator().state(), split = tensor_parallel_generator().state();
  Allocator& memory = allocator_for(device_);
  const size_t base = memory.bytes_in_use();
  memory.reset_peak();
  if (device_.is_cuda()) {
    try {
      graph_ = device_runtime(device_).record(device_, step);
    } catch (const Error& e) {
      throw Error(std::string("cuda_graph.enabled: the training step could not be recorded (") + e.what() +
                  "); set cuda_graph.enabled false to train without a graph");
    }
  } else {
    step();
  }
  activation_peak_ = double(memory.peak_bytes() - base);
  TRIAD_CHECK(default_generator().state() == dropout && tensor_parallel_generator().state() == split,
              "cuda_graph.enabled: the training step draws random numbers (dropout), which every replay of its "
              "recording would repeat; set the model's dropout to 0 or cuda_graph.enabled false");
  if (graph_) graph_->replay();
  return true;
}

}  // namespace triad::engine
