#include "rlhf/ema_storage.h"

#include "rlhf/ema_swap_storage.h"
#include "tensor/ops.h"

namespace triad::rlhf {

namespace {

// The average in memory: on the training device, or in host memory (`home`).
class EmaInMemory : public EmaStorage {
 public:
  EmaInMemory(Device home, Device training) : home_(home), training_(training) {}

  void add(const std::vector<Slice>& initial) override {
    std::vector<Slice>& batch = batches_.emplace_back();
    for (const Slice& s : initial) {
      batch.push_back(
          {s.name, s.shape, s.first, s.values.device() == home_ ? ops::clone(s.values) : ops::to(s.values, home_)});
      bytes_ += batch.back().values.nbytes();
    }
  }
  size_t batches() const override { return batches_.size(); }
  Device device() const override { return home_; }
  std::vector<Slice> read(size_t k, bool) override { return batches_.at(k); }
  void write(size_t k, const std::vector<Slice>& values) override {
    TRIAD_ASSERT(values.size() == batches_.at(k).size());  // the average itself, written through
  }
  // On a CPU training device, host memory is the device's.
  zero::ResidentBytes memory() const override {
    return home_ == training_ ? zero::ResidentBytes{.param_bytes = bytes_} : zero::ResidentBytes{.host_bytes = bytes_};
  }

 private:
  Device home_, training_;
  std::vector<std::vector<Slice>> batches_;
  int64_t bytes_ = 0;
};

}  // namespace

std::unique_ptr<EmaStorage> make_ema_storage(const engine::Engine& actor) {
  const zero::ZeroConfig& z = actor.config().zero;
  if (z.offload_optimizer.device == zero::OffloadDevice::nvme)
    return std::make_unique<EmaSwapStorage>("zero_optimization.offload_optimizer.nvme_path",
                                            z.offload_optimizer.nvme_path, z.aio);
  if (z.offload_param.device == zero::OffloadDevice::nvme)
    return std::make_unique<EmaSwapStorage>("zero_optimization.offload_param.nvme_path", z.offload_param.nvme_path,
                                            z.aio);
  // A copy of the whole shard on the training device would undo what an offload to host
  // memory saves (in f32 training the master weights are the parameters).
  const bool host =
      z.offload_param.device == zero::OffloadDevice::cpu || z.offload_optimizer.device == zero::OffloadDevice::cpu;
  return std::make_unique<EmaInMemory>(host ? Device::cpu() : actor.device(), actor.device());
}

}  // namespace triad::rlhf
