// The fused causal attention (causal_attention, ops::causal_attention) against the composed
// reference softmax(scale q k^T, causal) v built from matmul, mul and softmax: outputs,
// log-sum-exp and the gradients of q, k and v, in f32 and f64, for shapes around the CPU
// kernel's 64-row blocks (T = 1, T not a multiple of 64, several blocks, fewer queries
// than keys), large scores that make the online softmax rescale, the strided q, k, v views
// of a fused qkv projection, bf16/f16 inputs, thread-count independence and argument
// errors. The finite-difference check is in test_gradcheck.cpp.
#include <omp.h>

#include <boost/test/unit_test.hpp>
#include <cmath>
#include <cstring>

#include "autograd/engine.h"
#include "autograd/functions.h"
#include "autograd/grad_mode.h"
#include "autograd/meta.h"
#include "support/check.h"

BOOST_AUTO_TEST_SUITE(test_attention)

using namespace triad;

namespace {

struct Case {
  int64_t b, nh, tq, tk, hs;
};

Tensor randn(const Shape& shape, uint64_t seed, DType dtype, double stddev = 1.0) {
  Tensor t = Tensor::empty(shape, DType::f64);
  Generator gen(seed);
  ops::normal_(t, 0.0, stddev, gen);
  return ops::to(t, dtype);
}

Tensor leaf(const Tensor& t) {
  Tensor c = ops::clone(t);
  set_requires_grad(c);
  return c;
}

struct Result {
  Tensor out, dq, dk, dv;
};

// out = f(q, k, v) and the gradients of sum(out * w).
template <class F>
Result run(F&& f, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& w) {
  const Tensor lq = leaf(q), lk = leaf(k), lv = leaf(v);
  const Tensor out = f(lq, lk, lv);
  backward(sum(mul(compute_dtype(out), w)));
  return {detach(out), grad(lq), grad(lk), grad(lv)};
}

Tensor composed(const Tensor& q, const Tensor& k, const Tensor& v, double scale) {
  return matmul(softmax(mul(matmul(q, k, false, true), scale), /*causal=*/true), v);
}

Tensor fused(const Tensor& q, const Tensor& k, const Tensor& v, double scale) {
  return causal_attention(q, k, v, scale);
}

double tolerance(DType t) { return t == DType::f64 ? 1e-12 : 2e-5; }

// The largest difference relative to the reference's largest entry, or to 1 where that is
// smaller: with a single key seen, dq and dk are 0 up to rounding (P = 1, dP = D).
void check_close(const std::string& what, const Tensor& got, const Tensor& want, double limit) {
  BOOST_TEST_REQUIRE(got.defined(), what << ": undefined");
  BOOST_TEST_REQUIRE((got.dtype() == want.dtype()), what << ": " << got.str() << " vs " << want.str());
  const double err = test::max_abs_diff(got, want) / std::max(ops::max_abs(want), 1.0);
  BOOST_TEST(err <= limit, what << ": error " << err << " above " << limit);
}

void compare(const std::string& name, const Tensor& q, const Tensor& k, const Tensor& v, double scale) {
  const DType dt = q.dtype();
  const Tensor w = randn({q.size(0), q.size(1), q.size(2), q.size(3)}, 99, dt);
  auto ref_fn = [&](const Tensor& a, const Tensor& b, const Tensor& c) { return composed(a, b, c, scale); };
  auto fused_fn = [&](const Tensor& a, const Tensor& b, const Tensor& c) { return fused(a, b, c, scale); };
  const Result want = run(ref_fn, q, k, v, w), got = run(fused_fn, q, k, v, w);
  const double tol = tolerance(dt);
  check_close(name + " out", got.out, want.out, tol);
  check_close(name + " dq", got.dq, want.dq, tol);
  check_close(name + " dk", got.dk, want.dk, tol);
  check_close(name + " dv", got.dv, want.dv, tol);
}

// log sum_j<=i+Tk-Tq exp(scale q_i . k_j), in f64.
Tensor reference_lse(const Tensor& q, const Tensor& k, double scale) {
  const Tensor s = ops::mul(ops::matmul(ops::to(q, DType::f64), ops::to(k, DType::f64), false, true), scale);
  const int64_t tq = q.size(2), tk = k.size(2);
  Tensor lse = Tensor::empty({q.size(0), q.size(1), tq}, DType::f64);
  const std::vector<double> sv = ops::contiguous(s).to_vector<double>();
  double* out = lse.data<double>();
  for (int64_t r = 0; r < lse.numel(); ++r) {
    const int64_t i = r % tq, seen = i + tk - tq + 1;
    const double* row = sv.data() + r * tk;
    double mx = -INFINITY, total = 0;
    for (int64_t j = 0; j < seen; ++j) mx = std::max(mx, row[j]);
    for (int64_t j = 0; j < seen; ++j) total += std::exp(row[j] - mx);
    out[r] = mx + std::log(total);
  }
  return lse;
}

const std::vector<Case> kCases = {
    {2, 3, 1, 1, 8},       // one position
    {1, 2, 5, 5, 4},       // less than a block
    {2, 2, 64, 64, 16},    // exactly one block
    {2, 3, 100, 100, 16},  // T not a multiple of the block
    {1, 2, 150, 150, 32},  // three blocks, the last partial
    {1, 1, 7, 19, 8},      // fewer queries than keys
    {2, 1, 70, 200, 8},    // fewer queries than keys, across blocks
    {1, 2, 33, 33, 1},     // head size 1
    {1, 1, 1, 130, 24},    // one query over many keys (generation)
};

std::string case_name(const Case& c, DType dt) {
  return std::string(dtype_name(dt)) + " B" + std::to_string(c.b) + " NH" + std::to_string(c.nh) + " Tq" +
         std::to_string(c.tq) + " Tk" + std::to_string(c.tk) + " hs" + std::to_string(c.hs);
}

}  // namespace

