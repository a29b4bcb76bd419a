// Views share storage and have the geometry the op promises; view() refuses what it cannot
// express without a copy while reshape() copies. Every op gives the same result on strided
// inputs (transposed, narrowed, permuted, expanded views) as on their contiguous copies.
#include <boost/test/unit_test.hpp>
#include <functional>

#include "support/check.h"
#include "tensor/ops.h"

BOOST_AUTO_TEST_SUITE(test_views)

using namespace triad;

namespace {

Tensor arange(int64_t n, DType dt = DType::f32) {
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[size_t(i)] = double(i);
  return ops::to(Tensor::from_vector(v, {n}), dt);
}

Tensor randn(const Shape& shape, DType dt, uint64_t seed, double scale = 1.0) {
  Tensor t = Tensor::empty(shape, dt);
  Generator gen(seed);
  ops::normal_(t, 0.0, scale, gen);
  return t;
}

Tensor indices(const std::vector<int64_t>& v, const Shape& shape) { return Tensor::from_vector(v, shape); }

bool shares(const Tensor& a, const Tensor& b) { return a.storage() == b.storage(); }

// Strided tensors holding the same values as the contiguous x: its transpose's transpose,
// a window of a larger tensor filled with other values, and a permutation's inverse.
std::vector<std::pair<std::string, Tensor>> strided_copies(const Tensor& x) {
  std::vector<std::pair<std::string, Tensor>> out;
  const int nd = x.dim();
  if (nd == 0) return out;
  if (nd >= 2 && x.size(-1) > 1 && x.size(-2) > 1) {
    const Tensor base = ops::contiguous(ops::transpose(x, -1, -2));
    out.emplace_back("transposed", ops::transpose(base, -1, -2));
  }
  {
    Shape big = x.shape();
    big.back() += 3;
    if (nd >= 2) big[0] += 2;
    Tensor b = is_floating(x.dtype()) ? ops::mul(randn(big, DType::f64, 99, 1.0), 1e3) : Tensor::zeros(big, DType::f64);
    b = ops::to(b, x.dtype());
    Tensor w = ops::narrow(b, -1, 2, x.size(-1));
    if (nd >= 2) w = ops::narrow(w, 0, 1, x.size(0));
    ops::copy_(w, x);
    out.emplace_back("narrowed", w);
  }
  if (nd >= 3) {
    std::vector<int64_t> perm(static_cast<size_t>(nd)), inv(static_cast<size_t>(nd));
    for (int i = 0; i < nd; ++i) perm[size_t(i)] = (i + 1) % nd;
    for (int i = 0; i < nd; ++i) inv[size_t(perm[size_t(i)])] = i;
    const Tensor base = ops::contiguous(ops::permute(x, perm));
    out.emplace_back("permuted", ops::permute(base, inv));
  }
  for (auto& [name, t] : out) {
    BOOST_REQUIRE_MESSAGE(!t.is_contiguous() || name == "narrowed", name << " copy is contiguous");
    BOOST_REQUIRE(t.shape() == x.shape());
    BOOST_REQUIRE(test::max_abs_diff(ops::to(t, DType::f64), ops::to(x, DType::f64)) == 0.0);
  }
  return out;
}

double tolerance(DType dt) { return dt == DType::f64 ? 1e-13 : 2e-6; }

void compare(const std::string& what, const std::vector<Tensor>& got, const std::vector<Tensor>& ref) {
  BOOST_REQUIRE_EQUAL(got.size(), ref.size());
  for (size_t o = 0; o < ref.size(); ++o) {
    BOOST_REQUIRE_MESSAGE(got[o].shape() == ref[o].shape(), what << " output " << o << ": shape "
                                                                 << shape_str(got[o].shape()) << " vs "
                                                                 << shape_str(ref[o].shape()));
    const Tensor g = ops::to(got[o], DType::f64), r = ops::to(ref[o], DType::f64);
    const double scale = std::max(1.0, r.numel() ? ops::max_abs(r) : 0.0);
    const double err = r.numel() ? ops::max_abs(ops::sub(g, r)) / scale : 0.0;
    BOOST_TEST(err <= tolerance(ref[o].dtype()), what << " output " << o << ": error " << err);
  }
}

using Fn = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;

// f on strided copies of each input in turn, and of all inputs at once, against f on the
// contiguous inputs.
void check_layouts(const std::string& name, const Fn& f, const std::vector<Tensor>& inputs) {
  for (const Tensor& t : inputs) BOOST_REQUIRE(t.is_contiguous());
  const std::vector<Tensor> ref = f(inputs);
  std::vector<std::vector<std::pair<std::string, Tensor>>> variants;
  for (const Tensor& t : inputs) variants.push_back(strided_copies(t));
  int checked = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    for (auto& [kind, v] : variants[i]) {
      std::vector<Tensor> args = inputs;
      args[i] = v;
      compare(name + ": input " + std::to_string(i) + " " + kind, f(args), ref);
      ++checked;
    }
  }
  for (const std::string kind : {"transposed", "narrowed", "permuted"}) {
    std::vector<Tensor> args = inputs;
    bool any = false;
    for (size_t i = 0; i < inputs.size(); ++i)
      for (auto& [k, v] : variants[i])
        if (k == kind) args[i] = v, any = true;
    if (any) compare(name + ": all inputs " + kind, f(args), ref);
  }
  BOOST_TEST(checked > 0, name << ": no strided variant was checked");
}

