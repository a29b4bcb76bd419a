// H5File over HDF5's C API (1.10 and later). Only names whose meaning is the same from
// HDF5 1.10 to 1.14 are used (the numbered H5Dopen2, H5Ewalk2, ...; no H5Literate or
// H5Oget_info, whose versions differ), so the code needs no API-version macros even though
// Debian's build defaults the unnumbered names to the 1.8 API.
//
// An element range of an N-d dataset is selected as the union (H5S_SELECT_OR) of the
// boxes of element_range_boxes; HDF5 walks a hyperslab selection in row-major order
// whatever the order its boxes were added in, so the selected elements meet the memory
// buffer (a 1-d dataspace of the range's length) in flattened-index order.
#include "io/h5file.h"

#include <hdf5.h>
#include <mpi.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <exception>
#include <sstream>
#include <utility>

#include "io/token_file.h"
#include "parallel/communicator.h"
#include "parallel/mpi_check.h"
#include "parallel/runtime.h"

namespace triad::io {

// ---------------------------------------------------------------- HDF5 helpers

namespace {

// The innermost (most specific) message of HDF5's error stack, "function(): description";
// clears the stack.
std::string innermost_hdf5_message() {
  std::string found;
  auto walk = [](unsigned n, const H5E_error2_t* e, void* data) -> herr_t {
    auto* s = static_cast<std::string*>(data);
    if (n == 0) *s = std::string(e->func_name ? e->func_name : "?") + "(): " + (e->desc ? e->desc : "");
    return 0;
  };
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, walk, &found);
  H5Eclear2(H5E_DEFAULT);
  return found.empty() ? "(no HDF5 error message)" : found;
}

// The same, with errno's text after it (`err`: errno after the failed call; 0: none) when
// HDF5's message does not already say it.
std::string hdf5_message_with(int err) {
  std::string hdf5 = innermost_hdf5_message();
  if (err != 0 && hdf5.find(std::strerror(err)) == std::string::npos)
    hdf5 += std::string(" (") + std::strerror(err) + ")";
  return hdf5;
}

// HDF5 prints its error stack to stderr by default; triad reports errors as exceptions.
// Set at every file start: HDF5 restores the default if the library is shut down and
// started again (as at MPI_Finalize).
void silence_hdf5() {
  H5open();
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
}

// An owned HDF5 identifier, closed by its close function. Closing errors of these
// transient objects (spaces, types, property lists, datasets after reading) are ignored;
// closes that can lose data are checked where they happen.
class Hid {
 public:
  using Closer = herr_t (*)(hid_t);
  Hid() = default;
  Hid(hid_t id, Closer close) : id_(id), close_(close) {}
  Hid(Hid&& o) noexcept : id_(std::exchange(o.id_, H5I_INVALID_HID)), close_(o.close_) {}
  Hid& operator=(Hid&& o) noexcept {
    if (this != &o) {
      reset();
      id_ = std::exchange(o.id_, H5I_INVALID_HID);
      close_ = o.close_;
    }
    return *this;
  }
  Hid(const Hid&) = delete;
  Hid& operator=(const Hid&) = delete;
  ~Hid() { reset(); }
  hid_t get() const { return id_; }
  void reset() {
    if (id_ >= 0 && close_) close_(id_);
    id_ = H5I_INVALID_HID;
  }
  hid_t release() { return std::exchange(id_, H5I_INVALID_HID); }

 private:
  hid_t id_ = H5I_INVALID_HID;
  Closer close_ = nullptr;
};

// An IEEE-like little-endian float of `bytes` bytes: sign bit on top, then esize exponent
// bits, then msize mantissa bits.
struct FloatLayout {
  size_t bytes, esize, msize, ebias;
};
constexpr FloatLayout kBf16{2, 8, 7, 127}, kF16{2, 5, 10, 15}, kF32{4, 8, 23, 127}, kF64{8, 11, 52, 1023};

// What a dataset's or attribute's HDF5 type is, in words, for error messages.
std::string describe_type(hid_t type) {
  std::ostringstream os;
  const size_t bytes = H5Tget_size(type);
  switch (H5Tget_class(type)) {
    case H5T_INTEGER:
      os << (H5Tget_sign(type) == H5T_SGN_NONE ? "an unsigned " : "a signed ") << 8 * bytes << "-bit integer";
      break;
    case H5T_FLOAT: {
      size_t spos = 0, epos = 0, esize = 0, mpos = 0, msize = 0;
      H5Tget_fields(type, &spos, &epos, &esize, &mpos, &msize);
      os << "a " << 8 * bytes << "-bit float with " << esize << " exponent and " << msize << " mantissa bits";
      break;
    }
    case H5T_STRING:
      os << "a string";
      break;
    case H5T_COMPOUND:
      os << "a compound type";
      break;
    case H5T_ENUM:
      os << "an enum";
      break;
    case H5T_ARRAY:
      os << "an array type";
      break;
    case H5T_VLEN:
      os << "a variable-length sequence";
      break;
    default:
      os << "an HDF5 type of class " << int(H5Tget_class(type));
  }
  return os.str();
}

bool float_has_layout(hid_t type, const FloatLayout& l) {
  size_t spos = 0, epos = 0, esize = 0, mpos = 0, msize = 0;
  if (H5Tget_size(type) != l.bytes || H5Tget_fields(type, &spos, &epos, &esize, &mpos, &msize) < 0) return false;
  return H5Tget_precision(type) == 8 * l.bytes && H5Tget_offset(type) == 0 && spos == 8 * l.bytes - 1 &&
         esize == l.esize && epos == l.msize && msize == l.msize && mpos == 0 && H5Tget_ebias(type) == l.ebias;
}

// triad's dtype of an HDF5 type; false when it is none of them. Byte order is free (HDF5
// converts a big-endian file type on reading).
bool dtype_of_h5(hid_t type, DType& out) {
  switch (H5Tget_class(type)) {
    case H5T_INTEGER: {
      if (H5Tget_sign(type) != H5T_SGN_2) return false;
      const size_t bytes = H5Tget_size(type);
      if (bytes == 8) out = DType::i64;
      if (bytes == 4) out = DType::i32;
      if (bytes == 1) out = DType::i8;
      return bytes == 8 || bytes == 4 || bytes == 1;
    }
    case H5T_FLOAT:
      for (auto [layout, dt] : {std::pair{kF32, DType::f32}, std::pair{kF64, DType::f64}, std::pair{kBf16, DType::bf16},
                                std::pair{kF16, DType::f16}}) {
        if (float_has_layout(type, layout)) {
          out = dt;
          return true;
        }
      }
      return false;
    default:
      return false;
  }
}

// The path's components; Error unless it is absolute, without empty, "." or ".." parts.
// "/" (no components) only when allow_root.
std::vector<std::string> split_path(const std::string& file, const std::string& name, bool allow_root) {
  bool ok = !name.empty() && name[0] == '/' && (allow_root || name != "/");
  std::vector<std::string> parts;
  if (ok && name != "/") {
    size_t pos = 1;
    while (ok) {
      const size_t slash = name.find('/', pos);
      std::string part = name.substr(pos, slash == std::string::npos ? std::string::npos : slash - pos);
      ok = !part.empty() && part != "." && part != "..";
      parts.push_back(std::move(part));
      if (slash == std::string::npos) break;
      pos = slash + 1;
    }
  }
  TRIAD_CHECK(ok, "HDF5 file '" << file << "': '" << name
                                << "' is not an absolute object path like \"/model/h.0.attn.weight\"");
  return parts;
}

// A digest of a collective call's arguments, compared across ranks.
class Digest {
 public:
  Digest& add(const std::string& s) {
    add(int64_t(s.size()));
    h_ = fnv1a64(s.data(), s.size(), h_);
    return *this;
  }
  Digest& add(int64_t v) {
    h_ = fnv1a64(&v, sizeof v, h_);
    return *this;
  }
  Digest& add(const Shape& shape) {
    add(int64_t(shape.size()));
    for (int64_t d : shape) add(d);
    return *this;
  }
  uint64_t value() const { return h_; }

