// Activation memory of the GPT's layers (nn/gpt_layers.h): the bytes one micro-batch's
// forward leaves allocated for its backward, layer by layer, counted from what triad's
// autograd functions keep (autograd/functions.cpp, parallel/tensor_parallel_*.cpp), not
// from another framework's kernels. Pure arithmetic, as estimate/model_states.h: triad-estimate
// prices layouts of models far larger than the machine it runs on.
//
// Note [Activation bytes]: B sequences of T tokens, C channels, NH heads, t tensor-parallel
// ranks (T' = T/t tokens of the residual stream on a rank with sequence parallelism, else
// T), p bytes per saved product operand. Activations are f32 on every device (Note [16-bit
// parameters]); only with bf16 parameters on a CUDA device do linear layers and attention
// keep their operands narrowed to bf16 (p = 2, else p = 4).
//
// Saved per GPT block (a tensor's bytes are counted in the layer whose backward first
// keeps it, so a block counts its own input, which its first LayerNorm keeps):
//   ln1        its input x, mean and rstd                  4BT'C + 8BT'
//   qkv        its input ln1(x), whole T (sequence parallelism gathers it)   pBTC
//   attention  q, k, v (views of qkv's output, or bf16 copies), its output,
//              and the log-sum-exp per query                3pBTC/t + pBTC/t + 4B(NH/t)T
//   proj       its input, a (B, T, C) view of the attention's output    0
//              (Note [Attention layout] in tensor/ops.h)
//   ln2        its input h = x + attn(ln1(x)), mean, rstd    4BT'C + 8BT'
//   fc         its input ln2(h), whole T                    pBTC
//   GELU       its input, fc's output                       16BTC/t
//   proj       its input, GELU's output                     4pBTC/t
// Dropout keeps only its seed and the residual adds keep nothing. So, at t = 1, p = 4:
// 64BTC + 16BT + 4B·NH·T bytes: 16 f32 tensors of (B, T, C). Megatron's per-layer count
// (Korthikanti et al., "Reducing Activation Recomputation", 2022) is 34sbh + 5as²b for
// 16-bit activations and kernels that keep the (T, T) scores and dropout masks; triad's
// fused attention keeps the output and log-sum-exp instead of the scores, and its dropout
// regenerates masks from the seed. With attention dropout (dropout > 0 in training) the
// attention is composed instead: q, k, v kept in f32 (12BTC/t), and softmax's and dropout's
// (T, T) outputs (4B(NH/t)T² each), no output or log-sum-exp; proj then keeps its output
// made contiguous (pBTC/t; none with one head per rank, or T = 1, where the output already
// is in (B, T, C) order).
//
// Embedding: nothing new (the lookup keeps the batch's token ids, which the batch holds
// anyway; vocab-parallel too, whose lookup reads its rank's rows of them, ops::TableRows).
// Head: ln_f as ln1 (4BT'C + 8BT') and the logits projection's input (pBTC).
// Loss: fused with the head, with pipeline stages or without (Note [Fused head loss] in
// nn/layer_list.h, Note [Fused classifier] in autograd/fused_classifier.h), it keeps only
// each row's log-sum-exp (4BT, V_r the vocabulary rows on the rank not mattering) and the
// count (8 bytes) on any tp: the logits exist a chunk of rows at a time, never kept.
//
// Deferred weight gradients (ZB-H1, Note [Split backward]): after a micro-batch's
// input-gradient pass, each deferred linear keeps its input and its output's gradient
// until the weight-gradient pass. Per block 4BTC + 4BTC/t + 4BTC + 16BTC/t (inputs) +
// 12BTC/t + 4BTC + 16BTC/t + 4BTC (gradients) = 16BTC + 48BTC/t; the head's fused loss
// adds its weight's gradient in its own backward, deferring nothing. With bf16 parameters on a CUDA device linear
// layers compute every gradient at once (nothing is deferred).
#pragma once

#include <cstdint>
#include <string>

#include "nn/gpt.h"
#include "tensor/dtype.h"

namespace triad::estimate {

struct ActivationShape {
  int64_t batch = 1;  // B, sequences per micro-batch
  int64_t seq = 1;    // T, tokens per sequence
  int64_t d_model = 0, n_head = 0;
  int64_t vocab_rows = 0;  // V_r: token-table rows on a rank (padded vocabulary / t)
  int tp = 1;
  bool sequence_parallel = false;
  bool attention_dropout = false;  // dropout > 0 in training: the composed attention
  int64_t product_bytes = 4;       // p: 2 with bf16 parameters on a CUDA device
};

// The shape of `config` for one micro-batch of `batch` × `seq` on one of tp ranks (all
// keep the same bytes). param_dtype and cuda say whether products keep bf16 operands.
ActivationShape activation_shape(const nn::GPTConfig& config, int64_t batch, int64_t seq, int tp,
                                 bool sequence_parallel, DType param_dtype, bool cuda);

struct LayerActivations {
  double saved = 0;     // kept from the forward to the backward (or input-gradient pass)
  double deferred = 0;  // kept from the input-gradient pass to the weight-gradient pass
};

// One f32 (B, T', C) tensor of the residual stream: what passes between layers, what a
// recomputed (checkpointed) run keeps of its input, and what a stage sends on.
double residual_bytes(const ActivationShape&);
LayerActivations embedding_activations(const ActivationShape&);
LayerActivations block_activations(const ActivationShape&);
LayerActivations head_activations(const ActivationShape&);  // ln_f and the logits' projection
LayerActivations fused_loss_activations(const ActivationShape&);  // the head's fused loss
// By the layer's type in gpt_layers(): "GPTEmbedding", "Block", "GPTHead".
LayerActivations gpt_layer_activations(const ActivationShape&, const std::string& type);

}  // namespace triad::estimate
