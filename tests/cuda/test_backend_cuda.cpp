// The CUDA backend against the CPU backend, method by method (as ggml's test-backend-ops):
// a table of cases, each drawing random inputs on the host, running one Backend method on
// both backends, and comparing the GPU's result with the CPU's by normalized MSE,
// sum (got - want)^2 / sum want^2, under a threshold per dtype; contiguous and strided
// operands. Copies, fills, dropout and uniform draws must match bit for bit. Then cuBLASLt
// GEMMs in bf16/f16 and with fused epilogues, the caching allocator's stream ordering on
// a device, pinned transfers, and the ops layer on device tensors. Needs a GPU; without
// one the program reports itself skipped (gpu_test_main.h).
#define BOOST_TEST_MODULE backend_cuda
#define BOOST_TEST_NO_MAIN  // main() is TRIAD_GPU_TEST_MAIN's
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <boost/test/data/test_case.hpp>
#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <thread>

#include "autograd/engine.h"
#include "autograd/functions.h"
#include "autograd/meta.h"
#include "cuda/device_allocator.h"
#include "cuda/gemm.h"
#include "cuda/gpu_test_main.h"
#include "cuda/pinned.h"
#include "cuda/stream.h"
#include "cuda/transfer.h"
#include "support/check.h"
#include "tensor/backend.h"
#include "tensor/cpu/cpu_backend.h"
#include "tensor/device_runtime.h"
#include "tensor/ops.h"

TRIAD_GPU_TEST_MAIN()

using namespace triad;

namespace {

const Device kGpu = Device::cuda(0);

Backend& cpu() { return cpu_backend(); }
Backend& gpu() { return backend_for(kGpu); }

// Uniform in [lo, hi) on the host, in dtype (integers: truncated).
Tensor random(const Shape& shape, uint64_t seed, double lo = -1.0, double hi = 1.0, DType dtype = DType::f32) {
  Tensor t = Tensor::empty(shape, DType::f64);
  Generator g(seed);
  ops::uniform_(t, lo, hi, g);
  return ops::to(t, dtype);
}

Tensor dev(const Tensor& t) { return cuda::to_device(t, kGpu); }
Tensor host(const Tensor& t) { return cuda::to_host(t); }

double nmse(const Tensor& got, const Tensor& want) {
  BOOST_REQUIRE_MESSAGE(got.shape() == want.shape(),
                        "shapes differ: " << shape_str(got.shape()) << " vs " << shape_str(want.shape()));
  const std::vector<double> g = ops::contiguous(host(got)).to_vector<double>();
  const std::vector<double> w = ops::contiguous(want).to_vector<double>();
  double err = 0, ref = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    if (std::isnan(w[i]) && std::isnan(g[i])) continue;
    err += (g[i] - w[i]) * (g[i] - w[i]);
    ref += w[i] * w[i];
  }
  return err / std::max(ref, 1e-300);
}

// Thresholds on the normalized MSE of results computed in f32 (different summation
// orders, exp/tanh implementations), and of results rounded to a 16-bit dtype.
double threshold(DType t) {
  switch (t) {
    case DType::bf16:
      return 3e-5;
    case DType::f16:
      return 1e-6;
    default:
      return 1e-10;
  }
}

void expect_close(const std::string& what, const Tensor& got, const Tensor& want, double limit) {
  const double e = nmse(got, want);
  BOOST_TEST(e <= limit, what << ": normalized MSE " << e << " above " << limit);
}

// Byte for byte (both contiguous after the copy to the host).
void expect_equal(const std::string& what, const Tensor& got, const Tensor& want) {
  const Tensor g = ops::contiguous(host(got)), w = ops::contiguous(want);
  BOOST_REQUIRE(g.nbytes() == w.nbytes());
  BOOST_TEST(std::memcmp(g.raw_data(), w.raw_data(), g.nbytes()) == 0, what << ": results differ in their bits");
}

const std::vector<DType> kAllDtypes = {DType::f32, DType::f64, DType::bf16, DType::f16,
                                       DType::i64, DType::i32, DType::i8};

// A pair of tensors with the same contents and geometry: on the host and on the GPU.
struct Pair {
  Tensor c, g;
};
Pair pair(const Tensor& t) { return {t, dev(t)}; }
template <class F>
Pair view(const Pair& p, F f) {
  return {f(p.c), f(p.g)};
}
Pair empty_pair(const Shape& shape, DType dtype = DType::f32) {
  return {Tensor::empty(shape, dtype), Tensor::empty(shape, dtype, kGpu)};
}

// ---- the cases ----

void copy_case() {
  for (DType dt : kAllDtypes)
    for (DType st : kAllDtypes) {
      const std::string what = std::string("copy ") + dtype_name(dt) + " <- " + dtype_name(st);
      const Pair src = pair(random({37, 45}, 1, -100, 100, st));
      Pair dst = pair(random({37, 45}, 2, -100, 100, dt));
      cpu().copy(dst.c, src.c);
      gpu().copy(dst.g, src.g);
      expect_equal(what + " contiguous", dst.g, dst.c);
      // Strided: a transposed source into a column slice of a wider destination.
      const Pair base = pair(random({45, 80}, 3, -100, 100, dt));
      const Pair d2 = view(base, [](const Tensor& t) { return ops::narrow(t, 1, 10, 37); });
      const Pair s2 = view(src, [](const Tensor& t) { return ops::transpose(t, 0, 1); });
      cpu().copy(d2.c, s2.c);
      gpu().copy(d2.g, s2.g);
      expect_equal(what + " strided", base.g, base.c);
      // A broadcast source (stride 0).
      const Pair row = pair(random({1, 45}, 4, -100, 100, st));
      const Pair s3 = view(row, [](const Tensor& t) { return ops::expand(t, {37, 45}); });
      cpu().copy(dst.c, s3.c);
      gpu().copy(dst.g, s3.g);
      expect_equal(what + " broadcast", dst.g, dst.c);
    }
}

void fill_case() {
  for (DType dt : kAllDtypes)
    for (double v : {0.0, 1.5, -3.0}) {
      const Pair base = pair(random({20, 30}, 5, -10, 10, dt));
      const Pair strided = view(base, [](const Tensor& t) { return ops::narrow(ops::transpose(t, 0, 1), 0, 3, 20); });
      cpu().fill(strided.c, v);
      gpu().fill(strided.g, v);
      expect_equal(std::string("fill ") + dtype_name(dt), base.g, base.c);
    }
}

void random_case() {
  for (DType dt : {DType::f32, DType::f64, DType::bf16, DType::f16}) {
    Pair t = empty_pair({1001}, dt);
    cpu().uniform(t.c, -2.0, 3.0, 42, 17);
    gpu().uniform(t.g, -2.0, 3.0, 42, 17);
    // Bit for bit unless the CPU build fused low + (high - low) u into one multiply-add
    // (then the last bit of a double may differ).
    expect_close(std::string("uniform ") + dtype_name(dt), t.g, t.c, dt == DType::f64 ? 1e-28 : 1e-14);
    cpu().normal(t.c, 0.5, 2.0, 42, 18);
    gpu().normal(t.g, 0.5, 2.0, 42, 18);
    // The GPU's double log/sin/cos may differ from glibc's in the last bit or two.
    expect_close(std::string("normal ") + dtype_name(dt), t.g, t.c, dt == DType::f64 ? 1e-26 : 1e-13);
  }
}

void binary_case() {
  const std::vector<std::pair<BinaryOp, const char*>> ops_list = {{BinaryOp::add, "add"},
                                                                  {BinaryOp::sub, "sub"},
                                                                  {BinaryOp::mul, "mul"},
                                                                  {BinaryOp::div, "div"},
                                                                  {BinaryOp::relu_backward, "relu_backward"}};
  for (auto [op, name] : ops_list) {
    // Same shape, contiguous.
    const Pair a = pair(random({64, 33}, 6)), b = pair(random({64, 33}, 7, 0.5, 2.0));
    Pair out = empty_pair({64, 33});
    cpu().binary(op, a.c, b.c, out.c);
    gpu().binary(op, a.g, b.g, out.g);
    expect_close(std::string(name) + " contiguous", out.g, out.c, threshold(DType::f32));
    // Broadcast (3, 1, 5) with (1, 4, 5), a transposed operand.
    const Shape shape = {3, 4, 5};
    const Pair x = pair(random({3, 1, 5}, 8)), y = pair(random({1, 4, 5}, 9, 0.5, 2.0));
    const Pair xb = view(x, [&](const Tensor& t) { return ops::expand(t, shape); });
    const Pair yb = view(y, [&](const Tensor& t) { return ops::expand(t, shape); });
    Pair o2 = empty_pair(shape);
    cpu().binary(op, xb.c, yb.c, o2.c);
    gpu().binary(op, xb.g, yb.g, o2.g);
    expect_close(std::string(name) + " broadcast", o2.g, o2.c, threshold(DType::f32));
    const Pair z = pair(random({5, 4, 3}, 10, 0.5, 2.0));
    const Pair zt = view(z, [](const Tensor& t) { return ops::permute(t, {2, 1, 0}); });
    cpu().binary(op, xb.c, zt.c, o2.c);
    gpu().binary(op, xb.g, zt.g, o2.g);
    expect_close(std::string(name) + " permuted", o2.g, o2.c, threshold(DType::f32));
  }
}

