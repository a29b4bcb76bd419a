#include <algorithm>
#include <cstring>

#include "cuda/check.h"
#include "cuda/deferred_errors.h"
#include "cuda/pinned.h"
#include "cuda/transfer.h"
#include "tensor/ops.h"

namespace triad::cuda {

namespace {

constexpr size_t kChunk = size_t(8) << 20;  // bytes staged at a time

void check_pair(const Tensor& dst, const Tensor& src, const char* op, bool to_device) {
  TRIAD_CHECK(dst.defined() && src.defined(), op << ": undefined tensor");
  const Tensor& dev = to_device ? dst : src;
  const Tensor& host = to_device ? src : dst;
  TRIAD_CHECK(dev.device().is_cuda() && host.device().is_cpu(),
              op << ": expected a cuda and a cpu tensor, got " << dst.str() << " <- " << src.str());
  TRIAD_CHECK(dst.shape() == src.shape() && dst.dtype() == src.dtype(),
              op << ": " << dst.str() << " and " << src.str() << " differ in shape or dtype");
  TRIAD_CHECK(dst.is_contiguous(), op << ": destination " << dst.str() << " must be contiguous");
}

// Two pinned chunk buffers, used in turn; each returns to the cache when the copies that
// read or wrote it are done (record_pinned_use).
struct Staging {
  Staging(size_t total, int device, cudaStream_t stream) : stream(stream), ready{Event(device), Event(device)} {
    const size_t bytes = std::min(total, kChunk);
    buffer[0] = static_cast<char*>(pinned_allocator().allocate(bytes));
    buffer[1] = total > kChunk ? static_cast<char*>(pinned_allocator().allocate(bytes)) : nullptr;
    size = bytes;
  }
  ~Staging() {
    for (char* b : buffer) {
      if (!b) continue;
      record_pinned_use(b, stream);
      pinned_allocator().deallocate(b, size);
    }
  }
  cudaStream_t stream;
  char* buffer[2] = {nullptr, nullptr};
  size_t size = 0;
  Event ready[2];
};

}  // namespace

void copy_to_device(const Tensor& dst, const Tensor& src) {
  check_pair(dst, src, "copy_to_device", true);
  const size_t total = dst.nbytes();
  if (total == 0) return;
  const Tensor s = ops::contiguous(src);
  const int device = dst.device().index;
  DeviceGuard guard(device);
  // A recorded copy would read the staging buffer again at every replay, long after it
  // held src (Note [Recorded steps] in engine/step_recording.h): the recording fails instead.
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  TRIAD_CUDA_CHECK(cudaStreamIsCapturing(current_stream(device), &capture));
  TRIAD_CHECK(capture == cudaStreamCaptureStatusNone,
              "copy_to_device: " << src.str() << " is copied from the host while cuda:" << device
                                 << "'s stream is recorded as a graph; a replay would not copy it again");
  Staging st(total, device, current_stream(device));
  const char* from = static_cast<const char*>(s.raw_data());
  char* to = static_cast<char*>(dst.raw_data());
  for (size_t off = 0, i = 0; off < total; off += kChunk, ++i) {
    const size_t len = std::min(kChunk, total - off);
    const int b = int(i % 2);
    if (i >= 2) st.ready[b].synchronize();  // the DMA two chunks back has read this buffer
    std::memcpy(st.buffer[b], from + off, len);
    TRIAD_CUDA_CHECK(cudaMemcpyAsync(to + off, st.buffer[b], len, cudaMemcpyHostToDevice, st.stream));
    st.ready[b].record(st.stream);
  }
}

void copy_to_host(const Tensor& dst, const Tensor& src) {
  check_pair(dst, src, "copy_to_host", false);
  const size_t total = dst.nbytes();
  if (total == 0) return;
  const Tensor s = ops::contiguous(src);  // a device copy when src is strided
  const int device = src.device().index;
  DeviceGuard guard(device);
  Staging st(total, device, current_stream(device));
  const char* from = static_cast<const char*>(s.raw_data());
  char* to = static_cast<char*>(dst.raw_data());
  const size_t chunks = (total + kChunk - 1) / kChunk;
  auto drain = [&](size_t i) {  // chunk i has been queued: wait for it, copy it out
    const size_t off = i * kChunk, len = std::min(kChunk, total - off);
    st.ready[i % 2].synchronize();
    std::memcpy(to + off, st.buffer[i % 2], len);
  };
  for (size_t i = 0; i < chunks; ++i) {
    const size_t off = i * kChunk, len = std::min(kChunk, total - off);
    TRIAD_CUDA_CHECK(cudaMemcpyAsync(st.buffer[i % 2], from + off, len, cudaMemcpyDeviceToHost, st.stream));
    st.ready[i % 2].record(st.stream);
    if (i >= 1) drain(i - 1);
  }
  drain(chunks - 1);
  raise_deferred_errors(device);
}

Tensor to_device(const Tensor& t, Device device) {
  TRIAD_CHECK(device.is_cuda(), "to_device: " << device.str() << " is not a CUDA device");
  if (t.device() == device) return t;
  TRIAD_CHECK(t.device().is_cpu(), "to_device: " << t.str() << " is on another CUDA device; copy through the host");
  Tensor out = Tensor::empty(t.shape(), t.dtype(), device);
  copy_to_device(out, t);
  return out;
}

Tensor to_host(const Tensor& t) {
  if (t.device().is_cpu()) return t;
  Tensor out = Tensor::empty(t.shape(), t.dtype());
  copy_to_host(out, t);
  return out;
}

}  // namespace triad::cuda