// f on inputs that may be broadcast views (stride 0) against f on their contiguous clones.
void check_expanded(const std::string& name, const Fn& f, const std::vector<Tensor>& inputs) {
  bool any = false;
  std::vector<Tensor> clones;
  for (const Tensor& t : inputs) {
    any = any || !t.is_contiguous();
    clones.push_back(ops::clone(t));
  }
  BOOST_REQUIRE_MESSAGE(any, name << ": no expanded input");
  compare(name + ": expanded", f(inputs), f(clones));
}

Tensor scalar_tensor(double v) { return Tensor::scalar(v, DType::f64); }

}  // namespace

// ---------------------------------------------------------------- view geometry and sharing

BOOST_AUTO_TEST_CASE(view_and_reshape_infer_and_share) {
  const Tensor t = arange(24);
  const Tensor v = ops::view(t, {2, 3, 4});
  BOOST_TEST((v.shape() == Shape{2, 3, 4}));
  BOOST_TEST((v.strides() == Shape{12, 4, 1}));
  BOOST_TEST(shares(v, t));
  BOOST_TEST(v.at({1, 2, 3}) == 23.0);
  BOOST_TEST(v.at({1, 0, 2}) == 14.0);
  BOOST_TEST((ops::view(t, {-1, 4}).shape() == Shape{6, 4}));
  BOOST_TEST((ops::view(t, {2, -1, 3}).shape() == Shape{2, 4, 3}));
  BOOST_TEST((ops::view(v, {-1}).shape() == Shape{24}));
  BOOST_TEST((ops::view(t, {1, 24, 1}).shape() == Shape{1, 24, 1}));
  const Tensor r = ops::reshape(t, {4, -1});
  BOOST_TEST((r.shape() == Shape{4, 6}));
  BOOST_TEST(shares(r, t));
  BOOST_TEST((ops::flatten(v).shape() == Shape{24}));
  BOOST_TEST(shares(ops::flatten(v), t));
  // Writes through a view land in the base.
  ops::fill_(ops::select(v, 0, 1), -1.0);
  for (int64_t i = 0; i < 24; ++i) BOOST_TEST(t.at({i}) == (i >= 12 ? -1.0 : double(i)));
  t.data<float>()[5] = 42.0f;
  BOOST_TEST(v.at({0, 1, 1}) == 42.0);
  BOOST_TEST(r.at({0, 5}) == 42.0);
}

BOOST_AUTO_TEST_CASE(transpose_and_permute_share_storage) {
  const Tensor m = ops::view(arange(12), {3, 4});
  const Tensor tt = ops::transpose(m, 0, 1);
  BOOST_TEST((tt.shape() == Shape{4, 3}));
  BOOST_TEST((tt.strides() == Shape{1, 4}));
  BOOST_TEST(!tt.is_contiguous());
  BOOST_TEST(shares(tt, m));
  for (int64_t i = 0; i < 3; ++i)
    for (int64_t j = 0; j < 4; ++j) BOOST_TEST(tt.at({j, i}) == m.at({i, j}));
  BOOST_TEST((ops::transpose(m, -1, -2).strides() == Shape{1, 4}));
  ops::fill_(ops::select(tt, 0, 2), 100.0);  // column 2 of m
  for (int64_t i = 0; i < 3; ++i) BOOST_TEST(m.at({i, 2}) == 100.0);
  BOOST_TEST(m.at({0, 1}) == 1.0);

  const Tensor x = ops::view(arange(24), {2, 3, 4});
  const Tensor p = ops::permute(x, {2, 0, 1});
  BOOST_TEST((p.shape() == Shape{4, 2, 3}));
  BOOST_TEST((p.strides() == Shape{1, 12, 4}));
  BOOST_TEST(shares(p, x));
  const Tensor pn = ops::permute(x, {-1, 0, 1});
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t j = 0; j < 3; ++j)
      for (int64_t k = 0; k < 4; ++k) {
        BOOST_TEST(p.at({k, i, j}) == x.at({i, j, k}));
        BOOST_TEST(pn.at({k, i, j}) == x.at({i, j, k}));
      }
  x.data<float>()[1 * 12 + 2 * 4 + 3] = -5.0f;
  BOOST_TEST(p.at({3, 1, 2}) == -5.0);
}

