// A TensorBoard event file (what `tensorboard --logdir` reads): a sequence of records
//
//   uint64 length | uint32 masked_crc32c(length bytes) | data[length] | uint32 masked_crc32c(data)
//
// (little-endian; io/crc32c.h), each record's data one serialized tensorflow.Event
// protocol buffer. The first event carries file_version "brain.Event:2" and the wall time;
// each scalar is an Event {wall_time = 1 (double), step = 2 (int64), summary = 5} whose
// Summary holds one Value {tag = 1 (string), simple_value = 2 (float)}, as PyTorch's
// SummaryWriter.add_scalar writes it. The protocol buffers are encoded here by hand: the
// three messages need only varints, fixed-width numbers and length-delimited fields.
#pragma once

#include <cstdint>
#include <fstream>
#include <string>

namespace triad::io {

class EventFileWriter {
 public:
  // Creates `path` (truncating it) and writes the file-version event. Throws Error naming
  // the file when it cannot be written.
  explicit EventFileWriter(const std::string& path);
  void add_scalar(const std::string& tag, double value, int64_t step, double wall_time);
  void flush();  // Throws Error when the data did not reach the file
  const std::string& path() const { return path_; }

 private:
  void write_record(const std::string& data);

  std::string path_;
  std::ofstream out_;
};

// The seconds since the Unix epoch, as events' wall_time.
double unix_time();

}  // namespace triad::io