 private:
  uint64_t h_ = kFnvOffset;
};

// The MPI communicator behind a Communicator; MPI_COMM_NULL for a single process's.
MPI_Comm mpi_comm_of(const parallel::Communicator& comm) {
  if (const void* handle = comm.mpi_handle()) return *static_cast<const MPI_Comm*>(handle);
  TRIAD_CHECK(comm.size() == 1, "H5File: parallel HDF5 needs an MPI communicator, got '" << comm.name() << "'");
  return MPI_COMM_NULL;
}

bool mpi_usable() {
  int init = 0, fin = 0;
  MPI_Initialized(&init);
  MPI_Finalized(&fin);
  return init && !fin;
}

constexpr int64_t kDefaultMaxTransferBytes = int64_t(1) << 30;
constexpr hsize_t kMetaBlockBytes = hsize_t(1) << 20;

// What a batch call is about, in messages: its one name, or how many there are.
std::string batch_object(const std::vector<std::string>& names) {
  return names.size() == 1 ? names[0] : std::to_string(names.size()) + " datasets";
}
Digest names_digest(const std::vector<std::string>& names) {
  Digest d;
  for (const std::string& name : names) d.add(name);
  return d;
}

}  // namespace

// ---------------------------------------------------------------- state

// Checks an HDF5 return value (negative: failure) and throws Error naming the file, the
// operation and object (`what`, streamed), file:line, the rank and HDF5's innermost message.
#define TRIAD_H5(state, call, what)                                          \
  [&] {                                                                      \
    errno = 0;                                                               \
    const auto triad_h5_rc_ = (call);                                        \
    if (triad_h5_rc_ < 0) {                                                  \
      const int triad_h5_errno_ = errno;                                     \
      std::ostringstream triad_h5_os_;                                       \
      triad_h5_os_ << what;                                                  \
      (state).fail(triad_h5_os_.str(), __FILE__, __LINE__, triad_h5_errno_); \
    }                                                                        \
    return triad_h5_rc_;                                                     \
  }()

namespace detail {

struct H5State {
  std::string path;
  hid_t file = H5I_INVALID_HID;
  bool writable = false;
  MPI_Comm comm = MPI_COMM_NULL;  // our duplicate; parallel mode only
  int rank = 0;
  int64_t max_transfer_bytes = kDefaultMaxTransferBytes;
  Hid dxpl;  // the transfer property list (independent in parallel mode)
  // A write or flush failed. HDF5 1.10 cannot close such a file: the close retries the
  // write-back, and when that fails it leaves a half-freed file that crashes the next use
  // of the library (another close, or its own clean-up at exit). So it is abandoned.
  mutable bool write_failed = false;

  bool parallel() const { return comm != MPI_COMM_NULL; }

  // `err`: errno after the failed call (0: none), named when HDF5's message does not say it.
  [[noreturn]] void fail(const std::string& what, const char* src, int line, int err = 0) const {
    const std::string hdf5 = hdf5_message_with(err);
    const char* in_src = std::strstr(src, "/src/");  // io/h5file.cpp, not the build machine's path
    std::ostringstream os;
    os << "HDF5 file '" << path << "': " << what << " failed at " << (in_src ? in_src + 5 : src) << ":" << line;
    if (parallel()) os << " (rank " << rank << ")";
    os << ": " << hdf5;
    throw Error(os.str());
  }

  void check_open(const char* op) const {
    TRIAD_CHECK(file >= 0, "HDF5 file '" << path << "': " << op << " on a closed file");
  }
  void check_writable(const char* op) const {
    check_open(op);
    TRIAD_CHECK(writable, "HDF5 file '" << path << "': " << op << " on a file opened read-only");
  }

  // Parallel mode: the ranks compare `digest` and their local errors (one all-reduce) and
  // return the largest `rounds`; every rank throws when any rank's error is set or the
  // digests differ. Serial mode: throws the local error, returns rounds.
  int64_t agree(const char* op, const std::string& object, uint64_t digest, const std::string& error,
                int64_t rounds = 0) const {
    if (!parallel()) {
      if (!error.empty()) throw Error(error);
      return rounds;
    }
    uint64_t v[4] = {digest, ~digest, error.empty() ? 0u : 1u, uint64_t(rounds)};
    TRIAD_MPI(MPI_Allreduce(MPI_IN_PLACE, v, 4, MPI_UINT64_T, MPI_MAX, comm), "MPI_Allreduce");
    if (v[2] != 0) {
      const std::string here = " (rank " + std::to_string(rank) + ")";
      if (!error.empty()) throw Error(error.find(here) == std::string::npos ? error + here : error);
      TRIAD_CHECK(false, "HDF5 file '" << path << "': " << op << " '" << object << "' failed on another rank (rank "
                                       << rank << " waits for it)");
    }
    TRIAD_CHECK(v[0] == ~v[1], "HDF5 file '" << path << "': the ranks called " << op << " '" << object
                                             << "' with different arguments (parallel files need the same calls "
                                                "in the same order on every rank)");
    return int64_t(v[3]);
  }
  void agree_on(const char* op, const std::string& object, Digest digest, const std::string& error = {}) const {
    agree(op, object, digest.add(std::string(op)).add(object).value(), error);
  }

