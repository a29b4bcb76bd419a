// ZeRO stages 0–3 reproduce the single-process trajectory: on every rank, 10 clipped AdamW
// steps of a tiny GPT on the same global batches, once in one process (the reference,
// computed locally) and once data-parallel over all ranks, with and without gradient
// accumulation. Losses and final parameters agree within 1e-5 relative (fp32; parameters
// relative to the largest parameter value, since Adam turns last-bit differences in
// near-zero gradients into absolute, not relative, differences of small biases).
#define BOOST_TEST_MODULE zero
#include <boost/test/unit_test.hpp>

#include "parallel/counting_communicator.h"
#include "parallel/runtime.h"
#include "support/check.h"
#include "support/mpi_fixture.h"
#include "triad.h"
#include "zero/zero_optimizer.h"

using namespace triad;

using test::MpiFixture;
BOOST_TEST_GLOBAL_FIXTURE(MpiFixture);

namespace {

constexpr int64_t kGlobalBatch = 16, kSeq = 8, kSteps = 10;
constexpr double kLr = 1e-3, kDecay = 0.1, kClip = 0.5;
const optim::AdamWOptions kAdam{.lr = kLr, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8};

std::shared_ptr<nn::GPT> make_model() {
  return std::make_shared<nn::GPT>(
      nn::GPTConfig{.n_layer = 2, .n_head = 2, .d_model = 16, .seq_len = kSeq, .vocab_size = 32, .init_seed = 11});
}

// The global batch of step k: (B, T + 1) tokens, the same on every rank. Two batches
// alternate, so the loss falls within the 10 steps.
Tensor global_tokens(int64_t step) {
  Generator gen(1000 + uint64_t(step % 2));
  Tensor u = Tensor::empty({kGlobalBatch, kSeq + 1});
  ops::uniform_(u, 0.0, 31.999, gen);
  const std::vector<float> f = u.to_vector<float>();
  return Tensor::from_vector(std::vector<int64_t>(f.begin(), f.end()), {kGlobalBatch, kSeq + 1});
}

// Mean loss of rows [first, first + rows) of a global batch.
Tensor loss_of(nn::GPT& model, const Tensor& tokens, int64_t first, int64_t rows) {
  const Tensor part = ops::narrow(tokens, 0, first, rows);
  return model.loss(ops::contiguous(ops::narrow(part, 1, 0, kSeq)), ops::contiguous(ops::narrow(part, 1, 1, kSeq)));
}

struct Trajectory {
  std::vector<double> losses;
  std::vector<std::pair<std::string, Tensor>> params;
};

Trajectory single_process(int64_t accumulation) {
  auto model = make_model();
  optim::AdamW opt(optim::decay_groups(model->parameters(), kDecay), kAdam);
  Trajectory t;
  const int64_t rows = kGlobalBatch / accumulation;
  for (int64_t step = 0; step < kSteps; ++step) {
    const Tensor tokens = global_tokens(step);
    double loss = 0;
    for (int64_t m = 0; m < accumulation; ++m) {
      const Tensor l = loss_of(*model, tokens, m * rows, rows);
      loss += l.item() / double(accumulation);
      backward(l, Tensor::full({}, 1.0 / double(accumulation)));
    }
    optim::clip_grad_norm(model->parameters(), kClip);
    opt.step();
    opt.zero_grad();
    t.losses.push_back(loss);
  }
  t.params = model->named_parameters();
  return t;
}

// persist: stage 3's persistence threshold (0: every group partitioned).
Trajectory data_parallel(int stage, int64_t accumulation, int64_t persist = 0) {
  const parallel::CommunicatorPtr world = parallel::world();
  const int n = world->size(), r = world->rank();
  auto model = make_model();
  zero::ZeroOptimizer opt(model, {.stage = stage, .stage3_param_persistence_threshold = persist}, kAdam, kDecay,
                          world);
  const int64_t micro = kGlobalBatch / (accumulation * n);
  Trajectory t;
  for (int64_t step = 0; step < kSteps; ++step) {
    const Tensor tokens = global_tokens(step);
    double local = 0;
    for (int64_t m = 0; m < accumulation; ++m) {
      const Tensor l = loss_of(*model, tokens, (m * n + r) * micro, micro);
      local += l.item();
      opt.begin_backward(m == accumulation - 1);
      backward(l, Tensor::full({}, 1.0 / double(accumulation)));
    }
    opt.step(kLr, kClip);
    Tensor sum = Tensor::full({1}, local, DType::f64);
    world->all_reduce(sum)->wait();
    t.losses.push_back(sum.item() / double(n * accumulation));
  }
  opt.gather_all();  // stage 3: read the parameters in full
  for (const auto& [name, p] : model->named_parameters()) t.params.emplace_back(name, ops::clone(p));
  opt.release_all();
  return t;
}

void check_same(const Trajectory& dp, const Trajectory& ref) {
  for (size_t i = 0; i < ref.losses.size(); ++i)
    BOOST_TEST(std::abs(dp.losses[i] - ref.losses[i]) / ref.losses[i] < 1e-5, "step " << i);
  BOOST_TEST(dp.losses.back() < ref.losses.front() - 0.05);  // it trained
  double scale = 0;
  for (const auto& [_, p] : ref.params) scale = std::max(scale, ops::max_abs(p));
  for (size_t i = 0; i < ref.params.size(); ++i) {
    const double err = test::max_abs_diff(dp.params[i].second, ref.params[i].second) / scale;
    BOOST_TEST(err < 1e-5, ref.params[i].first << ": error " << err << " of the largest parameter");
  }
}

}  // namespace

