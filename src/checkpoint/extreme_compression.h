// XTC extreme compression (arXiv 2206.01859, triad-compress xtc): a student with ternary or
// binary weights (and 8-bit activations) trained by quantization-aware training to imitate a
// frozen full-precision teacher, optionally with fewer blocks than the teacher (XTC's
// lightweight layer reduction: the student's blocks start as copies of chosen teacher
// blocks). The student trains on an Engine at any ZeRO stage under mpirun; the teacher runs
// forward only, whole on every rank. The result is a quantized model file
// (checkpoint/quantized_model.h, recipe method "xtc").
#pragma once

#include <cmath>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "checkpoint/quantized_model.h"
#include "io/token_file.h"
#include "nn/language_model.h"
#include "parallel/communicator.h"

namespace triad::engine {

struct XtcOptions {
  XtcOptions() { recipe.method = "xtc", recipe.wbits = 2, recipe.abits = 8, recipe.group_size = 0; }

  // wbits 2 (ternary, the default) or 1 (binary); abits 8 or 16; group_size 0 (a scale per
  // output row, XTC's) or a multiple of 8. train_xtc fills in method, steps, keep_layers and
  // teacher_layers.
  QuantRecipe recipe;
  std::string keep_layers;  // the teacher's blocks the student keeps, as parse_keep_layers reads them
  int64_t steps = 0;        // optimizer steps (AdamW, constant rate, no weight decay)
  double lr = 1e-4;
  int64_t batch_size = 8;    // sequences per step over all ranks (each rank takes batch_size / ranks)
  int64_t seq_len = 0;       // tokens per sequence (0: the teacher's seq_len)
  int zero_stage = 0;        // ZeRO stage 0-3 of the student
  double temperature = 1.0;  // of the logit distillation
  double logit_weight = 1.0, hidden_weight = 1.0, label_weight = 0.0;  // the loss's terms
  uint64_t seed = 1234;
  // Held-out evaluation (checkpoint/held_out_loss.h): eval_batches validation batches of
  // batch_size windows (0: none), the student's loss measured every eval_interval steps
  // (0: at the end only) and the written model's by its integer GEMM at the end.
  int64_t eval_batches = 0;
  int64_t eval_interval = 0;
  // A config whose compression_training section sets the recipe's bits and the kept blocks
  // (apply_compression_config, once the teacher's blocks are known); null: none.
  nlohmann::json config;
};

// One step's losses, averaged over the global batch: the weighted total and its terms.
struct XtcStep {
  int64_t step = 0;
  double loss = 0, logit = 0, hidden = 0, label = 0;
  double val_loss = NAN;  // the (fake-quantized) student's held-out loss after this step, when measured
};

// The held-out losses of a run with eval_batches: the teacher's, and the written student's
// (loaded back, running the integer GEMM); NaN without evaluation and on ranks but 0.
struct XtcResult {
  double teacher_val_loss = NAN, val_loss = NAN;
  int64_t seq_len = 0;  // tokens per sequence trained and evaluated on
};

// The teacher blocks `spec` names among n_layer: "" (all), "every:K" (K-1, 2K-1, ...: the
// last block of every K, so the student's last block is the teacher's last when K divides
// n_layer) or a comma-separated list of increasing block indices ("0,2,5"). Throws Error
// naming --keep-layers and the value when an index is out of [0, n_layer), the list is not
// increasing, K is not in [1, n_layer], or the spec is neither form.
std::vector<int64_t> parse_keep_layers(const std::string& spec, int64_t n_layer);

// The recipe of `config`'s compression_training section (DeepSpeed's keys, read by
// parse_compression, config/compression_config.h) into `options` for a teacher of
// teacher_layers blocks: weight_quantization's bits (its groups' target_bits, 2 or 1, the
// same for all, every linear layer: modules "*"), quantize_groups 1 (a scale per row) and
// symmetric; activation_quantization enabled: 8 bits, else 16; layer_reduction enabled: its
// teacher_layer as the kept blocks (keep_number_layer of them). Throws Error naming the
// dotted key when the section is missing, weight_quantization is not enabled, or a value
// asks for what XTC does not do (start_bits other than target_bits, a schedule_offset, more
// than one group of rows, groups of other bits or of some modules only, asymmetric weights).
void apply_compression_config(const nlohmann::json& config, int64_t teacher_layers, XtcOptions& options);

// Logit distillation: T^2 times the mean over rows (every dimension but the last) of
// KL(softmax(teacher / T) || softmax(student / T)) over the last dimension, the soft
// cross-entropy of Hinton et al. less the teacher's entropy. The gradient flows to
// `student` only (T (softmax(student / T) - softmax(teacher / T)) / rows). Throws Error
// when the shapes differ or T is not positive.
Tensor distillation_kl(const Tensor& student, const Tensor& teacher, double temperature);

// The training config of the student: the teacher's model section with n_layer the kept
// blocks' count and no dropout, its data section (the tokenizer), and the options' batch
// (over `ranks` data-parallel ranks), steps, AdamW rate and ZeRO stage, on the CPU (the
// ternary and binary formats are CPU kernels).
nlohmann::json student_config(const nlohmann::json& teacher_config, const XtcOptions& options, int64_t ranks);

// Copies the teacher's parameters into the student by name, student block i from teacher
// block keep_layers[i] (XTC's layer reduction initialisation). Throws Error naming the
// parameter when one is missing from the teacher or of another shape.
void init_student(nn::LanguageModel& student, const nn::LanguageModel& teacher,
                  const std::vector<int64_t>& keep_layers);

// Trains the student of the teacher file `teacher` (a full-precision checkpoint or weights
// file; a quantized one is an Error naming it) for options.steps steps on consecutive
// windows of the training part of `tokens` (held_out_split by the teacher's config) and
// writes the quantized student to `out` (rank 0). The loss of a batch is
//   logit_weight distillation_kl(student logits, teacher logits, T)
//   + hidden_weight mean over student blocks i of distillation_mse(its output, teacher block keep_layers[i]'s)
//   + label_weight cross_entropy(student logits, next tokens)
// with every student linear layer in the blocks fake-quantized (weights by the recipe,
// activations per token at abits 8). Collective over `world` (null: one process); the
// global batch is the same whatever the number of ranks, so runs on 1 and on R ranks follow
// each other up to rounding. on_step (rank 0 and every other) sees each step's losses.
// With options.eval_batches, the teacher's and the student's held-out losses as XtcResult
// says (the student's during training in XtcStep::val_loss, on every rank).
XtcResult train_xtc(const std::string& teacher, const io::TokenFile& tokens, XtcOptions options,
                    const parallel::CommunicatorPtr& world, const std::string& out,
                    const std::function<void(const XtcStep&)>& on_step = nullptr);

}  // namespace triad::engine
