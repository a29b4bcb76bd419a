// PPO and GRPO steps (rlhf/rl_training.h, Note [RL step]) on every rank at ZeRO-3 equal the
// same steps in one process: the samples are the same (drawn per global sample), the
// experience is the same, and the gradients accumulated over one process's micro-batches
// equal those averaged over the ranks. Two steps of two PPO epochs each, with ptx and the
// actor's EMA, so that the second step's generation runs on the updated actor: the trained
// actor, its EMA (sharded at ZeRO-3), the critic and the metrics agree within 1e-5; and so
// they do with the models split over tensor-parallel pairs of ranks, with and without
// sequence parallelism (Note [Sequence-parallel steps] in rlhf/step_run.h; the reward model's
// and DPO's training too). PPO and GRPO, the reward model and DPO also train in two pipeline
// stages as in one process, PPO and GRPO with a Llama too. The frozen reference
// and reward models (DPO's reference too) are partitioned over the data-parallel ranks at
// ZeRO-3 (Note [Frozen models] in rlhf/models.h), and the runs' "mem" shows it.
#include <boost/test/unit_test.hpp>
#include <fstream>
#include <limits>

#include "autograd/grad_mode.h"
#include "checkpoint/checkpoint.h"
#include "config/model_factory.h"
#include "io/triad_tokenizer.h"
#include "nn/gpt.h"
#include "nn/value_model.h"
#include "parallel/process_grid.h"
#include "parallel/runtime.h"
#include "rlhf/dpo_training.h"
#include "rlhf/models.h"
#include "rlhf/reward_training.h"
#include "rlhf/rl_training.h"
#include "rlhf/step_run.h"
#include "support/check.h"
#include "support/files.h"
#include "support/shared_corpus.h"

BOOST_AUTO_TEST_SUITE(test_rl_training_mpi)

using namespace triad;

