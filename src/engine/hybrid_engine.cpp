#include "engine/hybrid_engine.h"

namespace triad::engine {

namespace {

// Holds the engine's parameters gathered while it lives (Note [Hybrid engine]) and restores
// the model's training mode.
class WholeModel {
 public:
  explicit WholeModel(Engine& engine) : engine_(engine), training_(engine.model().is_training()) {
    engine_.gather_parameters();
  }
  ~WholeModel() {
    engine_.release_parameters();
    if (training_) engine_.model().train();
  }
  WholeModel(const WholeModel&) = delete;
  WholeModel& operator=(const WholeModel&) = delete;

 private:
  Engine& engine_;
  bool training_;
};

}  // namespace

BatchGeneration generate_batch(Engine& engine, const std::vector<std::vector<int32_t>>& prompts,
                               const SamplingOptions& options, int32_t pad_token, int64_t first_sample) {
  auto* model = dynamic_cast<nn::LanguageModel*>(&engine.model());
  TRIAD_CHECK(model && !engine.pipelined(), "generate_batch: the engine's model must be a language model (GPT, Llama) "
                                            "held whole by each pipeline stage, got " << engine.model().type_name());
  const WholeModel whole(engine);
  return generate_batch(*model, prompts, options, pad_token, first_sample);
}

}  // namespace triad::engine
