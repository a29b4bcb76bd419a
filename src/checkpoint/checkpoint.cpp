#include "checkpoint/checkpoint.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <future>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include "checkpoint/quantized_model.h"
#include "config/model_factory.h"
#include "io/checksum.h"
#include "io/h5file.h"
#include "parallel/self_communicator.h"
#include "tensor/ops.h"
#include "tensor/random.h"

namespace triad::engine {

namespace {

using State = zero::ZeroOptimizer::State;
using Slice = zero::ZeroOptimizer::Slice;
using io::H5File;

constexpr State kOptimStates[] = {State::master, State::exp_avg, State::exp_avg_sq};

std::string dataset_of(State state, const std::string& param) {
  switch (state) {
    case State::param:
      return "/model/" + param;
    case State::master:
      return "/optim/" + param + "/master";
    case State::exp_avg:
      return "/optim/" + param + "/exp_avg";
    case State::exp_avg_sq:
      return "/optim/" + param + "/exp_avg_sq";
  }
  TRIAD_ASSERT(false);
}

zero::ZeroOptimizer& zero_of(Engine& engine) {
  TRIAD_CHECK(engine.zero() != nullptr, "[checkpoint] checkpoints hold AdamW's state; optimizer.type \""
                                            << engine.config().optimizer.type << "\" cannot be checkpointed");
  return *engine.zero();
}

// This rank's slice of each parameter, by name (a rank's shard covers at most one range of
// each parameter, since a parameter lies in one flat group).
std::map<std::string, Slice> by_name(std::vector<Slice> slices) {
  std::map<std::string, Slice> out;
  for (Slice& s : slices) {
    const std::string name = s.name;
    TRIAD_ASSERT(out.emplace(name, std::move(s)).second);
  }
  return out;
}

// The slice's values, or no elements when this rank holds none of the parameter.
std::pair<int64_t, Tensor> range_of(const std::map<std::string, Slice>& slices, const std::string& name, DType dtype) {
  const auto it = slices.find(name);
  if (it == slices.end()) return {0, Tensor::empty({0}, dtype)};
  return {it->second.first, it->second.values};
}

// A parameter as the file holds it: its dataset has the global shape, and this rank's
// tensor is its tensor-parallel part (nn/tensor_split.h), placed along the split dimension
// (io/placement.h). A replicated parameter is written by tp rank 0 alone (the `writer`),
// and read by every rank.
struct Param {
  std::string name;
  Tensor local;
  Shape global;
  io::Placement placement;
  bool writer;

  // The range [first, first + values.numel()) of this rank's part of dataset ds.
  H5File::TensorRange range(const std::string& ds, int64_t first, const Tensor& values) const {
    return {ds, first, values, local.shape(), placement};
  }
};

// Every rank's strings, in rank order (collective over comm).
std::vector<std::string> all_gather_strings(parallel::Communicator& comm, const std::string& mine) {
  const Tensor length = Tensor::from_vector(std::vector<int64_t>{int64_t(mine.size())}, {1});
  const Tensor lengths = Tensor::empty({comm.size()}, DType::i64);
  comm.all_gather(length, lengths)->wait();
  const std::vector<int64_t> n = lengths.to_vector<int64_t>();
  const int64_t longest = *std::max_element(n.begin(), n.end());
  const Tensor padded = Tensor::zeros({longest}, DType::i8);
  std::copy(mine.begin(), mine.end(), static_cast<char*>(padded.raw_data()));
  const Tensor all = Tensor::empty({longest * comm.size()}, DType::i8);
  comm.all_gather(padded, all)->wait();
  std::vector<std::string> out;
  for (int r = 0; r < comm.size(); ++r)
    out.emplace_back(static_cast<const char*>(all.raw_data()) + r * longest, size_t(n[size_t(r)]));
  return out;
}

// `out` and, after them, those of the other ranks of `group` (by rank) that `out` does not
// name, with no elements: the same list on every rank of the group. Collective over it.
std::vector<Param> with_those_of(const std::vector<Param>& out, parallel::Communicator& group) {
  if (group.size() == 1) return out;
  nlohmann::json mine = nlohmann::json::array();
  for (const Param& q : out) mine.push_back({q.name, q.global});
  std::vector<Param> all;
  std::set<std::string> named;
  const std::vector<std::string> ranks = all_gather_strings(group, mine.dump());
  for (int s = 0; s < int(ranks.size()); ++s)
    for (const nlohmann::json& entry : nlohmann::json::parse(ranks[size_t(s)])) {
      const std::string name = entry[0].get<std::string>();
      if (!named.insert(name).second) continue;
      const auto it = std::find_if(out.begin(), out.end(), [&](const Param& q) { return q.name == name; });
      if (it != out.end())
        all.push_back(*it);
      else
        all.push_back({name, Tensor::empty({0}), entry[1].get<Shape>(), {}, false});
    }
  return all;
}

// The parameters of the whole model, in the same order on every rank: this rank's, and
// with pipeline parallelism every other stage's too, and with expert parallelism the
// experts the other ranks of its ep group hold (collective over the pipeline and ep
// groups), which this rank neither writes nor reads (no elements) but every rank must name,
// since the file's datasets are created collectively. A tied parameter is written by the
// first stage holding it.
std::vector<Param> params_of(Engine& engine) {
  const auto params = engine.model().named_parameters();
  const auto splits = engine.model().named_splits();
  const bool tp_leader = engine.tp()->rank() == 0;
  std::vector<Param> out;
  for (size_t i = 0; i < params.size(); ++i) {
    const auto& [name, p] = params[i];
    const nn::TensorSplit& split = splits[i].second;
    TRIAD_ASSERT(splits[i].first == name);
    io::Placement placement;
    if (split.is_split()) placement = {split.dim, split.global_indices(p.size(split.dim))};
    const bool writer = (split.is_split() || tp_leader) && !engine.is_tied_copy(name);
    out.push_back({name, p, split.global_shape(p.shape()), std::move(placement), writer});
  }
  return with_those_of(with_those_of(out, *engine.pp()), *engine.ep());
}

// HDF5 and the checksums read and write host memory: the optimizer's slices, which live on
// the training device, cross to the host first (a no-op on the cpu).
Tensor on_host(const Tensor& t) { return ops::to(t, Device::cpu()); }

// Where the file's bytes for `values` land: the tensor itself on the host, else a host
// tensor whose contents are copied to `values` after the read (from_buffer); zero where the
// file has nothing (a padded part's padding).
Tensor host_buffer(const Tensor& values) {
  return values.device().is_cpu() ? values : Tensor::zeros(values.shape(), values.dtype());
}
// Moves what was read into `buffer` to `values`, on their device and in their dtype.
void from_buffer(const Tensor& values, const Tensor& buffer) {
  if (!buffer.is_same(values)) ops::copy_(values, ops::to(buffer, values.device()));
}

// Sums uint64 partial checksums over the ranks exactly (mod 2^64): the 32-bit halves are
// summed separately in i64, which cannot overflow, and recombined.
std::vector<uint64_t> sum_over_ranks(const std::vector<uint64_t>& partial, parallel::Communicator& world) {
  const size_t n = partial.size();
  std::vector<int64_t> halves(2 * n);
  for (size_t i = 0; i < n; ++i)
    halves[2 * i] = int64_t(partial[i] & 0xffffffffu), halves[2 * i + 1] = int64_t(partial[i] >> 32);
  Tensor t = Tensor::from_vector(halves, {int64_t(2 * n)});
  if (n > 0) world.all_reduce(t)->wait();
  const std::vector<int64_t> sums = t.to_vector<int64_t>();
  std::vector<uint64_t> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = uint64_t(sums[2 * i]) + (uint64_t(sums[2 * i + 1]) << 32);
  return out;
}

// Checksums written alongside the data: partial sums per dataset, summed and stored as each
// dataset's "checksum" attribute once all data is written.
//
// The partial sums run on a background thread while the caller goes on transferring:
// saving writes a batch of datasets while their checksums are taken (both only read them),
// loading checksums dataset i while dataset i + 1 is read into other memory. The checksum
// then costs no time beside the transfer's system calls, which keep one core busy copying.
// One batch is summed at a time, on one thread (a second core's worth).
class Checksums {
 public:
  Checksums() = default;
  Checksums(const Checksums&) = delete;
  Checksums& operator=(const Checksums&) = delete;
  ~Checksums() {
    if (pending_.valid()) pending_.wait();  // the thread reads tensors the caller may free
  }