BOOST_AUTO_TEST_CASE(narrow_select_unsqueeze_squeeze_share_storage) {
  const Tensor m = ops::view(arange(12), {3, 4});
  const Tensor n = ops::narrow(m, 1, 1, 2);
  BOOST_TEST((n.shape() == Shape{3, 2}));
  BOOST_TEST((n.strides() == Shape{4, 1}));
  BOOST_TEST(n.offset() == 1);
  BOOST_TEST(!n.is_contiguous());
  BOOST_TEST(shares(n, m));
  for (int64_t i = 0; i < 3; ++i)
    for (int64_t j = 0; j < 2; ++j) BOOST_TEST(n.at({i, j}) == m.at({i, j + 1}));
  const Tensor nn = ops::narrow(n, 0, 1, 2);  // rows 1..2 of the window
  BOOST_TEST(nn.offset() == 5);
  BOOST_TEST(nn.at({1, 1}) == 10.0);
  BOOST_TEST((ops::narrow(m, -1, 4, 0).shape() == Shape{3, 0}));
  const Tensor rows = ops::narrow(m, 0, 1, 2);
  BOOST_TEST(rows.is_contiguous());
  BOOST_TEST(ops::contiguous(rows).is_same(rows));
  ops::fill_(nn, 7.0);
  BOOST_TEST(m.at({1, 2}) == 7.0);
  BOOST_TEST(m.at({2, 1}) == 7.0);
  BOOST_TEST(m.at({1, 0}) == 4.0);
  BOOST_TEST(m.at({0, 1}) == 1.0);

  const Tensor s = ops::select(m, 1, 3);  // column 3
  BOOST_TEST((s.shape() == Shape{3}));
  BOOST_TEST((s.strides() == Shape{4}));
  BOOST_TEST(s.offset() == 3);
  BOOST_TEST(s.at({2}) == 11.0);
  const Tensor last = ops::select(m, 0, -1);
  BOOST_TEST(last.offset() == 8);
  BOOST_TEST(last.at({0}) == 8.0);
  const Tensor elem = ops::select(s, 0, 1);
  BOOST_TEST(elem.dim() == 0);
  BOOST_TEST(elem.item() == 7.0);
  ops::fill_(s, -3.0);
  for (int64_t i = 0; i < 3; ++i) BOOST_TEST(m.at({i, 3}) == -3.0);

  const Tensor u0 = ops::unsqueeze(m, 0), u1 = ops::unsqueeze(m, 1), ul = ops::unsqueeze(m, -1);
  BOOST_TEST((u0.shape() == Shape{1, 3, 4}));
  BOOST_TEST((u1.shape() == Shape{3, 1, 4}));
  BOOST_TEST((ul.shape() == Shape{3, 4, 1}));
  BOOST_TEST(u0.is_contiguous());
  BOOST_TEST(ul.is_contiguous());
  BOOST_TEST(shares(u1, m));
  for (int64_t i = 0; i < 3; ++i)
    for (int64_t j = 0; j < 4; ++j) {
      BOOST_TEST(u0.at({0, i, j}) == m.at({i, j}));
      BOOST_TEST(u1.at({i, 0, j}) == m.at({i, j}));
      BOOST_TEST(ul.at({i, j, 0}) == m.at({i, j}));
    }
  const Tensor sq = ops::squeeze(u1, 1);
  BOOST_TEST((sq.shape() == Shape{3, 4}));
  BOOST_TEST((sq.strides() == Shape{4, 1}));
  BOOST_TEST((ops::squeeze(ul, -1).shape() == Shape{3, 4}));
  // unsqueeze of a transposed view keeps its values and stays viewable back.
  const Tensor ut = ops::unsqueeze(ops::transpose(m, 0, 1), 1);  // (4, 1, 3)
  for (int64_t i = 0; i < 3; ++i)
    for (int64_t j = 0; j < 4; ++j) BOOST_TEST(ut.at({j, 0, i}) == m.at({i, j}));
  ops::fill_(ops::squeeze(ut, 1), 0.5);
  BOOST_TEST(m.at({2, 2}) == 0.5);
}

