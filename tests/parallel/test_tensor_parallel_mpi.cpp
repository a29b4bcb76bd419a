// Tensor parallelism on tp = every rank of the world (2, 4 and 8): each conjugate function
// against its closed form, forward and backward; each parallel layer, the vocab-parallel
// cross-entropy and a whole GPT (with and without sequence parallelism, a vocabulary that
// needs padding; its generation and left-padded batches too) against the single-process
// layer built from the same generator: outputs equal, and each rank's parameter gradients
// equal its part of the single-process ones.
#include <boost/test/unit_test.hpp>

#include "autograd/checkpoint.h"
#include "parallel/counting_communicator.h"
#include "parallel/runtime.h"
#include "parallel/tensor_parallel_functions.h"
#include "parallel/tensor_parallel_layers.h"
#include "support/check.h"
#include "tensor/allocator.h"
#include "triad.h"

BOOST_AUTO_TEST_SUITE(test_tensor_parallel_mpi)

using namespace triad;
using namespace triad::parallel;
using test::relative_error;

namespace {

constexpr double kTol = 1e-5;

Tensor random_tensor(const Shape& shape, uint64_t seed) {
  Generator gen(seed);
  Tensor t = Tensor::empty(shape);
  ops::normal_(t, 0.0, 1.0, gen);
  return t;
}

Tensor leaf(const Tensor& t) {
  Tensor x = ops::clone(t);
  set_requires_grad(x, true);
  return x;
}

// Σ y · w: a loss whose gradient with respect to y is w.
Tensor weighted(const Tensor& y, const Tensor& w) { return sum(mul(y, w)); }

Tensor seq_part(const Tensor& t, int r, int n) {
  return ops::contiguous(ops::narrow(t, 1, r * (t.size(1) / n), t.size(1) / n));
}
Tensor last_part(const Tensor& t, int r, int n) {
  return ops::contiguous(ops::narrow(t, t.dim() - 1, r * (t.size(-1) / n), t.size(-1) / n));
}

}  // namespace

BOOST_AUTO_TEST_CASE(conjugate_functions_match_their_closed_forms) {
  const CommunicatorPtr tp = world();
  const int n = tp->size(), r = tp->rank();
  const double ranks_sum = n * (n + 1) / 2.0;  // Σ (r + 1)
  const Shape shape{2, 4 * n, 3 * n};
  const Tensor base = random_tensor(shape, 1), wbase = random_tensor(shape, 2);
  const Tensor mine = ops::mul(base, double(r + 1)), w_mine = ops::mul(wbase, double(r + 1));

  {  // copy: identity forward, all-reduce backward
    Tensor x = leaf(base);
    Tensor y = copy_to_tp_region(x, tp);
    BOOST_TEST(relative_error(y, base) == 0.0);
    backward(weighted(y, w_mine));
    BOOST_TEST(relative_error(grad(x), ops::mul(wbase, ranks_sum)) < kTol);
  }
  {  // reduce: all-reduce forward, identity backward
    Tensor x = leaf(mine);
    Tensor y = reduce_from_tp_region(x, tp);
    BOOST_TEST(relative_error(y, ops::mul(base, ranks_sum)) < kTol);
    backward(weighted(y, w_mine));
    BOOST_TEST(relative_error(grad(x), w_mine) == 0.0);
  }
  {  // split the last dimension / gather it back
    Tensor x = leaf(base);
    Tensor y = split_to_tp_region(x, tp);
    BOOST_TEST(relative_error(y, last_part(base, r, n)) == 0.0);
    backward(weighted(y, last_part(w_mine, r, n)));  // all-gather of every rank's slice
    for (int q = 0; q < n; ++q)
      BOOST_TEST(relative_error(last_part(grad(x), q, n), ops::mul(last_part(wbase, q, n), double(q + 1))) == 0.0);
  }
  {  // gather the last dimension: forward all-gather, backward own slice
    Tensor x = leaf(last_part(base, r, n));
    Tensor y = gather_from_tp_region(x, tp);
    BOOST_TEST(relative_error(y, base) == 0.0);
    backward(weighted(y, w_mine));
    BOOST_TEST(relative_error(grad(x), last_part(w_mine, r, n)) == 0.0);
  }
  {  // sequence: scatter / gather / reduce-scatter along T
    Tensor x = leaf(base);
    Tensor y = scatter_to_sequence_region(x, tp);
    BOOST_TEST(relative_error(y, seq_part(base, r, n)) == 0.0);
    backward(weighted(y, seq_part(w_mine, r, n)));
    for (int q = 0; q < n; ++q)
      BOOST_TEST(relative_error(seq_part(grad(x), q, n), ops::mul(seq_part(wbase, q, n), double(q + 1))) == 0.0);
  }
  {
    Tensor x = leaf(seq_part(base, r, n));
    Tensor y = gather_from_sequence_region(x, tp);
    BOOST_TEST(relative_error(y, base) == 0.0);
    backward(weighted(y, w_mine));  // reduce-scatter: Σ_q (q + 1) wbase, this rank's tokens
    BOOST_TEST(relative_error(grad(x), ops::mul(seq_part(wbase, r, n), ranks_sum)) < kTol);
  }
  {  // to the replicated sequence: forward all-gather, backward own slice (no sum)
    Tensor x = leaf(seq_part(base, r, n));
    Tensor y = gather_to_replicated_sequence(x, tp);
    BOOST_TEST(relative_error(y, base) == 0.0);
    backward(weighted(y, w_mine));
    BOOST_TEST(relative_error(grad(x), seq_part(w_mine, r, n)) == 0.0);
  }
  {
    Tensor x = leaf(mine);
    Tensor y = reduce_scatter_to_sequence_region(x, tp);
    BOOST_TEST(relative_error(y, ops::mul(seq_part(base, r, n), ranks_sum)) < kTol);
    backward(weighted(y, seq_part(w_mine, r, n)));  // all-gather of every rank's slice
    for (int q = 0; q < n; ++q)
      BOOST_TEST(relative_error(seq_part(grad(x), q, n), ops::mul(seq_part(wbase, q, n), double(q + 1))) == 0.0);
  }
}

