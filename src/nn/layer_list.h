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
//
// Note [Fused head loss]: a language model's last layer makes logits (B, T, V) that its
// loss reduces to a scalar; made whole, they and their gradient are the largest tensors of
// the step (at GPT-2's V = 50257 and T = 1024, 206 MB a sequence in f32). A list whose loss
// can be fused with its last layer says so by head_loss: the GPT's and the Llama's run the
// final norm and then the fused classifier (Note [Fused classifier] in
// autograd/fused_classifier.h), which makes the logits a chunk of rows at a time and keeps
// only each row's log-sum-exp, inside the head's call() so its hooks fire. A pipeline's last
// stage (PipelineStage::forward_loss) and a one-stage list then train and evaluate exactly
// as the whole GPT does; a loss of another kind (a value model's, RLHF's) still reads the
// last layer's output.
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
  // Optional: the same loss computed from the last layer's input, `last` being that layer,
  // without making its whole output (Note [Fused head loss]).
  std::function<Tensor(Module& last, const Tensor& x, const Tensor& targets)> head_loss;
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
  // The list's loss of chunk `chunk`'s output against `targets`, the chunk holding the last
  // layer: through the list's head_loss where it has one (Note [Fused head loss]), else
  // loss(forward_chunk(chunk, x), targets).
  Tensor forward_loss(int chunk, const Tensor& x, const Tensor& targets);
  // The parameters only chunk `chunk`'s layers use (a tied module that another chunk of this
  // stage also uses is left out): once that chunk's last backward of a step has run, their
  // gradients are complete.
  std::vector<Tensor> chunk_parameters(int chunk) const;
  // The whole stage when it has one chunk (a model of one stage: the single-process run).
  Tensor forward(const Tensor& x) override;

 private:
  Tensor run_layers(int chunk, const Tensor& x, size_t count);
  std::vector<LayerRange> chunks_;
  int last_layer_;  // the list's, to know the chunk that holds it
  std::function<Tensor(const Tensor&, const Tensor&)> loss_;
  std::function<Tensor(Module&, const Tensor&, const Tensor&)> head_loss_;
  std::vector<std::vector<ModulePtr>> layers_;  // per chunk, in order
  TiedModules tied_;
  int checkpoint_interval_;
};

}  // namespace triad::nn
