#include "io/safetensors.h"

#include <algorithm>
#include <bit>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>

#include "io/atomic_file.h"
#include "tensor/ops.h"

namespace triad::io {

static_assert(std::endian::native == std::endian::little, "safetensors data is little-endian, as this host must be");

namespace fs = std::filesystem;

namespace {

// Every dtype of the format, with its element size in bytes.
const std::map<std::string, int64_t> kElementBytes = {
    {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E5M2", 1}, {"F8_E4M3", 1}, {"I16", 2}, {"U16", 2}, {"F16", 2},
    {"BF16", 2}, {"I32", 4}, {"U32", 4}, {"F32", 4},     {"I64", 8},     {"U64", 8}, {"F64", 8}};

constexpr DType kTriadDtypes[] = {DType::f64, DType::f32, DType::f16, DType::bf16};

// One header entry, validated against the data section of `data_bytes`.
SafetensorsEntry parse_entry(const std::string& path, const std::string& name, const nlohmann::json& e,
                             int64_t data_bytes) {
  const std::string where = "safetensors file '" + path + "': tensor '" + name + "'";
  TRIAD_CHECK(e.is_object() && e.contains("dtype") && e.contains("shape") && e.contains("data_offsets"),
              where << " is not an object with dtype, shape and data_offsets: " << e.dump());
  TRIAD_CHECK(e["dtype"].is_string(), where << " has dtype " << e["dtype"].dump() << ", not a string");
  SafetensorsEntry out;
  out.name = name;
  out.dtype = e["dtype"].get<std::string>();
  const auto size = kElementBytes.find(out.dtype);
  TRIAD_CHECK(size != kElementBytes.end(), where << " has unknown dtype '" << out.dtype << "'");
  const nlohmann::json& shape = e["shape"];
  TRIAD_CHECK(shape.is_array(), where << " has shape " << shape.dump() << ", not an array");
  // The byte count, saturated at `limit` (more than any file holds).
  const int64_t limit = std::numeric_limits<int64_t>::max() / 8;
  int64_t bytes = size->second;
  for (const nlohmann::json& d : shape) {
    TRIAD_CHECK(d.is_number_unsigned() && d.get<uint64_t>() <= uint64_t(limit),
                where << " has shape " << shape.dump() << " (dimensions are integers from 0 to 2^60)");
    const int64_t dim = d.get<int64_t>();
    out.shape.push_back(dim);
    bytes = dim != 0 && bytes > limit / dim ? limit : bytes * dim;
  }
  if (std::find(out.shape.begin(), out.shape.end(), 0) != out.shape.end()) bytes = 0;
  const nlohmann::json& offsets = e["data_offsets"];
  TRIAD_CHECK(
      offsets.is_array() && offsets.size() == 2 && offsets[0].is_number_unsigned() && offsets[1].is_number_unsigned(),
      where << " has data_offsets " << offsets.dump() << ", not [begin, end]");
  const uint64_t begin = offsets[0].get<uint64_t>(), end = offsets[1].get<uint64_t>();
  TRIAD_CHECK(begin <= end, where << " has data_offsets " << offsets.dump() << " that end before they begin");
  TRIAD_CHECK(end <= uint64_t(data_bytes), where << " has data_offsets " << offsets.dump()
                                                 << " outside the data section's " << data_bytes << " bytes");
  out.begin = int64_t(begin), out.end = int64_t(end);
  TRIAD_CHECK(bytes == out.end - out.begin, where << " of shape " << shape.dump() << " and dtype " << out.dtype
                                                  << " needs " << bytes << " bytes; its data_offsets " << offsets.dump()
                                                  << " hold " << out.end - out.begin);
  return out;
}

}  // namespace

std::string safetensors_dtype(DType dtype) {
  switch (dtype) {
    case DType::f64:
      return "F64";
    case DType::f32:
      return "F32";
    case DType::f16:
      return "F16";
    case DType::bf16:
      return "BF16";
    default:
      TRIAD_CHECK(false, "safetensors: triad writes F64, F32, F16 and BF16, not " << dtype_name(dtype));
  }
}

DType dtype_from_safetensors(const std::string& name) {
  for (DType d : kTriadDtypes)
    if (safetensors_dtype(d) == name) return d;
  TRIAD_CHECK(false, "safetensors dtype '" << name << "' is not one triad reads (F64, F32, F16, BF16)");
}

SafetensorsFile SafetensorsFile::open(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  TRIAD_CHECK(in.good() && fs::is_regular_file(path), "cannot open safetensors file '" << path << "'");
  const int64_t file_bytes = int64_t(fs::file_size(path));
  uint64_t n = 0;
  TRIAD_CHECK(file_bytes >= 8, "safetensors file '" << path << "' has " << file_bytes
                                                    << " bytes, too short for the 8-byte header length");
  in.read(reinterpret_cast<char*>(&n), 8);
  TRIAD_CHECK(n <= uint64_t(file_bytes - 8), "safetensors file '" << path << "': its header length " << n
                                                                  << " runs past the end of the file (" << file_bytes
                                                                  << " bytes)");
  std::string header(n, '\0');
  in.read(header.data(), std::streamsize(n));
  TRIAD_CHECK(in.good(), "cannot read the header of safetensors file '" << path << "'");
  const nlohmann::json json = nlohmann::json::parse(header, nullptr, false);
  TRIAD_CHECK(!json.is_discarded(), "safetensors file '" << path << "': its header is not valid JSON");
  TRIAD_CHECK(json.is_object(), "safetensors file '" << path << "': its header is not a JSON object");

  SafetensorsFile f;
  f.path_ = path;
  f.data_start_ = 8 + int64_t(n);
  const int64_t data_bytes = file_bytes - f.data_start_;
  for (const auto& [key, value] : json.items()) {
    if (key == "__metadata__") {
      TRIAD_CHECK(value.is_object(), "safetensors file '" << path << "': __metadata__ is not an object");
      for (const auto& [k, v] : value.items()) {
        TRIAD_CHECK(v.is_string(), "safetensors file '" << path << "': __metadata__ value '" << k
                                                        << "' is not a string: " << v.dump());
        f.metadata_[k] = v.get<std::string>();
      }
      continue;
    }
    f.entries_.push_back(parse_entry(path, key, value, data_bytes));
  }
  std::sort(f.entries_.begin(), f.entries_.end(),
            [](const auto& a, const auto& b) { return std::tie(a.begin, a.end) < std::tie(b.begin, b.end); });
  int64_t covered = 0;
  for (size_t i = 0; i < f.entries_.size(); ++i) {
    const SafetensorsEntry& e = f.entries_[i];
    TRIAD_CHECK(e.begin >= covered, "safetensors file '" << path << "': tensors '" << f.entries_[i - 1].name
                                                         << "' and '" << e.name << "' overlap (bytes [" << e.begin
                                                         << ", " << covered << ") of the data)");
    TRIAD_CHECK(e.begin == covered, "safetensors file '" << path << "': bytes [" << covered << ", " << e.begin
                                                         << ") of the data belong to no tensor");
    covered = e.end;
    f.index_[e.name] = i;
  }
  TRIAD_CHECK(covered == data_bytes, "safetensors file '" << path << "': bytes [" << covered << ", " << data_bytes
                                                          << ") of the data belong to no tensor");
  return f;
}

bool SafetensorsFile::has(const std::string& name) const { return index_.count(name) > 0; }

const SafetensorsEntry& SafetensorsFile::entry(const std::string& name) const {
  const auto it = index_.find(name);
  TRIAD_CHECK(it != index_.end(), "safetensors file '" << path_ << "' has no tensor '" << name << "'");
  return entries_[it->second];
}

Tensor SafetensorsFile::read(const std::string& name) const {
  const SafetensorsEntry& e = entry(name);
  DType dtype;
  try {
    dtype = dtype_from_safetensors(e.dtype);
  } catch (const Error& err) {
    throw Error("safetensors file '" + path_ + "': tensor '" + name + "': " + err.what());
  }
  Tensor t = Tensor::empty(e.shape, dtype);
  std::ifstream in(path_, std::ios::binary);
  in.seekg(data_start_ + e.begin);
  in.read(static_cast<char*>(t.raw_data()), std::streamsize(e.end - e.begin));
  TRIAD_CHECK(in.good() || e.end == e.begin,
              "cannot read tensor '" << name << "' of safetensors file '" << path_ << "'");
  return t;
}

SafetensorsCheckpoint SafetensorsCheckpoint::open(const std::string& path) {
  SafetensorsCheckpoint c;
  std::string file = path;
  if (fs::is_directory(path)) {
    const fs::path index = fs::path(path) / "model.safetensors.index.json",
                   single = fs::path(path) / "model.safetensors";
    TRIAD_CHECK(fs::exists(index) || fs::exists(single),
                "'" << path << "' holds neither model.safetensors nor model.safetensors.index.json");
    file = (fs::exists(index) ? index : single).string();
  }
  c.path_ = file;
  const fs::path folder = fs::path(file).parent_path();
  c.folder_ = (folder.empty() ? fs::path(".") : folder).string();
  if (!file.ends_with(".json")) {
    c.files_.push_back(SafetensorsFile::open(file));
    for (const SafetensorsEntry& e : c.files_[0].entries()) c.shard_of_[e.name] = 0;
    return c;
  }
  std::ifstream in(file);
  TRIAD_CHECK(in.good(), "cannot open safetensors index '" << file << "'");
  const nlohmann::json index = nlohmann::json::parse(in, nullptr, false);
  TRIAD_CHECK(
      !index.is_discarded() && index.is_object() && index.contains("weight_map") && index["weight_map"].is_object(),
      "safetensors index '" << file << "' is not a JSON object with a weight_map");
  std::map<std::string, size_t> shard_index;
  for (const auto& [name, shard] : index["weight_map"].items()) {
    TRIAD_CHECK(shard.is_string(),
                "safetensors index '" << file << "' maps '" << name << "' to " << shard.dump() << ", not a file name");
    const std::string shard_name = shard.get<std::string>();
    if (!shard_index.count(shard_name)) {
      const fs::path shard_path = fs::path(c.folder_) / shard_name;
      TRIAD_CHECK(fs::is_regular_file(shard_path), "safetensors index '" << file << "' puts tensor '" << name
                                                                         << "' in shard '" << shard_name
                                                                         << "', which is missing");
      shard_index[shard_name] = c.files_.size();
      c.files_.push_back(SafetensorsFile::open(shard_path.string()));
    }
    const size_t k = shard_index[shard_name];
    TRIAD_CHECK(c.files_[k].has(name), "safetensors index '" << file << "' puts tensor '" << name << "' in '"
                                                             << shard_name << "', which has no such tensor");
    c.shard_of_[name] = k;
  }
  return c;
}

std::vector<std::string> SafetensorsCheckpoint::names() const {
  std::vector<std::string> out;
  for (const auto& [name, k] : shard_of_) out.push_back(name);
  return out;
}

const SafetensorsEntry& SafetensorsCheckpoint::entry(const std::string& name) const {
  const auto it = shard_of_.find(name);
  TRIAD_CHECK(it != shard_of_.end(), "'" << path_ << "' has no tensor '" << name << "'");
  return files_[it->second].entry(name);
}

Tensor SafetensorsCheckpoint::read(const std::string& name) const {
  entry(name);
  return files_[shard_of_.at(name)].read(name);
}

void write_safetensors(const std::string& path, const NamedTensors& tensors,
                       const std::map<std::string, std::string>& metadata) {
  nlohmann::json header = nlohmann::json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::vector<Tensor> data;
  int64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    TRIAD_CHECK(!name.empty() && name != "__metadata__" && !header.contains(name),
                "safetensors file '" << path << "': tensor name '" << name << "' is empty, reserved or repeated");
    const std::string dtype = safetensors_dtype(t.dtype());
    data.push_back(ops::contiguous(ops::to(t, Device::cpu())));
    const int64_t bytes = int64_t(data.back().nbytes());
    header[name] = {{"dtype", dtype}, {"shape", t.shape()}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text = header.dump();
  text.append((8 - (8 + text.size()) % 8) % 8, ' ');
  const uint64_t n = text.size();
  std::vector<std::pair<const void*, size_t>> parts = {{&n, 8}, {text.data(), text.size()}};
  for (const Tensor& t : data) parts.emplace_back(t.raw_data(), t.nbytes());
  write_file_atomically(path, parts, "safetensors file");
}

std::vector<std::string> write_safetensors_shards(const std::string& folder, const NamedTensors& tensors,
                                                  const std::map<std::string, std::string>& metadata,
                                                  int64_t max_shard_bytes) {
  TRIAD_CHECK(max_shard_bytes > 0, "safetensors shards: the shard size " << max_shard_bytes << " is not positive");
  std::vector<NamedTensors> shards(1);
  int64_t in_shard = 0, total = 0;
  for (const auto& [name, t] : tensors) {
    const int64_t bytes = int64_t(t.nbytes());
    if (!shards.back().empty() && in_shard + bytes > max_shard_bytes) shards.emplace_back(), in_shard = 0;
    shards.back().emplace_back(name, t);
    in_shard += bytes;
    total += bytes;
  }
  if (shards.size() == 1) {
    write_safetensors((fs::path(folder) / "model.safetensors").string(), tensors, metadata);
    return {"model.safetensors"};
  }
  std::vector<std::string> files;
  nlohmann::json weight_map = nlohmann::json::object();
  for (size_t i = 0; i < shards.size(); ++i) {
    char file[64];
    std::snprintf(file, sizeof file, "model-%05zu-of-%05zu.safetensors", i + 1, shards.size());
    write_safetensors((fs::path(folder) / file).string(), shards[i], metadata);
    for (const auto& [name, t] : shards[i]) weight_map[name] = file;
    files.push_back(file);
  }
  const std::string index =
      nlohmann::json({{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}}).dump(2) + "\n";
  write_file_atomically((fs::path(folder) / "model.safetensors.index.json").string(), {{index.data(), index.size()}},
                        "safetensors index");
  files.push_back("model.safetensors.index.json");
  return files;
}

}  // namespace triad::io
