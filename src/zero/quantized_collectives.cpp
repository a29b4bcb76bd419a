// quantized_all_gather and HierarchicalReducer (zero/quantized_collectives.h).
#include "zero/quantized_collectives.h"

#include <algorithm>
#include <deque>

#include "tensor/ops.h"

namespace triad::zero {

namespace {

using parallel::WorkPtr;

// k equal chunks of x, each quantized on its own (blocks never span two chunks, so each
// chunk travels with its own scales), flattened for the collectives: q k·bytes(per) and
// scales k·blocks(per).
Quantized quantize_chunks(const Tensor& x, int64_t k, const QuantFormat& format) {
  const Quantized rows = ops::quantize_blocks(ops::view(x, {k, x.numel() / k}), format);
  return {.q = ops::view(rows.q, {rows.q.numel()}), .scales = ops::view(rows.scales, {rows.scales.numel()}),
          .offsets = {}};  // symmetric: no offsets
}

// The k chunks of flat q and scales as quantize_blocks' rows of `per` elements.
Tensor rows_of(const Tensor& flat, int64_t k) { return ops::view(flat, {k, flat.numel() / k}); }

// The all-gather's data and scales in flight; the dequantization once both have arrived.
class GatherWork final : public parallel::Work {
 public:
  GatherWork(parallel::Communicator& comm, const Tensor& input, const Tensor& output, int64_t block)
      : output_(output), format_{8, block}, ranks_(comm.size()) {
    sent_ = quantize_chunks(input, 1, format_);  // held until the gathers are done
    q_ = Tensor::empty({ranks_ * sent_.q.numel()}, DType::i8, input.device());
    scales_ = Tensor::empty({ranks_ * sent_.scales.numel()}, DType::f32, input.device());
    data_ = comm.all_gather(sent_.q, q_);
    scale_work_ = comm.all_gather(sent_.scales, scales_);
  }
  void wait() override {
    data_->wait();
    scale_work_->wait();
    finish();
  }
  bool test() override {
    const bool data = data_->test(), scales = scale_work_->test();
    if (data && scales) finish();
    return data && scales;
  }

 private:
  void finish() {
    if (done_) return;
    ops::dequantize_blocks(rows_of(q_, ranks_), rows_of(scales_, ranks_), rows_of(output_, ranks_), format_);
    sent_ = {};
    done_ = true;
  }
  Tensor output_, q_, scales_;
  Quantized sent_;
  QuantFormat format_;
  int64_t ranks_;
  WorkPtr data_, scale_work_;
  bool done_ = false;
};

// One all-to-all hop of int4 chunks and their scales over `comm`, summed in f32 on arrival.
struct Hop {
  WorkPtr data, scales;
  Quantized sent, received;
  int64_t per = 0;  // elements per chunk
  int ranks = 1;
  void post(parallel::Communicator& comm, const Tensor& x, int64_t block) {
    ranks = comm.size();
    per = x.numel() / ranks;
    sent = quantize_chunks(x, ranks, {4, block});
    received = {.q = Tensor::empty(sent.q.shape(), DType::i8, sent.q.device()),
                .scales = Tensor::empty(sent.scales.shape(), DType::f32, sent.q.device()),
                .offsets = {}};
    data = comm.all_to_all(sent.q, received.q);
    scales = comm.all_to_all(sent.scales, received.scales);
  }
  bool test() {
    const bool d = data->test(), s = scales->test();
    return d && s;
  }
  void wait() {
    data->wait();
    scales->wait();
  }
  Tensor sum(int64_t block) {  // f32, per elements
    Tensor out = Tensor::empty({per}, DType::f32, sent.q.device());
    ops::dequantize_reduce(rows_of(received.q, ranks), rows_of(received.scales, ranks), out, {4, block});
    sent = received = {};
    return out;
  }
};

class ReduceScatterWork;

}  // namespace

struct HierarchicalReducer::Queue {
  std::deque<ReduceScatterWork*> waiting;
};

namespace {

class ReduceScatterWork final : public parallel::Work {
 public:
  ReduceScatterWork(parallel::Communicator& intra, parallel::CommunicatorPtr inter, const std::vector<int>& node_order,
                    const Tensor& input, const Tensor& output, int64_t block,
                    std::shared_ptr<HierarchicalReducer::Queue> queue)
      : inter_(std::move(inter)), output_(output), block_(block), queue_(std::move(queue)) {
    const int local = intra.size(), nodes = inter_->size();
    const int64_t shard = output.numel();
    // The shards in hop one's order: for each local position l', those of the ranks there on
    // every node, node by node.
    Tensor ordered = Tensor::empty({input.numel()}, input.dtype(), input.device());
    for (int l = 0; l < local; ++l)
      for (int a = 0; a < nodes; ++a)
        ops::copy_(ops::narrow(ordered, 0, (int64_t(l) * nodes + a) * shard, shard),
                   ops::narrow(input, 0, int64_t(node_order[size_t(a * local + l)]) * shard, shard));
    if (local > 1)
      one_.post(intra, ordered, block);
    else
      partial_ = ops::to(ordered, DType::f32);
    queue_->waiting.push_back(this);
  }
  ReduceScatterWork(const ReduceScatterWork&) = delete;
  ~ReduceScatterWork() override { std::erase(queue_->waiting, this); }

