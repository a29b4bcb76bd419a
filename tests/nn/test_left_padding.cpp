// Left-padded batches (Note [Left-padded batches] in nn/language_model.h): attention with a
// per-row first key, and the GPT and the Llama given per-token positions, give every row
// exactly what that row gives alone without padding (logits, full and cached, and the
// gradients through its real tokens); pad queries output 0 and pass no gradient.
#include <boost/test/unit_test.hpp>

#include "support/check.h"
#include "triad.h"

BOOST_AUTO_TEST_SUITE(test_left_padding)

using namespace triad;

namespace {

// Three rows of lengths 7, 4 and 1, left-padded to 7 columns.
const std::vector<std::vector<int64_t>> kRows = {{3, 17, 4, 4, 9, 0, 22}, {5, 8, 13, 2}, {11}};
constexpr int64_t kT = 7;
const std::vector<int64_t> kPads = {0, 3, 6};
constexpr int64_t kPadToken = 1;  // any token: the pads' values do not matter

Tensor tokens(const std::vector<int64_t>& ids) { return Tensor::from_vector(ids, {1, int64_t(ids.size())}); }

Tensor padded_batch() {
  std::vector<int64_t> ids;
  for (size_t b = 0; b < kRows.size(); ++b) {
    ids.insert(ids.end(), size_t(kPads[b]), kPadToken);
    ids.insert(ids.end(), kRows[b].begin(), kRows[b].end());
  }
  return Tensor::from_vector(ids, {int64_t(kRows.size()), kT});
}

// Row b's real columns of a padded (B, T, ...) result.
Tensor real_part(const Tensor& t, size_t b) {
  return ops::narrow(ops::narrow(t, 0, int64_t(b), 1), 1, kPads[b], kT - kPads[b]);
}

nn::GPT small_gpt() {
  return nn::GPT({.n_layer = 2, .n_head = 2, .d_model = 16, .seq_len = 12, .vocab_size = 23, .init_seed = 5});
}
nn::Llama small_llama() {
  return nn::Llama({.n_layer = 2, .n_head = 4, .n_kv_head = 2, .d_model = 16, .intermediate = 24, .seq_len = 12,
                    .vocab_size = 23, .init_seed = 5});
}

void full_forward_matches_rows_alone(nn::LanguageModel& model) {
  model.eval();
  const Tensor logits = model.forward(padded_batch(), nn::left_padding(kPads, kT));
  for (size_t b = 0; b < kRows.size(); ++b)
    BOOST_TEST(test::max_abs_diff(real_part(logits, b), model(tokens(kRows[b]))) < 1e-5, "row " << b);
  BOOST_TEST(ops::all_finite(logits));  // pads' logits are finite, if meaningless
}

// The padded prompt through the cache in one chunk, then one column at a time for every
// row (positions going on from each row's own length), equals each row alone extended.
void cached_forward_matches_rows_alone(nn::LanguageModel& model) {
  model.eval();
  const std::vector<int64_t> more = {6, 19, 2};  // three more columns, the same token in every row
  nn::KVCache cache = model.make_cache(int64_t(kRows.size()));
  const nn::LeftPadding padding = nn::left_padding(kPads, kT);
  cache.key_start = padding.key_start;
  std::vector<Tensor> parts = {model.forward_cached(padded_batch(), cache, padding.positions)};
  for (size_t s = 0; s < more.size(); ++s) {
    std::vector<int64_t> pos;
    for (size_t b = 0; b < kRows.size(); ++b) pos.push_back(int64_t(kRows[b].size() + s));
    const std::vector<int64_t> ids(kRows.size(), more[s]);
    parts.push_back(model.forward_cached(Tensor::from_vector(ids, {int64_t(ids.size()), 1}), cache,
                                         Tensor::from_vector(pos, {int64_t(pos.size()), 1})));
  }
  BOOST_TEST(cache.length == kT + 3);
  const Tensor cached = cat(parts, 1);  // (B, T + 3, V)
  for (size_t b = 0; b < kRows.size(); ++b) {
    std::vector<int64_t> alone = kRows[b];
    alone.insert(alone.end(), more.begin(), more.end());
    const Tensor got = ops::narrow(ops::narrow(cached, 0, int64_t(b), 1), 1, kPads[b], int64_t(alone.size()));
    BOOST_TEST(test::max_abs_diff(got, model(tokens(alone))) < 1e-5, "row " << b);
  }
}

// The summed loss of the padded batch's real tokens has the gradients of the rows' losses
// alone, summed: the pads change nothing.
void gradients_match_rows_alone(nn::LanguageModel& model) {
  model.train();
  auto grads = [&] {  // the parameters' gradients, then cleared
    std::vector<Tensor> g;
    for (const Tensor& p : model.parameters()) {
      const Tensor gp = grad(p);
      g.push_back(gp.defined() ? ops::contiguous(gp) : Tensor::zeros(p.shape()));
    }
    model.zero_grad();
    return g;
  };
  auto row_loss = [](const Tensor& logits, const std::vector<int64_t>& row) {  // next-token loss, summed
    const int64_t n = int64_t(row.size()) - 1;
    const std::vector<int64_t> targets(row.begin() + 1, row.end());
    return mul(cross_entropy(narrow(logits, 1, 0, n), Tensor::from_vector(targets, {1, n})), double(n));
  };
  grads();
  const Tensor logits = model.forward(padded_batch(), nn::left_padding(kPads, kT));
  Tensor total;
  for (size_t b = 0; b + 1 < kRows.size(); ++b) {  // the last row, one token, has no target
    const Tensor l = row_loss(narrow(narrow(logits, 0, int64_t(b), 1), 1, kPads[b], kT - kPads[b]), kRows[b]);
    total = total.defined() ? add(total, l) : l;
  }
  backward(total);
  const std::vector<Tensor> padded = grads();
  for (size_t b = 0; b + 1 < kRows.size(); ++b) backward(row_loss(model(tokens(kRows[b])), kRows[b]));
  const std::vector<Tensor> alone = grads();
  for (size_t i = 0; i < padded.size(); ++i)
    BOOST_TEST(test::max_abs_diff(padded[i], alone[i]) < 1e-5, model.named_parameters()[i].first);
}

}  // namespace

