#include "zero/buckets.h"

#include <algorithm>
#include <functional>
#include <vector>

#include "tensor/ops.h"

namespace triad::zero {

namespace {

// Several collectives in flight as one operation; each piece's completion step (copying an
// all-gather's staging out) runs once that piece has completed, in issue order.
class BucketWork final : public parallel::Work {
 public:
  struct Piece {
    parallel::WorkPtr work;
    std::function<void()> done;  // may be empty
    Tensor staging;              // kept alive while the piece is in flight
  };

  void add(Piece piece) { pieces_.push_back(std::move(piece)); }

  void wait() override {
    for (; next_ < pieces_.size(); ++next_) {
      pieces_[next_].work->wait();
      finish(pieces_[next_]);
    }
  }

  bool test() override {
    for (; next_ < pieces_.size(); ++next_) {
      if (!pieces_[next_].work->test()) return false;
      finish(pieces_[next_]);
    }
    return true;
  }

 private:
  static void finish(Piece& p) {
    if (p.done) p.done();
    p.staging = Tensor();
  }

  std::vector<Piece> pieces_;
  size_t next_ = 0;  // pieces before this one have completed
};

// Elements of each rank's shard per piece of a reduce-scatter or all-gather.
int64_t shard_piece_size(int64_t bucket, int ranks) {
  TRIAD_CHECK(bucket > 0, "bucket size must be positive, got " << bucket);
  return std::max<int64_t>(1, bucket / ranks);
}

// Rank r's part of a piece: [r S + first, r S + first + length) of a shard-laid-out buffer.
Tensor piece_of_shard(const Tensor& flat, int64_t shard, int r, int64_t first, int64_t length) {
  return ops::narrow(flat, 0, int64_t(r) * shard + first, length);
}

}  // namespace

parallel::WorkPtr bucketed_all_reduce(parallel::Communicator& comm, const Tensor& flat, int64_t bucket) {
  TRIAD_CHECK(bucket > 0, "bucket size must be positive, got " << bucket);
  const int64_t total = flat.numel();
  if (total <= bucket) return comm.all_reduce(flat);
  auto work = std::make_unique<BucketWork>();
  for (int64_t first = 0; first < total; first += bucket)
    work->add({comm.all_reduce(ops::narrow(flat, 0, first, std::min(bucket, total - first))), {}, Tensor()});
  return work;
}

parallel::WorkPtr bucketed_reduce_scatter(parallel::Communicator& comm, const Tensor& input, const Tensor& output,
                                          int64_t bucket) {
  const int n = comm.size();
  const int64_t shard = output.numel();
  if (input.numel() <= bucket) return comm.reduce_scatter(input, output);
  const int64_t piece = shard_piece_size(bucket, n);
  auto work = std::make_unique<BucketWork>();
  for (int64_t first = 0; first < shard; first += piece) {
    const int64_t length = std::min(piece, shard - first);
    Tensor staging = Tensor::empty({n * length}, input.dtype(), input.device());
    for (int r = 0; r < n; ++r)
      ops::copy_(ops::narrow(staging, 0, r * length, length), piece_of_shard(input, shard, r, first, length));
    work->add({comm.reduce_scatter(staging, ops::narrow(output, 0, first, length)), {}, staging});
  }
  return work;
}

parallel::WorkPtr bucketed_all_gather(parallel::Communicator& comm, const Tensor& input, const Tensor& output,
                                      int64_t bucket) {
  const int n = comm.size();
  const int64_t shard = input.numel();
  if (output.numel() <= bucket) return comm.all_gather(input, output);
  const int64_t piece = shard_piece_size(bucket, n);
  auto work = std::make_unique<BucketWork>();
  for (int64_t first = 0; first < shard; first += piece) {
    const int64_t length = std::min(piece, shard - first);
    Tensor staging = Tensor::empty({n * length}, output.dtype(), output.device());
    auto scatter_out = [=] {
      for (int r = 0; r < n; ++r)
        ops::copy_(piece_of_shard(output, shard, r, first, length), ops::narrow(staging, 0, r * length, length));
    };
    work->add({comm.all_gather(ops::narrow(input, 0, first, length), staging), scatter_out, staging});
  }
  return work;
}

}  // namespace triad::zero
