// Staging copies for host-memory collectives (see the header). Copies to the host run on
// the communication stream after an event of the caller's current stream, and the host
// waits for them; copies back are queued there and tracked by an event. Every buffer a
// queued copy still uses is declared to its allocator (record_stream, record_pinned_use),
// so dropping the tensors early never lets other work reuse the bytes mid-copy.
#include <memory>

#include "cuda/check.h"
#include "cuda/deferred_errors.h"
#include "cuda/device_allocator.h"
#include "cuda/pinned.h"
#include "cuda/staging.h"
#include "cuda/stream.h"

namespace triad::cuda {

namespace {

void check_pair(const char* op, const Tensor& host, const Tensor& device) {
  TRIAD_ASSERT_MSG(host.device().is_cpu() && device.device().is_cuda() && host.is_contiguous() &&
                       device.is_contiguous() && host.dtype() == device.dtype() && host.numel() == device.numel(),
                   op << ": " << host.str() << " and " << device.str());
}

class CudaCopy final : public parallel::DeviceCopy {
 public:
  explicit CudaCopy(int device) : done_(device) {}
  Event& event() { return done_; }

  bool done() override { return done_.query(); }
  void order_current() override { done_.block(current_stream(done_.device())); }
  void wait() override {
    done_.synchronize();
    raise_deferred_errors(done_.device());
  }

 private:
  Event done_;
};

class CudaStaging final : public parallel::DeviceStaging {
 public:
  Tensor host_buffer(int64_t numel, DType dtype) override { return pinned_empty({numel}, dtype); }

  void order_after_current(Device device) override {
    DeviceGuard guard(device.index);
    wait_stream(comm_stream(device.index), current_stream(device.index));
  }

  void to_host(const Tensor& dst, const Tensor& src) override {
    check_pair("to_host", dst, src);
    if (src.nbytes() == 0) return;
    const int device = src.device().index;
    DeviceGuard guard(device);
    const StreamHandle stream = comm_stream(device);
    TRIAD_CUDA_CHECK(cudaMemcpyAsync(dst.raw_data(), src.raw_data(), src.nbytes(), cudaMemcpyDeviceToHost, stream));
    Event copied(device);
    copied.record(stream);
    copied.synchronize();
    raise_deferred_errors(device);
  }

  std::unique_ptr<parallel::DeviceCopy> to_host_async(const Tensor& dst, const Tensor& src) override {
    check_pair("to_host_async", dst, src);
    const int device = src.device().index;
    DeviceGuard guard(device);
    const StreamHandle stream = comm_stream(device);
    auto copy = std::make_unique<CudaCopy>(device);
    if (src.nbytes() > 0) {
      TRIAD_CUDA_CHECK(cudaMemcpyAsync(dst.raw_data(), src.raw_data(), src.nbytes(), cudaMemcpyDeviceToHost, stream));
      record_stream(src, stream);
    }
    copy->event().record(stream);
    return copy;
  }

  std::unique_ptr<parallel::DeviceCopy> to_device(const Tensor& dst, const Tensor& src) override {
    check_pair("to_device", src, dst);
    const int device = dst.device().index;
    DeviceGuard guard(device);
    const StreamHandle stream = comm_stream(device);
    auto copy = std::make_unique<CudaCopy>(device);
    if (dst.nbytes() > 0) {
      TRIAD_CUDA_CHECK(cudaMemcpyAsync(dst.raw_data(), src.raw_data(), dst.nbytes(), cudaMemcpyHostToDevice, stream));
      record_stream(dst, stream);
      record_pinned_use(src.storage()->data(), stream);
    }
    copy->event().record(stream);
    return copy;
  }
};

}  // namespace

parallel::DeviceStaging& host_staging() {
  static CudaStaging* staging = new CudaStaging;  // never destroyed, as the allocators it uses
  return *staging;
}

}  // namespace triad::cuda
