// The layer API: Module traversal (names, order, counts), registration rules, train/eval,
// forward hooks, zero_grad; the fused blocks against their unfused compositions; the basic
// layers on hand-checked inputs and their inits; GPTConfig validation, GPT's
// sequence-length check, and causality of attention.
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "support/check.h"
#include "triad.h"

BOOST_AUTO_TEST_SUITE(test_module)

using namespace triad;

namespace {

std::vector<std::string> names_of(const std::vector<std::pair<std::string, Tensor>>& named) {
  std::vector<std::string> out;
  for (const auto& [n, _] : named) out.push_back(n);
  return out;
}

nn::GPTConfig tiny_config() {
  nn::GPTConfig c{.n_layer = 2, .n_head = 2, .d_model = 16, .seq_len = 8, .vocab_size = 11};
  return c;
}

Tensor indices(const std::vector<int64_t>& v, int64_t B, int64_t T) { return Tensor::from_vector(v, {B, T}); }

// GPT-2 parameter count: V·C + S·C + L·(12C² + 13C) + 2C.
int64_t gpt2_param_count(const nn::GPTConfig& c) {
  const int64_t C = c.d_model;
  return c.vocab_size * C + c.seq_len * C + c.n_layer * (12 * C * C + 13 * C) + 2 * C;
}

// A user-defined model: own parameter first, then children, one of which nests a Linear.
struct Inner : nn::Module {
  Inner() : Module("Inner") {
    scale = register_parameter("scale", Tensor::ones({4}));
    fc = register_module("fc", std::make_shared<nn::Linear>(3, 4));
    register_buffer("counter", Tensor::zeros({1}));
  }
  Tensor forward(const Tensor& x) override { return mul((*fc)(x), scale); }
  Tensor scale;
  std::shared_ptr<nn::Linear> fc;
};

struct Outer : nn::Module {
  Outer() : Module("Outer") {
    offset = register_parameter("offset", Tensor::zeros({2}));
    inner = register_module("inner", std::make_shared<Inner>());
    act = register_module("act", std::make_shared<nn::GELU>());
    head = register_module("head", std::make_shared<nn::Linear>(4, 2, /*bias=*/false));
  }
  Tensor forward(const Tensor& x) override { return add((*head)((*act)((*inner)(x))), offset); }
  Tensor offset;
  std::shared_ptr<Inner> inner;
  std::shared_ptr<nn::GELU> act;
  std::shared_ptr<nn::Linear> head;
};

// Registers whatever `kind` says twice (or badly) in its constructor.
struct BadModule : nn::Module {
  explicit BadModule(int kind) : Module("BadModule") {
    switch (kind) {
      case 0:  // the same parameter name twice
        register_parameter("w", Tensor::zeros({2}));
        register_parameter("w", Tensor::zeros({2}));
        break;
      case 1:  // a child under a parameter's name
        register_parameter("fc", Tensor::zeros({2}));
        register_module("fc", std::make_shared<nn::Linear>(2, 2));
        break;
      case 2:  // two children under one name
        register_module("fc", std::make_shared<nn::Linear>(2, 2));
        register_module("fc", std::make_shared<nn::Linear>(2, 2));
        break;
      case 3:  // a buffer under a parameter's name
        register_parameter("w", Tensor::zeros({2}));
        register_buffer("w", Tensor::zeros({2}));
        break;
      case 4:  // a dotted name would be ambiguous in the dotted paths
        register_parameter("a.b", Tensor::zeros({2}));
        break;
      case 5:
        register_parameter("", Tensor::zeros({2}));
        break;
    }
  }
};

}  // namespace

// ---------------------------------------------------------------------------------------
// Names, order and counts