BOOST_AUTO_TEST_CASE(expand_broadcasts_with_zero_strides) {
  const Tensor col = ops::view(arange(3), {3, 1});
  const Tensor e = ops::expand(col, {2, 3, 4});
  BOOST_TEST((e.shape() == Shape{2, 3, 4}));
  BOOST_TEST((e.strides() == Shape{0, 1, 0}));
  BOOST_TEST(shares(e, col));
  for (int64_t a = 0; a < 2; ++a)
    for (int64_t i = 0; i < 3; ++i)
      for (int64_t b = 0; b < 4; ++b) BOOST_TEST(e.at({a, i, b}) == double(i));
  col.data<float>()[1] = 9.0f;
  BOOST_TEST(e.at({1, 1, 3}) == 9.0);
  BOOST_TEST(ops::expand(col, {3, 1}).is_contiguous());
  const Tensor c = ops::contiguous(e);
  BOOST_TEST(c.is_contiguous());
  BOOST_TEST(!shares(c, col));
  BOOST_TEST(c.at({1, 1, 2}) == 9.0);
}

BOOST_AUTO_TEST_CASE(view_refuses_incompatible_strides_and_reshape_copies) {
  const Tensor m = ops::view(arange(12), {3, 4});
  const Tensor tt = ops::transpose(m, 0, 1);  // (4, 3)
  BOOST_CHECK_THROW(ops::view(tt, {12}), Error);
  BOOST_CHECK_THROW(ops::view(tt, {2, 6}), Error);
  const Tensor r = ops::reshape(tt, {12});
  BOOST_TEST(!shares(r, m));
  BOOST_TEST(r.is_contiguous());
  for (int64_t j = 0; j < 4; ++j)
    for (int64_t i = 0; i < 3; ++i) BOOST_TEST(r.at({j * 3 + i}) == m.at({i, j}));
  // Unit dimensions can always be inserted without a copy.
  const Tensor tu = ops::view(tt, {4, 1, 3});
  BOOST_TEST(shares(tu, m));
  BOOST_TEST(tu.at({3, 0, 2}) == m.at({2, 3}));

  // A window of columns: rows can be split, but not merged with the window.
  const Tensor base = ops::view(arange(24), {4, 6});
  const Tensor w = ops::narrow(base, 1, 0, 4);  // (4, 4) strides (6, 1)
  const Tensor split = ops::view(w, {4, 2, 2});
  BOOST_TEST(shares(split, base));
  BOOST_TEST((split.strides() == Shape{6, 2, 1}));
  BOOST_TEST(split.at({2, 1, 0}) == base.at({2, 2}));
  const Tensor split_rows = ops::view(w, {2, 2, 4});
  BOOST_TEST((split_rows.strides() == Shape{12, 6, 1}));
  BOOST_TEST(split_rows.at({1, 1, 3}) == base.at({3, 3}));
  BOOST_CHECK_THROW(ops::view(w, {16}), Error);
  BOOST_CHECK_THROW(ops::view(w, {8, 2}), Error);
  const Tensor wr = ops::reshape(w, {16});
  BOOST_TEST(!shares(wr, base));
  for (int64_t i = 0; i < 16; ++i) BOOST_TEST(wr.at({i}) == base.at({i / 4, i % 4}));

  // A 3-d transpose: the last dimension can be split, the first two cannot be merged.
  const Tensor x = ops::transpose(ops::view(arange(24), {2, 3, 4}), 0, 1);  // (3, 2, 4)
  BOOST_CHECK_THROW(ops::view(x, {3, 8}), Error);
  BOOST_CHECK_THROW(ops::view(x, {6, 4}), Error);
  const Tensor xs = ops::view(x, {3, 2, 2, 2});
  BOOST_TEST(shares(xs, x));
  BOOST_TEST(xs.at({2, 1, 1, 0}) == x.at({2, 1, 2}));
  const Tensor xr = ops::reshape(x, {6, 4});
  for (int64_t i = 0; i < 6; ++i)
    for (int64_t k = 0; k < 4; ++k) BOOST_TEST(xr.at({i, k}) == x.at({i / 2, i % 2, k}));

  // Broadcast views cannot be flattened without a copy.
  const Tensor e = ops::expand(ops::view(arange(3), {3, 1}), {3, 4});
  BOOST_CHECK_THROW(ops::view(e, {12}), Error);
  const Tensor er = ops::reshape(e, {12});
  for (int64_t i = 0; i < 12; ++i) BOOST_TEST(er.at({i}) == double(i / 4));
}