namespace {

// A parameter's gradient on this rank against its part of the single-process gradient.
void check_part(const nn::Module& layer, const nn::Module& serial) {
  const auto splits = layer.named_splits();
  const auto params = layer.named_parameters(), ref = serial.named_parameters();
  BOOST_REQUIRE_EQUAL(params.size(), ref.size());
  for (size_t i = 0; i < params.size(); ++i) {
    const Tensor& p = params[i].second;
    const nn::TensorSplit& s = splits[i].second;
    BOOST_TEST(relative_error(p, nn::local_part(ref[i].second, s, p.shape())) == 0.0, params[i].first << " value");
    BOOST_TEST(relative_error(grad(p), nn::local_part(grad(ref[i].second), s, p.shape())) < kTol,
               params[i].first << " gradient");
  }
}

}  // namespace

BOOST_AUTO_TEST_CASE(parallel_linears_equal_the_single_process_linear) {
  const CommunicatorPtr tp = world();
  const int n = tp->size(), r = tp->rank();
  const int64_t in = 2 * n, out = 3 * n;  // odd per-rank widths: 2 and 3 features
  const Tensor x = random_tensor({2, 4 * n, in}, 3), w = random_tensor({2, 4 * n, out}, 4);
  for (bool sp : {false, true}) {
    Generator g1(5), g2(5);
    nn::Linear serial(in, out, true, g1);
    ColumnParallelLinear column(in, out, tp, {.gather_output = !sp, .sequence_parallel = sp}, g2);
    Tensor xs = leaf(x), xp = leaf(sp ? seq_part(x, r, n) : x);
    backward(weighted(serial(xs), w));
    const Tensor y = column(xp);
    BOOST_TEST(relative_error(y, sp ? last_part(serial(x), r, n) : serial(x)) < kTol);
    backward(weighted(y, sp ? last_part(w, r, n) : w));
    check_part(column, serial);
    BOOST_TEST(relative_error(grad(xp), sp ? seq_part(grad(xs), r, n) : grad(xs)) < kTol);
  }
  for (bool sp : {false, true}) {
    Generator g1(6), g2(6);
    nn::Linear serial(out, in, true, g1);
    RowParallelLinear row(out, in, tp, {.input_is_parallel = sp, .sequence_parallel = sp}, g2);
    const Tensor xr = random_tensor({2, 4 * n, out}, 7), wr = random_tensor({2, 4 * n, in}, 8);
    Tensor xs = leaf(xr), xp = leaf(sp ? last_part(xr, r, n) : xr);
    const Tensor ys = serial(xs);
    backward(weighted(ys, wr));
    const Tensor y = row(xp);
    BOOST_TEST(relative_error(y, sp ? seq_part(ys, r, n) : ys) < kTol);
    backward(weighted(y, sp ? seq_part(wr, r, n) : wr));
    // With sequence parallelism the bias sees only this rank's tokens: summed over the
    // ranks it is the single-process gradient.
    if (sp) {
      Tensor bias_grad = ops::clone(grad(row.bias));
      tp->all_reduce(bias_grad)->wait();
      BOOST_TEST(relative_error(bias_grad, grad(serial.bias)) < kTol);
      BOOST_TEST(row.named_splits()[1].second.partial_grad);
      BOOST_TEST(relative_error(grad(row.weight), nn::local_part(grad(serial.weight), row.named_splits()[0].second,
                                                                 row.weight.shape())) < kTol);
      BOOST_TEST(relative_error(grad(xp), last_part(grad(xs), r, n)) < kTol);
    } else {
      check_part(row, serial);
      BOOST_TEST(relative_error(grad(xp), grad(xs)) < kTol);
    }
  }
}