void unary_case() {
  const std::vector<std::tuple<UnaryOp, const char*, double>> ops_list = {
      {UnaryOp::neg, "neg", 0},         {UnaryOp::exp, "exp", 0},
      {UnaryOp::log, "log", 0},         {UnaryOp::sqrt, "sqrt", 0},
      {UnaryOp::tanh, "tanh", 0},       {UnaryOp::relu, "relu", 0},
      {UnaryOp::gelu, "gelu", 0},       {UnaryOp::pow, "pow", 1.7},
      {UnaryOp::scale, "scale", -0.25}, {UnaryOp::add_scalar, "add_scalar", 3.5}};
  for (auto [op, name, s] : ops_list) {
    const bool positive = op == UnaryOp::log || op == UnaryOp::sqrt || op == UnaryOp::pow;
    const Pair a = pair(random({50, 70}, 11, positive ? 0.1 : -3.0, 3.0));
    Pair out = empty_pair({50, 70});
    cpu().unary(op, a.c, out.c, s);
    gpu().unary(op, a.g, out.g, s);
    expect_close(std::string(name) + " contiguous", out.g, out.c, threshold(DType::f32));
    // In place on a strided view (as mul_ does).
    const Pair base = pair(random({70, 60}, 12, positive ? 0.1 : -3.0, 3.0));
    const Pair v = view(base, [](const Tensor& t) { return ops::narrow(ops::transpose(t, 0, 1), 0, 5, 50); });
    cpu().unary(op, v.c, v.c, s);
    gpu().unary(op, v.g, v.g, s);
    expect_close(std::string(name) + " strided in place", base.g, base.c, threshold(DType::f32));
  }
}

// f64 on the device (the gradient norm's root, the loss scale's seed): the exactly rounded
// ops equal the CPU's bit for bit, broadcast and in place on a strided view; the others
// name the dtype.
void f64_case() {
  const Tensor a = random({6, 9}, 13, 0.5, 4.0, DType::f64), b = random({1, 9}, 14, -3.0, 3.0, DType::f64);
  const auto both = [&](const char* what, const std::function<Tensor(const Tensor&, const Tensor&)>& f) {
    expect_equal(std::string("f64 ") + what, f(dev(a), dev(b)), f(a, b));
  };
  both("add", [](const Tensor& x, const Tensor& y) { return ops::add(x, y); });
  both("sub", [](const Tensor& x, const Tensor& y) { return ops::sub(x, y); });
  both("mul", [](const Tensor& x, const Tensor& y) { return ops::mul(x, y); });
  both("div", [](const Tensor& x, const Tensor& y) { return ops::div(x, y); });
  both("neg", [](const Tensor& x, const Tensor&) { return ops::neg(x); });
  both("sqrt", [](const Tensor& x, const Tensor&) { return ops::sqrt(x); });
  both("scale", [](const Tensor& x, const Tensor&) { return ops::mul(x, 1.0 / 3.0); });
  both("add_scalar", [](const Tensor& x, const Tensor&) { return ops::add(x, 1.0 / 3.0); });
  both("mul_ of a transposed view", [](const Tensor& x, const Tensor&) {
    const Tensor c = ops::clone(x);
    ops::mul_(ops::transpose(c, 0, 1), 0.1);
    return c;
  });
  test::check_error([&] { ops::exp(dev(a)); }, {"exp", "f64", "square root"});
}

void axpy_case() {
  for (double alpha : {1.0, -0.37}) {
    const Pair base = pair(random({40, 90}, 13));
    const Pair dst = view(base, [](const Tensor& t) { return ops::narrow(t, 1, 7, 64); });
    const Pair row = pair(random({64}, 14));
    const Pair src = view(row, [](const Tensor& t) { return ops::expand(t, {40, 64}); });
    cpu().axpy(dst.c, src.c, alpha);
    gpu().axpy(dst.g, src.g, alpha);
    expect_close("axpy", base.g, base.c, threshold(DType::f32));
  }
}

void gelu_dropout_case() {
  const Pair x = pair(random({300, 257}, 15, -4, 4)), g = pair(random({300, 257}, 16));
  Pair dx = empty_pair({300, 257});
  cpu().gelu_backward(x.c, g.c, dx.c);
  gpu().gelu_backward(x.g, g.g, dx.g);
  expect_close("gelu_backward", dx.g, dx.c, threshold(DType::f32));
  Pair out = empty_pair({300, 257});
  cpu().dropout(x.c, out.c, 0.3, 99, 1234);
  gpu().dropout(x.g, out.g, 0.3, 99, 1234);
  expect_equal("dropout", out.g, out.c);
}

void reduce_dim_case() {
  struct Geometry {
    int64_t outer, n, inner;
  };
  for (Geometry s :
       {Geometry{7, 1000, 1}, Geometry{3, 5000, 64}, Geometry{1, 3, 2000}, Geometry{50, 100, 300}, Geometry{4, 0, 5}}) {
    const Pair a = pair(random({s.outer, s.n, s.inner}, 17));
    Pair out = empty_pair({s.outer, 1, s.inner});
    cpu().sum_dim(a.c, out.c, s.outer, s.n, s.inner);
    gpu().sum_dim(a.g, out.g, s.outer, s.n, s.inner);
    expect_close("sum_dim", out.g, out.c, threshold(DType::f32));
    if (s.n == 0) continue;
    cpu().max_dim(a.c, out.c, s.outer, s.n, s.inner);
    gpu().max_dim(a.g, out.g, s.outer, s.n, s.inner);
    expect_equal("max_dim", out.g, out.c);
  }
}

void reduce_all_case() {
  for (int64_t n : {int64_t(1), int64_t(1000), int64_t(3'000'001)}) {
    const Pair a = pair(random({n}, 18, -1.0, 2.0));
    auto close = [](double x, double y) { return std::fabs(x - y) <= 1e-9 * std::max(1.0, std::fabs(y)); };
    // The sum left on the device: in f64 to 1e-9, and rounded once to f32.
    Pair total = empty_pair({}, DType::f64), total32 = empty_pair({});
    cpu().sum_all_to(a.c, total.c), gpu().sum_all_to(a.g, total.g);
    cpu().sum_all_to(a.c, total32.c), gpu().sum_all_to(a.g, total32.g);
    BOOST_TEST(close(host(total.g).item(), total.c.item()));
    BOOST_TEST(host(total32.g).item() == double(float(host(total.g).item())));
    BOOST_TEST(close(gpu().sum_squares({a.g}), cpu().sum_squares({a.c})));
    BOOST_TEST(gpu().max_abs(a.g) == cpu().max_abs(a.c));
    BOOST_TEST(gpu().all_finite(a.g));
  }
  // Several tensors in one reduction, an empty one among them.
  const Pair a = pair(random({1000}, 20)), b = pair(random({3'000'001}, 21)), e = pair(Tensor::empty({0}));
  const double want = cpu().sum_squares({a.c, b.c});
  BOOST_TEST(std::fabs(gpu().sum_squares({a.g, e.g, b.g}) - want) <= 1e-9 * want);
  for (double bad : {std::nan(""), HUGE_VAL, -HUGE_VAL}) {
    Tensor t = random({5000}, 19);
    t.data<float>()[4321] = float(bad);
    BOOST_TEST(!gpu().all_finite(dev(t)));
    BOOST_TEST(gpu().all_finite(dev(t)) == cpu().all_finite(t));
  }
}

void matmul_case() {
  struct Geometry {
    int64_t batch, m, n, k;
    bool b_batched;
  };
  for (Geometry s : {Geometry{1, 33, 65, 17, false}, Geometry{1, 256, 384, 512, false}, Geometry{3, 31, 40, 24, true},
                     Geometry{3, 31, 40, 24, false}})
    for (bool ta : {false, true})
      for (bool tb : {false, true}) {
        const Pair a = pair(random(ta ? Shape{s.batch, s.k, s.m} : Shape{s.batch, s.m, s.k}, 20));
        const Shape bs = tb ? Shape{s.n, s.k} : Shape{s.k, s.n};
        Shape bshape = bs;
        if (s.b_batched) bshape.insert(bshape.begin(), s.batch);
        const Pair b = pair(random(bshape, 21));
        for (bool accumulate : {false, true}) {  // out = a' b', out += a' b' (cuBLASLt's beta = 1)
          Pair out = accumulate ? pair(random({s.batch, s.m, s.n}, 24)) : empty_pair({s.batch, s.m, s.n});
          cpu().matmul(a.c, b.c, out.c, ta, tb, s.batch, s.m, s.n, s.k, accumulate);
          gpu().matmul(a.g, b.g, out.g, ta, tb, s.batch, s.m, s.n, s.k, accumulate);
          expect_close("matmul batch " + std::to_string(s.batch) + (ta ? " a^T" : "") + (tb ? " b^T" : "") +
                           (s.b_batched ? "" : " shared b") + (accumulate ? " accumulated" : ""),
                       out.g, out.c, threshold(DType::f32));
        }
      }
  const size_t plans = cuda::gemm_plan_count();
  Pair out = empty_pair({1, 33, 65});
  const Pair a = pair(random({1, 33, 17}, 22)), b = pair(random({17, 65}, 23));
  gpu().matmul(a.g, b.g, out.g, false, false, 1, 33, 65, 17, false);
  BOOST_TEST(cuda::gemm_plan_count() == plans, "a repeated shape reuses its cached plan");
}

// With and without a bias (the GPU's bias epilogue), in f32 and bf16, and a bf16 product
// with an f32 bias (added to the unrounded product).
void linear_case() {
  for (DType dt : {DType::f32, DType::bf16})
    for (DType bias_dtype : {DType::f32, dt})
      for (bool with_bias : {false, true}) {
        const std::string what = std::string("linear ") + dtype_name(dt) + (with_bias ? " + bias " : " ") +
                                 (with_bias ? dtype_name(bias_dtype) : "");
        const Pair x = pair(random({123, 40}, 24, -1, 1, dt)), w = pair(random({77, 40}, 25, -1, 1, dt));
        const Pair bias = with_bias ? pair(random({77}, 26, -1, 1, bias_dtype)) : Pair{};
        Pair out = empty_pair({123, 77}, dt);
        cpu().linear(x.c, w.c, bias.c, out.c);
        gpu().linear(x.g, w.g, bias.g, out.g);
        expect_close(what, out.g, out.c, threshold(dt));
      }
}