BOOST_AUTO_TEST_CASE(contiguous_and_clone) {
  const Tensor m = ops::view(arange(12, DType::f64), {3, 4});
  BOOST_TEST(ops::contiguous(m).is_same(m));
  const Tensor tt = ops::transpose(m, 0, 1);
  const Tensor c = ops::contiguous(tt);
  BOOST_TEST(!c.is_same(tt));
  BOOST_TEST(c.is_contiguous());
  BOOST_TEST(!shares(c, m));
  BOOST_TEST((c.strides() == Shape{3, 1}));
  for (int64_t j = 0; j < 4; ++j)
    for (int64_t i = 0; i < 3; ++i) BOOST_TEST(c.at({j, i}) == m.at({i, j}));
  const Tensor k = ops::clone(m);
  BOOST_TEST(!shares(k, m));
  BOOST_TEST(test::max_abs_diff(k, m) == 0.0);
  k.data<double>()[0] = 77.0;
  BOOST_TEST(m.at({0, 0}) == 0.0);
}

// A tensor with no elements is contiguous whatever its other extents, so the ops that need
// contiguous tensors take it (and do nothing).
BOOST_AUTO_TEST_CASE(tensors_without_elements_are_contiguous) {
  for (const Shape& shape : {Shape{4, 0, 5}, Shape{0}, Shape{0, 3}, Shape{3, 0}}) {
    const Tensor t = Tensor::empty(shape, DType::f64);
    BOOST_TEST(t.is_contiguous(), shape_str(shape));
    Generator gen(1);
    ops::uniform_(t, 0.0, 1.0, gen);
    BOOST_TEST(ops::contiguous(t).is_same(t));
  }
}

// ---------------------------------------------------------------- every op on strided inputs

BOOST_AUTO_TEST_CASE(elementwise_ops_ignore_layout) {
  for (DType dt : {DType::f32, DType::f64}) {
    const std::string d = dtype_name(dt);
    const Tensor a = randn({3, 4, 5}, dt, 1), b = randn({4, 5}, dt, 2), c = randn({3, 1, 5}, dt, 3);
    const Tensor row = randn({5}, dt, 4), col = randn({4, 1}, dt, 5);
    for (auto [name, op] : std::vector<std::pair<std::string, Tensor (*)(const Tensor&, const Tensor&)>>{
             {"add", &ops::add}, {"sub", &ops::sub}, {"mul", &ops::mul}}) {
      check_layouts(d + " " + name, [op](auto& x) { return std::vector{op(x[0], x[1])}; }, {a, b});
      check_layouts(d + " " + name + " reversed", [op](auto& x) { return std::vector{op(x[0], x[1])}; }, {b, a});
      check_layouts(d + " " + name + " both ways", [op](auto& x) { return std::vector{op(x[0], x[1])}; }, {c, b});
      check_layouts(d + " " + name + " same", [op](auto& x) { return std::vector{op(x[0], x[1])}; }, {a, a});
      check_expanded(d + " " + name, [op](auto& x) { return std::vector{op(x[0], x[1])}; },
                     {ops::expand(row, {4, 5}), ops::expand(col, {4, 5})});
    }
    const Tensor pos = ops::add(ops::mul(randn({3, 4, 5}, dt, 6), 0.1), 1.0);
    check_layouts(d + " div", [](auto& x) { return std::vector{ops::div(x[0], x[1])}; }, {a, pos});
    check_layouts(d + " div broadcast", [](auto& x) { return std::vector{ops::div(x[0], x[1])}; }, {b, pos});
    check_expanded(d + " div", [](auto& x) { return std::vector{ops::div(x[0], x[1])}; },
                   {ops::expand(row, {3, 4, 5}), pos});

    using Unary = std::function<Tensor(const Tensor&)>;
    const std::vector<std::pair<std::string, Unary>> unary = {
        {"add_scalar", [](const Tensor& x) { return ops::add(x, 0.75); }},
        {"mul_scalar", [](const Tensor& x) { return ops::mul(x, -1.5); }},
        {"neg", [](const Tensor& x) { return ops::neg(x); }},
        {"exp", [](const Tensor& x) { return ops::exp(x); }},
        {"log", [](const Tensor& x) { return ops::log(ops::add(ops::pow(x, 2.0), 0.1)); }},
        {"sqrt", [](const Tensor& x) { return ops::sqrt(ops::add(ops::pow(x, 2.0), 0.1)); }},
        {"tanh", [](const Tensor& x) { return ops::tanh(x); }},
        {"relu", [](const Tensor& x) { return ops::relu(x); }},
        {"pow", [](const Tensor& x) { return ops::pow(x, 3.0); }},
        {"gelu", [](const Tensor& x) { return ops::gelu(x); }},
        {"dropout", [](const Tensor& x) { return ops::dropout(x, 0.3, 17, 1000); }},
    };
    for (auto& [name, f] : unary) {
      check_layouts(d + " " + name, [f](auto& x) { return std::vector{f(x[0])}; }, {a});
      check_expanded(d + " " + name, [f](auto& x) { return std::vector{f(x[0])}; }, {ops::expand(col, {3, 4, 5})});
    }
    // The raw functions on views directly (log/sqrt above went through contiguous temporaries).
    check_layouts(d + " log direct", [](auto& x) { return std::vector{ops::log(x[0])}; }, {ops::exp(a)});
    check_layouts(d + " sqrt direct", [](auto& x) { return std::vector{ops::sqrt(x[0])}; }, {ops::exp(a)});
    check_layouts(d + " relu_backward", [](auto& x) { return std::vector{ops::relu_backward(x[0], x[1])}; },
                  {ops::relu(a), randn({3, 4, 5}, dt, 7)});
    check_layouts(d + " gelu_backward", [](auto& x) { return std::vector{ops::gelu_backward(x[0], x[1])}; },
                  {a, randn({3, 4, 5}, dt, 8)});
    check_expanded(d + " gelu_backward", [](auto& x) { return std::vector{ops::gelu_backward(x[0], x[1])}; },
                   {ops::expand(row, {3, 4, 5}), ops::expand(col, {3, 4, 5})});
  }
}