BOOST_AUTO_TEST_CASE(gpt_parameter_names_and_order) {
  nn::GPT model(tiny_config());
  std::vector<std::string> expected{"wte.weight", "wpe.weight"};
  for (int i = 0; i < 2; ++i) {
    const std::string b = "blocks." + std::to_string(i) + ".";
    for (const char* s :
         {"ln1.weight", "ln1.bias", "attn.qkv.weight", "attn.qkv.bias", "attn.proj.weight", "attn.proj.bias",
          "ln2.weight", "ln2.bias", "mlp.fc.weight", "mlp.fc.bias", "mlp.proj.weight", "mlp.proj.bias"})
      expected.push_back(b + s);
  }
  expected.push_back("ln_f.weight");
  expected.push_back("ln_f.bias");
  const auto named = model.named_parameters();
  BOOST_TEST(names_of(named) == expected, boost::test_tools::per_element());

  // Shapes of one block's parameters, C = 16, V = 11, S = 8.
  auto shape_of = [&](const std::string& name) {
    for (const auto& [n, t] : named)
      if (n == name) return t.shape();
    BOOST_FAIL("no parameter " << name);
    return Shape{};
  };
  BOOST_TEST((shape_of("wte.weight") == Shape{11, 16}));
  BOOST_TEST((shape_of("wpe.weight") == Shape{8, 16}));
  BOOST_TEST((shape_of("blocks.1.attn.qkv.weight") == Shape{48, 16}));
  BOOST_TEST((shape_of("blocks.1.attn.qkv.bias") == Shape{48}));
  BOOST_TEST((shape_of("blocks.1.attn.proj.weight") == Shape{16, 16}));
  BOOST_TEST((shape_of("blocks.1.mlp.fc.weight") == Shape{64, 16}));
  BOOST_TEST((shape_of("blocks.1.mlp.proj.weight") == Shape{16, 64}));
  BOOST_TEST((shape_of("ln_f.bias") == Shape{16}));

  // The handles are the modules' own members, not copies.
  BOOST_TEST(named[0].second.is_same(model.wte->weight));
  BOOST_TEST(named.back().second.is_same(model.ln_f->bias));
  for (const auto& [n, p] : named) BOOST_TEST(requires_grad(p), n);
  BOOST_TEST(model.parameters().size() == expected.size());
}

BOOST_AUTO_TEST_CASE(gpt_num_parameters_closed_form) {
  for (auto [L, NH, C, S, V] : std::vector<std::array<int64_t, 5>>{
           {2, 2, 16, 8, 11}, {1, 1, 8, 3, 5}, {3, 4, 32, 16, 50}, {4, 2, 24, 7, 257}}) {
    nn::GPTConfig c{.n_layer = L, .n_head = NH, .d_model = C, .seq_len = S, .vocab_size = V};
    nn::GPT model(c);
    BOOST_TEST(model.num_parameters() == gpt2_param_count(c), "L=" << L << " C=" << C);
  }
  // The GPT-2 124M configuration (the defaults), from the formula the models above satisfy:
  // allocating and initializing it takes ~6 s on two cores, too slow for a unit test.
  const nn::GPTConfig gpt2;
  BOOST_TEST(gpt2.n_layer == 12);
  BOOST_TEST(gpt2.d_model == 768);
  BOOST_TEST(gpt2_param_count(gpt2) == 124439808);
}

BOOST_AUTO_TEST_CASE(user_module_with_nested_children) {
  auto m = std::make_shared<Outer>();
  const std::vector<std::string> expected{"offset", "inner.scale", "inner.fc.weight", "inner.fc.bias", "head.weight"};
  BOOST_TEST(names_of(m->named_parameters()) == expected, boost::test_tools::per_element());
  BOOST_TEST(names_of(m->named_parameters(/*recurse=*/false)) == std::vector<std::string>{"offset"},
             boost::test_tools::per_element());
  BOOST_TEST(names_of(m->inner->named_parameters()) == (std::vector<std::string>{"scale", "fc.weight", "fc.bias"}),
             boost::test_tools::per_element());
  BOOST_TEST(names_of(m->named_buffers()) == std::vector<std::string>{"inner.counter"},
             boost::test_tools::per_element());
  BOOST_TEST(m->num_parameters() == 2 + 4 + 12 + 4 + 8);

  std::vector<std::string> module_names;
  std::vector<std::string> types;
  for (const auto& [n, mod] : m->named_modules(m)) {
    module_names.push_back(n);
    types.push_back(mod->type_name());
  }
  BOOST_TEST(module_names == (std::vector<std::string>{"", "inner", "inner.fc", "act", "head"}),
             boost::test_tools::per_element());
  BOOST_TEST(types == (std::vector<std::string>{"Outer", "Inner", "Linear", "GELU", "Linear"}),
             boost::test_tools::per_element());
  BOOST_TEST(m->children().size() == 3u);

  // The forward goes through the children: (1, 3) -> (1, 2), and gradients reach every leaf.
  const Tensor y = (*m)(Tensor::ones({1, 3}));
  BOOST_TEST((y.shape() == Shape{1, 2}));
  backward(sum(y));
  for (const auto& [n, p] : m->named_parameters()) BOOST_TEST(grad(p).defined(), n << " has no gradient");
}

