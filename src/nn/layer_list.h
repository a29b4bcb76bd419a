// A model written as a list of layers, the form pipeline parallelism splits (DeepSpeed's
// PipelineModule with LayerSpec and TiedLayerSpec): each layer maps one tensor to the
// next, the first takes the batch's inputs, and the model's loss maps the last layer's
// output and the targets to a scalar. Any model written this way can be cut into stages
// (nn/pipeline_partition.h) and run by parallel/pipeline_executor.h; the GPT is one
// (nn/gpt_layers.h).
//
// Note [Layer names]: a stage holds only its own layers, yet names its parameters as the
// whole model does, so checkpoints and ZeRO's units see the same names in every layout. A
// layer says where its modules live: under `name` ("blocks.3" gives blocks.3.ln1.weight;
// any number of parts), or, with an empty name, its children directly at the root ("wpe"
// gives wpe.weight), or with a name ending in '.', its children directly in that namespace
// ("base." gives base.wpe.weight). A tied module's key is its path the same way.
//
// Note [Tied layers]: a module two layers share (the GPT's token table: the first stage's
// embedding and the last stage's output head) is declared once as a TiedSpec. Every stage
// holding a layer that uses it builds its own copy, named `key` at the root, with the same
// initial values; the stages' gradients for it are summed (zero/zero_optimizer.h), so the
// copies stay equal and act as one logical weight, which checkpoints store once. A layer
// receives its tied modules when built and must not register them as its own children.
// A layer that reads a tied module's parameters other than through its forward (the GPT's
// head multiplies by the token table) does so inside the module's call(), so that the
// module's forward hooks (ZeRO-3's gather) fire around the use.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "nn/module.h"

namespace triad::nn {

using TiedModules = std::map<std::string, ModulePtr>;

struct LayerSpec {
  std::string name;        // Note [Layer names]
  std::string type;        // what partition "type:REGEX" matches (DeepSpeed: the class name)
  int64_t parameters = 0;  // what partition "parameters" balances
  std::vector<std::string> ties;  // keys of the tied modules it uses
  // Builds the layer (a Module whose forward maps one tensor to the next) given the tied
  // modules it named, built for this stage.
  std::function<ModulePtr(const TiedModules& tied)> build;
};

struct TiedSpec {
  std::string key;
  std::function<ModulePtr()> build;
};

struct LayerList {
  std::vector<LayerSpec> layers;
  std::vector<TiedSpec> tied;
  // The scalar loss of the last layer's output against the targets.
  std::function<Tensor(const Tensor& output, const Tensor& targets)> loss;
  // Sets initial values for the parameters `stage` holds, the same whatever layers it holds
  // (null: each layer's constructor initialises its own).
  std::function<void(Module& stage)> init;
};

// The layers [first, last) of a list, as one module or several chunks (interleaved
// schedules give a rank v chunks: layer ranges that are not adjacent).
struct LayerRange {
  int first = 0, last = 0;
};

// The part of a LayerList one pipeline rank holds: its chunks' layers, named as Note
// [Layer names] says, and the tied modules they use. Forward hooks on the stage itself
// fire around each chunk's forward (ZeRO-3 gathers the stage's own parameters there).
class PipelineStage : public Module {
 public:
  // activation_checkpoint_interval: recompute runs of that many layers in the backward
  // (DeepSpeed's pipeline.activation_checkpoint_interval; 0: off). A run whose input needs
  // no gradient (token indices) is not checkpointed.
  PipelineStage(const LayerList& list, std::vector<LayerRange> chunks, int activation_checkpoint_interval = 0);

  int chunks() const { return int(chunks_.size()); }
  const LayerRange& range(int chunk) const { return chunks_[size_t(chunk)]; }
  // The keys of the tied modules this stage holds.
  std::vector<std::string> tied_keys() const;
  Tensor forward_chunk(int chunk, const Tensor& x);
  // The parameters only chunk `chunk`'s layers use (a tied module that another chunk of this
  // stage also uses is left out): once that chunk's last backward of a step has run, their
  // gradients are complete.
  std::vector<Tensor> chunk_parameters(int chunk) const;
  // The whole stage when it has one chunk (a model of one stage: the single-process run).
  Tensor forward(const Tensor& x) override;

 private:
  Tensor run_layers(int chunk, const Tensor& x);
  std::vector<LayerRange> chunks_;
  std::vector<std::vector<ModulePtr>> layers_;  // per chunk, in order
  TiedModules tied_;
  int checkpoint_interval_;
};

}  // namespace triad::nn
