// A model trained in pipeline stages, gathered whole on every rank of its pipeline for what
// needs all of its layers at once: PPO's and GRPO's generation (a KV cache per layer) and
// their experience passes.
//
// Note [Stages gathered whole]: the whole model is built once on each rank (the model the
// stages are the layers of: the same parameter names, Note [Layer names]) and holds no
// storage between gathers. gather() sets each of its parameters to the values of the stage
// holding it: each stage gathers its own parameters over its data-parallel ranks (ZeRO-3,
// as the hybrid engine does: Note [Hybrid engine] in engine/hybrid_engine.h), packs them in
// the whole model's order into one buffer of the stages' dtype, and broadcasts it over the
// pipeline group (one broadcast per stage); the whole model's parameters become views of
// those buffers (a tied parameter is read from the first stage holding it: the copies are
// equal). The values are the trained ones bit for bit, in the training dtype, so the whole
// model computes what the model held whole by one process computes. release() drops the
// buffers again. While gathered, a rank holds the whole model besides its stage, as
// generation at ZeRO-3 holds it gathered.
#pragma once

#include <vector>

#include "engine/engine.h"

namespace triad::rlhf {

class GatheredStages {
 public:
  // `engine` trains in pipeline stages; `whole` is the model its stages are the layers of,
  // built on this rank with the engine's tensor-parallel layout (its values are replaced).
  // Collective over the engine's pipeline group (which stage holds what).
  GatheredStages(engine::Engine& engine, nn::ModulePtr whole);

  // Collective over the engine's pipeline and data-parallel groups; every rank calls it.
  void gather();
  void release();  // on this rank alone

  nn::Module& model() { return *whole_; }

 private:
  engine::Engine& engine_;
  nn::ModulePtr whole_;
  std::vector<int> owner_;       // per parameter of the whole model: the pipeline rank holding it
  std::vector<Tensor> buffers_;  // per pipeline rank, while gathered
};

// Holds `stages` gathered while it lives.
class GatheredScope {
 public:
  explicit GatheredScope(GatheredStages* stages) : stages_(stages) {
    if (stages_) stages_->gather();
  }
  ~GatheredScope() {
    if (stages_) stages_->release();
  }
  GatheredScope(const GatheredScope&) = delete;
  GatheredScope& operator=(const GatheredScope&) = delete;

 private:
  GatheredStages* stages_;
};

}  // namespace triad::rlhf