BOOST_AUTO_TEST_CASE(bad_names_are_rejected) {
  for (int kind : {0, 1, 2, 3}) test::check_error([&] { BadModule m(kind); }, {"registered twice"});
  test::check_error([] { BadModule m(4); }, {"a.b"});
  test::check_error([] { BadModule m(5); }, {"invalid member name"});
}

BOOST_AUTO_TEST_CASE(module_without_single_tensor_forward_says_so) {
  struct NoForward : nn::Module {
    NoForward() : Module("NoForward") {}
  } m;
  test::check_error([&] { m(Tensor::ones({2})); }, {"NoForward"});
}

// ---------------------------------------------------------------------------------------
// train / eval

BOOST_AUTO_TEST_CASE(train_and_eval_propagate) {
  nn::GPTConfig c = tiny_config();
  c.dropout = 0.5;
  auto model = std::make_shared<nn::GPT>(c);
  auto all_modules_training = [&](bool expected) {
    for (const auto& [n, mod] : model->named_modules(model))
      if (mod->is_training() != expected) return false;
    return true;
  };
  BOOST_TEST(all_modules_training(true));  // modules start in training mode
  model->eval();
  BOOST_TEST(all_modules_training(false));
  BOOST_TEST(!model->blocks->is_training());
  BOOST_TEST(!std::static_pointer_cast<nn::Block>((*model->blocks)[1])->mlp->drop->is_training());
  model->train();
  BOOST_TEST(all_modules_training(true));
  model->train(false);
  BOOST_TEST(all_modules_training(false));

  // Dropout acts only in training: eval forwards are deterministic, training ones are not.
  const Tensor idx = indices({1, 2, 3, 4, 5, 6, 7, 8}, 1, 8);
  const Tensor e1 = (*model)(idx), e2 = (*model)(idx);
  BOOST_TEST(test::max_abs_diff(e1, e2) == 0.0);
  model->train();
  const Tensor t1 = (*model)(idx), t2 = (*model)(idx);
  BOOST_TEST(test::max_abs_diff(t1, t2) > 1e-3);
  BOOST_TEST(test::max_abs_diff(t1, e1) > 1e-3);
}

BOOST_AUTO_TEST_CASE(dropout_layer_values) {
  nn::Dropout drop(0.25);
  const int64_t n = 20000;
  const Tensor x = Tensor::full({n}, 3.0);
  const std::vector<float> y = drop(x).to_vector<float>();
  int64_t zeros = 0;
  for (float v : y) {
    const bool ok = v == 0.0f || std::fabs(v - 4.0f) < 1e-6f;  // kept values scaled by 1/(1-p)
    BOOST_TEST_REQUIRE(ok, "dropout produced " << v);
    zeros += v == 0.0f;
  }
  // Binomial(20000, 0.25): mean 5000, sd ~61; 6 sd of margin.
  BOOST_TEST(std::abs(zeros - 5000) < 370, zeros << " of " << n << " dropped");

  drop.eval();
  BOOST_TEST(test::max_abs_diff(drop(x), x) == 0.0);
  test::check_error([] { nn::Dropout bad(1.0); }, {"Dropout", "[0, 1)"});
  test::check_error([] { nn::Dropout bad(-0.1); }, {"Dropout"});
}

// ---------------------------------------------------------------------------------------
// Forward hooks

