// Note [Deferred device errors] (deferred_errors.h). One claim flag (device memory) and one
// record (mapped pinned host memory) per device, created under a lock on first use and never
// freed, as the streams are.
#include <array>
#include <mutex>
#include <new>

#include "cuda/check.h"
#include "cuda/deferred_errors.h"
#include "cuda/runtime.h"
#include "cuda/stream.h"
#include "tensor/error.h"

namespace triad::cuda {

namespace {

struct DeviceRecord {
  BadIndexSink sink{};             // the device's view
  BadIndexRecord* host = nullptr;  // the host's view of the same record
};

std::mutex g_mutex;
std::array<DeviceRecord, kMaxDevices> g_records{};

const char* op_name(int op) {
  switch (IndexOp(op)) {
    case IndexOp::embedding:
      return "embedding";
    case IndexOp::embedding_backward:
      return "embedding_backward";
    case IndexOp::cross_entropy:
      return "cross_entropy";
    case IndexOp::cross_entropy_backward:
      return "cross_entropy_backward";
    case IndexOp::copy_at:
      return "copy_at_";
  }
  return "an indexing kernel";
}

}  // namespace

BadIndexSink bad_index_sink(int device) {
  check_device_index(device);
  std::lock_guard<std::mutex> lock(g_mutex);
  DeviceRecord& r = g_records[device];
  if (!r.host) {
    DeviceGuard guard(device);
    void* host = nullptr;
    TRIAD_CUDA_CHECK(cudaHostAlloc(&host, sizeof(BadIndexRecord), cudaHostAllocMapped | cudaHostAllocPortable));
    void* mapped = nullptr;
    TRIAD_CUDA_CHECK(cudaHostGetDevicePointer(&mapped, host, 0));
    void* claimed = nullptr;
    TRIAD_CUDA_CHECK(cudaMalloc(&claimed, sizeof(unsigned int)));
    TRIAD_CUDA_CHECK(cudaMemset(claimed, 0, sizeof(unsigned int)));
    r.host = new (host) BadIndexRecord{};
    r.sink = {static_cast<unsigned int*>(claimed), static_cast<BadIndexRecord*>(mapped)};
  }
  return r.sink;
}

void raise_deferred_errors(int device) {
  // The record is read and cleared under the lock: two threads waiting on one device at
  // once raise its error once.
  BadIndexRecord bad;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    if (device < 0 || device >= kMaxDevices) return;
    const DeviceRecord& r = g_records[device];
    if (!r.host || !r.host->found) return;
    bad = *r.host;
    r.host->found = 0;
    DeviceGuard guard(device);
    TRIAD_CUDA_CHECK(cudaMemset(r.sink.claimed, 0, sizeof(unsigned int)));
  }
  TRIAD_CHECK(false, op_name(bad.op) << ": index " << bad.value << " at position " << bad.position << " of "
                                     << bad.count << " indices out of range [0, " << bad.limit << ") on cuda:" << device
                                     << " (found by the kernel and raised at the next wait for the "
                                     << "device; what was computed since is wrong)");
}

}  // namespace triad::cuda
