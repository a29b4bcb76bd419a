// Note [Streams] (stream.h). The streams of a device are created once, under a lock, and
// never destroyed: they outlive every tensor and communicator, and destroying them in a
// static destructor could run after the CUDA runtime has shut down.
#include <array>
#include <mutex>

#include "cuda/check.h"
#include "cuda/deferred_errors.h"
#include "cuda/runtime.h"
#include "cuda/stream.h"
#include "tensor/error.h"

namespace triad::cuda {

namespace {

struct DeviceStreams {
  cudaStream_t compute = nullptr;
  cudaStream_t comm = nullptr;
};

std::mutex g_streams_mutex;
std::array<DeviceStreams, kMaxDevices> g_streams;

thread_local std::array<cudaStream_t, kMaxDevices> tl_current{};

const DeviceStreams& streams(int device) {
  check_device_index(device);
  std::lock_guard<std::mutex> lock(g_streams_mutex);
  DeviceStreams& s = g_streams[device];
  if (!s.compute) {
    DeviceGuard guard(device);
    int least = 0, greatest = 0;  // numerically, greatest < least
    TRIAD_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    TRIAD_CUDA_CHECK(cudaStreamCreateWithPriority(&s.compute, cudaStreamNonBlocking, least));
    TRIAD_CUDA_CHECK(cudaStreamCreateWithPriority(&s.comm, cudaStreamNonBlocking, greatest));
  }
  return s;
}

}  // namespace

int current_device() {
  int d = 0;
  TRIAD_CUDA_CHECK(cudaGetDevice(&d));
  return d;
}

DeviceGuard::DeviceGuard(int device) : previous_(current_device()), device_(device) {
  if (device_ != previous_) TRIAD_CUDA_CHECK(cudaSetDevice(device_));
}

DeviceGuard::~DeviceGuard() {
  if (device_ != previous_) cudaSetDevice(previous_);  // a destructor cannot throw; best effort
}

StreamHandle compute_stream(int device) { return streams(device).compute; }
StreamHandle comm_stream(int device) { return streams(device).comm; }

StreamHandle current_stream(int device) {
  check_device_index(device);
  cudaStream_t s = tl_current[device];
  return s ? s : compute_stream(device);
}

StreamGuard::StreamGuard(int device, StreamHandle stream) : device_(device), previous_(nullptr) {
  check_device_index(device);
  previous_ = tl_current[device];
  tl_current[device] = stream;
}

StreamGuard::~StreamGuard() { tl_current[device_] = previous_; }

Event::Event(int device, bool timing) : device_(device) {
  DeviceGuard guard(device);
  TRIAD_CUDA_CHECK(cudaEventCreateWithFlags(&event_, timing ? cudaEventDefault : cudaEventDisableTiming));
}

Event::~Event() {
  if (event_) cudaEventDestroy(event_);  // never throws: the runtime defers it past pending work
}

void Event::record(StreamHandle stream) { TRIAD_CUDA_CHECK(cudaEventRecord(event_, stream)); }
void Event::block(StreamHandle stream) const { TRIAD_CUDA_CHECK(cudaStreamWaitEvent(stream, event_, 0)); }

bool Event::query() const {
  const cudaError_t e = cudaEventQuery(event_);
  if (e == cudaErrorNotReady) return false;
  TRIAD_CUDA_CHECK(e);
  return true;
}

void Event::synchronize() const { TRIAD_CUDA_CHECK(cudaEventSynchronize(event_)); }

float Event::elapsed_ms(const Event& end) const {
  float ms = 0;
  TRIAD_CUDA_CHECK(cudaEventElapsedTime(&ms, event_, end.event_));
  return ms;
}

void wait_stream(StreamHandle waiter, StreamHandle waitee) {
  if (waiter == waitee) return;
  int device = 0;
  TRIAD_CUDA_CHECK(cudaStreamGetDevice(waitee, &device));
  // One event per thread and device, re-recorded each time: cudaStreamWaitEvent waits for
  // the record made before it, so a later record does not disturb an earlier wait.
  thread_local std::array<cudaEvent_t, kMaxDevices> events{};
  check_device_index(device);
  if (!events[device]) {
    DeviceGuard guard(device);
    TRIAD_CUDA_CHECK(cudaEventCreateWithFlags(&events[device], cudaEventDisableTiming));
  }
  TRIAD_CUDA_CHECK(cudaEventRecord(events[device], waitee));
  TRIAD_CUDA_CHECK(cudaStreamWaitEvent(waiter, events[device], 0));
}

void synchronize_stream(StreamHandle stream) {
  TRIAD_CUDA_CHECK(cudaStreamSynchronize(stream));
  int device = 0;
  TRIAD_CUDA_CHECK(cudaStreamGetDevice(stream, &device));
  raise_deferred_errors(device);
}

void synchronize_device(int device) {
  DeviceGuard guard(device);
  TRIAD_CUDA_CHECK(cudaDeviceSynchronize());
  raise_deferred_errors(device);
}

}  // namespace triad::cuda
