// Grouped expert GEMMs (Note [Grouped experts] in nn/moe_experts.h): ops::grouped_matmul_
// against a loop of matmul / add_matmul_ (groups of one shape, and of a row count each, some
// of none), grouped_linear against linear / linear_gelu per group (forward and every gradient, bit for bit on the CPU,
// through the in-place and the split-backward paths) and against finite differences in f64, and MoE layers of GELU and
// SwiGLU experts run grouped against the same layers running their experts one by one.
#include <boost/test/unit_test.hpp>
#include <cmath>

#include "support/check.h"
#include "support/gradcheck.h"
#include "support/params_dtype.h"
#include "triad.h"

BOOST_AUTO_TEST_SUITE(test_moe_grouped)

using namespace triad;

namespace {

Tensor grouped_randn(const Shape& shape, uint64_t seed, DType dtype = DType::f32) {
  Tensor t = Tensor::empty(shape, DType::f32);
  Generator gen(seed);
  ops::normal_(t, 0.0, 1.0, gen);
  return ops::to(t, dtype);
}

// Equal shapes, dtypes and values (bf16/f16 values are exact in f64).
void check_same_bits(const Tensor& a, const Tensor& b, const std::string& what) {
  BOOST_REQUIRE_MESSAGE(a.defined() && b.defined(), what << ": undefined");
  BOOST_REQUIRE_MESSAGE(a.shape() == b.shape() && a.dtype() == b.dtype(), what << ": " << a.str() << " vs " << b.str());
  const std::vector<double> x = a.to_vector<double>(), y = b.to_vector<double>();
  size_t differ = 0;
  for (size_t i = 0; i < x.size(); ++i) differ += x[i] != y[i];
  BOOST_TEST(differ == 0u, what << ": " << differ << " of " << x.size() << " elements differ");
}

// The tensors of one shape, stacked (G, ...) in one buffer.
Tensor grouped_stack(const std::vector<Tensor>& ts) {
  Shape shape = ts[0].shape();
  shape.insert(shape.begin(), int64_t(ts.size()));
  const Tensor all = Tensor::empty(shape, ts[0].dtype());
  for (size_t g = 0; g < ts.size(); ++g) ops::copy_(ops::select(all, 0, int64_t(g)), ts[g]);
  return all;
}

std::vector<Tensor> grouped_params(int64_t groups, const Shape& shape, uint64_t seed, DType dtype) {
  std::vector<Tensor> v;
  for (int64_t g = 0; g < groups; ++g) v.push_back(set_requires_grad(grouped_randn(shape, seed + uint64_t(g), dtype)));
  return v;
}

}  // namespace