BOOST_AUTO_TEST_CASE(forward_hooks_fire_in_order_once_per_call) {
  auto m = std::make_shared<Outer>();
  std::vector<std::string> events;
  auto hook = [&](const std::string& tag, const nn::Module* expected) {
    return [&events, tag, expected](nn::Module& mod) {
      BOOST_TEST(&mod == expected, tag << " got the wrong module");
      events.push_back(tag);
    };
  };
  m->register_forward_pre_hook(hook("outer.pre", m.get()));
  m->register_forward_pre_hook(hook("outer.pre2", m.get()));
  m->register_forward_hook(hook("outer.post", m.get()));
  m->inner->register_forward_pre_hook(hook("inner.pre", m->inner.get()));
  m->inner->register_forward_hook(hook("inner.post", m->inner.get()));
  m->inner->fc->register_forward_pre_hook(hook("inner.fc.pre", m->inner->fc.get()));
  m->inner->fc->register_forward_hook(hook("inner.fc.post", m->inner->fc.get()));
  m->head->register_forward_pre_hook(hook("head.pre", m->head.get()));
  m->head->register_forward_hook(hook("head.post", m->head.get()));

  const std::vector<std::string> one_call{"outer.pre",  "outer.pre2", "inner.pre", "inner.fc.pre", "inner.fc.post",
                                          "inner.post", "head.pre",   "head.post", "outer.post"};
  (*m)(Tensor::ones({2, 3}));
  BOOST_TEST(events == one_call, boost::test_tools::per_element());

  // A second call repeats the sequence exactly once more.
  (*m)(Tensor::ones({2, 3}));
  std::vector<std::string> two_calls = one_call;
  two_calls.insert(two_calls.end(), one_call.begin(), one_call.end());
  BOOST_TEST(events == two_calls, boost::test_tools::per_element());

  // Calling a child directly fires only the child's hooks (and its descendants').
  events.clear();
  (*m->inner)(Tensor::ones({1, 3}));
  BOOST_TEST(events == (std::vector<std::string>{"inner.pre", "inner.fc.pre", "inner.fc.post", "inner.post"}),
             boost::test_tools::per_element());

  // call() runs a custom entry point between the same hooks.
  events.clear();
  const int r = m->head->call([&] {
    events.push_back("body");
    return 7;
  });
  BOOST_TEST(r == 7);
  BOOST_TEST(events == (std::vector<std::string>{"head.pre", "body", "head.post"}), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(gpt_block_hooks_fire_once_per_forward_in_order) {
  nn::GPTConfig c = tiny_config();
  c.n_layer = 3;
  nn::GPT model(c);
  std::vector<std::string> events;
  for (size_t i = 0; i < model.blocks->size(); ++i) {
    (*model.blocks)[i]->register_forward_pre_hook(
        [&events, i](nn::Module&) { events.push_back("pre" + std::to_string(i)); });
    (*model.blocks)[i]->register_forward_hook(
        [&events, i](nn::Module&) { events.push_back("post" + std::to_string(i)); });
  }
  model.register_forward_pre_hook([&](nn::Module&) { events.push_back("gpt.pre"); });
  model.register_forward_hook([&](nn::Module&) { events.push_back("gpt.post"); });
  model.loss(indices({1, 2, 3, 4}, 1, 4), indices({2, 3, 4, 5}, 1, 4));
  BOOST_TEST(
      events == (std::vector<std::string>{"gpt.pre", "pre0", "post0", "pre1", "post1", "pre2", "post2", "gpt.post"}),
      boost::test_tools::per_element());
}

// The blocks run fused ops (Linear::forward_gelu, LayerNorm/RMSNorm::forward_add, swiglu):
// in f32 the output and every gradient equal the unfused composition's bit for bit.
BOOST_AUTO_TEST_CASE(fused_blocks_equal_their_unfused_compositions) {
  const auto compare = [](nn::Module& block, const std::function<Tensor(const Tensor&)>& unfused,
                          const std::string& what) {
    Generator gen(5);
    Tensor x = Tensor::empty({2, 5, 16});
    ops::uniform_(x, -1, 1, gen);
    set_requires_grad(x);
    Tensor w = Tensor::empty({2, 5, 16});
    ops::uniform_(w, -1, 1, gen);
    const auto run = [&](const std::function<Tensor(const Tensor&)>& f) {
      block.zero_grad();
      set_grad(x, Tensor());
      const Tensor y = f(x);
      backward(sum(mul(y, w)));
      std::vector<Tensor> out{detach(y), grad(x)};
      for (const Tensor& p : block.parameters()) out.push_back(grad(p));
      return out;
    };
    const std::vector<Tensor> fused = run([&](const Tensor&t) { return block(t); }), plain = run(unfused);
    for (size_t i = 0; i < fused.size(); ++i) {
      BOOST_TEST_REQUIRE((fused[i].defined() && plain[i].defined()), what << " result " << i);
      BOOST_TEST(test::max_abs_diff(fused[i], plain[i]) == 0.0, what << " result " << i);
    }
  };
  nn::Block gpt(16, 2, 0.0);
  compare(
      gpt,
      [&](const Tensor& x) {
        const Tensor h = add(x, (*gpt.attn)((*gpt.ln1)(x)));
        const nn::MLP& m = *gpt.mlp;
        const Tensor n = layer_norm(h, gpt.ln2->weight, gpt.ln2->bias);
        return add(h, linear(gelu(linear(n, m.fc->weight, m.fc->bias)), m.proj->weight, m.proj->bias));
      },
      "gpt block");
  nn::LlamaBlock llama(16, 4, 2, 24, 1e-5, std::make_shared<nn::RotaryEmbedding>(4, 8));
  compare(
      llama,
      [&](const Tensor& x) {
        const Tensor h = add(x, (*llama.attn)((*llama.norm1)(x)));
        const nn::SwiGLU& m = *llama.mlp;
        const Tensor n = rms_norm(h, llama.norm2->weight, 1e-5);
        return add(h, linear(mul(silu(linear(n, m.gate->weight)), linear(n, m.up->weight)), m.down->weight));
      },
      "llama block");
}

// ---------------------------------------------------------------------------------------
// zero_grad

BOOST_AUTO_TEST_CASE(zero_grad_drops_accumulated_gradients) {
  nn::GPT model(tiny_config());
  const Tensor idx = indices({1, 2, 3, 4, 5, 6}, 2, 3), tgt = indices({2, 3, 4, 5, 6, 7}, 2, 3);
  backward(model.loss(idx, tgt));
  std::vector<Tensor> first;
  for (const Tensor& p : model.parameters()) {
    BOOST_TEST_REQUIRE(grad(p).defined());
    first.push_back(ops::clone(grad(p)));
  }
  // Without zero_grad a second backward accumulates: twice the gradient.
  backward(model.loss(idx, tgt));
  auto params = model.parameters();
  for (size_t i = 0; i < params.size(); ++i)
    BOOST_TEST(test::max_abs_diff(grad(params[i]), ops::mul(first[i], 2.0)) <= 1e-6 * (1 + ops::max_abs(first[i])));

  model.zero_grad();
  for (const Tensor& p : params) BOOST_TEST(!grad(p).defined());
  backward(model.loss(idx, tgt));
  for (size_t i = 0; i < params.size(); ++i) BOOST_TEST(test::max_abs_diff(grad(params[i]), first[i]) == 0.0);
}

// ---------------------------------------------------------------------------------------
// Layers on hand-checked inputs

BOOST_AUTO_TEST_CASE(linear_forward_values) {
  nn::Linear lin(3, 2);
  ops::copy_(lin.weight, Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3}));
  ops::copy_(lin.bias, Tensor::from_vector<float>({0.5, -1}, {2}));
  const Tensor x = Tensor::from_vector<float>({1, 0, -1, 2, 1, 0}, {2, 3});
  // [1,0,-1]·[1,2,3] + .5 = -1.5; [1,0,-1]·[4,5,6] - 1 = -3; [2,1,0]·W^T + b = 4.5, 12.
  BOOST_TEST(lin(x).to_vector<float>() == (std::vector<float>{-1.5f, -3.0f, 4.5f, 12.0f}),
             boost::test_tools::per_element());

  // Leading dimensions pass through: (2, 1, 3) -> (2, 1, 2).
  const Tensor y3 = lin(Tensor::from_vector<float>({1, 0, -1, 2, 1, 0}, {2, 1, 3}));
  BOOST_TEST((y3.shape() == Shape{2, 1, 2}));
  BOOST_TEST(y3.to_vector<float>() == (std::vector<float>{-1.5f, -3.0f, 4.5f, 12.0f}),
             boost::test_tools::per_element());

  nn::Linear nobias(3, 2, /*bias=*/false);
  BOOST_TEST(!nobias.bias.defined());
  BOOST_TEST(names_of(nobias.named_parameters()) == std::vector<std::string>{"weight"},
             boost::test_tools::per_element());
  ops::copy_(nobias.weight, lin.weight);
  BOOST_TEST(nobias(x).to_vector<float>() == (std::vector<float>{-2.0f, -2.0f, 4.0f, 13.0f}),
             boost::test_tools::per_element());

  test::check_error([] { nn::Linear bad(0, 3); }, {"Linear"});
}

