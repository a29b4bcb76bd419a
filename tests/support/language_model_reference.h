// Checks of a causal language model against a PyTorch language-model reference file
// (tests/reference/reference_common.py's write_model_reference): the logits, the loss and every
// parameter gradient of one batch, and 10 clipped AdamW steps from the same float32 weights.
#pragma once

#include <boost/test/unit_test.hpp>
#include <cmath>
#include <string>
#include <vector>

#include "autograd/engine.h"
#include "autograd/meta.h"
#include "io/tensor_file.h"
#include "nn/language_model.h"
#include "optim/clip.h"
#include "optim/optimizer.h"
#include "support/check.h"

namespace triad::test {

// A .tns file of tests/data, its tensors looked up by name.
struct ReferenceFile {
  explicit ReferenceFile(const std::string& file) : path(data_path(file)), data(io::read_tensor_file(path)) {}
  const Tensor& operator[](const std::string& name) const { return io::find_tensor(data, name, path); }

  std::string path;
  io::NamedTensors data;
};

// Sets every parameter of `model` to the reference's initial weights, param/<name>.
inline void load_reference_parameters(nn::Module& model, const ReferenceFile& ref) {
  for (auto& [name, p] : model.named_parameters()) ops::copy_(p, ref["param/" + name]);
}

// On idx and targets: logits within 1e-5 of the reference (relative to its largest), the
// loss within 1e-5 (relative), every gradient within 1e-4 (relative to its largest).
inline void check_forward_and_gradients(nn::LanguageModel& model, const ReferenceFile& ref) {
  const Tensor logits = model(ref["idx"]);
  BOOST_TEST(relative_error(logits, ref["logits"]) < 1e-5);
  const Tensor loss = model.loss(ref["idx"], ref["targets"]);
  BOOST_TEST(std::fabs(loss.item() - ref["loss"].item()) / ref["loss"].item() < 1e-5);
  backward(loss);
  for (auto& [name, p] : model.named_parameters()) {
    BOOST_REQUIRE_MESSAGE(grad(p).defined(), name << " has no gradient");
    const double err = relative_error(grad(p), ref["grad/" + name]);
    BOOST_TEST(err < 1e-4, name << ": relative gradient error " << err);
  }
}

// The reference's training steps on idx and targets (clip_grad_norm 1, AdamW lr 1e-3,
// betas 0.9/0.95, eps 1e-8, weight decay 0.1 on the 2-D parameters): each step's loss
// within 1e-5 and pre-clip gradient norm within 1e-4 (relative), and the final parameters
// within 2e-5.
inline void check_adamw_trajectory(nn::LanguageModel& model, const ReferenceFile& ref) {
  optim::AdamW opt(optim::decay_groups(model.parameters(), 0.1), {.lr = 1e-3, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8});
  const std::vector<float> losses = ref["train/losses"].to_vector<float>();
  const std::vector<float> norms = ref["train/grad_norms"].to_vector<float>();
  for (size_t step = 0; step < losses.size(); ++step) {
    opt.zero_grad();
    const Tensor loss = model.loss(ref["idx"], ref["targets"]);
    backward(loss);
    const double norm = optim::clip_grad_norm(model.parameters(), 1.0);
    opt.step();
    BOOST_TEST(std::fabs(loss.item() - losses[step]) / losses[step] < 1e-5, "step " << step);
    BOOST_TEST(std::fabs(norm - norms[step]) / norms[step] < 1e-4, "step " << step);
  }
  for (auto& [name, p] : model.named_parameters()) {
    const double err = max_abs_diff(p, ref["final/" + name]);
    BOOST_TEST(err < 2e-5, name << ": final parameter differs by " << err);
  }
}

}  // namespace triad::test
