#include "rlhf/actor_ema.h"

#include <filesystem>

#include "checkpoint/checkpoint.h"
#include "checkpoint/checkpoint_dir.h"
#include "tensor/ops.h"

namespace triad::rlhf {

using State = zero::ZeroOptimizer::State;

namespace {

// Calls f with the owned slices of the master weights, batch by batch (Note [Streamed
// checkpoints]): with offload, what is read in at once is one batch's.
template <class F>
void for_each_master_batch(zero::ZeroOptimizer& zero, F&& f) {
  for (const zero::ZeroOptimizer::ViewBatch& batch : zero.view_batches()) f(zero.state_view(State::master, batch).owned_slices());
}

}  // namespace

ActorEma::ActorEma(engine::Engine& actor, double beta) : actor_(actor), beta_(beta) {
  TRIAD_CHECK(actor.zero() != nullptr, "enable_ema: the actor's optimizer must be AdamW or Adam (ZeRO's), not SGD");
  const zero::ZeroConfig& z = actor.config().zero;
  const bool offloaded = z.offload_param.device != zero::OffloadDevice::none ||
                         z.offload_optimizer.device != zero::OffloadDevice::none;
  for_each_master_batch(*actor.zero(), [&](const std::vector<zero::ZeroOptimizer::Slice>& master) {
    for (const zero::ZeroOptimizer::Slice& s : master) {
      home_ = offloaded ? Device::cpu() : s.values.device();
      const Tensor copy = s.values.device() == home_ ? ops::clone(s.values) : ops::to(s.values, home_);
      average_.push_back({s.name, s.shape, s.first, copy});
    }
  });
}

void ActorEma::update() {
  // The master weights as they are after the step (with offload, read back in).
  size_t i = 0;
  for_each_master_batch(*actor_.zero(), [&](const std::vector<zero::ZeroOptimizer::Slice>& master) {
    for (const zero::ZeroOptimizer::Slice& s : master) {
      zero::ZeroOptimizer::Slice& a = average_.at(i++);
      TRIAD_ASSERT(a.name == s.name && a.first == s.first);
      ops::mul_(a.values, beta_);
      ops::add_(a.values, ops::to(s.values, home_), 1.0 - beta_);
    }
  });
  TRIAD_ASSERT(i == average_.size());
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