BOOST_AUTO_TEST_CASE(linear_init_bounds) {
  for (int64_t in : {4, 100}) {
    Generator gen(42 + in);
    nn::Linear lin(in, 50, true, gen);
    const double bound = 1.0 / std::sqrt(double(in));
    for (const Tensor& t : {lin.weight, lin.bias}) {
      const std::vector<float> v = t.to_vector<float>();
      double lo = 1e9, hi = -1e9, sum = 0, sq = 0;
      for (float f : v) {
        lo = std::min(lo, double(f));
        hi = std::max(hi, double(f));
        sum += f;
        sq += double(f) * f;
      }
      const double n = double(v.size()), mean = sum / n, var = sq / n - mean * mean;
      BOOST_TEST(lo >= -bound);
      BOOST_TEST(hi <= bound);
      // The whole interval is used: U(-b, b) has variance b²/3; extremes near ±b.
      BOOST_TEST(std::fabs(mean) < 4 * bound / std::sqrt(3 * n), "mean " << mean);
      BOOST_TEST(std::fabs(var / (bound * bound / 3) - 1) < 0.35, "var " << var);
      if (n >= 200) {
        BOOST_TEST(lo < -0.95 * bound);
        BOOST_TEST(hi > 0.95 * bound);
      }
    }
  }
  // Same generator seed -> same init; different seed -> different init.
  Generator g1(7), g2(7), g3(8);
  nn::Linear a(10, 10, true, g1), b(10, 10, true, g2), c(10, 10, true, g3);
  BOOST_TEST(test::max_abs_diff(a.weight, b.weight) == 0.0);
  BOOST_TEST(test::max_abs_diff(a.weight, c.weight) > 0.0);
}

