// H5File: an HDF5 file of named N-d datasets and attributes, written and read by element
// ranges of each dataset's flattened (row-major) contents. It is the file layer of triad's
// checkpoints: each rank writes the element range of a tensor it owns (a ZeRO shard is an
// element range of a flat buffer), and a reader with another partition reads its own ranges.
//
// Two modes:
// - serial (create(path), open(path)): one process, HDF5's sec2 driver; needs no MPI (an
//   inspector run without mpirun, unit tests).
// - parallel (create(path, comm), open(path, comm)): every rank of an MPI communicator
//   opens the file through MPI-IO (H5Pset_fapl_mpio) with collective metadata operations
//   (reads and writes).
//
// Contracts:
// - Parallel mode: every method is collective. All ranks call the same methods in the same
//   order with the same arguments, except the element ranges (first, tensor) of
//   write_range(s)/read_range(s), which are each rank's own (possibly empty). Names,
//   dtypes, shapes and attribute values are compared across ranks (an all-reduce of a
//   hash) and a mismatch throws Error on every rank instead of corrupting the file or
//   hanging; so does an invalid range on any rank (the others' message says which op
//   failed elsewhere). Errors HDF5 reports inside a collective operation are thrown where
//   they occur.
// - The batch methods (create_datasets, write_ranges, read_ranges, shapes,
//   set/get_attrs_uint64) do what their one-item forms do to each item, with one agreement
//   for the whole batch instead of one per item: a checkpoint of hundreds of datasets
//   would otherwise pay hundreds of round trips among the ranks.
// - Data transfers are independent MPI-IO (H5FD_MPIO_INDEPENDENT) once the ranks have
//   agreed on them: each rank's part of a dataset is one contiguous range of the file,
//   which it reads or writes itself, with no collective call per dataset. (Two-phase
//   collective buffering would ship every byte through an aggregator rank, and HDF5's
//   collective transfers make collective calls of their own for each dataset.)
// - Names are absolute HDF5 paths: "/model/h.0.attn.weight". Creating a dataset or group
//   creates its missing parent groups. Attributes live on "/" (the file) or on any group
//   or dataset.
// - Dataset dtypes map to HDF5 types: f32, f64 (IEEE little-endian), i64, i32, i8 (signed
//   integers), f16 (IEEE binary16: 1 sign, 5 exponent, 10 mantissa bits, bias 15) and
//   bf16 (1 sign, 8 exponent, 7 mantissa bits, bias 127), both HDF5 float types built
//   field by field where the installed HDF5 lacks predefined ones (h5dump prints their
//   values as numbers). Reading recognises each of these from the file's type (class,
//   size, bit fields, exponent bias; either byte order); any other type throws Error
//   naming it. Transfers never convert: the tensor's dtype must be the dataset's.
// - Storage is contiguous and unfilled: elements never written read back unspecified
//   (creating a multi-GB dataset costs no I/O).
// - Every HDF5 and MPI return code is checked. HDF5's own error printing is off; a failure
//   throws triad::Error naming the file, the operation, the dataset/attribute, the rank
//   (parallel mode) and HDF5's innermost error message.
// - Not thread-safe (nor is Debian's parallel HDF5 build): use the files of a process from
//   one thread at a time, and in parallel mode only from the thread that initialized MPI.
// - Close parallel files before MPI is finalized. The destructor closes silently, except
//   in parallel mode while an exception unwinds the stack: then the file is abandoned
//   (closing is collective and the other ranks may never join; see DESIGN.md, a failing
//   job aborts). After catching an error that every rank saw, call close() explicitly.
// - A failed write (write_range(s), flush) throws on every rank of a parallel file together
//   (the ranks agree on each batch's outcome), and the file can then only be abandoned
//   (close() and the destructor do so): remove it.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "io/placement.h"
#include "tensor/tensor.h"

namespace triad::parallel {
class Communicator;
}

namespace triad::io {

namespace detail {
struct H5State;  // the open file (h5file.cpp)
}

enum class H5Access { read_only, read_write };
enum class AttrType { string, int64, uint64, f64 };

class H5File {
 public:
  // Creates `path`, replacing an existing file. Serial mode.
  static H5File create(const std::string& path);
  // Parallel mode over comm, collective. comm is an MPI communicator (MpiCommunicator, or a
  // CountingCommunicator over one); a SelfCommunicator gives a serial file. Any other
  // kind throws Error.
  static H5File create(const std::string& path, const parallel::Communicator& comm);
  // Opens an existing file. Throws Error naming the path when it is missing, not HDF5 or
  // damaged (truncated).
  static H5File open(const std::string& path, H5Access access = H5Access::read_only);
  static H5File open(const std::string& path, const parallel::Communicator& comm,
                     H5Access access = H5Access::read_only);

  H5File(H5File&& other) noexcept;
  H5File& operator=(H5File&& other) noexcept;  // closes this file first (as the destructor)
  H5File(const H5File&) = delete;
  H5File& operator=(const H5File&) = delete;
  ~H5File();

  const std::string& path() const;
  bool is_open() const;
  bool is_parallel() const;
  bool is_writable() const;

  // --- datasets

