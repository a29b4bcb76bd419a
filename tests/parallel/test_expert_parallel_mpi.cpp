// Expert parallelism on 2, 4 and 8 ranks (dp = world, ep = world and ep = 2): the
// exchanges (capacity slots, and dropless rows of a count per expert) against their closed
// forms, and an MoE layer whose experts are spread over ep
// ranks against the one-process layer with every expert. DeepSpeed's capacity is per rank
// (from that rank's tokens), so the reference runs the one-process layer on each rank's
// slice of the global tokens in turn, with the generator state each rank had: each rank's
// outputs and input gradients equal its slice's; the gate's gradients summed over the world
// and each expert's summed over its expert-data-parallel group equal the reference's,
// which sum over all slices; and so do 10 AdamW steps taken with those sums.
#include <boost/test/unit_test.hpp>

#include "parallel/expert_parallel.h"
#include "parallel/process_grid.h"
#include "parallel/runtime.h"
#include "support/check.h"
#include "triad.h"

BOOST_AUTO_TEST_SUITE(test_expert_parallel_mpi)

using namespace triad;
using namespace triad::parallel;
using nn::MoEConfig;
using test::relative_error;

namespace {

constexpr double kTol = 1e-5;
constexpr int64_t kD = 4;       // features
constexpr int64_t kTokens = 12;  // per rank
constexpr uint64_t kSeed = 7;   // the layer's generator

Tensor random_tensor(const Shape& shape, uint64_t seed) {
  Generator gen(seed);
  Tensor t = Tensor::empty(shape);
  ops::normal_(t, 0.0, 1.0, gen);
  return t;
}

// Rank q's slice of the global tokens at `step`, and the weights of its loss.
Tensor tokens(int q, int step) { return random_tensor({kTokens, kD}, 1000 + 100 * uint64_t(step) + uint64_t(q)); }
Tensor loss_weights(int q, int step) { return random_tensor({kTokens, kD}, 5000 + 100 * uint64_t(step) + uint64_t(q)); }

// The experts' module of global expert e in a layer holding [first, first + count).
nn::Module& expert(nn::MoE& moe, int64_t e) { return *moe.experts->children()[size_t(e - moe.experts->first)].second; }

// One slice's contribution: Σ out · w + the router's losses.
struct Slice {
  Tensor x, out;
  nn::MoEStats stats;
  Tensor loss;
};
Slice run_slice(nn::MoE& moe, int q, int step) {
  Slice s;
  s.x = ops::clone(tokens(q, step));
  set_requires_grad(s.x, true);
  const nn::MoEOutput o = moe.apply(s.x);
  s.out = o.out;
  s.stats = o.stats;
  s.loss = add(sum(mul(o.out, loss_weights(q, step))), o.loss);
  return s;
}

// The one-process reference: every expert, every rank's slice in turn, each routed with
// the generator state every rank starts the step with (the same on all ranks).
std::vector<Slice> reference_step(nn::MoE& ref, Generator& gen, int world, int step) {
  const GeneratorState start = gen.state();
  std::vector<Slice> slices;
  Tensor total;
  for (int q = 0; q < world; ++q) {
    gen.set_state(start);
    slices.push_back(run_slice(ref, q, step));
    total = q == 0 ? slices.back().loss : add(total, slices.back().loss);
  }
  backward(total);
  return slices;
}

// Data parallelism by hand: the gate's gradients summed over the world, each expert's over
// the ranks that hold it (edp).
void reduce_gradients(nn::MoE& moe, const ProcessGrid& grid) {
  for (const Tensor& p : moe.gate->parameters()) grid.world()->all_reduce(grad(p))->wait();
  for (const Tensor& p : moe.experts->parameters()) grid.edp()->all_reduce(grad(p))->wait();
}

void check_parameters_and_gradients(nn::MoE& moe, nn::MoE& ref, bool gradients) {
  auto value = [&](const Tensor& p) { return gradients ? grad(p) : p; };
  BOOST_TEST(relative_error(value(moe.gate->wg->weight), value(ref.gate->wg->weight)) < kTol);
  for (int64_t e = moe.experts->first; e < moe.experts->first + moe.experts->count(); ++e) {
    const auto mine = expert(moe, e).named_parameters(), theirs = expert(ref, e).named_parameters();
    BOOST_REQUIRE(mine.size() == theirs.size());
    for (size_t i = 0; i < mine.size(); ++i)
      BOOST_TEST(relative_error(value(mine[i].second), value(theirs[i].second)) < kTol,
                 "expert " << e << " " << mine[i].first);
  }
}

struct Case {
  const char* name;
  MoEConfig config;
};

std::vector<Case> cases(int64_t experts) {
  return {
      {"top-1 dropping (RTS)", {.num_experts = experts, .min_capacity = 0, .z_loss_coeff = 0.1}},
      {"top-1 dropless", {.num_experts = experts, .drop_tokens = false, .z_loss_coeff = 0.1}},
      {"top-2 dropping (sampled 2nd)", {.num_experts = experts, .k = 2, .capacity_factor = 0.5, .min_capacity = 0}},
      {"top-2 dropless", {.num_experts = experts, .k = 2, .drop_tokens = false}},
  };
}

std::vector<int> ep_sizes(int world) { return world > 2 ? std::vector<int>{world, 2} : std::vector<int>{world}; }

}  // namespace