BOOST_AUTO_TEST_CASE(fused_matches_composed) {
  for (DType dt : {DType::f32, DType::f64})
    for (const Case& c : kCases) {
      const Tensor q = randn({c.b, c.nh, c.tq, c.hs}, 1, dt), k = randn({c.b, c.nh, c.tk, c.hs}, 2, dt),
                   v = randn({c.b, c.nh, c.tk, c.hs}, 3, dt);
      const double scale = 1.0 / std::sqrt(double(c.hs));
      compare(case_name(c, dt), q, k, v, scale);
      const ops::AttentionOut r = ops::causal_attention(q, k, v, scale);
      BOOST_TEST((r.lse.dtype() == (dt == DType::f64 ? DType::f64 : DType::f32)));
      check_close(case_name(c, dt) + " lse", ops::to(r.lse, DType::f64), reference_lse(q, k, scale), tolerance(dt));
    }
}

// Scores spread over +-40: the running max of a row grows block after block (queries
// aligned with later keys), so the rescaling of the online softmax matters.
BOOST_AUTO_TEST_CASE(large_scores) {
  for (DType dt : {DType::f32, DType::f64}) {
    const int64_t t = 200, hs = 16;
    Tensor k = randn({1, 2, t, hs}, 4, DType::f64, 2.0);
    double* pk = k.data<double>();
    for (int64_t r = 0; r < 2 * t; ++r) pk[r * hs] = 0.05 * double(r % t);  // later keys score higher
    Tensor q = randn({1, 2, t, hs}, 5, DType::f64, 0.5);
    double* pq = q.data<double>();
    for (int64_t r = 0; r < 2 * t; ++r) pq[r * hs] = 4.0;
    compare(std::string(dtype_name(dt)) + " large scores", ops::to(q, dt), ops::to(k, dt), randn({1, 2, t, hs}, 6, dt),
            1.0);
  }
}