  // Starts the partial sums of the ranges (a dataset, this rank's first element and
  // values, placed in the dataset of shape arrays[i] when they are a part of it). Their
  // values must not change until the next add() or a store()/verify().
  void add(const std::vector<io::H5File::TensorRange>& ranges, const std::vector<Shape>& arrays) {
    finish_pending();
    std::vector<std::pair<io::H5File::TensorRange, Shape>> host;
    for (size_t i = 0; i < ranges.size(); ++i) {
      const auto& r = ranges[i];
      names_.push_back(r.name);
      host.push_back({{r.name, r.first, on_host(r.data), r.part_shape, r.placement}, arrays[i]});
    }
    pending_ = std::async(std::launch::async, [host = std::move(host)] {
      std::vector<uint64_t> sums;
      for (const auto& [r, array] : host)
        sums.push_back(r.placement.is_identity()
                           ? io::tensor_checksum(r.data, r.first, io::ChecksumThreads::calling)
                           : io::placed_checksum(r.data, r.part_shape, r.placement, array, r.first));
      return sums;
    });
  }
  void add(const std::string& dataset, const Tensor& values, int64_t first) { add({{dataset, first, values}}, {{}}); }

  void store(H5File& file, parallel::Communicator& world) {
    finish_pending();
    file.set_attrs_uint64(names_, "checksum", sum_over_ranks(partial_, world));
  }
  // Throws naming every dataset whose checksum differs from its attribute.
  void verify(const H5File& file, parallel::Communicator& world) {
    finish_pending();
    const std::vector<uint64_t> total = sum_over_ranks(partial_, world);
    const std::vector<uint64_t> stored = file.get_attrs_uint64(names_, "checksum");
    std::string bad;
    for (size_t i = 0; i < names_.size(); ++i)
      if (stored[i] != total[i]) bad += (bad.empty() ? "" : ", ") + names_[i];
    TRIAD_CHECK(bad.empty(),
                "checkpoint '" << file.path() << "': dataset " << bad << " fails its checksum (the file is damaged)");
  }

 private:
  void finish_pending() {
    if (!pending_.valid()) return;
    const std::vector<uint64_t> sums = pending_.get();
    partial_.insert(partial_.end(), sums.begin(), sums.end());
  }

