// `triad-bench collectives` (see the header). The sweep, nccl-tests style:
//
// - A table of collectives (kOps) says which placements the Communicator interface has and
//   how S, the byte size nccl-tests reports, relates to the call's element count.
// - A Backend (collectives_backend.h) is the communicator under test plus the raw library
//   calls it wraps: MPI (collectives_mpi.cpp) on host buffers, or NCCL
//   (collectives_nccl.cu) on the rank's GPU, its raw calls on a stream of their own.
// - Each case (op, placement, size) fills the buffers, times triad's call and the raw call
//   alike, then checks one more call of each on refilled buffers against closed-form
//   expectations (Note [Fill patterns]). Filling and checking happen in host memory; a
//   device backend's buffers are copied in and out around them.
//
// Timing follows nccl-tests: warmup calls, a barrier, then --iters calls between two
// MPI_Wtime reads, the second once Backend::synchronize() has seen the calls complete (a
// GPU's streams idle); a block's time is the per-call mean of the slowest rank (nccl-tests
// -a 3; its default, -a 1, averages over ranks instead).
#include "bench/collectives.h"

#include <mpi.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <type_traits>

#include "bench/collectives_backend.h"
#include "common/report.h"
#include "parallel/collective_checks.h"
#include "parallel/mpi_check.h"
#include "parallel/runtime.h"
#include "tensor/ops.h"
#include "tensor/tensor.h"