// Decoupled decay, L2 decay (adam_w_mode false), and no bias correction (corrections 1),
// over 40 tensors of odd sizes in one call (two tables of the multi-tensor kernel; the
// emulated test cuts a tensor across tables), each with its own step and weight decay and
// the bf16 copy of mixed precision.
void adamw_case() {
  const int64_t sizes[] = {10007, 1, 65537, 333, 131073, 7, 4097};
  for (bool adam_w_mode : {true, false})
    for (bool bias_correction : {true, false}) {
      const std::string what = std::string("adamw") + (adam_w_mode ? "" : " L2") + (bias_correction ? "" : " no bc");
      std::vector<Pair> p, m, v, g, copy;
      std::vector<AdamWTensors> c_updates, g_updates;
      for (int i = 0; i < 40; ++i) {
        const int64_t n = sizes[i % 7] + i;
        const uint64_t seed = 100 + 5 * uint64_t(i);
        p.push_back(pair(random({n}, seed))), m.push_back(pair(random({n}, seed + 1, -0.1, 0.1)));
        v.push_back(pair(random({n}, seed + 2, 0, 0.01))), g.push_back(pair(random({n}, seed + 3)));
        copy.push_back(empty_pair({n}, DType::bf16));  // the 16-bit parameters of mixed precision
        const int t = 1 + i % 4;
        const AdamWStep step{1e-3,
                             0.9,
                             0.95,
                             1e-8,
                             0.1 * (i % 2),
                             bias_correction ? 1 - std::pow(0.9, t) : 1.0,
                             bias_correction ? 1 - std::pow(0.95, t) : 1.0,
                             adam_w_mode};
        c_updates.push_back({p[i].c, g[i].c, m[i].c, v[i].c, copy[i].c, step});
        g_updates.push_back({p[i].g, g[i].g, m[i].g, v[i].g, copy[i].g, step});
      }
      cpu().adamw(c_updates);
      gpu().adamw(g_updates);
      for (size_t i = 0; i < p.size(); ++i) {
        expect_close(what + " param", p[i].g, p[i].c, threshold(DType::f32));
        expect_close(what + " exp_avg", m[i].g, m[i].c, threshold(DType::f32));
        expect_close(what + " exp_avg_sq", v[i].g, v[i].c, threshold(DType::f32));
        expect_close(what + " bf16 copy", copy[i].g, copy[i].c, threshold(DType::bf16));
      }
    }
}

// SGD with momentum and dampening, nesterov, L2 decay, and a buffer's first step, over
// tensors of odd sizes in one call.
void sgd_case() {
  for (const SGDStep& step : {SGDStep{0.1, 0.9, 0.1, 0.01, false}, SGDStep{0.1, 0.9, 0.0, 0.0, true},
                              SGDStep{0.1, 0.0, 0.0, 0.01, false}})
    for (bool first : {true, false}) {
      std::vector<Pair> p, g, buf;
      std::vector<SGDTensors> c_updates, g_updates;
      for (int i = 0; i < 30; ++i) {
        const int64_t n = 1 + 4099 * i;
        p.push_back(pair(random({n}, 300 + uint64_t(i)))), g.push_back(pair(random({n}, 400 + uint64_t(i))));
        buf.push_back(step.momentum != 0 ? pair(random({n}, 500 + uint64_t(i))) : Pair{});
        c_updates.push_back({p[i].c, g[i].c, buf[i].c, first});
        g_updates.push_back({p[i].g, g[i].g, buf[i].g, first});
      }
      cpu().sgd(c_updates, step);
      gpu().sgd(g_updates, step);
      for (size_t i = 0; i < p.size(); ++i) {
        expect_close("sgd param", p[i].g, p[i].c, threshold(DType::f32));
        if (step.momentum != 0) expect_close("sgd buffer", buf[i].g, buf[i].c, threshold(DType::f32));
      }
    }
}

// Block quantization of f32, bf16 and f16 rows at 8 and 4 bits (an odd row: a half byte),
// with zero, non-finite and partial blocks: q and scales bit for bit; one slice dequantized
// to the same values (the GPU's NaN has other bits); a sum of slices (qgZ's reduction)
// within f32 rounding.
void quantize_case() {
  const int64_t rows = 4, n = 3 * 256 + 77;
  for (int bits : {8, 4})
    for (DType dt : {DType::f32, DType::bf16, DType::f16}) {
      const QuantFormat f{bits, 256};
      const std::string what = "quantize " + std::to_string(bits) + " bits " + dtype_name(dt);
      Tensor x = random({rows, n}, 40, -3, 3);
      for (int64_t i = 0; i < 256; ++i) x.data<float>()[i] = 0.0f;
      x.data<float>()[n + 300] = std::nanf("");
      x.data<float>()[2 * n + 600] = HUGE_VALF;
      const Pair src = pair(ops::to(x, dt));
      Pair q = empty_pair({rows, f.bytes(n)}, DType::i8), scales = empty_pair({rows, f.blocks(n)});
      cpu().quantize_blocks(src.c, q.c, scales.c, rows, n, f);
      gpu().quantize_blocks(src.g, q.g, scales.g, rows, n, f);
      expect_equal(what + " q", q.g, q.c);
      expect_equal(what + " scales", scales.g, scales.c);
      Pair out = empty_pair({rows, n}, dt);
      cpu().dequantize_blocks(q.c, scales.c, out.c, rows, 1, n, f);
      gpu().dequantize_blocks(q.g, scales.g, out.g, rows, 1, n, f);
      expect_close(what + " dequantized", out.g, out.c, 0.0);  // exact; NaN where the CPU has NaN (other bits)
      Pair sum = empty_pair({1, n});
      const Pair q3 = view(q, [](const Tensor& t) { return ops::narrow(t, 0, 1, 3); });
      const Pair s3 = view(scales, [](const Tensor& t) { return ops::narrow(t, 0, 1, 3); });
      cpu().dequantize_blocks(q3.c, s3.c, sum.c, 1, 3, n, f);
      gpu().dequantize_blocks(q3.g, s3.g, sum.g, 1, 3, n, f);
      expect_close(what + " sum of 3 slices", sum.g, sum.c, threshold(DType::f32));
    }
}

void softmax_case() {
  struct Geometry {
    int64_t rows, n, tq;
    bool causal;
  };
  for (Geometry s : {Geometry{100, 37, 1, false}, Geometry{8, 5000, 1, false}, Geometry{4 * 64, 64, 64, true},
                     Geometry{2 * 16, 48, 16, true}}) {
    const Pair x = pair(random({s.rows, s.n}, 30, -5, 5));
    Pair y = empty_pair({s.rows, s.n});
    cpu().softmax(x.c, y.c, s.rows, s.n, s.causal, s.tq);
    gpu().softmax(x.g, y.g, s.rows, s.n, s.causal, s.tq);
    expect_close(std::string("softmax") + (s.causal ? " causal" : ""), y.g, y.c, threshold(DType::f32));
    const Pair g = pair(random({s.rows, s.n}, 31));
    Pair dx = empty_pair({s.rows, s.n});
    cpu().softmax_backward(y.c, g.c, dx.c, s.rows, s.n);
    gpu().softmax_backward(dev(y.c), g.g, dx.g, s.rows, s.n);  // the same y on both
    expect_close("softmax_backward", dx.g, dx.c, threshold(DType::f32));
  }
}

void layer_norm_case() {
  for (auto [rows, c] : {std::pair<int64_t, int64_t>{300, 768}, {5, 33}, {4096, 64}}) {
    const Pair x = pair(random({rows, c}, 32, -2, 3)), w = pair(random({c}, 33)), b = pair(random({c}, 34));
    Pair y = empty_pair({rows, c}), mean = empty_pair({rows}), rstd = empty_pair({rows});
    cpu().layer_norm(x.c, w.c, b.c, 1e-5, y.c, mean.c, rstd.c);
    gpu().layer_norm(x.g, w.g, b.g, 1e-5, y.g, mean.g, rstd.g);
    expect_close("layer_norm y", y.g, y.c, threshold(DType::f32));
    expect_close("layer_norm mean", mean.g, mean.c, threshold(DType::f32));
    expect_close("layer_norm rstd", rstd.g, rstd.c, threshold(DType::f32));
    const Pair g = pair(random({rows, c}, 35));
    Pair dx = empty_pair({rows, c}), dw = empty_pair({c}), db = empty_pair({c});
    const Tensor gm = dev(mean.c), gr = dev(rstd.c);  // the backward of the same statistics
    cpu().layer_norm_backward(g.c, x.c, w.c, mean.c, rstd.c, dx.c, dw.c, db.c, Tensor());
    gpu().layer_norm_backward(g.g, x.g, w.g, gm, gr, dx.g, dw.g, db.g, Tensor());
    expect_close("layer_norm_backward dx", dx.g, dx.c, threshold(DType::f32));
    expect_close("layer_norm_backward dweight", dw.g, dw.c, threshold(DType::f32));
    expect_close("layer_norm_backward dbias", db.g, db.c, threshold(DType::f32));
  }
}

// The whole table; with a zero row past the end (the index v too, reading zeros and adding
// nothing: an MoE routing's gathers); and rows 30.. of a vocabulary of 120 (a vocab-parallel
// embedding's part: the other indices read zeros).
void embedding_case() {
  const int64_t v = 50, c = 96;
  const std::pair<std::string, TableRows> windows[] = {
      {" whole ", {0, v}}, {" zero_past_end ", TableRows::zero_past_end(v)}, {" part ", {30, 120}}};
  for (DType it : {DType::i64, DType::i32})
    for (const auto& [name, rows] : windows) {
      const std::string what = name + dtype_name(it);
      const Pair w = pair(random({v, c}, 36));
      const Pair idx = pair(random({4, 33}, 37, 0, double(rows.vocab), it));  // repeats: rows hit several times
      Pair out = empty_pair({4, 33, c});
      cpu().embedding(w.c, idx.c, out.c, rows);
      gpu().embedding(w.g, idx.g, out.g, rows);
      expect_equal("embedding" + what, out.g, out.c);
      const Pair g = pair(random({4, 33, c}, 38));
      Pair gw = pair(Tensor::zeros({v, c}));
      cpu().embedding_backward(g.c, idx.c, gw.c, rows);
      gpu().embedding_backward(g.g, idx.g, gw.g, rows);
      expect_close("embedding_backward" + what, gw.g, gw.c, threshold(DType::f32));
    }
}

