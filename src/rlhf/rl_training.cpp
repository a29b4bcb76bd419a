#include "rlhf/rl_training.h"

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <optional>

#include "autograd/functions.h"
#include "autograd/grad_mode.h"
#include "engine/hybrid_engine.h"
#include "config/model_factory.h"
#include "rlhf/actor_ema.h"
#include "rlhf/gae.h"
#include "rlhf/gathered_stages.h"
#include "rlhf/grpo.h"
#include "rlhf/host_rows.h"
#include "rlhf/kl_controller.h"
#include "rlhf/kl_reward.h"
#include "rlhf/models.h"
#include "rlhf/reward_scores.h"
#include "rlhf/rl_epoch.h"
#include "rlhf/step_examples.h"
#include "tensor/ops.h"

namespace triad::rlhf {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Note [RL in pipeline stages]: the columns every pipeline input has: the longest prompt and
// answer (and ptx row), a multiple of the columns a batch must be; Error naming the keys
// when that exceeds a trained model's seq_len.
int64_t pipeline_width(const StepConfig& sc, bool ptx) {
  const engine::TrainConfig& c = sc.model.train;
  const SequenceLimits& l = sc.data.limits;
  const int64_t m = column_multiple(c);
  const int64_t width =
      (std::max(l.max_prompt_seq_len + sc.rl.max_answer_seq_len, ptx ? l.max_seq_len : 0) + m - 1) / m * m;
  for (const engine::TrainConfig* t : {&c, sc.step == "ppo" ? &sc.critic.train : nullptr})
    TRIAD_CHECK(!t || width <= engine::model_shape(*t).seq_len,
                "[config] " << sc.step << " in pipeline stages: data.max_prompt_seq_len " << l.max_prompt_seq_len
                            << " + max_answer_seq_len " << sc.rl.max_answer_seq_len
                            << (ptx ? " (and data.max_seq_len " + std::to_string(l.max_seq_len) + " with ptx)" : "")
                            << (m > 1 ? ", rounded up to a multiple of model.tensor_parallel," : "") << " is " << width
                            << " columns, beyond a model's seq_len " << engine::model_shape(*t).seq_len
                            << " (every pipeline input has that many columns)");
  return width;
}

// gen's rows left-padded with `pad` to a multiple of `multiple` columns (Note
// [Sequence-parallel steps]): more pad columns before each prompt, the answers unmoved.
engine::BatchGeneration pad_columns(engine::BatchGeneration gen, int64_t multiple, int32_t pad) {
  const int64_t B = gen.tokens.size(0), extra = (multiple - gen.tokens.size(1) % multiple) % multiple;
  if (extra == 0) return gen;
  gen.tokens = cat({Tensor::full({B, extra}, double(pad), DType::i64, gen.tokens.device()), gen.tokens}, 1);
  for (int64_t& p : gen.pads) p += extra;
  gen.prompt_columns += extra;
  return gen;
}

// rl_state.json in the actor's checkpoint folder: the KL coefficient at each saved
// checkpoint, by its optimizer step.
std::string state_path(const engine::TrainConfig& actor) { return actor.checkpoint.dir + "/rl_state.json"; }

void save_kl_state(const engine::TrainConfig& actor, int64_t step, double kl_coef) {
  const std::string path = state_path(actor), tmp = path + ".tmp";
  nlohmann::json state = nlohmann::json::object();
  if (std::filesystem::exists(path)) state = engine::load_config_file(path);
  state[std::to_string(step)] = kl_coef;
  {
    std::ofstream out(tmp);
    out << state.dump() << "\n";
    out.flush();
    TRIAD_CHECK(out.good(), "cannot write '" << tmp << "'");
  }
  std::filesystem::rename(tmp, path);
}

double load_kl_state(const engine::TrainConfig& actor, int64_t step) {
  const std::string path = state_path(actor);
  TRIAD_CHECK(std::filesystem::exists(path), "'" << path << "' is missing: the adaptive KL coefficient of the step "
                                                 << step << " checkpoint cannot be restored");
  const nlohmann::json state = engine::load_config_file(path);
  TRIAD_CHECK(state.contains(std::to_string(step)), "'" << path << "' holds no KL coefficient for step " << step);
  return state[std::to_string(step)].get<double>();
}

}  // namespace

