#include "rlhf/gathered_stages.h"

#include <map>

#include "tensor/ops.h"

namespace triad::rlhf {

namespace {

// Points parameter `p` at its elements of `buffer` from `offset` (Note [Stages gathered whole]).
void view_into(const Tensor& p, const Tensor& buffer, int64_t offset) {
  TensorImpl& impl = p.impl();
  impl.storage = buffer.storage();
  impl.offset = buffer.offset() + offset;
  impl.dtype = buffer.dtype();
  impl.strides = contiguous_strides(impl.shape);
}

void drop_storage(const Tensor& p) {
  TensorImpl& impl = p.impl();
  impl.storage = nullptr;
  impl.offset = 0;
}

std::map<std::string, Tensor> stage_parameters(engine::Engine& engine) {
  std::map<std::string, Tensor> out;
  for (const auto& [name, p] : engine.model().named_parameters()) out.emplace(name, p);
  return out;
}

}  // namespace

GatheredStages::GatheredStages(engine::Engine& engine, nn::ModulePtr whole)
    : engine_(engine), whole_(std::move(whole)) {
  parallel::Communicator& pp = *engine_.pp();
  const std::map<std::string, Tensor> stage = stage_parameters(engine_);
  const auto params = whole_->named_parameters();
  // Per parameter: how many stages hold it (a tied copy not counted), and the sum of their ranks.
  std::vector<double> held(2 * params.size(), 0.0);
  size_t found = 0;
  for (size_t i = 0; i < params.size(); ++i) {
    const auto it = stage.find(params[i].first);
    if (it == stage.end()) continue;
    ++found;
    TRIAD_ASSERT_MSG(it->second.shape() == params[i].second.shape(),
                     "GatheredStages: " << params[i].first << " is " << shape_str(it->second.shape())
                                        << " in the stage, " << shape_str(params[i].second.shape()) << " whole");
    if (engine_.is_tied_copy(params[i].first)) continue;
    held[2 * i] = 1.0;
    held[2 * i + 1] = double(pp.rank());
  }
  TRIAD_ASSERT_MSG(found == stage.size(), "GatheredStages: the stage holds parameters the whole model does not");
  Tensor t = Tensor::from_vector(held, {int64_t(held.size())});
  pp.all_reduce(t)->wait();
  held = t.to_vector<double>();
  for (size_t i = 0; i < params.size(); ++i) {
    TRIAD_ASSERT_MSG(held[2 * i] == 1.0,
                     "GatheredStages: " << params[i].first << " is held by " << held[2 * i] << " pipeline stages");
    owner_.push_back(int(held[2 * i + 1]));
  }
  whole_->to(engine_.device());
  whole_->eval();
  release();
}

void GatheredStages::gather() {
  parallel::Communicator& pp = *engine_.pp();
  engine_.gather_parameters();  // ZeRO-3: each stage's own, over its data-parallel ranks
  const std::map<std::string, Tensor> stage = stage_parameters(engine_);
  const auto params = whole_->named_parameters();
  const DType dtype = engine_.config().precision.dtype;
  buffers_.assign(size_t(pp.size()), Tensor());
  for (int s = 0; s < pp.size(); ++s) {
    int64_t numel = 0;
    for (size_t i = 0; i < params.size(); ++i)
      if (owner_[i] == s) numel += params[i].second.numel();
    if (numel == 0) continue;
    Tensor& buffer = buffers_[size_t(s)];
    buffer = Tensor::empty({numel}, dtype, engine_.device());
    int64_t offset = 0;
    for (size_t i = 0; i < params.size(); ++i) {
      if (owner_[i] != s) continue;
      const Tensor& p = params[i].second;
      if (s == pp.rank())
        ops::copy_(ops::view(ops::narrow(buffer, 0, offset, p.numel()), p.shape()), stage.at(params[i].first));
      offset += p.numel();
    }
    pp.broadcast(buffer, s)->wait();
    offset = 0;
    for (size_t i = 0; i < params.size(); ++i)
      if (owner_[i] == s) {
        view_into(params[i].second, buffer, offset);
        offset += params[i].second.numel();
      }
  }
  engine_.release_parameters();
}

void GatheredStages::release() {
  for (const auto& [_, p] : whole_->named_parameters()) drop_storage(p);
  buffers_.clear();
}

}  // namespace triad::rlhf
