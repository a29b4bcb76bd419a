// The pipeline equivalence check, shared by tests/engine/test_pipeline_mpi.cpp (the GPT)
// and tests/engine/test_pipeline_layer_list_mpi.cpp (a model the test writes as a list of
// layers): kSteps optimizer steps of kMicro micro-batches each on the same global batches of
// tokens, once through an Engine in one process (the reference) and once through an Engine
// holding a pipeline stage, each data-parallel rank taking its rows of every batch. The
// losses and the final parameters, at their global shapes, must agree within 1e-5 relative.
#pragma once

#include <boost/test/unit_test.hpp>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "engine/engine.h"
#include "parallel/process_grid.h"
#include "support/check.h"
#include "triad.h"

namespace triad::test::pipe {

inline constexpr int64_t kBatch = 8, kSeq = 8, kSteps = 10, kVocab = 32, kMicro = 4;

// The global batch of step k: (kBatch, kSeq + 1) tokens below kVocab, the same on every
// rank. Two batches alternate, so the loss falls within the steps.
inline Tensor global_tokens(int64_t step) {
  std::vector<int64_t> ids;
  for (int64_t i = 0; i < kBatch * (kSeq + 1); ++i)
    ids.push_back(int64_t(random_bits(500 + uint64_t(step % 2), uint64_t(i)) % uint64_t(kVocab)));
  return Tensor::from_vector(ids, {kBatch, kSeq + 1});
}

// Micro-batch m of data-parallel rank r of dp, as the trainer takes its rows: (inputs,
// targets), the targets the inputs shifted by one token.
inline std::pair<Tensor, Tensor> micro_batch(const Tensor& tokens, int64_t m, int r, int dp) {
  const int64_t rows = kBatch / (kMicro * dp);
  const Tensor part = ops::narrow(tokens, 0, (m * dp + r) * rows, rows);
  return {ops::contiguous(ops::narrow(part, 1, 0, kSeq)), ops::contiguous(ops::narrow(part, 1, 1, kSeq))};
}

struct Trajectory {
  std::vector<double> losses;            // per step, the mean over the global batch
  std::map<std::string, Tensor> params;  // the ones this rank holds, at their global shapes
  double scale = 0;                      // the largest parameter element (single process)
};

// Trains `e` (one process: forward() and backward() per micro-batch) on the whole batches.
inline Trajectory train_one_process(engine::Engine& e) {
  Trajectory t;
  for (int64_t step = 0; step < kSteps; ++step) {
    const Tensor tokens = global_tokens(step);
    double sum = 0;
    for (int64_t m = 0; m < kMicro; ++m) {
      const auto [x, y] = micro_batch(tokens, m, 0, 1);
      const Tensor l = e.forward(x, y);
      e.backward(l);
      sum += l.item();
    }
    e.step();
    t.losses.push_back(sum / kMicro);
  }
  for (const auto& [name, p] : e.model().named_parameters()) {
    t.params[name] = ops::clone(p);
    t.scale = std::max(t.scale, ops::max_abs(p));
  }
  return t;
}

// Trains `e`, a pipeline stage on `grid`, through forward_backward(); checks on the way that
// a stage keeps no more micro-batches alive than its schedule allows.
inline Trajectory train_pipelined(engine::Engine& e, const parallel::ProcessGrid& grid) {
  BOOST_REQUIRE(e.pipelined());
  const std::string& schedule = e.config().pipeline.schedule;
  const int pp = grid.pp()->size(), dp = grid.dp()->size();
  Trajectory t;
  for (int64_t step = 0; step < kSteps; ++step) {
    const Tensor tokens = global_tokens(step);
    std::vector<Tensor> inputs, targets;
    for (int64_t m = 0; m < kMicro; ++m) {
      const auto [x, y] = micro_batch(tokens, m, grid.dp_rank(), dp);
      inputs.push_back(x), targets.push_back(y);
    }
    const Tensor losses = e.forward_backward(inputs, targets);
    const engine::StepResult r = e.step();
    BOOST_REQUIRE(!r.skipped);
    Tensor sum = Tensor::full({1}, ops::sum(losses).item(), DType::f64);
    grid.dp()->all_reduce(sum)->wait();
    t.losses.push_back(sum.item() / double(kMicro * dp));
    const int live = e.pipeline()->peak_live();
    // 1F1B and ZB-H1 keep at most p micro-batches alive on a stage; GPipe all of them.
    if (schedule == "gpipe") BOOST_TEST(live == kMicro);
    if (schedule == "1f1b" || schedule == "zb_h1") BOOST_TEST(live <= std::min<int64_t>(pp, kMicro));
  }
  e.gather_parameters();
  const auto splits = e.model().named_splits();
  const auto params = e.model().named_parameters();
  for (size_t i = 0; i < params.size(); ++i) {
    const auto& [name, p] = params[i];
    const nn::TensorSplit& s = splits[i].second;
    if (!s.is_split()) {
      t.params[name] = ops::clone(p);
      continue;
    }
    Tensor global = Tensor::zeros(s.global_shape(p.shape()));
    nn::place_local_part(global, p, s);
    grid.tp()->all_reduce(global)->wait();  // the parts are disjoint
    t.params[name] = global;
  }
  e.release_parameters();
  return t;
}

// `run`'s losses and every parameter it holds equal `ref`'s within 1e-5 relative.
inline void check_equal(const Trajectory& run, const Trajectory& ref, const std::string& layout) {
  BOOST_TEST_CONTEXT(layout) {
    BOOST_TEST(run.losses.size() == ref.losses.size());
    for (size_t i = 0; i < ref.losses.size() && i < run.losses.size(); ++i)
      BOOST_TEST(std::abs(run.losses[i] - ref.losses[i]) / ref.losses[i] < 1e-5, "step " << i);
    BOOST_TEST(!run.params.empty());
    for (const auto& [name, p] : run.params) {
      BOOST_REQUIRE_MESSAGE(ref.params.count(name), "no parameter " << name << " in the single-process model");
      // Against the model's scale: some elements (the GPT's key biases, whose gradient is
      // zero but for rounding) are noise of their own.
      BOOST_TEST(test::max_abs_diff(p, ref.params.at(name)) / ref.scale < 1e-5, name);
    }
  }
}

}  // namespace triad::test::pipe
