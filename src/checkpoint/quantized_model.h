// Quantized model files (ZeroQuant post-training quantization, triad-compress zeroquant):
// the linear layers of a trained model's transformer blocks stored as integers with
// group-wise scales (ops::quantize_blocks along each weight's input dimension), everything
// else (embeddings, norms, biases, the output head) in f32, as ZeroQuant keeps them. With
// QuantRecipe::quantize_embeddings the token tables and the output head are quantized too
// (quantized_embeddings: a GPT's wte, which its tied head reads as well; a Llama's embed and
// head), in groups along d_model; position embeddings (a GPT's wpe) stay f32.
//
//   /model/<parameter>                  a parameter kept in full precision (f32)
//   /quantized/<weight>/q               i8 (N, bytes(K)): the integers, packed as
//                                       ops::quantize_blocks packs them
//   /quantized/<weight>/scales          f32 (N, K / group_size), (N, 1) for group_size 0
//   attributes of "/": format_version, kind "quantized", config, layout (one rank, f32),
//   recipe (JSON: method, wbits, abits, group_size, symmetric, lkd_steps,
//   quantize_embeddings; xtc also steps, keep_layers, teacher_layers)
//   attribute "checksum" of every dataset (io/checksum.h)
//
// engine::load_model reads such a file into a model whose quantized layers run the integer
// GEMM (nn::Linear::use_quantized; on a GPU after Module::to, which moves their packed
// weights) and hold only their integers and scales: the model is
// built by quantized_layout(), so no f32 weight of theirs is ever allocated (model_bytes
// counts what it holds). A quantized token table (nn::Embedding::use_quantized) holds one
// packed copy: its lookup dequantizes the rows it reads (ops::packed_rows), and a GPT's tied
// head multiplies by the same integers (ops::quantized_linear, activations at abits).
// Training cannot resume from one (load_checkpoint wants kind "checkpoint").
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "checkpoint/checkpoint.h"
#include "nn/language_model.h"
#include "nn/layers.h"
#include "nn/parallelism.h"

namespace triad::engine {

struct QuantRecipe {
  std::string method = "zeroquant";  // zeroquant (post-training) or xtc (quantization-aware training)
  int wbits = 8;                     // weight bits: 8 or 4 (zeroquant), 2 (ternary) or 1 (binary) (xtc)
  int abits = 8;                     // activation bits: 8 (per-token int8) or 16 (full precision)
  int64_t group_size = 64;           // weight values sharing one scale, along the input dimension; 0: one per row
  bool symmetric = true;
  int64_t lkd_steps = 0;  // layer-by-layer distillation's AdamW steps per block before quantizing (0: none)
  // The token tables and the output head quantized too (quantized_embeddings), zeroquant only
  // (XTC trains its student's embeddings in full precision); absent from older files: false.
  bool quantize_embeddings = false;
  // xtc: the training steps, and the teacher's blocks the student kept (in order) of its
  // teacher_layers (empty: all of them).
  int64_t steps = 0;
  std::vector<int64_t> keep_layers;
  int64_t teacher_layers = 0;

  // Throws Error naming the field when a value is out of range.
  void validate() const;
  // The format of a layer of input dimension k (group_size 0: one group of k).
  QuantFormat format(int64_t k) const { return QuantFormat{wbits, group_size > 0 ? group_size : k, symmetric}; }
  nlohmann::json to_json() const;
  static QuantRecipe from_json(const nlohmann::json& j);
};

// The layers a recipe quantizes: every nn::Linear inside the model's transformer blocks
// (named "blocks...."), by module name, in module order, except the MoE gates'
// ("...moe.gate.wg"): a router computes its logits from its f32 weight itself (nn/moe_gate.h)
// and is E x d, a sliver of its block.
std::vector<std::pair<std::string, std::shared_ptr<nn::Linear>>> quantized_linears(
    const std::shared_ptr<nn::LanguageModel>& model);

// The token tables and output head that a recipe with quantize_embeddings quantizes, by module
// name: a GPT's wte (an nn::Embedding whose tied head reads it too), a Llama's embed (an
// nn::Embedding) and head (an nn::Linear, absent from a model built without it). Each holds
// or is given a weight (rows, d_model), quantized in groups along d_model.
std::vector<std::pair<std::string, nn::ModulePtr>> quantized_embeddings(
    const std::shared_ptr<nn::LanguageModel>& model);

// Serial: quantizes the model of a checkpoint or weights file (its f32 master weights when
// it has them) by `recipe` and writes `out` (under a temporary name, renamed when
// complete). Throws Error naming the recipe field or the layer when the recipe does not fit
// the model (a group size that does not divide a layer's input dimension, say).
void save_quantized_model(const std::string& checkpoint, const std::string& out, const QuantRecipe& recipe);
// As above, of a model in memory (load_model's, after distill_blocks, say).
void save_quantized_model(const LoadedModel& m, const std::string& out, const QuantRecipe& recipe);

// The single-process layout a quantized model is built with for load_quantized_model: every
// column- and row-parallel linear layer (those of the blocks, and a Llama's output head)
// built nn::Linear::WithoutWeight, and the token table nn::Embedding::WithoutWeight.
std::shared_ptr<const nn::Parallelism> quantized_layout();

// Serial: the parameters and quantized layers of a quantized file into `model` (built from
// the file's config, by quantized_layout() or with every weight); each quantized layer then
// runs nn::Linear::use_quantized (a quantized token table nn::Embedding::use_quantized), and
// a layer or table built without a weight that the file keeps in full precision (a Llama's
// head, a token table without quantize_embeddings) is given one (set_weight). Throws Error
// naming the file and dataset when one is missing or fails its checksum.
void load_quantized_model(const std::string& path, const std::shared_ptr<nn::LanguageModel>& model);

// The bytes a model's tensors hold: `resident`, every parameter and buffer it holds and each
// quantized layer's or token table's packed weight (PackedWeight's data, scales, offsets and
// sums; a tied table's once);
// `full_precision`, the same with each quantized layer's weight in f32 instead (the model
// before quantization). `packed` and `packed_f32`: the quantized layers' packed weights
// alone, and their weights in f32.
struct ModelBytes {
  int64_t resident = 0, full_precision = 0;
  int64_t packed = 0, packed_f32 = 0;
};
ModelBytes model_bytes(const std::shared_ptr<nn::LanguageModel>& model);

// The recipe of a quantized file.
QuantRecipe read_recipe(const std::string& path);

}  // namespace triad::engine
