// Bad input throws triad::Error whose message names the op and the shapes (or dtypes,
// indices) involved; nothing crashes. Checked through the raw ops and, where they have
// their own argument handling, the differentiable functions.
#include <boost/test/unit_test.hpp>
#include <functional>

#include "autograd/engine.h"
#include "autograd/functions.h"
#include "autograd/meta.h"
#include "support/check.h"
#include "tensor/ops.h"

BOOST_AUTO_TEST_SUITE(test_errors)

using namespace triad;

namespace {

// f must throw triad::Error whose message contains every one of `parts`.
void expect_error(const std::string& what, const std::function<void()>& f, const std::vector<std::string>& parts) {
  try {
    f();
  } catch (const Error& e) {
    const std::string msg = e.what();
    for (const std::string& p : parts)
      BOOST_TEST(msg.find(p) != std::string::npos, what << ": message \"" << msg << "\" lacks \"" << p << "\"");
    return;
  } catch (const std::exception& e) {
    BOOST_ERROR(what << ": threw a non-triad::Error exception: " << e.what());
    return;
  } catch (...) {
    BOOST_ERROR(what << ": threw something that is not a std::exception");
    return;
  }
  BOOST_ERROR(what << ": did not throw");
}

Tensor f32(const Shape& s) { return Tensor::zeros(s); }
Tensor idx(const std::vector<int64_t>& v, const Shape& shape) { return Tensor::from_vector(v, shape); }
Tensor leaf(const Shape& s) {
  Tensor t = Tensor::zeros(s, DType::f64);
  set_requires_grad(t);
  return t;
}

}  // namespace

BOOST_AUTO_TEST_CASE(matmul_shape_errors) {
  expect_error("matmul inner", [] { ops::matmul(f32({2, 3}), f32({4, 5})); }, {"matmul", "(2, 3)", "(4, 5)"});
  expect_error("matmul inner trans",
               [] {
                 ops::matmul(f32({2, 3}), f32({4, 5}), true, false);
               },
               {"matmul", "(2, 3)", "(4, 5)"});
  expect_error("matmul batch",
               [] {
                 ops::matmul(f32({2, 2, 3}), f32({3, 3, 4}));
               },
               {"matmul", "(2, 2, 3)", "(3, 3, 4)"});
  expect_error("matmul 1-d", [] { ops::matmul(f32({3}), f32({3, 2})); }, {"matmul", "(3,)", "(3, 2)"});
  expect_error("matmul 2-d @ batched", [] { ops::matmul(f32({2, 3}), f32({2, 3, 4})); }, {"matmul", "(2, 3)"});
  expect_error("matmul dtypes",
               [] {
                 ops::matmul(f32({2, 3}), Tensor::zeros({3, 2}, DType::f64));
               },
               {"matmul", "f32", "f64"});
  expect_error("autograd matmul", [] { matmul(leaf({2, 3}), leaf({4, 5})); }, {"matmul", "(2, 3)", "(4, 5)"});
  expect_error("linear", [] { ops::linear(f32({2, 3}), f32({4, 5}), Tensor()); }, {"linear", "(2, 3)", "(4, 5)"});
  expect_error("linear bias", [] { ops::linear(f32({2, 3}), f32({4, 3}), f32({5})); }, {"linear", "(5,)", "(4, 3)"});
  expect_error("linear 1-d weight", [] { ops::linear(f32({2, 3}), f32({3}), Tensor()); }, {"linear", "(3,)"});
  expect_error("autograd linear", [] { linear(leaf({2, 3}), leaf({4, 5})); }, {"linear", "(2, 3)", "(4, 5)"});
}