// q, k, v as the transformer makes them: strided views of one (B, T, 3C) projection.
BOOST_AUTO_TEST_CASE(views_of_a_fused_projection) {
  const int64_t b = 2, t = 90, nh = 3, hs = 8, c = nh * hs;
  for (DType dt : {DType::f32, DType::f64}) {
    const Tensor qkv = randn({b, t, 3 * c}, 7, dt);
    const Tensor w = randn({b, nh, t, hs}, 8, dt);
    auto run_on = [&](bool use_fused) {
      const Tensor x = leaf(qkv);
      auto heads = [&](int64_t part) { return transpose(reshape(narrow(x, 2, part * c, c), {b, t, nh, hs}), 1, 2); };
      const Tensor out =
          use_fused ? fused(heads(0), heads(1), heads(2), 0.3) : composed(heads(0), heads(1), heads(2), 0.3);
      backward(sum(mul(out, w)));
      return std::pair{detach(out), grad(x)};
    };
    const auto [want_out, want_grad] = run_on(false);
    const auto [got_out, got_grad] = run_on(true);
    check_close(std::string(dtype_name(dt)) + " strided out", got_out, want_out, tolerance(dt));
    check_close(std::string(dtype_name(dt)) + " strided dqkv", got_grad, want_grad, tolerance(dt));
  }
}

// Grouped-query attention: k and v with fewer heads, each read by a group of query heads in
// place, equal the same heads repeated for every query head (the Llama's former copies):
// out bit for bit, dq too, dk and dv the sums of the repeated heads' gradients over each
// group. Fewer queries than keys and left padding too; a head count that does not divide
// the queries' is an error naming it.
BOOST_AUTO_TEST_CASE(grouped_key_value_heads_equal_repeated_heads) {
  const int64_t b = 2, nh = 6, tq = 40, tk = 70, hs = 8;
  const Tensor key_start = Tensor::from_vector(std::vector<int64_t>{0, 11}, {b});
  for (int64_t nkv : {1, 2, 3})
    for (DType dt : {DType::f32, DType::bf16})
      for (const Tensor& starts : {Tensor(), key_start}) {
        const int64_t g = nh / nkv;
        const Tensor q = randn({b, nh, tq, hs}, 30, dt), k = randn({b, nkv, tk, hs}, 31, dt),
                     v = randn({b, nkv, tk, hs}, 32, dt), w = randn({b, nh, tq, hs}, 33, DType::f32);
        auto repeated = [&](const Tensor& t) {  // as the autograd op: gradients summed per group
          return reshape(expand(unsqueeze(t, 2), {b, nkv, g, tk, hs}), {b, nh, tk, hs});
        };
        const Result got = run([&](auto& a, auto& c, auto& d) { return causal_attention(a, c, d, 0.4, starts); }, q,
                               k, v, w);
        const Result want = run(
            [&](auto& a, auto& c, auto& d) { return causal_attention(a, repeated(c), repeated(d), 0.4, starts); }, q,
            k, v, w);
        const std::string what = std::string(dtype_name(dt)) + " NKV " + std::to_string(nkv) +
                                 (starts.defined() ? " left-padded" : "");
        BOOST_TEST((got.dk.shape() == k.shape() && got.dv.shape() == v.shape()), what);
        BOOST_TEST(test::max_abs_diff(got.out, want.out) == 0.0, what << " out");
        BOOST_TEST(test::max_abs_diff(got.dq, want.dq) == 0.0, what << " dq");
        check_close(what + " dk", got.dk, want.dk, dt == DType::f32 ? 1e-6 : 1e-2);
        check_close(what + " dv", got.dv, want.dv, dt == DType::f32 ? 1e-6 : 1e-2);
      }
  test::check_error(
      [] {
        ops::causal_attention(Tensor::empty({1, 6, 4, 8}), Tensor::empty({1, 4, 4, 8}), Tensor::empty({1, 4, 4, 8}),
                              1.0);
      },
      {"causal_attention", "NKV dividing NH", "(1, 4, 4, 8)"});
}