nlohmann::json train_rl(const StepConfig& sc, const RunOptions& options, parallel::CommunicatorPtr world) {
  const bool ppo = sc.step == "ppo";
  TRIAD_CHECK(ppo || sc.step == "grpo", "train_rl runs ppo or grpo, not " << sc.step);
  const RlOptions& o = sc.rl;
  const engine::TrainConfig& c = sc.model.train;
  const int64_t G = ppo ? 1 : o.group_size;
  int32_t eot = 0;
  StepExamples prompts, ptx;
  check_on_every_rank(
      [&] {  // Note [Checks on every rank]
        check_init_shape(sc.model, sc.step + ".actor.init");
        if (ppo) {
          check_init_shape(sc.critic, "ppo.critic.init");
          TRIAD_CHECK(sc.critic.train.micro_batch_size == c.micro_batch_size &&
                          sc.critic.train.gradient_accumulation_steps == c.gradient_accumulation_steps &&
                          sc.critic.train.steps == c.steps && sc.critic.train.tensor_parallel == c.tensor_parallel &&
                          sc.critic.train.sequence_parallel == c.sequence_parallel &&
                          sc.critic.train.pipeline.stages == c.pipeline.stages,
                      "[config] ppo: the actor and the critic must share train_batch_size, "
                      "train_micro_batch_size_per_gpu, steps, model.tensor_parallel, model.sequence_parallel and "
                      "pipeline.stages (they train on the same experience)");
        }
        TRIAD_CHECK(c.micro_batch_size % G == 0, "[config] grpo: train_micro_batch_size_per_gpu "
                                                     << c.micro_batch_size << " must be a multiple of grpo.group_size "
                                                     << G << " (a micro-batch holds whole groups)");
        const int64_t seq_len = engine::model_shape(c).seq_len;
        TRIAD_CHECK(sc.data.limits.max_prompt_seq_len + o.max_answer_seq_len <= seq_len,
                    "[config] data.max_prompt_seq_len " << sc.data.limits.max_prompt_seq_len << " + max_answer_seq_len "
                                                        << o.max_answer_seq_len << " exceeds the actor's seq_len "
                                                        << seq_len);
        if (c.pipeline.stages > 1) pipeline_width(sc, ppo && o.unsup_coef > 0);
        const std::unique_ptr<const io::Tokenizer> tokenizer_file = io::load_tokenizer(sc.data.tokenizer);
        const io::Tokenizer& tokenizer = *tokenizer_file;
        eot = tokenizer.eot();
        prompts = step_examples(sc.data.path, RlhfStep::rl, 2, sc.data.data_split, tokenizer, sc.data.limits, 0.0,
                                c.seed, sc.step + " prompts");
        if (ppo && o.unsup_coef > 0)
          ptx = step_examples(sc.data.path, RlhfStep::sft, 0, sc.data.data_split, tokenizer, sc.data.limits, 0.0,
                              c.seed, "ptx data");
      },
      world);
  const StepLayout layout = step_layout(c, world, sc.step);
  const int n = layout.ranks, rank = layout.rank;
  const parallel::CommunicatorPtr& comm = layout.world;
  std::unique_ptr<engine::Engine> actor = policy_engine(sc.model, layout.grid);
  // The critic's own zero_optimization or cluster sections may lay out other hpZ partitions
  // or nodes: then it trains on a grid of its own.
  const engine::TrainConfig& cc = sc.critic.train;
  const bool same_grid = cc.zero.hpz_partition_size == c.zero.hpz_partition_size &&
                         cc.emulated_ranks_per_node == c.emulated_ranks_per_node;
  std::unique_ptr<engine::Engine> critic =
      ppo ? value_engine(sc.critic, same_grid ? layout.grid : engine::process_grid(cc, comm)) : nullptr;
  const Device device = actor->device();
  // Note [RL in pipeline stages]: generation and the experience read the whole models,
  // gathered from the stages.
  const std::unique_ptr<GatheredStages> actor_stages =
      actor->pipelined() ? std::make_unique<GatheredStages>(*actor, whole_policy(c, actor->tp())) : nullptr;
  const std::unique_ptr<GatheredStages> critic_stages =
      critic && critic->pipelined() ? std::make_unique<GatheredStages>(*critic, whole_value_model(cc, critic->tp()))
                                    : nullptr;
  auto& actor_model = dynamic_cast<nn::LanguageModel&>(actor_stages ? actor_stages->model() : actor->model());
  nn::ValueModel* critic_model =
      critic ? &dynamic_cast<nn::ValueModel&>(critic_stages ? critic_stages->model() : critic->model()) : nullptr;
  const int64_t vocab = actor_model.vocab_size();
  // Note [Frozen models]: partitioned over dp at ZeRO-3, as the actor is.
  const FrozenPlacement placement{
      .tp = layout.tp, .sequence_parallel = c.sequence_parallel, .dp = layout.dp, .zero = c.zero};
  SequenceLimits limits = sc.data.limits, ptx_limits = sc.data.limits;
  limits.column_multiple = column_multiple(c);  // Note [Sequence-parallel steps]
  const int64_t width = actor->pipelined() ? pipeline_width(sc, !ptx.train.empty()) : 0;
  ptx_limits.column_multiple = actor->pipelined() ? width : limits.column_multiple;  // Note [RL in pipeline stages]
  const Frozen<nn::LanguageModel> reference = frozen_policy(sc.model.init, device, placement);
  const Frozen<nn::ValueModel> reward = frozen_value_model(o.reward_model, device, placement);
  TRIAD_CHECK(reward->base->vocab_size() == vocab, "the reward model '" << o.reward_model << "' has a vocabulary of "
                                                                       << reward->base->vocab_size()
                                                                       << " tokens, the actor " << vocab);
  const auto resume_spec = [&](const std::string& name) {
    return options.resume.empty() || options.resume == "auto" ? options.resume : options.resume + "/" + name;
  };
  // The engines count optimizer steps, ppo_epochs per step (Note [RLHF config]).
  const int64_t per_step = o.ppo_epochs, steps = c.steps / per_step;
  const int64_t resumed = resume_engine(resume_spec("actor"), *actor, *comm, "the actor");
  if (critic) {
    const int64_t critic_resumed = resume_engine(resume_spec("critic"), *critic, *comm, "the critic");
    TRIAD_CHECK(critic_resumed == resumed, "the actor's checkpoint is at optimizer step "
                                               << resumed << ", the critic's at " << critic_resumed
                                               << ": resume both from one save");
  }
  TRIAD_CHECK(resumed % per_step == 0, "the actor's checkpoint is at optimizer step "
                                           << resumed << ", inside a step of ppo_epochs " << per_step
                                           << " optimizer steps: was ppo_epochs changed?");
  const int64_t first = resumed / per_step;
  KlController kl_ctl = o.kl_target > 0 ? KlController::adaptive(o.kl_ctl, o.kl_target, double(o.kl_horizon))
                                        : KlController::fixed(o.kl_ctl);
  if (resumed > 0 && kl_ctl.is_adaptive())
    kl_ctl = KlController::adaptive(load_kl_state(c, resumed), o.kl_target, double(o.kl_horizon));
  std::unique_ptr<ActorEma> ema = o.enable_ema ? std::make_unique<ActorEma>(*actor, o.ema_beta) : nullptr;
  if (ema && resumed > 0) ema->load_checkpoint(resumed, *comm);

  std::vector<std::pair<std::string, zero::ResidentBytes>> models = {{"actor", actor->memory()}};
  if (ema) models.emplace_back("actor_ema", ema->memory());  // Note [Actor EMA]
  if (critic) models.emplace_back("critic", critic->memory());
  models.insert(models.end(), {{"reference", reference.memory()}, {"reward", reward.memory()}});
  const nlohmann::json mem = model_memory(models, comm);

  StepLog log(options.metrics_path, layout.leader, first, steps, c.log_interval);
  log.print(sc.step + ": " + std::to_string(prompts.train.size()) + " prompts; actor " + engine::model_shape(c).summary +
            " from " + sc.model.init + (ppo ? ", critic from " + sc.critic.init : "") + ", reward model " +
            o.reward_model);
  log.print(memory_line(mem));

  const int64_t B = c.train_batch_size, R = c.micro_batch_size * c.gradient_accumulation_steps;
  const int64_t micro = c.micro_batch_size, prompts_per_step = B / G;
  EpochOrder order(int64_t(prompts.train.size()), c.seed);
  EpochOrder ptx_order(std::max<int64_t>(1, int64_t(ptx.train.size())), c.seed + 1);
  nlohmann::json last;
  for (int64_t step = first; step < steps; ++step) {
    // Generation: the rank's R rows in one call.
    const auto g0 = Clock::now();
    std::vector<int64_t> examples;  // of the rank's rows
    std::vector<std::vector<int32_t>> rows;
    for (int64_t i = 0; i < R; ++i) {
      examples.push_back(order.at(step * prompts_per_step + (rank * R + i) / G));
      rows.push_back(prompts.train[size_t(examples.back())].prompt);
    }
    const engine::SamplingOptions sampling{.temperature = o.temperature,
                                           .top_k = o.top_k,
                                           .top_p = o.top_p,
                                           .max_new_tokens = o.max_answer_seq_len,
                                           .seed = c.seed,
                                           .stop_token = eot};
    // Note [RL in pipeline stages]: the whole models, gathered from the stages, until the
    // experience is made.
    std::optional<GatheredScope> whole_actor(std::in_place, actor_stages.get()), whole_critic;
    const engine::BatchGeneration gen =
        pad_columns(actor_stages ? engine::generate_batch(actor_model, rows, sampling, eot, step * B + rank * R)
                                 : engine::generate_batch(*actor, rows, sampling, eot, step * B + rank * R),
                    column_multiple(c), eot);
    const double gen_s = seconds_since(g0);

    // Experience, per micro-batch (Note [RL step]).
    const auto e0 = Clock::now();
    whole_critic.emplace(critic_stages.get());
    const int64_t P = gen.prompt_columns, N = gen.answer_mask.size(1), T = P + N;
    std::vector<Experience> experience;
    std::vector<Tensor> sample_parts, chosen_parts;  // each micro-batch's scores, where they were computed
    std::vector<Tensor> answer_masks;                 // each micro-batch's, on the host
    double answer_tokens = 0;
    DeviceSum kl_sum, entropy_sum;
    actor->model().eval();
    if (critic) critic->model().eval();
    for (int64_t m = 0; m < c.gradient_accumulation_steps; ++m) {
      NoGradGuard no_grad;
      Experience e;
      e.seq = ops::to(ops::contiguous(ops::narrow(gen.tokens, 0, m * micro, micro)), device);
      e.pads.assign(gen.pads.begin() + m * micro, gen.pads.begin() + (m + 1) * micro);
      e.padding = nn::left_padding(e.pads, T, device);
      const Tensor& answer_mask =
          answer_masks.emplace_back(ops::contiguous(ops::narrow(gen.answer_mask, 0, m * micro, micro)));
      e.tokens = ops::sum(answer_mask).item();  // on the host, where generation leaves the mask
      e.mask = ops::to(answer_mask, device);
      const TokenLogProbs own =
          answer_log_probs(full_vocabulary(actor_model.forward(e.seq, e.padding), layout.tp), e.seq, P, N, vocab);
      e.old_logp = ops::mul(own.logp, e.mask);
      const Tensor ref_logits = full_vocabulary(reference->forward(e.seq, e.padding), layout.tp);
      e.ref_logp = ops::mul(answer_log_probs(ref_logits, e.seq, P, N, vocab).logp, e.mask);
      // The reward model's value at each answer's <|endoftext|> (Note [Score position]).
      sample_parts.push_back(sample_scores(reward->forward(e.seq, e.padding), answer_mask));
      chosen_parts.push_back(chosen_scores(*reward, prompts.train,
                                           {examples.begin() + m * micro, examples.begin() + (m + 1) * micro}, limits,
                                           eot, device));
      answer_tokens += e.tokens;
      kl_sum.add(ops::sum(ops::sub(e.old_logp, e.ref_logp)));
      entropy_sum.add(ops::sum(ops::mul(own.entropy, e.mask)));
      if (ppo) e.old_values = ops::mul(narrow(critic_model->forward(e.seq, e.padding), 1, P - 1, N), e.mask);
      experience.push_back(std::move(e));
    }
    // What the host needs of the experience, read in one wait once every micro-batch's
    // forwards are queued (Note [RL step]): the rank's scores, its chosen answers' and (PPO)
    // each micro-batch's log-probs and values.
    const size_t M = experience.size();
    std::vector<Tensor> needed = sample_parts;
    needed.insert(needed.end(), chosen_parts.begin(), chosen_parts.end());
    if (ppo)
      for (const Experience& e : experience) needed.insert(needed.end(), {e.old_logp, e.ref_logp, e.old_values});
    const std::vector<Tensor> host = host_copies(needed);
    double score_sum = 0, score_sq = 0, chosen_sum = 0;
    for (size_t m = 0; m < M; ++m) {
      for (const double s : host_values(host[m])) score_sum += s, score_sq += s * s;
      for (const double s : host_values(host[M + m])) chosen_sum += s;
    }
    if (ppo) {
      for (size_t m = 0; m < M; ++m) {
        const Tensor* own = &host[2 * M + 3 * m];  // old_logp, ref_logp, old_values
        const Tensor rewards = kl_rewards(own[0], own[1], ops::to(host[m], DType::f32), answer_masks[m],
                                          kl_ctl.value(), o.clip_reward_value);
        const AdvantagesReturns ar = gae(own[2], rewards, answer_masks[m], o.gamma, o.lam);
        experience[m].advantages = ops::to(ar.advantages, device), experience[m].returns = ops::to(ar.returns, device);
      }
    } else {  // GRPO's advantages within each group (a micro-batch holds whole groups)
      std::vector<Tensor> scores;
      for (size_t m = 0; m < M; ++m) scores.push_back(ops::to(host[m], DType::f32));
      const Tensor advantages = ops::to(grpo_advantages(cat(scores, 0), G), device);
      for (size_t m = 0; m < M; ++m) experience[m].advantages = ops::narrow(advantages, 0, int64_t(m) * micro, micro);
    }
    whole_actor.reset(), whole_critic.reset();
    actor->model().train();
    if (critic) critic->model().train();
    const double experience_s = seconds_since(e0);

    // Training: ppo_epochs optimizer steps over the experience.
    const auto t0 = Clock::now();
    EpochFigures figures;
    engine::StepResult actor_step, critic_step;
    for (int64_t epoch = 0; epoch < o.ppo_epochs; ++epoch) {
      std::vector<SftBatch> ptx_batches;  // ptx: a micro-batch of the SFT split per micro-batch
      for (int64_t m = 0; m < c.gradient_accumulation_steps && !ptx.train.empty(); ++m) {
        std::vector<int64_t> select;
        for (int64_t i = 0; i < micro; ++i)
          select.push_back(ptx_order.at(((step * o.ppo_epochs + epoch) * n + rank) * R + m * micro + i));
        ptx_batches.push_back(make_sft_batch(ptx.train, select, ptx_limits, eot, eot));
      }
      train_epoch(*actor, critic.get(),
                  {.experience = experience,
                   .ptx = ptx_batches,
                   .ppo = ppo,
                   .options = o,
                   .vocab = vocab,
                   .tp = layout.tp,
                   .width = width,
                   .pad_token = eot},
                  figures);
      actor_step = actor->step();
      if (ema) ema->update(*comm);
      if (critic) critic_step = critic->step();
    }
    const double train_s = seconds_since(t0);

    const std::vector<double> read = DeviceSum::read(
        {&kl_sum, &entropy_sum, &figures.actor_loss, &figures.clip_fraction, &figures.approx_kl,
         &figures.critic_loss, &figures.value_clip, &figures.ptx_loss});  // in one wait
    const std::vector<double> sums = sum_over(layout.dp, {score_sum, score_sq, read[0], read[1], answer_tokens, read[2],
                                                          read[3], read[4], read[5], read[6], read[7], chosen_sum});
    const double parts = double(c.gradient_accumulation_steps * o.ppo_epochs * n), rows_total = double(B);
    const double mean = sums[0] / rows_total;
    TRIAD_CHECK(std::isfinite(sums[5]) && std::isfinite(sums[8]),
                "[" << sc.step << "] a loss is not finite at step " << step + 1
                    << "; lower the learning rates; nothing was saved");
    nlohmann::json metrics = {
        {"reward", mean},
        {"reward_std", std::sqrt(std::max(0.0, sums[1] / rows_total - mean * mean))},
        {"chosen_reward", sums[11] / rows_total},
        {"kl", sums[2] / rows_total},
        {"kl_coef", ppo ? kl_ctl.value() : o.beta},
        {"entropy", sums[3] / sums[4]},
        {"response_length", sums[4] / rows_total},
        {"actor_loss", sums[5] / parts},
        {"clip_fraction", sums[6] / parts},
        {ppo ? "approx_kl" : "k3_kl", sums[7] / parts},
        {"actor_lr", actor_step.lr},
        {"actor_grad_norm", actor_step.grad_norm},
        {"generation_tokens_per_s", sums[4] / gen_s},
        {"training_tokens_per_s", rows_total * double(T) * double(o.ppo_epochs) / train_s},
        {"generation_s", gen_s},
        {"experience_s", experience_s},
        {"training_s", train_s},
        {"generation_fraction", gen_s / (gen_s + experience_s + train_s)},
        {"mem", mem}};
    std::vector<std::string> shown = {"reward",  "reward_std",      "chosen_reward",
                                      "kl",      "entropy",         "response_length", "clip_fraction"};
    if (ppo) {
      metrics["value_loss"] = sums[8] / parts;
      metrics["value_clip_fraction"] = sums[9] / parts;
      metrics["critic_grad_norm"] = critic_step.grad_norm;
      shown.push_back("value_loss");
    }
    if (!ptx.train.empty()) metrics["ptx_loss"] = sums[10] / parts;
    shown.insert(shown.end(), {"generation_tokens_per_s", "training_tokens_per_s", "generation_fraction"});
    if (kl_ctl.is_adaptive()) kl_ctl.update(sums[2] / rows_total, B);
    log.write(step + 1, metrics, shown);
    last = metrics;
    const int64_t optimizer_steps = (step + 1) * per_step;
    if (maybe_checkpoint(*actor, *comm, optimizer_steps, log)) {
      if (layout.leader && kl_ctl.is_adaptive()) save_kl_state(c, optimizer_steps, kl_ctl.value());
      if (ema) ema->save_checkpoint(optimizer_steps, *comm);
    }
    if (critic) maybe_checkpoint(*critic, *comm, optimizer_steps, log);
  }
  save_output(*actor, *comm, "actor", log);
  if (critic) save_output(*critic, *comm, "critic", log);
  if (ema && !c.output_dir.empty()) {
    ema->save(c.output_dir + "/actor_ema.h5", *comm);
    log.print("saved " + c.output_dir + "/actor_ema.h5");
  }
  return last;
}

}  // namespace triad::rlhf
