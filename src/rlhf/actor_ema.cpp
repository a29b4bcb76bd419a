#include "rlhf/actor_ema.h"

#include <filesystem>

#include "checkpoint/checkpoint.h"
#include "checkpoint/checkpoint_dir.h"
#include "tensor/ops.h"

namespace triad::rlhf {

using State = zero::ZeroOptimizer::State;

ActorEma::ActorEma(engine::Engine& actor, double beta) : actor_(actor), beta_(beta) {
  TRIAD_CHECK(actor.zero() != nullptr, "enable_ema: the actor's optimizer must be AdamW or Adam (ZeRO's), not SGD");
  for (const zero::ZeroOptimizer::Slice& s : actor.zero()->state_view(State::master).owned_slices())
    average_.push_back({s.name, s.shape, s.first, ops::clone(s.values)});
}

void ActorEma::update() {
  // A view of the master weights as they are after the step (with offload, read back in).
  const std::vector<zero::ZeroOptimizer::Slice> master = actor_.zero()->state_view(State::master).owned_slices();
  for (size_t i = 0; i < master.size(); ++i) {
    ops::mul_(average_[i].values, beta_);
    ops::add_(average_[i].values, master[i].values, 1.0 - beta_);
  }
}

void ActorEma::save(const std::string& path, parallel::Communicator& world) const {
  engine::save_weight_slices(path, actor_, world, DType::f32, average_);
}

namespace {

// ema-step-N.h5: the average beside the actor's checkpoint step-N.h5.
std::string ema_file(int64_t step) { return "ema-" + engine::checkpoint_file_name(step); }

}  // namespace

void ActorEma::save_checkpoint(int64_t step, parallel::Communicator& world) const {
  const std::filesystem::path dir = actor_.config().checkpoint.dir;
  save((dir / ema_file(step)).string(), world);
  if (world.rank() != 0) return;
  // The averages of checkpoints that retention removed.
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("ema-step-", 0) == 0 && !std::filesystem::exists(dir / name.substr(4)))
      std::filesystem::remove(entry.path());
  }
}

void ActorEma::load_checkpoint(int64_t step, parallel::Communicator& world) {
  engine::load_weight_slices((std::filesystem::path(actor_.config().checkpoint.dir) / ema_file(step)).string(), actor_,
                             world, average_);
}

}  // namespace triad::rlhf