BOOST_AUTO_TEST_CASE(broadcast_and_dtype_errors) {
  expect_error("add broadcast", [] { ops::add(f32({2, 3}), f32({4})); }, {"add", "(2, 3)", "(4,)"});
  expect_error("mul broadcast", [] { ops::mul(f32({2, 3}), f32({3, 2})); }, {"mul", "(2, 3)", "(3, 2)"});
  expect_error("sub broadcast", [] { ops::sub(f32({5, 1, 3}), f32({2, 2})); }, {"sub", "(5, 1, 3)", "(2, 2)"});
  expect_error("div broadcast", [] { ops::div(f32({2}), f32({3})); }, {"div", "(2,)", "(3,)"});
  expect_error("autograd add broadcast", [] { add(leaf({2, 3}), leaf({4})); }, {"add", "(2, 3)", "(4,)"});
  expect_error("add i64",
               [] {
                 ops::add(Tensor::zeros({2, 3}, DType::i64), Tensor::zeros({2, 3}, DType::i64));
               },
               {"add", "i64", "(2, 3)"});
  expect_error("add mixed", [] { ops::add(f32({2, 3}), Tensor::zeros({2, 3}, DType::f64)); }, {"add", "f32", "f64"});
  expect_error("add f32 + i64", [] { ops::add(f32({2, 3}), Tensor::zeros({2, 3}, DType::i64)); }, {"add", "i64"});
  expect_error("exp i32", [] { ops::exp(Tensor::zeros({2, 3}, DType::i32)); }, {"exp", "i32", "(2, 3)"});
  expect_error("add f64 + bf16", [] { ops::add(Tensor::zeros({2}, DType::f64), Tensor::zeros({2}, DType::bf16)); },
               {"add", "f64", "bf16", "do not mix"});
  expect_error("add bf16 + f16", [] { ops::add(Tensor::zeros({2}, DType::bf16), Tensor::zeros({2}, DType::f16)); },
               {"add", "bf16", "f16", "do not mix"});
  expect_error("sum i32", [] { ops::sum(Tensor::zeros({4}, DType::i32)); }, {"sum", "i32", "(4,)"});
  expect_error("add_ shape", [] { ops::add_(f32({3}), f32({2, 3})); }, {"add_", "(2, 3)", "(3,)"});
  expect_error("copy_ shape", [] { ops::copy_(f32({2, 3}), f32({4})); }, {"copy_", "(2, 3)", "(4,)"});
  expect_error("sum_to", [] { ops::sum_to(f32({2, 3}), {4}); }, {"sum_to", "(2, 3)", "(4,)"});
  expect_error("gelu_backward", [] { ops::gelu_backward(f32({2, 3}), f32({3})); }, {"gelu_backward", "(2, 3)", "(3,)"});
  expect_error("relu_backward", [] { ops::relu_backward(f32({2, 3}), f32({3})); }, {"relu_backward", "(2, 3)", "(3,)"});
  expect_error("dropout p", [] { ops::dropout(f32({2, 3}), 1.0, 0, 0); }, {"dropout", "1"});
  expect_error("dropout negative p", [] { ops::dropout(f32({2, 3}), -0.1, 0, 0); }, {"dropout"});
  expect_error("normal_ i64", [] { ops::normal_(Tensor::zeros({2}, DType::i64), 0, 1); }, {"normal_", "i64"});
  expect_error("uniform_ strided",
               [] {
                 ops::uniform_(ops::transpose(f32({2, 3}), 0, 1), 0, 1);
               },
               {"uniform_", "(3, 2)"});
  expect_error("undefined tensor", [] { ops::add(Tensor(), f32({2})); }, {"undefined"});
}

