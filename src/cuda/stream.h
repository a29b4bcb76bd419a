// Devices, streams and events of the CUDA backend.
//
// Note [Streams]: each device has two streams of its own, created on first use and kept for
// the life of the process, both non-blocking (they never wait on the legacy default
// stream):
// - the compute stream runs kernels, GEMMs and copies: every backend method enqueues on
//   the calling thread's current stream of the tensor's device, which is the compute
//   stream unless a StreamGuard says otherwise;
// - the communication stream runs NCCL collectives, at a higher priority so that a queue
//   of long compute kernels does not hold back the collective that gates the next unit.
// The two are ordered by events, never by the host: before a collective the
// communication stream waits for an event recorded on the current stream (its inputs are
// written), and Work::wait() makes the current stream wait for the collective's event.
// The host blocks only where it must read a value (a norm, all_finite, the loss a step
// logs) or when asked to synchronize; each such wait raises the errors kernels found
// meanwhile (Note [Deferred device errors], deferred_errors.h). Memory used on a stream other than the one it was
// allocated for is declared to the allocator (record_stream, device_allocator.h).
//
// This header does not include cuda_runtime.h: handles are the runtime's own opaque
// pointer types (cudaStream_t is CUstream_st*, cudaEvent_t is CUevent_st*).
#pragma once

struct CUstream_st;
struct CUevent_st;

namespace triad::cuda {

using StreamHandle = CUstream_st*;  // cudaStream_t
using EventHandle = CUevent_st*;    // cudaEvent_t

int current_device();  // the calling thread's CUDA device (cudaGetDevice)

// Makes `device` current for the calling thread while it lives (cudaSetDevice, restored on
// destruction; no call when the device is already current).
class DeviceGuard {
 public:
  explicit DeviceGuard(int device);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_;
  int device_;
};

StreamHandle compute_stream(int device);
StreamHandle comm_stream(int device);
// The calling thread's current stream on `device` (the compute stream by default).
StreamHandle current_stream(int device);

// Makes `stream` the calling thread's current stream on `device` while it lives.
class StreamGuard {
 public:
  StreamGuard(int device, StreamHandle stream);
  ~StreamGuard();
  StreamGuard(const StreamGuard&) = delete;
  StreamGuard& operator=(const StreamGuard&) = delete;

 private:
  int device_;
  StreamHandle previous_;
};

// A CUDA event owned by this object (created without timing unless asked for: cheaper to
// record and wait on).
class Event {
 public:
  explicit Event(int device, bool timing = false);
  ~Event();
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;

  void record(StreamHandle stream);
  void block(StreamHandle stream) const;     // `stream` waits for the last record (device side)
  bool query() const;                        // complete? never blocks
  void synchronize() const;                  // the host waits
  float elapsed_ms(const Event& end) const;  // both recorded with timing
  EventHandle handle() const { return event_; }
  int device() const { return device_; }

 private:
  int device_;
  EventHandle event_ = nullptr;
};

// `waiter` runs nothing more until `waitee` has run what is queued on it now (an event
// recorded on waitee, waited on by waiter; the host does not wait).
void wait_stream(StreamHandle waiter, StreamHandle waitee);
// The host waits for the stream / for all work on the device, then raises deferred errors.
void synchronize_stream(StreamHandle stream);
void synchronize_device(int device);

}  // namespace triad::cuda
