// Note [Activation bytes] under tensor parallelism, against measurement on every rank of
// tp = the world (2, 4, 8), with and without sequence parallelism: a block, the
// vocab-parallel embedding, and the head with the vocab-parallel loss. As in
// test_activation_bytes, the bytes a forward leaves allocated (in use after it minus before,
// less the output held, plus the input the layer keeps) must equal the formula to the byte.
// Each layer runs once first, so buffers the communicator keeps between calls are not
// counted as activations. At 8 ranks each holds one head, whose output the projection
// keeps as a view; on the ranks holding padding columns the loss keeps a masked copy of
// the logits in their place.
#include <boost/test/unit_test.hpp>

#include "autograd/engine.h"
#include "autograd/meta.h"
#include "estimate/activation_bytes.h"
#include "nn/gpt_layers.h"
#include "nn/tensor_split.h"
#include "parallel/runtime.h"
#include "parallel/tensor_parallel_layers.h"
#include "support/activation_probe.h"
#include "tensor/allocator.h"
#include "tensor/ops.h"

BOOST_AUTO_TEST_SUITE(test_activation_bytes_mpi)

using namespace triad;

namespace {

// Heads and sequence divisible by 8 ranks; a vocabulary of 50 padded to 16 × tp rows.
constexpr int64_t B = 3, T = 16, C = 64, NH = 8, V = 50;

double in_use() { return test::cpu_bytes_in_use(); }
using test::random_leaf;

nn::GPTConfig config() {
  return {.n_layer = 2, .n_head = NH, .d_model = C, .seq_len = T, .vocab_size = V, .vocab_multiple = 16};
}

Tensor tokens() {
  std::vector<int64_t> ids;
  for (int64_t i = 0; i < B * T; ++i) ids.push_back((i * 7) % V);
  return Tensor::from_vector(ids, {B, T});
}

// Runs `forward` twice (the first, released at once, warms the communicator) and returns
// the bytes the second leaves allocated while its result (and with it its graph) is held,
// less the result itself.
template <class F>
double measured(F&& forward) {
  forward();
  const double before = in_use();
  const Tensor result = forward();
  return in_use() - before - double(result.nbytes());
}

}  // namespace

BOOST_AUTO_TEST_CASE(block_embedding_head_and_loss_equal_the_allocators_count) {
  const int tp = parallel::world()->size();
  for (bool sp : {false, true}) {
    const auto par = std::make_shared<parallel::TensorParallel>(parallel::world(), sp);
    const estimate::ActivationShape s = estimate::activation_shape(config(), B, T, tp, sp, DType::f32, false);
    const nn::LayerList list = nn::gpt_layers(config(), par);
    const Shape stream{B, sp ? T / tp : T, C};  // the residual stream on this rank

    nn::PipelineStage block(list, {{1, 2}});
    block.train();
    const Tensor x = random_leaf(stream, 11);
    const double b = measured([&] { return block.forward_chunk(0, x); });
    BOOST_TEST(b + double(x.nbytes()) == estimate::block_activations(s).saved,
               "sp " << sp << ": " << b + double(x.nbytes()) << " vs " << estimate::block_activations(s).saved);

    nn::PipelineStage embedding(list, {{0, 1}});
    embedding.train();
    const Tensor ids = tokens();
    const double e = measured([&] { return embedding.forward_chunk(0, ids); });
    BOOST_TEST(e == estimate::embedding_activations(s).saved, "sp " << sp);

    nn::PipelineStage head(list, {{3, 4}});
    head.train();
    const Tensor h = random_leaf(stream, 12);
    const Tensor targets = tokens();
    const double l = measured([&] { return head.forward_loss(0, h, targets); });
    BOOST_TEST(l + double(h.nbytes()) == estimate::head_activations(s).saved + estimate::fused_loss_activations(s).saved,
               "sp " << sp << ": " << l + double(h.nbytes()) << " vs "
                     << estimate::head_activations(s).saved + estimate::fused_loss_activations(s).saved);
  }
}

BOOST_AUTO_TEST_SUITE_END()  // test_activation_bytes_mpi