BOOST_AUTO_TEST_CASE(stages_reproduce_the_single_process_trajectory) {
  for (int64_t accumulation : {1, 2}) {
    const Trajectory ref = single_process(accumulation);
    for (int stage : {0, 1, 2, 3}) {
      BOOST_TEST_CONTEXT("stage " << stage << ", accumulation " << accumulation) {
        check_same(data_parallel(stage, accumulation), ref);
      }
    }
    BOOST_TEST_CONTEXT("stage 3 with small groups kept whole, accumulation " << accumulation) {
      check_same(data_parallel(3, accumulation, /*persist=*/1000), ref);  // blocks' biases and norms
    }
  }
}

BOOST_AUTO_TEST_CASE(units_follow_the_wrap_policy) {
  auto model = make_model();
  const std::vector<zero::Unit> units = zero::make_units(model, {});
  BOOST_TEST_REQUIRE(units.size() == 3u);  // root (embeddings, head, final norm), two blocks
  BOOST_TEST(units[0].name == "");
  BOOST_TEST(units[1].name == "blocks.0");
  BOOST_TEST(units[2].name == "blocks.1");
  int64_t total = 0;
  for (const zero::Unit& u : units)
    for (const auto& [_, p] : u.params) total += p.numel();
  BOOST_TEST(total == model->num_parameters());
  // By size: each block (3,296 parameters) and nothing inside one; the GPT itself is the root.
  const auto by_size = zero::make_units(model, {.module_types = {}, .min_params = 3000});
  BOOST_TEST(by_size.size() == 3u);
}

BOOST_AUTO_TEST_CASE(memory_matches_the_stage_formulas) {
  const parallel::CommunicatorPtr world = parallel::world();
  const int64_t n = world->size();
  for (int stage : {0, 1, 2, 3}) {
    auto model = make_model();
    zero::ZeroOptimizer opt(model, {.stage = stage, .stage3_param_persistence_threshold = 0}, kAdam, kDecay, world);
    const zero::ResidentBytes m = opt.memory();
    const double psi = double(model->num_parameters());
    const double shard = psi / double(n);
    // fp32: parameters 4Ψ (stages 0–2) or 4Ψ/n; gradients 4Ψ (stages 0, 1) or 4Ψ/n; Adam's two
    // moments 8Ψ (stage 0) or 8Ψ/n. Padding adds at most n elements per group.
    const double params = 4 * (stage <= 2 ? psi : shard);
    BOOST_TEST(std::abs(m.param_bytes - params) / params < 0.05);
    BOOST_TEST(std::abs(m.grad_bytes - 4 * (stage <= 1 ? psi : shard)) / (4 * (stage <= 1 ? psi : shard)) < 0.05);
    BOOST_TEST(std::abs(m.optim_bytes - 8 * (stage == 0 ? psi : shard)) / (8 * (stage == 0 ? psi : shard)) < 0.05);
  }
}

BOOST_AUTO_TEST_CASE(communication_per_step_is_two_psi) {
  // Ring-optimal volume per step (no accumulation): stage 0 all-reduces Ψ, stages 1–2
  // reduce-scatter and all-gather Ψ (bus bytes 2Ψ(n−1)/n x 4 bytes); stage 3 all-gathers Ψ
  // for the forward and again for the backward and reduce-scatters Ψ (3Ψ(n−1)/n x 4).
  const auto counting = std::make_shared<parallel::CountingCommunicator>(parallel::world());
  const double n = counting->size();
  for (int stage : {0, 1, 2, 3}) {
    auto model = make_model();
    zero::ZeroOptimizer opt(model, {.stage = stage, .stage3_param_persistence_threshold = 0}, kAdam, kDecay, counting);
    counting->reset();
    const Tensor tokens = global_tokens(0);
    const int64_t micro = kGlobalBatch / int64_t(n);
    opt.begin_backward(true);
    backward(loss_of(*model, tokens, counting->rank() * micro, micro));
    opt.step(kLr, kClip);
    const double psi = double(model->num_parameters());
    const double expected = (stage == 3 ? 3.0 : 2.0) * psi * 4.0 * (n - 1.0) / n;
    BOOST_TEST(std::abs(counting->bus_bytes() - expected) / expected < 0.05,
               "stage " << stage << ": " << counting->bus_bytes() << " bus bytes, expected " << expected);
    BOOST_TEST(counting->stats().at(stage == 0 ? "all_reduce" : "reduce_scatter").calls > 0);
  }
}
