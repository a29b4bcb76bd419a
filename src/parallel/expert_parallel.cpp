#include "parallel/expert_parallel.h"

#include "autograd/record.h"
#include "tensor/ops.h"

namespace triad::parallel {

namespace ep_ops {

std::vector<int64_t> transpose_blocks_index(const std::vector<int64_t>& counts, size_t outer, size_t inner) {
  TRIAD_ASSERT(counts.size() == outer * inner);
  std::vector<int64_t> at(counts.size() + 1, 0);  // where block b starts in the input
  for (size_t b = 0; b < counts.size(); ++b) at[b + 1] = at[b] + counts[b];
  std::vector<int64_t> index;
  index.reserve(size_t(at.back()));
  for (size_t j = 0; j < inner; ++j)
    for (size_t i = 0; i < outer; ++i)
      for (int64_t r = at[i * inner + j]; r < at[i * inner + j + 1]; ++r) index.push_back(r);
  return index;
}

Tensor transpose_blocks(const Tensor& rows, const std::vector<int64_t>& counts, size_t outer, size_t inner) {
  if (outer == 1 || inner == 1) return rows;
  const std::vector<int64_t> index = transpose_blocks_index(counts, outer, inner);
  TRIAD_CHECK(rows.dim() == 2 && rows.size(0) == int64_t(index.size()),
              "transpose_blocks: expected rows (" << index.size() << ", d), got " << shape_str(rows.shape()));
  return ops::embedding(rows, ops::to(Tensor::from_vector(index, {int64_t(index.size())}), rows.device()));
}

Tensor to_experts(const Tensor& slots, Communicator& ep) {
  const int n = ep.size();
  TRIAD_CHECK(slots.dim() == 3 && slots.size(0) % n == 0,
              "to_experts: expected slots (E, C, d) with E divisible by the " << n << " expert-parallel ranks, got "
                                                                             << shape_str(slots.shape()));
  const int64_t local = slots.size(0) / n, C = slots.size(1), d = slots.size(2);
  const Tensor received = Tensor::empty({n * local * C, d}, slots.dtype(), slots.device());  // (n, E/n, C) by source
  ep.all_to_all(ops::contiguous(slots), received)->wait();
  const std::vector<int64_t> blocks(size_t(n * local), C);
  return ops::reshape(transpose_blocks(received, blocks, size_t(n), size_t(local)), {local, n * C, d});
}

Tensor from_experts(const Tensor& outputs, Communicator& ep) {
  const int n = ep.size();
  TRIAD_CHECK(outputs.dim() == 3 && outputs.size(1) % n == 0,
              "from_experts: expected outputs (E/ep, ep C, d) for " << n << " expert-parallel ranks, got "
                                                                    << shape_str(outputs.shape()));
  const int64_t local = outputs.size(0), C = outputs.size(1) / n, d = outputs.size(2);
  // (E/n, n, C) -> (n, E/n, C): the rows of each source rank's tokens contiguous.
  const std::vector<int64_t> blocks(size_t(n * local), C);
  const Tensor by_rank =
      transpose_blocks(ops::reshape(ops::contiguous(outputs), {local * n * C, d}), blocks, size_t(local), size_t(n));
  Tensor returned = Tensor::empty({n * local, C, d}, outputs.dtype(), outputs.device());
  ep.all_to_all(by_rank, returned)->wait();
  return returned;
}

namespace {

// The elements rank q's block of `counts` (ranks, E / ranks) holds, rows of d.
std::vector<int64_t> per_rank(const std::vector<int64_t>& counts, int ranks, int64_t d) {
  std::vector<int64_t> elements(size_t(ranks), 0);
  const size_t local = counts.size() / size_t(ranks);
  for (size_t i = 0; i < counts.size(); ++i) elements[i / local] += counts[i] * d;
  return elements;
}

int64_t total(const std::vector<int64_t>& counts) {
  int64_t sum = 0;
  for (const int64_t c : counts) sum += c;
  return sum;
}

}  // namespace

Tensor to_experts(const Tensor& rows, const nn::ExpertRows& counts, Communicator& ep) {
  const int n = ep.size();
  TRIAD_CHECK(rows.dim() == 2 && rows.size(0) == total(counts.sent) && counts.ranks == n,
              "to_experts: expected rows (" << total(counts.sent) << ", d) counted over " << n
                                            << " expert-parallel ranks, got " << shape_str(rows.shape())
                                            << " counted over " << counts.ranks);
  const int64_t d = rows.size(1);
  const Tensor received = Tensor::empty({total(counts.received), d}, rows.dtype(), rows.device());  // by source rank
  ep.all_to_allv(ops::contiguous(rows), per_rank(counts.sent, n, d), received, per_rank(counts.received, n, d))->wait();
  return transpose_blocks(received, counts.received, size_t(n), counts.received.size() / size_t(n));
}

Tensor from_experts(const Tensor& outputs, const nn::ExpertRows& counts, Communicator& ep) {
  const int n = ep.size();
  TRIAD_CHECK(outputs.dim() == 2 && outputs.size(0) == total(counts.received) && counts.ranks == n,
              "from_experts: expected outputs (" << total(counts.received) << ", d) counted over " << n
                                                 << " expert-parallel ranks, got " << shape_str(outputs.shape())
                                                 << " counted over " << counts.ranks);
  const size_t local = counts.received.size() / size_t(n);
  std::vector<int64_t> by_expert(counts.received.size());  // received's counts, expert-major
  for (size_t q = 0; q < size_t(n); ++q)
    for (size_t l = 0; l < local; ++l) by_expert[l * size_t(n) + q] = counts.received[q * local + l];
  const int64_t d = outputs.size(1);
  const Tensor by_rank = transpose_blocks(ops::contiguous(outputs), by_expert, local, size_t(n));
  const Tensor returned = Tensor::empty({total(counts.sent), d}, outputs.dtype(), outputs.device());
  ep.all_to_allv(by_rank, per_rank(counts.received, n, d), returned, per_rank(counts.sent, n, d))->wait();
  return returned;
}

}  // namespace ep_ops

ExpertParallel::ExpertParallel(CommunicatorPtr ep) : ep_(std::move(ep)) {
  TRIAD_CHECK(ep_ != nullptr, "ExpertParallel: no expert-parallel communicator");
}

nn::ExpertRows ExpertParallel::count_rows(const std::vector<int64_t>& sent, Device device) const {
  const int n = ep_->size();
  TRIAD_CHECK(!sent.empty() && sent.size() % size_t(n) == 0,
              "count_rows: expected a count per expert, a multiple of the " << n << " expert-parallel ranks, got "
                                                                            << sent.size());
  nn::ExpertRows counts{.ranks = n, .sent = sent, .received = sent};
  if (n == 1) return counts;
  const Tensor mine = ops::to(Tensor::from_vector(sent, {int64_t(sent.size())}), device);
  const Tensor theirs = Tensor::empty({int64_t(sent.size())}, DType::i64, device);  // by source rank
  ep_->all_to_all(mine, theirs)->wait();
  counts.received = theirs.to_vector<int64_t>();
  return counts;
}

Tensor ExpertParallel::to_experts(const Tensor& rows, const nn::ExpertRows& counts) const {
  if (ep_->size() == 1) return rows;
  return record("to_experts", {rows}, ep_ops::to_experts(rows, counts, *ep_), [ep = ep_, counts](const Grads& g) {
    return Grads{ep_ops::from_experts(ops::contiguous(g[0]), counts, *ep)};
  });
}

Tensor ExpertParallel::from_experts(const Tensor& outputs, const nn::ExpertRows& counts) const {
  if (ep_->size() == 1) return outputs;
  return record(
      "from_experts", {outputs}, ep_ops::from_experts(outputs, counts, *ep_),
      [ep = ep_, counts](const Grads& g) { return Grads{ep_ops::to_experts(ops::contiguous(g[0]), counts, *ep)}; });
}

Tensor ExpertParallel::to_experts(const Tensor& slots) const {
  if (ep_->size() == 1) return slots;
  return record("to_experts", {slots}, ep_ops::to_experts(slots, *ep_), [ep = ep_](const Grads& g) {
    return Grads{ep_ops::from_experts(ops::contiguous(g[0]), *ep)};
  });
}

Tensor ExpertParallel::from_experts(const Tensor& outputs) const {
  if (ep_->size() == 1) return outputs;
  return record("from_experts", {outputs}, ep_ops::from_experts(outputs, *ep_), [ep = ep_](const Grads& g) {
    return Grads{ep_ops::to_experts(ops::contiguous(g[0]), *ep)};
  });
}

}  // namespace triad::parallel
