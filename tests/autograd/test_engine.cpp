// The backward engine: accumulation, graph shapes (reuse, diamonds), grad mode, leaves,
// error paths, graph release, hooks, detach, and activation checkpointing (same gradients
// as without, dropout masks replayed, nesting).
#include <boost/test/unit_test.hpp>

#include "autograd/checkpoint.h"
#include "autograd/engine.h"
#include "autograd/functions.h"
#include "autograd/grad_mode.h"
#include "autograd/meta.h"
#include "support/check.h"

BOOST_AUTO_TEST_SUITE(test_engine)

using namespace triad;

namespace {

Tensor vec(const std::vector<double>& v, const Shape& shape) { return Tensor::from_vector(v, shape); }
Tensor vec(const std::vector<double>& v) { return vec(v, {int64_t(v.size())}); }

Tensor leaf(const std::vector<double>& v, const Shape& shape) {
  Tensor t = vec(v, shape);
  set_requires_grad(t);
  return t;
}
Tensor leaf(const std::vector<double>& v) { return leaf(v, {int64_t(v.size())}); }

Tensor randn_leaf(const Shape& shape, uint64_t seed) {
  Tensor t = Tensor::empty(shape, DType::f64);
  Generator gen(seed);
  ops::normal_(t, 0.0, 1.0, gen);
  set_requires_grad(t);
  return t;
}

void check_values(const Tensor& t, const std::vector<double>& expected, const std::string& what, double tol = 1e-12) {
  BOOST_REQUIRE_MESSAGE(t.defined(), what << ": undefined");
  const std::vector<double> got = t.to_vector<double>();
  BOOST_REQUIRE_EQUAL(got.size(), expected.size());
  for (size_t i = 0; i < got.size(); ++i)
    BOOST_TEST(std::fabs(got[i] - expected[i]) <= tol * std::max(1.0, std::fabs(expected[i])),
               what << " [" << i << "]: " << got[i] << " vs " << expected[i]);
}

// Throws either kind of triad error (never crashes).
template <class F>
void expect_triad_throw(F&& f, const std::string& what) {
  try {
    f();
  } catch (const Error&) {
    return;
  } catch (const InternalError&) {
    return;
  } catch (const std::exception& e) {
    BOOST_ERROR(what << ": unexpected exception " << e.what());
    return;
  }
  BOOST_ERROR(what << ": did not throw");
}

}  // namespace

BOOST_AUTO_TEST_CASE(gradients_accumulate_across_backward_calls) {
  const Tensor x = leaf({1, 2, 3});
  backward(sum(mul(x, 2.0)));
  check_values(grad(x), {2, 2, 2}, "first");
  backward(sum(mul(x, x)));
  check_values(grad(x), {4, 6, 8}, "second");  // 2 + 2x
  // The accumulated gradient is the leaf's own: the values of x did not change.
  check_values(x, {1, 2, 3}, "x");
  set_grad(x, Tensor());
  BOOST_TEST(!grad(x).defined());
  backward(sum(x));
  check_values(grad(x), {1, 1, 1}, "after reset");
}

BOOST_AUTO_TEST_CASE(a_tensor_used_twice_gets_summed_gradients) {
  const Tensor x = leaf({1, -2, 3});
  backward(sum(mul(x, x)));
  check_values(grad(x), {2, -4, 6}, "x*x");
  const Tensor y = leaf({0.5, 2});
  backward(sum(add(add(y, y), mul(y, 3.0))));
  check_values(grad(y), {5, 5}, "y + y + 3y");
  // Through views of the same leaf.
  const Tensor z = leaf({1, 2, 3, 4}, {2, 2});
  backward(sum(mul(transpose(z, 0, 1), z)));       // sum_ij z_ji z_ij
  check_values(grad(z), {2, 6, 4, 8}, "z^T * z");  // d/dz_ij = 2 z_ji
}

