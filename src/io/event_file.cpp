#include "io/event_file.h"

#include <chrono>
#include <cstring>

#include "io/crc32c.h"
#include "tensor/error.h"

namespace triad::io {

namespace {

// Protocol-buffer wire format: a field's key is (number << 3) | wire type.
enum Wire : uint32_t { varint = 0, fixed64 = 1, length_delimited = 2, fixed32 = 5 };

void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) out.push_back(char((v & 0x7F) | 0x80)), v >>= 7;
  out.push_back(char(v));
}

void put_key(std::string& out, uint32_t field, Wire wire) { put_varint(out, uint64_t(field) << 3 | wire); }

template <class T>
void put_little_endian(std::string& out, T value) {
  unsigned char bytes[sizeof(T)];
  std::memcpy(bytes, &value, sizeof(T));  // the machine's order: little-endian on every target triad builds for
  out.append(reinterpret_cast<const char*>(bytes), sizeof(T));
}

void put_bytes(std::string& out, uint32_t field, const std::string& bytes) {
  put_key(out, field, length_delimited);
  put_varint(out, bytes.size());
  out += bytes;
}

std::string event_header(double wall_time, int64_t step) {
  std::string event;
  put_key(event, 1, fixed64), put_little_endian(event, wall_time);
  put_key(event, 2, varint), put_varint(event, uint64_t(step));
  return event;
}

static_assert(sizeof(double) == 8 && sizeof(float) == 4);

}  // namespace

double unix_time() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

EventFileWriter::EventFileWriter(const std::string& path) : path_(path), out_(path, std::ios::binary | std::ios::trunc) {
  TRIAD_CHECK(out_.good(), "[tensorboard] cannot create the event file '" << path << "'");
  std::string event = event_header(unix_time(), 0);
  put_bytes(event, 3, "brain.Event:2");
  write_record(event);
  flush();
}

void EventFileWriter::add_scalar(const std::string& tag, double value, int64_t step, double wall_time) {
  std::string summary_value;
  put_bytes(summary_value, 1, tag);
  put_key(summary_value, 2, fixed32), put_little_endian(summary_value, float(value));
  std::string summary;
  put_bytes(summary, 1, summary_value);
  std::string event = event_header(wall_time, step);
  put_bytes(event, 5, summary);
  write_record(event);
}

void EventFileWriter::write_record(const std::string& data) {
  std::string header;
  put_little_endian(header, uint64_t(data.size()));
  const uint32_t header_crc = masked_crc32c(header.data(), header.size());
  put_little_endian(header, header_crc);
  std::string footer;
  put_little_endian(footer, masked_crc32c(data.data(), data.size()));
  out_ << header << data << footer;
}

void EventFileWriter::flush() {
  out_.flush();
  TRIAD_CHECK(out_.good(), "[tensorboard] writing the event file '" << path_ << "' failed");
}

}  // namespace triad::io
