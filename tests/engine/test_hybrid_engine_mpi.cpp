// Generation on a training Engine (Note [Hybrid engine] in engine/hybrid_engine.h) under
// mpirun: each rank generates its own, unevenly many prompts, whose rows stop at different
// steps; at every ZeRO stage the samples are those one process draws for the same global
// samples; at ZeRO-3 the whole model is gathered once per call (the collectives of one
// gather_parameters(), whatever the number of tokens) and released after; and the
// log-probs the training forward recomputes on the left-padded prompt + answer rows equal
// those recorded while generating.
#include <boost/test/unit_test.hpp>

#include "engine/hybrid_engine.h"
#include "parallel/runtime.h"
#include "rlhf/log_probs.h"
#include "support/check.h"
#include "support/training.h"

BOOST_AUTO_TEST_SUITE(test_hybrid_engine_mpi)

using namespace triad;

namespace {

constexpr int32_t kStop = 3;
const engine::SamplingOptions kSampling{.temperature = 1.0, .top_k = 0, .top_p = 1.0, .max_new_tokens = 7, .seed = 9,
                                        .stop_token = kStop};

// Global sample g's prompt: 1 to 5 tokens.
std::vector<int32_t> prompt(int64_t g) {
  std::vector<int32_t> p;
  for (int64_t i = 0; i <= (g * 7) % 5; ++i) p.push_back(int32_t((g * 5 + i * 3 + 1) % 16));
  return p;
}

// Rank r holds 1 + r % 3 prompts, after those of the ranks before it.
std::pair<int64_t, std::vector<std::vector<int32_t>>> rank_prompts(int rank) {
  int64_t first = 0;
  for (int r = 0; r < rank; ++r) first += 1 + r % 3;
  std::vector<std::vector<int32_t>> prompts;
  for (int64_t i = 0; i < 1 + rank % 3; ++i) prompts.push_back(prompt(first + i));
  return {first, prompts};
}

engine::TrainConfig config(int stage, int64_t ranks) {
  nlohmann::json j = test::small_gpt_config("unused.bin", 1);
  j["model"]["seq_len"] = 12;
  j["zero_optimization"] = {{"stage", stage}, {"stage3_param_persistence_threshold", 0}};
  return engine::parse_config(j, ranks);
}

int64_t all_gathers(const engine::Engine& e) {
  const auto stats = e.zero_communicator()->stats();
  const auto it = stats.find("all_gather");
  return it == stats.end() ? 0 : it->second.calls;
}

}  // namespace

BOOST_AUTO_TEST_CASE(every_stage_samples_what_one_process_samples) {
  const parallel::CommunicatorPtr world = parallel::world();
  const auto [first, prompts] = rank_prompts(world->rank());
  for (int stage : {0, 1, 2, 3}) {
    BOOST_TEST_CONTEXT("stage " << stage) {
      const engine::TrainConfig c = config(stage, world->size());
      engine::Engine e(c, engine::process_grid(c, world));
      nn::GPT one(c.model);  // the same initial parameters, whole
      const engine::BatchGeneration got = engine::generate_batch(e, prompts, kSampling, 0, first);
      const engine::BatchGeneration want = engine::generate_batch(one, prompts, kSampling, 0, first);
      BOOST_TEST(test::max_abs_diff(got.tokens, want.tokens) == 0.0);
      BOOST_TEST(test::max_abs_diff(got.answer_mask, want.answer_mask) == 0.0);
      BOOST_TEST(test::max_abs_diff(got.logprobs, want.logprobs) < 1e-5);
      BOOST_TEST(e.model().is_training());  // the engine's mode is kept
    }
  }
}

BOOST_AUTO_TEST_CASE(zero3_gathers_once_per_call_and_log_probs_agree_with_training) {
  const parallel::CommunicatorPtr world = parallel::world();
  const auto [first, prompts] = rank_prompts(world->rank());
  const engine::TrainConfig c = config(3, world->size());
  engine::Engine e(c, engine::process_grid(c, world));
  const int64_t shard_bytes = e.memory().param_bytes;
  int64_t before = all_gathers(e);
  e.gather_parameters();
  e.release_parameters();
  const int64_t whole_model = all_gathers(e) - before;
  BOOST_TEST_REQUIRE(whole_model > 0);

  before = all_gathers(e);
  const engine::BatchGeneration r = engine::generate_batch(e, prompts, kSampling, 0, first);
  BOOST_TEST(all_gathers(e) - before == whole_model);  // once per call, not per token or layer
  before = all_gathers(e);
  engine::generate_batch(e, prompts, {.temperature = 0.0, .max_new_tokens = 2}, 0, first);
  BOOST_TEST(all_gathers(e) - before == whole_model);  // the same for fewer tokens
  BOOST_TEST(e.memory().param_bytes == shard_bytes);   // released: shards again

  // The training forward (ZeRO-3 gathering per unit) on every rank's own rows.
  const int64_t P = r.prompt_columns, N = r.logprobs.size(1);
  const Tensor logits = dynamic_cast<nn::LanguageModel&>(e.model()).forward(r.tokens,
                                                                            nn::left_padding(r.pads, P + N));
  const Tensor logp = rlhf::next_token_log_probs(logits, r.tokens).logp;
  const Tensor recomputed = ops::mul(ops::narrow(logp, 1, P - 1, N), r.answer_mask);
  BOOST_TEST(test::max_abs_diff(recomputed, r.logprobs) < 1e-5);
  BOOST_TEST(ops::max_abs(r.logprobs) > 0.1);
}

BOOST_AUTO_TEST_SUITE_END()  // test_hybrid_engine_mpi
