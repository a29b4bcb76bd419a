#include "nn/value_model.h"

#include "autograd/functions.h"

namespace triad::nn {

ValueModel::ValueModel(std::shared_ptr<LanguageModel> base_model, int64_t d_model, const Parallelism& parallelism,
                       uint64_t seed)
    : Module("ValueModel"), base(std::move(base_model)), par_(parallelism.shared_from_this()) {
  TRIAD_CHECK(base, "ValueModel: no base model");
  Generator gen(seed);
  v_head = std::make_shared<Linear>(d_model, 1, /*bias=*/false, gen);
  register_module("base", base);
  register_module("v_head", v_head);
  parallelism.mark_residual_layer(*v_head);
}

Tensor ValueModel::forward(const Tensor& indices) { return values(indices, nullptr); }

Tensor ValueModel::forward(const Tensor& indices, const LeftPadding& padding) {
  return call([&] { return values(indices, &padding); });
}

Tensor ValueModel::values(const Tensor& indices, const LeftPadding* padding) {
  const Tensor h = base->hidden_states(indices, padding);  // (B, t, C): this rank's columns
  return par_->whole_sequence(reshape((*v_head)(h), {h.size(0), h.size(1)}));
}

}  // namespace triad::nn