  void wait() override {
    while (!two_posted_) queue_->waiting.front()->advance(/*block=*/true);  // earlier calls first
    if (inter_->size() > 1) two_.wait();
    finish();
  }
  bool test() override {
    while (!queue_->waiting.empty() && queue_->waiting.front()->advance(/*block=*/false)) {
    }
    if (!two_posted_ || (inter_->size() > 1 && !two_.test())) return false;
    finish();
    return true;
  }

 private:
  // Posts hop two once hop one is done (waiting for it when `block`); true when posted.
  // Called on the queue's head only.
  bool advance(bool block) {
    if (!partial_.defined()) {
      if (!block && !one_.test()) return false;
      one_.wait();
      partial_ = one_.sum(block_);
    }
    if (inter_->size() > 1) two_.post(*inter_, partial_, block_);
    two_posted_ = true;
    queue_->waiting.pop_front();
    return true;
  }
  void finish() {
    if (done_) return;
    ops::copy_(output_, inter_->size() > 1 ? two_.sum(block_) : partial_);
    partial_ = Tensor();
    done_ = true;
  }

  parallel::CommunicatorPtr inter_;
  Tensor output_, partial_;
  int64_t block_;
  std::shared_ptr<HierarchicalReducer::Queue> queue_;
  Hop one_, two_;
  bool two_posted_ = false, done_ = false;
};

}  // namespace

std::unique_ptr<parallel::Work> quantized_all_gather(parallel::Communicator& comm, const Tensor& input,
                                                     const Tensor& output, int64_t block) {
  TRIAD_CHECK(output.numel() == int64_t(comm.size()) * input.numel() && input.dtype() == output.dtype(),
              "quantized_all_gather: output " << output.str() << " is not size() x input " << input.str());
  return std::make_unique<GatherWork>(comm, input, output, block);
}

HierarchicalReducer::HierarchicalReducer(parallel::CommunicatorPtr intra, parallel::CommunicatorPtr inter,
                                         std::vector<int> node_order, int64_t block)
    : intra_(std::move(intra)),
      inter_(std::move(inter)),
      node_order_(std::move(node_order)),
      block_(block),
      queue_(std::make_shared<Queue>()) {
  TRIAD_CHECK(intra_ && inter_ && int64_t(node_order_.size()) == int64_t(intra_->size()) * inter_->size(),
              "HierarchicalReducer: " << node_order_.size() << " ranks in the node order for nodes of "
                                      << (intra_ ? intra_->size() : 0) << " ranks");
}

std::unique_ptr<parallel::Work> HierarchicalReducer::reduce_scatter(const Tensor& input, const Tensor& output) {
  const int64_t n = int64_t(node_order_.size());
  TRIAD_CHECK(input.numel() == n * output.numel() && input.dtype() == output.dtype(),
              "qgZ reduce_scatter: input " << input.str() << " is not " << n << " x output " << output.str());
  return std::make_unique<ReduceScatterWork>(*intra_, inter_, node_order_, input, output, block_, queue_);
}

}  // namespace triad::zero