  // What `name` is in the file: none when absent (or a path through a dataset).
  enum class Kind { none, group, dataset, other };
  Kind kind(const std::string& name) const {
    const auto parts = split_path(path, name, true);
    std::string prefix;
    Kind k = Kind::group;  // "/"
    for (const auto& part : parts) {
      if (k != Kind::group) return Kind::none;  // a path through a dataset
      prefix += "/" + part;
      const htri_t exists =
          TRIAD_H5(*this, H5Lexists(file, prefix.c_str(), H5P_DEFAULT), "looking up '" << prefix << "'");
      if (exists == 0) return Kind::none;
      Hid obj(TRIAD_H5(*this, H5Oopen(file, prefix.c_str(), H5P_DEFAULT), "opening object '" << prefix << "'"),
              H5Oclose);
      const H5I_type_t type = H5Iget_type(obj.get());
      k = type == H5I_GROUP ? Kind::group : type == H5I_DATASET ? Kind::dataset : Kind::other;
    }
    return k;
  }

  Hid open_dataset(const std::string& name, const char* op) const {
    split_path(path, name, false);
    const hid_t d = H5Dopen2(file, name.c_str(), H5P_DEFAULT);
    if (d < 0) {
      innermost_hdf5_message();  // clears the stack
      const Kind k = kind(name);
      TRIAD_CHECK(k != Kind::none, "HDF5 file '" << path << "': " << op << ": no dataset '" << name << "'");
      TRIAD_CHECK(false, "HDF5 file '" << path << "': " << op << ": '" << name << "' is not a dataset");
    }
    return Hid(d, H5Dclose);
  }

  Hid open_object(const std::string& object, const char* op) const {
    split_path(path, object, true);
    const hid_t o = H5Oopen(file, object.c_str(), H5P_DEFAULT);
    if (o < 0) {
      innermost_hdf5_message();
      TRIAD_CHECK(false, "HDF5 file '" << path << "': " << op << ": no group or dataset '" << object << "'");
    }
    return Hid(o, H5Oclose);
  }

  // A new HDF5 type for `dt` (the file's and memory's: transfers never convert).
  Hid make_type(DType dt) const {
    auto copy = [&](hid_t t) {
      return Hid(TRIAD_H5(*this, H5Tcopy(t), "copying a type for " << dtype_name(dt)), H5Tclose);
    };
    auto custom = [&](const FloatLayout& l) {
      Hid t = copy(H5T_IEEE_F32LE);
      const size_t bits = 8 * l.bytes;
      TRIAD_H5(*this, H5Tset_fields(t.get(), bits - 1, l.msize, l.esize, 0, l.msize),
               "defining the " << dtype_name(dt) << " type");
      TRIAD_H5(*this, H5Tset_precision(t.get(), bits), "defining the " << dtype_name(dt) << " type");
      TRIAD_H5(*this, H5Tset_size(t.get(), l.bytes), "defining the " << dtype_name(dt) << " type");
      TRIAD_H5(*this, H5Tset_ebias(t.get(), l.ebias), "defining the " << dtype_name(dt) << " type");
      return t;
    };
    (void)custom;  // unused where HDF5 has both 16-bit types
    switch (dt) {
      case DType::f32:
        return copy(H5T_NATIVE_FLOAT);
      case DType::f64:
        return copy(H5T_NATIVE_DOUBLE);
      case DType::i64:
        return copy(H5T_NATIVE_INT64);
      case DType::i32:
        return copy(H5T_NATIVE_INT32);
      case DType::i8:
        return copy(H5T_NATIVE_INT8);
      // HDF5's own 16-bit float types where it has them (the same bits on disk; they are
      // little-endian file types, and triad's tensors are little-endian).
      case DType::bf16:
#ifdef H5T_FLOAT_BFLOAT16LE  // HDF5 2.0
        return copy(H5T_FLOAT_BFLOAT16LE);
#else
        return custom(kBf16);
#endif
      case DType::f16:
#ifdef H5T_IEEE_F16LE  // HDF5 1.14.4
        return copy(H5T_IEEE_F16LE);
#else
        return custom(kF16);
#endif
    }
    TRIAD_ASSERT(false);
    return Hid();
  }

  DType dataset_dtype(hid_t dset, const std::string& name) const {
    Hid type(TRIAD_H5(*this, H5Dget_type(dset), "reading the type of dataset '" << name << "'"), H5Tclose);
    DType dt = DType::f32;
    TRIAD_CHECK(dtype_of_h5(type.get(), dt), "HDF5 file '" << path << "': dataset '" << name << "' holds "
                                                           << describe_type(type.get())
                                                           << ", which is none of f32, f64, bf16, f16, i64, i32, i8");
    return dt;
  }

  Shape dataset_shape(hid_t dset, const std::string& name) const {
    Hid space(TRIAD_H5(*this, H5Dget_space(dset), "reading the shape of dataset '" << name << "'"), H5Sclose);
    const H5S_class_t cls = H5Sget_simple_extent_type(space.get());
    TRIAD_CHECK(cls == H5S_SCALAR || cls == H5S_SIMPLE,
                "HDF5 file '" << path << "': dataset '" << name << "' has no elements (a null dataspace)");
    if (cls == H5S_SCALAR) return {};
    const int n =
        TRIAD_H5(*this, H5Sget_simple_extent_ndims(space.get()), "reading the shape of dataset '" << name << "'");
    std::vector<hsize_t> dims(size_t(n) + 1);
    TRIAD_H5(*this, H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr),
             "reading the shape of dataset '" << name << "'");
    return Shape(dims.begin(), dims.begin() + n);
  }

  // The elements [first, first + count) of the dataset `space` (its shape) selected.
  void select_range(hid_t space, const Shape& shape, int64_t first, int64_t count, const std::string& name) const {
    select_boxes(space, element_range_boxes(shape, first, count), name);
  }

  // A placed part's range (io/placement.h) fits a dataset of `shape`.
  static bool fits(const H5File::TensorRange& r, const Shape& shape) {
    const Placement& p = r.placement;
    if (p.dim >= int(r.part_shape.size()) || int64_t(p.map.size()) != r.part_shape[size_t(p.dim)]) return false;
    if (r.part_shape.size() != shape.size()) return false;
    for (size_t k = 0; k < shape.size(); ++k)
      if (int(k) != p.dim && shape[k] != r.part_shape[k]) return false;
    return std::all_of(p.map.begin(), p.map.end(), [&](int64_t g) { return g < shape[size_t(p.dim)]; });
  }

