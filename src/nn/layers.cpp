#include "nn/layers.h"

#include <cmath>

#include "autograd/fake_quantize.h"
#include "autograd/functions.h"

namespace triad::nn {

namespace {

// use_quantized of a layer `what` (a Linear's weight, an Embedding's table) of (rows, cols).
void check_packed(const PackedWeight* w, int abits, int64_t rows, int64_t cols, const char* what) {
  TRIAD_CHECK(w && w->n == rows && w->k == cols, what << ": expected a packed weight of (" << rows << ", " << cols << ")");
  TRIAD_CHECK(abits == 8 || abits == 16, what << ": activation bits must be 8 or 16, got " << abits);
}

// set_weight of a layer built without one (`holder`: what `what` calls it).
void check_new_weight(const Tensor& current, const Tensor& w, const Shape& shape, const char* what,
                      const char* holder) {
  TRIAD_CHECK(!current.defined(), what << ": the " << holder << " has a weight");
  TRIAD_CHECK(w.shape() == shape, what << ": expected a weight of (" << shape[0] << ", " << shape[1] << "), got "
                                       << shape_str(w.shape()));
}

// Module::to of a layer's packed weight.
void move_packed(std::shared_ptr<const PackedWeight>& w, Device device) {
  if (w && w->data.device() != device) w = std::make_shared<const PackedWeight>(ops::to(*w, device));
}

}  // namespace

Linear::Linear(int64_t in_features, int64_t out_features, bool with_bias, Generator& gen)
    : Module("Linear"), in_features_(in_features), out_features_(out_features) {
  TRIAD_CHECK(in_features > 0 && out_features > 0,
              "Linear: features must be positive, got in " << in_features << ", out " << out_features);
  const double bound = 1.0 / std::sqrt(double(in_features));
  weight = register_parameter("weight", Tensor::empty({out_features, in_features}));
  ops::uniform_(weight, -bound, bound, gen);
  if (with_bias) {
    bias = register_parameter("bias", Tensor::empty({out_features}));
    ops::uniform_(bias, -bound, bound, gen);
  }
}

Linear::Linear(int64_t in_features, int64_t out_features, bool with_bias, WithoutWeight)
    : Module("Linear"), in_features_(in_features), out_features_(out_features) {
  TRIAD_CHECK(in_features > 0 && out_features > 0,
              "Linear: features must be positive, got in " << in_features << ", out " << out_features);
  if (with_bias) bias = register_parameter("bias", Tensor::zeros({out_features}));
}

Linear::Linear(std::string type_name, Tensor weight_, Tensor bias_, const TensorSplit& weight_split,
               const TensorSplit& bias_split)
    : Module(std::move(type_name)), in_features_(weight_.size(1)), out_features_(weight_.size(0)) {
  weight = register_parameter("weight", std::move(weight_), weight_split);
  if (bias_.defined()) bias = register_parameter("bias", std::move(bias_), bias_split);
}

Tensor Linear::forward_gelu(const Tensor& x) {
  if (fake_quantization_ || fake_abits_ == 8 || quantized_) return gelu(forward(x));
  return linear_gelu(x, weight, bias);
}

Tensor Linear::forward(const Tensor& x) {
  if (fake_quantization_ || fake_abits_ == 8) {
    const Tensor w = fake_quantization_ ? fake_quantize(weight, *fake_quantization_) : weight;
    if (fake_abits_ == 16) return linear(x, w, bias);
    const int64_t k = x.shape().back();
    const Tensor xq = reshape(fake_quantize(reshape(x, {x.numel() / k, k}), QuantFormat{8, k}), x.shape());
    return linear(xq, w, bias);
  }
  if (!quantized_) {
    TRIAD_CHECK(weight.defined(), "Linear (" << out_features_ << ", " << in_features_
                                             << "): built without a weight, it runs after use_quantized or set_weight");
    return linear(x, weight, bias);
  }
  return ops::quantized_linear(x, *quantized_, bias.defined() ? ops::to(bias, DType::f32) : Tensor(), abits_);
}

void Linear::use_fake_quantization(std::optional<QuantFormat> format, int abits) {
  TRIAD_CHECK(abits == 8 || abits == 16,
              "Linear::use_fake_quantization: activation bits must be 8 or 16, got " << abits);
  fake_quantization_ = format;
  fake_abits_ = abits;
}

void Linear::set_weight(Tensor w) {
  check_new_weight(weight, w, {out_features_, in_features_}, "Linear::set_weight", "layer");
  weight = register_parameter("weight", std::move(w));
}

void Linear::use_quantized(std::shared_ptr<const PackedWeight> w, int abits) {
  check_packed(w.get(), abits, out_features_, in_features_, "Linear::use_quantized");
  quantized_ = std::move(w);
  abits_ = abits;
}

void Linear::move_state(Device device) { move_packed(quantized_, device); }

Embedding::Embedding(int64_t num_embeddings, int64_t dim, Generator& gen)
    : Module("Embedding"), num_embeddings_(num_embeddings), dim_(dim) {
  TRIAD_CHECK(num_embeddings > 0 && dim > 0,
              "Embedding: sizes must be positive, got " << num_embeddings << " x " << dim);
  weight = register_parameter("weight", Tensor::empty({num_embeddings, dim}));
  ops::normal_(weight, 0.0, 1.0, gen);
}

Embedding::Embedding(int64_t num_embeddings, int64_t dim, WithoutWeight)
    : Module("Embedding"), num_embeddings_(num_embeddings), dim_(dim) {
  TRIAD_CHECK(num_embeddings > 0 && dim > 0,
              "Embedding: sizes must be positive, got " << num_embeddings << " x " << dim);
}

Embedding::Embedding(std::string type_name, Tensor weight_, const TensorSplit& split)
    : Module(std::move(type_name)), num_embeddings_(weight_.size(0)), dim_(weight_.size(1)) {
  weight = register_parameter("weight", std::move(weight_), split);
}

Tensor Embedding::forward(const Tensor& indices) {
  if (quantized_) return ops::packed_rows(*quantized_, indices);
  TRIAD_CHECK(weight.defined(), "Embedding ("
                                    << num_embeddings_ << ", " << dim_
                                    << "): built without a weight, it runs after use_quantized or set_weight");
  return embedding(weight, indices);
}

void Embedding::set_weight(Tensor w) {
  check_new_weight(weight, w, {num_embeddings_, dim_}, "Embedding::set_weight", "table");
  weight = register_parameter("weight", std::move(w));
}

void Embedding::use_quantized(std::shared_ptr<const PackedWeight> w, int abits) {
  check_packed(w.get(), abits, num_embeddings_, dim_, "Embedding::use_quantized");
  quantized_ = std::move(w);
  abits_ = abits;
}

void Embedding::move_state(Device device) { move_packed(quantized_, device); }

LayerNorm::LayerNorm(int64_t dim, double eps_) : Module("LayerNorm"), eps(eps_) {
  TRIAD_CHECK(dim > 0, "LayerNorm: dimension must be positive, got " << dim);
  weight = register_parameter("weight", Tensor::ones({dim}));
  bias = register_parameter("bias", Tensor::zeros({dim}));
}

Tensor LayerNorm::forward(const Tensor& x) { return layer_norm(x, weight, bias, eps); }

AddNorm LayerNorm::forward_add(const Tensor& x, const Tensor& r) { return add_layer_norm(x, r, weight, bias, eps); }

Dropout::Dropout(double p_, Generator& gen_) : Module("Dropout"), p(p_), gen(&gen_) {
  TRIAD_CHECK(p >= 0.0 && p < 1.0, "Dropout: probability must be in [0, 1), got " << p);
}

Tensor Dropout::forward(const Tensor& x) { return dropout(x, p, is_training(), *gen); }

Tensor GELU::forward(const Tensor& x) { return gelu(x); }

}  // namespace triad::nn