namespace triad::bench {

namespace {

using namespace collectives;
using parallel::Communicator;

constexpr int64_t kMiB = int64_t(1) << 20;

// One entry per collective, as nccl-tests keeps a table of them. all_reduce and broadcast
// take one tensor, so in place is all the interface has. sendrecv has no in-place variant:
// MPI forbids receiving into the buffer being sent (nccl-tests' in-place sendrecv aliases
// the two, which NCCL allows).
constexpr OpInfo kOps[] = {
    {Op::all_reduce, "all_reduce", false, true, false, true},
    {Op::reduce_scatter, "reduce_scatter", true, true, true, true},
    {Op::all_gather, "all_gather", true, true, true, false},
    {Op::all_to_all, "all_to_all", true, true, true, false},
    {Op::broadcast, "broadcast", false, true, false, false},
    {Op::sendrecv, "sendrecv", true, false, false, false},
};

// busbw / algbw, nccl-tests' definitions (REFERENCE.md, "Collective benchmarks").
double bus_factor(Op op, int n) {
  switch (op) {
    case Op::all_reduce:
      return 2.0 * (n - 1) / n;
    case Op::reduce_scatter:
    case Op::all_gather:
    case Op::all_to_all:
      return double(n - 1) / n;
    case Op::broadcast:
    case Op::sendrecv:
      return 1.0;
  }
  return 1.0;
}

// What a section's rows are, printed above its table; `raw` is how the backend makes the
// raw call in place (Backend::raw_in_place).
std::string placement_note(Op op, bool in_place, const std::string& raw) {
  switch (op) {
    case Op::all_reduce:
      return "in place (the interface has no out-of-place all_reduce)";
    case Op::broadcast:
      return "in place (the interface has no out-of-place broadcast)";
    case Op::reduce_scatter:
      return in_place ? "in place: output = chunk rank() of the input (raw: " + raw + ")" : "out of place";
    case Op::all_gather:
      return in_place ? "in place: input = chunk rank() of the output (raw: " + raw + ")" : "out of place";
    case Op::all_to_all:
      return in_place ? "in place: input = output (raw: " + raw + ")" : "out of place";
    case Op::sendrecv:
      return "ring: send to rank+1, receive from rank-1, in one send_recv (the interface has no in-place "
             "variant: MPI forbids receiving into the buffer being sent)";
  }
  return "";
}

// ---------------------------------------------------------------------------------------
// Options

struct Plan {
  std::vector<const OpInfo*> ops;
  std::vector<int64_t> sizes;  // bytes, before rounding to whole chunks
  DType dtype = DType::f32;
  int64_t min_bytes = 0, max_bytes = 0;
};

// "8", "64K", "256M", "1G" (K, M, G: powers of 1024, as nccl-tests reads sizes).
int64_t parse_bytes(const std::string& text, const char* option) {
  size_t digits = 0;
  while (digits < text.size() && std::isdigit(static_cast<unsigned char>(text[digits]))) ++digits;
  int64_t unit = 1;
  bool ok = digits > 0 && digits <= 18 && text.size() <= digits + 1;
  if (ok && text.size() == digits + 1) {
    const char suffix = char(std::toupper(static_cast<unsigned char>(text[digits])));
    unit = suffix == 'K' ? int64_t(1) << 10 : suffix == 'M' ? int64_t(1) << 20 : suffix == 'G' ? int64_t(1) << 30 : 0;
    ok = unit != 0;
  }
  const int64_t value = ok ? std::stoll(text.substr(0, digits)) : 0;
  ok = ok && value <= INT64_MAX / unit;
  TRIAD_CHECK(ok, option << " expects a byte count such as 8, 64K, 256M or 1G, got '" << text << "'");
  return value * unit;
}

const OpInfo* find_op(const std::string& name) {
  for (const OpInfo& info : kOps)
    if (name == info.name) return &info;
  TRIAD_CHECK(false, "--ops: unknown op '" << name
                                           << "' (expected all_reduce, reduce_scatter, all_gather, all_to_all, "
                                              "broadcast or sendrecv, separated by commas)");
  return nullptr;
}

// Checks every option, locally: all ranks parse the same command line, so a bad option
// throws on every rank before any collective.
Plan make_plan(const CollectivesOptions& o, int n) {
  Plan plan;
  TRIAD_CHECK(o.comm == "mpi" || o.comm == "nccl", "--comm must be mpi or nccl, got '" << o.comm << "'");
  TRIAD_CHECK(!o.ops.empty(), "--ops: no op given");
  for (const std::string& name : o.ops) {
    const OpInfo* info = find_op(name);
    TRIAD_CHECK(std::find(plan.ops.begin(), plan.ops.end(), info) == plan.ops.end(),
                "--ops: " << name << " is listed twice");
    plan.ops.push_back(info);
  }
  try {
    plan.dtype = dtype_from_name(o.dtype);
  } catch (const Error& e) {
    throw Error(std::string("--dtype: ") + e.what());
  }
  const int64_t es = int64_t(element_size(plan.dtype));
  plan.min_bytes = parse_bytes(o.min_bytes, "--min-bytes");
  plan.max_bytes = parse_bytes(o.max_bytes, "--max-bytes");
  TRIAD_CHECK(plan.min_bytes <= plan.max_bytes,
              "--min-bytes " << plan.min_bytes << " is larger than --max-bytes " << plan.max_bytes);
  TRIAD_CHECK(plan.min_bytes > 0 && plan.min_bytes % es == 0,
              "--min-bytes " << plan.min_bytes << " is not a whole, positive number of " << o.dtype << " elements ("
                             << es << " bytes each)");
  // Every size is min * factor^j, so a multiple of the element size. With MPI the largest
  // must fit one call (an int count: the limit the MpiCommunicator's own checks apply);
  // NCCL's counts are size_t.
  if (o.comm == "mpi")
    parallel::check_count("--max-bytes " + o.max_bytes + " (" + o.dtype + ")", plan.max_bytes / es,
                          parallel::kMpiMaxCount);
  TRIAD_CHECK(o.factor >= 2, "--factor must be at least 2, got " << o.factor);
  TRIAD_CHECK(o.warmup >= 0, "--warmup must be >= 0, got " << o.warmup);
  TRIAD_CHECK(o.iters >= 1, "--iters must be >= 1, got " << o.iters);
  TRIAD_CHECK(o.rounds >= 1, "--rounds must be >= 1, got " << o.rounds);
  TRIAD_CHECK(o.raw == "nonblocking" || o.raw == "blocking",
              "--raw must be nonblocking or blocking, got '" << o.raw << "'");
  TRIAD_CHECK(o.raw == "nonblocking" || o.comm == "mpi",
              "--raw blocking is for --comm mpi (NCCL's calls are only enqueued on a stream)");
  TRIAD_CHECK(o.check == 0 || o.check == 1, "--check must be 0 or 1, got " << o.check);
  parallel::check_rank("--root", "root", o.root, n);
  for (int64_t s = plan.min_bytes;; s *= o.factor) {
    plan.sizes.push_back(s);
    if (s > plan.max_bytes / o.factor) break;  // the next size would pass max (or overflow)
  }
  return plan;
}

// Every rank must run the same options: they come from one mpirun command line, but a
// hand-made launch could differ. Compared before any other collective: each rank learns
// the max of its hash and of its complement, which equal its own only if all ranks agree.
void check_ranks_agree(MPI_Comm world, const CollectivesOptions& o) {
  std::string s = o.min_bytes + '|' + o.max_bytes + '|' + o.dtype + '|' + o.comm + '|' + o.raw;
  for (const std::string& op : o.ops) s += '|' + op;
  for (int64_t v :
       {o.factor, int64_t(o.warmup), int64_t(o.iters), int64_t(o.rounds), int64_t(o.check), int64_t(o.root)})
    s += '|' + std::to_string(v);
  const uint64_t h = std::hash<std::string>{}(s);
  uint64_t mine[2] = {h, ~h}, max[2] = {0, 0};
  TRIAD_MPI(MPI_Allreduce(mine, max, 2, MPI_UINT64_T, MPI_MAX, world), "MPI_Allreduce");
  TRIAD_CHECK(max[0] == mine[0] && max[1] == mine[1],
              "triad-bench collectives: the ranks were started with different options; start them all alike");
}

// ---------------------------------------------------------------------------------------
// Buffers and data
//
// Note [Fill patterns]: input element i of rank r is (i + shift * r) mod period, a small
// integer, exact in every dtype, so each result element has a closed form:
// - data movement (all_gather, all_to_all, broadcast, sendrecv): period 101, shift 7. The
//   values (0..100) fit i8 and bf16, and the 7r offsets tell up to 101 source ranks apart.
// - sums (all_reduce, reduce_scatter): shift 1 and a period chosen so that the largest sum,
//   (period - 1) * n, and so every partial sum, is exact in the dtype (bf16 up to 256, f16
//   2048, f32 2^24), whatever order the library's algorithm adds in. Integer sums wrap,
//   identically in the library and in the expectation. Beyond that (bf16 over 256 ranks,
//   ...) the check allows the rounding error of n - 1 roundings (the communicator's
//   documented bound).
// Results are first set to -1, which no expected value equals (only an i8 sum that wraps,
// on 37 ranks or more, could), so an unwritten result counts as wrong.

struct Pattern {
  int64_t period;
  int64_t shift;
  double rel_tol = 0;  // 0: exact comparison
};

constexpr Pattern kMovePattern{101, 7};

// Integers up to 2^significand are exact.
int significand_bits(DType t) {
  switch (t) {
    case DType::bf16:
      return 8;
    case DType::f16:
      return 11;
    case DType::f32:
      return 24;
    default:
      return 53;  // f64; integer dtypes wrap instead of rounding
  }
}

Pattern sum_pattern(DType t, int n) {
  if (!is_floating(t)) return {8, 1};
  const double exact = std::ldexp(1.0, significand_bits(t));
  const int64_t period = std::clamp<int64_t>(int64_t(exact / n) + 1, 2, 8);
  const bool exact_sums = double(period - 1) * n <= exact;
  return {period, 1, exact_sums ? 0.0 : 2.0 * (n - 1) * std::ldexp(1.0, -significand_bits(t))};
}

// One period of the input pattern: 0, 1, ..., period - 1.
std::vector<int64_t> pattern_cycle(const Pattern& p) {
  std::vector<int64_t> v(size_t(p.period));
  for (int64_t i = 0; i < p.period; ++i) v[size_t(i)] = i;
  return v;
}
// One period of a sum's expected result: position v holds the sum over ranks r of
// (v + r) mod period.
std::vector<int64_t> sum_cycle(const Pattern& p, int n) {
  std::vector<int64_t> v(size_t(p.period), 0);
  for (int64_t i = 0; i < p.period; ++i)
    for (int r = 0; r < n; ++r) v[size_t(i)] += (i + r) % p.period;
  return v;
}

template <class T>
T element(int64_t v) {
  if constexpr (std::is_integral_v<T>)
    return static_cast<T>(v);  // wraps modulo 2^bits, as MPI's and NCCL's integer sums do
  else
    return from_double<T>(double(v));
}

// t[i] = cycle[(start + i) mod cycle.size()], in t's dtype. Host memory.
void fill_cycle(const Tensor& t, const std::vector<int64_t>& cycle, int64_t start) {
  TRIAD_ASSERT(t.device().is_cpu() && t.is_contiguous());
  visit_dtype(t.dtype(), [&](auto tag) {
    using T = decltype(tag);
    std::vector<T> values;
    for (int64_t v : cycle) values.push_back(element<T>(v));
    T* p = static_cast<T*>(t.raw_data());
    size_t j = size_t(start % int64_t(values.size()));
    for (int64_t i = 0, n = t.numel(); i < n; ++i) {
      p[i] = values[j];
      if (++j == values.size()) j = 0;
    }
  });
}

// The elements of t that differ from cycle[(start + i) mod cycle.size()] (in t's dtype) by
// more than rel_tol relative; NaN never matches.
int64_t count_wrong(const Tensor& t, const std::vector<int64_t>& cycle, int64_t start, double rel_tol) {
  TRIAD_ASSERT(t.device().is_cpu() && t.is_contiguous());
  return visit_dtype(t.dtype(), [&](auto tag) {
    using T = decltype(tag);
    std::vector<double> expect;
    for (int64_t v : cycle) expect.push_back(to_double(element<T>(v)));
    const T* p = static_cast<const T*>(t.raw_data());
    int64_t wrong = 0;
    size_t j = size_t(start % int64_t(expect.size()));
    for (int64_t i = 0, n = t.numel(); i < n; ++i) {
      const double e = expect[j];
      if (!(std::abs(to_double(p[i]) - e) <= rel_tol * std::abs(e))) ++wrong;
      if (++j == expect.size()) j = 0;
    }
    return wrong;
  });
}

Buffers make_buffers(const Case& c, int n, int rank, DType dtype, Device device) {
  const int64_t k = c.count;
  auto make = [&](int64_t numel) { return Tensor::empty({numel}, dtype, device); };
  switch (c.info->op) {
    case Op::all_reduce:
    case Op::broadcast: {
      const Tensor t = make(k);
      return {t, t};
    }
    case Op::sendrecv:
      return {make(k), make(k)};
    case Op::reduce_scatter: {
      const Tensor in = make(n * k);
      return {in, c.in_place ? ops::narrow(in, 0, rank * k, k) : make(k)};
    }
    case Op::all_gather: {
      const Tensor out = make(n * k);
      return {c.in_place ? ops::narrow(out, 0, rank * k, k) : make(k), out};
    }
    case Op::all_to_all: {
      const Tensor in = make(n * k);
      return {in, c.in_place ? in : make(n * k)};
    }
  }
  return {};
}

// Results to -1, then the inputs to this rank's pattern (Note [Fill patterns]), in host
// memory. In place, the input fill comes second so that it wins where the buffers alias.
void fill_buffers(const Case& c, const Buffers& b, int n, int rank) {
  const Pattern p = c.info->reduces ? sum_pattern(b.send.dtype(), n) : kMovePattern;
  fill_cycle(b.recv, {-1}, 0);
  fill_cycle(b.send, pattern_cycle(p), p.shift * rank);
}

// Copies host buffers into device buffers of the same layout. Where a case's buffers alias
// (in place), the host buffers alias alike, so both copies write the same values there.
void copy_to_device(const Buffers& device, const Buffers& host) {
  ops::copy_(device.recv, ops::to(host.recv, device.recv.device()));
  ops::copy_(device.send, ops::to(host.send, device.send.device()));
}

// Mismatches of `result` (where the call left its result) against the closed form.
int64_t check_result(const Case& c, const Tensor& result, int n, int rank, int root) {
  const int64_t k = c.count;
  const DType dtype = result.dtype();
  switch (c.info->op) {
    case Op::all_reduce: {
      const Pattern p = sum_pattern(dtype, n);
      return count_wrong(result, sum_cycle(p, n), 0, p.rel_tol);
    }
    case Op::reduce_scatter: {
      const Pattern p = sum_pattern(dtype, n);
      return count_wrong(result, sum_cycle(p, n), rank * k, p.rel_tol);
    }
    case Op::all_gather:
    case Op::all_to_all: {
      // chunk r came from rank r: its chunk 0 (all_gather) or its chunk rank() (all_to_all)
      const int64_t offset = c.info->op == Op::all_to_all ? rank * k : 0;
      int64_t wrong = 0;
      for (int r = 0; r < n; ++r)
        wrong += count_wrong(ops::narrow(result, 0, r * k, k), pattern_cycle(kMovePattern),
                             offset + kMovePattern.shift * r, 0);
      return wrong;
    }
    case Op::broadcast:
      return count_wrong(result, pattern_cycle(kMovePattern), kMovePattern.shift * root, 0);
    case Op::sendrecv:
      return count_wrong(result, pattern_cycle(kMovePattern), kMovePattern.shift * prev_rank(rank, n), 0);
  }
  return 0;
}

// triad's call for a case, as a program would make it: start, then wait.
std::function<void()> triad_call(Communicator& comm, Op op, const Buffers& b, int root) {
  switch (op) {
    case Op::all_reduce:
      return [&comm, b] { comm.all_reduce(b.recv)->wait(); };
    case Op::reduce_scatter:
      return [&comm, b] { comm.reduce_scatter(b.send, b.recv)->wait(); };
    case Op::all_gather:
      return [&comm, b] { comm.all_gather(b.send, b.recv)->wait(); };
    case Op::all_to_all:
      return [&comm, b] { comm.all_to_all(b.send, b.recv)->wait(); };
    case Op::broadcast:
      return [&comm, b, root] { comm.broadcast(b.recv, root)->wait(); };
    case Op::sendrecv: {
      const int next = next_rank(comm.rank(), comm.size()), prev = prev_rank(comm.rank(), comm.size());
      return [&comm, b, next, prev] { comm.send_recv(b.send, next, b.recv, prev)->wait(); };
    }
  }
  return {};
}

// ---------------------------------------------------------------------------------------
// Backends

std::unique_ptr<Backend> make_backend(const CollectivesOptions& o, const parallel::CommunicatorPtr& world,
                                      DType dtype) {
  if (o.comm == "nccl") return make_nccl_backend(world, dtype);
  return make_mpi_backend(world, dtype, o.raw == "blocking");
}

// ---------------------------------------------------------------------------------------
// Measuring

struct Row {
  Case c;
  double time_us = 0, raw_time_us = 0;
  int64_t wrong = -1, raw_wrong = -1;  // summed over ranks; -1: not checked
};

double algbw(const Row& r) { return double(r.c.bytes) / (r.time_us * 1e3); }  // GB/s = bytes / ns
double raw_algbw(const Row& r) { return double(r.c.bytes) / (r.raw_time_us * 1e3); }
double ratio(const Row& r) { return r.raw_time_us / r.time_us; }

// nccl-tests' timing: warm up, line the ranks up with a barrier, time `iters` calls between
// two clock reads. The result is the per-call mean of the slowest rank, in microseconds.
double time_calls(const std::function<void()>& call, Backend& backend, MPI_Comm world, int warmup, int iters) {
  for (int i = 0; i < warmup; ++i) call();
  backend.synchronize();
  TRIAD_MPI(MPI_Barrier(world), "MPI_Barrier");
  const double t0 = MPI_Wtime();
  for (int i = 0; i < iters; ++i) call();
  backend.synchronize();
  double t = (MPI_Wtime() - t0) / iters;
  TRIAD_MPI(MPI_Allreduce(MPI_IN_PLACE, &t, 1, MPI_DOUBLE, MPI_MAX, world), "MPI_Allreduce");
  return t * 1e6;
}

int64_t sum_over_ranks(int64_t v, MPI_Comm world) {
  TRIAD_MPI(MPI_Allreduce(MPI_IN_PLACE, &v, 1, MPI_INT64_T, MPI_SUM, world), "MPI_Allreduce");
  return v;
}

struct Context {
  Backend& backend;
  MPI_Comm world;
  const CollectivesOptions& options;
  DType dtype;
  int n, rank;
};

// Times triad's call and the raw call on the same buffers, each from freshly filled inputs
// (in-place calls overwrite theirs), then checks one more call of each. With --rounds R the
// two timed blocks alternate R times and each figure is the median of its R blocks: load
// that comes and goes on a shared machine then hits both alike instead of one of them.
//
// Filling and checking read and write host memory: a device backend's buffers are filled
// through host buffers of the same layout and copied in, and its results copied out.
Row run_case(const Context& x, const Case& c) {
  const Device device = x.backend.device();
  const Buffers b = make_buffers(c, x.n, x.rank, x.dtype, device);
  const Buffers host = device.is_cpu() ? b : make_buffers(c, x.n, x.rank, x.dtype, Device::cpu());
  auto fill = [&] {
    fill_buffers(c, host, x.n, x.rank);
    if (!device.is_cpu()) copy_to_device(b, host);
    x.backend.synchronize();  // the copies are done before calls on any stream start
  };
  const std::function<void()> triad = triad_call(x.backend.comm(), c.info->op, b, x.options.root);
  const std::function<void()> raw = x.backend.raw_call(c, b, x.options.root);
  Row row{c};
  std::vector<double> times, raw_times;  // one per round; the same on every rank
  for (int round = 0; round < x.options.rounds; ++round) {
    fill();
    times.push_back(time_calls(triad, x.backend, x.world, x.options.warmup, x.options.iters));
    fill();
    raw_times.push_back(time_calls(raw, x.backend, x.world, x.options.warmup, x.options.iters));
  }
  row.time_us = app::median(times);
  row.raw_time_us = app::median(raw_times);
  if (x.options.check == 0) return row;
  auto checked = [&](const std::function<void()>& call, const Tensor& result) {
    fill();
    call();
    x.backend.synchronize();
    const Tensor on_host = ops::to(result, Device::cpu());
    return sum_over_ranks(check_result(c, on_host, x.n, x.rank, x.options.root), x.world);
  };
  row.wrong = checked(triad, b.recv);
  row.raw_wrong = checked(raw, x.backend.raw_result(c, b));
  return row;
}

// The case of one sweep size: chunked ops round S down to whole chunks (as nccl-tests
// does); a size with fewer than n elements has no case (count 0).
Case make_case(const OpInfo& info, bool in_place, int64_t bytes, DType dtype, int n) {
  const int64_t es = int64_t(element_size(dtype)), elements = bytes / es;
  const int64_t count = info.chunked ? elements / n : elements;
  return {&info, in_place, count, (info.chunked ? count * n : count) * es};
}

// ---------------------------------------------------------------------------------------
// Report

std::string human_bytes(int64_t b) {
  char s[32];
  if (b >= (int64_t(1) << 30) && b % (int64_t(1) << 30) == 0)
    std::snprintf(s, sizeof s, "%lld GiB", (long long)(b >> 30));
  else if (b >= kMiB && b % kMiB == 0)
    std::snprintf(s, sizeof s, "%lld MiB", (long long)(b >> 20));
  else if (b >= 1024 && b % 1024 == 0)
    std::snprintf(s, sizeof s, "%lld KiB", (long long)(b >> 10));
  else
    std::snprintf(s, sizeof s, "%lld B", (long long)b);
  return s;
}

void print_header(const Context& x, const Plan& plan) {
  const CollectivesOptions& o = x.options;
  std::printf(
      "# triad-bench collectives: comm %s, %d ranks, dtype %s, sizes %s to %s (x%lld), warmup %d, iters %d, "
      "rounds %d, check %s\n",
      o.comm.c_str(), x.n, dtype_name(x.dtype), human_bytes(plan.min_bytes).c_str(),
      human_bytes(plan.max_bytes).c_str(), (long long)o.factor, o.warmup, o.iters, o.rounds, o.check ? "on" : "off");
  std::printf(
      "# time: per call, mean over the timed iterations of the slowest rank (MPI_Wtime, barrier first; the "
      "clock is read again once the calls have completed)%s\n",
      o.rounds > 1 ? "; median of the rounds, triad's and raw blocks alternating" : "");
  std::printf(
      "# algbw = S / time (GB = 1e9 B); busbw = algbw x 2(n-1)/n (all_reduce), (n-1)/n (reduce_scatter, "
      "all_gather, all_to_all), 1 (broadcast, sendrecv)\n");
  std::printf("# raw: the %s, on the same buffers; triad/raw = raw time / triad time\n", x.backend.raw_name());
  std::printf(
      "# #wrong: result elements (all ranks) off the closed form after one more call; raw results are "
      "checked too\n");
}

void print_section(const Backend& backend, const OpInfo& info, bool in_place, int root) {
  std::printf("#\n# %s, %s", info.name, placement_note(info.op, in_place, backend.raw_in_place(info.op)).c_str());
  if (info.op == Op::broadcast) std::printf(", root %d", root);
  std::printf("\n# %12s %12s %5s %10s %8s %8s %10s %8s %9s %7s\n", "size", "count", "type", "time", "algbw", "busbw",
              "raw time", "raw bus", "triad/raw", "#wrong");
  std::printf("# %12s %12s %5s %10s %8s %8s %10s %8s %9s %7s\n", "(B)", "(elements)", "", "(us)", "(GB/s)", "(GB/s)",
              "(us)", "(GB/s)", "", "");
}

void print_row(const Backend& backend, const Row& r, DType dtype, int n) {
  const double f = bus_factor(r.c.info->op, n);
  char wrong[32];
  if (r.wrong < 0)
    std::snprintf(wrong, sizeof wrong, "N/A");
  else
    std::snprintf(wrong, sizeof wrong, "%lld", (long long)r.wrong);
  std::printf("  %12lld %12lld %5s %10.2f %8.3f %8.3f %10.2f %8.3f %9.3f %7s\n", (long long)r.c.bytes,
              (long long)r.c.count, dtype_name(dtype), r.time_us, algbw(r), algbw(r) * f, r.raw_time_us,
              raw_algbw(r) * f, ratio(r), wrong);
  if (r.raw_wrong > 0)
    std::printf("#   the raw %s result had %lld wrong elements\n", backend.library(), (long long)r.raw_wrong);
  std::fflush(stdout);
}

nlohmann::json row_json(const Row& r, DType dtype, int n) {
  const double f = bus_factor(r.c.info->op, n);
  auto checked = [](int64_t w) { return w < 0 ? nlohmann::json(nullptr) : nlohmann::json(w); };
  return {{"op", r.c.info->name},
          {"in_place", r.c.in_place},
          {"bytes", r.c.bytes},
          {"count", r.c.count},
          {"dtype", dtype_name(dtype)},
          {"time_us", r.time_us},
          {"algbw", algbw(r)},
          {"busbw", algbw(r) * f},
          {"raw_time_us", r.raw_time_us},
          {"raw_algbw", raw_algbw(r)},
          {"raw_busbw", raw_algbw(r) * f},
          {"ratio", ratio(r)},
          {"wrong", checked(r.wrong)},
          {"raw_wrong", checked(r.raw_wrong)}};
}

int64_t total_wrong(const std::vector<Row>& rows) {
  int64_t wrong = 0;
  for (const Row& r : rows) wrong += std::max<int64_t>(r.wrong, 0) + std::max<int64_t>(r.raw_wrong, 0);
  return wrong;
}

// The mean busbw of the rows of `op` (all rows when op is null), as nccl-tests' "Avg bus
// bandwidth" (it averages over sizes and both placements).
double avg_busbw(const std::vector<Row>& rows, const OpInfo* op, int n) {
  double sum = 0;
  int count = 0;
  for (const Row& r : rows) {
    if (op != nullptr && r.c.info != op) continue;
    sum += algbw(r) * bus_factor(r.c.info->op, n);
    ++count;
  }
  return count ? sum / count : 0.0;
}

// The summary lines and the last-line JSON object.
void report_summary(const Context& x, const std::vector<const OpInfo*>& ops, const std::vector<Row>& rows) {
  nlohmann::json by_op = nlohmann::json::object(), json_rows = nlohmann::json::array();
  const Row* worst = nullptr;
  int64_t wrong = 0, raw_wrong = 0;
  for (const Row& r : rows) {
    if (r.c.bytes >= kMiB && (worst == nullptr || ratio(r) < ratio(*worst))) worst = &r;
    wrong += std::max<int64_t>(r.wrong, 0);
    raw_wrong += std::max<int64_t>(r.raw_wrong, 0);
    json_rows.push_back(row_json(r, x.dtype, x.n));
  }
  const double avg_bus = avg_busbw(rows, nullptr, x.n);
  std::printf("#\n");
  for (const OpInfo* op : ops) {
    by_op[op->name] = avg_busbw(rows, op, x.n);
    std::printf("# Avg bus bandwidth (%s) : %.3f GB/s\n", op->name, avg_busbw(rows, op, x.n));
  }
  std::printf("# Avg bus bandwidth    : %.3f GB/s (triad, mean over all %zu rows)\n", avg_bus, rows.size());
  if (worst != nullptr)
    std::printf("# Worst triad/raw at >= 1 MiB: %.3f (%s, %s, %s)\n", ratio(*worst), worst->c.info->name,
                worst->c.in_place ? "in place" : "out of place", human_bytes(worst->c.bytes).c_str());
  if (x.options.check)
    std::printf("# Total #wrong: %lld (raw %s: %lld) %s\n", (long long)wrong, x.backend.library(), (long long)raw_wrong,
                wrong + raw_wrong == 0 ? "OK" : "FAILED");
  nlohmann::json summary = {{"avg_busbw", avg_bus},
                            {"avg_busbw_by_op", by_op},
                            {"worst_ratio_ge_1MiB", worst ? nlohmann::json(ratio(*worst)) : nlohmann::json(nullptr)},
                            {"total_wrong", x.options.check ? nlohmann::json(wrong) : nlohmann::json(nullptr)},
                            {"total_raw_wrong", x.options.check ? nlohmann::json(raw_wrong) : nlohmann::json(nullptr)}};
  if (worst != nullptr)
    summary["worst_ratio_case"] = {
        {"op", worst->c.info->name}, {"in_place", worst->c.in_place}, {"bytes", worst->c.bytes}};
  app::print_json_line({{"bench", "collectives"},
                        {"comm", x.options.comm},
                        {"raw", x.backend.raw_kind()},
                        {"ranks", x.n},
                        {"dtype", dtype_name(x.dtype)},
                        {"warmup", x.options.warmup},
                        {"iters", x.options.iters},
                        {"rounds", x.options.rounds},
                        {"check", x.options.check == 1},
                        {"rows", json_rows},
                        {"summary", summary}});
}

}  // namespace

int run_collectives_bench(const CollectivesOptions& o) {
  int argc = 0;
  char** argv = nullptr;
  const parallel::CommunicatorPtr world = parallel::init(argc, argv);
  const int n = world->size(), rank = world->rank();
  const Plan plan = make_plan(o, n);
  const MPI_Comm world_comm = MPI_COMM_WORLD;
  check_ranks_agree(world_comm, o);
  const std::unique_ptr<Backend> backend = make_backend(o, world, plan.dtype);
  const Context x{*backend, world_comm, o, plan.dtype, n, rank};

  if (rank == 0) print_header(x, plan);
  std::vector<Row> rows;
  for (const OpInfo* info : plan.ops) {
    for (bool in_place : {false, true}) {
      if (!(in_place ? info->in_place : info->out_of_place)) continue;
      if (rank == 0) print_section(*backend, *info, in_place, o.root);
      for (int64_t bytes : plan.sizes) {
        const Case c = make_case(*info, in_place, bytes, plan.dtype, n);
        if (c.count == 0) continue;  // fewer elements than ranks: nothing to split
        rows.push_back(run_case(x, c));
        if (rank == 0) print_row(*backend, rows.back(), plan.dtype, n);
      }
    }
  }
  if (rank == 0) report_summary(x, plan.ops, rows);
  // The counts are sums over ranks, so every rank reaches the same exit status.
  const int64_t wrong = total_wrong(rows);
  if (wrong > 0 && rank == 0) std::fprintf(stderr, "error: %lld result elements were wrong\n", (long long)wrong);
  return wrong > 0 ? 1 : 0;
}

}  // namespace triad::bench
