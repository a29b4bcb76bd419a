#include "rlhf/models.h"

#include <algorithm>

#include "checkpoint/checkpoint.h"
#include "config/model_factory.h"
#include "nn/value_layers.h"
#include "parallel/tensor_parallel_layers.h"

namespace triad::rlhf {

namespace {

std::shared_ptr<nn::ValueModel> value_model(const engine::TrainConfig& c, std::shared_ptr<const nn::Parallelism> par) {
  const int64_t d_model = engine::model_shape(c).d_model;
  return std::make_shared<nn::ValueModel>(engine::build_value_base(c, par), d_model, *par, c.seed);
}

// The training config a file was written with, for a model of its shape.
engine::TrainConfig file_config(const std::string& path) {
  const engine::CheckpointSummary s = engine::read_summary(path);
  return engine::parse_config(
      s.config, s.layout.value("dp", int64_t(1)) * s.layout.value("tp", int64_t(1)) * s.layout.value("pp", int64_t(1)));
}

// The loaded model on `device`, in eval mode, partitioned as `where` says (Note [Frozen models]).
template <class M>
Frozen<M> freeze(std::shared_ptr<M> m, Device device, const FrozenPlacement& where) {
  m->to(device);
  m->eval();
  Frozen<M> out{std::move(m), nullptr};
  if (where.zero.stage == 3 && where.dp && where.dp->size() > 1)
    out.partition = std::make_unique<zero::FrozenPartition>(
        out.model, where.zero, where.dp, zero::WrapPolicy{.module_types = {"Block", "LlamaBlock"}, .module_names = {}});
  return out;
}

}  // namespace

std::unique_ptr<engine::Engine> policy_engine(const ModelRun& run, engine::GridPtr grid) {
  TRIAD_CHECK(run.init.empty() || !holds_value_model(run.init),
              "'" << run.init << "' holds a value model (a reward model or critic), not a language model to "
                  << "generate with; start the policy from the SFT model");
  const engine::TrainConfig& c = run.train;
  if (c.pipeline.stages > 1) {  // Note [RLHF pipeline stages]: the model's layer list, each rank its stage
    nn::LayerList layers = engine::model_layers(c, parallel::layer_parallelism(grid->tp(), c.sequence_parallel));
    if (!run.init.empty())
      layers.init = [init = layers.init, path = run.init](nn::Module& stage) {
        if (init) init(stage);
        engine::load_parameters(path, stage);
      };
    return std::make_unique<engine::Engine>(c, std::move(layers), std::move(grid));
  }
  return std::make_unique<engine::Engine>(
      c,
      [&](std::shared_ptr<const nn::Parallelism> par) -> nn::ModulePtr {
        std::shared_ptr<nn::LanguageModel> m = engine::build_model(c, std::move(par));
        if (!run.init.empty()) engine::load_parameters(run.init, *m);
        return m;
      },
      std::move(grid));
}

std::unique_ptr<engine::Engine> value_engine(const ModelRun& run, engine::GridPtr grid) {
  const engine::TrainConfig& c = run.train;
  const bool whole = !run.init.empty() && holds_value_model(run.init);
  if (c.pipeline.stages > 1) {  // Note [RLHF pipeline stages]: the value model's layer list, each rank its stage
    nn::LayerList layers =
        engine::value_model_layers(c, c.seed, parallel::layer_parallelism(grid->tp(), c.sequence_parallel));
    if (!run.init.empty())
      layers.init = [init = layers.init, path = run.init, whole](nn::Module& stage) {
        init(stage);
        engine::load_parameters(path, stage, whole ? "" : "base.");
      };
    return std::make_unique<engine::Engine>(c, std::move(layers), std::move(grid));
  }
  return std::make_unique<engine::Engine>(
      c,
      [&](std::shared_ptr<const nn::Parallelism> par) -> nn::ModulePtr {
        std::shared_ptr<nn::ValueModel> m = value_model(c, std::move(par));
        if (!run.init.empty()) engine::load_parameters(run.init, *m, whole ? "" : "base.");
        return m;
      },
      std::move(grid));
}

std::shared_ptr<nn::LanguageModel> whole_policy(const engine::TrainConfig& c, const parallel::CommunicatorPtr& tp) {
  return engine::build_model(c, parallel::layer_parallelism(tp, c.sequence_parallel));
}

std::shared_ptr<nn::ValueModel> whole_value_model(const engine::TrainConfig& c, const parallel::CommunicatorPtr& tp) {
  return value_model(c, parallel::layer_parallelism(tp, c.sequence_parallel));
}

bool holds_value_model(const std::string& path) {
  const engine::CheckpointSummary s = engine::read_summary(path);
  return std::any_of(s.datasets.begin(), s.datasets.end(),
                     [](const engine::CheckpointSummary::Dataset& d) { return d.name == "/model/v_head.weight"; });
}

void check_init_shape(const ModelRun& run, const std::string& key) {
  if (run.init.empty()) return;
  const engine::TrainConfig file = file_config(run.init);
  const engine::ModelShape a = engine::model_shape(file), b = engine::model_shape(run.train);
  TRIAD_CHECK(file.arch == run.train.arch && a.n_layer == b.n_layer && a.n_head == b.n_head &&
                  a.n_kv_head == b.n_kv_head && a.d_model == b.d_model && a.vocab_size == b.vocab_size &&
                  a.parameters == b.parameters,
              "[config] " << key << " '" << run.init << "' holds a " << file.arch << " model " << a.summary << " ("
                          << a.parameters << " parameters), the config describes a " << run.train.arch << " model "
                          << b.summary << " (" << b.parameters << " parameters): set the model keys to the file's");
}

Frozen<nn::LanguageModel> frozen_policy(const std::string& path, Device device, const FrozenPlacement& where) {
  TRIAD_CHECK(!holds_value_model(path), "'" << path << "' holds a value model (a reward model or critic), not a "
                                            << "language model");
  std::shared_ptr<nn::LanguageModel> m =
      engine::load_model(path, parallel::layer_parallelism(where.tp, where.sequence_parallel)).model;
  return freeze(std::move(m), device, where);
}

Frozen<nn::ValueModel> frozen_value_model(const std::string& path, Device device, const FrozenPlacement& where) {
  TRIAD_CHECK(holds_value_model(path), "'" << path << "' holds a language model, not a reward model (it has no "
                                           << "v_head.weight; train one with triad-rlhf reward)");
  std::shared_ptr<nn::ValueModel> m =
      value_model(file_config(path), parallel::layer_parallelism(where.tp, where.sequence_parallel));
  engine::load_parameters(path, *m);
  return freeze(std::move(m), device, where);
}

}  // namespace triad::rlhf