namespace {

constexpr int64_t kBatch = 16, kMicro = 2;

nlohmann::json model_config() {
  return {{"model", {{"n_layer", 2}, {"n_head", 2}, {"d_model", 16}, {"seq_len", 32}, {"vocab_size", 257}}},
          {"train_batch_size", 1}, {"steps", 1}};
}

// A Llama's model section (grouped-query attention), of the GPT's vocabulary.
nlohmann::json llama_model() {
  return {{"arch", "llama"},         {"n_layer", 2},  {"n_head", 2},        {"n_kv_head", 1},
          {"intermediate_size", 32}, {"d_model", 16}, {"seq_len", 32},      {"vocab_size", 257}};
}

// Rank 0 writes the tokenizer (bytes), the pairs, and the actor's (a GPT's, and a Llama's)
// and the reward model's initial weights into `dir`.
void write_inputs(const std::string& dir) {
  io::TriadTokenizer::train("ab", io::TriadTokenizer::kMinVocabSize).save(dir + "/tokenizer.json");
  std::string rows;
  for (int i = 0; i < 40; ++i)
    rows += "{\"prompt\": \"Q" + std::to_string(i) + ":\", \"chosen\": \" yes " + std::to_string(i) +
            "\", \"rejected\": \" no\"}\n";
  std::ofstream(dir + "/pairs.jsonl") << rows;
  const engine::TrainConfig c = engine::parse_config(model_config());
  nn::GPT actor(c.model);
  engine::save_initial_checkpoint(dir + "/actor.h5", model_config(), actor.named_parameters());
  nlohmann::json llama = model_config();
  llama["model"] = llama_model();
  engine::save_initial_checkpoint(dir + "/llama.h5", llama,
                                  engine::build_model(engine::parse_config(llama))->named_parameters());
  nn::ValueModel reward(std::make_shared<nn::GPT>(c.model), 16, *nn::serial(), 11);
  engine::save_initial_checkpoint(dir + "/reward.h5", model_config(), reward.named_parameters());
}

// The inputs in a folder every rank sees (rank 0 writes them).
std::string shared_inputs(const test::TempDir& own, parallel::Communicator& world) {
  const std::string dir = test::shared_folder(own, world);
  if (world.rank() == 0) write_inputs(dir);
  world.barrier();
  return dir;
}

nlohmann::json rl_config(const std::string& dir, const std::string& algorithm, int64_t ranks, const std::string& out,
                         int tp = 1, bool sp = false, int pp = 1) {
  nlohmann::json j = model_config();
  j["model"]["tensor_parallel"] = tp;
  j["model"]["sequence_parallel"] = sp;
  j["pipeline"] = {{"stages", pp}};
  j["data"] = {{"path", dir + "/pairs.jsonl"},  {"tokenizer", dir + "/tokenizer.json"},
               {"data_split", "1,0,1"},          {"max_prompt_seq_len", 8},
               {"max_seq_len", 16},              {"val_fraction", 0.0}};
  j["train_batch_size"] = kBatch;
  j["train_micro_batch_size_per_gpu"] = kMicro;
  // Adam's eps at 1e-4: a gradient at rounding level (the key bias's, which softmax ignores,
  // and any that is near 0), whose rounding differs with each layout's summation order,
  // moves its weight by about lr·g/eps, not by lr as at eps 1e-8.
  j["optimizer"] = {{"type", "AdamW"}, {"params", {{"lr", 1e-2}, {"eps", 1e-4}}}};
  j["scheduler"] = {{"type", "constant"}};
  j["seed"] = 5;
  j["log_interval"] = 100;
  j["zero_optimization"] = {{"stage", ranks > 1 ? 3 : 0}, {"stage3_param_persistence_threshold", 0}};
  j[algorithm] = {{"reward_model", dir + "/reward.h5"}, {"steps", 2}, {"max_answer_seq_len", 6},
                  {"ppo_epochs", 2},                    {"output_dir", out},
                  {"actor", {{"init", dir + "/actor.h5"}}}};
  if (algorithm == "ppo") {
    j["ppo"]["unsup_coef"] = 0.5;
    j["ppo"]["enable_ema"] = true;
    j["ppo"]["ema_beta"] = 0.5;
    j["ppo"]["critic"] = {{"init", dir + "/reward.h5"}};
  } else {
    j["grpo"]["group_size"] = 2;
  }
  return j;
}

double max_weight_diff(const std::string& a, const std::string& b) {
  const io::NamedTensors wa = engine::read_weights(a).weights, wb = engine::read_weights(b).weights;
  const auto names = [](const io::NamedTensors& w) {
    std::string text;
    for (const auto& [name, _] : w) text += " " + name;
    return text;
  };
  bool same = wa.size() == wb.size();
  for (size_t i = 0; same && i < wa.size(); ++i) same = wa[i].first == wb[i].first;
  BOOST_TEST(same, a << ":" << names(wa) << "\n" << b << ":" << names(wb));
  if (!same) return std::numeric_limits<double>::infinity();
  double d = 0;
  for (size_t i = 0; i < wa.size(); ++i) d = std::max(d, test::max_abs_diff(wa[i].second, wb[i].second));
  return d;
}

// A metrics file's lines.
std::vector<nlohmann::json> metric_lines(const std::string& path) {
  std::vector<nlohmann::json> out;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) out.push_back(nlohmann::json::parse(line));
  return out;
}

// Whether two runs' metric files have two lines each, as two steps write. The checks made on
// rank 0 alone fail without throwing (no BOOST_TEST_REQUIRE), so that the other ranks' next
// collective is not left waiting for it.
bool two_lines_each(const std::vector<nlohmann::json>& a, const std::vector<nlohmann::json>& b) {
  BOOST_TEST(a.size() == 2u);
  BOOST_TEST(b.size() == 2u);
  return a.size() == 2u && b.size() == 2u;
}

// The bytes of model `name` resident per rank, from a run's "mem".
double resident(const nlohmann::json& metrics, const std::string& name) {
  return metrics.at("mem").at(name).at("param_bytes").get<double>();
}