BOOST_AUTO_TEST_CASE(diamond_graphs) {
  // x -> a = 3x -> {b = a*a, c = exp(a)} -> d = b + c. dd/dx = 3 (2a + e^a).
  const Tensor x = leaf({0.1, -0.2});
  const Tensor a = mul(x, 3.0);
  const Tensor d = add(mul(a, a), exp(a));
  backward(sum(d));
  check_values(grad(x), {3 * (0.6 + std::exp(0.3)), 3 * (-1.2 + std::exp(-0.6))}, "diamond");
  // Deeper: two diamonds in series and a long chain beside them.
  const Tensor y = leaf({0.5});
  Tensor h = y;
  for (int i = 0; i < 3; ++i) h = add(mul(h, h), h);  // h <- h^2 + h
  Tensor chain = y;
  for (int i = 0; i < 50; ++i) chain = add(chain, 0.0);
  backward(sum(add(h, chain)));
  // h1 = y^2 + y, h2 = h1^2 + h1, h3 = h2^2 + h2: dh3/dy = (2h2+1)(2h1+1)(2y+1).
  const double y0 = 0.5, h1 = y0 * y0 + y0, h2 = h1 * h1 + h1;
  check_values(grad(y), {(2 * h2 + 1) * (2 * h1 + 1) * (2 * y0 + 1) + 1}, "double diamond");
}

BOOST_AUTO_TEST_CASE(several_roots_at_once) {
  const Tensor x = leaf({1, 2});
  const Tensor a = mul(x, 2.0), b = mul(x, x);
  backward({a, b}, {vec({1, 10}), vec({100, 1000})});
  check_values(grad(x), {2 + 200, 20 + 4000}, "two roots");
  // A root that feeds another root.
  const Tensor y = leaf({3});
  const Tensor c = mul(y, 2.0), e = mul(c, c);
  backward({e, c}, {Tensor(), Tensor()});  // de/dy = 8y = 24, dc/dy = 2
  check_values(grad(y), {26}, "nested roots");
}

BOOST_AUTO_TEST_CASE(no_grad_guard_records_nothing) {
  const Tensor x = leaf({1, 2});
  BOOST_TEST(GradMode::enabled());
  {
    NoGradGuard guard;
    BOOST_TEST(!GradMode::enabled());
    const Tensor y = mul(x, 2.0);
    BOOST_TEST(!requires_grad(y));
    BOOST_TEST(!grad_fn(y));
    BOOST_TEST(is_leaf(y));
    const Tensor z = matmul(view(x, {1, 2}), view(x, {2, 1}));
    BOOST_TEST(!requires_grad(z));
    BOOST_TEST(!requires_grad(softmax(x)));
    BOOST_TEST(!requires_grad(cat({x, x}, 0)));
    {
      EnableGradGuard enable;
      BOOST_TEST(requires_grad(mul(x, 2.0)));
      NoGradGuard inner;
      BOOST_TEST(!requires_grad(mul(x, 2.0)));
    }
    BOOST_TEST(!GradMode::enabled());
    expect_triad_throw([&] { backward(sum(y)); }, "backward of an unrecorded result");
  }
  BOOST_TEST(GradMode::enabled());
  const Tensor y = mul(x, 2.0);
  BOOST_TEST(requires_grad(y));
  BOOST_TEST(grad_fn(y) != nullptr);
  BOOST_TEST(!grad(x).defined());  // nothing ran so far
}

BOOST_AUTO_TEST_CASE(leaves_and_non_leaves) {
  const Tensor plain = vec({1, 2});
  BOOST_TEST(is_leaf(plain));
  BOOST_TEST(!requires_grad(plain));
  const Tensor x = leaf({1, 2});
  BOOST_TEST(is_leaf(x));
  BOOST_TEST(requires_grad(x));
  BOOST_TEST(!grad_fn(x));
  const Tensor y = mul(x, 3.0);
  BOOST_TEST(!is_leaf(y));
  BOOST_TEST(requires_grad(y));
  BOOST_TEST(grad_fn(y) != nullptr);
  // Ops on tensors that do not require grad record nothing, even in grad mode.
  const Tensor z = mul(plain, 3.0);
  BOOST_TEST(!requires_grad(z));
  BOOST_TEST(is_leaf(z));
  // A view of a leaf is not a leaf, and recording never touches the leaf's own handle.
  const Tensor v = transpose(view(x, {1, 2}), 0, 1);
  BOOST_TEST(!is_leaf(v));
  BOOST_TEST(is_leaf(x));
  BOOST_TEST(v.storage() == x.storage());
  backward(sum(mul(y, plain)));
  check_values(grad(x), {3, 6}, "leaf grad");
  BOOST_TEST(!grad(y).defined());      // non-leaves do not keep gradients
  BOOST_TEST(!grad(plain).defined());  // nor do tensors that do not require grad
  BOOST_CHECK_THROW(set_requires_grad(y), Error);
  BOOST_CHECK_THROW(set_requires_grad(Tensor::zeros({2}, DType::i64)), Error);
  // Turning requires_grad off on a leaf stops recording.
  const Tensor w = leaf({1});
  set_requires_grad(w, false);
  BOOST_TEST(!requires_grad(mul(w, 2.0)));
}