BOOST_AUTO_TEST_CASE(fused_qkv_column_splits_each_part) {
  const CommunicatorPtr tp = world();
  const int n = tp->size(), r = tp->rank();
  const int64_t C = 4 * n;
  Generator g1(9), g2(9);
  nn::Linear serial(C, 3 * C, true, g1);
  ColumnParallelLinear qkv(C, 3 * C, tp, {.parts = 3}, g2);
  const Tensor x = random_tensor({3, 5, C}, 10), w = random_tensor({3, 5, 3 * C}, 11);
  Tensor xs = leaf(x), xp = leaf(x);
  const Tensor ys = serial(xs);
  backward(weighted(ys, w));
  const nn::TensorSplit by_parts = nn::split_along(2, n, r, 3 * C, 3);  // q, k, v each split
  const Tensor y = qkv(xp);
  BOOST_TEST(relative_error(y, nn::local_part(ys, by_parts, y.shape())) < kTol);
  backward(weighted(y, nn::local_part(w, by_parts, y.shape())));
  check_part(qkv, serial);
  BOOST_TEST(relative_error(grad(xp), grad(xs)) < kTol);
}

BOOST_AUTO_TEST_CASE(vocab_parallel_embedding_pads_and_equals_the_embedding) {
  const CommunicatorPtr tp = world();
  const int n = tp->size(), r = tp->rank();
  const int64_t V = 50, C = 6;  // 50 rows padded to 64 n: the last ranks hold padding only
  for (bool sp : {false, true}) {
    Generator g1(12), g2(12);
    nn::Embedding serial(V, C, g1);
    VocabParallelEmbedding emb(V, C, tp, sp, 64, g2);
    BOOST_TEST(emb.weight.size(0) == vocab_rows_per_rank(V, n));
    BOOST_TEST(vocab_rows_per_rank(V, n) * n % (64 * n) == 0);
    std::vector<int64_t> ids;
    for (int64_t i = 0; i < 2 * 4 * n; ++i) ids.push_back((i * 37 + 11) % V);
    const Tensor idx = Tensor::from_vector(ids, {2, 4 * n});
    const Tensor w = random_tensor({2, 4 * n, C}, 13);
    const Tensor ys = serial(idx);
    backward(weighted(ys, w));
    const Tensor y = emb(idx);
    BOOST_TEST(relative_error(y, sp ? seq_part(ys, r, n) : ys) < kTol);
    backward(weighted(y, sp ? seq_part(w, r, n) : w));
    check_part(emb, serial);
  }
  test::check_error(
      [&] {
        VocabParallelEmbedding(V, C, tp)(Tensor::from_vector(std::vector<int64_t>{V}, {1, 1}));
      },
      {"embedding: index 50", "out of range [0, 50)"});
}

