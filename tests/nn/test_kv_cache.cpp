// Generation with the KV cache equals recomputing the whole sequence.
#include <boost/test/unit_test.hpp>

#include "support/check.h"
#include "triad.h"

BOOST_AUTO_TEST_SUITE(test_kv_cache)

using namespace triad;

namespace {

nn::GPT small_gpt() {
  return nn::GPT({.n_layer = 2, .n_head = 2, .d_model = 16, .seq_len = 12, .vocab_size = 23, .init_seed = 5});
}

Tensor tokens(const std::vector<int64_t>& ids) { return Tensor::from_vector(ids, {1, int64_t(ids.size())}); }

}  // namespace

BOOST_AUTO_TEST_CASE(cached_logits_equal_full_recomputation) {
  nn::GPT model = small_gpt();
  model.eval();
  const std::vector<int64_t> seq = {3, 17, 4, 4, 9, 0, 22, 1, 5, 8, 13, 2};
  const Tensor full = model(tokens(seq));  // (1, 12, V)

  // A prompt of 5, then one token at a time, then a chunk of 3.
  nn::KVCache cache = model.make_cache(1);
  std::vector<Tensor> parts;
  parts.push_back(model.forward_cached(tokens({seq.begin(), seq.begin() + 5}), cache));
  for (int i = 5; i < 9; ++i) parts.push_back(model.forward_cached(tokens({seq[i]}), cache));
  parts.push_back(model.forward_cached(tokens({seq.begin() + 9, seq.end()}), cache));
  BOOST_TEST(cache.length == 12);
  const Tensor cached = cat(parts, 1);
  BOOST_TEST(test::max_abs_diff(cached, full) < 1e-5);
}

BOOST_AUTO_TEST_CASE(cache_rejects_overflow_and_batch_mismatch) {
  nn::GPT model = small_gpt();
  nn::KVCache cache = model.make_cache(1);
  model.forward_cached(tokens(std::vector<int64_t>(10, 1)), cache);
  BOOST_CHECK_THROW(model.forward_cached(tokens({1, 2, 3}), cache), Error);
  nn::KVCache other = model.make_cache(2);
  BOOST_CHECK_THROW(model.forward_cached(tokens({1}), other), Error);
}

// The cache is static: make_cache allocates its whole capacity once, and each step writes
// its positions into that storage and frees whatever else it made, so decoding holds no
// more bytes per token (a cache grown by concatenation would hold a copy more per step).
BOOST_AUTO_TEST_CASE(cache_is_allocated_once_and_written_in_place) {
  nn::GPT model = small_gpt();
  model.eval();
  const Allocator& cpu = cpu_allocator();
  const size_t before = cpu.bytes_in_use();
  nn::KVCache cache = model.make_cache(3);
  // 2 (k, v) x 2 layers x (B 3, NH 2, seq_len 12, hs 8) f32.
  BOOST_TEST(cpu.bytes_in_use() - before == size_t(2 * 2 * 3 * 2 * 12 * 8 * 4));
  std::vector<const void*> storage;
  for (size_t i = 0; i < cache.k.size(); ++i) storage.insert(storage.end(), {cache.k[i].raw_data(), cache.v[i].raw_data()});
  model.forward_cached(Tensor::from_vector(std::vector<int64_t>{1, 2, 3, 4, 5, 6}, {3, 2}), cache);
  const size_t held = cpu.bytes_in_use();
  for (int64_t t = 2; t < 12; ++t) {
    const Tensor logits = model.forward_cached(Tensor::from_vector(std::vector<int64_t>{t, t + 1, t + 2}, {3, 1}), cache);
    BOOST_TEST(logits.size(1) == 1);
  }
  BOOST_TEST(cache.length == 12);
  BOOST_TEST(cpu.bytes_in_use() == held);
  for (size_t i = 0; i < cache.k.size(); ++i) {
    BOOST_TEST(cache.k[i].raw_data() == storage[2 * i]);
    BOOST_TEST(cache.v[i].raw_data() == storage[2 * i + 1]);
  }
}

// A cache whose length the kernels read from device memory (KVCache::device_length, Note
// [Positions on the device]) gives, bit for bit, the logits of the host's length: a
// left-padded prompt chunk, then one column at a time with the caller advancing the length
// and the positions, for the GPT and the Llama (grouped-query attention); the host's length
// advances as before.
BOOST_AUTO_TEST_CASE(a_length_in_device_memory_gives_the_same_logits) {
  nn::GPT gpt = small_gpt();
  nn::Llama llama({.n_layer = 2, .n_head = 4, .n_kv_head = 2, .d_model = 16, .intermediate = 24, .seq_len = 12,
                   .vocab_size = 23, .init_seed = 5});
  const std::vector<int64_t> pads = {2, 0};
  const nn::LeftPadding padding = nn::left_padding(pads, 4);
  const Tensor prompt = Tensor::from_vector(std::vector<int64_t>{0, 0, 7, 1, 3, 17, 4, 9}, {2, 4});
  for (nn::LanguageModel* model : std::initializer_list<nn::LanguageModel*>{&gpt, &llama}) {
    model->eval();
    nn::KVCache host = model->make_cache(2), device = model->make_cache(2);
    host.key_start = device.key_start = padding.key_start;
    const Tensor length = Tensor::from_vector(std::vector<int64_t>{0}, {1});
    device.device_length = length;
    BOOST_TEST(test::max_abs_diff(model->forward_cached(prompt, device, padding.positions),
                                  model->forward_cached(prompt, host, padding.positions)) == 0.0);
    Tensor positions = Tensor::from_vector(std::vector<int64_t>{2, 4}, {2, 1});
    for (int64_t t = 0; t < 6; ++t) {
      ops::increment_(length, t == 0 ? 4 : 1);
      const Tensor ids = Tensor::from_vector(std::vector<int64_t>{t + 1, 20 - t}, {2, 1});
      const Tensor want = model->forward_cached(ids, host, positions);
      BOOST_TEST(test::max_abs_diff(model->forward_cached(ids, device, positions), want) == 0.0, "column " << t);
      ops::increment_(positions, 1);
    }
    BOOST_TEST(device.length == 10);
    BOOST_TEST(length.item() == 9.0);  // the caller advances it before each column
    for (size_t i = 0; i < host.k.size(); ++i) BOOST_TEST(test::max_abs_diff(device.k[i], host.k[i]) == 0.0);
  }
}

BOOST_AUTO_TEST_SUITE_END()  // test_kv_cache