BOOST_AUTO_TEST_CASE(backward_argument_errors) {
  const Tensor x = leaf({1, 2, 3});
  const Tensor y = mul(x, 2.0);
  BOOST_CHECK_THROW(backward(y), Error);  // non-scalar without a gradient
  BOOST_CHECK_THROW(backward(y, vec({1, 1})), Error);
  BOOST_CHECK_THROW(backward(vec({1})), Error);  // does not require grad
  BOOST_CHECK_THROW(backward({y}, {}), Error);
  backward(y, vec({1, 2, 3}));
  check_values(grad(x), {2, 4, 6}, "non-scalar with gradient");
  // A one-element root of any rank needs no gradient.
  const Tensor z = leaf({5}, {1, 1});
  backward(mul(z, z));
  check_values(grad(z), {10}, "(1, 1) root");
}

BOOST_AUTO_TEST_CASE(released_graph_and_retain_graph) {
  const Tensor x = leaf({1, 2});
  const Tensor loss = sum(exp(mul(x, x)));
  backward(loss);
  const std::vector<double> once = grad(x).to_vector<double>();
  expect_triad_throw([&] { backward(loss); }, "second backward through a released graph");

  const Tensor y = leaf({1, 2});
  const Tensor l2 = sum(exp(mul(y, y)));
  backward(l2, Tensor(), /*retain_graph=*/true);
  backward(l2, Tensor(), /*retain_graph=*/true);
  check_values(grad(y), {2 * once[0], 2 * once[1]}, "retained twice");
  backward(l2);  // a third pass, releasing
  check_values(grad(y), {3 * once[0], 3 * once[1]}, "three passes");
  expect_triad_throw([&] { backward(l2); }, "after the releasing pass");
}

BOOST_AUTO_TEST_CASE(hooks_on_leaves) {
  const Tensor x = leaf({1, 2});
  int calls = 0;
  register_hook(x, [&](const Tensor& g) {
    ++calls;
    check_values(g, {2, 2}, "hook sees the incoming gradient");
    return ops::mul(g, 10.0);
  });
  backward(sum(mul(x, 2.0)));
  BOOST_TEST(calls == 1);
  check_values(grad(x), {20, 20}, "scaled by the hook");
  // Hooks run in registration order, each on the previous one's result.
  const Tensor y = leaf({1});
  std::vector<int> order;
  register_hook(y, [&](const Tensor& g) {
    order.push_back(1);
    return ops::add(g, 1.0);
  });
  register_hook(y, [&](const Tensor& g) {
    order.push_back(2);
    return ops::mul(g, 3.0);
  });
  backward(sum(y));
  BOOST_TEST((order == std::vector<int>{1, 2}));
  check_values(grad(y), {6}, "(1 + 1) * 3");
  // A leaf used twice: its hook sees the summed gradient once.
  const Tensor z = leaf({3});
  int zc = 0;
  register_hook(z, [&](const Tensor& g) {
    ++zc;
    check_values(g, {6}, "summed");
    return g;
  });
  backward(sum(mul(z, z)));
  BOOST_TEST(zc == 1);
}