  // The union of the boxes selected (none: an empty selection).
  void select_boxes(hid_t space, const std::vector<Box>& boxes, const std::string& name) const {
    const auto what = [&] { return "selecting elements of dataset '" + name + "'"; };
    if (boxes.empty()) {
      TRIAD_H5(*this, H5Sselect_none(space), what());
      return;
    }
    bool first_box = true;
    for (const Box& box : boxes) {
      if (box.start.empty()) {  // 0-d
        TRIAD_H5(*this, H5Sselect_all(space), what());
        continue;
      }
      const std::vector<hsize_t> start(box.start.begin(), box.start.end()), extent(box.count.begin(), box.count.end());
      TRIAD_H5(*this,
               H5Sselect_hyperslab(space, first_box ? H5S_SELECT_SET : H5S_SELECT_OR, start.data(), nullptr,
                                   extent.data(), nullptr),
               what());
      first_box = false;
    }
  }

  // The ranges' transfers (write or read), agreed on as a batch: the names and each rank's
  // tensors in one collective call, then the datasets' dtypes and shapes against each
  // rank's ranges in a second. Each rank then moves its own bytes (independent I/O, no
  // collective call per dataset), in pieces of at most max_transfer_bytes, calling
  // done(i) after range i.
  void transfer(bool write, const std::vector<H5File::TensorRange>& ranges,
                const std::function<void(size_t)>& done) const {
    const char* op = write ? "write_range" : "read_range";
    write ? check_writable(op) : check_open(op);
    const std::string object = ranges.size() == 1 ? ranges[0].name : std::to_string(ranges.size()) + " datasets";
    std::ostringstream local;
    Digest names;
    for (const H5File::TensorRange& r : ranges) {
      names.add(r.name);
      const Tensor& t = r.data;
      if (local.tellp() == 0 && (!t.defined() || !t.device().is_cpu() || !t.is_contiguous()))
        local << "HDF5 file '" << path << "': " << op << " '" << r.name << "': expected a contiguous CPU tensor, got "
              << (t.defined() ? t.str() : "an undefined tensor");
    }
    agree_on(op, object, names, local.str());

    std::vector<Hid> dsets;
    std::vector<Shape> shapes;
    Digest layout;
    for (const H5File::TensorRange& r : ranges) {
      dsets.push_back(open_dataset(r.name, op));
      const DType dt = dataset_dtype(dsets.back().get(), r.name);
      shapes.push_back(dataset_shape(dsets.back().get(), r.name));
      layout.add(int64_t(dt)).add(shapes.back());
      const bool placed = !r.placement.is_identity();
      const int64_t count = r.data.numel(), total = numel(placed ? r.part_shape : shapes.back());
      if (local.tellp() != 0) continue;
      if (r.data.dtype() != dt)
        local << "HDF5 file '" << path << "': " << op << " '" << r.name << "': the dataset holds " << dtype_name(dt)
              << ", the tensor " << dtype_name(r.data.dtype());
      else if (placed && !fits(r, shapes.back()))
        local << "HDF5 file '" << path << "': " << op << " '" << r.name << "': a part of shape "
              << shape_str(r.part_shape) << " placed along dimension " << r.placement.dim
              << " does not fit the dataset's shape " << shape_str(shapes.back());
      else if (r.first < 0 || r.first > total || count > total - r.first)
        local << "HDF5 file '" << path << "': " << op << " '" << r.name << "': elements [" << r.first << ", "
              << r.first + count << ") are outside the dataset's " << total << " elements (shape "
              << shape_str(shapes.back()) << ")";
    }
    agree_on(op, object, layout, local.str());

    // Range i's transfer, then done(i).
    auto move = [&](size_t i) {
      const H5File::TensorRange& r = ranges[i];
      const hid_t dset = dsets[i].get();
      const DType dt = r.data.dtype();
      const int64_t esize = int64_t(element_size(dt)), count = r.data.numel();
      const int64_t per_round = std::max<int64_t>(1, max_transfer_bytes / esize);
      const Hid type = make_type(dt);
      auto* bytes = static_cast<unsigned char*>(r.data.raw_data());
      // Placed: the range's elements that are not padding, a prefix of it.
      const int64_t placed_end = r.placement.is_identity() ? r.first + count : r.placement.placed_numel(r.part_shape);
      for (int64_t lo = 0; lo < count; lo += per_round) {
        const int64_t n = std::clamp<int64_t>(placed_end - (r.first + lo), 0, std::min(per_round, count - lo));
        if (n == 0) break;  // the rest is padding
        Hid fspace(TRIAD_H5(*this, H5Dget_space(dset), "reading the shape of dataset '" << r.name << "'"), H5Sclose);
        if (r.placement.is_identity())
          select_range(fspace.get(), shapes[i], r.first + lo, n, r.name);
        else
          select_boxes(fspace.get(), placed_boxes(r.part_shape, r.placement, r.first + lo, n), r.name);
        const hsize_t mdim = hsize_t(n);
        Hid mspace(TRIAD_H5(*this, H5Screate_simple(1, &mdim, nullptr), "creating a memory dataspace"), H5Sclose);
        unsigned char* buf = bytes + lo * esize;
        if (write)
          TRIAD_H5(*this, H5Dwrite(dset, type.get(), mspace.get(), fspace.get(), dxpl.get(), buf),
                   "writing elements [" << r.first + lo << ", " << r.first + lo + n << ") of dataset '" << r.name
                                        << "'");
        else
          TRIAD_H5(*this, H5Dread(dset, type.get(), mspace.get(), fspace.get(), dxpl.get(), buf),
                   "reading elements [" << r.first + lo << ", " << r.first + lo + n << ") of dataset '" << r.name
                                        << "'");
      }
      TRIAD_H5(*this, H5Dclose(dsets[i].release()), "closing dataset '" << r.name << "'");
      if (done) done(i);
    };
    // A failed transfer stops this rank's transfers; the ranks then agree on the outcome, so
    // that all of them throw together (not one leaving while the others wait in a collective).
    std::string failed;
    for (size_t i = 0; i < ranges.size() && failed.empty(); ++i) {
      try {
        move(i);
      } catch (const Error& e) {
        failed = e.what();
        write_failed = write_failed || write;
      }
    }
    agree_on(op, object, Digest(), failed);
  }

