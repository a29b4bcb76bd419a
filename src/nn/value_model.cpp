#include "nn/value_model.h"

#include "autograd/functions.h"

namespace triad::nn {

ValueModel::ValueModel(std::shared_ptr<LanguageModel> base_model, int64_t d_model, const Parallelism& parallelism,
                       uint64_t seed)
    : Module("ValueModel"), base(std::move(base_model)) {
  TRIAD_CHECK(base, "ValueModel: no base model");
  TRIAD_CHECK(!parallelism.sequence_parallel(),
              "ValueModel: a value head reads every token's hidden state, which sequence parallelism splits over "
              "ranks; train reward models and critics without sequence_parallel");
  Generator gen(seed);
  v_head = std::make_shared<Linear>(d_model, 1, /*bias=*/false, gen);
  register_module("base", base);
  register_module("v_head", v_head);
}

Tensor ValueModel::forward(const Tensor& indices) { return values(indices, nullptr); }

Tensor ValueModel::forward(const Tensor& indices, const LeftPadding& padding) {
  return call([&] { return values(indices, &padding); });
}

Tensor ValueModel::values(const Tensor& indices, const LeftPadding* padding) {
  return reshape((*v_head)(base->hidden_states(indices, padding)), {indices.size(0), indices.size(1)});
}

}  // namespace triad::nn