BOOST_AUTO_TEST_CASE(hooks_on_intermediate_tensors) {
  const Tensor x = leaf({1, 2});
  const Tensor y = mul(x, 2.0);  // y = 2x
  int calls = 0;
  register_hook(y, [&](const Tensor& g) {
    ++calls;
    check_values(g, {4, 8}, "dL/dy = 2y");
    return ops::mul(g, 0.5);
  });
  backward(sum(mul(y, y)));
  BOOST_TEST(calls == 1);
  check_values(grad(x), {4, 8}, "halved by the hook");  // 0.5 * 2y * 2
  BOOST_TEST(!grad(y).defined());
  // A hook on one output of a multi-use intermediate sees the sum over its uses.
  const Tensor a = leaf({1});
  const Tensor b = mul(a, 3.0);
  double seen = 0;
  register_hook(b, [&](const Tensor& g) {
    seen = g.item();
    return g;
  });
  backward(sum(add(mul(b, 2.0), mul(b, b))));  // d/db = 2 + 2b = 8
  BOOST_TEST(seen == 8.0);
  check_values(grad(a), {24}, "through the hooked tensor");
  // A hook on the root itself.
  const Tensor c = leaf({2});
  const Tensor root = sum(mul(c, c));
  register_hook(root, [](const Tensor& g) { return ops::mul(g, 7.0); });
  backward(root);
  check_values(grad(c), {28}, "root hook");
}

BOOST_AUTO_TEST_CASE(post_accumulate_grad_hooks) {
  const Tensor x = leaf({1, 2});
  std::vector<std::vector<double>> seen;
  register_post_accumulate_grad_hook(x, [&](const Tensor& t) {
    BOOST_TEST(t.is_same(x));
    seen.push_back(grad(t).to_vector<double>());
  });
  backward(sum(mul(x, x)));  // x used twice: one accumulation
  BOOST_REQUIRE_EQUAL(seen.size(), 1u);
  BOOST_TEST((seen[0] == std::vector<double>{2, 4}));
  backward(sum(mul(x, 3.0)));
  BOOST_REQUIRE_EQUAL(seen.size(), 2u);
  BOOST_TEST((seen[1] == std::vector<double>{5, 7}));  // already updated when the hook runs
  // Gradient hooks run before the accumulation the post hook observes.
  const Tensor y = leaf({1});
  double post = 0;
  register_hook(y, [](const Tensor& g) { return ops::mul(g, 2.0); });
  register_post_accumulate_grad_hook(y, [&](const Tensor& t) { post = grad(t).item(); });
  backward(sum(mul(y, 5.0)));
  BOOST_TEST(post == 10.0);
  // Leaves the pass does not reach do not fire.
  const Tensor unused = leaf({1});
  int fired = 0;
  register_post_accumulate_grad_hook(unused, [&](const Tensor&) { ++fired; });
  backward(sum(mul(x, 1.0)));
  BOOST_TEST(fired == 0);
  BOOST_REQUIRE_EQUAL(seen.size(), 3u);
}

BOOST_AUTO_TEST_CASE(leaf_gradients_never_alias) {
  // The same incoming gradient tensor reaching two leaves must not become both .grads.
  const Tensor x = leaf({1, 2}), y = leaf({3, 4});
  backward(sum(mul(add(x, y), 2.0)));
  backward(sum(mul(add(x, y), 2.0)));
  check_values(grad(x), {4, 4}, "x");
  check_values(grad(y), {4, 4}, "y");
  BOOST_TEST(grad(x).storage() != grad(y).storage());
  // Nor may a .grad alias a gradient the caller passed in.
  const Tensor z = leaf({1, 2});
  const Tensor g = vec({1, 1});
  backward(z, g);
  backward(z, g);
  check_values(g, {1, 1}, "caller's gradient untouched");
  check_values(grad(z), {2, 2}, "z");
}

BOOST_AUTO_TEST_CASE(detach_cuts_the_graph) {
  const Tensor x = leaf({1, 2});
  const Tensor d = detach(x);
  BOOST_TEST(!requires_grad(d));
  BOOST_TEST(is_leaf(d));
  BOOST_TEST(d.storage() == x.storage());  // same data
  BOOST_TEST(requires_grad(x));            // the original is untouched
  backward(sum(add(mul(x, 3.0), mul(detach(x), 5.0))));
  check_values(grad(x), {3, 3}, "only the attached path");
  const Tensor y = mul(x, x);
  const Tensor dy = detach(y);
  BOOST_TEST(!requires_grad(dy));
  BOOST_TEST(!grad_fn(dy));
  BOOST_TEST(grad_fn(y) != nullptr);
  BOOST_TEST(!requires_grad(mul(dy, 2.0)));
}

// ---------------------------------------------------------------- activation checkpointing