BOOST_AUTO_TEST_CASE(attention_with_key_start_equals_each_row_alone) {
  // Rows of 5 columns padded by 0, 2 and 4; two heads, head size 3; a query at each column.
  Generator gen(3);
  const int64_t B = 3, NH = 2, T = 5, hs = 3;
  const Tensor q = Tensor::empty({B, NH, T, hs}, DType::f64), k = Tensor::empty({B, NH, T, hs}, DType::f64),
               v = Tensor::empty({B, NH, T, hs}, DType::f64), g = Tensor::empty({B, NH, T, hs}, DType::f64);
  for (const Tensor& t : {q, k, v, g}) ops::uniform_(t, -1.0, 1.0, gen);
  const std::vector<int64_t> pads = {0, 2, 4};
  const Tensor key_start = Tensor::from_vector(pads, {B});
  const ops::AttentionOut r = ops::causal_attention(q, k, v, 0.5, key_start);
  const ops::AttentionGrads d = ops::causal_attention_backward(q, k, v, r.out, r.lse, g, 0.5, key_start);
  for (int64_t b = 0; b < B; ++b) {
    auto part = [&](const Tensor& t, int64_t first, int64_t n) { return ops::narrow(ops::narrow(t, 0, b, 1), 2, first, n); };
    const int64_t p = pads[size_t(b)], n = T - p;
    const ops::AttentionOut alone = ops::causal_attention(part(q, p, n), part(k, p, n), part(v, p, n), 0.5);
    const ops::AttentionGrads da = ops::causal_attention_backward(part(q, p, n), part(k, p, n), part(v, p, n),
                                                                  alone.out, alone.lse, part(g, p, n), 0.5);
    BOOST_TEST(test::max_abs_diff(part(r.out, p, n), alone.out) < 1e-12);
    BOOST_TEST(test::max_abs_diff(part(d.dq, p, n), da.dq) < 1e-12);
    BOOST_TEST(test::max_abs_diff(part(d.dk, p, n), da.dk) < 1e-12);
    BOOST_TEST(test::max_abs_diff(part(d.dv, p, n), da.dv) < 1e-12);
    if (p > 0) {  // pads: no output, no gradient, to or through them
      BOOST_TEST(ops::max_abs(part(r.out, 0, p)) == 0.0);
      BOOST_TEST(ops::max_abs(part(d.dq, 0, p)) == 0.0);
      BOOST_TEST(ops::max_abs(part(d.dk, 0, p)) == 0.0);
      BOOST_TEST(ops::max_abs(part(d.dv, 0, p)) == 0.0);
    }
  }
}