BOOST_AUTO_TEST_CASE(grouped_matmul_equals_a_loop_of_matmuls) {
  const int64_t G = 3, m = 5, n = 7, k = 4;
  for (const DType dtype : {DType::f32, DType::f64, DType::bf16})
    for (const bool ta : {false, true})
      for (const bool tb : {false, true}) {
        std::vector<Tensor> a, b, out, acc, acc_ref;
        for (int64_t g = 0; g < G; ++g) {
          a.push_back(grouped_randn(ta ? Shape{k, m} : Shape{m, k}, 10 + uint64_t(g), dtype));
          b.push_back(grouped_randn(tb ? Shape{n, k} : Shape{k, n}, 20 + uint64_t(g), dtype));
          out.push_back(Tensor::empty({m, n}, dtype));
          // Accumulating into f32 beside 16-bit operands, as a 16-bit weight's f32 .grad.
          const DType acc_dtype = dtype == DType::bf16 ? DType::f32 : dtype;
          acc.push_back(grouped_randn({m, n}, 30 + uint64_t(g), acc_dtype));
          acc_ref.push_back(ops::clone(acc.back()));
        }
        ops::grouped_matmul_(out, a, b, ta, tb, false);
        ops::grouped_matmul_(acc, a, b, ta, tb, true);
        // Operands and results as slices of one buffer each, at unaligned offsets.
        const Tensor a_all = grouped_stack(a), out_all = Tensor::empty({G, m, n}, dtype);
        std::vector<Tensor> a_slices, out_slices;
        for (int64_t g = 0; g < G; ++g)
          a_slices.push_back(ops::select(a_all, 0, g)), out_slices.push_back(ops::select(out_all, 0, g));
        ops::grouped_matmul_(out_slices, a_slices, b, ta, tb, false);
        const std::string what = std::string(dtype_name(dtype)) + (ta ? " a^T" : " a") + (tb ? " b^T" : " b");
        for (int64_t g = 0; g < G; ++g) {
          check_same_bits(out[size_t(g)], ops::matmul(a[size_t(g)], b[size_t(g)], ta, tb), what);
          check_same_bits(out_slices[size_t(g)], out[size_t(g)], what + " in slices");
          ops::add_matmul_(acc_ref[size_t(g)], a[size_t(g)], b[size_t(g)], ta, tb);
          check_same_bits(acc[size_t(g)], acc_ref[size_t(g)], what + " accumulated");
        }
      }
  // Groups of another dtype, and lists of other lengths, are named.
  const std::vector<Tensor> a{grouped_randn({2, 3}, 1), grouped_randn({2, 4}, 2, DType::f64)};
  const std::vector<Tensor> b{grouped_randn({3, 2}, 3), grouped_randn({4, 2}, 4, DType::f64)};
  const std::vector<Tensor> out{Tensor::empty({2, 2}), Tensor::empty({2, 2})};
  test::check_error([&] { ops::grouped_matmul_(out, a, b, false, false, false); },
                    {"grouped_matmul_", "group 1", "group 0's dtype"});
  test::check_error([&] { ops::grouped_matmul_({out[0]}, a, b, false, false, false); },
                    {"grouped_matmul_", "as many of out, a and b"});
}

// A dropless layer's products (Note [Grouped experts]): groups of their own row counts,
// some of none, slices of one buffer of rows at the offsets the counts give, against one
// matmul (add_matmul_) per group, bit for bit. The forward's and the input gradient's form
// (rows in M) and the weight gradient's (rows in K: a group of no rows gives zeros, or adds
// nothing).
BOOST_AUTO_TEST_CASE(grouped_matmul_with_a_row_count_per_group_equals_the_loop) {
  const int64_t n = 7, k = 5;
  const std::vector<std::vector<int64_t>> layouts{{5, 0, 11, 3}, {0, 0, 19, 0}, {1, 2, 0, 4}};
  for (const std::vector<int64_t>& rows : layouts)
    for (const DType dtype : {DType::f32, DType::f64}) {
      int64_t total = 0;
      for (const int64_t r : rows) total += r;
      const Tensor x = grouped_randn({total, k}, 5, dtype), dy = grouped_randn({total, n}, 6, dtype);
      const Tensor y = Tensor::empty({total, n}, dtype), dx = Tensor::empty({total, k}, dtype);
      std::vector<Tensor> xs, dys, ys, dxs, w, dw, acc, acc_ref;
      int64_t at = 0;
      for (size_t g = 0; g < rows.size(); ++g) {
        xs.push_back(ops::narrow(x, 0, at, rows[g])), dys.push_back(ops::narrow(dy, 0, at, rows[g]));
        ys.push_back(ops::narrow(y, 0, at, rows[g])), dxs.push_back(ops::narrow(dx, 0, at, rows[g]));
        at += rows[g];
        w.push_back(grouped_randn({n, k}, 10 + g, dtype));
        dw.push_back(Tensor::full({n, k}, 3.0, dtype));  // overwritten
        acc.push_back(grouped_randn({n, k}, 20 + g, dtype));
        acc_ref.push_back(ops::clone(acc.back()));
      }
      ops::grouped_matmul_(ys, xs, w, false, true, false);     // y = x w^T
      ops::grouped_matmul_(dxs, dys, w, false, false, false);  // dx = dy w
      ops::grouped_matmul_(dw, dys, xs, true, false, false);   // dw = dy^T x
      ops::grouped_matmul_(acc, dys, xs, true, false, true);   // .grad += dy^T x
      std::string what = std::string(dtype_name(dtype)) + " rows";
      for (const int64_t r : rows) what += " " + std::to_string(r);
      for (size_t g = 0; g < rows.size(); ++g) {
        const std::string group = what + ", group " + std::to_string(g);
        if (rows[g] > 0) {
          check_same_bits(ys[g], ops::matmul(xs[g], w[g], false, true), group + ": y");
          check_same_bits(dxs[g], ops::matmul(dys[g], w[g]), group + ": dx");
          check_same_bits(dw[g], ops::matmul(dys[g], xs[g], true, false), group + ": dw");
          ops::add_matmul_(acc_ref[g], dys[g], xs[g], true, false);
        } else {
          BOOST_TEST(ops::max_abs(dw[g]) == 0.0, group << ": dw of no rows");
        }
        check_same_bits(acc[g], acc_ref[g], group + ": accumulated");
      }
    }
}