BOOST_AUTO_TEST_CASE(index_errors) {
  const Tensor w = f32({4, 3});
  expect_error("embedding high", [&] { ops::embedding(w, idx({0, 4}, {2})); }, {"embedding", "4", "[0, 4)"});
  expect_error("embedding -1", [&] { ops::embedding(w, idx({0, -1}, {2})); }, {"embedding", "-1", "[0, 4)"});
  expect_error("embedding i32", [&] { ops::embedding(w, ops::to(idx({7}, {1}), DType::i32)); }, {"embedding", "7"});
  expect_error("embedding dtype", [&] { ops::embedding(w, f32({2})); }, {"embedding", "f32", "(2,)"});
  expect_error("embedding 1-d weight", [&] { ops::embedding(f32({4}), idx({0}, {1})); }, {"embedding", "(4,)"});
  expect_error("autograd embedding", [&] { embedding(leaf({4, 3}), idx({1, 9}, {1, 2})); }, {"embedding", "9"});
  expect_error("embedding_backward high",
               [&] {
                 ops::embedding_backward(f32({2, 3}), idx({1, 4}, {2}), 4);
               },
               {"embedding_backward", "4"});
  expect_error("embedding_backward -1",
               [&] {
                 ops::embedding_backward(f32({2, 3}), idx({-1, 0}, {2}), 4);
               },
               {"embedding_backward", "-1"});
  expect_error("embedding_backward dtype",
               [&] {
                 ops::embedding_backward(f32({2, 3}), f32({2}), 4);
               },
               {"embedding_backward", "f32"});
  expect_error("embedding_backward shape",
               [&] {
                 ops::embedding_backward(f32({2, 3}), idx({0, 1, 2}, {3, 1}), 4);
               },
               {"embedding_backward", "(2, 3)", "(3, 1)"});

  const Tensor logits = f32({2, 5});
  expect_error("cross_entropy high",
               [&] {
                 ops::cross_entropy(logits, idx({0, 5}, {2}), -100);
               },
               {"cross_entropy", "5", "[0, 5)"});
  expect_error("cross_entropy -1",
               [&] {
                 ops::cross_entropy(logits, idx({-1, 0}, {2}), -100);
               },
               {"cross_entropy", "-1", "[0, 5)"});
  expect_error("cross_entropy shape",
               [&] {
                 ops::cross_entropy(logits, idx({0, 1, 2}, {3}), -100);
               },
               {"cross_entropy", "(2, 5)", "(3,)"});
  expect_error("cross_entropy dtype", [&] { ops::cross_entropy(logits, f32({2}), -100); }, {"cross_entropy", "f32"});
  // Padding columns are no classes: a target among them is out of range.
  expect_error("cross_entropy padded target", [&] { ops::cross_entropy(logits, idx({0, 3}, {2}), -100, 3); },
               {"cross_entropy", "3", "[0, 3)"});
  expect_error("cross_entropy classes", [&] { ops::cross_entropy(logits, idx({0, 1}, {2}), -100, 6); },
               {"cross_entropy", "6 classes", "5 columns"});
  expect_error("autograd cross_entropy",
               [&] {
                 cross_entropy(leaf({2, 3, 5}), idx({0, 1, 2}, {3}));
               },
               {"cross_entropy", "(2, 3, 5)", "(3,)"});
  expect_error("autograd cross_entropy target",
               [&] {
                 cross_entropy(leaf({2, 5}), idx({0, 6}, {2}));
               },
               {"cross_entropy", "6"});
  expect_error("cross_entropy_backward target",
               [&] {
                 ops::cross_entropy_backward(logits, idx({0, 7}, {2}), f32({2}), f32({}), idx({2}, {}), -100);
               },
               {"cross_entropy_backward", "7"});
  expect_error("cross_entropy_backward count",
               [&] {
                 ops::cross_entropy_backward(logits, idx({0, 1}, {2}), f32({2}), f32({}), f32({}), -100);
               },
               {"cross_entropy_backward", "i64 count", "f32"});
}