// The mean over the rows whose target is not `ignore` of logsumexp(row) - row[target], in f64.
double mean_cross_entropy_f64(const Tensor& logits, const Tensor& targets, int64_t ignore) {
  const int64_t rows = logits.size(0), v = logits.size(1);
  const std::vector<float> x = logits.to_vector<float>();
  const std::vector<int64_t> t = targets.to_vector<int64_t>();
  double sum = 0;
  int64_t count = 0;
  for (int64_t r = 0; r < rows; ++r) {
    if (t[r] == ignore) continue;
    const float* row = x.data() + r * v;
    const double m = *std::max_element(row, row + v);
    double e = 0;
    for (int64_t j = 0; j < v; ++j) e += std::exp(double(row[j]) - m);
    sum += m + std::log(e) - row[t[r]];
    ++count;
  }
  return sum / double(count);
}

void cross_entropy_case() {
  for (auto [rows, v] : {std::pair<int64_t, int64_t>{64, 50257}, {300, 17}}) {
    const Pair logits = pair(random({rows, v}, 39, -6, 6));
    Tensor t = random({rows}, 40, 0, double(v), DType::i64);
    for (int64_t r = 0; r < rows; r += 7) t.data<int64_t>()[r] = -100;  // ignored rows
    const Pair targets = pair(t);
    Pair lse = empty_pair({rows}), loss = empty_pair({});
    Pair count = pair(Tensor::empty({}, DType::i64));
    cpu().cross_entropy(logits.c, targets.c, lse.c, loss.c, count.c, -100, v);
    gpu().cross_entropy(logits.g, targets.g, lse.g, loss.g, count.g, -100, v);
    // The mean loss against float64: each row's log-sum-exp sums up to 50257 f32 terms, so
    // the f32 results (the CPU's too) differ from it by up to about 1e-5 relative.
    const double want = mean_cross_entropy_f64(logits.c, t, -100), got = ops::to(loss.g, Device::cpu()).item();
    BOOST_TEST(std::fabs(got - want) <= 1e-5 * std::fabs(want), "cross_entropy mean " << got << " vs " << want);
    BOOST_TEST(std::fabs(loss.c.item() - want) <= 1e-5 * std::fabs(want), "cpu cross_entropy mean " << loss.c.item());
    BOOST_TEST(ops::to(count.g, Device::cpu()).item() == count.c.item());
    expect_close("cross_entropy lse", lse.g, lse.c, threshold(DType::f32));
    Pair grad = empty_pair({rows, v});
    const Pair grad_loss = pair(Tensor::scalar(3.0, DType::f32));
    const Tensor glse = dev(lse.c), gcount = dev(count.c);
    cpu().cross_entropy_backward(logits.c, targets.c, lse.c, grad_loss.c, count.c, -100, v, grad.c);
    gpu().cross_entropy_backward(logits.g, targets.g, glse, grad_loss.g, gcount, -100, v, grad.g);
    expect_close("cross_entropy_backward", grad.g, grad.c, threshold(DType::f32));
  }
}

// The fused classifier's methods (Note [Fused classifier]): GPT-2's padded vocabulary whole,
// and a tensor-parallel rank's part of one (classes [1000, 4000) of 4000 in 3072 columns of
// which 3000 are classes); rows with targets on and off the part and ignored ones; the
// gradient written in place over the logits.
void classifier_case() {
  struct Part {
    int64_t rows, first, classes, w, vocab;
  };
  for (auto [rows, first, classes, w, vocab] : {Part{64, 0, 50257, 50304, 50257}, Part{301, 1000, 3000, 3072, 4000}}) {
    const Pair logits = pair(random({rows, w}, 42, -6, 6));
    Tensor t = random({rows}, 43, 0, double(vocab), DType::i64);
    for (int64_t r = 0; r < rows; r += 7) t.data<int64_t>()[r] = -100;
    const Pair targets = pair(t);
    Pair lse = empty_pair({rows}), z = empty_pair({rows}), loss = empty_pair({});
    Pair count = pair(Tensor::empty({}, DType::i64));
    cpu().classifier_rows(logits.c, targets.c, first, classes, vocab, -100, lse.c, z.c);
    gpu().classifier_rows(logits.g, targets.g, first, classes, vocab, -100, lse.g, z.g);
    expect_close("classifier_rows lse", lse.g, lse.c, threshold(DType::f32));
    expect_equal("classifier_rows target_logit", z.g, z.c);
    cpu().classifier_loss(lse.c, z.c, targets.c, vocab, -100, loss.c, count.c);
    gpu().classifier_loss(dev(lse.c), z.g, targets.g, vocab, -100, loss.g, count.g);
    expect_close("classifier_loss", loss.g, loss.c, threshold(DType::f32));
    BOOST_TEST(ops::to(count.g, Device::cpu()).item() == count.c.item());
    const Pair grad_loss = pair(Tensor::scalar(3.0, DType::f32));
    Pair grad = pair(ops::clone(logits.c));
    cpu().classifier_grad(grad.c, targets.c, first, classes, vocab, -100, lse.c, grad_loss.c, count.c);
    gpu().classifier_grad(grad.g, targets.g, first, classes, vocab, -100, dev(lse.c), grad_loss.g, dev(count.c));
    expect_close("classifier_grad", grad.g, grad.c, threshold(DType::f32));
  }
}

// Token sampling (Note [Token sampling]) on GPT-2's vocabulary, rows of a padded width:
// the kernel's greedy, top-k and untruncated paths, and the host path the backend takes for
// more candidates than a block sorts (top_k 0 with top_p < 1), each picking the CPU's tokens.
void sample_tokens_case() {
  const int64_t rows = 32, v = 50257, w = 50304;
  const Pair logits = pair(random({rows, w}, 41, -8, 8));
  for (const TokenSampling s : {TokenSampling{.temperature = 0, .seed = 3},
                                TokenSampling{.temperature = 0.8, .top_k = 40, .top_p = 0.95, .seed = 3, .step = 5},
                                TokenSampling{.temperature = 1.0, .top_k = 0, .top_p = 1.0, .seed = 5, .step = 1},
                                TokenSampling{.temperature = 1.0, .top_k = 0, .top_p = 0.9, .seed = 4, .step = 2}}) {
    Tensor d = Tensor::zeros({rows});
    d.data<float>()[3] = 1.0f;
    Pair done = pair(d), tokens = empty_pair({rows}, DType::i64), logprobs = empty_pair({rows}),
         mask = empty_pair({rows});
    cpu().sample_tokens(logits.c, v, s, done.c, tokens.c, logprobs.c, mask.c, Tensor());
    gpu().sample_tokens(logits.g, v, s, done.g, tokens.g, logprobs.g, mask.g, Tensor());
    const std::string what = "sample_tokens top_k " + std::to_string(s.top_k);
    expect_equal(what + " tokens", tokens.g, tokens.c);
    expect_equal(what + " mask", mask.g, mask.c);
    expect_equal(what + " done", done.g, done.c);
    expect_close(what + " logprobs", logprobs.g, logprobs.c, threshold(DType::f32));
  }
}

// Mixture-of-Experts routing (Note [MoE routing]) at a training size, 8192 tokens over 64
// experts: the CPU's experts, slots and loads for top-1 with drawn priorities or RSample
// noise, top-2 with its sampled second expert, top-4 by probability, over capacity and
// dropless; then the gather indices (dropless: of the rows grouped by expert).
void moe_route_case() {
  const int64_t S = 8192, E = 64;
  const Tensor l = random({S, E}, 51, -2, 2);
  const Pair logits = pair(l), probs = pair(ops::softmax(l));
  struct Routing {
    int64_t k, capacity;
    bool noise, priority;
  };
  for (const Routing c : {Routing{1, 120, false, true}, Routing{1, 120, true, false}, Routing{2, 240, true, false},
                          Routing{2, -1, true, false}, Routing{4, 480, false, false}, Routing{4, -1, false, false}}) {
    MoERouting r{.k = c.k, .capacity = c.capacity};
    if (c.noise) r.noise = {.drawn = true, .seed = 9, .first = 100};
    if (c.priority) r.priority = {.drawn = true, .seed = 9, .first = 7};
    const Pair expert = empty_pair({S, c.k}, DType::i64), location = empty_pair({S, c.k}, DType::i64),
               load = empty_pair({E}, DType::i64), first = empty_pair({E}, DType::i64);
    cpu().moe_route(probs.c, logits.c, Tensor(), Tensor(), r, expert.c, location.c, load.c, first.c);
    gpu().moe_route(probs.g, logits.g, Tensor(), Tensor(), r, expert.g, location.g, load.g, first.g);
    const std::string what = "moe_route k " + std::to_string(c.k) + " capacity " + std::to_string(c.capacity);
    expect_equal(what + " expert", expert.g, expert.c);
    expect_equal(what + " location", location.g, location.c);
    expect_equal(what + " load", load.g, load.c);
    expect_equal(what + " first_load", first.g, first.c);
    // Dropless: the rows grouped by expert (ops::moe_indices_dropless), after the loads.
    const bool dropless = c.capacity < 0;
    const Pair choice = empty_pair({S, c.k}, DType::i64), slot = empty_pair({S, c.k}, DType::i64),
               source = dropless ? empty_pair({S * c.k}, DType::i64) : empty_pair({E, c.capacity}, DType::i64);
    cpu().moe_indices(expert.c, location.c, E, c.capacity, dropless ? load.c : Tensor(), choice.c, slot.c, source.c);
    gpu().moe_indices(expert.g, location.g, E, c.capacity, dropless ? load.g : Tensor(), choice.g, slot.g, source.g);
    expect_equal(what + " choice", choice.g, choice.c);
    expect_equal(what + " slot", slot.g, slot.c);
    expect_equal(what + " source", source.g, source.c);
  }
}