namespace {

struct GroupedRun {
  Tensor y, dx;
  std::vector<Tensor> dw, db;
};

// y = grouped_linear (or each group's linear / linear_gelu) of x; backward of sum(y * r).
// Weights 0 and 2 come with a .grad to add into (Note [Gradients added in place]); under
// `defer` the weights' gradients wait in a split-backward queue that runs afterwards.
GroupedRun run_grouped_linear(bool grouped, bool bias, bool gelu, DType dtype, bool defer) {
  const int64_t G = 3, rows = 6, in = 5, out = 4;
  const Tensor x = set_requires_grad(grouped_randn({G, rows, in}, 40, dtype));
  const std::vector<Tensor> w = grouped_params(G, {out, in}, 50, dtype);
  const std::vector<Tensor> b = bias ? grouped_params(G, {out}, 60, dtype) : std::vector<Tensor>{};
  for (const size_t g : {size_t(0), size_t(2)}) set_grad(w[g], grouped_randn({out, in}, 70 + g, dtype));
  Tensor y;
  if (grouped) {
    y = grouped_linear(x, w, b, gelu);
  } else {
    std::vector<Tensor> ys;
    for (int64_t g = 0; g < G; ++g) {
      const Tensor xg = select(x, 0, g), bg = bias ? b[size_t(g)] : Tensor();
      ys.push_back(unsqueeze(gelu ? linear_gelu(xg, w[size_t(g)], bg) : linear(xg, w[size_t(g)], bg), 0));
    }
    y = cat(ys, 0);
  }
  const Tensor r = grouped_randn(y.shape(), 80, dtype);
  {
    WeightGradQueue queue;
    std::optional<DeferWeightGrads> deferring;
    if (defer) deferring.emplace(queue);
    backward(sum(mul(y, r)));
    BOOST_TEST(queue.empty() == !defer);
    deferring.reset();
    queue.run();
  }
  GroupedRun run{detach(y), grad(x)};
  for (const Tensor& t : w) run.dw.push_back(grad(t));
  for (const Tensor& t : b) run.db.push_back(grad(t));
  return run;
}

}  // namespace

BOOST_AUTO_TEST_CASE(grouped_linear_equals_linear_per_group_bit_for_bit) {
  for (const DType dtype : {DType::f32, DType::bf16})
    for (const bool bias : {false, true})
      for (const bool gelu : {false, true})
        for (const bool defer : {false, true}) {
          const std::string what = std::string(dtype_name(dtype)) + (bias ? " bias" : "") + (gelu ? " gelu" : "") +
                                   (defer ? " deferred" : "");
          const GroupedRun a = run_grouped_linear(true, bias, gelu, dtype, defer);
          const GroupedRun b = run_grouped_linear(false, bias, gelu, dtype, defer);
          check_same_bits(a.y, b.y, what + ": y");
          check_same_bits(a.dx, b.dx, what + ": dx");
          for (size_t g = 0; g < b.dw.size(); ++g) check_same_bits(a.dw[g], b.dw[g], what + ": dw" + std::to_string(g));
          BOOST_TEST(a.db.size() == b.db.size());
          for (size_t g = 0; g < b.db.size(); ++g) check_same_bits(a.db[g], b.db[g], what + ": db" + std::to_string(g));
        }
}

