// PPO and GRPO steps (rlhf/rl_training.h, Note [RL step]) on every rank at ZeRO-3 equal the
// same steps in one process: the samples are the same (drawn per global sample), the
// experience is the same, and the gradients accumulated over one process's micro-batches
// equal those averaged over the ranks. Two steps of two PPO epochs each, with ptx and the
// actor's EMA, so that the second step's generation runs on the updated actor: the trained
// actor, its EMA (sharded at ZeRO-3), the critic and the metrics agree within 1e-5.
#define BOOST_TEST_MODULE rl_training_mpi
#include <boost/test/unit_test.hpp>

#include "engine/checkpoint.h"
#include "nn/gpt.h"
#include "nn/value_model.h"
#include "parallel/runtime.h"
#include "rlhf/rl_training.h"
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
  io::Tokenizer::train("ab", io::Tokenizer::kMinVocabSize).save(dir + "/tokenizer.json");
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

nlohmann::json rl_config(const std::string& dir, const std::string& algorithm, int64_t ranks,
                         const std::string& out) {
  nlohmann::json j = model_config();
  j["data"] = {{"path", dir + "/pairs.jsonl"},  {"tokenizer", dir + "/tokenizer.json"},
               {"data_split", "1,0,1"},          {"max_prompt_seq_len", 8},
               {"max_seq_len", 16},              {"val_fraction", 0.0}};
  j["train_batch_size"] = kBatch;
  j["train_micro_batch_size_per_gpu"] = kMicro;
  j["optimizer"] = {{"type", "AdamW"}, {"params", {{"lr", 1e-2}}}};
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
    // The critic at a fifth of the actor's rate: Adam turns the rounding of its gradients'
    // near-zero components (which differs between layouts) into steps of about lr.
    j["ppo"]["critic"] = {{"init", dir + "/reward.h5"}, {"optimizer", {{"params", {{"lr", 2e-3}}}}}};
  } else {
    j["grpo"]["group_size"] = 2;
  }
  return j;
}

// The largest difference between two weights files' parameters, but for the key part of
// each attention's qkv bias: adding a constant to every key shifts all of a query's scores
// alike, which softmax ignores, so its gradient is 0 in exact arithmetic and only rounding,
// which differs with the summation order of each layout, and Adam scales rounding to steps
// of about lr.
double max_weight_diff(const std::string& a, const std::string& b) {
  const io::NamedTensors wa = engine::read_weights(a).weights, wb = engine::read_weights(b).weights;
  BOOST_REQUIRE_EQUAL(wa.size(), wb.size());
  double d = 0;
  for (size_t i = 0; i < wa.size(); ++i) {
    BOOST_REQUIRE_EQUAL(wa[i].first, wb[i].first);
    Tensor x = wa[i].second, y = wb[i].second;
    if (wa[i].first.size() >= 13 && wa[i].first.rfind("attn.qkv.bias") == wa[i].first.size() - 13) {
      const int64_t C = x.size(0) / 3;  // q, k, v
      x = cat({ops::narrow(x, 0, 0, C), ops::narrow(x, 0, 2 * C, C)}, 0);
      y = cat({ops::narrow(y, 0, 0, C), ops::narrow(y, 0, 2 * C, C)}, 0);
    }
    d = std::max(d, test::max_abs_diff(x, y));
  }
  return d;
}

}  // namespace

BOOST_AUTO_TEST_CASE(zero3_steps_equal_one_process) {
  const parallel::CommunicatorPtr world = parallel::world();
  test::TempDir own;
  const std::string dir = test::shared_folder(own, *world);
  if (world->rank() == 0) write_inputs(dir);
  world->barrier();
  for (const std::string algorithm : {"ppo", "grpo"}) {
    BOOST_TEST_CONTEXT(algorithm) {
      nlohmann::json alone;
      if (world->rank() == 0)
        alone = rlhf::train_rl(rlhf::parse_rlhf_config(rl_config(dir, algorithm, 1, dir + "/one-" + algorithm),
                                                       algorithm, 1),
                               {}, nullptr);
      world->barrier();
      const nlohmann::json many = rlhf::train_rl(
          rlhf::parse_rlhf_config(rl_config(dir, algorithm, world->size(), dir + "/many-" + algorithm), algorithm,
                                  world->size()),
          {}, world);
      if (world->rank() == 0) {
        for (const char* key : {"reward", "kl", "entropy", "response_length", "actor_loss"})
          BOOST_TEST(std::abs(many[key].get<double>() - alone[key].get<double>()) < 1e-5, key);
        BOOST_TEST(alone["kl"].get<double>() != 0.0);  // the second step's actor has moved
        BOOST_TEST(max_weight_diff(dir + "/one-" + algorithm + "/actor.h5", dir + "/many-" + algorithm + "/actor.h5") <
                   1e-5);
        if (algorithm == "ppo") {
          BOOST_TEST(std::abs(many["value_loss"].get<double>() - alone["value_loss"].get<double>()) < 1e-5);
          BOOST_TEST(std::abs(many["ptx_loss"].get<double>() - alone["ptx_loss"].get<double>()) < 1e-5);
          BOOST_TEST(max_weight_diff(dir + "/one-ppo/critic.h5", dir + "/many-ppo/critic.h5") < 1e-5);
          BOOST_TEST(max_weight_diff(dir + "/one-ppo/actor_ema.h5", dir + "/many-ppo/actor_ema.h5") < 1e-5);
          BOOST_TEST(max_weight_diff(dir + "/one-ppo/actor_ema.h5", dir + "/one-ppo/actor.h5") > 1e-5);
        }
        // The actor moved: its weights are not the initial ones.
        BOOST_TEST(max_weight_diff(dir + "/actor.h5", dir + "/one-" + algorithm + "/actor.h5") > 1e-4);
      }
      world->barrier();
    }
  }
}