// Fused attention in f32, bf16 and f16 against the CPU's f32 on the same (rounded) values
// (bf16 and f16 run on tensor cores, which also round P and dS to the dtype):
// head sizes at and between the kernel's instantiations (32, 64, 128), one position, fewer
// queries than keys, T not a multiple of the 64-row tile, and the strided q, k, v views
// of a fused qkv projection. The backward gets the same out and lse on both sides (the
// CPU's, rounded to the dtype), so it is compared on its own.
void attention_case() {
  struct Geometry {
    int64_t b, nh, tq, tk, hs;
    bool views;  // q, k, v as views of one (B, T, 3 NH hs) tensor
  };
  for (DType dt : {DType::f32, DType::bf16, DType::f16})
    for (Geometry s :
         {Geometry{2, 3, 100, 100, 64, false}, Geometry{1, 2, 1, 1, 32, false}, Geometry{2, 2, 130, 130, 128, false},
          Geometry{1, 3, 37, 160, 24, false}, Geometry{1, 2, 200, 200, 80, false}, Geometry{2, 4, 96, 96, 16, true},
          Geometry{3, 2, 64, 64, 64, true}}) {
      const std::string what = std::string("attention ") + dtype_name(dt) + " B" + std::to_string(s.b) + " NH" +
                               std::to_string(s.nh) + " Tq" + std::to_string(s.tq) + " Tk" + std::to_string(s.tk) +
                               " hs" + std::to_string(s.hs) + (s.views ? " views" : "");
      const Shape qs = {s.b, s.nh, s.tq, s.hs}, ks = {s.b, s.nh, s.tk, s.hs};
      Pair q, k, v;  // .c in f32, .g in dt
      if (s.views) {
        const int64_t c = s.nh * s.hs;
        const Tensor base = random({s.b, s.tq, 3 * c}, 60, -1, 1, dt);
        const Pair all{ops::to(base, DType::f32), dev(base)};
        auto part = [&](int64_t i) {
          return view(all, [&](const Tensor& t) {
            return ops::transpose(ops::reshape(ops::narrow(t, 2, i * c, c), {s.b, s.tq, s.nh, s.hs}), 1, 2);
          });
        };
        q = part(0), k = part(1), v = part(2);
      } else {
        auto make = [&](const Shape& shape, uint64_t seed) {
          const Tensor t = random(shape, seed, -1, 1, dt);
          return Pair{ops::to(t, DType::f32), dev(t)};
        };
        q = make(qs, 61), k = make(ks, 62), v = make(ks, 63);
      }
      const double scale = 1.0 / std::sqrt(double(s.hs));
      Pair out{Tensor::empty(qs), Tensor::empty(qs, dt, kGpu)}, lse = empty_pair({s.b, s.nh, s.tq});
      cpu().attention(q.c, k.c, v.c, out.c, lse.c, scale);
      gpu().attention(q.g, k.g, v.g, out.g, lse.g, scale);
      expect_close(what + " out", out.g, out.c, threshold(dt));
      expect_close(what + " lse", lse.g, lse.c, threshold(DType::f32));

      const Tensor out_dt = ops::to(out.c, dt), grad = random(qs, 64, -1, 1, dt);
      const Tensor out32 = ops::to(out_dt, DType::f32), grad32 = ops::to(grad, DType::f32);
      Pair dq{Tensor::empty(qs), Tensor::empty(qs, dt, kGpu)}, dk{Tensor::empty(ks), Tensor::empty(ks, dt, kGpu)},
          dv{Tensor::empty(ks), Tensor::empty(ks, dt, kGpu)};
      cpu().attention_backward(q.c, k.c, v.c, out32, lse.c, grad32, dq.c, dk.c, dv.c, scale);
      gpu().attention_backward(q.g, k.g, v.g, dev(out_dt), dev(lse.c), dev(grad), dq.g, dk.g, dv.g, scale);
      if (s.tk == 1) {  // one key: P = 1 and dP = D, so dq and dk are 0 up to rounding
        BOOST_TEST(ops::max_abs(ops::to(host(dq.g), DType::f32)) < 1e-5, what << " dq");
        BOOST_TEST(ops::max_abs(ops::to(host(dk.g), DType::f32)) < 1e-5, what << " dk");
      } else {
        expect_close(what + " dq", dq.g, dq.c, threshold(dt));
        expect_close(what + " dk", dk.g, dk.c, threshold(dt));
      }
      expect_close(what + " dv", dv.g, dv.c, threshold(dt));
    }
  // Through the ops layer: the op's checks, its dispatch and device outputs.
  const Tensor q = random({2, 2, 50, 64}, 65), k = random({2, 2, 50, 64}, 66), v = random({2, 2, 50, 64}, 67);
  const ops::AttentionOut want = ops::causal_attention(q, k, v, 0.125);
  const ops::AttentionOut got = ops::causal_attention(dev(q), dev(k), dev(v), 0.125);
  BOOST_TEST((got.out.device() == kGpu && got.lse.device() == kGpu));
  expect_close("ops::causal_attention out", got.out, want.out, threshold(DType::f32));
  // Grouped-query heads (the Llama's: 4 query heads reading 2 key/value heads in place),
  // forward and backward on both kernel sets (f32 on CUDA cores, bf16 on tensor cores): the
  // backward's blocks sum dk and dv over each group.
  for (DType dt : {DType::f32, DType::bf16}) {
    const Tensor gq = random({2, 4, 70, 64}, 72, -1, 1, dt), gk = random({2, 2, 70, 64}, 73, -1, 1, dt),
                 gv = random({2, 2, 70, 64}, 74, -1, 1, dt), gg = random({2, 4, 70, 64}, 75, -1, 1, dt);
    auto f32 = [](const Tensor& t) { return ops::to(t, DType::f32); };
    const ops::AttentionOut c = ops::causal_attention(f32(gq), f32(gk), f32(gv), 0.125);
    const ops::AttentionOut d = ops::causal_attention(dev(gq), dev(gk), dev(gv), 0.125);
    const std::string what = std::string("grouped heads ") + dtype_name(dt);
    expect_close(what + " out", d.out, c.out, threshold(dt));
    const ops::AttentionGrads cg = ops::causal_attention_backward(f32(gq), f32(gk), f32(gv),
                                                                  f32(ops::to(c.out, dt)), c.lse, f32(gg), 0.125);
    const ops::AttentionGrads dg = ops::causal_attention_backward(dev(gq), dev(gk), dev(gv), dev(ops::to(c.out, dt)),
                                                                  dev(c.lse), dev(gg), 0.125);
    expect_close(what + " dq", dg.dq, cg.dq, threshold(dt));
    expect_close(what + " dk", dg.dk, cg.dk, threshold(dt));
    expect_close(what + " dv", dg.dv, cg.dv, threshold(dt));
  }
  test::check_error(
      [&] {
        ops::causal_attention(dev(random({1, 1, 4, 130}, 68)), dev(random({1, 1, 4, 130}, 69)),
                              dev(random({1, 1, 4, 130}, 70)), 1.0);
      },
      {"attention", "head sizes up to 128"});
  const Tensor q64 = dev(random({1, 1, 4, 8}, 71, -1, 1, DType::f64));
  test::check_error([&] { ops::causal_attention(q64, q64, q64, 1.0); }, {"attention", "f64"});
}