  // Creates the dataset, once the ranks agree on it.
  void create_dataset(const std::string& name, DType dtype, const Shape& shape) const {
    const std::string what = "dataset '" + name + "' " + dtype_name(dtype) + " " + shape_str(shape);
    const Hid type = make_type(dtype);
    Hid space;
    if (shape.empty()) {
      space = Hid(TRIAD_H5(*this, H5Screate(H5S_SCALAR), "creating the dataspace of " << what), H5Sclose);
    } else {
      const std::vector<hsize_t> dims(shape.begin(), shape.end());
      space = Hid(TRIAD_H5(*this, H5Screate_simple(int(dims.size()), dims.data(), nullptr),
                           "creating the dataspace of " << what),
                  H5Sclose);
    }
    Hid lcpl(TRIAD_H5(*this, H5Pcreate(H5P_LINK_CREATE), "creating " << what), H5Pclose);
    TRIAD_H5(*this, H5Pset_create_intermediate_group(lcpl.get(), 1), "creating " << what);
    Hid dcpl(TRIAD_H5(*this, H5Pcreate(H5P_DATASET_CREATE), "creating " << what), H5Pclose);
    TRIAD_H5(*this, H5Pset_layout(dcpl.get(), H5D_CONTIGUOUS), "creating " << what);
    TRIAD_H5(*this, H5Pset_fill_time(dcpl.get(), H5D_FILL_TIME_NEVER), "creating " << what);
    const hid_t d =
        TRIAD_H5(*this, H5Dcreate2(file, name.c_str(), type.get(), space.get(), lcpl.get(), dcpl.get(), H5P_DEFAULT),
                 "creating " << what);
    TRIAD_H5(*this, H5Dclose(d), "closing " << what);
  }

  // ---- attributes

  void set_attr(const std::string& object, const std::string& key, hid_t type, const void* value, Digest digest) {
    check_writable("set_attr");
    agree_on("set_attr", object + "@" + key, digest, attr_key_error(object, key));
    write_attr(object, key, type, value);
  }
  std::string attr_key_error(const std::string& object, const std::string& key) const {
    return key.empty() ? "HDF5 file '" + path + "': set_attr on '" + object + "': empty attribute name" : "";
  }
  // Sets the attribute, once the ranks agree on it.
  void write_attr(const std::string& object, const std::string& key, hid_t type, const void* value) {
    Hid obj = open_object(object, "set_attr");
    const std::string what = "attribute '" + key + "' of '" + object + "'";
    if (TRIAD_H5(*this, H5Aexists(obj.get(), key.c_str()), "looking up " << what) > 0)
      TRIAD_H5(*this, H5Adelete(obj.get(), key.c_str()), "replacing " << what);
    Hid space(TRIAD_H5(*this, H5Screate(H5S_SCALAR), "creating the dataspace of " << what), H5Sclose);
    Hid attr(TRIAD_H5(*this, H5Acreate2(obj.get(), key.c_str(), type, space.get(), H5P_DEFAULT, H5P_DEFAULT),
                      "creating " << what),
             H5Aclose);
    TRIAD_H5(*this, H5Awrite(attr.get(), type, value), "writing " << what);
    TRIAD_H5(*this, H5Aclose(attr.release()), "closing " << what);
  }

  // The attribute, checked to hold one value; `type` receives its file type. `agreed`: the
  // ranks have agreed on this call already (a batch).
  Hid open_attr(const std::string& object, const std::string& key, const char* op, Hid& type,
                bool agreed = false) const {
    check_open(op);
    if (!agreed) agree_on(op, object + "@" + key, Digest());
    Hid obj = open_object(object, op);
    const htri_t exists = TRIAD_H5(*this, H5Aexists(obj.get(), key.c_str()),
                                   "looking up attribute '" << key << "' of '" << object << "'");
    TRIAD_CHECK(exists > 0,
                "HDF5 file '" << path << "': " << op << ": '" << object << "' has no attribute '" << key << "'");
    const std::string what = "attribute '" + key + "' of '" + object + "'";
    Hid attr(TRIAD_H5(*this, H5Aopen(obj.get(), key.c_str(), H5P_DEFAULT), "opening " << what), H5Aclose);
    type = Hid(TRIAD_H5(*this, H5Aget_type(attr.get()), "reading the type of " << what), H5Tclose);
    Hid space(TRIAD_H5(*this, H5Aget_space(attr.get()), "reading the dataspace of " << what), H5Sclose);
    const hssize_t points =
        TRIAD_H5(*this, H5Sget_simple_extent_npoints(space.get()), "reading the dataspace of " << what);
    TRIAD_CHECK(points == 1, "HDF5 file '" << path << "': " << what << " holds " << points << " values, expected one");
    return attr;
  }

  template <class T>
  T get_number(const std::string& object, const std::string& key, const char* op, H5T_class_t cls, H5T_sign_t sign,
               hid_t mem_type, const char* expected, bool agreed = false) const {
    Hid type;
    Hid attr = open_attr(object, key, op, type, agreed);
    const bool ok = H5Tget_class(type.get()) == cls && H5Tget_size(type.get()) <= 8 &&
                    (cls != H5T_INTEGER || H5Tget_sign(type.get()) == sign);
    TRIAD_CHECK(ok, "HDF5 file '" << path << "': attribute '" << key << "' of '" << object << "' holds "
                                  << describe_type(type.get()) << ", expected " << expected);
    T value{};
    TRIAD_H5(*this, H5Aread(attr.get(), mem_type, &value), "reading attribute '" << key << "' of '" << object << "'");
    return value;
  }

  void collect_datasets(hid_t group, const std::string& prefix, std::vector<std::string>& out) const {
    H5G_info_t info;
    TRIAD_H5(*this, H5Gget_info(group, &info), "listing group '" << (prefix.empty() ? "/" : prefix) << "'");
    for (hsize_t i = 0; i < info.nlinks; ++i) {
      const auto what = [&] { return "listing group '" + (prefix.empty() ? std::string("/") : prefix) + "'"; };
      const ssize_t len = TRIAD_H5(
          *this, H5Lget_name_by_idx(group, ".", H5_INDEX_NAME, H5_ITER_INC, i, nullptr, 0, H5P_DEFAULT), what());
      std::string link(size_t(len) + 1, '\0');
      TRIAD_H5(*this,
               H5Lget_name_by_idx(group, ".", H5_INDEX_NAME, H5_ITER_INC, i, link.data(), link.size(), H5P_DEFAULT),
               what());
      link.resize(size_t(len));
      const std::string full = prefix + "/" + link;
      Hid obj(TRIAD_H5(*this, H5Oopen(group, link.c_str(), H5P_DEFAULT), "opening object '" << full << "'"), H5Oclose);
      const H5I_type_t type = H5Iget_type(obj.get());
      if (type == H5I_DATASET) out.push_back(full);
      if (type == H5I_GROUP) collect_datasets(obj.get(), full, out);
    }
  }

  // Frees our communicator (unless MPI is gone).
  void free_comm() {
    if (comm != MPI_COMM_NULL && mpi_usable()) MPI_Comm_free(&comm);
    comm = MPI_COMM_NULL;
  }
  ~H5State() { free_comm(); }

};

}  // namespace detail

using detail::H5State;

// ---------------------------------------------------------------- H5File

