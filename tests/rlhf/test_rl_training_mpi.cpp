// PPO and GRPO steps (rlhf/rl_training.h, Note [RL step]) on every rank at ZeRO-3 equal the
// same steps in one process: the samples are the same (drawn per global sample), the
// experience is the same, and the gradients accumulated over one process's micro-batches
// equal those averaged over the ranks. Two steps of two PPO epochs each, with ptx and the
// actor's EMA, so that the second step's generation runs on the updated actor: the trained
// actor, its EMA (sharded at ZeRO-3), the critic and the metrics agree within 1e-5; and so
// they do with the models split over tensor-parallel pairs of ranks.
#include <boost/test/unit_test.hpp>

#include "checkpoint/checkpoint.h"
#include "io/triad_tokenizer.h"
#include "nn/gpt.h"
#include "nn/value_model.h"
#include "parallel/process_grid.h"
#include "parallel/runtime.h"
#include "rlhf/models.h"
#include "rlhf/rl_training.h"
#include "rlhf/step_run.h"
#include "support/check.h"
#include "support/files.h"
#include "support/mpi_fixture.h"
#include "support/shared_corpus.h"

using namespace triad;
using test::MpiFixture;
BOOST_TEST_GLOBAL_FIXTURE(MpiFixture);

namespace {

constexpr int64_t kBatch = 16, kMicro = 2;

nlohmann::json model_config() {
  return {{"model", {{"n_layer", 2}, {"n_head", 2}, {"d_model", 16}, {"seq_len", 32}, {"vocab_size", 257}}},
          {"train_batch_size", 1}, {"steps", 1}};
}

// Rank 0 writes the tokenizer (bytes), the pairs, and the actor's and the reward model's
// initial weights into `dir`.
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

nlohmann::json rl_config(const std::string& dir, const std::string& algorithm, int64_t ranks,
                         const std::string& out, int tp = 1) {
  nlohmann::json j = model_config();
  j["model"]["tensor_parallel"] = tp;
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
  BOOST_REQUIRE_EQUAL(wa.size(), wb.size());
  double d = 0;
  for (size_t i = 0; i < wa.size(); ++i) {
    BOOST_REQUIRE_EQUAL(wa[i].first, wb[i].first);
    d = std::max(d, test::max_abs_diff(wa[i].second, wb[i].second));
  }
  return d;
}

// PPO and GRPO on every rank of `world` (model.tensor_parallel `tp`, ZeRO-3) against one
// process on rank 0.
void check_against_one_process(parallel::Communicator& world, const parallel::CommunicatorPtr& all,
                               const std::string& dir, int tp) {
  for (const std::string algorithm : {"ppo", "grpo"}) {
    BOOST_TEST_CONTEXT(algorithm << ", tp " << tp) {
      const std::string one = dir + "/one-" + algorithm, many = dir + "/many-" + algorithm + "-tp" + std::to_string(tp);
      nlohmann::json alone;
      if (world.rank() == 0)
        alone = rlhf::train_rl(rlhf::parse_rlhf_config(rl_config(dir, algorithm, 1, one), algorithm, 1), {}, nullptr);
      world.barrier();
      const nlohmann::json mine = rlhf::train_rl(
          rlhf::parse_rlhf_config(rl_config(dir, algorithm, world.size(), many, tp), algorithm, world.size()), {}, all);
      if (world.rank() == 0) {
        for (const char* key : {"reward", "chosen_reward", "kl", "entropy", "response_length", "actor_loss"})
          BOOST_TEST(std::abs(mine[key].get<double>() - alone[key].get<double>()) < 1e-5, key);
        BOOST_TEST(alone["kl"].get<double>() != 0.0);  // the second step's actor has moved
        BOOST_TEST(max_weight_diff(one + "/actor.h5", many + "/actor.h5") < 1e-5);
        if (algorithm == "ppo") {
          BOOST_TEST(std::abs(mine["value_loss"].get<double>() - alone["value_loss"].get<double>()) < 1e-5);
          BOOST_TEST(std::abs(mine["ptx_loss"].get<double>() - alone["ptx_loss"].get<double>()) < 1e-5);
          BOOST_TEST(max_weight_diff(one + "/critic.h5", many + "/critic.h5") < 1e-5);
          BOOST_TEST(max_weight_diff(one + "/actor_ema.h5", many + "/actor_ema.h5") < 1e-5);
          BOOST_TEST(max_weight_diff(one + "/actor_ema.h5", one + "/actor.h5") > 1e-5);
        }
        // The actor moved: its weights are not the initial ones.
        BOOST_TEST(max_weight_diff(dir + "/actor.h5", one + "/actor.h5") > 1e-4);
      }
      world.barrier();
    }
  }
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
  const auto part = rlhf::frozen_policy(dir + "/actor.h5", Device::cpu(), grid.tp());
  BOOST_TEST(numel(*part) < 3 * numel(*whole) / 4);
  const Tensor ids = Tensor::from_vector(std::vector<int64_t>{3, 80, 12, 200, 7, 7, 150, 9}, {2, 4});
  const Tensor full = rlhf::full_vocabulary((*part)(ids), grid.tp());
  BOOST_TEST(test::max_abs_diff(ops::narrow(full, 2, 0, 257), (*whole)(ids)) < 1e-5);
  const auto reward_whole = rlhf::frozen_value_model(dir + "/reward.h5", Device::cpu());
  const auto reward_part = rlhf::frozen_value_model(dir + "/reward.h5", Device::cpu(), grid.tp());
  BOOST_TEST(numel(*reward_part) < 3 * numel(*reward_whole) / 4);
  BOOST_TEST(test::max_abs_diff(reward_part->forward(ids), reward_whole->forward(ids)) < 1e-5);
  world->barrier();
}