BOOST_AUTO_TEST_CASE(view_errors) {
  const Tensor t = f32({2, 3});
  expect_error("narrow past end", [&] { ops::narrow(t, 1, 2, 2); }, {"narrow", "(2, 3)"});
  expect_error("narrow negative start", [&] { ops::narrow(t, 0, -1, 1); }, {"narrow", "(2, 3)"});
  expect_error("narrow bad dim", [&] { ops::narrow(t, 2, 0, 1); }, {"narrow", "2"});
  expect_error("autograd narrow", [&] { narrow(leaf({2, 3}), 1, 2, 2); }, {"narrow", "(2, 3)"});
  expect_error("select high", [&] { ops::select(t, 1, 3); }, {"select", "3", "(2, 3)"});
  expect_error("select low", [&] { ops::select(t, 0, -3); }, {"select", "-3", "(2, 3)"});
  expect_error("autograd select", [&] { select(leaf({2, 3}), 1, 3); }, {"select", "(2, 3)"});
  const Tensor x = f32({2, 3, 4});
  expect_error("permute count", [&] { ops::permute(x, {1, 0}); }, {"permute", "(2, 3, 4)"});
  expect_error("permute repeat", [&] { ops::permute(x, {0, 1, 1}); }, {"permute", "repeated", "(2, 3, 4)"});
  expect_error("permute range", [&] { ops::permute(x, {0, 1, 3}); }, {"permute", "3"});
  expect_error("autograd permute count", [&] { permute(leaf({2, 3, 4}), {2}); }, {"permute", "(2, 3, 4)"});
  expect_error("autograd permute count high", [&] { permute(leaf({2, 3}), {0, 1, 2}); }, {"permute", "(2, 3)"});
  expect_error("autograd permute repeat", [&] { permute(leaf({2, 3, 4}), {1, 1, 0}); }, {"permute", "(2, 3, 4)"});
  expect_error("view count", [&] { ops::view(t, {4, 2}); }, {"view", "(2, 3)", "(4, 2)"});
  expect_error("view infer", [&] { ops::view(t, {4, -1}); }, {"view", "(2, 3)", "(4, -1)"});
  expect_error("view two -1", [&] { ops::view(t, {-1, -1}); }, {"view", "(-1, -1)"});
  expect_error("view strided", [&] { ops::view(ops::transpose(t, 0, 1), {6}); }, {"view", "(3, 2)", "(6,)"});
  expect_error("reshape count", [&] { ops::reshape(t, {5}); }, {"reshape", "(2, 3)", "(5,)"});
  expect_error("autograd view", [&] { view(leaf({2, 3}), {7}); }, {"view", "(2, 3)", "(7,)"});
  expect_error("transpose dim", [&] { ops::transpose(t, 0, 2); }, {"transpose", "2"});
  expect_error("squeeze non-unit", [&] { ops::squeeze(t, 1); }, {"squeeze", "(2, 3)"});
  expect_error("unsqueeze dim", [&] { ops::unsqueeze(t, 4); }, {"unsqueeze", "4"});
  expect_error("expand", [&] { ops::expand(t, {2, 4}); }, {"expand", "(2, 3)", "(2, 4)"});
  expect_error("expand fewer dims", [&] { ops::expand(t, {3}); }, {"expand", "(2, 3)", "(3,)"});
  expect_error("cat shapes", [&] { cat({leaf({2, 3}), leaf({3, 4})}, 0); }, {"cat", "(3, 4)", "(2, 3)"});
  expect_error("cat dims", [&] { cat({leaf({2, 3}), leaf({3})}, 0); }, {"cat", "(3,)", "(2, 3)"});
  expect_error("cat empty", [&] { cat({}, 0); }, {"cat"});
  expect_error("sum dim", [&] { ops::sum(t, 2); }, {"sum", "2"});
  expect_error("max dim", [&] { ops::max(t, -3); }, {"max", "-3"});
}

BOOST_AUTO_TEST_CASE(nn_errors) {
  const Tensor x = f32({2, 3});
  expect_error("layer_norm weight", [&] { ops::layer_norm(x, f32({4}), f32({3}), 1e-5); },
               {"layer_norm", "(2, 3)", "(4,)"});
  expect_error("layer_norm bias",
               [&] {
                 ops::layer_norm(x, f32({3}), f32({3, 1}), 1e-5);
               },
               {"layer_norm", "(2, 3)", "(3, 1)"});
  expect_error("layer_norm weight dtype", [&] { ops::layer_norm(x, Tensor::ones({3}, DType::f64), f32({3}), 1e-5); },
               {"layer_norm", "f64"});
  expect_error("autograd layer_norm",
               [&] {
                 layer_norm(leaf({2, 3}), leaf({2}), leaf({3}));
               },
               {"layer_norm", "(2, 3)", "(2,)"});
  expect_error("softmax causal Tq > Tk", [&] { ops::softmax(f32({4, 3}), true); }, {"softmax", "(4, 3)"});
  expect_error("softmax causal 1-d", [&] { ops::softmax(f32({3}), true); }, {"softmax", "(3,)"});
  expect_error("softmax i64", [&] { ops::softmax(Tensor::zeros({3}, DType::i64)); }, {"softmax", "i64"});
  expect_error("softmax_backward",
               [&] {
                 ops::softmax_backward(x, f32({3, 2}));
               },
               {"softmax_backward", "(2, 3)", "(3, 2)"});
  expect_error("layer_norm_backward",
               [&] {
                 const ops::LayerNormOut r = ops::layer_norm(x, f32({3}), f32({3}), 1e-5);
                 ops::layer_norm_backward(f32({3, 2}), x, f32({3}), r.mean, r.rstd);
               },
               {"layer_norm_backward", "(2, 3)", "(3, 2)"});
}