BOOST_AUTO_TEST_CASE(embedding_forward_values_and_init) {
  nn::Embedding emb(4, 2);
  ops::copy_(emb.weight, Tensor::from_vector<float>({0, 1, 10, 11, 20, 21, 30, 31}, {4, 2}));
  const Tensor y = emb(indices({3, 0, 1, 3}, 2, 2));
  BOOST_TEST((y.shape() == Shape{2, 2, 2}));
  BOOST_TEST(y.to_vector<float>() == (std::vector<float>{30, 31, 0, 1, 10, 11, 30, 31}),
             boost::test_tools::per_element());
  // i32 indices work too; out-of-range ones are an Error.
  const Tensor y32 = emb(Tensor::from_vector<int32_t>({2}, {1}));
  BOOST_TEST(y32.to_vector<float>() == (std::vector<float>{20, 21}), boost::test_tools::per_element());
  test::check_error([&] { emb(indices({0, 4}, 1, 2)); }, {"embedding", "out of range"});

  // Init N(0, 1): moments of a 100k-element table.
  Generator gen(3);
  nn::Embedding big(1000, 100, gen);
  const std::vector<float> v = big.weight.to_vector<float>();
  double sum = 0, sq = 0;
  for (float f : v) sum += f, sq += double(f) * f;
  const double n = double(v.size()), mean = sum / n, var = sq / n - mean * mean;
  BOOST_TEST(std::fabs(mean) < 0.02);
  BOOST_TEST(std::fabs(var - 1.0) < 0.03);
}