// The frozen models of a run on `ranks` ranks (`tp`: model.tensor_parallel × pipeline.stages; ZeRO-3) are
// partitioned over its data-parallel ranks: each rank holds about 1/dp of the single
// process's bytes (at most 0.3 of them on 4 ranks), and never a gradient or optimizer state.
void check_frozen_memory(const nlohmann::json& mine, const nlohmann::json& alone, int ranks, int tp,
                         const std::vector<std::string>& frozen) {
  const double dp = double(ranks / tp);
  for (const std::string& name : frozen) {
    BOOST_TEST(resident(mine, name) <= 1.2 / dp * resident(alone, name),
               name << ": " << resident(mine, name) << " bytes per rank, " << resident(alone, name) << " alone");
    if (ranks == 4 && tp == 1) BOOST_TEST(resident(mine, name) <= 0.3 * resident(alone, name));
    BOOST_TEST(resident(alone, name) > 0);
    BOOST_TEST(mine["mem"][name]["grad_bytes"].get<int64_t>() == 0);
    BOOST_TEST(mine["mem"][name]["optim_bytes"].get<int64_t>() == 0);
  }
}

// Both steps' metrics of a PPO or GRPO run (`algorithm`) in some layout (metrics many.jsonl)
// and in one process (one.jsonl) within 1e-5, and the trained actors.
void check_rl_steps_agree(const std::string& algorithm, const std::string& one, const std::string& many) {
  const std::vector<nlohmann::json> a = metric_lines(one + ".jsonl"), b = metric_lines(many + ".jsonl");
  if (!two_lines_each(a, b)) return;
  std::vector<std::string> keys = {"reward",     "chosen_reward", "kl",           "entropy", "response_length",
                                   "actor_loss", "clip_fraction", "actor_grad_norm"};
  if (algorithm == "ppo")
    keys.insert(keys.end(), {"approx_kl", "value_loss", "value_clip_fraction", "ptx_loss", "critic_grad_norm"});
  else
    keys.push_back("k3_kl");
  for (size_t i = 0; i < a.size(); ++i)
    for (const std::string& key : keys)
      BOOST_TEST(std::abs(a[i][key].get<double>() - b[i][key].get<double>()) < 1e-5, key << " at step " << i + 1);
  BOOST_TEST(max_weight_diff(one + "/actor.h5", many + "/actor.h5") < 1e-5);
}

// PPO and GRPO on every rank of `world` (model.tensor_parallel `tp`, with sequence
// parallelism when `sp`, in `pp` pipeline stages, ZeRO-3, the frozen reference and reward
// models partitioned over the data-parallel ranks) against one process on rank 0: every
// step's metrics, the trained actor, its EMA and the critic.
void check_against_one_process(parallel::Communicator& world, const parallel::CommunicatorPtr& all,
                               const std::string& dir, int tp, bool sp = false, int pp = 1) {
  for (const std::string algorithm : {"ppo", "grpo"}) {
    BOOST_TEST_CONTEXT(algorithm << ", tp " << tp << (sp ? " with sequence parallelism" : "") << ", pp " << pp) {
      const std::string one = dir + "/one-" + algorithm, many = dir + "/many-" + algorithm + "-tp" +
                                                                  std::to_string(tp) + (sp ? "-sp" : "") + "-pp" +
                                                                  std::to_string(pp);
      nlohmann::json alone;
      if (world.rank() == 0)
        alone = rlhf::train_rl(rlhf::parse_rlhf_config(rl_config(dir, algorithm, 1, one), algorithm, 1),
                               {.metrics_path = one + ".jsonl"}, nullptr);
      world.barrier();
      const nlohmann::json mine = rlhf::train_rl(
          rlhf::parse_rlhf_config(rl_config(dir, algorithm, world.size(), many, tp, sp, pp), algorithm, world.size()),
          {.metrics_path = many + ".jsonl"}, all);
      if (world.rank() == 0) {
        check_rl_steps_agree(algorithm, one, many);
        BOOST_TEST(alone["kl"].get<double>() != 0.0);  // the second step's actor has moved
        check_frozen_memory(mine, alone, world.size(), tp * pp, {"reference", "reward"});
        if (algorithm == "ppo") {
          BOOST_TEST(max_weight_diff(one + "/critic.h5", many + "/critic.h5") < 1e-5);
          BOOST_TEST(max_weight_diff(one + "/actor_ema.h5", many + "/actor_ema.h5") < 1e-5);
          BOOST_TEST(max_weight_diff(one + "/actor_ema.h5", one + "/actor.h5") > 1e-5);
          // The EMA beside the master weights (Note [Actor EMA]): alone, 4 bytes per parameter,
          // as the f32 actor's own (no padding on one rank); sharded as the actor over dp.
          BOOST_TEST(resident(alone, "actor_ema") == resident(alone, "actor"));
          BOOST_TEST(resident(mine, "actor_ema") <= 1.2 * tp * pp / world.size() * resident(alone, "actor_ema"));
          for (const char* elsewhere : {"host_bytes", "nvme_bytes"})
            BOOST_TEST(mine["mem"]["actor_ema"][elsewhere].get<int64_t>() == 0, elsewhere);
        }
        // The actor moved: its weights are not the initial ones.
        BOOST_TEST(max_weight_diff(dir + "/actor.h5", one + "/actor.h5") > 1e-4);
      }
      world.barrier();
    }
  }
}