BOOST_AUTO_TEST_CASE(tensor_access_errors) {
  const Tensor t = f32({2, 3});
  expect_error("data<double> of f32", [&] { t.data<double>(); }, {"Tensor::data", "f32", "f64"});
  expect_error("data<int64_t> of f32", [&] { t.data<int64_t>(); }, {"Tensor::data", "f32", "i64"});
  expect_error("data<float> of i32", [&] { Tensor::zeros({2}, DType::i32).data<float>(); },
               {"Tensor::data", "i32", "f32"});
  expect_error("item", [&] { t.item(); }, {"item", "(2, 3)"});
  expect_error("item of empty", [&] { f32({0}).item(); }, {"item", "(0,)"});
  expect_error("at rank", [&] { t.at({1}); }, {"at"});
  expect_error("at range", [&] { t.at({1, 3}); }, {"at", "3"});
  expect_error("size", [&] { t.size(2); }, {"size", "2"});
  expect_error("from_vector",
               [] {
                 Tensor::from_vector(std::vector<float>{1, 2, 3}, {2, 2});
               },
               {"from_vector", "(2, 2)"});
  expect_error("empty negative", [] { Tensor::empty({2, -1}); }, {"empty", "(2, -1)"});
  expect_error("from_storage outside",
               [&] {
                 Tensor::from_storage(t.storage(), {3, 3}, {3, 1}, 0, DType::f32);
               },
               {"from_storage", "(3, 3)"});
  expect_error("from_storage rank",
               [&] {
                 Tensor::from_storage(t.storage(), {6}, {1, 1}, 0, DType::f32);
               },
               {"from_storage", "(6,)"});
  expect_error("to_vector of undefined", [] { Tensor().to_vector<float>(); }, {"undefined"});
}

BOOST_AUTO_TEST_CASE(autograd_errors) {
  expect_error("requires_grad on i64", [] { set_requires_grad(Tensor::zeros({2}, DType::i64)); },
               {"set_requires_grad", "i64"});
  expect_error("requires_grad on non-leaf", [] { set_requires_grad(mul(leaf({2}), 2.0), false); },
               {"set_requires_grad", "leaf"});
  expect_error("backward without grad", [] { backward(f32({})); }, {"backward", "does not require grad"});
  expect_error("backward non-scalar", [] { backward(mul(leaf({2, 3}), 2.0)); }, {"backward", "(2, 3)"});
  expect_error("backward gradient shape",
               [] {
                 backward(mul(leaf({2, 3}), 2.0), Tensor::ones({3}, DType::f64));
               },
               {"backward", "(3,)", "(2, 3)"});
  expect_error("set_grad shape",
               [] {
                 set_grad(leaf({2, 3}), Tensor::zeros({3}, DType::f64));
               },
               {"set_grad", "(3,)", "(2, 3)"});
  expect_error("register_hook without grad", [] { register_hook(f32({2}), [](const Tensor& g) { return g; }); },
               {"register_hook", "(2,)"});
  expect_error("post hook on non-leaf",
               [] { register_post_accumulate_grad_hook(mul(leaf({2}), 2.0), [](const Tensor&) {}); },
               {"register_post_accumulate_grad_hook", "(2,)"});
}

BOOST_AUTO_TEST_CASE(cuda_device_on_a_cpu_build) {
#ifdef TRIAD_HAVE_CUDA
  BOOST_TEST_MESSAGE("built with CUDA: the CPU-only error paths are not reachable");
#else
  expect_error("empty on cuda", [] { Tensor::empty({2, 3}, DType::f32, Device::cuda()); }, {"cuda:0", "CUDA"});
  expect_error("zeros on cuda:1", [] { Tensor::zeros({2}, DType::f32, Device::cuda(1)); }, {"cuda:1"});
  expect_error("to cuda", [] { ops::to(f32({2}), Device::cuda()); }, {"cuda"});
  expect_error("parse then allocate", [] { Tensor::ones({1}, DType::f64, Device::parse("cuda:2")); }, {"cuda:2"});
#endif
}

BOOST_AUTO_TEST_SUITE_END()  // test_errors
