// End-to-end learning: a tiny GPT trained with AdamW on the copy task. Each sequence is H
// random tokens followed by the same H tokens again; the loss counts only the predictions of
// the second half (targets -100 elsewhere), which a model can get right only by attending
// back H positions (an induction-style circuit: it needs attention, position embeddings and
// two layers working together). Chance level is ln(V); the test demands far better.
#include <algorithm>
#include <boost/test/unit_test.hpp>
#include <chrono>
#include <cmath>
#include <random>
#include <vector>

#include "support/check.h"
#include "triad.h"

BOOST_AUTO_TEST_SUITE(test_train_synthetic)

using namespace triad;

namespace {

constexpr int64_t kV = 8;           // vocabulary
constexpr int64_t kH = 8;           // half length: sequences of 2H tokens
constexpr int64_t kT = 2 * kH - 1;  // model input: tokens[0 .. 2H-2], targets tokens[1 .. 2H-1]
constexpr int64_t kB = 16;

struct Batch {
  Tensor idx, targets;  // (B, T) i64
};

// A fresh batch from `rng`: x[t] = s[t], y[t] = s[t+1] where the prediction is determined by
// the first half (t >= H-1), -100 where it is not.
Batch copy_batch(std::mt19937_64& rng) {
  std::uniform_int_distribution<int64_t> tok(0, kV - 1);
  std::vector<int64_t> x(kB * kT), y(kB * kT);
  for (int64_t b = 0; b < kB; ++b) {
    std::vector<int64_t> s(2 * kH);
    for (int64_t t = 0; t < kH; ++t) s[t] = s[t + kH] = tok(rng);
    for (int64_t t = 0; t < kT; ++t) {
      x[b * kT + t] = s[t];
      y[b * kT + t] = t >= kH - 1 ? s[t + 1] : -100;
    }
  }
  return {Tensor::from_vector(x, {kB, kT}), Tensor::from_vector(y, {kB, kT})};
}

nn::GPTConfig copy_config() {
  nn::GPTConfig c{.n_layer = 2, .n_head = 4, .d_model = 64, .seq_len = kT, .vocab_size = kV, .init_seed = 2024};
  return c;
}

// `steps` AdamW steps (warmup 20 or fewer, cosine to lr/10) on fresh batches from `data_seed`;
// returns the training losses.
std::vector<double> train(nn::GPT& model, int64_t steps, uint64_t data_seed) {
  optim::AdamW opt(optim::decay_groups(model.parameters(), 0.01), {.lr = 3e-3, .beta1 = 0.9, .beta2 = 0.98});
  const optim::WarmupCosineLR schedule(3e-3, 3e-4, std::min<int64_t>(20, steps), steps);
  std::mt19937_64 rng(data_seed);
  std::vector<double> losses;
  for (int64_t step = 0; step < steps; ++step) {
    const Batch batch = copy_batch(rng);
    opt.zero_grad();
    const Tensor loss = model.loss(batch.idx, batch.targets);
    backward(loss);
    optim::clip_grad_norm(model.parameters(), 1.0);
    opt.set_lr(schedule.lr_at(step));
    opt.step();
    losses.push_back(loss.item());
    if (step % 50 == 0 || step == steps - 1) BOOST_TEST_MESSAGE("step " << step << " loss " << losses.back());
  }
  return losses;
}

}  // namespace

// Measured (OMP_NUM_THREADS=2, 200 steps, ~2.5 s): training loss 2.12 -> 0.0051, held-out
// loss 0.0050 and accuracy 100%; with four other (data, init) seed pairs the held-out loss was
// 0.0044-0.0055. The bound 0.05 leaves a 10x margin and is still 40x below chance, ln 8 = 2.08.
BOOST_AUTO_TEST_CASE(tiny_gpt_learns_the_copy_task) {
  const auto start = std::chrono::steady_clock::now();
  nn::GPT model(copy_config());
  const std::vector<double> losses = train(model, 200, 7);
  const double first = losses.front(), last = losses.back();

  // Held-out batches, eval mode, no gradients.
  model.eval();
  NoGradGuard no_grad;
  std::mt19937_64 eval_rng(99);
  double eval_loss = 0.0;
  int64_t correct = 0, counted = 0;
  for (int i = 0; i < 4; ++i) {
    const Batch batch = copy_batch(eval_rng);
    const Tensor logits = model(batch.idx);  // (B, T, V)
    eval_loss += cross_entropy(logits, batch.targets).item() / 4;
    const std::vector<float> l = logits.to_vector<float>();
    const std::vector<int64_t> y = batch.targets.to_vector<int64_t>();
    for (size_t r = 0; r < y.size(); ++r) {
      if (y[r] == -100) continue;
      const float* row = l.data() + r * kV;
      correct += std::max_element(row, row + kV) - row == y[r];
      ++counted;
    }
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const double accuracy = double(correct) / double(counted);
  BOOST_TEST_MESSAGE("first " << first << " last " << last << " eval " << eval_loss << " accuracy " << accuracy
                              << " in " << secs << " s");

  BOOST_TEST(counted == 4 * kB * kH);  // H predictions per sequence count
  BOOST_TEST(std::fabs(first - std::log(double(kV))) < 0.3, "untrained loss " << first << " is not near ln V");
  BOOST_TEST(last < 0.05, "final training loss " << last);
  BOOST_TEST(eval_loss < 0.05, "held-out copy loss " << eval_loss);
  BOOST_TEST(accuracy > 0.99, "held-out copy accuracy " << accuracy);
}

// The same seeds give the same run, bit for bit; another data seed gives another run.
BOOST_AUTO_TEST_CASE(training_is_deterministic) {
  nn::GPT a(copy_config()), b(copy_config()), c(copy_config());
  const std::vector<double> la = train(a, 5, 3), lb = train(b, 5, 3), lc = train(c, 5, 4);
  BOOST_TEST(la == lb, boost::test_tools::per_element());
  BOOST_TEST(la.back() != lc.back());
  const auto pa = a.parameters(), pb = b.parameters();
  for (size_t i = 0; i < pa.size(); ++i) BOOST_TEST(test::max_abs_diff(pa[i], pb[i]) == 0.0);
}

BOOST_AUTO_TEST_SUITE_END()  // test_train_synthetic