// The reward model's or DPO's run (`step`) on `ranks` ranks (model.tensor_parallel `tp`, with
// sequence parallelism when `sp`): two steps from the actor's weights, a quarter of the
// pairs held out.
rlhf::StepConfig pair_step_config(const std::string& dir, const std::string& step, int ranks, const std::string& out,
                                  int tp = 1, bool sp = false, int pp = 1) {
  nlohmann::json j = rl_config(dir, step, ranks, out, tp, sp);
  j.erase("grpo");
  j["pipeline"] = {{"stages", pp}};
  j["data"]["data_split"] = "1,1,1";
  j["data"]["val_fraction"] = 0.25;
  j[step] = {{"init", dir + "/actor.h5"}, {"steps", 2}, {"output_dir", out}};
  return rlhf::parse_rlhf_config(j, step, ranks);
}

// Sets `model`'s weights to what qwZ's gathers over n ranks deliver (zero/frozen_partition.h):
// each unit's parameters, in order, padded to n equal shards, each shard quantized to int8
// in blocks of `block` elements from its start, and dequantized.
void quantize_as_gathered(const nn::ModulePtr& model, int64_t n, int64_t block) {
  for (const zero::Unit& u : zero::make_units(model, {.module_types = {"Block", "LlamaBlock"}})) {
    std::vector<float> flat;
    for (const auto& [_, p] : u.params) {
      const std::vector<float> v = p.to_vector<float>();
      flat.insert(flat.end(), v.begin(), v.end());
    }
    flat.resize((flat.size() + size_t(n) - 1) / size_t(n) * size_t(n), 0.0f);
    const Tensor shards = Tensor::from_vector(flat, {n, int64_t(flat.size()) / n});
    const Quantized q = ops::quantize_blocks(shards, {.bits = 8, .block = block});
    const Tensor back = Tensor::empty(shards.shape());
    ops::dequantize_blocks(q.q, q.scales, back, {.bits = 8, .block = block});
    const std::vector<float> b = back.to_vector<float>();
    size_t at = 0;
    for (const auto& [_, p] : u.params) {
      ops::copy_(p, Tensor::from_vector(std::vector<float>(b.begin() + long(at), b.begin() + long(at) + p.numel()),
                                        p.shape()));
      at += size_t(p.numel());
    }
  }
}

// A pair step (reward or dpo) run in some layout (`many`, returning `mine`) against one
// process (`one`, returning `alone`): the held-out figures, both steps' metrics and the
// trained weights within 1e-5.
void check_pair_runs_agree(const std::string& step, double alone, double mine, const std::string& one,
                           const std::string& many) {
  BOOST_TEST(std::isfinite(alone));
  BOOST_TEST(std::abs(mine - alone) < 1e-5);
  BOOST_TEST(max_weight_diff(one + "/model.h5", many + "/model.h5") < 1e-5);
  const std::vector<nlohmann::json> a = metric_lines(one + ".jsonl"), b = metric_lines(many + ".jsonl");
  if (!two_lines_each(a, b)) return;
  const std::vector<std::string> keys = step == "reward"
                                            ? std::vector<std::string>{"loss", "accuracy", "chosen_score",
                                                                       "rejected_score"}
                                            : std::vector<std::string>{"loss", "accuracy", "margin"};
  for (size_t i = 0; i < a.size(); ++i)
    for (const std::string& key : keys)
      BOOST_TEST(std::abs(a[i][key].get<double>() - b[i][key].get<double>()) < 1e-5, key << " at step " << i + 1);
}

}  // namespace