// causal_attention_qkv (the transformer's): the same kernels on the same views, so the same
// output and the same (B, T, 3C) gradient as causal_attention on the three views, whose
// gradients the views' backwards put into zeroed copies of qkv and sum (equal in value;
// a -0 summed with those zeros becomes +0). With left padding too; a projection whose width
// is not three times a multiple of the heads is an error naming it.
BOOST_AUTO_TEST_CASE(heads_of_a_fused_projection_in_place) {
  const int64_t b = 2, t = 70, nh = 3, hs = 16, c = nh * hs;
  const Tensor key_start = Tensor::from_vector(std::vector<int64_t>{0, 9}, {b});
  for (DType dt : {DType::f32, DType::bf16})
    for (const Tensor& starts : {Tensor(), key_start}) {
      const Tensor qkv = randn({b, t, 3 * c}, 17, dt);
      const Tensor w = randn({b, nh, t, hs}, 18, DType::f32);
      auto run_on = [&](bool in_place) {
        const Tensor x = leaf(qkv);
        auto heads = [&](int64_t part) {
          return transpose(reshape(narrow(x, 2, part * c, c), {b, t, nh, hs}), 1, 2);
        };
        const Tensor out = in_place ? causal_attention_qkv(x, nh, 0.3, starts)
                                    : causal_attention(heads(0), heads(1), heads(2), 0.3, starts);
        backward(sum(mul(compute_dtype(out), w)));
        return std::pair{detach(out), grad(x)};
      };
      const auto [want_out, want_grad] = run_on(false);
      const auto [got_out, got_grad] = run_on(true);
      const std::string what = std::string(dtype_name(dt)) + (starts.defined() ? " left-padded" : "");
      BOOST_TEST((got_out.shape() == want_out.shape() && got_grad.dtype() == dt), what);
      BOOST_TEST(test::max_abs_diff(got_out, want_out) == 0.0, what << " out");
      BOOST_TEST(test::max_abs_diff(got_grad, want_grad) == 0.0, what << " dqkv");
    }
  test::check_error([] { causal_attention_qkv(Tensor::empty({1, 4, 3 * 10}), 4, 1.0); },
                    {"causal_attention_qkv", "C a multiple of 4 heads", "(1, 4, 30)"});
}

// 16-bit inputs: computed in f32 on the same (rounded) values, results rounded once.
BOOST_AUTO_TEST_CASE(sixteen_bit_inputs) {
  for (DType dt : {DType::bf16, DType::f16}) {
    const Tensor q = randn({2, 2, 70, 16}, 9, dt), k = randn({2, 2, 70, 16}, 10, dt), v = randn({2, 2, 70, 16}, 11, dt);
    const Tensor w = randn({2, 2, 70, 16}, 12, DType::f32);
    auto f = [](const Tensor& a, const Tensor& b, const Tensor& c) { return fused(a, b, c, 0.25); };
    const Result got = run(f, q, k, v, w);
    const Result want = run(f, ops::to(q, DType::f32), ops::to(k, DType::f32), ops::to(v, DType::f32), w);
    const double tol = dt == DType::bf16 ? 1e-2 : 2e-3;  // one rounding to 8 or 11 bits
    for (auto [what, g, r] : {std::tuple{"out", got.out, want.out}, std::tuple{"dq", got.dq, want.dq},
                              std::tuple{"dk", got.dk, want.dk}, std::tuple{"dv", got.dv, want.dv}}) {
      BOOST_TEST((g.dtype() == dt), what << " in " << g.str());
      const double err = test::relative_error(g, r);
      BOOST_TEST(err <= tol, dtype_name(dt) << " " << what << ": relative error " << err);
    }
  }
}

// Every (batch, head) or query block is one thread's work: results do not depend on the
// number of threads.
BOOST_AUTO_TEST_CASE(independent_of_thread_count) {
  const Tensor q = randn({2, 4, 130, 32}, 13, DType::f32), k = randn({2, 4, 130, 32}, 14, DType::f32),
               v = randn({2, 4, 130, 32}, 15, DType::f32), g = randn({2, 4, 130, 32}, 16, DType::f32);
  auto all = [&] {
    const ops::AttentionOut r = ops::causal_attention(q, k, v, 0.2);
    const ops::AttentionGrads d = ops::causal_attention_backward(q, k, v, r.out, r.lse, g, 0.2);
    return std::vector<Tensor>{r.out, r.lse, d.dq, d.dk, d.dv};
  };
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  const std::vector<Tensor> one = all();
  omp_set_num_threads(std::max(threads, 2));
  const std::vector<Tensor> many = all();
  omp_set_num_threads(threads);
  for (size_t i = 0; i < one.size(); ++i)
    BOOST_TEST(std::memcmp(one[i].raw_data(), many[i].raw_data(), one[i].nbytes()) == 0, "result " << i);
}

