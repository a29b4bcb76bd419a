#include "zero/flat_group.h"

#include <algorithm>

#include "autograd/meta.h"
#include "tensor/ops.h"
#include "zero/quantized_collectives.h"

namespace triad::zero {

namespace {

// Points `t` at `length` elements of `flat` from `offset`, keeping its shape.
void repoint(const Tensor& t, const Tensor& flat, int64_t offset) {
  TensorImpl& impl = t.impl();
  impl.storage = flat.storage();
  impl.offset = flat.offset() + offset;
  impl.strides = contiguous_strides(impl.shape);
}

// A released stage-3 parameter: its shape stays, its storage is gone until the next gather.
void unpoint(const Tensor& t) {
  TensorImpl& impl = t.impl();
  impl.storage = nullptr;
  impl.offset = 0;
}

}  // namespace

FlatGroup::FlatGroup(std::vector<std::pair<std::string, Tensor>> params, double weight_decay, int ranks, int rank,
                     DType dtype)
    : params_(std::move(params)), weight_decay_(weight_decay), ranks_(ranks), rank_(rank), dtype_(dtype) {
  TRIAD_CHECK(!params_.empty(), "ZeRO: a flat group needs at least one parameter");
  device_ = params_.front().second.device();
  for (const auto& [name, p] : params_) {
    TRIAD_CHECK(p.dtype() == DType::f32 && p.device() == device_,
                "ZeRO: parameter " << name << " is " << p.str() << "; a flat group holds f32 parameters on one device ("
                                   << device_.str() << ")");
    offsets_.push_back(numel_);
    numel_ += p.numel();
  }
  padded_ = padded_size(numel_, ranks);
  initial_f32_ = Tensor::zeros({padded_}, DType::f32, device_);
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor& p = params_[i].second;
    ops::copy_(ops::view(ops::narrow(initial_f32_, 0, offsets_[i], p.numel()), p.shape()), p);
  }
  flat_ = dtype_ == DType::f32 ? initial_f32_ : ops::to(initial_f32_, dtype_);
  for (size_t i = 0; i < params_.size(); ++i) {
    params_[i].second.impl().dtype = dtype_;
    repoint(params_[i].second, flat_, offsets_[i]);
  }
}

Tensor FlatGroup::shard(const Tensor& full) const {
  return ops::narrow(full, 0, int64_t(rank_) * shard_size(), shard_size());
}

std::vector<FlatGroup::Piece> FlatGroup::pieces(int64_t begin, int64_t end) const {
  std::vector<Piece> out;
  for (size_t i = 0; i < params_.size(); ++i) {
    const int64_t lo = std::max(begin, offsets_[i]), hi = std::min(end, offsets_[i] + params_[i].second.numel());
    if (lo < hi) out.push_back({i, lo - offsets_[i], hi - lo, lo});
  }
  return out;
}

const Tensor& FlatGroup::grad() {
  if (!grad_.defined()) {
    grad_ = Tensor::zeros({padded_}, dtype_, device_);
    for (size_t i = 0; i < params_.size(); ++i) {
      const Tensor& p = params_[i].second;
      set_grad(p, ops::view(ops::narrow(grad_, 0, offsets_[i], p.numel()), p.shape()));
    }
  }
  return grad_;
}

void FlatGroup::release_grad() {
  for (const auto& [_, p] : params_) set_grad(p, Tensor());
  grad_ = Tensor();
}

void FlatGroup::partition() {
  owned_shard_ = ops::clone(shard(flat_));
  initial_f32_ = Tensor();
  partitioned_ = true;
  release();
}

std::unique_ptr<parallel::Work> FlatGroup::start_gather(parallel::Communicator& comm) {
  TRIAD_ASSERT(partitioned_ && !flat_.defined() && owned_shard_.defined());
  flat_ = Tensor::empty({padded_}, dtype_, device_);
  return comm.all_gather(owned_shard_, flat_);
}

std::unique_ptr<parallel::Work> FlatGroup::start_quantized_gather(parallel::Communicator& comm, int64_t block) {
  TRIAD_ASSERT(partitioned_ && !flat_.defined() && owned_shard_.defined());
  flat_ = Tensor::empty({padded_}, dtype_, device_);
  return quantized_all_gather(comm, owned_shard_, flat_, block);
}

void FlatGroup::keep_secondary(int rank, int ranks) {
  TRIAD_ASSERT(flat_.defined() && padded_ % ranks == 0);
  secondary_ = ops::clone(ops::narrow(flat_, 0, int64_t(rank) * (padded_ / ranks), padded_ / ranks));
}

std::unique_ptr<parallel::Work> FlatGroup::start_secondary_gather(parallel::Communicator& hpz) {
  TRIAD_ASSERT(partitioned_ && !flat_.defined() && secondary_.defined());
  flat_ = Tensor::empty({padded_}, dtype_, device_);
  return hpz.all_gather(secondary_, flat_);
}

void FlatGroup::finish_gather() {
  for (size_t i = 0; i < params_.size(); ++i) repoint(params_[i].second, flat_, offsets_[i]);
}

void FlatGroup::release() {
  for (const auto& [_, p] : params_) unpoint(p);
  flat_ = Tensor();
}

}  // namespace triad::zero