BOOST_AUTO_TEST_CASE(zero3_steps_equal_one_process) {
  const parallel::CommunicatorPtr world = parallel::world();
  test::TempDir own;
  const std::string dir = shared_inputs(own, *world);
  check_against_one_process(*world, world, dir, 1);
}

// The same with the models split over tensor-parallel pairs of ranks (the rest
// data-parallel): the actor's log-probs read its logits gathered over the pair.
BOOST_AUTO_TEST_CASE(tensor_parallel_steps_equal_one_process) {
  const parallel::CommunicatorPtr world = parallel::world();
  BOOST_TEST_REQUIRE(world->size() % 2 == 0, "tensor parallelism over pairs needs an even rank count");
  test::TempDir own;
  const std::string dir = shared_inputs(own, *world);
  check_against_one_process(*world, world, dir, 2);
}

// The same with sequence parallelism over the pairs: each rank holds half of every row's
// columns (rows padded to an even count), generation runs on the whole rows, and the
// log-probs, values and scores are read from them gathered.
BOOST_AUTO_TEST_CASE(sequence_parallel_steps_equal_one_process) {
  const parallel::CommunicatorPtr world = parallel::world();
  BOOST_TEST_REQUIRE(world->size() % 2 == 0, "tensor parallelism over pairs needs an even rank count");
  test::TempDir own;
  const std::string dir = shared_inputs(own, *world);
  check_against_one_process(*world, world, dir, 2, /*sp=*/true);
}

// PPO's frozen models split over a tensor-parallel pair as the trained ones are: each rank
// holds part of the reference, whose logits gathered over the pair are the whole model's,
// and the reward model's values are the whole model's.
BOOST_AUTO_TEST_CASE(frozen_models_split_over_tensor_parallel_ranks) {
  const parallel::CommunicatorPtr world = parallel::world();
  BOOST_TEST_REQUIRE(world->size() % 2 == 0, "tensor parallelism over pairs needs an even rank count");
  test::TempDir own;
  const std::string dir = shared_inputs(own, *world);
  const parallel::ProcessGrid grid(world, {.tp = 2, .dp = world->size() / 2});
  const auto numel = [](const nn::Module& m) {
    int64_t n = 0;
    for (const auto& [name, p] : m.named_parameters()) n += p.numel();
    return n;
  };
  const auto whole = rlhf::frozen_policy(dir + "/actor.h5", Device::cpu());
  const auto part = rlhf::frozen_policy(dir + "/actor.h5", Device::cpu(), {.tp = grid.tp()});
  BOOST_TEST(numel(*part) < 3 * numel(*whole) / 4);
  const Tensor ids = Tensor::from_vector(std::vector<int64_t>{3, 80, 12, 200, 7, 7, 150, 9}, {2, 4});
  const Tensor full = rlhf::full_vocabulary((*part)(ids), grid.tp());
  BOOST_TEST(test::max_abs_diff(ops::narrow(full, 2, 0, 257), (*whole)(ids)) < 1e-5);
  const auto reward_whole = rlhf::frozen_value_model(dir + "/reward.h5", Device::cpu());
  const auto reward_part = rlhf::frozen_value_model(dir + "/reward.h5", Device::cpu(), {.tp = grid.tp()});
  BOOST_TEST(numel(*reward_part) < 3 * numel(*reward_whole) / 4);
  BOOST_TEST(test::max_abs_diff(reward_part->forward(ids), reward_whole->forward(ids)) < 1e-5);
  // With sequence parallelism each rank's residual stream holds half of each row's columns:
  // a left-padded batch's logits (gathered over the pair) and values are the whole model's.
  const nn::LeftPadding padding = nn::left_padding({1, 0}, 4);
  const rlhf::FrozenPlacement sequence{.tp = grid.tp(), .sequence_parallel = true};
  const auto sp = rlhf::frozen_policy(dir + "/actor.h5", Device::cpu(), sequence);
  BOOST_TEST(test::max_abs_diff(ops::narrow(rlhf::full_vocabulary(sp->forward(ids, padding), grid.tp()), 2, 0, 257),
                                whole->forward(ids, padding)) < 1e-5);
  const auto reward_sp = rlhf::frozen_value_model(dir + "/reward.h5", Device::cpu(), sequence);
  const Tensor values = reward_sp->forward(ids, padding);
  BOOST_TEST(values.shape() == Shape({2, 4}));
  BOOST_TEST(test::max_abs_diff(values, reward_whole->forward(ids, padding)) < 1e-5);
  world->barrier();
}