BOOST_AUTO_TEST_CASE(vocab_parallel_cross_entropy_equals_cross_entropy_without_gathering) {
  const CommunicatorPtr tp = world();
  const int n = tp->size(), r = tp->rank();
  for (int64_t V : {int64_t(50), int64_t(4000)}) {
    const int64_t N = 64, rows = vocab_rows_per_rank(V, n);
    const Tensor logits = ops::mul(random_tensor({N, V}, 14), 3.0);
    std::vector<int64_t> t;
    for (int64_t i = 0; i < N; ++i) t.push_back(i % 7 == 3 ? -100 : (i * 131 + 5) % V);
    const Tensor targets = Tensor::from_vector(t, {N});
    Tensor ls = leaf(logits);
    const Tensor loss_s = cross_entropy(ls, targets);
    backward(loss_s);
    // This rank's columns: [r rows, (r + 1) rows) of the padded vocabulary.
    const nn::TensorSplit split = nn::split_along(1, n, r, V);
    Tensor lp = leaf(nn::local_part(logits, split, {N, rows}));
    cpu_allocator().reset_peak();
    const size_t before = cpu_allocator().bytes_in_use();
    const Tensor loss = vocab_parallel_cross_entropy(lp, targets, tp, int64_t(r) * rows, V);
    backward(loss);
    const size_t peak = cpu_allocator().peak_bytes() - before;
    BOOST_TEST(std::abs(loss.item() - loss_s.item()) / loss_s.item() < kTol);
    BOOST_TEST(relative_error(grad(lp), nn::local_part(grad(ls), split, {N, rows})) < kTol);
    // Every tensor it makes is (N, rows) or smaller: a handful of them at most, never the
    // (N, V) logits a gather would assemble (for V = 4000 at tp >= 4 their bound is below
    // one such tensor).
    BOOST_TEST(peak <= size_t(6 * N * rows) * sizeof(float), "peak " << peak << " bytes");
  }
}

// The fused head loss (Note [Fused classifier]) on each rank's rows of a padded table
// equals the single-process linear + cross_entropy, in loss and gradients: 37 rows in chunks
// of 5, ignored rows; at V = 50 the ranks after the first hold only padding rows.
BOOST_AUTO_TEST_CASE(vocab_parallel_linear_cross_entropy_equals_linear_and_cross_entropy) {
  const CommunicatorPtr tp = world();
  const int n = tp->size(), r = tp->rank();
  for (int64_t V : {int64_t(50), int64_t(4000)}) {
    const int64_t N = 37, C = 8, rows = vocab_rows_per_rank(V, n);
    const Tensor x = random_tensor({N, C}, 15), table = random_tensor({rows * n, C}, 16);
    std::vector<int64_t> t;
    for (int64_t i = 0; i < N; ++i) t.push_back(i % 7 == 3 ? -100 : (i * 131 + 5) % V);
    const Tensor targets = Tensor::from_vector(t, {N});
    Tensor xs = leaf(x), ws = leaf(table);
    const Tensor loss_s = cross_entropy(linear(xs, ws), targets, -100, V);
    backward(mul(loss_s, 0.5));
    Tensor xp = leaf(x), wp = leaf(ops::narrow(table, 0, r * rows, rows));
    const Tensor loss =
        vocab_parallel_linear_cross_entropy(copy_to_tp_region(xp, tp), wp, targets, tp, r * rows, V, -100, 5);
    backward(mul(loss, 0.5));
    BOOST_TEST(std::abs(loss.item() - loss_s.item()) / loss_s.item() < 1e-6);
    BOOST_TEST(relative_error(grad(xp), grad(xs)) < 1e-6);
    BOOST_TEST(relative_error(grad(wp), ops::narrow(grad(ws), 0, r * rows, rows)) < 1e-6);
  }
}

namespace {

nn::GPTConfig gpt_config(int n, double dropout = 0.0, bool checkpointing = false) {
  // heads and 4C divisible by every tp; a vocabulary of 50 is padded to 64 n.
  return nn::GPTConfig{.n_layer = 2,
                       .n_head = 8,
                       .d_model = 32,
                       .seq_len = 4 * n,
                       .vocab_size = 50,
                       .dropout = dropout,
                       .activation_checkpointing = checkpointing,
                       .init_seed = 21};
}

Tensor token_batch(int64_t B, int64_t T, int64_t V, uint64_t seed) {
  std::vector<int64_t> ids;
  for (int64_t i = 0; i < B * T; ++i) ids.push_back(int64_t(random_bits(seed, uint64_t(i)) % uint64_t(V)));
  return Tensor::from_vector(ids, {B, T});
}

}  // namespace

