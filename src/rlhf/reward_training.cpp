#include "rlhf/reward_training.h"

#include <cmath>

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
  limits.column_multiple = column_multiple(c);  // Note [Sequence-parallel steps]
  int32_t eot = 0;
  StepExamples ex;
  check_on_every_rank(
      [&] {  // Note [Checks on every rank]
        check_model_split(c, "reward");
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

  // Held-out accuracy: every rank runs the same number of forwards (ZeRO-3 gathers in each),
  // taking pairs rank, rank + n, ...; rows past the end repeat pair 0 and are not counted.
  const auto evaluate = [&]() -> double {
    const int64_t v = int64_t(ex.held_out.size());
    if (v == 0) return NAN;
    engine->model().eval();
    NoGradGuard no_grad;
    double correct = 0;
    for (const HeldOutRound& round : held_out_rounds(v, c.micro_batch_size, rank, n)) {
      const RewardBatch b = make_reward_batch(ex.held_out, round.pairs, limits, eot, eot);
      const RewardLoss r = reward_batch_loss(engine->model(), b, engine->device());
      const std::vector<double> sc_c = r.chosen_scores.to_vector<double>(), sc_r = r.rejected_scores.to_vector<double>();
      for (int64_t i = 0; i < round.counted; ++i) correct += sc_c[size_t(i)] > sc_r[size_t(i)];
    }
    engine->model().train();
    return sum_over(layout.dp, {correct})[0] / double(v);
  };

  EpochOrder order(int64_t(ex.train.size()), c.seed);
  double accuracy = NAN;
  for (int64_t step = first; step < c.steps; ++step) {
    const auto t0 = std::chrono::steady_clock::now();
    double loss = 0, acc = 0, chosen = 0, rejected = 0;
    for (int64_t m = 0; m < c.gradient_accumulation_steps; ++m) {
      const RewardBatch b =
          make_reward_batch(ex.train, micro_batch_pairs(order, c, step, m, rank, n), limits, eot, eot);
      const RewardLoss r = reward_batch_loss(engine->model(), b, engine->device());
      engine->backward(r.loss);
      loss += r.loss.item(), acc += r.accuracy;
      chosen += ops::mean(r.chosen_scores).item(), rejected += ops::mean(r.rejected_scores).item();
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