BOOST_AUTO_TEST_CASE(in_place_ops_write_through_strided_destinations) {
  for (DType dt : {DType::f32, DType::f64}) {
    const Tensor src = randn({4, 3}, dt, 11);
    const Tensor base = randn({5, 6}, dt, 12);
    const Tensor before = ops::clone(base);
    // dst: a transposed window of base, (4, 3) with strides (1, 6).
    const Tensor dst = ops::transpose(ops::narrow(ops::narrow(base, 0, 1, 3), 1, 2, 4), 0, 1);
    const Tensor expect_add = ops::add(ops::contiguous(dst), ops::mul(src, 0.5));
    ops::add_(dst, src, 0.5);
    BOOST_TEST(test::max_abs_diff(dst, expect_add) <= tolerance(dt));
    const Tensor expect_mul = ops::mul(ops::contiguous(dst), 3.0);
    ops::mul_(dst, 3.0);
    BOOST_TEST(test::max_abs_diff(dst, expect_mul) <= tolerance(dt) * 10);
    ops::add_(dst, ops::expand(ops::view(arange(3, dt), {1, 3}), {4, 3}));  // broadcast source
    ops::add_(dst, ops::view(arange(3, dt), {3}));
    BOOST_TEST(test::max_abs_diff(dst, ops::add(expect_mul, ops::mul(ops::view(arange(3, dt), {3}), 2.0))) <=
               tolerance(dt) * 10);
    ops::copy_(dst, ops::transpose(src, 0, 1).dim() == 2 ? src : src);
    BOOST_TEST(test::max_abs_diff(dst, src) == 0.0);
    ops::copy_(dst, ops::view(arange(3, dt), {3}));  // broadcast copy
    for (int64_t i = 0; i < 4; ++i)
      for (int64_t j = 0; j < 3; ++j) BOOST_TEST(dst.at({i, j}) == double(j));
    ops::fill_(dst, -2.0);
    for (int64_t i = 0; i < 4; ++i)
      for (int64_t j = 0; j < 3; ++j) BOOST_TEST(dst.at({i, j}) == -2.0);
    // Nothing outside the window changed.
    for (int64_t r = 0; r < 5; ++r)
      for (int64_t c = 0; c < 6; ++c) {
        const bool inside = r >= 1 && r < 4 && c >= 2 && c < 6;
        if (inside)
          BOOST_TEST(base.at({r, c}) == -2.0);
        else
          BOOST_TEST(base.at({r, c}) == before.at({r, c}));
      }
  }
}

