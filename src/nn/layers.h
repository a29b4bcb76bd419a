// The basic layers: Linear, Embedding, LayerNorm, Dropout, GELU. Initializations follow
// PyTorch's defaults; models re-initialize where their architecture says otherwise.
#pragma once

#include <memory>
#include <optional>

#include "autograd/functions.h"
#include "nn/module.h"
#include "tensor/quantized_matmul.h"
#include "tensor/random.h"

namespace triad::nn {

// Builds a Linear or an Embedding without its weight (their WithoutWeight constructors).
struct WithoutWeight {};

// y = x W^T + b, W (out, in), b (out). Init: U(-1/sqrt(in), 1/sqrt(in)) for both.
class Linear : public Module {
 public:
  Linear(int64_t in_features, int64_t out_features, bool bias = true, Generator& gen = default_generator());
  // A layer that holds no weight (its bias, if any, zero): `weight` stays undefined and is no
  // parameter until use_quantized gives the layer its integers or set_weight a weight, and
  // forward before either throws Error. A quantized model loaded for inference is built so
  // (checkpoint/quantized_model.h): its f32 weights are never allocated.
  using WithoutWeight = nn::WithoutWeight;
  Linear(int64_t in_features, int64_t out_features, bool bias, WithoutWeight);
  Tensor forward(const Tensor& x) override;
  // gelu(forward(x)); a layer that multiplies by its own weight as it stands (not
  // quantized, no fake quantization) runs it as one fused op (triad::linear_gelu). Layers
  // whose forward does more than the product say how GELU follows it.
  virtual Tensor forward_gelu(const Tensor& x);

  int64_t in_features() const { return in_features_; }
  int64_t out_features() const { return out_features_; }
  // Registers w (out_features, in_features) as the parameter "weight" of a layer built
  // WithoutWeight (after its bias in parameter order). Throws Error when the layer has a
  // weight or w's shape differs.
  void set_weight(Tensor w);

  // From now on forward runs the integer GEMM (ops::quantized_linear) on w, a packed
  // quantization of this layer's weight (out_features, in_features), with activations of
  // `abits` (8 or 16); `weight` is no longer read. For inference: no gradient flows through
  // a quantized layer. w's tensors are on the layer's device (Module::to moves them).
  void use_quantized(std::shared_ptr<const PackedWeight> w, int abits);
  const PackedWeight* quantized() const { return quantized_.get(); }
  // With a format, forward multiplies by fake_quantize(weight, format) (autograd/fake_quantize.h):
  // the quantized values, with the gradient passed straight through to `weight` (quantization-
  // aware training); without one, by `weight` again. abits 8 also (or, without a format,
  // alone) fake-quantizes each token of the input (its last dimension, symmetric 8 bits, one
  // scale: what ops::quantized_linear does at abits 8), straight through as well; 16 leaves
  // the input as it is.
  void use_fake_quantization(std::optional<QuantFormat> format, int abits = 16);
  // Whether forward is linear(x, weight, bias), neither quantization on: what a fused head
  // (Parallelism::head_loss) may compute in its place.
  bool plain() const { return !quantized_ && !fake_quantization_ && fake_abits_ == 16; }

  Tensor weight, bias;  // bias undefined when built without one

 protected:
  void move_state(Device device) override;
  // For layers holding a part of a weight split over ranks (parallel/tensor_parallel_layers.h).
  Linear(std::string type_name, Tensor weight, Tensor bias, const TensorSplit& weight_split,
         const TensorSplit& bias_split);

 private:
  int64_t in_features_ = 0, out_features_ = 0;
  std::shared_ptr<const PackedWeight> quantized_;
  std::optional<QuantFormat> fake_quantization_;
  int fake_abits_ = 16;
  int abits_ = 8;
};

// Rows of a table: weight (num_embeddings, dim), init N(0, 1).
class Embedding : public Module {
 public:
  Embedding(int64_t num_embeddings, int64_t dim, Generator& gen = default_generator());
  // A table that holds no weight, as Linear's: `weight` stays undefined and is no parameter
  // until use_quantized or set_weight, and forward before either throws Error.
  using WithoutWeight = nn::WithoutWeight;
  Embedding(int64_t num_embeddings, int64_t dim, WithoutWeight);
  Tensor forward(const Tensor& indices) override;

  int64_t num_embeddings() const { return num_embeddings_; }
  int64_t dim() const { return dim_; }
  // Registers w (num_embeddings, dim) as the parameter "weight" of a table built
  // WithoutWeight. Throws Error when the table has a weight or w's shape differs.
  void set_weight(Tensor w);

  // From now on forward looks its rows up in w, a packed quantization of the table
  // (num_embeddings, dim) in groups along dim (ops::packed_rows: each row dequantized, f32);
  // `weight` is no longer read. An output head tied to the table multiplies by the same w
  // (ops::quantized_linear with activations of `abits`, 8 or 16: nn::GPT), so one packed
  // copy serves both. For inference: no gradient flows. w's tensors are on the table's
  // device (Module::to moves them).
  void use_quantized(std::shared_ptr<const PackedWeight> w, int abits);
  const PackedWeight* quantized() const { return quantized_.get(); }
  int quantized_abits() const { return abits_; }

  Tensor weight;

 protected:
  void move_state(Device device) override;
  Embedding(std::string type_name, Tensor weight, const TensorSplit& split);  // as Linear's

 private:
  int64_t num_embeddings_ = 0, dim_ = 0;
  std::shared_ptr<const PackedWeight> quantized_;
  int abits_ = 8;
};

// Normalizes the last dimension; weight 1, bias 0.
class LayerNorm : public Module {
 public:
  explicit LayerNorm(int64_t dim, double eps = 1e-5);
  Tensor forward(const Tensor& x) override;
  // The residual add before the norm, fused: {x + r, forward(x + r)} (triad::add_layer_norm).
  AddNorm forward_add(const Tensor& x, const Tensor& r);

  Tensor weight, bias;
  double eps;
};

// Inverted dropout, active only in training mode, drawing from `gen` (which must outlive
// the module).
class Dropout : public Module {
 public:
  explicit Dropout(double p, Generator& gen = default_generator());
  Tensor forward(const Tensor& x) override;

  double p;
  Generator* gen;
};

// GELU, tanh approximation.
class GELU : public Module {
 public:
  GELU() : Module("GELU") {}
  Tensor forward(const Tensor& x) override;
};

}  // namespace triad::nn