// A negative index must be an Error like any other out-of-range one: the kernel would read
// (and its backward write) the row before the table.
BOOST_AUTO_TEST_CASE(embedding_rejects_negative_indices) {
  nn::Embedding emb(4, 2);
  test::check_error([&] { emb(indices({-1, 0}, 1, 2)); }, {"embedding", "out of range"});
  test::check_error([&] { emb(indices({0, -2}, 1, 2)); }, {"embedding", "out of range"});
}

BOOST_AUTO_TEST_CASE(layer_norm_forward_values) {
  nn::LayerNorm ln(4);
  BOOST_TEST(ln.weight.to_vector<float>() == (std::vector<float>{1, 1, 1, 1}), boost::test_tools::per_element());
  BOOST_TEST(ln.bias.to_vector<float>() == (std::vector<float>{0, 0, 0, 0}), boost::test_tools::per_element());
  BOOST_TEST(ln.eps == 1e-5);

  // Row [1, 2, 3, 4]: mean 2.5, biased variance 1.25. Row [-2, -2, 2, 2]: mean 0, var 4.
  const Tensor x = Tensor::from_vector<float>({1, 2, 3, 4, -2, -2, 2, 2}, {2, 4});
  const double r1 = 1.0 / std::sqrt(1.25 + 1e-5), r2 = 1.0 / std::sqrt(4.0 + 1e-5);
  std::vector<double> expected{-1.5 * r1, -0.5 * r1, 0.5 * r1, 1.5 * r1, -2 * r2, -2 * r2, 2 * r2, 2 * r2};
  std::vector<float> y = ln(x).to_vector<float>();
  for (size_t i = 0; i < y.size(); ++i) BOOST_TEST(std::fabs(y[i] - expected[i]) < 1e-6, "element " << i);

  // With an affine part: y * w + b.
  ops::copy_(ln.weight, Tensor::from_vector<float>({1, 2, 1, -1}, {4}));
  ops::copy_(ln.bias, Tensor::from_vector<float>({0, 0, 1, -1}, {4}));
  const std::vector<double> w{1, 2, 1, -1}, b{0, 0, 1, -1};
  y = ln(x).to_vector<float>();
  for (size_t i = 0; i < y.size(); ++i)
    BOOST_TEST(std::fabs(y[i] - (expected[i] * w[i % 4] + b[i % 4])) < 1e-6, "element " << i);

  // eps matters for a constant row: (x - mean) = 0 gives exactly the bias.
  nn::LayerNorm ln2(3, 0.1);
  BOOST_TEST(ln2(Tensor::full({1, 3}, 5.0)).to_vector<float>() == (std::vector<float>{0, 0, 0}),
             boost::test_tools::per_element());
  // Row [0, 0, 3]: mean 1, var 2; rstd = 1/sqrt(2.1).
  const std::vector<float> y2 = ln2(Tensor::from_vector<float>({0, 0, 3}, {1, 3})).to_vector<float>();
  const double r = 1.0 / std::sqrt(2.1);
  BOOST_TEST(std::fabs(y2[0] + r) < 1e-6);
  BOOST_TEST(std::fabs(y2[2] - 2 * r) < 1e-6);
}

BOOST_AUTO_TEST_CASE(gelu_forward_values) {
  nn::GELU act;
  const std::vector<float> y = act(Tensor::from_vector<float>({0, 1, -1, 3}, {4})).to_vector<float>();
  // 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x³))), evaluated by hand.
  BOOST_TEST(y[0] == 0.0f);
  BOOST_TEST(std::fabs(y[1] - 0.84119199) < 1e-6);
  BOOST_TEST(std::fabs(y[2] + 0.15880801) < 1e-6);
  BOOST_TEST(std::fabs(y[3] - 2.99636261) < 1e-6);
}

// ---------------------------------------------------------------------------------------
// GPT configuration and inputs

