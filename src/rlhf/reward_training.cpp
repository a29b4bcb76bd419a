#include "rlhf/reward_training.h"

#include <cmath>

#include "autograd/functions.h"
#include "autograd/grad_mode.h"
#include "config/model_factory.h"
#include "rlhf/models.h"
#include "rlhf/pair_rows.h"
#include "rlhf/reward_scores.h"
#include "tensor/ops.h"

namespace triad::rlhf {

double train_reward(const StepConfig& sc, const RunOptions& options, parallel::CommunicatorPtr world) {
  const engine::TrainConfig& c = sc.model.train;
  SequenceLimits limits = sc.data.limits;
  int32_t eot = 0;
  StepExamples ex;
  check_on_every_rank(
      [&] {  // Note [Checks on every rank]
        limits.column_multiple = pair_column_multiple(c, limits);  // Note [Sequence-parallel steps]
        check_init_shape(sc.model, "reward.init");
        const std::unique_ptr<const io::Tokenizer> tokenizer_file = io::load_tokenizer(sc.data.tokenizer);
        const io::Tokenizer& tokenizer = *tokenizer_file;
        ex = pair_examples(sc, tokenizer, "reward data");
        eot = tokenizer.eot();
      },
      world);
  const StepLayout layout = step_layout(c, world, "reward");
  const int n = layout.ranks, rank = layout.rank;
  const parallel::CommunicatorPtr& comm = layout.world;
  std::unique_ptr<engine::Engine> engine = value_engine(sc.model, layout.grid);
  const int64_t first = resume_engine(options.resume, *engine, *comm, "the reward model");
  StepLog run_log(options.metrics_path, layout.leader, first, c.steps, c.log_interval);
  run_log.print("reward model: " + std::to_string(ex.train.size()) + " training pairs, " +
                std::to_string(ex.held_out.size()) + " held out; " + engine::model_shape(c).summary +
                (sc.model.init.empty() ? "" : ", from " + sc.model.init));

  // The figures of each batch: its loss, accuracy, then its B chosen and B rejected scores;
  // back-propagating the loss when `train` (then the batches are the step's micro-batches).
  const auto run_batches = [&](const std::vector<RewardBatch>& batches, bool train) {
    const auto figures_of = [](const RewardLoss& r) {
      std::vector<double> v = {r.loss.item(), r.accuracy};
      for (const Tensor& s : {r.chosen_scores, r.rejected_scores})
        for (const double x : s.to_vector<double>()) v.push_back(x);
      return v;
    };
    std::vector<std::vector<double>> figures;
    if (!engine->pipelined()) {
      for (const RewardBatch& b : batches) {
        const RewardLoss r = reward_batch_loss(engine->model(), b, engine->device());
        if (train) engine->backward(r.loss);
        figures.push_back(figures_of(r));
      }
      return figures;
    }
    // Note [RLHF pipeline stages]: the loss on the last stage, each micro-batch's target its index.
    figures.resize(batches.size());
    std::vector<Tensor> inputs;
    for (const RewardBatch& b : batches) inputs.push_back(cat({b.chosen, b.rejected}, 0));
    const engine::Engine::PipelineLoss loss = [&](const Tensor& values, const Tensor& target) {
      const size_t m = target_index(target);
      const RewardLoss r = reward_values_loss(values, batches[m]);
      figures[m] = figures_of(r);
      return r.loss;
    };
    if (train)
      engine->forward_backward(inputs, index_targets(batches.size()), loss);
    else
      engine->forward_only(inputs, index_targets(batches.size()), loss);
    return last_stage_rows(figures, 2 + 2 * batches.front().chosen.size(0), *engine->pp());
  };
  // Held-out accuracy: every rank runs the same number of forwards (ZeRO-3 gathers in each),
  // taking pairs rank, rank + n, ...; rows past the end repeat pair 0 and are not counted.
  const auto evaluate = [&]() -> double {
    const int64_t v = int64_t(ex.held_out.size());
    if (v == 0) return NAN;
    engine->model().eval();
    NoGradGuard no_grad;
    const std::vector<HeldOutRound> rounds = held_out_rounds(v, c.micro_batch_size, rank, n);
    std::vector<RewardBatch> batches;
    for (const HeldOutRound& round : rounds) batches.push_back(make_reward_batch(ex.held_out, round.pairs, limits, eot, eot));
    const std::vector<std::vector<double>> figures = run_batches(batches, false);
    const size_t B = size_t(c.micro_batch_size);
    double correct = 0;
    for (size_t k = 0; k < rounds.size(); ++k)
      for (size_t i = 0; i < size_t(rounds[k].counted); ++i) correct += figures[k][2 + i] > figures[k][2 + B + i];
    engine->model().train();
    return sum_over(layout.dp, {correct})[0] / double(v);
  };

  EpochOrder order(int64_t(ex.train.size()), c.seed);
  double accuracy = NAN;
  for (int64_t step = first; step < c.steps; ++step) {
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<RewardBatch> batches;
    for (int64_t m = 0; m < c.gradient_accumulation_steps; ++m)
      batches.push_back(make_reward_batch(ex.train, micro_batch_pairs(order, c, step, m, rank, n), limits, eot, eot));
    const size_t B = size_t(c.micro_batch_size);
    double loss = 0, acc = 0, chosen = 0, rejected = 0;
    for (const std::vector<double>& f : run_batches(batches, true)) {
      loss += f[0], acc += f[1];
      for (size_t i = 0; i < B; ++i) chosen += f[2 + i] / double(B), rejected += f[2 + B + i] / double(B);
    }
    const engine::StepResult s = engine->step();
    const double parts = double(c.gradient_accumulation_steps * n);
    const std::vector<double> sums = sum_over(layout.dp, {loss, acc, chosen, rejected});
    TRIAD_CHECK(std::isfinite(sums[0]), "[reward] the loss is " << sums[0] << " at step " << s.step
                                                                << "; lower the learning rate; nothing was saved");
    nlohmann::json metrics = {{"loss", sums[0] / parts},
                              {"accuracy", sums[1] / parts},
                              {"chosen_score", sums[2] / parts},
                              {"rejected_score", sums[3] / parts},
                              {"lr", s.lr},
                              {"grad_norm", s.grad_norm},
                              {"step_ms", std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count()}};
    std::vector<std::string> shown = {"loss", "accuracy", "chosen_score", "rejected_score"};
    if ((c.eval_interval > 0 && s.step % c.eval_interval == 0) || s.step == c.steps) {
      metrics["val_accuracy"] = accuracy = evaluate();
      shown.push_back("val_accuracy");
    }
    run_log.write(s.step, metrics, shown);
    maybe_checkpoint(*engine, *comm, s.step, run_log);
  }
  if (first == c.steps) accuracy = evaluate();
  save_output(*engine, *comm, "model", run_log);
  return accuracy;
}

}  // namespace triad::rlhf