// grouped_linear over a row count per group, some of none, against linear / linear_gelu
// on each group's rows: forward and every gradient bit for bit; a group of no rows gets
// zero gradients.
BOOST_AUTO_TEST_CASE(grouped_linear_with_row_counts_equals_linear_per_group_bit_for_bit) {
  const int64_t in = 5, out = 4;
  for (const std::vector<int64_t>& rows : {std::vector<int64_t>{4, 0, 7}, std::vector<int64_t>{0, 11, 0}})
    for (const bool gelu : {false, true}) {
      const int64_t G = int64_t(rows.size());
      int64_t total = 0;
      for (const int64_t r : rows) total += r;
      auto run = [&](bool grouped) {
        const Tensor x = set_requires_grad(grouped_randn({total, in}, 140));
        const std::vector<Tensor> w = grouped_params(G, {out, in}, 150, DType::f32);
        const std::vector<Tensor> b = grouped_params(G, {out}, 160, DType::f32);
        Tensor y;
        if (grouped) {
          y = grouped_linear(x, rows, w, b, gelu);
        } else {
          std::vector<Tensor> ys;
          int64_t at = 0;
          for (size_t g = 0; g < rows.size(); ++g) {
            if (rows[g] == 0) continue;
            const Tensor xg = narrow(x, 0, at, rows[g]);
            ys.push_back(gelu ? linear_gelu(xg, w[g], b[g]) : linear(xg, w[g], b[g]));
            at += rows[g];
          }
          y = cat(ys, 0);
        }
        backward(sum(mul(y, grouped_randn(y.shape(), 170))));
        GroupedRun r{detach(y), grad(x)};
        for (size_t g = 0; g < rows.size(); ++g) {
          r.dw.push_back(rows[g] > 0 ? grad(w[g]) : Tensor::zeros({out, in}));
          r.db.push_back(rows[g] > 0 ? grad(b[g]) : Tensor::zeros({out}));
          if (grouped && rows[g] == 0) {  // the grouped path gives the zeros itself
            check_same_bits(grad(w[g]), r.dw.back(), "dw of no rows");
            check_same_bits(grad(b[g]), r.db.back(), "db of no rows");
          }
        }
        return r;
      };
      const GroupedRun a = run(true), b = run(false);
      const std::string what = std::string(gelu ? "gelu" : "linear") + " rows " + std::to_string(rows[0]) + " " +
                               std::to_string(rows[1]) + " " + std::to_string(rows[2]);
      check_same_bits(a.y, b.y, what + ": y");
      check_same_bits(a.dx, b.dx, what + ": dx");
      for (size_t g = 0; g < rows.size(); ++g) {
        check_same_bits(a.dw[g], b.dw[g], what + ": dw" + std::to_string(g));
        check_same_bits(a.db[g], b.db[g], what + ": db" + std::to_string(g));
      }
    }
  test::check_error(
      [] {
        grouped_linear(Tensor::zeros({5, 3}), {2, 2}, grouped_params(2, {4, 3}, 1, DType::f32));
      },
      {"grouped_linear", "2 row counts summing to 4"});
}

BOOST_AUTO_TEST_CASE(grouped_linear_gradients_match_finite_differences) {
  const int64_t G = 2, rows = 3, in = 4, out = 3;
  for (const bool gelu : {false, true}) {
    std::vector<Tensor> inputs{set_requires_grad(grouped_randn({G, rows, in}, 90, DType::f64))};
    for (const Tensor& w : grouped_params(G, {out, in}, 91, DType::f64)) inputs.push_back(w);
    for (const Tensor& b : grouped_params(G, {out}, 95, DType::f64)) inputs.push_back(b);
    test::gradcheck(
        gelu ? "gelu" : "linear",
        [&](const std::vector<Tensor>& t) {
          return grouped_linear(t[0], {t.begin() + 1, t.begin() + 1 + G}, {t.begin() + 1 + G, t.end()}, gelu);
        },
        inputs);
  }
}