// Note [16-bit activations]: the ops of a mixed-precision step on bf16/f16 operands (and an
// f32 table beside them) on the GPU against the CPU's on the same values. Both load as f32,
// compute in f32 and round once, so they differ only where the f32 values before rounding
// differ in their last bits: a 16-bit ulp at most, threshold(dt) in normalized MSE.
void sixteen_bit_case() {
  for (DType dt : {DType::bf16, DType::f16}) {
    const std::string d = std::string(" ") + dtype_name(dt);
    const Tensor x = random({6, 3, 40}, 81, -2, 2, dt), y = random({6, 3, 40}, 82, -2, 2, dt);
    const Tensor w = random({40}, 83, -1, 1, dt), b = random({40}, 84, -1, 1, dt), f = random({40}, 85);
    const Tensor lin = random({24, 40}, 86, -1, 1, dt),
                 ids = Tensor::from_vector(std::vector<int64_t>{3, 0, 23, 3}, {4});
    const Tensor logits = random({18, 40}, 87, -4, 4, dt);
    const Tensor targets =
        Tensor::from_vector(std::vector<int64_t>{0, 5, -100, 39, 7, 7, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, {18});
    const auto on = [](bool g, const Tensor& t) { return g ? dev(t) : t; };
    const auto same = [&](const std::string& what, auto op) {
      const Tensor got = op(true), want = op(false);
      BOOST_TEST((got.dtype() == want.dtype()), what);
      expect_close(what + d, got, want, threshold(want.dtype()));
    };
    same("add", [&](bool g) { return ops::add(on(g, x), on(g, y)); });
    same("mul by an f32 table", [&](bool g) { return ops::mul(on(g, x), on(g, f)); });
    same("gelu", [&](bool g) { return ops::gelu(on(g, x)); });
    same("gelu_backward", [&](bool g) { return ops::gelu_backward(on(g, x), on(g, y)); });
    same("silu", [&](bool g) { return ops::silu(on(g, x)); });
    same("silu_backward", [&](bool g) { return ops::silu_backward(on(g, x), on(g, y)); });
    same("add_", [&](bool g) {
      const Tensor acc = ops::clone(on(g, x));
      ops::add_(acc, on(g, y), 0.5);
      return acc;
    });
    same("sum_to", [&](bool g) { return ops::sum_to(on(g, x), {40}); });
    same("softmax", [&](bool g) { return ops::softmax(on(g, x), true); });
    same("linear", [&](bool g) { return ops::linear(on(g, x), on(g, lin), on(g, ops::narrow(w, 0, 0, 24))); });
    same("layer_norm", [&](bool g) { return ops::layer_norm(on(g, x), on(g, w), on(g, b), 1e-5).y; });
    same("layer_norm dx", [&](bool g) {
      const ops::LayerNormOut r = ops::layer_norm(on(g, x), on(g, w), on(g, b), 1e-5);
      return ops::layer_norm_backward(on(g, y), on(g, x), on(g, w), r.mean, r.rstd).dx;
    });
    same("layer_norm dweight", [&](bool g) {
      const ops::LayerNormOut r = ops::layer_norm(on(g, x), on(g, w), on(g, b), 1e-5);
      return ops::layer_norm_backward(on(g, y), on(g, x), on(g, w), r.mean, r.rstd).dweight;
    });
    same("rms_norm", [&](bool g) { return ops::rms_norm(on(g, x), on(g, w), 1e-5).y; });
    same("rms_norm dx", [&](bool g) {
      return ops::rms_norm_backward(on(g, y), on(g, x), on(g, w), ops::rms_norm(on(g, x), on(g, w), 1e-5).rstd).dx;
    });
    same("rms_norm dweight", [&](bool g) {
      return ops::rms_norm_backward(on(g, y), on(g, x), on(g, w), ops::rms_norm(on(g, x), on(g, w), 1e-5).rstd).dweight;
    });
    same("embedding", [&](bool g) { return ops::embedding(on(g, lin), on(g, ids)); });
    same("embedding_backward",
         [&](bool g) { return ops::embedding_backward(on(g, ops::narrow(lin, 0, 0, 4)), on(g, ids), 24); });
    same("cross_entropy", [&](bool g) { return ops::cross_entropy(on(g, logits), on(g, targets), -100).loss; });
    same("cross_entropy_backward", [&](bool g) {
      const ops::CrossEntropyOut r = ops::cross_entropy(on(g, logits), on(g, targets), -100);
      return ops::cross_entropy_backward(on(g, logits), on(g, targets), r.lse, on(g, Tensor::scalar(1.0)), r.count,
                                         -100);
    });
  }
  // RMS norm in f32.
  const Tensor x = random({5, 70}, 88, -2, 2), w = random({70}, 89), gy = random({5, 70}, 90);
  const ops::RmsNormOut c = ops::rms_norm(x, w, 1e-6), g = ops::rms_norm(dev(x), dev(w), 1e-6);
  expect_close("rms_norm f32", g.y, c.y, threshold(DType::f32));
  const ops::RmsNormGrads dc = ops::rms_norm_backward(gy, x, w, c.rstd);
  const ops::RmsNormGrads dg = ops::rms_norm_backward(dev(gy), dev(x), dev(w), g.rstd);
  expect_close("rms_norm f32 dx", dg.dx, dc.dx, threshold(DType::f32));
  expect_close("rms_norm f32 dweight", dg.dweight, dc.dweight, threshold(DType::f32));
}

// The fused ops of the transformer block on the GPU against the CPU's: linear + GELU in
// cuBLASLt's epilogue (N a multiple of 8) and in the kernel after a plain product (an f32
// bias beside a 16-bit product; N = 36), GELU's backward with the bias gradient, SwiGLU, the
// rotary embedding (x contiguous and a transposed view), the residual add fused into the
// norms, and their backwards adding the residual's gradient.
void fused_block_case() {
  for (DType dt : {DType::f32, DType::bf16, DType::f16}) {
    const std::string d = std::string(" ") + dtype_name(dt);
    const Tensor x = random({6, 3, 40}, 91, -2, 2, dt), r = random({6, 3, 40}, 92, -2, 2, dt);
    const Tensor gy = random({6, 3, 40}, 93, -1, 1, dt), gres = random({6, 3, 40}, 94, -1, 1, dt);
    const Tensor w = random({40}, 95, -1, 1, dt), b = random({40}, 96, -1, 1, dt);
    const Tensor lin = random({24, 40}, 97, -1, 1, dt), lin36 = random({36, 40}, 98, -1, 1, dt);
    const auto on = [](bool g, const Tensor& t) { return g ? dev(t) : t; };
    const auto same = [&](const std::string& what, auto op) {
      const Tensor got = op(true), want = op(false);
      BOOST_TEST((got.dtype() == want.dtype() && got.device() == kGpu && want.device() == Device::cpu()), what);
      expect_close(what + d, got, want, threshold(want.dtype()));
    };
    same("linear_gelu (epilogue)",
         [&](bool g) { return ops::linear_gelu(on(g, x), on(g, lin), on(g, ops::narrow(b, 0, 0, 24))).y; });
    same("linear_gelu pre (epilogue)",
         [&](bool g) { return ops::linear_gelu(on(g, x), on(g, lin), on(g, ops::narrow(b, 0, 0, 24))).pre; });
    same("linear_gelu no bias", [&](bool g) { return ops::linear_gelu(on(g, x), on(g, lin), Tensor()).y; });
    same("linear_gelu (kernel)", [&](bool g) {
      return ops::linear_gelu(on(g, x), on(g, lin36), on(g, ops::to(ops::narrow(b, 0, 0, 36), DType::f32))).y;
    });
    same("gelu_bias_backward grad_pre",
         [&](bool g) { return ops::gelu_bias_backward(on(g, x), on(g, gy), true).grad_pre; });
    same("gelu_bias_backward grad_bias",
         [&](bool g) { return ops::gelu_bias_backward(on(g, x), on(g, gy), true).grad_bias; });
    same("swiglu", [&](bool g) { return ops::swiglu(on(g, x), on(g, r)); });
    same("swiglu da", [&](bool g) { return ops::swiglu_backward(on(g, x), on(g, r), on(g, gy)).da; });
    same("swiglu db", [&](bool g) { return ops::swiglu_backward(on(g, x), on(g, r), on(g, gy)).db; });
    const Tensor cos = random({6, 40}, 99), sin = random({6, 40}, 100);
    const auto table = [&](bool g, const Tensor& t, int64_t rows) { return on(g, ops::narrow(t, 0, 0, rows)); };
    same("rotary", [&](bool g) { return ops::rotary(on(g, x), table(g, cos, 3), table(g, sin, 3)); });
    same("rotary of a view",
         [&](bool g) { return ops::rotary(ops::transpose(on(g, x), 0, 1), table(g, cos, 6), table(g, sin, 6)); });
    same("rotary_backward",
         [&](bool g) { return ops::rotary_backward(on(g, gy), table(g, cos, 3), table(g, sin, 3)); });
    same("add_layer_norm sum",
         [&](bool g) { return ops::add_layer_norm(on(g, x), on(g, r), on(g, w), on(g, b), 1e-5).sum; });
    same("add_layer_norm y",
         [&](bool g) { return ops::add_layer_norm(on(g, x), on(g, r), on(g, w), on(g, b), 1e-5).y; });
    same("add_rms_norm y", [&](bool g) { return ops::add_rms_norm(on(g, x), on(g, r), on(g, w), 1e-5).y; });
    same("layer_norm dx + residual", [&](bool g) {
      const ops::LayerNormOut n = ops::layer_norm(on(g, x), on(g, w), on(g, b), 1e-5);
      return ops::layer_norm_backward(on(g, gy), on(g, x), on(g, w), n.mean, n.rstd, on(g, gres)).dx;
    });
    same("rms_norm dx + residual", [&](bool g) {
      const ops::RmsNormOut n = ops::rms_norm(on(g, x), on(g, w), 1e-5);
      return ops::rms_norm_backward(on(g, gy), on(g, x), on(g, w), n.rstd, on(g, gres)).dx;
    });
  }
}

// ops::grouped_matmul_ (Note [Grouped GEMM on the GPU]): 3 groups and 130 (two pointer
// tables), every transpose, f32 and bf16 (accumulating into f32 beside bf16), each group's
// a a slice of one tensor, b a tensor of its own; the slices at 16-byte-aligned offsets
// (one batched GEMM) and at odd ones (a GEMM per group). Then grouped_linear, an MoE
// layer's experts, against the loop of linear calls it replaces, forward and backward.
void grouped_matmul_case() {
  const int64_t m = 37, n = 24, k = 40;
  for (const int64_t groups : {int64_t(3), int64_t(130)})
    for (const int64_t gap : {int64_t(8), int64_t(1)})
      for (const DType dt : {DType::f32, DType::bf16})
        for (const bool ta : {false, true})
          for (const bool tb : {false, true})
            for (const bool accumulate : {false, true}) {
              const DType out_dt = accumulate && dt == DType::bf16 ? DType::f32 : dt;
              const int64_t stride = m * k + gap;
              const Pair all = pair(random({groups * stride}, 90, -1, 1, dt));
              std::vector<Tensor> ac, ag, bc, bg, oc, og;
              for (int64_t g = 0; g < groups; ++g) {
                const Pair a = view(all, [&](const Tensor& t) {
                  return ops::view(ops::narrow(t, 0, g * stride, m * k), ta ? Shape{k, m} : Shape{m, k});
                });
                const Pair b = pair(random(tb ? Shape{n, k} : Shape{k, n}, 100 + uint64_t(g), -1, 1, dt));
                const Pair o =
                    accumulate ? pair(random({m, n}, 300 + uint64_t(g), -1, 1, out_dt)) : empty_pair({m, n}, out_dt);
                ac.push_back(a.c), ag.push_back(a.g), bc.push_back(b.c), bg.push_back(b.g);
                oc.push_back(o.c), og.push_back(o.g);
              }
              ops::grouped_matmul_(oc, ac, bc, ta, tb, accumulate);
              ops::grouped_matmul_(og, ag, bg, ta, tb, accumulate);
              const std::string what = "grouped_matmul_ " + std::to_string(groups) + " groups, gap " +
                                       std::to_string(gap) + " " + dtype_name(dt) + (ta ? " a^T" : "") +
                                       (tb ? " b^T" : "") + (accumulate ? " accumulated" : "");
              for (int64_t g = 0; g < groups; ++g) expect_close(what, og[size_t(g)], oc[size_t(g)], threshold(out_dt));
            }
  // Groups of a row count each (a dropless layer's experts, Note [Grouped GEMM on the GPU]):
  // slices of one buffer of rows, some groups of none, in the forward's form (rows in M:
  // one grouped GEMM) and the weight gradient's (rows in K: zeros for no rows), f32 and
  // bf16, against the CPU.
  for (const DType dt : {DType::f32, DType::bf16})
    for (const std::vector<int64_t>& rows : {std::vector<int64_t>{37, 0, 8, 64}, std::vector<int64_t>{0, 0, 40, 0}}) {
      int64_t total = 0;
      for (const int64_t r : rows) total += r;
      const Pair x = pair(random({total, k}, 500, -1, 1, dt)), y = empty_pair({total, n}, dt);
      std::vector<Tensor> xc, xg, wc, wg, yc, yg, dwc, dwg;
      int64_t at = 0;
      for (size_t g = 0; g < rows.size(); ++g) {
        const Pair xs = view(x, [&](const Tensor& t) { return ops::narrow(t, 0, at, rows[g]); });
        const Pair ys = view(y, [&](const Tensor& t) { return ops::narrow(t, 0, at, rows[g]); });
        at += rows[g];
        const Pair w = pair(random({n, k}, 510 + g, -1, 1, dt)), dw = empty_pair({k, k}, dt);
        xc.push_back(xs.c), xg.push_back(xs.g), wc.push_back(w.c), wg.push_back(w.g);
        yc.push_back(ys.c), yg.push_back(ys.g), dwc.push_back(dw.c), dwg.push_back(dw.g);
      }
      ops::grouped_matmul_(yc, xc, wc, false, true, false);
      ops::grouped_matmul_(yg, xg, wg, false, true, false);
      ops::grouped_matmul_(dwc, xc, xc, true, false, false);
      ops::grouped_matmul_(dwg, xg, xg, true, false, false);
      const std::string what = std::string("grouped_matmul_ rows ") + dtype_name(dt);
      if (total > 0) expect_close(what + " y", y.g, y.c, threshold(dt));
      for (size_t g = 0; g < rows.size(); ++g) expect_close(what + " x^T x", dwg[g], dwc[g], threshold(dt));
    }
  // grouped_linear against the loop of linear_gelu / linear on the GPU, GELU MLP experts'
  // shapes with biases.
  for (const bool gelu : {false, true}) {
    const int64_t G = 4, rows = 33, in = 48, out = 64;
    const Tensor x = set_requires_grad(dev(random({G, rows, in}, 400)));
    std::vector<Tensor> w, b;
    for (int64_t g = 0; g < G; ++g) {
      w.push_back(set_requires_grad(dev(random({out, in}, 410 + uint64_t(g)))));
      b.push_back(set_requires_grad(dev(random({out}, 420 + uint64_t(g)))));
    }
    const Tensor r = dev(random({G, rows, out}, 430));
    auto run = [&](bool grouped) {
      for (const Tensor& t : w) set_grad(t, Tensor());
      for (const Tensor& t : b) set_grad(t, Tensor());
      set_grad(x, Tensor());
      Tensor y;
      if (grouped) {
        y = grouped_linear(x, w, b, gelu);
      } else {
        std::vector<Tensor> ys;
        for (int64_t g = 0; g < G; ++g) {
          const Tensor xg = select(x, 0, g);
          ys.push_back(unsqueeze(
              gelu ? linear_gelu(xg, w[size_t(g)], b[size_t(g)]) : linear(xg, w[size_t(g)], b[size_t(g)]), 0));
        }
        y = cat(ys, 0);
      }
      backward(sum(mul(y, r)));
      std::vector<Tensor> results{host(detach(y)), host(grad(x))};
      for (int64_t g = 0; g < G; ++g)
        results.push_back(host(grad(w[size_t(g)]))), results.push_back(host(grad(b[size_t(g)])));
      return results;
    };
    const std::vector<Tensor> grouped = run(true), loop = run(false);
    for (size_t i = 0; i < grouped.size(); ++i)
      expect_close(std::string("grouped_linear") + (gelu ? " gelu" : "") + " result " + std::to_string(i),
                   dev(grouped[i]), loop[i], threshold(DType::f32));
  }
}

struct Case {
  const char* name;
  void (*run)();
};
const Case kCases[] = {
    {"copy", copy_case},
    {"fill", fill_case},
    {"random", random_case},
    {"binary", binary_case},
    {"unary", unary_case},
    {"f64_arithmetic", f64_case},
    {"axpy", axpy_case},
    {"gelu_backward_dropout", gelu_dropout_case},
    {"sum_dim_max_dim", reduce_dim_case},
    {"sum_all_sum_squares_max_abs_all_finite", reduce_all_case},
    {"matmul", matmul_case},
    {"linear", linear_case},
    {"adamw", adamw_case},
    {"sgd", sgd_case},
    {"quantize_blocks_dequantize_blocks", quantize_case},
    {"softmax", softmax_case},
    {"layer_norm", layer_norm_case},
    {"embedding", embedding_case},
    {"cross_entropy", cross_entropy_case},
    {"classifier", classifier_case},
    {"sample_tokens", sample_tokens_case},
    {"moe_route_moe_indices", moe_route_case},
    {"attention", attention_case},
    {"sixteen_bit_activations", sixteen_bit_case},
    {"fused_block_ops", fused_block_case},
    {"grouped_matmul", grouped_matmul_case},
};

std::vector<std::string> case_names() {
  std::vector<std::string> names;
  for (const Case& c : kCases) names.push_back(c.name);
  return names;
}

}  // namespace