// The reordering around the all-to-alls is one gather by an index: it equals the copy of
// each block (i, j) to its place j-major bit for bit, in f32 and bf16, blocks of 0 rows
// included, and the gather with the counts and extents transposed undoes it.
BOOST_AUTO_TEST_CASE(transpose_blocks_gather_equals_the_block_copies) {
  const size_t outer = 3, inner = 4;
  const std::vector<int64_t> counts = {2, 0, 1, 3, 0, 0, 4, 1, 5, 2, 0, 1};  // (outer, inner), i-major
  int64_t total = 0;
  for (const int64_t c : counts) total += c;
  for (const DType dtype : {DType::f32, DType::bf16}) {
    const Tensor rows = ops::to(random_tensor({total, kD}, 21), dtype);
    std::vector<int64_t> at(counts.size() + 1, 0);
    for (size_t b = 0; b < counts.size(); ++b) at[b + 1] = at[b] + counts[b];
    const Tensor want = Tensor::empty(rows.shape(), dtype);
    int64_t to = 0;
    for (size_t j = 0; j < inner; ++j)
      for (size_t i = 0; i < outer; ++i) {
        const size_t b = i * inner + j;
        if (counts[b] > 0) ops::copy_(ops::narrow(want, 0, to, counts[b]), ops::narrow(rows, 0, at[b], counts[b]));
        to += counts[b];
      }
    const Tensor got = ep_ops::transpose_blocks(rows, counts, outer, inner);
    BOOST_TEST(ops::to(got, DType::f32).to_vector<float>() == ops::to(want, DType::f32).to_vector<float>(),
               boost::test_tools::per_element());
    std::vector<int64_t> transposed(counts.size());
    for (size_t i = 0; i < outer; ++i)
      for (size_t j = 0; j < inner; ++j) transposed[j * outer + i] = counts[i * inner + j];
    const Tensor back = ep_ops::transpose_blocks(got, transposed, inner, outer);
    BOOST_TEST(test::max_abs_diff(back, rows) == 0.0);
  }
  BOOST_TEST(ep_ops::transpose_blocks_index({2, 1, 3}, 1, 3) == (std::vector<int64_t>{0, 1, 2, 3, 4, 5}),
             boost::test_tools::per_element());
  BOOST_TEST(ep_ops::transpose_blocks_index({1, 2, 1, 1}, 2, 2) == (std::vector<int64_t>{0, 3, 1, 2, 4}),
             boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(exchange_moves_each_experts_slots_to_its_rank_and_back) {
  const int n = world()->size(), r = world()->rank();
  const ExpertParallel exchange(world());
  const int64_t E = 2 * n, C = 3, local = 2;
  // Slot (e, c, i) of rank q holds 1000 q + 100 e + 10 c + i.
  auto value = [](int q, int64_t e, int64_t c, int64_t i) { return 1000.0 * q + 100.0 * e + 10.0 * c + i; };
  std::vector<float> mine;  // small integers: exact in f32
  for (int64_t e = 0; e < E; ++e)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t i = 0; i < kD; ++i) mine.push_back(float(value(r, e, c, i)));
  Tensor slots = Tensor::from_vector(mine, {E, C, kD});
  set_requires_grad(slots, true);
  const Tensor at_experts = exchange.to_experts(slots);
  BOOST_REQUIRE(at_experts.shape() == (Shape{local, n * C, kD}));
  const std::vector<double> got = at_experts.to_vector<double>();
  bool all_equal = true;
  for (int64_t el = 0; el < local; ++el)
    for (int q = 0; q < n; ++q)
      for (int64_t c = 0; c < C; ++c)
        for (int64_t i = 0; i < kD; ++i)
          all_equal &= got[size_t(((el * n + q) * C + c) * kD + i)] == value(q, r * local + el, c, i);
  BOOST_TEST(all_equal);
  // from_experts inverts it, and the backward of the round trip is the identity.
  const Tensor back = exchange.from_experts(at_experts);
  BOOST_TEST(test::max_abs_diff(back, slots) == 0.0);
  const Tensor w = random_tensor({E, C, kD}, 11 + uint64_t(r));
  backward(sum(mul(back, w)));
  BOOST_TEST(test::max_abs_diff(grad(slots), w) == 0.0);
}

// The dropless exchange (Note [Dropless exchange]): rank q sends expert e (q + e) % 3 rows,
// some none, row i of them valued 1000 q + 100 e + 10 i + feature. Each rank receives, for
// each of its experts, rank 0's rows, then rank 1's, ...; from_experts undoes it, and the
// backward of the round trip is the identity.
BOOST_AUTO_TEST_CASE(dropless_exchange_moves_exactly_each_experts_rows_and_back) {
  const int n = world()->size(), r = world()->rank();
  const ExpertParallel exchange(world());
  const int64_t E = 2 * n, local = 2;
  auto count = [](int q, int64_t e) { return int64_t((q + e) % 3); };
  auto value = [](int q, int64_t e, int64_t i, int64_t f) { return 1000.0 * q + 100.0 * e + 10.0 * i + f; };
  std::vector<int64_t> sent;
  std::vector<float> mine;
  for (int64_t e = 0; e < E; ++e) {
    sent.push_back(count(r, e));
    for (int64_t i = 0; i < count(r, e); ++i)
      for (int64_t f = 0; f < kD; ++f) mine.push_back(float(value(r, e, i, f)));
  }
  Tensor rows = Tensor::from_vector(mine, {int64_t(mine.size()) / kD, kD});
  set_requires_grad(rows, true);
  const nn::ExpertRows counts = exchange.count_rows(sent, Device::cpu());
  std::vector<int64_t> expected_received, expected_rows(local, 0);
  for (int q = 0; q < n; ++q)
    for (int64_t l = 0; l < local; ++l) {
      expected_received.push_back(count(q, r * local + l));
      expected_rows[size_t(l)] += count(q, r * local + l);
    }
  BOOST_TEST(counts.received == expected_received, boost::test_tools::per_element());
  BOOST_TEST(counts.per_expert() == expected_rows, boost::test_tools::per_element());
  const Tensor at_experts = exchange.to_experts(rows, counts);
  std::vector<double> expected;
  for (int64_t l = 0; l < local; ++l)
    for (int q = 0; q < n; ++q)
      for (int64_t i = 0; i < count(q, r * local + l); ++i)
        for (int64_t f = 0; f < kD; ++f) expected.push_back(value(q, r * local + l, i, f));
  BOOST_REQUIRE(at_experts.shape() == (Shape{int64_t(expected.size()) / kD, kD}));
  BOOST_TEST(at_experts.to_vector<double>() == expected, boost::test_tools::per_element());
  const Tensor back = exchange.from_experts(at_experts, counts);
  BOOST_TEST(test::max_abs_diff(back, rows) == 0.0);
  const Tensor w = random_tensor(rows.shape(), 13 + uint64_t(r));
  backward(sum(mul(back, w)));
  BOOST_TEST(test::max_abs_diff(grad(rows), w) == 0.0);
}

BOOST_AUTO_TEST_CASE(layer_over_ep_ranks_equals_one_process_on_each_ranks_tokens) {
  const int n = world()->size(), r = world()->rank();
  for (const int ep : ep_sizes(n)) {
    const ProcessGrid grid(world(), {.dp = n, .ep = ep});
    for (const Case& c : cases(2 * ep)) {
      BOOST_TEST_CONTEXT("ep " << ep << ", " << c.name) {
        Generator gen(kSeed), ref_gen(kSeed);
        nn::MoE moe(kD, c.config, nn::gelu_mlp_expert(kD), std::make_shared<ExpertParallel>(grid.ep()), gen);
        nn::MoE ref(kD, c.config, nn::gelu_mlp_expert(kD), nn::local_experts(), ref_gen);
        BOOST_TEST(moe.experts->count() == 2);
        BOOST_TEST(moe.experts->first == 2 * grid.ep_rank());
        check_parameters_and_gradients(moe, ref, false);  // the same initial experts

        optim::AdamW opt(optim::decay_groups(moe.parameters(), 0.1), {.lr = 1e-2});
        optim::AdamW ref_opt(optim::decay_groups(ref.parameters(), 0.1), {.lr = 1e-2});
        int64_t dropped = 0;
        for (int step = 0; step < 10; ++step) {
          const Slice mine = run_slice(moe, r, step);
          backward(mine.loss);
          const std::vector<Slice> slices = reference_step(ref, ref_gen, n, step);
          for (const Slice& s : slices) dropped += s.stats.dropped();
          BOOST_TEST(relative_error(mine.out, slices[size_t(r)].out) < kTol);
          BOOST_TEST(relative_error(grad(mine.x), grad(slices[size_t(r)].x)) < kTol);
          // Each rank's own capacity (dropless: its largest load; no MAX over the group).
          BOOST_TEST(mine.stats.capacity == slices[size_t(r)].stats.capacity);
          reduce_gradients(moe, grid);
          if (step == 0) check_parameters_and_gradients(moe, ref, true);
          opt.step();
          ref_opt.step();
          opt.zero_grad();
          ref_opt.zero_grad();
        }
        check_parameters_and_gradients(moe, ref, false);
        BOOST_TEST((dropped > 0) == c.config.drop_tokens, "choices dropped: " << dropped);
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(ranks_whose_experts_get_no_tokens_take_part_and_give_zeros) {
  // A zero gate: equal probabilities, so every token's first choice is expert 0, held by
  // ep rank 0; the experts of every other rank receive nothing.
  const int n = world()->size(), r = world()->rank();
  const ProcessGrid grid(world(), {.dp = n, .ep = n});
  for (const bool drop : {true, false}) {
    BOOST_TEST_CONTEXT("drop_tokens " << drop) {
      const int64_t E = 2 * n;
      const MoEConfig config{.num_experts = E, .min_capacity = 0, .drop_tokens = drop, .use_rts = false};
      Generator gen(kSeed), ref_gen(kSeed);
      nn::MoE moe(kD, config, nn::gelu_mlp_expert(kD), std::make_shared<ExpertParallel>(grid.ep()), gen);
      nn::MoE ref(kD, config, nn::gelu_mlp_expert(kD), nn::local_experts(), ref_gen);
      ops::fill_(moe.gate->wg->weight, 0.0);
      const Slice s = run_slice(moe, r, 0);
      backward(s.loss);
      // Kept: the first C = ceil(S / E) tokens (dropping) or all of them, each expert 0's
      // output times its probability 1 / E; the others 0.
      const int64_t kept = drop ? (kTokens + E - 1) / E : kTokens;
      BOOST_TEST(s.stats.dropped() == kTokens - kept);
      {
        NoGradGuard no_grad;
        const Tensor expected = ops::mul(expert(ref, 0)(ops::narrow(s.x, 0, 0, kept)), 1.0 / double(E));
        BOOST_TEST(relative_error(ops::narrow(s.out, 0, 0, kept), expected) < kTol);
        if (kept < kTokens) BOOST_TEST(ops::max_abs(ops::narrow(s.out, 0, kept, kTokens - kept)) == 0.0);
      }
      // No token reached any expert but 0: their gradients are zero on every rank.
      for (int64_t e = moe.experts->first; e < moe.experts->first + moe.experts->count(); ++e)
        if (e != 0)
          for (const Tensor& p : expert(moe, e).parameters()) BOOST_TEST(ops::max_abs(grad(p)) == 0.0, "expert " << e);
      if (r == 0) BOOST_TEST(ops::max_abs(grad(expert(moe, 0).parameters()[0])) > 0.0);
      // And the one-process layer on every rank's tokens gives this rank's slice and,
      // summed over the ranks, every gradient.
      ops::fill_(ref.gate->wg->weight, 0.0);
      const std::vector<Slice> slices = reference_step(ref, ref_gen, n, 0);
      BOOST_TEST(relative_error(s.out, slices[size_t(r)].out) < kTol);
      BOOST_TEST(relative_error(grad(s.x), grad(slices[size_t(r)].x)) < kTol);
      reduce_gradients(moe, grid);
      check_parameters_and_gradients(moe, ref, true);
    }
  }
}

BOOST_AUTO_TEST_CASE(experts_not_divisible_by_ep_is_named_on_every_rank) {
  const int n = world()->size();
  const ProcessGrid grid(world(), {.dp = n, .ep = n});
  const std::string expected = "num_experts (" + std::to_string(n + 1) +
                               ") must be divisible by the expert-parallel size (" + std::to_string(n) + ")";
  test::check_error(
      [&] { nn::MoE(kD, {.num_experts = n + 1}, nn::gelu_mlp_expert(kD), std::make_shared<ExpertParallel>(grid.ep())); },
      {"[moe]", expected});
  world()->barrier();  // every rank got here: none is left waiting in a collective
}

BOOST_AUTO_TEST_SUITE_END()  // test_expert_parallel_mpi