  // A dataset of `shape` (may be 0-d; dimensions may be 0) and dtype; throws Error when the
  // name exists.
  void create_dataset(const std::string& name, DType dtype, const Shape& shape);
  struct DatasetSpec {
    std::string name;
    DType dtype = DType::f32;
    Shape shape;
  };
  void create_datasets(const std::vector<DatasetSpec>& specs);  // each as create_dataset
  // A group (and its missing parents); nothing when it exists.
  void create_group(const std::string& name);
  bool has(const std::string& name) const;  // a dataset called `name` exists
  // Those of `names` that are not datasets of the file, in order (one collective call).
  std::vector<std::string> missing_datasets(const std::vector<std::string>& names) const;
  bool has_group(const std::string& name) const;
  Shape shape(const std::string& name) const;
  std::vector<Shape> shapes(const std::vector<std::string>& names) const;  // each as shape()
  DType dtype(const std::string& name) const;
  std::vector<DType> dtypes(const std::vector<std::string>& names) const;  // each as dtype()
  // The paths of all datasets in the file, recursively, sorted.
  std::vector<std::string> list_datasets() const;

  // Writes data's elements (any shape; contiguous CPU, the dataset's dtype) to elements
  // [first, first + data.numel()) of the dataset's flattening. Any count, 0 included.
  void write_range(const std::string& name, int64_t first, const Tensor& data);
  // Reads elements [first, first + out.numel()) into out (contiguous CPU, the dataset's
  // dtype).
  void read_range(const std::string& name, int64_t first, const Tensor& out) const;

  // Elements [first, first + data.numel()) of dataset `name`, and the tensor they come from
  // (write) or go to (read).
  // With a placement (io/placement.h), the tensor is a part of the dataset: `first` counts
  // in the flattening of a tensor of `part_shape` placed in the dataset by `placement`, and
  // only the range's elements that are not padding are transferred (padding read stays as
  // it was).
  struct TensorRange {
    std::string name;
    int64_t first = 0;
    Tensor data;
    Shape part_shape = {};
    Placement placement = {};
  };
  // Each range as write_range / read_range, in order. read_ranges calls done(i), when
  // given, as soon as range i is read, before the next is: the caller may work on it (a
  // checksum, a copy to a device) while the rest is still to come.
  void write_ranges(const std::vector<TensorRange>& ranges);
  void read_ranges(const std::vector<TensorRange>& ranges, const std::function<void(size_t)>& done = {}) const;
  // The whole dataset as a new tensor of its shape and dtype (every rank reads all of it).
  Tensor read(const std::string& name) const;


  // Transfers larger than this many bytes are split into several HDF5 calls. Default
  // 1 GiB: each MPI-IO request stays well below the 2^31-byte limit of MPI's int counts.
  // Local setting; need not agree.
  void set_max_transfer_bytes(int64_t bytes);
  int64_t max_transfer_bytes() const;

  // --- attributes on `object` ("/" for the file, or a group or dataset path). Setting
  // replaces an existing attribute of that key, of any type. Strings are fixed-length,
  // null-terminated UTF-8 (h5dump shows them); both fixed and variable-length strings are
  // read. Getters throw Error naming the file, object and key when the attribute is
  // missing or of another type (integers of up to 64 bits and floats convert exactly:
  // int64 accepts any signed integer, uint64 any unsigned one, double any float).

  void set_attr_string(const std::string& object, const std::string& key, const std::string& value);
  void set_attr_int64(const std::string& object, const std::string& key, int64_t value);
  void set_attr_uint64(const std::string& object, const std::string& key, uint64_t value);
  void set_attr_double(const std::string& object, const std::string& key, double value);
  std::string get_attr_string(const std::string& object, const std::string& key) const;
  int64_t get_attr_int64(const std::string& object, const std::string& key) const;
  uint64_t get_attr_uint64(const std::string& object, const std::string& key) const;
  double get_attr_double(const std::string& object, const std::string& key) const;
  // Attribute `key` of each of `objects`, as set_attr_uint64 / get_attr_uint64.
  void set_attrs_uint64(const std::vector<std::string>& objects, const std::string& key,
                        const std::vector<uint64_t>& values);
  std::vector<uint64_t> get_attrs_uint64(const std::vector<std::string>& objects, const std::string& key) const;
  bool has_attr(const std::string& object, const std::string& key) const;
  AttrType attr_type(const std::string& object, const std::string& key) const;
  std::vector<std::string> list_attrs(const std::string& object) const;  // sorted by name

  // --- file

  // Pushes HDF5's buffers to the file (H5Fflush, global scope). In parallel mode a failure
  // on any rank throws on every rank.
  void flush();
  // Closes the file, throwing Error when HDF5 reports a failure (e.g. a failed write-back).
  // Idempotent. Any other method of a closed file throws Error. A file whose write or flush
  // failed is abandoned instead (below).
  void close();
  // Gives the file up without closing it: HDF5 keeps its handle (and descriptor) until the
  // process exits. What a file whose write failed comes to, since HDF5 1.10 cannot close
  // one (the close retries the failed write-back and leaves a half-freed file behind that
  // crashes the library later); the caller removes it. Idempotent; the file reads as closed.
  void abandon();

 private:
  explicit H5File(std::unique_ptr<detail::H5State> state);
  const detail::H5State& state() const;
  detail::H5State& state();
  std::unique_ptr<detail::H5State> s_;
};

}  // namespace triad::io