BOOST_AUTO_TEST_CASE(gpt_on_tp_ranks_equals_the_single_process_gpt) {
  const CommunicatorPtr tp = world();
  const int n = tp->size();
  const nn::GPTConfig config = gpt_config(n);
  const Tensor inputs = token_batch(3, 4 * n, 50, 1), targets = token_batch(3, 4 * n, 50, 2);
  nn::GPT serial(config);
  const Tensor ref = serial.loss(inputs, targets);
  backward(ref);
  for (bool sp : {false, true}) {
    nn::GPT model(config, std::make_shared<TensorParallel>(tp, sp));
    const Tensor loss = model.loss(inputs, targets);
    BOOST_TEST(std::abs(loss.item() - ref.item()) / ref.item() < kTol, "sequence_parallel " << sp);
    backward(loss);
    const auto splits = model.named_splits();
    const auto params = model.named_parameters(), refs = serial.named_parameters();
    BOOST_REQUIRE_EQUAL(params.size(), refs.size());
    int partial = 0;
    for (size_t i = 0; i < params.size(); ++i) {
      const auto& [name, p] = params[i];
      const nn::TensorSplit& s = splits[i].second;
      BOOST_TEST(relative_error(p, nn::local_part(refs[i].second, s, p.shape())) == 0.0, name << " value");
      Tensor g = ops::clone(grad(p));
      if (s.partial_grad) tp->all_reduce(g)->wait(), ++partial;
      BOOST_TEST(relative_error(g, nn::local_part(grad(refs[i].second), s, p.shape())) < kTol, name << " gradient");
    }
    // wpe, ln_f's two and per block ln1's, ln2's and both row-parallel biases.
    BOOST_TEST(partial == (sp ? 1 + 2 + 2 * 6 : 0));
    // Generation (with sequence parallelism paused: every rank runs the whole columns): each
    // rank caches its heads; the logits come back whole.
    nn::KVCache cache = model.make_cache(3), serial_cache = serial.make_cache(3);
    BOOST_TEST(cache.k[0].size(1) == config.n_head / n);
    const Tensor prompt = ops::contiguous(ops::narrow(inputs, 1, 0, 3));
    BOOST_TEST(relative_error(model.forward_cached(prompt, cache), serial.forward_cached(prompt, serial_cache)) < kTol,
               "sequence_parallel " << sp);
    const Tensor next = ops::contiguous(ops::narrow(inputs, 1, 3, 1));
    BOOST_TEST(relative_error(model.forward_cached(next, cache), serial.forward_cached(next, serial_cache)) < kTol,
               "sequence_parallel " << sp);
    BOOST_TEST(model.parallelism().sequence_parallel() == sp);  // the pause ended with the call
    // A left-padded batch: with sequence parallelism each rank's residual stream holds its
    // columns (their positions read from the whole batch's); the logits are one process's.
    const nn::LeftPadding padding = nn::left_padding({0, 2, 5}, 4 * n);
    NoGradGuard no_grad;
    const Tensor padded = model.parallelism().full_logits(model.forward(inputs, padding), config.vocab_size);
    const Tensor whole = ops::contiguous(ops::narrow(serial.forward(inputs, padding), 2, 0, config.vocab_size));
    BOOST_TEST(relative_error(padded, whole) < kTol, "sequence_parallel " << sp);
  }
}

