#include "engine/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <future>
#include <map>

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
  TRIAD_CHECK(engine.tp()->size() == 1, "[checkpoint] checkpoints of tensor-parallel runs are not written yet");
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

// HDF5 and the checksums read and write host memory: the optimizer's slices, which live on
// the training device, cross to the host first (a no-op on the cpu).
Tensor on_host(const Tensor& t) { return ops::to(t, Device::cpu()); }

// Where the file's bytes for `values` land: the tensor itself on the host, else a host
// tensor whose contents are copied to `values` after the read (from_buffer).
Tensor host_buffer(const Tensor& values) {
  return values.device().is_cpu() ? values : Tensor::empty(values.shape(), values.dtype());
}
// Moves what was read into `buffer` to `values`, on their device and in their dtype.
void from_buffer(const Tensor& values, const Tensor& buffer) {
  if (!buffer.is_same(values)) ops::copy_(values, ops::to(buffer, values.device()));
}

// Sums uint64 partial checksums over the ranks exactly (mod 2^64): the 32-bit halves are
// summed separately in i64, which cannot overflow, and recombined.
std::vector<uint64_t> sum_over_ranks(const std::vector<uint64_t>& partial, parallel::Communicator& dp) {
  const size_t n = partial.size();
  std::vector<int64_t> halves(2 * n);
  for (size_t i = 0; i < n; ++i)
    halves[2 * i] = int64_t(partial[i] & 0xffffffffu), halves[2 * i + 1] = int64_t(partial[i] >> 32);
  Tensor t = Tensor::from_vector(halves, {int64_t(2 * n)});
  if (n > 0) dp.all_reduce(t)->wait();
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
  // values). Their values must not change until the next add() or a store()/verify().
  void add(const std::vector<io::H5File::TensorRange>& ranges) {
    finish_pending();
    std::vector<io::H5File::TensorRange> host;
    for (const auto& r : ranges) {
      names_.push_back(r.name);
      host.push_back({r.name, r.first, on_host(r.data)});
    }
    pending_ = std::async(std::launch::async, [host = std::move(host)] {
      std::vector<uint64_t> sums;
      for (const auto& r : host) sums.push_back(io::tensor_checksum(r.data, r.first, io::ChecksumThreads::calling));
      return sums;
    });
  }
  void add(const std::string& dataset, const Tensor& values, int64_t first) { add({{dataset, first, values}}); }

  void store(H5File& file, parallel::Communicator& dp) {
    finish_pending();
    file.set_attrs_uint64(names_, "checksum", sum_over_ranks(partial_, dp));
  }
  // Throws naming every dataset whose checksum differs from its attribute.
  void verify(const H5File& file, parallel::Communicator& dp) {
    finish_pending();
    const std::vector<uint64_t> total = sum_over_ranks(partial_, dp);
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
  sums.add(writes);
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

void write_root_attrs(H5File& file, const std::string& kind, Engine& engine, parallel::Communicator& dp) {
  const TrainConfig& c = engine.config();
  const nlohmann::json layout = {
      {"dp", dp.size()}, {"tp", 1}, {"pp", 1}, {"zero_stage", c.zero.stage}, {"dtype", dtype_name(c.precision.dtype)}};
  file.set_attr_int64("/", "format_version", kCheckpointFormatVersion);
  file.set_attr_string("/", "kind", kind);
  file.set_attr_string("/", "config", c.json.dump());
  file.set_attr_string("/", "layout", layout.dump());
}

// Makes the written file durable and moves it into place: rank 0 syncs it, renames it and
// syncs the folder; every rank learns whether that worked.
void commit(const std::string& tmp, const std::string& path, parallel::Communicator& dp) {
  std::string error;
  if (dp.rank() == 0) {
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
  dp.all_reduce(failed, parallel::ReduceOp::max)->wait();
  TRIAD_CHECK(error.empty(), "[checkpoint] " << error);
  TRIAD_CHECK(failed.item() == 0.0, "[checkpoint] saving '" << path << "' failed on rank 0 (its message says why)");
}

// Creates `path` through a temporary file: `write` fills it, then it is committed.
template <typename Write>
void write_file(const std::string& path, parallel::Communicator& dp, Write write) {
  const std::string tmp = path + ".tmp";
  H5File file = H5File::create(tmp, dp);
  write(file);
  file.flush();
  file.close();
  commit(tmp, path, dp);
}

// This rank's part of the f32 weights: its shard of the master weights, or, without ZeRO
// (SGD, one process), the whole parameters.
std::map<std::string, Slice> weights_owned(Engine& engine) {
  if (engine.zero()) return by_name(engine.zero()->owned_slices(State::master));
  std::map<std::string, Slice> out;
  for (const auto& [name, p] : engine.model().named_parameters())
    out.emplace(name, Slice{name, p.shape(), 0, ops::reshape(p, {p.numel()})});
  return out;
}

Tensor scalar_i64(int64_t v) { return Tensor::from_vector(std::vector<int64_t>{v}, {}); }
Tensor scalar_f64(double v) { return Tensor::full({}, v, DType::f64); }

// Every parameter's dataset must exist with the parameter's shape, and the heads must split
// the same way (the one architectural choice shapes do not show).
void check_same_model(const H5File& file, Engine& engine) {
  const auto params = engine.model().named_parameters();
  std::vector<std::string> names;
  for (const auto& [name, p] : params) names.push_back("/model/" + name);
  const std::vector<std::string> missing = file.missing_datasets(names);
  TRIAD_CHECK(missing.empty(), "checkpoint '" << file.path() << "' has no dataset " << missing.front()
                                              << ": it holds another model than model.* describes");
  const std::vector<Shape> shapes = file.shapes(names);
  for (size_t i = 0; i < params.size(); ++i)
    TRIAD_CHECK(shapes[i] == params[i].second.shape(), "checkpoint '" << file.path() << "': dataset " << names[i]
                                                                      << " has shape " << shape_str(shapes[i])
                                                                      << ", the model's is "
                                                                      << shape_str(params[i].second.shape()));
  const nlohmann::json saved = nlohmann::json::parse(file.get_attr_string("/", "config"));
  const int64_t heads = engine.config().model.n_head;
  TRIAD_CHECK(!saved.contains("model") || saved["model"].value("n_head", heads) == heads,
              "checkpoint '" << file.path() << "' was trained with model.n_head " << saved["model"]["n_head"]
                             << ", the config says " << heads);
}

void check_kind(const H5File& file, const std::string& kind) {
  TRIAD_CHECK(file.has_attr("/", "format_version") && file.has_attr("/", "kind"),
              "'" << file.path() << "' is an HDF5 file but not a triad checkpoint (no format_version/kind attributes)");
  const int64_t version = file.get_attr_int64("/", "format_version");
  TRIAD_CHECK(version == kCheckpointFormatVersion, "checkpoint '" << file.path() << "' has format version " << version
                                                                  << "; this build reads version "
                                                                  << kCheckpointFormatVersion);
  const std::string found = file.get_attr_string("/", "kind");
  TRIAD_CHECK(kind.empty() || found == kind,
              "'" << file.path() << "' is a " << found << " file, not a " << kind << " (training state is needed)");
}

}  // namespace

void save_checkpoint(const std::string& path, Engine& engine, parallel::Communicator& dp) {
  zero::ZeroOptimizer& zero = zero_of(engine);
  const DType dtype = engine.config().precision.dtype;
  const auto params = engine.model().named_parameters();
  write_file(path, dp, [&](H5File& file) {
    Checksums sums;
    // A batch per state: what one batch stages on the host is a quarter of this rank's share.
    for (State state : {State::param, State::master, State::exp_avg, State::exp_avg_sq}) {
      const auto mine = by_name(zero.owned_slices(state));
      const DType stored = state == State::param ? dtype : DType::f32;
      std::vector<H5File::DatasetSpec> specs;
      std::vector<H5File::TensorRange> writes;
      for (const auto& [name, p] : params) {
        const std::string ds = dataset_of(state, name);
        specs.push_back({ds, stored, p.shape()});
        const auto [first, values] = range_of(mine, name, stored);
        writes.push_back({ds, first, on_host(values)});
      }
      write_batch(file, sums, specs, writes);
    }
    const zero::ZeroOptimizer::Counters counters = zero.counters();
    write_scalars(file, sums,
                  {{"/state/step", scalar_i64(engine.global_step())},
                   {"/state/optimizer_steps", scalar_i64(counters.steps)},
                   {"/state/loss_scale", scalar_f64(counters.scale)},
                   {"/state/loss_scale_hysteresis", scalar_i64(counters.hysteresis_left)},
                   {"/state/loss_scale_clean_steps", scalar_i64(counters.clean_steps)}},
                  dp.rank() == 0);
    file.create_dataset("/state/rng", DType::i64, {dp.size(), 2});
    const GeneratorState rng = default_generator().state();
    const Tensor row = Tensor::from_vector(std::vector<int64_t>{int64_t(rng.seed), int64_t(rng.offset)}, {2});
    file.write_range("/state/rng", 2 * dp.rank(), row);
    sums.add("/state/rng", row, 2 * dp.rank());
    sums.store(file, dp);
    write_root_attrs(file, "checkpoint", engine, dp);
  });
}

void save_weights(const std::string& path, Engine& engine, parallel::Communicator& dp, DType dtype) {
  TRIAD_CHECK(dtype == DType::f32 || dtype == DType::bf16,
              "weights are saved in f32 or bf16, not " << dtype_name(dtype));
  const auto mine = weights_owned(engine);
  write_file(path, dp, [&](H5File& file) {
    Checksums sums;
    std::vector<H5File::DatasetSpec> specs;
    std::vector<H5File::TensorRange> writes;
    for (const auto& [name, p] : engine.model().named_parameters()) {
      const std::string ds = "/model/" + name;
      specs.push_back({ds, dtype, p.shape()});
      const auto [first, values] = range_of(mine, name, DType::f32);
      writes.push_back({ds, first, ops::to(on_host(values), dtype)});
    }
    write_batch(file, sums, specs, writes);
    sums.store(file, dp);
    write_root_attrs(file, "weights", engine, dp);
  });
}

void load_checkpoint(const std::string& path, Engine& engine, parallel::Communicator& dp) {
  zero::ZeroOptimizer& zero = zero_of(engine);
  H5File file = H5File::open(path, dp);
  check_kind(file, "checkpoint");
  check_same_model(file, engine);
  const auto params = engine.model().named_parameters();
  Checksums sums;
  // A batch of reads: each range lands in `buffer` (on the host), moves to `values` (on the
  // training device) and its `owned` part is checksummed as soon as it is read, while the
  // next one is read.
  struct Read {
    std::string dataset;
    int64_t first;
    Tensor values, buffer;
    int64_t owned_first;
    Tensor owned;
  };
  const auto read_batch = [&](const std::vector<Read>& batch) {
    std::vector<H5File::TensorRange> ranges;
    for (const Read& r : batch) ranges.push_back({r.dataset, r.first, r.buffer});
    file.read_ranges(ranges, [&](size_t i) {
      const Read& r = batch[i];
      from_buffer(r.values, r.buffer);
      if (r.owned.defined()) sums.add(r.dataset, r.owned, r.owned_first);
    });
  };
  // Master weights and moments: each rank reads what it keeps and checksums its shard, a
  // batch per state (the datasets of a state lie back to back in the file, so the reads
  // stream). A missing dataset, or one of another dtype, is an error naming the file and
  // the dataset. Parameters that every rank keeps (stages 1 and 2) are read by every rank:
  // after the first rank of a node, from the page cache. Reading only the shards and
  // all-gathering the rest was slower (4 ranks on one node: 2.3 s against 1.5 s to load
  // GPT-2 124M, triad-bench ckpt).
  for (State state : kOptimStates) {
    const auto resident = by_name(zero.resident_slices(state));
    const auto owned = by_name(zero.owned_slices(state));
    std::vector<Read> batch;
    for (const auto& [name, p] : params) {
      const std::string ds = dataset_of(state, name);
      const auto [first, values] = range_of(resident, name, DType::f32);
      const auto [owned_first, owned_values] = range_of(owned, name, DType::f32);
      batch.push_back({ds, first, values, host_buffer(values), owned_first, owned_values});
    }
    read_batch(batch);
  }
  // Parameters: f32 training keeps no other copy than the master weights just read (the
  // file's /model repeats them and is not read, so not checksummed either); mixed precision
  // reads them as stored when the file has the training dtype, else rounds the master
  // weights. Only what is read is checked: `triad-ckpt verify` checks every dataset.
  const DType dtype = engine.config().precision.dtype;
  if (dtype != DType::f32) {
    const auto resident = by_name(zero.resident_slices(State::param));
    const auto owned = by_name(zero.owned_slices(State::param));
    std::vector<std::string> names;
    for (const auto& [name, p] : params) names.push_back(dataset_of(State::param, name));
    const std::vector<DType> stored = file.dtypes(names);
    std::vector<Read> as_stored, rounded;
    for (size_t i = 0; i < params.size(); ++i) {
      const std::string& name = params[i].first;
      const auto [first, values] = range_of(resident, name, dtype);
      if (stored[i] == dtype) {
        const auto [owned_first, owned_values] = range_of(owned, name, dtype);
        as_stored.push_back({names[i], first, values, host_buffer(values), owned_first, owned_values});
      } else {
        rounded.push_back({dataset_of(State::master, name), first, values, Tensor::empty({values.numel()}), 0, {}});
      }
    }
    read_batch(as_stored);
    read_batch(rounded);  // from_buffer rounds the f32 master weights to the training dtype
  }
  // The training state: scalars written by rank 0, and a row of RNG state per rank that
  // wrote the file.
  const std::vector<Scalar> scalars = {{"/state/step", scalar_i64(0)},
                                       {"/state/optimizer_steps", scalar_i64(0)},
                                       {"/state/loss_scale", scalar_f64(0)},
                                       {"/state/loss_scale_hysteresis", scalar_i64(0)},
                                       {"/state/loss_scale_clean_steps", scalar_i64(0)}};
  std::vector<H5File::TensorRange> reads;
  for (const Scalar& x : scalars) reads.push_back({x.name, 0, x.value});
  file.read_ranges(reads);
  const Tensor rng = file.read("/state/rng");
  for (const Scalar& x : scalars) sums.add(x.name, dp.rank() == 0 ? x.value : Tensor::empty({0}, x.value.dtype()), 0);
  sums.add("/state/rng", dp.rank() == 0 ? rng : Tensor::empty({0}, DType::i64), 0);
  const int64_t step = int64_t(scalars[0].value.item());
  zero::ZeroOptimizer::Counters counters;
  counters.steps = int64_t(scalars[1].value.item());
  counters.scale = scalars[2].value.item();
  counters.hysteresis_left = int(scalars[3].value.item());
  counters.clean_steps = int64_t(scalars[4].value.item());
  sums.verify(file, dp);
  file.close();

  engine.set_global_step(step);
  zero.set_counters(counters);
  if (rng.shape()[0] == dp.size()) {
    const std::vector<int64_t> r = rng.to_vector<int64_t>();
    default_generator().set_state({uint64_t(r[2 * dp.rank()]), uint64_t(r[2 * dp.rank() + 1])});
  } else {
    default_generator().manual_seed(dropout_seed(engine.config().seed, dp.rank(), step));
    if (dp.rank() == 0 && engine.config().model.dropout > 0)
      std::printf("note: %s was written by %lld ranks; dropout draws continue from new streams\n", path.c_str(),
                  (long long)rng.shape()[0]);
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

void export_weights(const std::string& path, const std::string& out, DType dtype) {
  TRIAD_CHECK(dtype == DType::f32 || dtype == DType::bf16,
              "weights are exported in f32 or bf16, not " << dtype_name(dtype));
  const H5File in = H5File::open(path);
  check_kind(in, "");
  const std::vector<std::string> bad = failed_checksums(path);
  TRIAD_CHECK(bad.empty(), "checkpoint '" << path << "': dataset " << bad.front() << " fails its checksum");
  const std::string tmp = out + ".tmp";
  H5File file = H5File::create(tmp);
  std::vector<std::string> names;
  for (const std::string& ds : in.list_datasets())
    if (ds.rfind("/model/", 0) == 0) names.push_back(ds.substr(7));
  for (const std::string& name : names) {
    const std::string master = "/optim/" + name + "/master";
    Tensor t = in.read(in.has(master) ? master : "/model/" + name);
    if (t.dtype() != dtype) t = ops::to(t, dtype);
    file.create_dataset("/model/" + name, dtype, t.shape());
    file.write_range("/model/" + name, 0, t);
    file.set_attr_uint64("/model/" + name, "checksum", io::tensor_checksum(t));
  }
  file.set_attr_int64("/", "format_version", kCheckpointFormatVersion);
  file.set_attr_string("/", "kind", "weights");
  file.set_attr_string("/", "config", in.get_attr_string("/", "config"));
  file.set_attr_string("/", "layout", in.get_attr_string("/", "layout"));
  file.flush();
  file.close();
  parallel::SelfCommunicator self;
  commit(tmp, out, self);
}

LoadedModel load_model(const std::string& path) {
  const H5File file = H5File::open(path);
  check_kind(file, "");
  LoadedModel m;
  m.config = nlohmann::json::parse(file.get_attr_string("/", "config"));
  const nlohmann::json layout = nlohmann::json::parse(file.get_attr_string("/", "layout"));
  const TrainConfig c = parse_config(m.config, layout.at("dp").get<int64_t>() * layout.value("tp", int64_t(1)));
  m.model = std::make_shared<nn::GPT>(c.model);
  for (const auto& [name, p] : m.model->named_parameters()) {
    const std::string ds = "/model/" + name;
    TRIAD_CHECK(file.has(ds), "checkpoint '" << path << "' has no dataset " << ds);
    const Tensor t = file.read(ds);
    TRIAD_CHECK(t.shape() == p.shape(), "checkpoint '" << path << "': dataset " << ds << " has shape "
                                                       << shape_str(t.shape()) << ", its config gives "
                                                       << shape_str(p.shape()));
    TRIAD_CHECK(io::tensor_checksum(t) == file.get_attr_uint64(ds, "checksum"),
                "checkpoint '" << path << "': dataset " << ds << " fails its checksum (the file is damaged)");
    ops::copy_(p, t);
  }
  return m;
}

}  // namespace triad::engine
