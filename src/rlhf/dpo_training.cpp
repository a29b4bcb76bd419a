#include "rlhf/dpo_training.h"

#include <cmath>

#include "autograd/functions.h"
#include "autograd/grad_mode.h"
#include "config/model_factory.h"
#include "rlhf/dpo.h"
#include "rlhf/log_probs.h"
#include "rlhf/models.h"
#include "rlhf/pair_rows.h"
#include "tensor/ops.h"

namespace triad::rlhf {

namespace {

// A pair batch's chosen and rejected rows as one batch on `device`, and the mask of their
// answer tokens' log-probs.
struct PairIds {
  Tensor ids;   // (2B, L): the chosen rows, then the rejected
  Tensor mask;  // (2B, L - 1)
};
PairIds pair_ids(const RewardBatch& b, Device device) {
  const int64_t L = b.chosen.size(1);
  std::vector<int64_t> prompts = b.prompt_lengths, lengths = b.chosen_lengths;
  prompts.insert(prompts.end(), b.prompt_lengths.begin(), b.prompt_lengths.end());
  lengths.insert(lengths.end(), b.rejected_lengths.begin(), b.rejected_lengths.end());
  return {ops::to(cat({b.chosen, b.rejected}, 0), device), ops::to(answer_mask(prompts, lengths, L), device)};
}

// The summed answer log-probs of the chosen and rejected rows from their logits over the
// whole vocabulary of `vocab` tokens.
std::pair<Tensor, Tensor> pair_log_probs(const Tensor& logits, const PairIds& rows, int64_t vocab) {
  const int64_t B = rows.ids.size(0) / 2;
  const Tensor seq = sequence_log_probs(next_token_log_probs(logits, rows.ids, rows.mask, vocab).logp, rows.mask);
  return {narrow(seq, 0, 0, B), narrow(seq, 0, B, B)};
}

// One micro-batch's figures: the loss, accuracy and margin, then the B chosen and B
// rejected rewards (what every rank of a pipeline receives from its last stage).
std::vector<double> dpo_figures(const DpoLoss& d) {
  std::vector<double> v = {d.loss.item(), d.accuracy, d.margin};
  for (const Tensor& r : {d.chosen_rewards, d.rejected_rewards})
    for (const double x : r.to_vector<double>()) v.push_back(x);
  return v;
}

}  // namespace

double train_dpo(const StepConfig& sc, const RunOptions& options, parallel::CommunicatorPtr world) {
  const engine::TrainConfig& c = sc.model.train;
  SequenceLimits limits = sc.data.limits;
  int32_t eot = 0;
  StepExamples ex;
  check_on_every_rank(
      [&] {  // Note [Checks on every rank]
        limits.column_multiple = pair_column_multiple(c, limits);  // Note [Sequence-parallel steps]
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
  const int64_t vocab = engine::model_shape(c).vocab_size;
  // Note [RLHF pipeline stages]: the reference runs where the loss is computed, on the last
  // stage (placed there as Note [Frozen models] says, over that stage's data-parallel ranks).
  const bool loss_stage = engine->pp()->rank() == engine->pp()->size() - 1;
  const Frozen<nn::LanguageModel> reference =
      loss_stage ? frozen_policy(sc.model.init, engine->device(),
                                 {.tp = layout.tp, .sequence_parallel = c.sequence_parallel, .dp = layout.dp,
                                  .zero = c.zero})
                 : Frozen<nn::LanguageModel>{};
  const int64_t first = resume_engine(options.resume, *engine, *comm, "the DPO policy");
  const nlohmann::json mem = model_memory(
      {{"policy", engine->memory()}, {"reference", loss_stage ? reference.memory() : zero::ResidentBytes{}}}, comm);
  StepLog log(options.metrics_path, layout.leader, first, c.steps, c.log_interval);
  log.print("DPO: " + std::to_string(ex.train.size()) + " training pairs, " + std::to_string(ex.held_out.size()) +
            " held out; beta " + std::to_string(sc.dpo.beta) + "; policy and reference from " + sc.model.init);
  log.print(memory_line(mem));

  // The figures (dpo_figures) of each batch, back-propagating its loss when `train` (then
  // the batches are the step's micro-batches).
  const auto run_batches = [&](const std::vector<RewardBatch>& batches, bool train) {
    std::vector<PairIds> rows;
    for (const RewardBatch& b : batches) rows.push_back(pair_ids(b, engine->device()));
    std::vector<std::pair<Tensor, Tensor>> ref;
    if (loss_stage) {
      NoGradGuard no_grad;
      for (const PairIds& r : rows) ref.push_back(pair_log_probs(full_vocabulary((*reference)(r.ids), layout.tp), r, vocab));
    }
    std::vector<std::vector<double>> figures(batches.size());
    const auto loss_of = [&](const Tensor& logits, size_t m) {
      const auto [pc, pr] = pair_log_probs(full_vocabulary(logits, layout.tp), rows[m], vocab);
      const DpoLoss d = dpo_loss(pc, pr, ref[m].first, ref[m].second, sc.dpo.beta);
      figures[m] = dpo_figures(d);
      return d.loss;
    };
    if (!engine->pipelined()) {
      for (size_t m = 0; m < rows.size(); ++m) {
        const Tensor loss = loss_of(engine->model()(rows[m].ids), m);
        if (train) engine->backward(loss);
      }
      return figures;
    }
    std::vector<Tensor> inputs;
    for (const PairIds& r : rows) inputs.push_back(r.ids);
    const engine::Engine::PipelineLoss loss = [&](const Tensor& logits, const Tensor& target) {
      return loss_of(logits, target_index(target));
    };
    if (train)
      engine->forward_backward(inputs, index_targets(rows.size()), loss);
    else
      engine->forward_only(inputs, index_targets(rows.size()), loss);
    return last_stage_rows(figures, 3 + 2 * batches.front().chosen.size(0), *engine->pp());
  };
  // Held-out margin and accuracy: every rank runs the same number of forwards (ZeRO-3
  // gathers in each); rows past the end repeat pair 0 and are not counted.
  const auto evaluate = [&]() -> std::pair<double, double> {
    const int64_t v = int64_t(ex.held_out.size());
    if (v == 0) return {NAN, NAN};
    engine->model().eval();
    NoGradGuard no_grad;
    double margin = 0, correct = 0;
    const std::vector<HeldOutRound> rounds = held_out_rounds(v, c.micro_batch_size, rank, n);
    std::vector<RewardBatch> batches;
    for (const HeldOutRound& round : rounds) batches.push_back(make_reward_batch(ex.held_out, round.pairs, limits, eot, eot));
    const std::vector<std::vector<double>> figures = run_batches(batches, false);
    for (size_t k = 0; k < rounds.size(); ++k) {
      const size_t B = size_t(c.micro_batch_size);
      for (size_t i = 0; i < size_t(rounds[k].counted); ++i) {
        const double cr = figures[k][3 + i], rr = figures[k][3 + B + i];
        margin += cr - rr;
        correct += cr > rr;
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
    std::vector<RewardBatch> batches;
    for (int64_t m = 0; m < c.gradient_accumulation_steps; ++m)
      batches.push_back(make_reward_batch(ex.train, micro_batch_pairs(order, c, step, m, rank, n), limits, eot, eot));
    double loss = 0, accuracy = 0, margin = 0;
    for (const std::vector<double>& f : run_batches(batches, true)) loss += f[0], accuracy += f[1], margin += f[2];
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
