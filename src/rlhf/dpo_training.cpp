#include "rlhf/dpo_training.h"

#include <cmath>
#include <functional>

#include "autograd/functions.h"
#include "autograd/grad_mode.h"
#include "rlhf/dpo.h"
#include "rlhf/log_probs.h"
#include "rlhf/models.h"
#include "rlhf/pair_rows.h"
#include "tensor/ops.h"

namespace triad::rlhf {

namespace {

// The summed answer log-probs of a pair batch's chosen and rejected rows, run as one batch
// through `logits_of` (ids -> logits over the whole vocabulary of `vocab` tokens).
std::pair<Tensor, Tensor> pair_log_probs(const std::function<Tensor(const Tensor&)>& logits_of, int64_t vocab,
                                         const RewardBatch& b, Device device) {
  const int64_t B = b.chosen.size(0), L = b.chosen.size(1);
  std::vector<int64_t> prompts = b.prompt_lengths, lengths = b.chosen_lengths;
  prompts.insert(prompts.end(), b.prompt_lengths.begin(), b.prompt_lengths.end());
  lengths.insert(lengths.end(), b.rejected_lengths.begin(), b.rejected_lengths.end());
  const Tensor ids = ops::to(cat({b.chosen, b.rejected}, 0), device);
  const Tensor mask = ops::to(answer_mask(prompts, lengths, L), device);
  const Tensor logp = next_token_log_probs(logits_of(ids), ids, mask, vocab).logp;
  const Tensor seq = sequence_log_probs(logp, mask);
  return {narrow(seq, 0, 0, B), narrow(seq, 0, B, B)};
}

}  // namespace

double train_dpo(const StepConfig& sc, const RunOptions& options, parallel::CommunicatorPtr world) {
  const engine::TrainConfig& c = sc.model.train;
  SequenceLimits limits = sc.data.limits;
  limits.column_multiple = column_multiple(c);  // Note [Sequence-parallel steps]
  int32_t eot = 0;
  StepExamples ex;
  check_on_every_rank(
      [&] {  // Note [Checks on every rank]
        check_model_split(c, "dpo");
        check_init_shape(sc.model, "dpo.init");
        const std::unique_ptr<const io::Tokenizer> tokenizer_file = io::load_tokenizer(sc.data.tokenizer);
        const io::Tokenizer& tokenizer = *tokenizer_file;
        ex = pair_examples(sc, tokenizer, "DPO data");
        eot = tokenizer.eot();
      },
      world);
  const StepLayout layout = step_layout(c, world, "dpo");
  const int n = layout.ranks, rank = layout.rank;
  const parallel::CommunicatorPtr& comm = layout.world;
  std::unique_ptr<engine::Engine> engine = policy_engine(sc.model, layout.grid);
  auto& policy = dynamic_cast<nn::LanguageModel&>(engine->model());
  const auto policy_logits = [&](const Tensor& ids) { return full_vocabulary(engine->model()(ids), layout.tp); };
  const Frozen<nn::LanguageModel> reference =  // Note [Frozen models]
      frozen_policy(sc.model.init, engine->device(),
                    {.tp = layout.tp, .sequence_parallel = c.sequence_parallel, .dp = layout.dp, .zero = c.zero});
  const int64_t first = resume_engine(options.resume, *engine, *comm, "the DPO policy");
  const nlohmann::json mem = model_memory({{"policy", engine->memory()}, {"reference", reference.memory()}}, comm);
  StepLog log(options.metrics_path, layout.leader, first, c.steps, c.log_interval);
  log.print("DPO: " + std::to_string(ex.train.size()) + " training pairs, " + std::to_string(ex.held_out.size()) +
            " held out; beta " + std::to_string(sc.dpo.beta) + "; policy and reference from " + sc.model.init);
  log.print(memory_line(mem));

  const auto reference_log_probs = [&](const RewardBatch& b) {
    NoGradGuard no_grad;
    return pair_log_probs([&](const Tensor& ids) { return full_vocabulary((*reference)(ids), layout.tp); },
                          reference->vocab_size(), b, engine->device());
  };
  // Held-out margin and accuracy: every rank runs the same number of forwards (ZeRO-3
  // gathers in each); rows past the end repeat pair 0 and are not counted.
  const auto evaluate = [&]() -> std::pair<double, double> {
    const int64_t v = int64_t(ex.held_out.size());
    if (v == 0) return {NAN, NAN};
    engine->model().eval();
    NoGradGuard no_grad;
    double margin = 0, correct = 0;
    for (const HeldOutRound& round : held_out_rounds(v, c.micro_batch_size, rank, n)) {
      const RewardBatch b = make_reward_batch(ex.held_out, round.pairs, limits, eot, eot);
      const auto [pc, pr] = pair_log_probs(policy_logits, policy.vocab_size(), b, engine->device());
      const auto [rc, rr] = reference_log_probs(b);
      const DpoLoss d = dpo_loss(pc, pr, rc, rr, sc.dpo.beta);
      const std::vector<double> cr = d.chosen_rewards.to_vector<double>(), rr_ = d.rejected_rewards.to_vector<double>();
      for (int64_t i = 0; i < round.counted; ++i) {
        margin += cr[size_t(i)] - rr_[size_t(i)];
        correct += cr[size_t(i)] > rr_[size_t(i)];
      }
    }
    engine->model().train();
    const std::vector<double> sums = sum_over(layout.dp, {margin, correct});
    return {sums[0] / double(v), sums[1] / double(v)};
  };

  EpochOrder order(int64_t(ex.train.size()), c.seed);
  double held_margin = NAN;
  for (int64_t step = first; step < c.steps; ++step) {
    const auto t0 = std::chrono::steady_clock::now();
    double loss = 0, accuracy = 0, margin = 0;
    for (int64_t m = 0; m < c.gradient_accumulation_steps; ++m) {
      const RewardBatch b =
          make_reward_batch(ex.train, micro_batch_pairs(order, c, step, m, rank, n), limits, eot, eot);
      const auto [rc, rr] = reference_log_probs(b);
      const auto [pc, pr] = pair_log_probs(policy_logits, policy.vocab_size(), b, engine->device());
      const DpoLoss d = dpo_loss(pc, pr, rc, rr, sc.dpo.beta);
      engine->backward(d.loss);
      loss += d.loss.item(), accuracy += d.accuracy, margin += d.margin;
    }
    const engine::StepResult s = engine->step();
    const double parts = double(c.gradient_accumulation_steps * n);
    const std::vector<double> sums = sum_over(layout.dp, {loss, accuracy, margin});
    TRIAD_CHECK(std::isfinite(sums[0]), "[dpo] the loss is " << sums[0] << " at step " << s.step
                                                             << "; lower the learning rate; nothing was saved");
    nlohmann::json metrics = {
        {"loss", sums[0] / parts},
        {"accuracy", sums[1] / parts},
        {"margin", sums[2] / parts},
        {"lr", s.lr},
        {"grad_norm", s.grad_norm},
        {"step_ms", std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count()},
        {"mem", mem}};
    std::vector<std::string> shown = {"loss", "accuracy", "margin"};
    if ((c.eval_interval > 0 && s.step % c.eval_interval == 0) || s.step == c.steps) {
      const auto [mv, av] = evaluate();
      metrics["val_margin"] = held_margin = mv;
      metrics["val_accuracy"] = av;
      shown.insert(shown.end(), {"val_margin", "val_accuracy"});
    }
    log.write(s.step, metrics, shown);
    maybe_checkpoint(*engine, *comm, s.step, log);
  }
  if (first == c.steps) held_margin = evaluate().first;
  save_output(*engine, *comm, "model", log);
  return held_margin;
}

}  // namespace triad::rlhf
