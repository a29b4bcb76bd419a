#include "zero/flat_group.h"

#include "autograd/meta.h"
#include "tensor/ops.h"

namespace triad::zero {

namespace {

// Points `t` at `length` elements of `flat` from `offset`, keeping its shape.
void repoint(const Tensor& t, const Tensor& flat, int64_t offset) {
  TensorImpl& impl = t.impl();
  impl.storage = flat.storage();
  impl.offset = flat.offset() + offset;
  impl.strides = contiguous_strides(impl.shape);
}

}  // namespace

FlatGroup::FlatGroup(std::vector<std::pair<std::string, Tensor>> params, double weight_decay, int ranks, int rank)
    : params_(std::move(params)), weight_decay_(weight_decay), ranks_(ranks), rank_(rank) {
  for (const auto& [name, p] : params_) {
    TRIAD_CHECK(p.dtype() == DType::f32 && p.device().is_cpu(),
                "ZeRO: parameter " << name << " is " << p.str() << "; flat groups hold f32 cpu parameters");
    offsets_.push_back(numel_);
    numel_ += p.numel();
  }
  padded_ = (numel_ + ranks - 1) / ranks * ranks;
  flat_ = Tensor::zeros({padded_});
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor& p = params_[i].second;
    ops::copy_(ops::view(ops::narrow(flat_, 0, offsets_[i], p.numel()), p.shape()), p);
    repoint(p, flat_, offsets_[i]);
  }
}

Tensor FlatGroup::shard(const Tensor& full) const {
  return ops::narrow(full, 0, int64_t(rank_) * shard_size(), shard_size());
}

const Tensor& FlatGroup::grad() {
  if (!grad_.defined()) {
    grad_ = Tensor::zeros({padded_});
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

}  // namespace triad::zero
