#include "io/tensor_file.h"

#include <cstring>
#include <fstream>

#include "tensor/ops.h"

namespace triad::io {

namespace {

constexpr char kMagic[8] = {'T', 'R', 'I', 'A', 'D', 'T', 'N', 'S'};
constexpr uint32_t kVersion = 1;
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
  TRIAD_CHECK(std::memcmp(magic, kMagic, 8) == 0, "'" << path << "' is not a triad tensor file (bad magic)");
  const auto version = r.pod<uint32_t>("the header");
  TRIAD_CHECK(version == kVersion, "tensor file '" << path << "' has version " << version << ", expected " << kVersion);
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
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  TRIAD_CHECK(out.good(), "cannot create tensor file '" << path << "'");
  auto pod = [&](const auto& v) { out.write(reinterpret_cast<const char*>(&v), sizeof v); };
  out.write(kMagic, 8);
  pod(kVersion);
  pod(uint32_t(tensors.size()));
  for (const auto& [name, t] : tensors) {
    pod(uint32_t(name.size()));
    out.write(name.data(), std::streamsize(name.size()));
    pod(uint32_t(t.dtype()));
    pod(uint32_t(t.dim()));
    for (int64_t d : t.shape()) pod(d);
    const Tensor c = ops::contiguous(t);
    out.write(static_cast<const char*>(c.raw_data()), std::streamsize(c.nbytes()));
  }
  out.flush();
  TRIAD_CHECK(out.good(), "writing tensor file '" << path << "' failed");
}

const Tensor& find_tensor(const NamedTensors& tensors, const std::string& name, const std::string& path) {
  for (const auto& [n, t] : tensors)
    if (n == name) return t;
  throw Error("tensor file '" + path + "' has no tensor named '" + name + "'");
}

}  // namespace triad::io
