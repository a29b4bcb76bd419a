// The communicator of a single process: every collective over one rank is a copy or
// nothing. It lets the ZeRO machinery (mixed precision among it) run without MPI.
#pragma once

#include "parallel/communicator.h"

namespace triad::parallel {

class SelfCommunicator final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string name() const override { return "self"; }
  std::shared_ptr<Communicator> split(int color, int key) override;
  WorkPtr all_reduce(const Tensor& t, ReduceOp op) override;
  WorkPtr reduce_scatter(const Tensor& input, const Tensor& output, ReduceOp op) override;
  WorkPtr all_gather(const Tensor& input, const Tensor& output) override;
  WorkPtr all_to_all(const Tensor& input, const Tensor& output) override;
  WorkPtr all_to_allv(const Tensor& input, const std::vector<int64_t>& send_counts, const Tensor& output,
                      const std::vector<int64_t>& recv_counts) override;
  WorkPtr broadcast(const Tensor& t, int root) override;
  WorkPtr send(const Tensor& t, int dst, int tag) override;
  WorkPtr recv(const Tensor& t, int src, int tag) override;
  void barrier() override {}
};

}  // namespace triad::parallel
