#include "rlhf/actor_ema.h"

#include <filesystem>

#include "checkpoint/checkpoint.h"
#include "checkpoint/checkpoint_dir.h"
#include "tensor/ops.h"

namespace triad::rlhf {

using State = zero::ZeroOptimizer::State;
using Slice = zero::ZeroOptimizer::Slice;

ActorEma::ActorEma(engine::Engine& actor, double beta) : actor_(actor), beta_(beta) {
  TRIAD_CHECK(actor.zero() != nullptr, "enable_ema: the actor's optimizer must be AdamW or Adam (ZeRO's), not SGD");
  storage_ = make_ema_storage(actor);
  for (const zero::ZeroOptimizer::ViewBatch& batch : actor.zero()->view_batches())
    storage_->add(actor.zero()->state_view(State::master, batch).owned_slices());
}

ActorEma::~ActorEma() = default;

void ActorEma::update(parallel::Communicator& world) {
  if (!storage_->reads_back()) return average();
  std::string error;
  try {
    average();
  } catch (const std::exception& e) {
    error = e.what();
  }
  engine::throw_if_any(error, world);
}

void ActorEma::average() {
  // The master weights as they are after the step, a view batch at a time (with offload,
  // read back in), the next batch's average read ahead while this one's is updated.
  zero::ZeroOptimizer& zero = *actor_.zero();
  const std::vector<zero::ZeroOptimizer::ViewBatch> batches = zero.view_batches();
  TRIAD_ASSERT(batches.size() == storage_->batches());
  const Device home = storage_->device();
  for (size_t k = 0; k < batches.size(); ++k) {
    const std::vector<Slice> average = storage_->read(k);
    if (k + 1 < batches.size()) storage_->prefetch(k + 1);
    const std::vector<Slice> master = zero.state_view(State::master, batches[k]).owned_slices();
    TRIAD_ASSERT(average.size() == master.size());
    for (size_t i = 0; i < master.size(); ++i) {
      const Slice &a = average[i], &s = master[i];
      TRIAD_ASSERT(a.name == s.name && a.first == s.first);
      ops::mul_(a.values, beta_);
      ops::add_(a.values, ops::to(s.values, home), 1.0 - beta_);
    }
    storage_->write(k, average);
  }
  storage_->finish();
}

void ActorEma::save(const std::string& path, parallel::Communicator& world) const {
  engine::save_weight_batches(path, actor_, world, DType::f32, [&](size_t k) {
    return k < storage_->batches() ? storage_->read(k) : std::vector<Slice>{};
  });
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
  // Batch k is read into tensors of its layout and kept once it is whole.
  std::vector<Slice> batch;
  engine::load_weight_batches(
      (std::filesystem::path(actor_.config().checkpoint.dir) / ema_file(step)).string(), actor_, world,
      [&](size_t k) {
        batch = k < storage_->batches() ? storage_->read(k, /*current=*/false) : std::vector<Slice>{};
        return batch;
      },
      [&](size_t k) {
        if (k < storage_->batches()) storage_->write(k, batch);
        batch.clear();
      });
  storage_->finish();
}

zero::ResidentBytes ActorEma::memory() const { return storage_->memory(); }

}  // namespace triad::rlhf
