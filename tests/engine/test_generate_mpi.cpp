// Generation with the model split over a tensor-parallel group (triad-generate --tp): each
// rank's KV cache holds its heads only, the vocabulary-parallel logits are gathered before
// sampling, and every rank samples the same tokens as one process does for the same seed,
// from a model built in place (a GPT, a Llama) and from a weights file read into the tp
// parts.
#include <boost/test/unit_test.hpp>

#include "checkpoint/checkpoint.h"
#include "engine/generate.h"
#include "parallel/runtime.h"
#include "parallel/self_communicator.h"
#include "parallel/tensor_parallel_layers.h"
#include "support/files.h"
#include "support/training.h"

BOOST_AUTO_TEST_SUITE(test_generate_mpi)

using namespace triad;

namespace {

// 8 heads: every group of 2, 4 or 8 ranks divides them; a vocabulary no group divides.
const nn::GPTConfig kModel{.n_layer = 2, .n_head = 8, .d_model = 32, .seq_len = 12, .vocab_size = 37, .init_seed = 5};
const engine::SamplingOptions kSampling{.temperature = 0.9, .top_k = 0, .top_p = 1.0, .max_new_tokens = 30, .seed = 7};
const std::vector<int32_t> kPrompt = {3, 1, 4, 1, 5};

}  // namespace

BOOST_AUTO_TEST_CASE(a_tensor_parallel_model_samples_the_tokens_of_one_process) {
  const parallel::CommunicatorPtr world = parallel::world();
  nn::GPT one(kModel);
  const std::vector<int32_t> want = engine::generate(one, kPrompt, kSampling);
  BOOST_TEST_REQUIRE(want.size() == 30u);  // 5 + 30 > seq_len 12: the caches were rebuilt
  nn::GPT split(kModel, std::make_shared<parallel::TensorParallel>(world, false));
  BOOST_TEST(split.make_cache(1).k[0].size(1) == 8 / world->size());  // this rank's heads
  BOOST_TEST(engine::generate(split, kPrompt, kSampling) == want, boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(a_tensor_parallel_llama_samples_the_tokens_of_one_process) {
  // 16 query heads over 8 key/value heads, 24 hidden units and 40 tokens: any group of 2,
  // 4 or 8 ranks splits them.
  const nn::LlamaConfig config{.n_layer = 2, .n_head = 16, .n_kv_head = 8, .d_model = 64, .intermediate = 24,
                               .seq_len = 12, .vocab_size = 40, .init_seed = 5};
  const parallel::CommunicatorPtr world = parallel::world();
  nn::Llama one(config);
  const std::vector<int32_t> want = engine::generate(one, kPrompt, kSampling);
  BOOST_TEST_REQUIRE(want.size() == 30u);
  nn::Llama split(config, std::make_shared<parallel::TensorParallel>(world, false));
  BOOST_TEST(split.make_cache(1).k[0].size(1) == 8 / world->size());  // this rank's key/value heads
  BOOST_TEST(engine::generate(split, kPrompt, kSampling) == want, boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(a_weights_file_loads_into_tensor_parallel_parts) {
  const parallel::CommunicatorPtr world = parallel::world();
  test::TempDir dir;
  // Rank 0's weights file of a one-process run, known to every rank.
  std::string path = (dir.path() / "model.h5").string();
  Tensor bytes = Tensor::zeros({512}, DType::i8);
  std::copy(path.begin(), path.end(), bytes.data<int8_t>());
  world->broadcast(bytes, 0)->wait();
  path = reinterpret_cast<const char*>(bytes.data<int8_t>());
  if (world->rank() == 0) {
    nlohmann::json j = test::small_gpt_config("unused.bin", 1);
    j["model"] = {{"n_layer", 2}, {"n_head", 8}, {"d_model", 32}, {"seq_len", 12}, {"vocab_size", 37}};
    engine::Engine engine(engine::parse_config(j));
    parallel::SelfCommunicator self;
    engine::save_weights(path, engine, self, DType::f32);
  }
  world->barrier();
  const engine::LoadedModel one = engine::load_model(path);
  const engine::LoadedModel split =
      engine::load_model(path, std::make_shared<parallel::TensorParallel>(world, false));
  BOOST_TEST(engine::generate(*split.model, kPrompt, kSampling) == engine::generate(*one.model, kPrompt, kSampling),
             boost::test_tools::per_element());
  world->barrier();
}

BOOST_AUTO_TEST_SUITE_END()  // test_generate_mpi