// DPO's reference partitioned over the data-parallel ranks at ZeRO-3: each step's loss,
// accuracy and margin, the held-out margin and the trained policy equal one process's.
BOOST_AUTO_TEST_CASE(dpo_at_zero3_equals_one_process) {
  const parallel::CommunicatorPtr world = parallel::world();
  test::TempDir own;
  const std::string dir = shared_inputs(own, *world);
  double alone = 0;
  if (world->rank() == 0)
    alone = rlhf::train_dpo(pair_step_config(dir, "dpo", 1, dir + "/one-dpo"),
                            {.metrics_path = dir + "/one-dpo.jsonl"}, nullptr);
  world->barrier();
  const double mine = rlhf::train_dpo(pair_step_config(dir, "dpo", world->size(), dir + "/many-dpo"),
                                      {.metrics_path = dir + "/many-dpo.jsonl"}, world);
  if (world->rank() == 0) {
    BOOST_TEST(std::isfinite(alone));
    BOOST_TEST(std::abs(mine - alone) < 1e-5);
    const std::vector<nlohmann::json> a = metric_lines(dir + "/one-dpo.jsonl"),
                                      b = metric_lines(dir + "/many-dpo.jsonl");
    BOOST_TEST(max_weight_diff(dir + "/one-dpo/model.h5", dir + "/many-dpo/model.h5") < 1e-5);
    BOOST_TEST(max_weight_diff(dir + "/actor.h5", dir + "/one-dpo/model.h5") > 1e-4);  // the policy moved
    if (two_lines_each(a, b)) {
      for (size_t i = 0; i < a.size(); ++i)
        for (const char* key : {"loss", "accuracy", "margin"})
          BOOST_TEST(std::abs(a[i][key].get<double>() - b[i][key].get<double>()) < 1e-5, key << " at step " << i + 1);
      check_frozen_memory(b.back(), a.back(), world->size(), 1, {"reference"});
    }
  }
  world->barrier();
}

// The reward model and DPO with the models split over tensor-parallel pairs with sequence
// parallelism (each batch right-padded to an even column count): each step's metrics, the
// held-out figure and the trained weights equal one process's.
BOOST_AUTO_TEST_CASE(reward_and_dpo_with_sequence_parallelism_equal_one_process) {
  const parallel::CommunicatorPtr world = parallel::world();
  BOOST_TEST_REQUIRE(world->size() % 2 == 0, "tensor parallelism over pairs needs an even rank count");
  test::TempDir own;
  const std::string dir = shared_inputs(own, *world);
  for (const std::string step : {"reward", "dpo"}) {
    BOOST_TEST_CONTEXT(step) {
      const auto run = [&](int ranks, int tp, const std::string& out, const parallel::CommunicatorPtr& on) {
        const rlhf::StepConfig c = pair_step_config(dir, step, ranks, out, tp, /*sp=*/tp > 1);
        const rlhf::RunOptions o{.metrics_path = out + ".jsonl"};
        return step == "reward" ? rlhf::train_reward(c, o, on) : rlhf::train_dpo(c, o, on);
      };
      const std::string one = dir + "/one-" + step, many = dir + "/many-" + step + "-sp";
      double alone = 0;
      if (world->rank() == 0) alone = run(1, 1, one, nullptr);
      world->barrier();
      const double mine = run(world->size(), 2, many, world);
      if (world->rank() == 0) {
        check_pair_runs_agree(step, alone, mine, one, many);
      }
      world->barrier();
    }
  }
}

