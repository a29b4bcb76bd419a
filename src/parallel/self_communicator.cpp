#include "parallel/self_communicator.h"

#include "tensor/ops.h"

namespace triad::parallel {

namespace {

struct Done final : Work {
  void wait() override {}
  bool test() override { return true; }
};

WorkPtr copy(const Tensor& input, const Tensor& output, const char* op) {
  TRIAD_CHECK(input.numel() == output.numel() && input.dtype() == output.dtype(),
              op << ": input " << input.str() << " and output " << output.str() << " differ on one rank");
  if (input.raw_data() != output.raw_data()) ops::copy_(ops::view(output, input.shape()), input);
  return std::make_unique<Done>();
}

}  // namespace

std::shared_ptr<Communicator> SelfCommunicator::split(int, int) { return std::make_shared<SelfCommunicator>(); }
WorkPtr SelfCommunicator::all_reduce(const Tensor&, ReduceOp) { return std::make_unique<Done>(); }
WorkPtr SelfCommunicator::reduce_scatter(const Tensor& in, const Tensor& out, ReduceOp) {
  return copy(in, out, "reduce_scatter");
}
WorkPtr SelfCommunicator::all_gather(const Tensor& in, const Tensor& out) { return copy(in, out, "all_gather"); }
WorkPtr SelfCommunicator::all_to_all(const Tensor& in, const Tensor& out) { return copy(in, out, "all_to_all"); }
WorkPtr SelfCommunicator::all_to_allv(const Tensor& in, const std::vector<int64_t>& send_counts, const Tensor& out,
                                      const std::vector<int64_t>& recv_counts) {
  TRIAD_CHECK(send_counts.size() == 1 && recv_counts == send_counts && send_counts[0] == in.numel(),
              "all_to_allv: on one rank the one send count and receive count must both be the input's " << in.numel()
                                                                                                        << " elements");
  return copy(in, out, "all_to_allv");
}
WorkPtr SelfCommunicator::broadcast(const Tensor&, int root) {
  TRIAD_CHECK(root == 0, "broadcast: root " << root << " on a communicator of one rank");
  return std::make_unique<Done>();
}
WorkPtr SelfCommunicator::send(const Tensor&, int dst, int) {
  throw Error("send to rank " + std::to_string(dst) + " on a communicator of one rank");
}
WorkPtr SelfCommunicator::recv(const Tensor&, int src, int) {
  throw Error("recv from rank " + std::to_string(src) + " on a communicator of one rank");
}

}  // namespace triad::parallel