namespace {

struct LayerRun {
  Tensor out, dx;
  std::vector<std::pair<std::string, Tensor>> grads;
  int expert_calls = 0;  // forwards through expert 0's own module: none when grouped
};

// A training forward and backward of an MoE layer whose experts run grouped or one by one,
// built and drawing from the same seeds.
LayerRun run_moe_layer(const nn::MoEConfig& config, const nn::ExpertFactory& make, bool grouped, DType dtype,
                       uint64_t seed) {
  const SeededDefaultGenerator draws(seed + 2);  // the residual MLP's initialisation, the experts' dropout
  Generator gen(seed);
  nn::MoE moe(8, config, make, nn::local_experts(), gen);
  moe.experts->grouped = grouped;
  moe.train();
  auto calls = std::make_shared<int>(0);
  moe.experts->children()[0].second->register_forward_pre_hook([calls](nn::Module&) { ++*calls; });
  test::params_to(moe, dtype);
  const Tensor x = set_requires_grad(grouped_randn({2, 5, 8}, seed + 1, dtype));
  const nn::MoEOutput o = moe.apply(x);
  backward(add(to(sum(mul(o.out, grouped_randn(o.out.shape(), seed + 3, dtype))), DType::f32), o.loss));
  LayerRun run{detach(o.out), grad(x), {}, *calls};
  for (const auto& [name, p] : moe.named_parameters()) run.grads.emplace_back(name, grad(p));
  return run;
}

}  // namespace

BOOST_AUTO_TEST_CASE(grouped_experts_equal_the_loop_bit_for_bit) {
  struct Case {
    std::string name;
    nn::MoEConfig config;
    nn::ExpertFactory make;
  };
  const std::vector<Case> cases{
      {"top-2 GELU with drops and dropout",
       {.num_experts = 4, .k = 2, .capacity_factor = 0.75, .min_capacity = 0},
       nn::gelu_mlp_expert(8, 0.1)},
      {"top-1 SwiGLU", {.num_experts = 3, .capacity_factor = 1.0}, nn::swiglu_expert(8, 12)},
      {"dropless top-2 SwiGLU", {.num_experts = 4, .k = 2, .drop_tokens = false}, nn::swiglu_expert(8, 12)},
      // 10 tokens over 16 experts: most experts receive no rows.
      {"dropless top-1 GELU, experts without rows", {.num_experts = 16, .drop_tokens = false}, nn::gelu_mlp_expert(8)},
      {"residual GELU", {.num_experts = 2, .use_residual = true}, nn::gelu_mlp_expert(8)},
  };
  for (const Case& c : cases)
    for (const DType dtype : {DType::f32, DType::bf16}) {
      const std::string what = c.name + " " + dtype_name(dtype);
      const LayerRun a = run_moe_layer(c.config, c.make, true, dtype, 200);
      const LayerRun b = run_moe_layer(c.config, c.make, false, dtype, 200);
      BOOST_TEST(a.expert_calls == 0, what << ": the grouped path ran");
      BOOST_TEST(b.expert_calls == 1, what << ": the loop ran");
      check_same_bits(a.out, b.out, what + ": out");
      check_same_bits(a.dx, b.dx, what + ": dx");
      BOOST_REQUIRE(a.grads.size() == b.grads.size());
      for (size_t i = 0; i < a.grads.size(); ++i)
        check_same_bits(a.grads[i].second, b.grads[i].second, what + ": " + a.grads[i].first);
    }
}

BOOST_AUTO_TEST_CASE(experts_that_cannot_run_grouped_run_the_loop) {
  // Fake quantization multiplies by another weight than the layer's own: the loop runs it.
  Generator g1(300), g2(300);
  const nn::MoEConfig config{.num_experts = 2, .capacity_factor = 2.0};
  nn::MoE grouped(8, config, nn::swiglu_expert(8, 12), nn::local_experts(), g1);
  nn::MoE loop(8, config, nn::swiglu_expert(8, 12), nn::local_experts(), g2);
  loop.experts->grouped = false;
  for (nn::MoE* m : {&grouped, &loop})
    for (const auto& [name, module] : m->experts->named_modules(m->experts))
      if (auto* l = dynamic_cast<nn::Linear*>(module.get())) l->use_fake_quantization(QuantFormat{8, 4});
  const Tensor x = grouped_randn({5, 8}, 301);
  NoGradGuard no_grad;
  check_same_bits(grouped.apply(x).out, loop.apply(x).out, "fake-quantized experts");
}

BOOST_AUTO_TEST_SUITE_END()  // test_moe_grouped