// The reward model and DPO in two pipeline stages (the rest of the ranks data-parallel, at
// ZeRO-3; Note [RLHF pipeline stages] in rlhf/step_run.h): each step's metrics, the held-out
// figure and the trained weights equal one process's, whose batches are not padded to
// data.max_seq_len as the pipeline's are.
BOOST_AUTO_TEST_CASE(reward_and_dpo_in_pipeline_stages_equal_one_process) {
  const parallel::CommunicatorPtr world = parallel::world();
  BOOST_TEST_REQUIRE(world->size() % 2 == 0, "two pipeline stages need an even rank count");
  test::TempDir own;
  const std::string dir = shared_inputs(own, *world);
  for (const std::string step : {"reward", "dpo"}) {
    BOOST_TEST_CONTEXT(step) {
      const auto run = [&](int ranks, int pp, const std::string& out, const parallel::CommunicatorPtr& on) {
        const rlhf::StepConfig c = pair_step_config(dir, step, ranks, out, 1, false, pp);
        const rlhf::RunOptions o{.metrics_path = out + ".jsonl"};
        return step == "reward" ? rlhf::train_reward(c, o, on) : rlhf::train_dpo(c, o, on);
      };
      const std::string one = dir + "/one-" + step, many = dir + "/many-" + step + "-pp";
      double alone = 0;
      if (world->rank() == 0) alone = run(1, 1, one, nullptr);
      world->barrier();
      const double mine = run(world->size(), 2, many, world);
      // Every rank returns the held-out figure (sent from the last stage).
      BOOST_TEST(std::abs(rlhf::sum_over(world, {mine})[0] / world->size() - mine) < 1e-12);
      if (world->rank() == 0) {
        check_pair_runs_agree(step, alone, mine, one, many);
        if (step == "dpo") BOOST_TEST(max_weight_diff(dir + "/actor.h5", one + "/model.h5") > 1e-4);  // it moved
      }
      world->barrier();
    }
  }
}

// PPO and GRPO in two pipeline stages, the rest of the ranks data-parallel at ZeRO-3 (Note
// [RL in pipeline stages] in rlhf/rl_epoch.h): the actor generates and makes the experience
// gathered whole from its stages on every rank, and the actor and the critic train through
// the schedule on right-padded rows with the losses on the last stage, ptx rows in the same
// micro-batches; every step's metrics, the actor, its EMA (each stage averaging its own
// layers) and the critic equal one process's.
BOOST_AUTO_TEST_CASE(ppo_and_grpo_in_pipeline_stages_equal_one_process) {
  const parallel::CommunicatorPtr world = parallel::world();
  BOOST_TEST_REQUIRE(world->size() % 2 == 0, "two pipeline stages need an even rank count");
  test::TempDir own;
  const std::string dir = shared_inputs(own, *world);
  check_against_one_process(*world, world, dir, 1, false, /*pp=*/2);
}

// The same with the stages split over tensor-parallel pairs with sequence parallelism (on 4
// ranks: tp 2 × pp 2; the rows right-padded to an even width): the whole models are gathered
// per tensor-parallel rank, each holding its part of every layer.
BOOST_AUTO_TEST_CASE(ppo_and_grpo_in_tensor_parallel_pipeline_stages_equal_one_process) {
  const parallel::CommunicatorPtr world = parallel::world();
  if (world->size() != 4) return;  // run on 4 ranks only, to keep the test's time modest
  test::TempDir own;
  const std::string dir = shared_inputs(own, *world);
  check_against_one_process(*world, world, dir, 2, /*sp=*/true, /*pp=*/2);
}

