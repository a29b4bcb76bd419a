#include <cuda_runtime.h>

#include <mutex>
#include <sstream>

#include "cuda/backend/cuda_backend.h"
#include "cuda/check.h"
#include "cuda/device_allocator.h"
#include "cuda/graph.h"
#include "cuda/runtime.h"
#include "cuda/staging.h"
#include "cuda/stream.h"
#include "cuda/transfer.h"

namespace triad::cuda {

bool built() { return true; }

int device_count() {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver) {
    cudaGetLastError();  // clear the sticky error state
    return 0;
  }
  TRIAD_CUDA_CHECK(e);
  return n;
}

std::string describe_devices() {
  std::ostringstream os;
  const int n = device_count();
  for (int i = 0; i < n; ++i) {
    cudaDeviceProp p{};
    TRIAD_CUDA_CHECK(cudaGetDeviceProperties(&p, i));
    os << "cuda:" << i << " " << p.name << ", " << double(p.totalGlobalMem) / double(1ull << 30) << " GiB, sm_"
       << p.major << p.minor << "\n";
  }
  return os.str();
}

DeviceProperties device_properties(int device) {
  const int n = device_count();
  TRIAD_CHECK(device >= 0 && device < n, "cuda:" << device << " requested, but " << n << " CUDA device"
                                                 << (n == 1 ? " is" : "s are") << " visible");
  cudaDeviceProp p{};
  TRIAD_CUDA_CHECK(cudaGetDeviceProperties(&p, device));
  return {p.name, p.major, p.minor, p.totalGlobalMem, p.multiProcessorCount};
}

void synchronize(int device) { synchronize_device(device); }

namespace {

// What the tensor layer asks of CUDA (tensor/device_runtime.h).
class CudaRuntime final : public DeviceRuntime {
 public:
  void install() override {
    std::call_once(once_, [] {
      const int n = device_count();
      for (int i = 0; i < n; ++i) register_allocator(DeviceType::cuda, &device_allocator(i));
      register_backend(DeviceType::cuda, &cuda_backend());
      parallel::register_device_staging(DeviceType::cuda, &host_staging());
    });
  }
  Tensor to_device(const Tensor& t, Device device) override { return cuda::to_device(t, device); }
  Tensor to_host(const Tensor& t) override { return cuda::to_host(t); }
  void copy_to_device(const Tensor& dst, const Tensor& src) override { cuda::copy_to_device(dst, src); }
  std::unique_ptr<DeviceGraph> record(Device device, const std::function<void()>& work) override {
    return record_graph(device.index, work);
  }

 private:
  std::once_flag once_;
};

}  // namespace

DeviceRuntime& runtime() {
  static CudaRuntime r;
  return r;
}

}  // namespace triad::cuda