namespace {

struct Params {
  Tensor w1, b1, w2;
};

Params make_params() { return {randn_leaf({6, 4}, 1), randn_leaf({6}, 2), randn_leaf({4, 6}, 3)}; }

void clear(const std::vector<Tensor>& ts) {
  for (const Tensor& t : ts) set_grad(t, Tensor());
}

// A block with parameters captured by the segment (not passed as inputs).
Tensor block(const Params& p, const Tensor& x, double drop) {
  Tensor h = tanh(linear(x, p.w1, p.b1));
  h = dropout(h, drop, drop > 0);
  return add(x, linear(gelu(h), p.w2));
}

}  // namespace

BOOST_AUTO_TEST_CASE(checkpoint_gives_the_same_gradients) {
  const Params p = make_params();
  const Tensor x = randn_leaf({3, 4}, 4);
  const std::vector<Tensor> all = {p.w1, p.b1, p.w2, x};
  const Tensor w = ops::mul(ops::clone(x), 0.3);

  const Tensor plain_out = block(p, mul(x, 2.0), 0.0);
  backward(sum(mul(plain_out, w)));
  std::vector<Tensor> plain;
  for (const Tensor& t : all) plain.push_back(ops::clone(grad(t)));
  clear(all);

  int runs = 0;
  const Tensor ck_out = checkpoint(
      [&](const Tensor& h) {
        ++runs;
        return block(p, h, 0.0);
      },
      mul(x, 2.0));
  BOOST_TEST(runs == 1);
  BOOST_TEST(requires_grad(ck_out));
  BOOST_TEST(test::max_abs_diff(ck_out, plain_out) == 0.0);
  for (const Tensor& t : all) BOOST_TEST(!grad(t).defined());
  backward(sum(mul(ck_out, w)));
  BOOST_TEST(runs == 2);  // recomputed once, in the backward
  for (size_t i = 0; i < all.size(); ++i) {
    BOOST_REQUIRE(grad(all[i]).defined());
    BOOST_TEST(test::max_abs_diff(grad(all[i]), plain[i]) == 0.0, "tensor " << i);
    BOOST_TEST(ops::max_abs(plain[i]) > 0.0);
  }
}

BOOST_AUTO_TEST_CASE(checkpoint_replays_dropout_masks) {
  const Params p = make_params();
  const Tensor x = randn_leaf({8, 4}, 5);
  const std::vector<Tensor> all = {p.w1, p.b1, p.w2, x};
  const GeneratorState start = default_generator().state();

  default_generator().set_state(start);
  const Tensor plain_out = block(p, x, 0.5);
  backward(sum(mul(plain_out, plain_out)));
  std::vector<Tensor> plain;
  for (const Tensor& t : all) plain.push_back(ops::clone(grad(t)));
  clear(all);

  default_generator().set_state(start);
  const Tensor ck_out = checkpoint([&](const Tensor& h) { return block(p, h, 0.5); }, x);
  BOOST_TEST(test::max_abs_diff(ck_out, plain_out) == 0.0);
  const GeneratorState after_forward = default_generator().state();
  BOOST_TEST(after_forward.offset > start.offset);
  // Draws between the forward and the backward must not change the replayed mask.
  Tensor noise = Tensor::empty({100}, DType::f64);
  ops::uniform_(noise, 0, 1);
  const GeneratorState before_backward = default_generator().state();
  backward(sum(mul(ck_out, ck_out)));
  for (size_t i = 0; i < all.size(); ++i) BOOST_TEST(test::max_abs_diff(grad(all[i]), plain[i]) == 0.0, "tensor " << i);
  // The backward leaves the generator where it found it.
  BOOST_TEST(default_generator().state().offset == before_backward.offset);
  BOOST_TEST(default_generator().state().seed == before_backward.seed);
  // Sanity: another mask gives other gradients (the comparison above can fail).
  clear(all);
  const Tensor other = block(p, x, 0.5);
  backward(sum(mul(other, other)));
  BOOST_TEST(test::max_abs_diff(grad(p.w1), plain[0]) > 0.0);
  default_generator().set_state(start);
}