namespace {

enum class Start { create, open_read, open_write };

std::unique_ptr<H5State> start_file(const std::string& path, MPI_Comm parent, Start how) {
  silence_hdf5();
  auto state = std::make_unique<H5State>();
  H5State& s = *state;
  s.path = path;
  s.writable = how != Start::open_read;
  const char* op = how == Start::create ? "creating the file" : "opening the file";
  if (parent != MPI_COMM_NULL) {
    TRIAD_CHECK(mpi_usable(), "HDF5 file '" << path << "': a parallel file needs MPI to be initialized");
    TRIAD_MPI(MPI_Comm_dup(parent, &s.comm), "MPI_Comm_dup");
    TRIAD_MPI(MPI_Comm_rank(s.comm, &s.rank), "MPI_Comm_rank");
    s.agree(how == Start::create ? "create" : "open", path, Digest().add(path).add(int64_t(how)).value(), "");
  }
  Hid fapl(TRIAD_H5(s, H5Pcreate(H5P_FILE_ACCESS), op), H5Pclose);
  // The 1.8 object formats at least: attributes larger than 64 KiB (dense storage).
  TRIAD_H5(s, H5Pset_libver_bounds(fapl.get(), H5F_LIBVER_V18, H5F_LIBVER_LATEST), op);
  // Metadata (object headers, attributes, group links) in blocks of its own at the start of
  // the file, apart from the data: a checkpoint's hundreds of headers are then a few reads
  // and writes, not one small one beside each dataset, and the datasets created together
  // lie back to back, so reading them in order reads the file sequentially.
  TRIAD_H5(s, H5Pset_meta_block_size(fapl.get(), kMetaBlockBytes), op);
  // No sieve buffer when writing: a write that fails (a full disk, an I/O error) fails in
  // H5Dwrite, where its dataset and elements are known, not later when the buffer is flushed.
  if (s.writable) TRIAD_H5(s, H5Pset_sieve_buf_size(fapl.get(), 0), op);
  s.dxpl = Hid(TRIAD_H5(s, H5Pcreate(H5P_DATASET_XFER), op), H5Pclose);
  if (s.parallel()) {
    TRIAD_H5(s, H5Pset_fapl_mpio(fapl.get(), s.comm, MPI_INFO_NULL), op);
    TRIAD_H5(s, H5Pset_all_coll_metadata_ops(fapl.get(), true), op);
    TRIAD_H5(s, H5Pset_coll_metadata_write(fapl.get(), true), op);
    // Each rank's part of a transfer is one contiguous range of the file (an element range
    // of a contiguous dataset), so collective transfers only add work: MPI-IO's two-phase
    // aggregation ships every byte through an aggregator rank (Open MPI's OMPIO made 4
    // ranks on one node 2–5x slower than each rank writing or reading its own range), and
    // HDF5 makes collective calls of its own for each dataset. The ranks agree on a batch
    // of transfers first (H5State::transfer); then each does its own, independently.
    TRIAD_H5(s, H5Pset_dxpl_mpio(s.dxpl.get(), H5FD_MPIO_INDEPENDENT), op);
  } else {
    TRIAD_H5(s, H5Pset_fapl_sec2(fapl.get()), op);
    // Lock (HDF5's default) but go on where the file system has no locks (some NFS, Lustre).
    TRIAD_H5(s, H5Pset_file_locking(fapl.get(), true, true), op);
  }
  if (how == Start::create)
    s.file = TRIAD_H5(s, H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl.get()), op);
  else
    s.file =
        TRIAD_H5(s, H5Fopen(path.c_str(), how == Start::open_write ? H5F_ACC_RDWR : H5F_ACC_RDONLY, fapl.get()), op);
  return state;
}

}  // namespace

H5File::H5File(std::unique_ptr<H5State> state) : s_(std::move(state)) {}
H5File::H5File(H5File&& other) noexcept = default;
H5File& H5File::operator=(H5File&& other) noexcept {
  if (this != &other) {
    H5File old(std::move(*this));  // closed as by the destructor
    s_ = std::move(other.s_);
  }
  return *this;
}

H5File::~H5File() {
  if (!s_ || s_->file < 0) return;
  // Closing a parallel file is collective: while an exception unwinds the stack on this
  // rank alone, the others may never join, so the file is abandoned (as MPI's Work is).
  if (s_->write_failed || (s_->parallel() && (std::uncaught_exceptions() > 0 || !mpi_usable()))) {
    abandon();
    return;
  }
  if (H5Fclose(std::exchange(s_->file, H5I_INVALID_HID)) < 0) innermost_hdf5_message();
}

const H5State& H5File::state() const {
  TRIAD_CHECK(s_ != nullptr, "use of a moved-from H5File");
  return *s_;
}
H5State& H5File::state() {
  TRIAD_CHECK(s_ != nullptr, "use of a moved-from H5File");
  return *s_;
}

H5File H5File::create(const std::string& path) { return H5File(start_file(path, MPI_COMM_NULL, Start::create)); }
H5File H5File::create(const std::string& path, const parallel::Communicator& comm) {
  return H5File(start_file(path, mpi_comm_of(comm), Start::create));
}
H5File H5File::open(const std::string& path, H5Access access) {
  return H5File(start_file(path, MPI_COMM_NULL, access == H5Access::read_write ? Start::open_write : Start::open_read));
}
H5File H5File::open(const std::string& path, const parallel::Communicator& comm, H5Access access) {
  return H5File(
      start_file(path, mpi_comm_of(comm), access == H5Access::read_write ? Start::open_write : Start::open_read));
}

const std::string& H5File::path() const { return state().path; }
bool H5File::is_open() const { return s_ && s_->file >= 0; }
bool H5File::is_parallel() const { return state().parallel(); }
bool H5File::is_writable() const { return state().writable; }

void H5File::create_dataset(const std::string& name, DType dtype, const Shape& shape) {
  create_datasets({{name, dtype, shape}});
}

void H5File::create_datasets(const std::vector<DatasetSpec>& specs) {
  H5State& s = state();
  s.check_writable("create_dataset");
  std::string error;
  Digest digest;
  for (const DatasetSpec& d : specs) {
    digest.add(d.name).add(int64_t(d.dtype)).add(d.shape);
    if (!error.empty()) continue;
    try {
      split_path(s.path, d.name, false);
      TRIAD_CHECK(d.shape.size() <= H5S_MAX_RANK, "HDF5 file '" << s.path << "': create_dataset '" << d.name << "': "
                                                                << d.shape.size() << " dimensions, at most "
                                                                << H5S_MAX_RANK);
      for (int64_t n : d.shape)
        TRIAD_CHECK(n >= 0, "HDF5 file '" << s.path << "': create_dataset '" << d.name
                                          << "': negative dimension in shape " << shape_str(d.shape));
    } catch (const Error& e) {
      error = e.what();
    }
  }
  s.agree_on("create_dataset", specs.size() == 1 ? specs[0].name : std::to_string(specs.size()) + " datasets", digest,
             error);
  for (const DatasetSpec& d : specs) s.create_dataset(d.name, d.dtype, d.shape);
}