// A Llama with sequence parallelism (its q, k and v read the gathered columns with the
// whole batch's rotary positions): a left-padded batch's logits, and generation (sequence
// parallelism paused), are one process's.
BOOST_AUTO_TEST_CASE(llama_with_sequence_parallelism_pads_and_generates_as_one_process) {
  const CommunicatorPtr tp = world();
  const int n = tp->size();
  const nn::LlamaConfig config{
      .n_layer = 2, .n_head = 8, .n_kv_head = 8, .d_model = 32, .intermediate = 64, .seq_len = 4 * n, .vocab_size = 64};
  nn::Llama serial(config), model(config, std::make_shared<TensorParallel>(tp, true));
  const Tensor inputs = token_batch(3, 4 * n, 64, 3);
  NoGradGuard no_grad;
  const nn::LeftPadding padding = nn::left_padding({0, 2, 5}, 4 * n);
  BOOST_TEST(relative_error(tp_ops::all_gather_last(model.forward(inputs, padding), *tp),
                            serial.forward(inputs, padding)) < kTol);
  nn::KVCache cache = model.make_cache(3), serial_cache = serial.make_cache(3);
  const Tensor prompt = ops::contiguous(ops::narrow(inputs, 1, 0, 3));
  const Tensor next = ops::contiguous(ops::narrow(inputs, 1, 3, 1));
  BOOST_TEST(relative_error(model.forward_cached(prompt, cache), serial.forward_cached(prompt, serial_cache)) < kTol);
  BOOST_TEST(relative_error(model.forward_cached(next, cache), serial.forward_cached(next, serial_cache)) < kTol);
}

// Dropout inside the tensor-parallel region draws a stream per rank, outside it the same
// stream on every rank; activation checkpointing replays both exactly.
BOOST_AUTO_TEST_CASE(dropout_under_tp_is_replayed_by_activation_checkpointing) {
  const CommunicatorPtr tp = world();
  const int n = tp->size();
  const Tensor inputs = token_batch(2, 4 * n, 50, 3), targets = token_batch(2, 4 * n, 50, 4);
  for (bool sp : {false, true}) {
    std::vector<std::vector<Tensor>> grads;
    std::vector<double> losses;
    for (bool checkpointing : {false, true}) {
      nn::GPT model(gpt_config(n, 0.2, checkpointing), std::make_shared<TensorParallel>(tp, sp));
      default_generator().manual_seed(77);
      tensor_parallel_generator().manual_seed(100 + uint64_t(tp->rank()));
      const Tensor loss = model.loss(inputs, targets);
      backward(loss);
      losses.push_back(loss.item());
      grads.emplace_back();
      for (const Tensor& p : model.parameters()) grads.back().push_back(ops::clone(grad(p)));
    }
    BOOST_TEST(losses[0] == losses[1], "sequence_parallel " << sp);
    for (size_t i = 0; i < grads[0].size(); ++i) BOOST_TEST(relative_error(grads[1][i], grads[0][i]) < kTol);
    // Every rank ends with the same loss (the loss is of the whole batch).
    Tensor l = Tensor::full({1}, losses[0], DType::f64);
    tp->all_reduce(l, ReduceOp::max)->wait();
    BOOST_TEST(l.item() == losses[0]);
  }
}

// Bus bytes of one forward and backward on the tp axis: per layer 2 all-reduces of B·T·C
// forward and 2 backward, plus the embedding's (forward) and the head's (backward), each
// 2(n−1)/n of its bytes; sequence parallelism moves the same volume as all-gathers and
// reduce-scatters ((n−1)/n each, twice as many). The cross-entropy adds the all-reduce of
// its row maxima and of its row sums and target logits (3 floats per row).
BOOST_AUTO_TEST_CASE(tp_bus_bytes_equal_the_closed_form) {
  const CommunicatorPtr world_comm = world();
  const int n = world_comm->size();
  const nn::GPTConfig config = gpt_config(n);
  const int64_t B = 3, T = 4 * n, C = config.d_model, L = config.n_layer;
  const Tensor inputs = token_batch(B, T, 50, 5), targets = token_batch(B, T, 50, 6);
  const double f = 2.0 * (n - 1) / n, act = double(B * T * C) * sizeof(float);
  const double expected = (4 * L + 2) * act * f + 3.0 * double(B * T) * sizeof(float) * f;
  for (bool sp : {false, true}) {
    auto tp = std::make_shared<CountingCommunicator>(world_comm);
    nn::GPT model(config, std::make_shared<TensorParallel>(tp, sp));
    tp->reset();
    backward(model.loss(inputs, targets));
    BOOST_TEST(std::abs(tp->bus_bytes() - expected) / expected < 0.01,
               "sequence_parallel " << sp << ": " << tp->bus_bytes() << " bus bytes, closed form " << expected);
  }
}

BOOST_AUTO_TEST_SUITE_END()  // test_tensor_parallel_mpi
