#include "rlhf/rl_epoch.h"

#include "autograd/functions.h"
#include "config/model_factory.h"
#include "nn/value_model.h"
#include "parallel/tensor_parallel_layers.h"
#include "rlhf/grpo.h"
#include "rlhf/host_rows.h"
#include "rlhf/ppo_losses.h"
#include "rlhf/step_run.h"
#include "tensor/ops.h"

namespace triad::rlhf {

void DeviceSum::add(const Tensor& x) {
  TRIAD_ASSERT(x.numel() == 1);
  const Tensor v = ops::reshape(detach(x), {});
  if (device_.defined() && (device_.device() != v.device() || device_.dtype() != v.dtype()))
    host_ += device_.item(), device_ = Tensor();
  device_ = device_.defined() ? ops::add(device_, v) : v;
}

void DeviceSum::add(double x) { host_ += x; }

double DeviceSum::read() const { return read({this})[0]; }

std::vector<double> DeviceSum::read(const std::vector<const DeviceSum*>& sums) {
  std::vector<Tensor> parts;
  for (const DeviceSum* s : sums)
    if (s->device_.defined()) parts.push_back(s->device_);
  const std::vector<double> device = host_values(parts);
  std::vector<double> out;
  size_t i = 0;
  for (const DeviceSum* s : sums) out.push_back(s->host_ + (s->device_.defined() ? device[i++] : 0.0));
  return out;
}

namespace {

// The actor's loss on micro-batch e from its log-probs (R, N) of the answer tokens; its
// figures added to f.
Tensor actor_loss(const Tensor& logp, const Experience& e, const EpochData& d, EpochFigures& f) {
  const RlOptions& o = d.options;
  if (d.ppo) {
    const ActorLoss a = ppo_actor_loss(logp, e.old_logp, e.advantages, e.mask, o.cliprange, e.tokens);
    f.actor_loss.add(a.loss), f.clip_fraction.add(a.clip_fraction), f.approx_kl.add(a.approx_kl);
    return a.loss;
  }
  const GrpoLoss a = grpo_loss(logp, e.old_logp, e.ref_logp, e.advantages, e.mask, o.beta, o.cliprange, e.tokens);
  f.actor_loss.add(a.loss), f.clip_fraction.add(a.clip_fraction), f.approx_kl.add(a.kl);
  return a.loss;
}

// The critic's loss on micro-batch e from its values (R, N) at the positions predicting the
// answer tokens; its figures added to f.
Tensor critic_loss(const Tensor& values, const Experience& e, const EpochData& d, EpochFigures& f) {
  const CriticLoss v = ppo_critic_loss(values, e.old_values, e.returns, e.mask, d.options.cliprange_value, e.tokens);
  f.critic_loss.add(v.loss), f.value_clip.add(v.clip_fraction);
  return v.loss;
}

int64_t prompt_columns(const Experience& e) { return e.seq.size(1) - e.mask.size(1); }

void whole_epoch(engine::Engine& actor, engine::Engine* critic, const EpochData& d, EpochFigures& f) {
  auto& actor_model = dynamic_cast<nn::LanguageModel&>(actor.model());
  nn::ValueModel* critic_model = critic ? &dynamic_cast<nn::ValueModel&>(critic->model()) : nullptr;
  for (size_t m = 0; m < d.experience.size(); ++m) {
    const Experience& e = d.experience[m];
    const int64_t P = prompt_columns(e), N = e.mask.size(1);
    const Tensor logits = full_vocabulary(actor_model.forward(e.seq, e.padding), d.tp);
    actor.backward(actor_loss(answer_log_probs(logits, e.seq, P, N, d.vocab).logp, e, d, f));
    if (!d.ptx.empty()) {  // ptx: the SFT loss on the SFT split, weighted
      const Tensor loss = actor.forward(d.ptx[m].inputs, d.ptx[m].targets);
      f.ptx_loss.add(loss);
      actor.backward(mul(loss, d.options.unsup_coef));
    }
    if (critic) critic->backward(critic_loss(narrow(critic_model->forward(e.seq, e.padding), 1, P - 1, N), e, d, f));
  }
}

// Note [RL in pipeline stages]: e's rows right-padded to `width` columns with `pad`, where
// e.seq is (the host reads nothing: the pads are known there).
Tensor right_padded(const Experience& e, int64_t width, int32_t pad) {
  const int64_t R = e.seq.size(0), T = e.seq.size(1);
  TRIAD_ASSERT_MSG(T <= width, "right_padded: rows of " << T << " columns, the pipeline's width is " << width);
  std::vector<Tensor> rows;
  for (int64_t b = 0; b < R; ++b) {
    const int64_t first = e.pads[size_t(b)], tokens = T - first;
    const Tensor row = narrow(narrow(e.seq, 0, b, 1), 1, first, tokens);
    rows.push_back(tokens == width
                       ? row
                       : cat({row, Tensor::full({1, width - tokens}, pad, e.seq.dtype(), e.seq.device())}, 1));
  }
  return cat(rows, 0);
}

// The columns (R, N) of x (R, >= width - 1) at each right-padded row's positions predicting
// its answer tokens: from P - 1 - pads[b] on (those of columns P - 1 on of its left-padded row).
Tensor answer_columns(const Tensor& x, const Experience& e) {
  const int64_t R = e.seq.size(0), P = prompt_columns(e), N = e.mask.size(1);
  std::vector<Tensor> rows;
  for (int64_t b = 0; b < R; ++b) rows.push_back(narrow(narrow(x, 0, b, 1), 1, P - 1 - e.pads[size_t(b)], N));
  return cat(rows, 0);
}

void pipelined_epoch(engine::Engine& actor, engine::Engine* critic, const EpochData& d, EpochFigures& sum) {
  const size_t M = d.experience.size();
  const std::vector<Tensor> targets = index_targets(M);
  std::vector<Tensor> rows, inputs;
  for (size_t m = 0; m < M; ++m) {
    rows.push_back(right_padded(d.experience[m], d.width, d.pad_token));
    inputs.push_back(d.ptx.empty() ? rows.back() : cat({rows.back(), d.ptx[m].inputs}, 0));
  }
  const engine::TrainConfig& c = actor.config();
  const auto lm_loss = engine::model_layers(c, parallel::layer_parallelism(actor.tp(), c.sequence_parallel)).loss;
  std::vector<EpochFigures> figures(M);
  actor.forward_backward(inputs, targets, [&](const Tensor& logits, const Tensor& target) {
    const size_t m = target_index(target);
    const Experience& e = d.experience[m];
    const int64_t R = e.seq.size(0);
    const Tensor own = narrow(logits, 0, 0, R);
    const Tensor logp = next_token_log_probs(full_vocabulary(own, d.tp), rows[m], Tensor(), d.vocab).logp;
    Tensor loss = actor_loss(answer_columns(logp, e), e, d, figures[m]);
    if (!d.ptx.empty()) {
      const Tensor ptx = lm_loss(narrow(logits, 0, R, logits.size(0) - R), ops::to(d.ptx[m].targets, logits.device()));
      figures[m].ptx_loss.add(ptx);
      loss = add(loss, mul(ptx, d.options.unsup_coef));
    }
    return loss;
  });
  if (critic)
    critic->forward_backward(rows, targets, [&](const Tensor& values, const Tensor& target) {
      const size_t m = target_index(target);
      return critic_loss(answer_columns(values, d.experience[m]), d.experience[m], d, figures[m]);
    });
  // The figures, from the last stage (the actor's and the critic's pipelines are the same
  // ranks'), read after the schedules in one wait, the epoch's only one (none elsewhere: no
  // figures there).
  std::vector<const DeviceSum*> each;
  for (const EpochFigures& f : figures)
    for (const DeviceSum* s : f.all()) each.push_back(s);
  const std::vector<double> read = DeviceSum::read(each);
  std::vector<std::vector<double>> last;
  for (size_t m = 0; m < M; ++m) last.emplace_back(read.begin() + 6 * m, read.begin() + 6 * (m + 1));
  for (const std::vector<double>& v : last_stage_rows(last, 6, *actor.pp())) {
    sum.actor_loss.add(v[0]), sum.clip_fraction.add(v[1]), sum.approx_kl.add(v[2]), sum.ptx_loss.add(v[3]);
    sum.critic_loss.add(v[4]), sum.value_clip.add(v[5]);
  }
}

}  // namespace

TokenLogProbs answer_log_probs(const Tensor& logits, const Tensor& seq, int64_t P, int64_t N, int64_t vocab) {
  const TokenLogProbs t = next_token_log_probs(logits, seq, Tensor(), vocab);
  return {narrow(t.logp, 1, P - 1, N), narrow(t.entropy, 1, P - 1, N)};
}

void train_epoch(engine::Engine& actor, engine::Engine* critic, const EpochData& d, EpochFigures& figures) {
  if (actor.pipelined())
    pipelined_epoch(actor, critic, d, figures);
  else
    whole_epoch(actor, critic, d, figures);
}

}  // namespace triad::rlhf