void H5File::create_group(const std::string& name) {
  H5State& s = state();
  s.check_writable("create_group");
  std::string error;
  try {
    split_path(s.path, name, false);
  } catch (const Error& e) {
    error = e.what();
  }
  s.agree_on("create_group", name, Digest(), error);
  const auto k = s.kind(name);
  if (k == H5State::Kind::group) return;
  TRIAD_CHECK(k == H5State::Kind::none,
              "HDF5 file '" << s.path << "': create_group: '" << name << "' exists and is not a group");
  Hid lcpl(TRIAD_H5(s, H5Pcreate(H5P_LINK_CREATE), "creating group '" << name << "'"), H5Pclose);
  TRIAD_H5(s, H5Pset_create_intermediate_group(lcpl.get(), 1), "creating group '" << name << "'");
  const hid_t g = TRIAD_H5(s, H5Gcreate2(s.file, name.c_str(), lcpl.get(), H5P_DEFAULT, H5P_DEFAULT),
                           "creating group '" << name << "'");
  TRIAD_H5(s, H5Gclose(g), "closing group '" << name << "'");
}

bool H5File::has(const std::string& name) const {
  const H5State& s = state();
  s.check_open("has");
  s.agree_on("has", name, Digest());
  return s.kind(name) == H5State::Kind::dataset;
}

std::vector<std::string> H5File::missing_datasets(const std::vector<std::string>& names) const {
  const H5State& s = state();
  s.check_open("has");
  s.agree_on("has", batch_object(names), names_digest(names));
  std::vector<std::string> out;
  for (const std::string& name : names)
    if (s.kind(name) != H5State::Kind::dataset) out.push_back(name);
  return out;
}

bool H5File::has_group(const std::string& name) const {
  const H5State& s = state();
  s.check_open("has_group");
  s.agree_on("has_group", name, Digest());
  return s.kind(name) == H5State::Kind::group;
}

Shape H5File::shape(const std::string& name) const { return shapes({name}).front(); }

std::vector<Shape> H5File::shapes(const std::vector<std::string>& names) const {
  const H5State& s = state();
  s.check_open("shape");
  s.agree_on("shape", batch_object(names), names_digest(names));
  std::vector<Shape> out;
  for (const std::string& name : names) out.push_back(s.dataset_shape(s.open_dataset(name, "shape").get(), name));
  return out;
}

DType H5File::dtype(const std::string& name) const { return dtypes({name}).front(); }

std::vector<DType> H5File::dtypes(const std::vector<std::string>& names) const {
  const H5State& s = state();
  s.check_open("dtype");
  s.agree_on("dtype", batch_object(names), names_digest(names));
  std::vector<DType> out;
  for (const std::string& name : names) out.push_back(s.dataset_dtype(s.open_dataset(name, "dtype").get(), name));
  return out;
}

std::vector<std::string> H5File::list_datasets() const {
  const H5State& s = state();
  s.check_open("list_datasets");
  s.agree_on("list_datasets", "/", Digest());
  std::vector<std::string> out;
  s.collect_datasets(s.file, "", out);
  std::sort(out.begin(), out.end());
  return out;
}

void H5File::write_range(const std::string& name, int64_t first, const Tensor& data) {
  write_ranges({{name, first, data}});
}

void H5File::read_range(const std::string& name, int64_t first, const Tensor& out) const {
  read_ranges({{name, first, out}});
}

void H5File::write_ranges(const std::vector<TensorRange>& ranges) { state().transfer(true, ranges, {}); }

void H5File::read_ranges(const std::vector<TensorRange>& ranges, const std::function<void(size_t)>& done) const {
  state().transfer(false, ranges, done);
}

Tensor H5File::read(const std::string& name) const {
  Tensor t = Tensor::empty(shape(name), dtype(name));
  read_range(name, 0, t);
  return t;
}

void H5File::set_max_transfer_bytes(int64_t bytes) {
  TRIAD_CHECK(bytes > 0, "H5File::set_max_transfer_bytes: expected a positive byte count, got " << bytes);
  state().max_transfer_bytes = bytes;
}
int64_t H5File::max_transfer_bytes() const { return state().max_transfer_bytes; }

void H5File::set_attr_string(const std::string& object, const std::string& key, const std::string& value) {
  H5State& s = state();
  TRIAD_CHECK(value.find('\0') == std::string::npos, "HDF5 file '" << s.path << "': string attribute '" << key
                                                                   << "' of '" << object << "' contains a NUL byte");
  Hid type(TRIAD_H5(s, H5Tcopy(H5T_C_S1), "making a string type"), H5Tclose);
  TRIAD_H5(s, H5Tset_size(type.get(), value.size() + 1), "making a string type");
  TRIAD_H5(s, H5Tset_strpad(type.get(), H5T_STR_NULLTERM), "making a string type");
  TRIAD_H5(s, H5Tset_cset(type.get(), H5T_CSET_UTF8), "making a string type");
  s.set_attr(object, key, type.get(), value.c_str(), Digest().add(std::string("string")).add(value));
}

void H5File::set_attr_int64(const std::string& object, const std::string& key, int64_t value) {
  state().set_attr(object, key, H5T_NATIVE_INT64, &value, Digest().add(std::string("int64")).add(value));
}

void H5File::set_attr_uint64(const std::string& object, const std::string& key, uint64_t value) {
  state().set_attr(object, key, H5T_NATIVE_UINT64, &value, Digest().add(std::string("uint64")).add(int64_t(value)));
}

void H5File::set_attr_double(const std::string& object, const std::string& key, double value) {
  int64_t bits;
  std::memcpy(&bits, &value, 8);
  state().set_attr(object, key, H5T_NATIVE_DOUBLE, &value, Digest().add(std::string("double")).add(bits));
}

void H5File::set_attrs_uint64(const std::vector<std::string>& objects, const std::string& key,
                              const std::vector<uint64_t>& values) {
  H5State& s = state();
  s.check_writable("set_attr");
  TRIAD_CHECK(objects.size() == values.size(), "HDF5 file '" << s.path << "': set_attrs_uint64: " << objects.size()
                                                             << " objects but " << values.size() << " values");
  Digest digest;
  std::string error;
  for (size_t i = 0; i < objects.size(); ++i) {
    digest.add(objects[i]).add(std::string("uint64")).add(int64_t(values[i]));
    if (error.empty()) error = s.attr_key_error(objects[i], key);
  }
  s.agree_on("set_attr", std::to_string(objects.size()) + " objects@" + key, digest, error);
  for (size_t i = 0; i < objects.size(); ++i) s.write_attr(objects[i], key, H5T_NATIVE_UINT64, &values[i]);
}

