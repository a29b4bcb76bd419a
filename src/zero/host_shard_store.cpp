#include "zero/host_shard_store.h"

#include "tensor/ops.h"

namespace triad::zero {

HostShardStore::HostShardStore(Device device, DType dtype, bool pinned)
    : device_(device), dtype_(dtype), copies_(device, pinned) {}

HostShardStore::~HostShardStore() {
  for (Entry& e : entries_) {
    for (HostCopies::Copy* c : {&e.grad_in, &e.params_in, &e.out}) {
      try {
        wait(*c);
      } catch (const std::exception&) {
        // A destructor cannot report; the error is lost with the state.
      }
    }
  }
}

size_t HostShardStore::add(Tensor master, int64_t elements) {
  TRIAD_ASSERT(held_ < 0 && (!master.defined() || (master.numel() == elements && master.dtype() == DType::f32)));
  Entry e;
  // f32 training: the master buffer takes the parameters' copy at each step.
  e.state.master = copies_.host_zeros(elements, DType::f32);
  if (master.defined()) {
    HostCopies::Copy in = copies_.to_host(e.state.master, ops::contiguous(master));
    wait(in);
  }
  e.state.exp_avg = copies_.host_zeros(elements, DType::f32);
  e.state.exp_avg_sq = copies_.host_zeros(elements, DType::f32);
  e.state.grad = copies_.host_zeros(elements, DType::f32);
  if (dtype_ != DType::f32) e.state.params = copies_.host_zeros(elements, dtype_);
  entries_.push_back(std::move(e));
  return entries_.size() - 1;
}

void HostShardStore::keep_params_in(size_t entry, const Tensor& host) {
  Entry& e = entries_.at(entry);
  TRIAD_ASSERT(held_ < 0 && !e.staged && host.device().is_cpu() && host.dim() == 1 && host.is_contiguous() &&
               host.dtype() == dtype_ && host.numel() == e.state.grad.numel());
  finish_out();
  // f32 training: the parameters are the master weights.
  (dtype_ == DType::f32 ? e.state.master : e.state.params) = host;
  e.in_place = true;
}

void HostShardStore::stage(size_t entry, const Tensor& grad, const Tensor& params) {
  Entry& e = entries_.at(entry);
  TRIAD_ASSERT(held_ < 0 && grad.dtype() == DType::f32 && grad.numel() == e.state.grad.numel() &&
               params.defined() != e.in_place &&
               (e.in_place || (params.dtype() == dtype_ && params.numel() == grad.numel())));
  wait(e.out);  // last step's copy of this entry's new parameters reads what comes in now
  e.target = params;
  e.staged = true;
  e.grad_in = copies_.to_host(e.state.grad, grad);
  if (dtype_ == DType::f32 && !e.in_place) e.params_in = copies_.to_host(e.state.master, params);
}

const ShardState& HostShardStore::acquire(size_t entry) {
  TRIAD_ASSERT(held_ < 0);
  Entry& e = entries_.at(entry);
  TRIAD_ASSERT(e.staged);
  wait(e.grad_in);
  wait(e.params_in);
  wait(e.out);
  held_ = int64_t(entry);
  return e.state;
}

void HostShardStore::release(size_t entry, bool dirty) {
  TRIAD_ASSERT(held_ == int64_t(entry));
  held_ = -1;
  Entry& e = entries_[entry];
  if (dirty && !e.in_place) e.out = copies_.to_device(e.target, dtype_ == DType::f32 ? e.state.master : e.state.params);
  e.target = Tensor();
  e.staged = false;
}

void HostShardStore::finish_update() {
  for (Entry& e : entries_)
    if (e.out) e.out->order_current();
}

void HostShardStore::finish_out() {
  for (Entry& e : entries_) wait(e.out);
}

Tensor HostShardStore::read_part(size_t entry, ShardPart part) {
  TRIAD_ASSERT(held_ < 0 && (part != ShardPart::master || dtype_ != DType::f32));
  finish_out();
  return part_of(entries_.at(entry).state, part);
}

void HostShardStore::write_part(size_t entry, ShardPart part, const Tensor& values) {
  TRIAD_ASSERT(held_ < 0 && (part != ShardPart::master || dtype_ != DType::f32));
  finish_out();
  const Tensor& stored = part_of(entries_.at(entry).state, part);
  if (!values.is_same(stored)) ops::copy_(stored, ops::to(values, Device::cpu()));
}

int64_t HostShardStore::bytes() const {
  int64_t total = 0;
  for (const Entry& e : entries_) {
    const Tensor* kept = !e.in_place ? nullptr : dtype_ == DType::f32 ? &e.state.master : &e.state.params;
    for (const Tensor* t : {&e.state.master, &e.state.exp_avg, &e.state.exp_avg_sq, &e.state.grad, &e.state.params})
      if (t->defined() && t != kept) total += t->numel() * int64_t(element_size(t->dtype()));  // (kept: the caller's)
  }
  return total;
}

}  // namespace triad::zero