BOOST_AUTO_TEST_CASE(gpt_config_validate_names_the_key) {
  nn::GPTConfig ok = tiny_config();
  ok.validate();  // does not throw
  BOOST_CHECK_NO_THROW(nn::GPTConfig{}.validate());

  struct Case {
    std::function<void(nn::GPTConfig&)> edit;
    std::string key;
  };
  const std::vector<Case> cases{
      {[](nn::GPTConfig& c) {
         c.d_model = 18;
         c.n_head = 4;
       },
       "d_model"},  // not divisible
      {[](nn::GPTConfig& c) { c.d_model = 0; }, "d_model"},
      {[](nn::GPTConfig& c) { c.n_layer = 0; }, "n_layer"},
      {[](nn::GPTConfig& c) { c.n_head = 0; }, "n_head"},
      {[](nn::GPTConfig& c) { c.n_head = -2; }, "n_head"},
      {[](nn::GPTConfig& c) { c.seq_len = 0; }, "seq_len"},
      {[](nn::GPTConfig& c) { c.vocab_size = -1; }, "vocab_size"},
      {[](nn::GPTConfig& c) { c.dropout = 1.0; }, "dropout"},
      {[](nn::GPTConfig& c) { c.dropout = -0.5; }, "dropout"},
  };
  for (const Case& k : cases) {
    nn::GPTConfig c = tiny_config();
    k.edit(c);
    test::check_error([&] { c.validate(); }, {k.key});
    test::check_error([&] { nn::GPT model(c); }, {k.key});  // the constructor validates too
  }
  // The divisibility message shows both numbers.
  nn::GPTConfig c = tiny_config();
  c.d_model = 18;
  c.n_head = 4;
  test::check_error([&] { c.validate(); }, {"d_model", "n_head", "18", "4"});
}

BOOST_AUTO_TEST_CASE(gpt_rejects_sequences_longer_than_seq_len) {
  nn::GPT model(tiny_config());  // seq_len 8
  std::vector<int64_t> v(9, 1);
  test::check_error([&] { model(indices(v, 1, 9)); }, {"seq_len", "9", "8"});
  test::check_error([&] { model(Tensor::from_vector<int64_t>({1, 2}, {2})); }, {"(B, T)"});
  v.resize(8);
  const Tensor logits = model(indices(v, 1, 8));  // exactly seq_len is fine
  BOOST_TEST((logits.shape() == Shape{1, 8, 11}));
  BOOST_TEST((model(indices({1, 2, 3, 4, 5, 6}, 2, 3)).shape() == Shape{2, 3, 11}));
}

BOOST_AUTO_TEST_CASE(attention_is_causal) {
  nn::GPTConfig c = tiny_config();
  c.n_layer = 3;
  nn::GPT model(c);
  model.eval();
  const int64_t T = 8, changed = 5;
  const std::vector<int64_t> a{1, 2, 3, 4, 5, 6, 7, 8};
  std::vector<int64_t> b = a;
  b[changed] = 0;
  const Tensor la = model(indices(a, 1, T)), lb = model(indices(b, 1, T));
  for (int64_t t = 0; t < T; ++t) {
    const double d = test::max_abs_diff(ops::narrow(la, 1, t, 1), ops::narrow(lb, 1, t, 1));
    if (t < changed)
      BOOST_TEST(d < 1e-6, "position " << t << " saw a future token: diff " << d);
    else
      BOOST_TEST(d > 1e-4, "position " << t << " did not see the change: diff " << d);
  }

  // The same for a single block's attention, with random inputs at every later position.
  nn::CausalSelfAttention attn(16, 4, 0.0);
  Generator gen(11);
  Tensor x = Tensor::empty({2, 6, 16});
  ops::normal_(x, 0.0, 1.0, gen);
  Tensor x2 = ops::clone(x), later = Tensor::empty({2, 3, 16});
  ops::normal_(later, 0.0, 1.0, gen);
  ops::copy_(ops::narrow(x2, 1, 3, 3), later);  // redraw positions 3..5
  const Tensor ya = attn(x), yb = attn(x2);
  BOOST_TEST(test::max_abs_diff(ops::narrow(ya, 1, 0, 3), ops::narrow(yb, 1, 0, 3)) < 1e-6);
  BOOST_TEST(test::max_abs_diff(ops::narrow(ya, 1, 3, 3), ops::narrow(yb, 1, 3, 3)) > 1e-4);
  test::check_error([] { nn::CausalSelfAttention bad(18, 4, 0.0); }, {"d_model", "n_head"});
}

BOOST_AUTO_TEST_SUITE_END()  // test_module