BOOST_AUTO_TEST_CASE(reductions_ignore_layout) {
  for (DType dt : {DType::f32, DType::f64}) {
    const std::string d = dtype_name(dt);
    const Tensor a = randn({3, 4, 5}, dt, 21);
    check_layouts(d + " sum", [](auto& x) { return std::vector{ops::sum(x[0])}; }, {a});
    check_layouts(d + " mean", [](auto& x) { return std::vector{ops::mean(x[0])}; }, {a});
    for (int64_t dim : {0, 1, 2, -1})
      for (bool keep : {false, true}) {
        const std::string n = d + " dim " + std::to_string(dim) + (keep ? " keepdim" : "");
        check_layouts("sum" + n, [=](auto& x) { return std::vector{ops::sum(x[0], dim, keep)}; }, {a});
        check_layouts("mean" + n, [=](auto& x) { return std::vector{ops::mean(x[0], dim, keep)}; }, {a});
        check_layouts("max" + n, [=](auto& x) { return std::vector{ops::max(x[0], dim, keep)}; }, {a});
      }
    check_layouts(d + " sum_to", [](auto& x) { return std::vector{ops::sum_to(x[0], {4, 1})}; }, {a});
    check_layouts(d + " sum_to 3d", [](auto& x) { return std::vector{ops::sum_to(x[0], {3, 1, 5})}; }, {a});
    check_layouts(d + " sum_squares", [](auto& x) { return std::vector{scalar_tensor(ops::sum_squares({x[0]}))}; },
                  {a});
    check_layouts(d + " max_abs", [](auto& x) { return std::vector{scalar_tensor(ops::max_abs(x[0]))}; }, {a});
    check_layouts(d + " all_finite",
                  [](auto& x) { return std::vector{scalar_tensor(ops::all_finite(x[0]) ? 1.0 : 0.0)}; }, {a});
    const Tensor e = ops::expand(randn({4, 1}, dt, 22), {3, 4, 5});
    check_expanded(d + " sum", [](auto& x) { return std::vector{ops::sum(x[0])}; }, {e});
    check_expanded(d + " sum dim", [](auto& x) { return std::vector{ops::sum(x[0], 1, false)}; }, {e});
    check_expanded(d + " mean dim", [](auto& x) { return std::vector{ops::mean(x[0], 2, true)}; }, {e});
    check_expanded(d + " max dim", [](auto& x) { return std::vector{ops::max(x[0], 0, false)}; }, {e});
    check_expanded(d + " sum_to", [](auto& x) { return std::vector{ops::sum_to(x[0], {4, 5})}; }, {e});
    check_expanded(d + " sum_squares", [](auto& x) { return std::vector{scalar_tensor(ops::sum_squares({x[0]}))}; },
                   {e});
  }
}

BOOST_AUTO_TEST_CASE(matmul_and_linear_ignore_layout) {
  for (DType dt : {DType::f32, DType::f64}) {
    const std::string d = dtype_name(dt);
    for (bool ta : {false, true})
      for (bool tb : {false, true}) {
        const std::string n = d + (ta ? " ta" : "") + (tb ? " tb" : "");
        const Shape sa = ta ? Shape{4, 3} : Shape{3, 4}, sb = tb ? Shape{5, 4} : Shape{4, 5};
        auto f = [=](auto& x) { return std::vector{ops::matmul(x[0], x[1], ta, tb)}; };
        check_layouts("matmul 2d" + n, f, {randn(sa, dt, 31), randn(sb, dt, 32)});
        Shape ba = sa, bb = sb;
        ba.insert(ba.begin(), 2);
        bb.insert(bb.begin(), 2);
        check_layouts("matmul batched" + n, f, {randn(ba, dt, 33), randn(bb, dt, 34)});
        check_layouts("matmul batched @ 2d" + n, f, {randn(ba, dt, 35), randn(sb, dt, 36)});
        Shape b4 = ba;
        b4.insert(b4.begin(), 2);
        Shape b4b = bb;
        b4b.insert(b4b.begin(), 2);
        check_layouts("matmul 4d" + n, f, {randn(b4, dt, 37), randn(b4b, dt, 38)});
        // A batch broadcast from one matrix (stride 0 over the batch).
        check_expanded("matmul" + n, f, {ops::expand(randn(sa, dt, 39), ba), randn(bb, dt, 40)});
      }
    const Tensor x = randn({2, 3, 4}, dt, 41), w = randn({5, 4}, dt, 42), bias = randn({5}, dt, 43);
    check_layouts(d + " linear", [](auto& v) { return std::vector{ops::linear(v[0], v[1], v[2])}; }, {x, w, bias});
    check_layouts(d + " linear no bias", [](auto& v) { return std::vector{ops::linear(v[0], v[1], Tensor())}; },
                  {x, w});
    check_expanded(d + " linear", [](auto& v) { return std::vector{ops::linear(v[0], v[1], v[2])}; },
                   {ops::expand(randn({4}, dt, 44), {2, 3, 4}), w, ops::expand(randn({1}, dt, 45), {5})});
  }
}