BOOST_AUTO_TEST_CASE(attention_with_key_start_skips_whole_key_blocks) {
  // 150 columns (three 64-key blocks) with 100 pads: the first block is skipped, the second
  // masked in part; decoding one query after them too.
  Generator gen(4);
  const int64_t T = 150, p = 100, hs = 4;
  const Tensor q = Tensor::empty({1, 1, T, hs}), k = Tensor::empty({1, 1, T, hs}), v = Tensor::empty({1, 1, T, hs});
  for (const Tensor& t : {q, k, v}) ops::uniform_(t, -1.0, 1.0, gen);
  const Tensor out = ops::causal_attention(q, k, v, 0.5, Tensor::from_vector(std::vector<int64_t>{p}, {1})).out;
  auto tail = [&](const Tensor& t, int64_t first) { return ops::narrow(t, 2, first, T - first); };
  BOOST_TEST(test::max_abs_diff(tail(out, p), ops::causal_attention(tail(q, p), tail(k, p), tail(v, p), 0.5).out) < 1e-6);
  const Tensor last = ops::causal_attention(ops::narrow(q, 2, T - 1, 1), k, v, 0.5,
                                            Tensor::from_vector(std::vector<int64_t>{p}, {1})).out;
  BOOST_TEST(test::max_abs_diff(last, ops::narrow(out, 2, T - 1, 1)) < 1e-6);
}

BOOST_AUTO_TEST_CASE(attention_rejects_a_bad_key_start) {
  const Tensor q = Tensor::zeros({2, 1, 3, 4});
  test::check_error([&] { ops::causal_attention(q, q, q, 1.0, Tensor::zeros({3}, DType::i64)); }, {"key_start", "(2,)"});
  test::check_error([&] { ops::causal_attention(q, q, q, 1.0, Tensor::zeros({2}, DType::i32)); }, {"key_start", "i64"});
}

BOOST_AUTO_TEST_CASE(gpt_left_padded_rows_equal_rows_alone) {
  nn::GPT model = small_gpt();
  full_forward_matches_rows_alone(model);
  cached_forward_matches_rows_alone(model);
  gradients_match_rows_alone(model);
}

BOOST_AUTO_TEST_CASE(gpt_with_activation_checkpointing_keeps_the_padding) {
  // The recomputed blocks of the backward see the same key_start as the forward did.
  nn::GPT model({.n_layer = 2, .n_head = 2, .d_model = 16, .seq_len = 12, .vocab_size = 23,
                 .activation_checkpointing = true, .init_seed = 5});
  gradients_match_rows_alone(model);
}

BOOST_AUTO_TEST_CASE(llama_left_padded_rows_equal_rows_alone) {
  nn::Llama model = small_llama();
  full_forward_matches_rows_alone(model);
  cached_forward_matches_rows_alone(model);
  gradients_match_rows_alone(model);
}

BOOST_AUTO_TEST_CASE(padding_is_checked) {
  nn::GPT model = small_gpt();
  test::check_error([&] { nn::left_padding({0, 7}, 7); }, {"row 1", "7 pads"});
  nn::LeftPadding bad = nn::left_padding(kPads, kT);
  bad.positions = ops::narrow(bad.positions, 1, 0, 5);
  test::check_error([&] { model.forward(padded_batch(), bad); }, {"GPT", "positions"});
  bad = nn::left_padding(kPads, kT);
  bad.key_start = Tensor::zeros({2}, DType::i64);
  test::check_error([&] { model.forward(padded_batch(), bad); }, {"GPT", "key_start"});
  bad = nn::left_padding(kPads, kT);
  ops::fill_(bad.positions, 12.0);
  test::check_error([&] { model.forward(padded_batch(), bad); }, {"positions must lie in [0, 12)"});
}

BOOST_AUTO_TEST_SUITE_END()  // test_left_padding