BOOST_DATA_TEST_CASE(backend_method_matches_cpu, boost::unit_test::data::make(case_names()), name) {
  for (const Case& c : kCases)
    if (name == c.name) c.run();
}

// Note [Deferred device errors]: an index out of range does not stop the op; the next wait
// for the device throws, naming the op, the index and its position, and clears the record,
// so that later work runs and reports normally.
BOOST_AUTO_TEST_CASE(bad_indices_raise_at_the_next_wait) {
  const Tensor w = dev(random({50, 8}, 81));
  const Tensor bad = dev(Tensor::from_vector(std::vector<int64_t>{1, 2, 3, 50}, {4}));
  const Tensor good = dev(Tensor::from_vector(std::vector<int64_t>{1, 2, 3, 49}, {4}));
  Tensor out = ops::embedding(w, bad);  // enqueued; nothing thrown yet
  test::check_error([&] { ops::to(out, Device::cpu()); }, {"embedding", "index 50", "position 3", "[0, 50)"});
  out = ops::embedding(w, good);
  BOOST_TEST(ops::to(out, Device::cpu()).numel() == 32);  // the record was cleared
  const Tensor gw = ops::embedding_backward(dev(random({4, 8}, 82)), bad, 50);
  test::check_error([&] { ops::sum_squares({gw}); }, {"embedding_backward", "index 50"});

  const Tensor logits = dev(random({3, 17}, 83));
  const Tensor targets = dev(Tensor::from_vector(std::vector<int64_t>{-100, 17, 2}, {3}));
  const ops::CrossEntropyOut o = ops::cross_entropy(logits, targets, -100);
  test::check_error([&] { o.loss.item(); }, {"cross_entropy", "index 17", "position 1", "[0, 17)"});
  ops::cross_entropy_backward(logits, targets, o.lse, dev(Tensor::scalar(1.0, DType::f32)), o.count, -100);
  test::check_error([&] { cuda::synchronize_device(kGpu.index); }, {"cross_entropy_backward", "index 17"});
}

// ---- cuBLASLt beyond Backend::matmul ----

// bf16/f16 operands (fp32 accumulation, one rounding) against the CPU's f32 product of the
// same rounded values.
BOOST_AUTO_TEST_CASE(gemm_16_bit) {
  for (DType dt : {DType::bf16, DType::f16}) {
    const Tensor a = random({2, 128, 96}, 41, -1, 1, dt), b = random({160, 96}, 42, -1, 1, dt);
    Tensor want = Tensor::empty({2, 128, 160});
    cpu().matmul(ops::to(a, DType::f32), ops::to(b, DType::f32), want, false, true, 2, 128, 160, 96, false);
    Tensor out = Tensor::empty({2, 128, 160}, dt, kGpu);
    cuda::gemm(dev(a), dev(b), out, false, true, 2, 128, 160, 96);
    expect_close(std::string("gemm ") + dtype_name(dt), out, want, threshold(dt));
    // Accumulated into a 16-bit out (ops::add_matmul_): the f32 sum rounded once, as the CPU's.
    const Tensor out0 = random({2, 128, 160}, 43, -1, 1, dt);
    const Tensor sum = ops::clone(out0), dev_sum = dev(out0);
    ops::add_matmul_(sum, a, b, false, true);
    ops::add_matmul_(dev_sum, dev(a), dev(b), false, true);
    expect_close(std::string("add_matmul_ ") + dtype_name(dt), dev_sum, sum, threshold(dt));
  }
}