BOOST_AUTO_TEST_CASE(nn_kernels_ignore_layout) {
  for (DType dt : {DType::f32, DType::f64}) {
    const std::string d = dtype_name(dt);
    const Tensor x = randn({2, 3, 5}, dt, 51);
    check_layouts(d + " softmax", [](auto& v) { return std::vector{ops::softmax(v[0])}; }, {x});
    check_layouts(d + " softmax causal", [](auto& v) { return std::vector{ops::softmax(v[0], true)}; }, {x});
    check_layouts(d + " softmax causal square", [](auto& v) { return std::vector{ops::softmax(v[0], true)}; },
                  {randn({2, 4, 4}, dt, 52)});
    check_expanded(d + " softmax causal", [](auto& v) { return std::vector{ops::softmax(v[0], true)}; },
                   {ops::expand(randn({1, 3, 5}, dt, 53), {2, 3, 5})});
    const Tensor y = ops::softmax(x, true);
    check_layouts(d + " softmax_backward", [](auto& v) { return std::vector{ops::softmax_backward(v[0], v[1])}; },
                  {y, randn({2, 3, 5}, dt, 54)});

    const Tensor lw = randn({5}, dt, 55), lb = randn({5}, dt, 56);
    auto ln = [](auto& v) {
      ops::LayerNormOut r = ops::layer_norm(v[0], v[1], v[2], 1e-5);
      return std::vector{r.y, r.mean, r.rstd};
    };
    check_layouts(d + " layer_norm", ln, {x, lw, lb});
    check_expanded(d + " layer_norm", ln,
                   {ops::expand(randn({1, 3, 5}, dt, 57), {2, 3, 5}), ops::expand(randn({1}, dt, 58), {5}), lb});
    const ops::LayerNormOut r = ops::layer_norm(x, lw, lb, 1e-5);
    auto lnb = [&](auto& v) {
      ops::LayerNormGrads g = ops::layer_norm_backward(v[0], v[1], v[2], r.mean, r.rstd);
      return std::vector{g.dx, g.dweight, g.dbias};
    };
    check_layouts(d + " layer_norm_backward", lnb, {randn({2, 3, 5}, dt, 59), x, lw});

    const Tensor table = randn({7, 4}, dt, 60);
    const Tensor idx = indices({6, 0, 3, 3, 1, 6, 2, 5}, {2, 4});
    auto emb = [](auto& v) { return std::vector{ops::embedding(v[0], v[1])}; };
    check_layouts(d + " embedding", emb, {table, idx});
    check_layouts(d + " embedding i32", emb, {table, ops::to(idx, DType::i32)});
    check_expanded(d + " embedding", emb, {table, ops::expand(indices({4, 2}, {1, 2}), {3, 2})});
    auto embb = [](auto& v) { return std::vector{ops::embedding_backward(v[0], v[1], 7)}; };
    check_layouts(d + " embedding_backward", embb, {randn({2, 4, 4}, dt, 61), idx});
    check_expanded(d + " embedding_backward", embb,
                   {ops::expand(randn({1, 4, 4}, dt, 62), {2, 4, 4}), ops::expand(indices({1, 1, 3, 0}, {4}), {2, 4})});

    const Tensor logits = randn({6, 5}, dt, 63, 2.0);
    const Tensor targets = indices({4, 0, -100, 2, 2, 1}, {6});
    auto ce = [](auto& v) {
      ops::CrossEntropyOut o = ops::cross_entropy(v[0], v[1], -100);
      return std::vector{o.loss, o.lse, o.count};
    };
    check_layouts(d + " cross_entropy", ce, {logits, targets});
    check_expanded(d + " cross_entropy", ce, {ops::expand(randn({1, 5}, dt, 64), {6, 5}), targets});
    const ops::CrossEntropyOut o = ops::cross_entropy(logits, targets, -100);
    auto ceb = [&](auto& v) {
      return std::vector{ops::cross_entropy_backward(v[0], v[1], o.lse, Tensor::scalar(0.7, dt), o.count, -100)};
    };
    check_layouts(d + " cross_entropy_backward", ceb, {logits, targets});
  }
}

BOOST_AUTO_TEST_SUITE_END()  // test_views