std::vector<uint64_t> H5File::get_attrs_uint64(const std::vector<std::string>& objects, const std::string& key) const {
  const H5State& s = state();
  s.check_open("get_attr_uint64");
  Digest digest;
  for (const std::string& object : objects) digest.add(object);
  s.agree_on("get_attr_uint64", std::to_string(objects.size()) + " objects@" + key, digest);
  std::vector<uint64_t> out;
  for (const std::string& object : objects)
    out.push_back(s.get_number<uint64_t>(object, key, "get_attr_uint64", H5T_INTEGER, H5T_SGN_NONE, H5T_NATIVE_UINT64,
                                         "an unsigned integer", true));
  return out;
}

std::string H5File::get_attr_string(const std::string& object, const std::string& key) const {
  const H5State& s = state();
  Hid type;
  Hid attr = s.open_attr(object, key, "get_attr_string", type);
  const std::string what = "attribute '" + key + "' of '" + object + "'";
  TRIAD_CHECK(H5Tget_class(type.get()) == H5T_STRING, "HDF5 file '" << s.path << "': " << what << " holds "
                                                                    << describe_type(type.get())
                                                                    << ", expected a string");
  const htri_t variable = TRIAD_H5(s, H5Tis_variable_str(type.get()), "reading the type of " << what);
  if (variable > 0) {
    Hid mem(TRIAD_H5(s, H5Tcopy(H5T_C_S1), "reading " << what), H5Tclose);
    TRIAD_H5(s, H5Tset_size(mem.get(), H5T_VARIABLE), "reading " << what);
    TRIAD_H5(s, H5Tset_cset(mem.get(), H5Tget_cset(type.get())), "reading " << what);
    char* p = nullptr;
    TRIAD_H5(s, H5Aread(attr.get(), mem.get(), &p), "reading " << what);
    std::string value = p ? p : "";
    H5free_memory(p);
    return value;
  }
  const size_t size = H5Tget_size(type.get());
  std::string value(size, '\0');
  Hid mem(TRIAD_H5(s, H5Tget_native_type(type.get(), H5T_DIR_DEFAULT), "reading " << what), H5Tclose);
  TRIAD_H5(s, H5Aread(attr.get(), mem.get(), value.data()), "reading " << what);
  value.resize(std::min(value.find('\0'), value.size()));
  if (H5Tget_strpad(type.get()) == H5T_STR_SPACEPAD) value.erase(value.find_last_not_of(' ') + 1);
  return value;
}

int64_t H5File::get_attr_int64(const std::string& object, const std::string& key) const {
  return state().get_number<int64_t>(object, key, "get_attr_int64", H5T_INTEGER, H5T_SGN_2, H5T_NATIVE_INT64,
                                     "a signed integer");
}

uint64_t H5File::get_attr_uint64(const std::string& object, const std::string& key) const {
  return state().get_number<uint64_t>(object, key, "get_attr_uint64", H5T_INTEGER, H5T_SGN_NONE, H5T_NATIVE_UINT64,
                                      "an unsigned integer");
}

double H5File::get_attr_double(const std::string& object, const std::string& key) const {
  return state().get_number<double>(object, key, "get_attr_double", H5T_FLOAT, H5T_SGN_ERROR, H5T_NATIVE_DOUBLE,
                                    "a float");
}

bool H5File::has_attr(const std::string& object, const std::string& key) const {
  const H5State& s = state();
  s.check_open("has_attr");
  s.agree_on("has_attr", object + "@" + key, Digest());
  Hid obj = s.open_object(object, "has_attr");
  return TRIAD_H5(s, H5Aexists(obj.get(), key.c_str()), "looking up attribute '" << key << "' of '" << object << "'") >
         0;
}

AttrType H5File::attr_type(const std::string& object, const std::string& key) const {
  const H5State& s = state();
  Hid type;
  s.open_attr(object, key, "attr_type", type);
  switch (H5Tget_class(type.get())) {
    case H5T_STRING:
      return AttrType::string;
    case H5T_INTEGER:
      return H5Tget_sign(type.get()) == H5T_SGN_NONE ? AttrType::uint64 : AttrType::int64;
    case H5T_FLOAT:
      return AttrType::f64;
    default:
      TRIAD_CHECK(false, "HDF5 file '" << s.path << "': attribute '" << key << "' of '" << object << "' holds "
                                       << describe_type(type.get()) << ", not a string or number");
  }
  return AttrType::string;
}

std::vector<std::string> H5File::list_attrs(const std::string& object) const {
  const H5State& s = state();
  s.check_open("list_attrs");
  s.agree_on("list_attrs", object, Digest());
  Hid obj = s.open_object(object, "list_attrs");
  std::vector<std::string> names;
  auto add = [](hid_t, const char* name, const H5A_info_t*, void* data) -> herr_t {
    static_cast<std::vector<std::string>*>(data)->push_back(name);
    return 0;
  };
  TRIAD_H5(s, H5Aiterate2(obj.get(), H5_INDEX_NAME, H5_ITER_INC, nullptr, add, &names),
           "listing the attributes of '" << object << "'");
  std::sort(names.begin(), names.end());
  return names;
}

void H5File::flush() {
  H5State& s = state();
  s.check_open("flush");
  std::string failed;
  try {
    TRIAD_H5(s, H5Fflush(s.file, H5F_SCOPE_GLOBAL), "flushing");
  } catch (const Error& e) {
    failed = e.what();
    s.write_failed = s.writable;
  }
  s.agree_on("flush", "", Digest(), failed);
}

void H5File::close() {
  if (!s_ || s_->file < 0) return;
  H5State& s = *s_;
  if (s.write_failed) {
    abandon();
    return;
  }
  s.dxpl.reset();
  errno = 0;
  const herr_t rc = H5Fclose(std::exchange(s.file, H5I_INVALID_HID));
  const int err = errno;
  s.free_comm();
  if (rc < 0) {
    TRIAD_CHECK(false, "HDF5 file '" << s.path << "': closing the file failed: " << hdf5_message_with(err));
  }
}

void H5File::abandon() {
  if (!s_ || s_->file < 0) return;
  s_->file = H5I_INVALID_HID;
  s_->comm = MPI_COMM_NULL;  // its duplicate stays with the abandoned file
}

}  // namespace triad::io
