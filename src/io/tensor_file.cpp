#include "io/tensor_file.h"

#include <cstring>
#include <fstream>

#include "io/atomic_file.h"
#include "tensor/ops.h"

namespace triad::io {

namespace {

constexpr char kTensorFileMagic[8] = {'T', 'R', 'I', 'A', 'D', 'T', 'N', 'S'};
constexpr uint32_t kTensorFileVersion = 1;
constexpr uint32_t kMaxDims = 16;

class Reader {
 public:
  explicit Reader(const std::string& path) : path_(path), in_(path, std::ios::binary) {
    TRIAD_CHECK(in_.good(), "cannot open tensor file '" << path << "'");
  }
  template <class T>
  T pod(const char* what) {
    T v;
    bytes(&v, sizeof v, what);
    return v;
  }
  void bytes(void* dst, size_t n, const char* what) {
    in_.read(static_cast<char*>(dst), std::streamsize(n));
    TRIAD_CHECK(size_t(in_.gcount()) == n, "tensor file '" << path_ << "' is truncated (reading " << what << ")");
  }

 private:
  std::string path_;
  std::ifstream in_;
};

}  // namespace

NamedTensors read_tensor_file(const std::string& path) {
  Reader r(path);
  char magic[8];
  r.bytes(magic, 8, "the header");
  TRIAD_CHECK(std::memcmp(magic, kTensorFileMagic, 8) == 0, "'" << path << "' is not a triad tensor file (bad magic)");
  const auto version = r.pod<uint32_t>("the header");
  TRIAD_CHECK(version == kTensorFileVersion, "tensor file '" << path << "' has version " << version << ", expected " << kTensorFileVersion);
  const auto count = r.pod<uint32_t>("the header");
  NamedTensors out;
  for (uint32_t i = 0; i < count; ++i) {
    const auto name_len = r.pod<uint32_t>("a name");
    TRIAD_CHECK(name_len < 4096,
                "tensor file '" << path << "': entry " << i << " has a name of " << name_len << " bytes");
    std::string name(name_len, '\0');
    r.bytes(name.data(), name_len, "a name");
    const auto code = r.pod<uint32_t>("a dtype");
    TRIAD_CHECK(code <= uint32_t(DType::i8),
                "tensor file '" << path << "': tensor '" << name << "' has unknown dtype code " << code);
    const auto ndim = r.pod<uint32_t>("a rank");
    TRIAD_CHECK(ndim <= kMaxDims,
                "tensor file '" << path << "': tensor '" << name << "' has " << ndim << " dimensions");
    Shape shape(ndim);
    for (auto& d : shape) {
      d = r.pod<int64_t>("a shape");
      TRIAD_CHECK(d >= 0, "tensor file '" << path << "': tensor '" << name << "' has a negative dimension");
    }
    Tensor t = Tensor::empty(shape, DType(code));
    r.bytes(t.raw_data(), t.nbytes(), name.c_str());
    out.emplace_back(std::move(name), std::move(t));
  }
  return out;
}

void write_tensor_file(const std::string& path, const NamedTensors& tensors) {
  // Headers are built in memory; tensor data is written from the tensors themselves.
  std::vector<std::string> headers(tensors.size() + 1);
  std::vector<Tensor> contiguous_data;
  auto pod = [](std::string& out, const auto& v) { out.append(reinterpret_cast<const char*>(&v), sizeof v); };
  headers[0].append(kTensorFileMagic, 8);
  pod(headers[0], kTensorFileVersion);
  pod(headers[0], uint32_t(tensors.size()));
  for (size_t i = 0; i < tensors.size(); ++i) {
    const auto& [name, t] = tensors[i];
    std::string& h = headers[i + 1];
    pod(h, uint32_t(name.size()));
    h += name;
    pod(h, uint32_t(t.dtype()));
    pod(h, uint32_t(t.dim()));
    for (int64_t d : t.shape()) pod(h, d);
    contiguous_data.push_back(ops::contiguous(t));
  }
  std::vector<std::pair<const void*, size_t>> parts{{headers[0].data(), headers[0].size()}};
  for (size_t i = 0; i < tensors.size(); ++i) {
    parts.emplace_back(headers[i + 1].data(), headers[i + 1].size());
    parts.emplace_back(contiguous_data[i].raw_data(), contiguous_data[i].nbytes());
  }
  write_file_atomically(path, parts, "tensor file");
}

const Tensor& find_tensor(const NamedTensors& tensors, const std::string& name, const std::string& path) {
  for (const auto& [n, t] : tensors)
    if (n == name) return t;
  throw Error("tensor file '" + path + "' has no tensor named '" + name + "'");
}

}  // namespace triad::io