BOOST_AUTO_TEST_CASE(nested_checkpoints) {
  const Params p = make_params(), q = {randn_leaf({6, 4}, 6), randn_leaf({6}, 7), randn_leaf({4, 6}, 8)};
  const Tensor x = randn_leaf({3, 4}, 9);
  const std::vector<Tensor> all = {p.w1, p.b1, p.w2, q.w1, q.b1, q.w2, x};
  const GeneratorState start = default_generator().state();

  default_generator().set_state(start);
  const Tensor plain_out = block(q, block(p, x, 0.3), 0.3);
  backward(sum(mul(plain_out, plain_out)));
  std::vector<Tensor> plain;
  for (const Tensor& t : all) plain.push_back(ops::clone(grad(t)));
  clear(all);

  default_generator().set_state(start);
  int inner_runs = 0, outer_runs = 0;
  const Tensor out = checkpoint(
      [&](const Tensor& h) {
        ++outer_runs;
        const Tensor mid = checkpoint(
            [&](const Tensor& u) {
              ++inner_runs;
              return block(p, u, 0.3);
            },
            h);
        return block(q, mid, 0.3);
      },
      x);
  BOOST_TEST(test::max_abs_diff(out, plain_out) == 0.0);
  backward(sum(mul(out, out)));
  BOOST_TEST(outer_runs == 2);
  BOOST_TEST(inner_runs == 3);  // outer forward, outer recompute, inner recompute
  for (size_t i = 0; i < all.size(); ++i) {
    BOOST_REQUIRE(grad(all[i]).defined());
    BOOST_TEST(test::max_abs_diff(grad(all[i]), plain[i]) <= 1e-14 * std::max(1.0, ops::max_abs(plain[i])),
               "tensor " << i);
  }
  default_generator().set_state(start);
}

BOOST_AUTO_TEST_CASE(checkpoint_with_several_inputs_and_outputs) {
  const Tensor a = randn_leaf({2, 3}, 10), b = randn_leaf({2, 3}, 11);
  const Tensor c = Tensor::full({2, 3}, 0.5, DType::f64);  // no grad
  auto seg = [](const std::vector<Tensor>& in) {
    return std::vector<Tensor>{mul(in[0], in[1]), add(exp(in[0]), in[2]), mul(in[1], in[2])};
  };
  const std::vector<Tensor> ref = seg({a, b, c});
  backward(sum(add(ref[0], ref[1])));  // the third output unused
  const Tensor ga = ops::clone(grad(a)), gb = ops::clone(grad(b));
  clear({a, b});
  const std::vector<Tensor> out = checkpoint(seg, {a, b, c});
  BOOST_REQUIRE_EQUAL(out.size(), 3u);
  for (size_t i = 0; i < 3; ++i) BOOST_TEST(test::max_abs_diff(out[i], ref[i]) == 0.0);
  backward(sum(add(out[0], out[1])));
  BOOST_TEST(test::max_abs_diff(grad(a), ga) == 0.0);
  BOOST_TEST(test::max_abs_diff(grad(b), gb) == 0.0);
  BOOST_TEST(!grad(c).defined());
  // Under NoGradGuard the segment just runs.
  NoGradGuard ng;
  const std::vector<Tensor> plain = checkpoint(seg, {a, b, c});
  BOOST_TEST(!requires_grad(plain[0]));
}

BOOST_AUTO_TEST_CASE(checkpoint_input_the_segment_ignores) {
  // An input that requires grad but does not influence the outputs: it receives no gradient
  // and the pass does not fail on the missing gradient.
  const Tensor x = leaf({1, 2}), y = leaf({3, 4});
  const Tensor hx = mul(x, 2.0), hy = mul(y, 2.0);  // non-leaves: their nodes see what flows back
  const Tensor out =
      checkpoint([](const std::vector<Tensor>& in) { return std::vector<Tensor>{mul(in[1], 3.0)}; }, {hx, hy})[0];
  backward(sum(out));
  check_values(grad(y), {6, 6}, "used input");
  BOOST_TEST((!grad(x).defined() || ops::max_abs(grad(x)) == 0.0));
  // Likewise an unused output of a multi-output checkpoint whose other output is used.
  const Tensor z = leaf({1, 2});
  const std::vector<Tensor> outs = checkpoint(
      [](const std::vector<Tensor>& in) {
        return std::vector<Tensor>{mul(in[0], 2.0), exp(in[0])};
      },
      {mul(z, 1.0)});
  backward(sum(outs[1]));
  check_values(grad(z), {std::exp(1.0), std::exp(2.0)}, "second output only");
}

BOOST_AUTO_TEST_SUITE_END()  // test_engine