// PPO and GRPO with a Llama actor (and reference; PPO's critic a Llama value model started
// from the same Llama, without its untied output head) in two pipeline stages: the layer
// lists' stages gathered whole into an nn::Llama and an nn::ValueModel for generation and
// experience (Note [Stages gathered whole]); both steps' metrics, the trained actor and the
// critic equal one process's, and the critic saves the same weights in either layout.
BOOST_AUTO_TEST_CASE(ppo_and_grpo_with_a_llama_in_pipeline_stages_equal_one_process) {
  const parallel::CommunicatorPtr world = parallel::world();
  BOOST_TEST_REQUIRE(world->size() % 2 == 0, "two pipeline stages need an even rank count");
  test::TempDir own;
  const std::string dir = shared_inputs(own, *world);
  for (const std::string algorithm : {"ppo", "grpo"}) {
    BOOST_TEST_CONTEXT(algorithm) {
      const auto config = [&](int ranks, const std::string& out, int pp) {
        nlohmann::json j = rl_config(dir, algorithm, ranks, out, 1, false, pp);
        j["model"].update(llama_model());
        j[algorithm]["actor"]["init"] = dir + "/llama.h5";
        if (algorithm == "ppo") j["ppo"]["critic"]["init"] = dir + "/llama.h5";
        return rlhf::parse_rlhf_config(j, algorithm, ranks);
      };
      const std::string one = dir + "/one-llama-" + algorithm, many = dir + "/many-llama-pp2-" + algorithm;
      if (world->rank() == 0) rlhf::train_rl(config(1, one, 1), {.metrics_path = one + ".jsonl"}, nullptr);
      world->barrier();
      rlhf::train_rl(config(world->size(), many, 2), {.metrics_path = many + ".jsonl"}, world);
      if (world->rank() == 0) {
        check_rl_steps_agree(algorithm, one, many);
        BOOST_TEST(max_weight_diff(dir + "/llama.h5", one + "/actor.h5") > 1e-4);  // the actor moved
        if (algorithm == "ppo") {
          BOOST_TEST(max_weight_diff(one + "/critic.h5", many + "/critic.h5") < 1e-5);
          const io::NamedTensors critic = engine::read_weights(one + "/critic.h5").weights;
          BOOST_TEST(std::none_of(critic.begin(), critic.end(),
                                  [](const auto& w) { return w.first == "base.head.weight"; }));
        }
      }
      world->barrier();
    }
  }
}

// A frozen model partitioned at ZeRO-3 (zero/frozen_partition.h) computes what the whole
// one does, holds its shard alone between forwards (each unit freed after its forward), and
// with zero_quantized_weights computes what the whole model does with each rank's shards
// rounded to int8 blocks (quantize_as_gathered); at ZeRO 0-2 it stays whole on every rank.
BOOST_AUTO_TEST_CASE(frozen_models_partitioned_at_zero3_alone) {
  const parallel::CommunicatorPtr world = parallel::world();
  test::TempDir own;
  const std::string dir = shared_inputs(own, *world);
  const Tensor ids = Tensor::from_vector(std::vector<int64_t>{3, 80, 12, 200, 7, 7, 150, 9}, {2, 4});
  const auto whole = rlhf::frozen_value_model(dir + "/reward.h5", Device::cpu());
  NoGradGuard no_grad;
  const Tensor expected = (*whole)(ids);
  const double full = double(whole.memory().param_bytes);
  for (int stage : {0, 1, 2}) {
    const auto kept =
        rlhf::frozen_value_model(dir + "/reward.h5", Device::cpu(), {.dp = world, .zero = {.stage = stage}});
    BOOST_TEST(!kept.partition);
    BOOST_TEST(double(kept.memory().param_bytes) == full);
  }
  const zero::ZeroConfig z3{.stage = 3, .stage3_param_persistence_threshold = 0};
  const auto part = rlhf::frozen_value_model(dir + "/reward.h5", Device::cpu(), {.dp = world, .zero = z3});
  BOOST_TEST_REQUIRE(part.partition != nullptr);
  const double n = world->size();
  BOOST_TEST(double(part.memory().param_bytes) <= full / n + 4.0 * n * double(part.partition->group_sizes().size()));
  BOOST_TEST(test::max_abs_diff((*part)(ids), expected) == 0.0);
  for (const auto& [name, p] : part->named_parameters())  // released after the forward
    BOOST_TEST(!p.impl().storage, name);
  zero::ZeroConfig qwz = z3;
  qwz.quantized_weights = true;
  qwz.weight_quantization_block = 64;
  const auto quantized = rlhf::frozen_value_model(dir + "/reward.h5", Device::cpu(), {.dp = world, .zero = qwz});
  const Tensor read = (*quantized)(ids);
  BOOST_TEST(test::max_abs_diff(read, expected) > 0.0);
  quantize_as_gathered(whole.model, world->size(), 64);
  BOOST_TEST(test::max_abs_diff(read, (*whole)(ids)) == 0.0);
  test::check_error(
      [&] {
        EnableGradGuard recording;
        (*part)(ids);
      },
      {"without gradients"});
  world->barrier();
}

BOOST_AUTO_TEST_SUITE_END()  // test_rl_training_mpi