// Note [Attention layout]: the output and the gradients are (B, NH, T, hs) views of
// (B, T, NH, hs) storage, so the (B, T, NH hs) view a model takes next costs no copy.
BOOST_AUTO_TEST_CASE(outputs_are_stored_by_position) {
  const Tensor q = randn({2, 3, 9, 4}, 24, DType::f32), k = randn({2, 3, 9, 4}, 25, DType::f32),
               v = randn({2, 3, 9, 4}, 26, DType::f32), g = randn({2, 3, 9, 4}, 27, DType::f32);
  const ops::AttentionOut r = ops::causal_attention(q, k, v, 0.5);
  const ops::AttentionGrads d = ops::causal_attention_backward(q, k, v, r.out, r.lse, g, 0.5);
  for (const Tensor& t : {r.out, d.dq, d.dk, d.dv})
    BOOST_TEST((t.shape() == q.shape() && ops::transpose(t, 1, 2).is_contiguous()), t.str());
}

BOOST_AUTO_TEST_CASE(no_graph_without_grad) {
  const Tensor q = leaf(randn({1, 1, 4, 2}, 17, DType::f32));
  NoGradGuard no_grad;
  BOOST_TEST(!requires_grad(causal_attention(q, q, q, 1.0)));
}

BOOST_AUTO_TEST_CASE(rejects_bad_arguments) {
  const Tensor q = randn({1, 2, 5, 4}, 18, DType::f32);
  test::check_error(
      [&] {
        ops::causal_attention(q, randn({1, 2, 4, 4}, 19, DType::f32), q, 1.0);
      },
      {"causal_attention", "Tq <= Tk", "(1, 2, 5, 4)"});
  test::check_error([&] { ops::causal_attention(q, ops::to(q, DType::f64), q, 1.0); }, {"causal_attention", "k"});
  test::check_error(
      [&] {
        ops::causal_attention(q, q, randn({1, 2, 5, 3}, 20, DType::f32), 1.0);
      },
      {"causal_attention", "v (1, 2, 5, 3)"});
  test::check_error(
      [&] {
        ops::causal_attention(ops::view(q, {2, 5, 4}), q, q, 1.0);
      },
      {"causal_attention", "q (2, 5, 4)"});
  const Tensor ids = ops::to(q, DType::i64);
  test::check_error([&] { ops::causal_attention(ids, ids, ids, 1.0); }, {"causal_attention", "i64"});
  const ops::AttentionOut r = ops::causal_attention(q, q, q, 1.0);
  test::check_error([&] { ops::causal_attention_backward(q, q, q, r.out, ops::to(r.lse, DType::f64), q, 1.0); },
                    {"causal_attention_backward", "lse"});
  test::check_error(
      [&] {
        ops::causal_attention_backward(
            q, q, q, r.out, r.lse, q, 1.0, Tensor(),
            {Tensor::empty(q.shape()), Tensor::empty({1, 2, 4, 4}), Tensor::empty(q.shape())});
      },
      {"causal_attention_backward", "dk must be f32 (1, 2, 5, 4)", "(1, 2, 4, 4)"});
}

BOOST_AUTO_TEST_CASE(empty_inputs) {
  const Tensor q = Tensor::zeros({0, 2, 3, 4});
  const ops::AttentionOut r = ops::causal_attention(q, q, q, 1.0);
  BOOST_TEST((r.out.shape() == Shape{0, 2, 3, 4}));
  const Tensor none = Tensor::zeros({1, 2, 0, 4}), kv = randn({1, 2, 3, 4}, 23, DType::f32);
  const ops::AttentionGrads g = ops::causal_attention_backward(none, kv, kv, none, Tensor::empty({1, 2, 0}), none, 1.0);
  BOOST_TEST(ops::max_abs(g.dk) == 0.0);
  BOOST_TEST(ops::max_abs(g.dv) == 0.0);
}

BOOST_AUTO_TEST_SUITE_END()  // test_attention
