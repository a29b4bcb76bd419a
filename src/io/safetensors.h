// Hugging Face safetensors files: how models on the Hub are stored, read and written here
// for triad-ckpt import/export (checkpoint/hf_checkpoint.h).
//
// Layout: u64 little-endian N | N bytes of JSON header | the data section. The header maps
// each tensor name to {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]} (byte
// offsets into the data section, row-major little-endian elements), plus an optional
// "__metadata__" object of string values. Every byte of the data section belongs to exactly
// one tensor (no overlaps, no holes), as the format requires.
//
// A model too large for one file is sharded: model.safetensors.index.json holds
// {"weight_map": {tensor name: shard file name}} and the shards lie beside it.
//
// Contracts:
// - Opening validates the whole header against the file's size; anything malformed (a
//   header length past the file, JSON that is not an object of entries, offsets out of
//   range or overlapping or leaving holes, an unknown dtype, a shape whose byte count is not
//   its offsets') throws Error naming the file and the problem. Nothing is read past it.
// - Every dtype of the format is recognised (sizes checked); triad reads and writes F64,
//   F32, F16 and BF16 (tensor/dtype.h), and reading a tensor of another dtype (a U8 mask
//   buffer) throws Error naming it. The host is little-endian (as every triad target is).
// - Writing goes through io/atomic_file.h: a failed write leaves an existing file intact.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "io/tensor_file.h"
#include "tensor/tensor.h"

namespace triad::io {

struct SafetensorsEntry {
  std::string name;
  std::string dtype;  // the format's name: "F32", "BF16", "U8", ...
  Shape shape;
  int64_t begin = 0, end = 0;  // byte offsets in the data section
};

// One open safetensors file (its header parsed; data read on demand).
class SafetensorsFile {
 public:
  static SafetensorsFile open(const std::string& path);

  const std::string& path() const { return path_; }
  // The entries in the order of their data.
  const std::vector<SafetensorsEntry>& entries() const { return entries_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  bool has(const std::string& name) const;
  // Throws Error naming the file when there is no tensor `name`.
  const SafetensorsEntry& entry(const std::string& name) const;
  // The tensor as stored (F64, F32, F16 or BF16 become those triad dtypes).
  Tensor read(const std::string& name) const;

 private:
  std::string path_;
  int64_t data_start_ = 0;  // 8 + header length
  std::vector<SafetensorsEntry> entries_;
  std::map<std::string, size_t> index_;
  std::map<std::string, std::string> metadata_;
};

// A model's tensors in one safetensors file or several shards. `path` is a .safetensors
// file, a model.safetensors.index.json, or a folder holding either (the index first).
// Throws Error naming the path when it is none of these, and naming the index when it is
// malformed, names a shard that is missing, or maps a tensor to a shard without it.
class SafetensorsCheckpoint {
 public:
  static SafetensorsCheckpoint open(const std::string& path);

  // The folder the files lie in (where config.json would be).
  const std::string& folder() const { return folder_; }
  // The description for messages: the file, or the index.
  const std::string& path() const { return path_; }
  std::vector<std::string> names() const;  // sorted
  bool has(const std::string& name) const { return shard_of_.count(name) > 0; }
  const SafetensorsEntry& entry(const std::string& name) const;
  Tensor read(const std::string& name) const;

 private:
  std::string path_, folder_;
  std::vector<SafetensorsFile> files_;
  std::map<std::string, size_t> shard_of_;
};

// The format's dtype name of a triad dtype (f64, f32, f16, bf16), and back (Error naming
// the other dtypes).
std::string safetensors_dtype(DType dtype);
DType dtype_from_safetensors(const std::string& name);

// Writes the tensors (F64, F32, F16 or BF16; any shape; names unique and non-empty) in
// order, with `metadata` as "__metadata__" (none when empty). The header is padded with
// spaces to a multiple of 8 bytes, so the data section is aligned.
void write_safetensors(const std::string& path, const NamedTensors& tensors,
                       const std::map<std::string, std::string>& metadata = {});

// Writes the tensors into `folder` as save_pretrained does: model.safetensors when their data
// fits in max_shard_bytes; else shards model-00001-of-0000N.safetensors, ..., filled in order,
// a shard closed when the next tensor would take it past max_shard_bytes (a larger tensor
// alone in its shard), then model.safetensors.index.json {"metadata": {"total_size": the bytes
// of all tensors}, "weight_map": {name: shard}}. Every file carries `metadata`. Returns the
// file names written (the index last).
std::vector<std::string> write_safetensors_shards(const std::string& folder, const NamedTensors& tensors,
                                                  const std::map<std::string, std::string>& metadata,
                                                  int64_t max_shard_bytes);

}  // namespace triad::io
