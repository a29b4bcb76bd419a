// Bad input that kernels find, reported when the host next waits for the device.
//
// Note [Deferred device errors]: an index out of range (embedding, cross-entropy targets)
// is found by the kernel that reads it. Checking on the host first would make the host wait
// for the indices every micro-batch; a kernel cannot throw. So the kernel leaves that
// index's row alone (never touching memory out of range), records the first bad index it
// meets in its device's record, and goes on. The record is mapped pinned host memory, read
// with no copy: every place in this library where the host waits for a device — a copy to
// the host, a reduction to a host value, stream and device synchronization, staging for
// host collectives — calls raise_deferred_errors(device) once the wait is over, which
// throws the recorded error and clears the record. The error names the op, the index, its
// position and the range, as the CPU's immediate check does, and says that it was raised
// at a later wait: the tensors the bad op produced were wrong, and nothing after it should
// be trusted.
#pragma once

#include <cstdint>

namespace triad::cuda {

enum class IndexOp : int { embedding, embedding_backward, cross_entropy, cross_entropy_backward, copy_at };

// What a kernel writes: plain stores by the one thread that claimed the device's flag
// (an atomic in device memory; host memory takes no atomics), `found` last.
struct BadIndexRecord {
  int64_t value, position, count, limit;
  int op;
  volatile int found;
};

// Kernel arguments: the device's claim flag and its record, both device-visible.
struct BadIndexSink {
  unsigned int* claimed;
  BadIndexRecord* record;
};

BadIndexSink bad_index_sink(int device);  // created on first use, kept for the process

// Throws triad::Error for a bad index recorded on `device` since the last call, and clears
// the record; no CUDA call unless one was recorded. Of several threads that call it for one
// device at once, one throws.
void raise_deferred_errors(int device);

}  // namespace triad::cuda
