// Batched generation (engine/generate.h) on a GPU: the log-probs recorded while sampling
// equal those the training forward recomputes on the GPU within 1e-5 (f32), and the GPU
// samples the same tokens as the CPU from the same weights and seed (the draws belong to the
// global sample, whatever the device), GPT and Llama; decode steps replayed as a CUDA graph
// (Note [Decode graphs]) give bit for bit what plain launches give, and hold no memory after
// the call. Needs a GPU; without one the program reports itself skipped (gpu_test_main.h).
#define BOOST_TEST_MODULE generation_cuda
#define BOOST_TEST_NO_MAIN  // main() is TRIAD_GPU_TEST_MAIN's
#include "cuda/gpu_test_main.h"
#include "cuda/runtime.h"
#include "engine/generate.h"
#include "rlhf/log_probs.h"
#include "support/check.h"
#include "triad.h"

TRIAD_GPU_TEST_MAIN()

using namespace triad;

namespace {

const nn::GPTConfig kGpt{.n_layer = 2, .n_head = 2, .d_model = 32, .seq_len = 32, .vocab_size = 29, .init_seed = 5};
const nn::LlamaConfig kLlama{.n_layer = 2, .n_head = 4, .n_kv_head = 2, .d_model = 32, .intermediate = 48,
                             .seq_len = 32, .vocab_size = 29, .init_seed = 5};
const std::vector<std::vector<int32_t>> kPrompts = {{3, 17, 4, 4, 9}, {5, 8}, {11, 2, 7}, {20}, {1, 2, 3, 4, 5, 6}};
const engine::SamplingOptions kSampling{.temperature = 0.9, .top_k = 0, .top_p = 0.95, .max_new_tokens = 16,
                                        .seed = 7, .stop_token = 4};

Tensor host(const Tensor& t) { return ops::to(t, Device::cpu()); }

// model on the GPU and a copy of its weights on the CPU sample the same tokens; the GPU's
// recorded log-probs equal its own training forward's and the CPU's.
void check_device_agreement(nn::LanguageModel& gpu, nn::LanguageModel& cpu) {
  gpu.to(Device::cuda());
  const engine::BatchGeneration g = engine::generate_batch(gpu, kPrompts, kSampling, 0, 3);
  const engine::BatchGeneration c = engine::generate_batch(cpu, kPrompts, kSampling, 0, 3);
  BOOST_TEST(g.pads == c.pads, boost::test_tools::per_element());
  BOOST_TEST(test::max_abs_diff(g.tokens, c.tokens) == 0.0);
  BOOST_TEST(test::max_abs_diff(g.answer_mask, c.answer_mask) == 0.0);
  BOOST_TEST(test::max_abs_diff(g.logprobs, c.logprobs) < 1e-4);

  const int64_t P = g.prompt_columns, N = g.logprobs.size(1), T = g.tokens.size(1);
  BOOST_TEST_REQUIRE(N > 0);
  gpu.train();  // the results are on the host: the training forward takes the tokens to the GPU
  const Tensor tokens = ops::to(g.tokens, Device::cuda());
  const Tensor logits = gpu.forward(tokens, nn::left_padding(g.pads, T, Device::cuda()));
  const Tensor logp = rlhf::next_token_log_probs(logits, tokens).logp;
  const Tensor recomputed = ops::mul(host(ops::narrow(logp, 1, P - 1, N)), g.answer_mask);
  BOOST_TEST(test::max_abs_diff(recomputed, g.logprobs) < 1e-5);
  BOOST_TEST(ops::max_abs(g.logprobs) > 0.1);
}

}  // namespace

BOOST_AUTO_TEST_CASE(gpt_on_the_gpu_samples_as_the_cpu_and_as_training_computes) {
  nn::GPT gpu(kGpt), cpu(kGpt);
  check_device_agreement(gpu, cpu);
}

BOOST_AUTO_TEST_CASE(llama_on_the_gpu_samples_as_the_cpu_and_as_training_computes) {
  nn::Llama gpu(kLlama), cpu(kLlama);
  check_device_agreement(gpu, cpu);
}

// With and without CUDA graphs, greedy and sampled (f32 here; the GPU kit's decode_graphs
// checks bf16 GPT-2): the same tokens, log-probabilities and masks bit for bit; the graph's
// memory pool goes back to the ordinary cache (what tensors hold after the call is what they
// held before).
BOOST_AUTO_TEST_CASE(cuda_graphs_generate_what_plain_launches_generate) {
  nn::GPT gpt(kGpt);
  nn::Llama llama(kLlama);
  for (nn::LanguageModel* model : std::initializer_list<nn::LanguageModel*>{&gpt, &llama}) {
    model->to(Device::cuda());
    for (double temperature : {0.0, 0.9}) {
      engine::SamplingOptions o = kSampling;
      o.temperature = temperature;
      o.stop_token = -1;  // every row runs all steps: every replay counts
      o.cuda_graph = false;
      const engine::BatchGeneration eager = engine::generate_batch(*model, kPrompts, o, 0, 3);
      const size_t before = cuda::memory_stats(0).allocated_bytes;
      o.cuda_graph = true;
      const engine::BatchGeneration graph = engine::generate_batch(*model, kPrompts, o, 0, 3);
      const std::string what = model->type_name() + " temperature " + std::to_string(temperature);
      BOOST_TEST(test::max_abs_diff(graph.tokens, eager.tokens) == 0.0, what);
      BOOST_TEST(test::max_abs_diff(graph.logprobs, eager.logprobs) == 0.0, what);
      BOOST_TEST(test::max_abs_diff(graph.answer_mask, eager.answer_mask) == 0.0, what);
      BOOST_TEST(graph.logprobs.size(1) == o.max_new_tokens, what);
      BOOST_TEST(cuda::memory_stats(0).allocated_bytes == before, what);
    }
  }
}