  std::vector<std::string> names_;
  std::vector<uint64_t> partial_;
  std::future<std::vector<uint64_t>> pending_;  // the last batch's partial sums, while they run
};

// Creates a batch of datasets and writes this rank's ranges of them, checksummed while
// they are written.
void write_batch(H5File& file, Checksums& sums, const std::vector<H5File::DatasetSpec>& specs,
                 const std::vector<H5File::TensorRange>& writes) {
  file.create_datasets(specs);
  std::vector<Shape> arrays;
  for (const auto& spec : specs) arrays.push_back(spec.shape);
  sums.add(writes, arrays);
  file.write_ranges(writes);
}

// A scalar dataset written by rank 0 (the others take part with no elements).
struct Scalar {
  std::string name;
  Tensor value;
};
void write_scalars(H5File& file, Checksums& sums, const std::vector<Scalar>& scalars, bool leader) {
  std::vector<H5File::DatasetSpec> specs;
  std::vector<H5File::TensorRange> writes;
  for (const Scalar& s : scalars) {
    specs.push_back({s.name, s.value.dtype(), {}});
    writes.push_back({s.name, 0, leader ? s.value : Tensor::empty({0}, s.value.dtype())});
  }
  write_batch(file, sums, specs, writes);
}

void write_root_attrs(H5File& file, const std::string& kind, const nlohmann::json& config,
                      const nlohmann::json& layout) {
  file.set_attr_int64("/", "format_version", kCheckpointFormatVersion);
  file.set_attr_string("/", "kind", kind);
  file.set_attr_string("/", "config", config.dump());
  file.set_attr_string("/", "layout", layout.dump());
}
void write_root_attrs(H5File& file, const std::string& kind, Engine& engine) {
  const TrainConfig& c = engine.config();
  write_root_attrs(file, kind, c.json,
                   {{"dp", engine.dp()->size()},
                    {"tp", engine.tp()->size()},
                    {"pp", engine.pp()->size()},
                    {"zero_stage", c.zero.stage},
                    {"dtype", dtype_name(c.precision.dtype)}});
}

// Makes the written file durable and moves it into place: rank 0 syncs it, renames it and
// syncs the folder; every rank learns whether that worked.
void commit(const std::string& tmp, const std::string& path, parallel::Communicator& world) {
  std::string error;
  if (world.rank() == 0) {
    auto sync = [&](const std::string& p, int flags) {
      const int fd = ::open(p.c_str(), flags);
      if (fd < 0 || ::fsync(fd) != 0) error = "cannot sync '" + p + "': " + std::strerror(errno);
      if (fd >= 0) ::close(fd);
    };
    sync(tmp, O_RDONLY);
    if (error.empty() && std::rename(tmp.c_str(), path.c_str()) != 0)
      error = "cannot rename '" + tmp + "' to '" + path + "': " + std::strerror(errno);
    if (error.empty()) {
      const std::string dir = std::filesystem::path(path).parent_path().string();
      sync(dir.empty() ? "." : dir, O_RDONLY | O_DIRECTORY);
    }
    if (!error.empty()) std::remove(tmp.c_str());
  }
  Tensor failed = Tensor::full({1}, error.empty() ? 0.0 : 1.0, DType::f32);
  world.all_reduce(failed, parallel::ReduceOp::max)->wait();
  TRIAD_CHECK(error.empty(), "[checkpoint] " << error);
  TRIAD_CHECK(failed.item() == 0.0, "[checkpoint] saving '" << path << "' failed on rank 0 (its message says why)");
}

// Why a file of at least `bytes` cannot be written at `tmp` ("" when it can): its folder is
// not writable (EACCES, EROFS), the bytes exceed this process's file size limit (EFBIG) or
// the free space of the file system (ENOSPC; a stale `tmp`, which the save replaces, counts
// as free). Checked before the save starts, since a write failing part-way through parallel
// HDF5's collective calls can leave the ranks waiting on each other.
std::string no_room_for(const std::string& tmp, uint64_t bytes) {
  const std::string dir = std::filesystem::path(tmp).parent_path().string();
  const std::string folder = dir.empty() ? "." : dir;
  if (::access(folder.c_str(), W_OK) != 0)
    return "cannot write to the folder '" + folder + "': " + std::strerror(errno);
  rlimit limit{};
  if (::getrlimit(RLIMIT_FSIZE, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY && bytes > limit.rlim_cur)
    return "'" + tmp + "' needs at least " + std::to_string(bytes) +
           " bytes, more than this process's file size limit (" + std::to_string(limit.rlim_cur) +
           " bytes, ulimit -f): " + std::strerror(EFBIG);
  struct statvfs fs {};
  if (::statvfs(folder.c_str(), &fs) != 0)
    return "cannot read the free space of '" + folder + "': " + std::strerror(errno);
  std::error_code ec;
  const uintmax_t stale = std::filesystem::file_size(tmp, ec);
  const uint64_t free = uint64_t(fs.f_bavail) * fs.f_frsize + (ec ? 0 : stale);
  if (free < bytes)
    return "'" + tmp + "' needs at least " + std::to_string(bytes) + " bytes, the file system of '" + folder +
           "' has " + std::to_string(free) + " free: " + std::strerror(ENOSPC);
  return "";
}

// The lowest failing rank and its `error` ("" on every rank when none failed), the same on
// every rank. Collective over `world`.
std::pair<int, std::string> first_failure(const std::string& error, parallel::Communicator& world) {
  Tensor first = Tensor::full({1}, error.empty() ? double(world.size()) : double(world.rank()), DType::f64);
  world.all_reduce(first, parallel::ReduceOp::min)->wait();
  const int failed = int(first.item());
  if (failed == world.size()) return {failed, ""};
  Tensor size = Tensor::from_vector(std::vector<int64_t>{int64_t(error.size())}, {1});
  world.broadcast(size, failed)->wait();
  Tensor bytes = Tensor::zeros({int64_t(size.item())}, DType::i8);
  if (world.rank() == failed) std::copy(error.begin(), error.end(), reinterpret_cast<char*>(bytes.data<int8_t>()));
  if (bytes.numel() > 0) world.broadcast(bytes, failed)->wait();
  const char* p = reinterpret_cast<const char*>(bytes.data<int8_t>());
  return {failed, std::string(p, p + bytes.numel())};
}

// Throws on every rank when `error` is set on any: the lowest failing rank's message goes to
// every rank, so that each names the cause, and rank 0 removes the temporary file `tmp`
// (emptied first: a rank may still hold it open). Collective over `world`.
void throw_if_failed_anywhere(const std::string& path, const std::string& tmp, const std::string& error,
                              parallel::Communicator& world) {
  const auto [failed, message] = first_failure(error, world);
  if (failed == world.size()) return;
  if (world.rank() == 0 && ::truncate(tmp.c_str(), 0) == 0) std::remove(tmp.c_str());
  TRIAD_CHECK(false, "[checkpoint] saving '" << path << "' failed"
                                             << (world.rank() == failed ? "" : " on rank " + std::to_string(failed))
                                             << ": " << message);
}

// Creates `path` (at least `bytes` long: its datasets' bytes) through a temporary file:
// `write` fills it, then it is committed. When the folder has no room for it (no_room_for)
// or writing fails on any rank (a full disk, an I/O error), every rank throws naming the
// file and the cause, the temporary file is removed and no other file changes.
template <typename Write>
void write_file(const std::string& path, uint64_t bytes, parallel::Communicator& world, Write write) {
  const std::string tmp = path + ".tmp";
  throw_if_failed_anywhere(path, tmp, no_room_for(tmp, bytes), world);
  std::string error;
  try {
    H5File file = H5File::create(tmp, world);
    try {
      write(file);
      file.flush();
      file.close();
    } catch (...) {
      try {
        file.close();  // abandons a file whose write failed (io/h5file.h)
      } catch (const std::exception&) {
        // The first failure is the one reported.
      }
      throw;
    }
  } catch (const std::exception& e) {
    error = e.what();
  }
  throw_if_failed_anywhere(path, tmp, error, world);
  commit(tmp, path, world);
}

// Note [Streamed checkpoints] (zero/zero_optimizer.h), the file's side. Each state's
// datasets are transferred in batches: batch k holds the parameters of every rank's k-th view
// batch (their union, in the order of params), the same list on every rank since H5File's
// transfers are collective; a rank with fewer view batches (another pipeline stage) takes
// part in the rest with no elements, and a last batch names the parameters no rank's view
// batches hold (transferred by none). A rank holds one batch of its state at a time (and
// its checksum, taken behind the next batch's transfer). Without offload there is one batch
// of every parameter, on every rank alike (no agreement needed).
struct Plan {
  std::vector<zero::ZeroOptimizer::ViewBatch> views;  // this rank's view of each batch (no groups where it has none)
  std::vector<std::vector<size_t>> batches;           // each batch's parameters, as indices into params
  bool offloaded = false;  // the state is out of memory (swap files, host parameters): views read it in
};

// Every parameter in one batch, viewed through `view`.
Plan one_batch(const std::vector<Param>& params, zero::ZeroOptimizer::ViewBatch view) {
  Plan plan;
  plan.views = {std::move(view)};
  plan.batches.emplace_back(params.size());
  for (size_t i = 0; i < params.size(); ++i) plan.batches[0][i] = i;
  return plan;
}

// Collective over `world` with offload.
Plan plan_of(Engine& engine, const std::vector<Param>& params, parallel::Communicator& world) {
  Plan plan;
  zero::ZeroOptimizer* zero = engine.zero();
  const zero::ZeroConfig& c = engine.config().zero;
  plan.offloaded = zero != nullptr && (c.offload_optimizer.device == zero::OffloadDevice::nvme ||
                                       zero->param_swap() != nullptr);  // (nvme, or host memory on a GPU)
  if (!plan.offloaded) {
    const std::vector<zero::ZeroOptimizer::ViewBatch> views =
        zero ? zero->view_batches() : std::vector<zero::ZeroOptimizer::ViewBatch>{};
    TRIAD_ASSERT(views.size() <= 1);
    return one_batch(params, views.empty() ? zero::ZeroOptimizer::ViewBatch{} : views.front());
  }
  plan.views = zero->view_batches();
  std::map<std::string, size_t> index;
  for (size_t i = 0; i < params.size(); ++i) index.emplace(params[i].name, i);
  nlohmann::json mine = nlohmann::json::array();
  for (const zero::ZeroOptimizer::ViewBatch& v : plan.views) {
    std::vector<size_t> ids;
    for (const std::string& name : v.params) ids.push_back(index.at(name));
    mine.push_back(ids);
  }
  std::vector<std::set<size_t>> batches;
  for (const std::string& rank : all_gather_strings(world, mine.dump())) {
    const nlohmann::json theirs = nlohmann::json::parse(rank);
    if (batches.size() < theirs.size()) batches.resize(theirs.size());
    for (size_t k = 0; k < theirs.size(); ++k)
      for (const nlohmann::json& id : theirs[k]) batches[k].insert(id.get<size_t>());
  }
  std::vector<bool> named(params.size(), false);
  for (const std::set<size_t>& b : batches) {
    plan.batches.emplace_back(b.begin(), b.end());
    for (size_t i : b) named[i] = true;
  }
  std::vector<size_t> rest;
  for (size_t i = 0; i < params.size(); ++i)
    if (!named[i]) rest.push_back(i);
  if (!rest.empty()) plan.batches.push_back(std::move(rest));
  plan.views.resize(plan.batches.size());
  return plan;
}

// A streamed checkpoint's pages leave the page cache as it goes: the file's cached pages
// count in the memory of the process's cgroup like any other, and a checkpoint larger than
// memory would otherwise fill it. After each batch, each rank syncs what it wrote (drop(true))
// and tells the kernel to drop the file's cached pages (what a load read too, drop(false)),
// so a save or load holds about a batch. A sync that fails is remembered (error()): the save
// reports it on every rank together (first_failure). Does nothing when not enabled.
class PageCache {
 public:
  PageCache(const std::string& path, bool enabled) : path_(path), fd_(enabled ? ::open(path.c_str(), O_RDONLY) : -1) {
    if (enabled && fd_ < 0) error_ = "cannot open '" + path + "' to sync it: " + std::strerror(errno);
  }
  ~PageCache() {
    if (fd_ >= 0) ::close(fd_);
  }
  PageCache(const PageCache&) = delete;
  PageCache& operator=(const PageCache&) = delete;

  void drop(bool written) {
    if (fd_ < 0) return;
    if (written && ::fdatasync(fd_) != 0 && error_.empty())
      error_ = "cannot sync '" + path_ + "': " + std::strerror(errno);
    ::posix_fadvise(fd_, 0, 0, POSIX_FADV_DONTNEED);  // advice: a page still dirty stays
  }
  const std::string& error() const { return error_; }

 private:
  std::string path_;
  int fd_;
  std::string error_;
};

}  // namespace

void throw_if_any(const std::string& error, parallel::Communicator& world) {
  const auto [failed, message] = first_failure(error, world);
  TRIAD_CHECK(failed == world.size(),
              message << (world.rank() == failed ? "" : " (rank " + std::to_string(failed) + ")"));
}

namespace {

// f()'s result. With offload, where f reads the swap files (a view), which can fail on one
// rank (a damaged or truncated file), every rank learns of a failure before the next
// collective transfer and throws it (collective over `world`).
template <typename F>
auto agreed(const Plan& plan, parallel::Communicator& world, F f) -> decltype(f()) {
  if (!plan.offloaded) return f();
  std::optional<decltype(f())> out;
  std::string error;
  try {
    out.emplace(f());
  } catch (const std::exception& e) {
    error = e.what();
  }
  throw_if_any(error, world);
  return std::move(*out);
}

// Writes the datasets of `state` (created here) batch by batch: batch k's values are
// this rank's slices of `owned(k)` (an empty map where it writes none); `stored` the datasets' dtype.
template <typename Owned>
void write_streamed(H5File& file, Checksums& sums, PageCache& pages, const std::vector<Param>& params, const Plan& plan,
                    State state, DType stored, Owned owned, parallel::Communicator& world) {
  std::vector<H5File::DatasetSpec> specs;
  for (const Param& q : params) specs.push_back({dataset_of(state, q.name), stored, q.global});
  file.create_datasets(specs);
  for (size_t k = 0; k < plan.batches.size(); ++k) {
    const std::map<std::string, Slice> mine = agreed(plan, world, [&] { return owned(k); });
    std::vector<H5File::TensorRange> writes;
    std::vector<Shape> arrays;
    for (size_t i : plan.batches[k]) {
      const Param& q = params[i];
      const std::string ds = dataset_of(state, q.name);
      const auto [first, values] = q.writer ? range_of(mine, q.name, stored) : range_of({}, q.name, stored);
      writes.push_back(q.range(ds, first, on_host(ops::to(values, stored))));
      arrays.push_back(q.global);
    }
    sums.add(writes, arrays);
    file.write_ranges(writes);
    pages.drop(true);
  }
}

// The bytes of the datasets of `params` stored in `dtypes` each.
uint64_t dataset_bytes(const std::vector<Param>& params, std::initializer_list<DType> dtypes) {
  uint64_t per_element = 0;
  for (DType dt : dtypes) per_element += element_size(dt);
  uint64_t n = 0;
  for (const Param& q : params) n += uint64_t(numel(q.global));
  return n * per_element;
}

Tensor scalar_i64(int64_t v) { return Tensor::from_vector(std::vector<int64_t>{v}, {}); }
Tensor scalar_f64(double v) { return Tensor::full({}, v, DType::f64); }

// Every parameter's dataset must exist with the parameter's global shape, and the
// architecture and its heads must be the same (what shapes do not show).
void check_same_model(const H5File& file, Engine& engine, const std::vector<Param>& params) {
  std::vector<std::string> names;
  for (const Param& q : params) names.push_back("/model/" + q.name);
  const std::vector<std::string> missing = file.missing_datasets(names);
  TRIAD_CHECK(missing.empty(), "checkpoint '" << file.path() << "' has no dataset " << missing.front()
                                              << ": it holds another model than model.* describes");
  const std::vector<Shape> shapes = file.shapes(names);
  for (size_t i = 0; i < params.size(); ++i)
    TRIAD_CHECK(shapes[i] == params[i].global, "checkpoint '" << file.path() << "': dataset " << names[i]
                                                              << " has shape " << shape_str(shapes[i])
                                                              << ", the model's is " << shape_str(params[i].global));
  const nlohmann::json saved = nlohmann::json::parse(file.get_attr_string("/", "config"));
  if (!saved.contains("model")) return;
  const nlohmann::json& m = saved["model"];
  const std::string& arch = engine.config().arch;
  TRIAD_CHECK(m.value("arch", std::string("gpt2")) == arch, "checkpoint '" << file.path() << "' holds a model of arch "
                                                                           << m.value("arch", std::string("gpt2"))
                                                                           << ", the config says " << arch);
  const ModelShape shape = model_shape(engine.config());
  const int64_t heads = m.value("n_head", shape.n_head);
  TRIAD_CHECK(heads == shape.n_head, "checkpoint '" << file.path() << "' was trained with model.n_head " << heads
                                                    << ", the config says " << shape.n_head);
  if (arch == "llama")
    TRIAD_CHECK(m.value("n_kv_head", heads) == shape.n_kv_head,
                "checkpoint '" << file.path() << "' was trained with model.n_kv_head " << m.value("n_kv_head", heads)
                               << ", the config says " << shape.n_kv_head);
}

void check_kind(const H5File& file, const std::string& kind) {
  TRIAD_CHECK(file.has_attr("/", "format_version") && file.has_attr("/", "kind"),
              "'" << file.path() << "' is an HDF5 file but not a triad checkpoint (no format_version/kind attributes)");
  const int64_t version = file.get_attr_int64("/", "format_version");
  TRIAD_CHECK(version == kCheckpointFormatVersion, "checkpoint '" << file.path() << "' has format version " << version
                                                                  << "; this build reads version "
                                                                  << kCheckpointFormatVersion);
  const std::string found = file.get_attr_string("/", "kind");
  TRIAD_CHECK(kind.empty() || found == kind || found != "quantized",
              "'" << file.path() << "' is a quantized model (triad-compress): it runs inference only; training "
                  << "resumes from a full-precision " << kind);
  TRIAD_CHECK(kind.empty() || found == kind,
              "'" << file.path() << "' is a " << found << " file, not a " << kind << " (training state is needed)");
}

// Each rank's row of a generator's state, in a (ranks, 2) i64 dataset: (seed, offset).
void write_generator(H5File& file, Checksums& sums, const std::string& name, const Generator& gen,
                     parallel::Communicator& world) {
  file.create_dataset(name, DType::i64, {world.size(), 2});
  const GeneratorState state = gen.state();
  const Tensor row = Tensor::from_vector(std::vector<int64_t>{int64_t(state.seed), int64_t(state.offset)}, {2});
  file.write_range(name, 2 * world.rank(), row);
  sums.add(name, row, 2 * world.rank());
}

// The weights file: batch k of `plan` (over `params`, params_of(engine)) from `owned(k)`,
// this rank's owned f32 elements of it by parameter name.
template <typename Owned>
void save_weights_of(const std::string& path, Engine& engine, parallel::Communicator& world, DType dtype,
                     const std::vector<Param>& params, const Plan& plan, Owned owned) {
  TRIAD_CHECK(dtype == DType::f32 || dtype == DType::bf16,
              "weights are saved in f32 or bf16, not " << dtype_name(dtype));
  write_file(path, dataset_bytes(params, {dtype}), world, [&](H5File& file) {
    Checksums sums;
    PageCache pages(file.path(), plan.offloaded);
    write_streamed(file, sums, pages, params, plan, State::param, dtype, owned, world);
    throw_if_any(pages.error(), world);
    sums.store(file, world);
    write_root_attrs(file, "weights", engine);
  });
}

}  // namespace

void save_checkpoint(const std::string& path, Engine& engine, parallel::Communicator& world) {
  zero::ZeroOptimizer& zero = zero_of(engine);
  const DType dtype = engine.config().precision.dtype;
  const std::vector<Param> params = params_of(engine);
  const Plan plan = plan_of(engine, params, world);
  write_file(path, dataset_bytes(params, {dtype, DType::f32, DType::f32, DType::f32}), world, [&](H5File& file) {
    Checksums sums;
    PageCache pages(file.path(), plan.offloaded);
    // A state at a time, a batch of it at a time (Note [Streamed checkpoints]): what one
    // batch stages on the host is a quarter of this rank's share without offload, and with
    // it a batch of one state.
    for (State state : {State::param, State::master, State::exp_avg, State::exp_avg_sq}) {
      const auto owned = [&](size_t k) { return by_name(zero.state_view(state, plan.views[k]).owned_slices()); };
      write_streamed(file, sums, pages, params, plan, state, state == State::param ? dtype : DType::f32, owned, world);
    }
    throw_if_any(pages.error(), world);
    const zero::ZeroOptimizer::Counters counters = zero.counters();
    write_scalars(file, sums,
                  {{"/state/step", scalar_i64(engine.global_step())},
                   {"/state/optimizer_steps", scalar_i64(counters.steps)},
                   {"/state/loss_scale", scalar_f64(counters.loss_scale.scale)},
                   {"/state/loss_scale_hysteresis", scalar_i64(counters.loss_scale.hysteresis_left)},
                   {"/state/loss_scale_clean_steps", scalar_i64(counters.loss_scale.clean_steps)}},
                  world.rank() == 0);
    write_generator(file, sums, "/state/rng", default_generator(), world);
    write_generator(file, sums, "/state/rng_tp", tensor_parallel_generator(), world);
    sums.store(file, world);
    write_root_attrs(file, "checkpoint", engine);
  });
}

void save_weights(const std::string& path, Engine& engine, parallel::Communicator& world, DType dtype) {
  const std::vector<Param> params = params_of(engine);
  const Plan plan = plan_of(engine, params, world);
  // This rank's part of the f32 weights: its shard of the master weights, or, without ZeRO
  // (SGD), the whole parameters on data-parallel rank 0.
  save_weights_of(path, engine, world, dtype, params, plan, [&](size_t k) {
    if (engine.zero()) return by_name(engine.zero()->state_view(State::master, plan.views[k]).owned_slices());
    std::map<std::string, Slice> out;
    if (engine.dp()->rank() != 0) return out;
    for (const auto& [name, p] : engine.model().named_parameters())
      out.emplace(name, Slice{name, p.shape(), 0, ops::reshape(p, {p.numel()})});
    return out;
  });
}

void save_weight_batches(const std::string& path, Engine& engine, parallel::Communicator& world, DType dtype,
                         const SliceBatch& owned) {
  const std::vector<Param> params = params_of(engine);
  const Plan plan = plan_of(engine, params, world);
  save_weights_of(path, engine, world, dtype, params, plan, [&](size_t k) { return by_name(owned(k)); });
}

void load_weight_batches(const std::string& path, Engine& engine, parallel::Communicator& world,
                         const SliceBatch& owned, const std::function<void(size_t k)>& stored) {
  H5File file = H5File::open(path, world);
  check_kind(file, "weights");
  const std::vector<Param> params = params_of(engine);
  check_same_model(file, engine, params);
  const Plan plan = plan_of(engine, params, world);
  PageCache pages(path, plan.offloaded);
  Checksums sums;
  for (size_t k = 0; k < plan.batches.size(); ++k) {  // Note [Streamed checkpoints]
    const auto mine = agreed(plan, world, [&] { return by_name(owned(k)); });
    std::vector<H5File::TensorRange> ranges;
    std::vector<std::pair<Tensor, Tensor>> moves;  // (values, host buffer)
    std::vector<const Param*> read;
    for (size_t i : plan.batches[k]) {
      const Param& q = params[i];
      // Every rank reads its slices, a replicated parameter's included, and checksums those it
      // owns (a replicated parameter: on tp rank 0), as load_checkpoint does.
      const auto [first, values] = range_of(mine, q.name, DType::f32);
      const Tensor buffer = host_buffer(values);
      ranges.push_back(q.range("/model/" + q.name, first, buffer));
      moves.emplace_back(values, buffer);
      read.push_back(&q);
    }
    file.read_ranges(ranges, [&](size_t i) {
      from_buffer(moves[i].first, moves[i].second);
      const Param& q = *read[i];
      sums.add({q.writer ? ranges[i] : q.range(ranges[i].name, 0, Tensor::empty({0}))}, {q.global});
    });
    agreed(plan, world, [&] {
      stored(k);
      return true;
    });
    pages.drop(false);
  }
  sums.verify(file, world);
}

void load_checkpoint(const std::string& path, Engine& engine, parallel::Communicator& world) {
  zero::ZeroOptimizer& zero = zero_of(engine);
  H5File file = H5File::open(path, world);
  check_kind(file, "checkpoint");
  const std::vector<Param> params = params_of(engine);
  check_same_model(file, engine, params);
  const Plan plan = plan_of(engine, params, world);
  PageCache pages(path, plan.offloaded);
  Checksums sums;
  // A batch of reads: each range lands in `buffer` (on the host), moves to `values` (on the
  // training device) and its `owned` part is checksummed as soon as it is read, while the
  // next one is read.
  struct Read {
    const Param* param;
    std::string dataset;
    int64_t first;
    Tensor values, buffer;
    int64_t owned_first;
    Tensor owned;
  };
  const auto read_batch = [&](const std::vector<Read>& batch) {
    std::vector<H5File::TensorRange> ranges;
    for (const Read& r : batch) ranges.push_back(r.param->range(r.dataset, r.first, r.buffer));
    file.read_ranges(ranges, [&](size_t i) {
      const Read& r = batch[i];
      from_buffer(r.values, r.buffer);
      if (r.owned.defined()) sums.add({r.param->range(r.dataset, r.owned_first, r.owned)}, {r.param->global});
    });
  };
  // Master weights and moments: each rank reads what it keeps (its tensor-parallel part of
  // each parameter, or what of it its ZeRO shard keeps) and checksums what it owns (a
  // replicated parameter: on tp rank 0), a batch per state (the datasets of a state lie
  // back to back in the file, so the reads stream). A missing dataset, or one of another
  // dtype, is an error naming the file and the dataset. Parameters that every rank keeps
  // (stages 1 and 2) are read by every rank: after the first rank of a node, from the page
  // cache. Reading only the shards and all-gathering the rest was slower (4 ranks on one
  // node: 2.3 s against 1.5 s to load GPT-2 124M, triad-bench ckpt).
  const auto owned_of = [](const Param& q, const std::map<std::string, Slice>& owned, DType dtype) {
    return q.writer ? range_of(owned, q.name, dtype) : range_of({}, q.name, dtype);  // every rank sums each
  };
  for (State state : kOptimStates)
    for (size_t k = 0; k < plan.batches.size(); ++k) {  // Note [Streamed checkpoints]
      zero::ZeroOptimizer::StateView view = agreed(plan, world, [&] { return zero.state_view(state, plan.views[k]); });
      const auto resident = by_name(view.resident_slices());
      const auto owned = by_name(view.owned_slices());
      std::vector<Read> batch;
      for (size_t i : plan.batches[k]) {
        const Param& q = params[i];
        const auto [first, values] = range_of(resident, q.name, DType::f32);
        const auto [owned_first, owned_values] = owned_of(q, owned, DType::f32);
        batch.push_back({&q, dataset_of(state, q.name), first, values, host_buffer(values), owned_first, owned_values});
      }
      read_batch(batch);
      agreed(plan, world, [&] {  // with offload, writes the swap files
        view.commit();
        return true;
      });
      pages.drop(false);
    }
  // Parameters: f32 training keeps no other copy than the master weights just read (the
  // file's /model repeats them and is not read, so not checksummed either); mixed precision
  // reads them as stored when the file has the training dtype, else rounds the master
  // weights. Only what is read is checked: `triad-ckpt verify` checks every dataset.
  const DType dtype = engine.config().precision.dtype;
  if (dtype != DType::f32) {
    std::vector<std::string> names;
    for (const Param& q : params) names.push_back(dataset_of(State::param, q.name));
    const std::vector<DType> stored = file.dtypes(names);
    for (size_t k = 0; k < plan.batches.size(); ++k) {
      zero::ZeroOptimizer::StateView view =  // the parameters themselves
          agreed(plan, world, [&] { return zero.state_view(State::param, plan.views[k]); });
      const auto resident = by_name(view.resident_slices());
      const auto owned = by_name(view.owned_slices());
      std::vector<Read> as_stored, rounded;
      for (size_t i : plan.batches[k]) {
        const Param& q = params[i];
        const auto [first, values] = range_of(resident, q.name, dtype);
        if (stored[i] == dtype) {
          const auto [owned_first, owned_values] = owned_of(q, owned, dtype);
          as_stored.push_back({&q, names[i], first, values, host_buffer(values), owned_first, owned_values});
        } else {
          rounded.push_back(
              {&q, dataset_of(State::master, q.name), first, values, Tensor::zeros({values.numel()}), 0, {}});
        }
      }
      read_batch(as_stored);
      read_batch(rounded);  // from_buffer rounds the f32 master weights to the training dtype
      agreed(plan, world, [&] {  // with offload, writes the swap files
        view.commit();
        return true;
      });
      pages.drop(false);
    }
  }
  // The training state: scalars written by rank 0, and a row of each generator's state per
  // rank that wrote the file.
  const std::vector<Scalar> scalars = {{"/state/step", scalar_i64(0)},
                                       {"/state/optimizer_steps", scalar_i64(0)},
                                       {"/state/loss_scale", scalar_f64(0)},
                                       {"/state/loss_scale_hysteresis", scalar_i64(0)},
                                       {"/state/loss_scale_clean_steps", scalar_i64(0)}};
  std::vector<H5File::TensorRange> reads;
  for (const Scalar& x : scalars) reads.push_back({x.name, 0, x.value});
  file.read_ranges(reads);
  // (Files written before tensor parallelism have no /state/rng_tp: its generator is reseeded.)
  const bool has_rng_tp = file.has("/state/rng_tp");
  const Tensor rng = file.read("/state/rng"), rng_tp = has_rng_tp ? file.read("/state/rng_tp") : Tensor();
  const bool leader = world.rank() == 0;
  for (const Scalar& x : scalars) sums.add(x.name, leader ? x.value : Tensor::empty({0}, x.value.dtype()), 0);
  sums.add("/state/rng", leader ? rng : Tensor::empty({0}, DType::i64), 0);
  if (has_rng_tp) sums.add("/state/rng_tp", leader ? rng_tp : Tensor::empty({0}, DType::i64), 0);
  const nlohmann::json layout = nlohmann::json::parse(file.get_attr_string("/", "layout"));
  const int64_t step = int64_t(scalars[0].value.item());
  zero::ZeroOptimizer::Counters counters;
  counters.steps = int64_t(scalars[1].value.item());
  counters.loss_scale = {.scale = scalars[2].value.item(),
                         .hysteresis_left = int(scalars[3].value.item()),
                         .clean_steps = int64_t(scalars[4].value.item())};
  sums.verify(file, world);
  file.close();

  engine.set_global_step(step);
  zero.set_counters(counters);
  const int dp_rank = engine.dp()->rank(), tp_rank = engine.tp()->rank();
  if (layout.value("dp", int64_t(0)) == engine.dp()->size() && layout.value("tp", int64_t(1)) == engine.tp()->size()) {
    const auto restore = [&](Generator& gen, const Tensor& rows) {
      const std::vector<int64_t> r = rows.to_vector<int64_t>();
      gen.set_state({uint64_t(r[2 * size_t(world.rank())]), uint64_t(r[2 * size_t(world.rank()) + 1])});
    };
    restore(default_generator(), rng);
    if (has_rng_tp)
      restore(tensor_parallel_generator(), rng_tp);
    else
      tensor_parallel_generator().manual_seed(tensor_parallel_seed(engine.config().seed, dp_rank, tp_rank, step));
  } else {
    const uint64_t seed = engine.config().seed;
    default_generator().manual_seed(dropout_seed(seed, dp_rank, step));
    tensor_parallel_generator().manual_seed(tensor_parallel_seed(seed, dp_rank, tp_rank, step));
    if (leader && engine.config().arch == "gpt2" && engine.config().model.dropout > 0)
      std::printf("note: %s was written by %lld data- x %lld tensor-parallel ranks; dropout draws continue from "
                  "new streams\n",
                  path.c_str(), (long long)layout.value("dp", int64_t(0)), (long long)layout.value("tp", int64_t(1)));
  }
}

CheckpointSummary read_summary(const std::string& path) {
  const H5File file = H5File::open(path);
  check_kind(file, "");
  CheckpointSummary s;
  s.kind = file.get_attr_string("/", "kind");
  s.format_version = file.get_attr_int64("/", "format_version");
  s.config = nlohmann::json::parse(file.get_attr_string("/", "config"));
  s.layout = nlohmann::json::parse(file.get_attr_string("/", "layout"));
  s.step = file.has("/state/step") ? int64_t(file.read("/state/step").item()) : -1;
  if (file.has_attr("/", "recipe")) s.recipe = nlohmann::json::parse(file.get_attr_string("/", "recipe"));
  for (const std::string& name : file.list_datasets()) {
    const uint64_t sum = file.has_attr(name, "checksum") ? file.get_attr_uint64(name, "checksum") : 0;
    s.datasets.push_back({name, file.shape(name), file.dtype(name), sum});
  }
  return s;
}

std::vector<std::string> failed_checksums(const std::string& path) {
  const H5File file = H5File::open(path);
  check_kind(file, "");
  std::vector<std::string> bad;
  for (const std::string& name : file.list_datasets())
    if (!file.has_attr(name, "checksum") ||
        io::tensor_checksum(file.read(name)) != file.get_attr_uint64(name, "checksum"))
      bad.push_back(name);
  return bad;
}

void save_initial_checkpoint(const std::string& path, const nlohmann::json& config, const io::NamedTensors& weights) {
  const uint64_t seed = config.value("seed", uint64_t(1234));
  const PrecisionConfig fresh;  // the loss scale a run of the default fp16 section starts with
  parallel::SelfCommunicator self;
  uint64_t bytes = 0;
  for (const auto& entry : weights) bytes += uint64_t(entry.second.numel()) * 4 * sizeof(float);  // f32 x 4 states
  write_file(path, bytes, self, [&](H5File& file) {
    Checksums sums;
    std::vector<H5File::DatasetSpec> specs;
    std::vector<H5File::TensorRange> writes;
    for (const auto& [name, w] : weights) {
      const Tensor values = ops::reshape(ops::contiguous(ops::to(w, DType::f32)), {w.numel()});
      const Tensor zeros = Tensor::zeros({w.numel()});  // both moments
      for (State state : {State::param, State::master, State::exp_avg, State::exp_avg_sq}) {
        specs.push_back({dataset_of(state, name), DType::f32, w.shape()});
        writes.push_back(
            {dataset_of(state, name), 0, state == State::exp_avg || state == State::exp_avg_sq ? zeros : values});
      }
    }
    write_batch(file, sums, specs, writes);
    write_scalars(file, sums,
                  {{"/state/step", scalar_i64(0)},
                   {"/state/optimizer_steps", scalar_i64(0)},
                   {"/state/loss_scale", scalar_f64(std::ldexp(1.0, fresh.initial_scale_power))},
                   {"/state/loss_scale_hysteresis", scalar_i64(fresh.hysteresis)},
                   {"/state/loss_scale_clean_steps", scalar_i64(0)}},
                  true);
    write_generator(file, sums, "/state/rng", Generator(dropout_seed(seed, 0, 0)), self);
    write_generator(file, sums, "/state/rng_tp", Generator(tensor_parallel_seed(seed, 0, 0, 0)), self);
    sums.store(file, self);
    write_root_attrs(file, "checkpoint", config,
                     {{"dp", 1}, {"tp", 1}, {"pp", 1}, {"zero_stage", 0}, {"dtype", dtype_name(DType::f32)}});
  });
}

ModelWeights read_weights(const std::string& path) {
  const H5File in = H5File::open(path);
  check_kind(in, "");
  TRIAD_CHECK(in.get_attr_string("/", "kind") != "quantized",
              "'" << path << "' is a quantized model (triad-compress): its linear layers are integers with scales, "
                  << "not weights to export; export the full-precision checkpoint it was made from");
  const std::vector<std::string> bad = failed_checksums(path);
  TRIAD_CHECK(bad.empty(), "checkpoint '" << path << "': dataset " << bad.front() << " fails its checksum");
  ModelWeights w;
  w.config = nlohmann::json::parse(in.get_attr_string("/", "config"));
  for (const std::string& ds : in.list_datasets()) {
    if (ds.rfind("/model/", 0) != 0) continue;
    const std::string name = ds.substr(7), master = "/optim/" + name + "/master";
    w.weights.emplace_back(name, ops::to(in.read(in.has(master) ? master : ds), DType::f32));
  }
  return w;
}

void export_weights(const std::string& path, const std::string& out, DType dtype) {
  TRIAD_CHECK(dtype == DType::f32 || dtype == DType::bf16,
              "weights are exported in f32 or bf16, not " << dtype_name(dtype));
  const ModelWeights w = read_weights(path);
  const std::string tmp = out + ".tmp";
  H5File file = H5File::create(tmp);
  for (const auto& [name, weight] : w.weights) {
    const Tensor t = ops::to(weight, dtype);
    file.create_dataset("/model/" + name, dtype, t.shape());
    file.write_range("/model/" + name, 0, t);
    file.set_attr_uint64("/model/" + name, "checksum", io::tensor_checksum(t));
  }
  file.set_attr_int64("/", "format_version", kCheckpointFormatVersion);
  file.set_attr_string("/", "kind", "weights");
  file.set_attr_string("/", "config", w.config.dump());
  file.set_attr_string("/", "layout", H5File::open(path).get_attr_string("/", "layout"));
  file.flush();
  file.close();
  parallel::SelfCommunicator self;
  commit(tmp, out, self);
}

namespace {

// The model section of a file's config, briefly, for errors: "gpt2 d_model 64, n_layer 2".
std::string model_text(const nlohmann::json& config) {
  if (!config.contains("model")) return "no model section";
  const nlohmann::json& m = config["model"];
  std::ostringstream out;
  out << m.value("arch", std::string("gpt2"));
  for (const char* key : {"d_model", "n_layer", "n_head", "vocab_size"})
    if (m.contains(key)) out << " " << key << " " << m[key].dump();
  return out.str();
}

}  // namespace

int64_t load_parameters(const std::string& path, nn::Module& module, const std::string& prefix) {
  const H5File file = H5File::open(path);
  check_kind(file, "");
  const nlohmann::json config = nlohmann::json::parse(file.get_attr_string("/", "config"));
  const auto params = module.named_parameters();
  const auto splits = module.named_splits();
  int64_t loaded = 0;
  for (size_t i = 0; i < params.size(); ++i) {
    const auto& [name, p] = params[i];
    if (!name.starts_with(prefix)) continue;
    const nn::TensorSplit& split = splits[i].second;
    const std::string stored = name.substr(prefix.size()), master = dataset_of(State::master, stored);
    const std::string ds = file.has(master) ? master : "/model/" + stored;  // f32 over a 16-bit /model
    TRIAD_CHECK(file.has(ds), "'" << path << "' has no dataset " << ds << " for the parameter " << name
                                  << ": it holds another model (" << model_text(config) << ")");
    const Tensor t = file.read(ds);
    TRIAD_CHECK(t.shape() == split.global_shape(p.shape()),
                "'" << path << "': dataset " << ds << " has shape " << shape_str(t.shape()) << ", the parameter "
                    << name << " " << shape_str(split.global_shape(p.shape())) << " (the file holds "
                    << model_text(config) << ")");
    TRIAD_CHECK(io::tensor_checksum(t) == file.get_attr_uint64(ds, "checksum"),
                "checkpoint '" << path << "': dataset " << ds << " fails its checksum (the file is damaged)");
    ops::copy_(p, nn::local_part(ops::to(t, p.dtype()), split, p.shape()));
    ++loaded;
  }
  return loaded;
}

LoadedModel load_model(const std::string& path, std::shared_ptr<const nn::Parallelism> parallelism) {
  LoadedModel m;
  {
    const H5File file = H5File::open(path);
    check_kind(file, "");
    m.config = nlohmann::json::parse(file.get_attr_string("/", "config"));
    const nlohmann::json layout = nlohmann::json::parse(file.get_attr_string("/", "layout"));
    const TrainConfig c = parse_config(m.config, layout.at("dp").get<int64_t>() * layout.value("tp", int64_t(1)) *
                                                     layout.value("pp", int64_t(1)));
    const ModelShape shape = model_shape(c);
    TRIAD_CHECK(shape.n_kv_head % parallelism->ranks() == 0,
                "'" << path << "': a model of " << shape.n_kv_head << (c.arch == "llama" ? " key/value" : "")
                    << " heads cannot be split over " << parallelism->ranks()
                    << " tensor-parallel ranks (they must divide the heads)");
    const bool quantized = file.get_attr_string("/", "kind") == "quantized";
    TRIAD_CHECK(!quantized || parallelism->ranks() == 1,
                "'" << path << "' is a quantized model: it runs on one process, not split over "
                    << parallelism->ranks() << " tensor-parallel ranks");
    m.model = build_model(c, quantized ? quantized_layout() : std::move(parallelism));
    if (quantized) {
      load_quantized_model(path, m.model);
      return m;
    }
  }
  load_parameters(path, *m.model);
  return m;
}

}  // namespace triad::engine