// Bias, GELU and bias+GELU epilogues (and the GELU input kept for the backward) against
// the CPU's product, row-vector add and gelu.
BOOST_AUTO_TEST_CASE(gemm_epilogues) {
  const int64_t rows = 96, in = 64, out_features = 136;
  const Tensor x = random({rows, in}, 43), w = random({out_features, in}, 44), bias = random({out_features}, 45);
  Tensor pre = Tensor::empty({rows, out_features});
  cpu().linear(x, w, Tensor(), pre);
  Tensor pre_bias = Tensor::empty({rows, out_features});
  cpu().linear(x, w, bias, pre_bias);
  for (bool with_bias : {false, true})
    for (bool gelu : {false, true}) {
      const Tensor want_pre = with_bias ? pre_bias : pre;
      const Tensor want = gelu ? ops::gelu(want_pre) : want_pre;
      Tensor got_pre;
      const Tensor got = cuda::linear(dev(x), dev(w), with_bias ? dev(bias) : Tensor(), gelu, &got_pre);
      const std::string what = std::string("linear") + (with_bias ? " +bias" : "") + (gelu ? " gelu" : "");
      expect_close(what, got, want, threshold(DType::f32));
      if (gelu) expect_close(what + " pre_gelu", got_pre, want_pre, threshold(DType::f32));
    }
  test::check_error([&] { cuda::linear(dev(x), dev(w), dev(random({5}, 46)), false); }, {"bias", "136"});
}

// ---- memory ----

// A freed block goes back to the next request on the same stream; one used on the
// communication stream waits for that stream before it is handed out again.
BOOST_AUTO_TEST_CASE(caching_allocator_on_device) {
  cuda::empty_cache(0);
  cuda::StreamHandle comm = cuda::comm_stream(0);
  void* p = nullptr;
  {
    Tensor t = Tensor::empty({1 << 20}, DType::f32, kGpu);
    p = t.raw_data();
  }
  const cuda::MemoryStats before = cuda::memory_stats(0);
  Tensor t = Tensor::empty({1 << 20}, DType::f32, kGpu);
  BOOST_TEST(t.raw_data() == p);
  const cuda::MemoryStats after = cuda::memory_stats(0);
  BOOST_TEST(after.cache_hits == before.cache_hits + 1);
  BOOST_TEST(after.provider_allocations == before.provider_allocations);
  BOOST_TEST(after.allocated_bytes == before.allocated_bytes + (4u << 20));

  // Hold the communication stream on a host callback, use t there, free it.
  std::atomic<bool> release{false};
  auto hold = [](void* flag) {
    while (!static_cast<std::atomic<bool>*>(flag)->load()) std::this_thread::yield();
  };
  BOOST_REQUIRE(cudaLaunchHostFunc(comm, hold, &release) == cudaSuccess);
  cuda::record_stream(t, comm);
  t = Tensor();
  BOOST_TEST(cuda::memory_stats(0).pending_free_bytes >= (4u << 20));
  Tensor u = Tensor::empty({1 << 20}, DType::f32, kGpu);
  BOOST_TEST(u.raw_data() != p, "handed out while the communication stream may still use it");
  release = true;
  cuda::synchronize_stream(comm);
  Tensor w = Tensor::empty({1 << 20}, DType::f32, kGpu);  // the event has completed
  BOOST_TEST(w.raw_data() == p);
  BOOST_TEST(cuda::memory_stats(0).pending_free_bytes == 0u);
  u = Tensor();
  w = Tensor();

  const size_t reserved = cuda::memory_stats(0).reserved_bytes;
  cuda::empty_cache(0);
  BOOST_TEST(cuda::memory_stats(0).reserved_bytes < reserved);
  BOOST_TEST(cuda::memory_stats(0).pending_free_bytes == 0u);
}

// Through pinned chunks both ways, more than one chunk (8 MiB) long.
BOOST_AUTO_TEST_CASE(transfers_round_trip) {
  Tensor t = random({5'000'003}, 47, -1e6, 1e6);
  const Tensor d = dev(t);
  expect_equal("round trip", d, t);
  const Tensor strided = ops::transpose(dev(random({300, 500}, 48)), 0, 1);  // to_host of a strided view
  expect_equal("strided to host", strided, ops::contiguous(ops::transpose(random({300, 500}, 48), 0, 1)));
  Tensor pinned = cuda::pinned_empty({1000}, DType::f32);
  BOOST_TEST(pinned.device().is_cpu());
  BOOST_TEST(cuda::pinned_allocator().bytes_in_use() >= 4000u);
}

// ---- the ops layer on device tensors ----

BOOST_AUTO_TEST_CASE(ops_on_device) {
  const Tensor a = random({17, 40}, 49), b = random({40, 23}, 50), c = random({17, 23}, 51);
  const Tensor want = ops::softmax(ops::add(ops::matmul(a, b), c));
  const Tensor got = ops::softmax(ops::add(ops::matmul(dev(a), dev(b)), dev(c)));
  BOOST_TEST((got.device() == kGpu));
  expect_close("softmax(a b + c)", got, want, threshold(DType::f32));
  BOOST_TEST(std::fabs(host(ops::sum(got)).item() - 17.0) < 1e-4);  // rows of probabilities
  test::check_error([&] { ops::exp(dev(random({3}, 52, -1, 1, DType::f64))); }, {"computes in f32", "f64"});
}

// Note [Positions on the device] on the GPU against the CPU: copy_at_ into a cache at the
// position in device memory (every element width), increment_, sampling at a step in device
// memory, and attention over a whole cache of which only the first cached + Tq keys count
// (the rest holding 50, which any read of them would show). Then the same launches recorded
// once as a CUDA graph (DeviceRuntime::record) and replayed while the counters advance: each
// replay writes where the counters say, and the graph's pool returns to the cache after it.
BOOST_AUTO_TEST_CASE(positions_in_device_memory_and_a_replayed_graph) {
  for (DType dt : {DType::f32, DType::bf16, DType::i64, DType::i8}) {
    const Tensor src = ops::transpose(random({2, 3, 4, 5}, 80, -9, 9, dt), 1, 2);  // (2, 4, 3, 5), strided
    const Tensor at = Tensor::from_vector(std::vector<int64_t>{6}, {1});
    const Tensor src_g = ops::transpose(dev(ops::transpose(src, 1, 2)), 1, 2);  // the same strides on the GPU
    Pair dst = pair(random({2, 4, 10, 5}, 81, -9, 9, dt));
    ops::copy_at_(dst.c, 2, at, src);
    ops::copy_at_(dst.g, 2, dev(at), src_g);
    expect_equal(std::string("copy_at_ ") + dtype_name(dt), dst.g, dst.c);
  }
  Pair counters = pair(Tensor::from_vector(std::vector<int64_t>{3, -1, 40}, {3}));
  ops::increment_(counters.c, 2);
  ops::increment_(counters.g, 2);
  expect_equal("increment_", counters.g, counters.c);

  const int64_t rows = 5, v = 300;
  const Pair logits = pair(random({rows, v}, 82, -4, 4));
  const TokenSampling s{.temperature = 0.9, .top_k = 40, .top_p = 0.95, .seed = 3, .step = 99};
  Pair step = pair(Tensor::from_vector(std::vector<int64_t>{4}, {1})), done = pair(Tensor::zeros({rows})),
       tokens = empty_pair({rows}, DType::i64), logprobs = empty_pair({rows}), mask = empty_pair({rows});
  cpu().sample_tokens(logits.c, v, s, done.c, tokens.c, logprobs.c, mask.c, step.c);
  gpu().sample_tokens(logits.g, v, s, done.g, tokens.g, logprobs.g, mask.g, step.g);
  expect_equal("sample_tokens at a step in memory", tokens.g, tokens.c);

  const int64_t cap = 150, tq = 1, cached = 97, keys = cached + tq;
  for (DType dt : {DType::f32, DType::bf16}) {
    const Tensor q = random({2, 3, tq, 64}, 83, -1, 1, dt);
    Tensor k = random({2, 3, cap, 64}, 84, -1, 1, dt), vv = random({2, 3, cap, 64}, 85, -1, 1, dt);
    ops::fill_(ops::narrow(k, 2, keys, cap - keys), 50.0);
    ops::fill_(ops::narrow(vv, 2, keys, cap - keys), 50.0);
    const Tensor where = Tensor::from_vector(std::vector<int64_t>{cached}, {1});
    const ops::AttentionOut want = ops::causal_attention(ops::to(q, DType::f32), ops::to(ops::narrow(k, 2, 0, keys), DType::f32),
                                                         ops::to(ops::narrow(vv, 2, 0, keys), DType::f32), 0.125);
    const ops::AttentionOut got = ops::causal_attention(dev(q), dev(k), dev(vv), 0.125, Tensor(), dev(where));
    expect_close(std::string("attention over a cache ") + dtype_name(dt), ops::to(got.out, DType::f32), want.out,
                 threshold(dt));
    expect_close(std::string("attention lse over a cache ") + dtype_name(dt), got.lse, want.lse, 1e-10);
  }

  // Recorded once, replayed 4 times: row `counter` of the table gets the counter's value
  // plus 10, then the counter advances.
  const Tensor table = Tensor::zeros({6, 1}, DType::i64, kGpu), counter = dev(Tensor::from_vector(std::vector<int64_t>{1}, {1}));
  const size_t before = cuda::memory_stats(0).allocated_bytes;
  {
    const std::unique_ptr<DeviceGraph> graph = device_runtime(kGpu).record(kGpu, [&] {
      const Tensor value = ops::clone(ops::view(counter, {1, 1}));  // allocated while recording
      ops::increment_(value, 10);
      ops::copy_at_(table, 0, counter, value);
      ops::increment_(counter, 1);
    });
    expect_equal("nothing runs while recording", table, Tensor::zeros({6, 1}, DType::i64));
    for (int i = 0; i < 4; ++i) graph->replay();
  }
  expect_equal("replays", table, Tensor::from_vector(std::vector<int64_t>{0, 11, 12, 13, 14, 0}, {6, 1}));
  BOOST_TEST(cuda::memory_stats(0).allocated_bytes == before);
  // What cannot be recorded (a copy to the host waits for the device) throws, having run
  // nothing.
  BOOST_CHECK_THROW(device_runtime(kGpu).record(kGpu,
                                                [&] {
                                                  ops::increment_(counter, 1);
                                                  host(counter);
                                                }),
                    Error);
  expect_equal("a failed recording runs nothing", counter, Tensor::from_vector(std::vector<int64_t>{5}, {1}));
}
