// The default Communicator::send_recv: the two calls, and one Work that completes both.
#include "parallel/communicator.h"

#include <utility>

namespace triad::parallel {

namespace {

class BothWork final : public Work {
 public:
  BothWork(WorkPtr first, WorkPtr second) : first_(std::move(first)), second_(std::move(second)) {}

  void wait() override {
    first_->wait();
    second_->wait();
  }

  bool test() override {
    const bool first = first_->test();  // both tested: each drives its own progress
    const bool second = second_->test();
    return first && second;
  }

 private:
  WorkPtr first_, second_;
};

}  // namespace

WorkPtr Communicator::send_recv(const Tensor& send, int dst, int send_tag, const Tensor& recv, int src,
                                int recv_tag) {
  WorkPtr in = this->recv(recv, src, recv_tag);  // posted first, as a blocking transport needs in a ring
  WorkPtr out = this->send(send, dst, send_tag);
  return std::make_unique<BothWork>(std::move(in), std::move(out));
}

}  // namespace triad::parallel
