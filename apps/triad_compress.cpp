// triad-compress: compresses a trained model (docs/compression.md); zeroquant on one
// process, xtc on one or under mpirun.
//
//   triad-compress zeroquant --checkpoint runs/demo/model.h5 --wbits 8 --abits 8 --group-size 64 --out runs/w8a8
//                                   ZeroQuant post-training quantization: the blocks' linear
//                                   layers to integers with group-wise scales, written to
//                                   DIR/model.h5 (triad-generate --checkpoint runs it)
//   triad-compress zeroquant ... --quantize-embeddings
//                                   the token embedding(s) and the output head quantized too
//   triad-compress zeroquant ... --lkd-steps 200 --data data/train.bin
//                                   the same after layer-by-layer distillation of each
//                                   block on batches of the token file
//   triad-compress xtc --teacher runs/demo/model.h5 --wbits 2 --keep-layers every:2 --steps 500 \
//       --data data/train.bin --out runs/xtc
//                                   XTC: a ternary (or binary) student, optionally with fewer
//                                   blocks, distilled from the teacher at any ZeRO stage
//   triad-compress xtc --teacher runs/demo/model.h5 --config xtc.json --steps 500 --data data/train.bin --out runs/xtc
//                                   the recipe from the config's compression_training section
//   triad-compress zeroquant|xtc ... --data data/train.bin --eval-batches 8
//                                   also the held-out validation loss of the compressed
//                                   model and of the full-precision one, the last line JSON
#include <CLI/CLI.hpp>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <optional>

#include "checkpoint/checkpoint_dir.h"
#include "checkpoint/extreme_compression.h"
#include "checkpoint/held_out_loss.h"
#include "checkpoint/layer_distillation.h"
#include "checkpoint/quantized_model.h"
#include "common/main_guard.h"
#include "common/report.h"
#include "config/config.h"
#include "io/token_file.h"
#include "parallel/runtime.h"

namespace {

// The held-out losses of the compressed model and its full-precision baseline: a line, and
// the last line JSON.
void report_eval(const triad::engine::QuantRecipe& r, double baseline, double value, int64_t batches, int64_t rows,
                 int64_t seq_len) {
  std::printf("val loss: W%dA%d %.6f, full precision %.6f (%+.3f%%), %lld batches of %lld x %lld tokens\n", r.wbits,
              r.abits, value, baseline, 100.0 * (value / baseline - 1), (long long)batches, (long long)rows,
              (long long)seq_len);
  triad::app::print_json_line({{"recipe", r.to_json()},
                               {"val_loss", value},
                               {"baseline_val_loss", baseline},
                               {"relative", value / baseline - 1},
                               {"eval_batches", batches},
                               {"eval_tokens", batches * rows * seq_len}});
}

}  // namespace

int main(int argc, char** argv) {
  using namespace triad;
  app::wait_passively_when_oversubscribed(argv);
  return app::guarded_main([&] {
    CLI::App cli{"triad-compress: compress a trained model"};
    cli.require_subcommand(1);
    std::string checkpoint, out;
    engine::QuantRecipe recipe;
    int threads = 0;
    engine::LkdOptions lkd;
    std::string data;
    int64_t lkd_batches = 16, batch_size = 4, seq_len = 0, eval_batches = 0;
    CLI::App* zq = cli.add_subcommand("zeroquant", "post-training quantization (ZeroQuant): W8A8, W4A8, W8A16, W4A16");
    zq->add_option("--checkpoint", checkpoint, "a checkpoint or weights file, or a checkpoint folder (its latest)")
        ->required();
    zq->add_option("--wbits", recipe.wbits, "weight bits")->capture_default_str()->check(CLI::IsMember({8, 4}));
    zq->add_option("--abits", recipe.abits, "activation bits: 8 (per-token int8) or 16 (full precision)")
        ->capture_default_str()
        ->check(CLI::IsMember({8, 16}));
    zq->add_option("--group-size", recipe.group_size,
                   "weights sharing one scale along the input dimension (a multiple of 8 dividing every layer's)")
        ->capture_default_str()
        ->check(CLI::PositiveNumber);
    zq->add_flag("--quantize-embeddings", recipe.quantize_embeddings,
                 "also quantize the token embedding(s) and the output head (a GPT's tied table once), at --wbits "
                 "in groups of --group-size along d_model; position embeddings stay f32");
    zq->add_option("--lkd-steps", lkd.steps, "layer-by-layer distillation: AdamW steps per block (0: none)")
        ->capture_default_str()
        ->check(CLI::NonNegativeNumber);
    zq->add_option("--lkd-lr", lkd.lr, "layer-by-layer distillation: learning rate")
        ->capture_default_str()
        ->check(CLI::PositiveNumber);
    zq->add_option("--data", data, "token file (triad-data encode) whose batches feed layer-by-layer distillation");
    zq->add_option("--lkd-batches", lkd_batches, "batches of the token file recorded for distillation")
        ->capture_default_str()
        ->check(CLI::PositiveNumber);
    zq->add_option("--batch-size", batch_size, "sequences per distillation batch")
        ->capture_default_str()
        ->check(CLI::PositiveNumber);
    zq->add_option("--seq-len", seq_len,
                   "tokens per distillation and evaluation sequence (default: the model's seq_len)")
        ->check(CLI::PositiveNumber);
    zq->add_option("--eval-batches", eval_batches,
                   "batches of --batch-size sequences of --data's held-out part to measure the validation loss of "
                   "the full-precision and the quantized model on (0: none)")
        ->capture_default_str()
        ->check(CLI::NonNegativeNumber);
    zq->add_option("--out", out, "folder to write model.h5 into")->required();

    engine::XtcOptions xo;
    CLI::App* xtc = cli.add_subcommand("xtc", "extreme compression (XTC): ternary or binary weights by distillation");
    xtc->add_option("--teacher", checkpoint, "the full-precision model: a checkpoint or weights file, or a folder")
        ->required();
    xtc->add_option("--wbits", xo.recipe.wbits, "weight bits: 2 (ternary) or 1 (binary)")->capture_default_str();
    xtc->add_option("--abits", xo.recipe.abits, "activation bits: 8 (per-token int8) or 16 (full precision)")
        ->capture_default_str();
    xtc->add_option("--group-size", xo.recipe.group_size, "weights sharing one scale (0: one scale per output row)")
        ->capture_default_str();
    std::string xtc_config;
    CLI::Option* xtc_config_option =
        xtc->add_option("--config", xtc_config,
                        "a JSON config whose compression_training section (DeepSpeed's keys) gives the bits, "
                        "activation bits and kept blocks, instead of --wbits, --abits, --group-size, --keep-layers");
    xtc->add_option("--keep-layers", xo.keep_layers,
                    "the teacher's blocks the student keeps: every:K (K-1, 2K-1, ...) or a list such as 1,3 "
                    "(default: all)");
    xtc->add_option("--steps", xo.steps, "optimizer steps")->required()->check(CLI::NonNegativeNumber);
    xtc->add_option("--data", data, "token file (triad-data encode) to distil on")->required();
    xtc->add_option("--lr", xo.lr, "AdamW learning rate (constant, no weight decay)")->capture_default_str();
    xtc->add_option("--batch-size", xo.batch_size, "sequences per step over all ranks")->capture_default_str();
    xtc->add_option("--seq-len", xo.seq_len, "tokens per sequence (default: the teacher's seq_len)");
    xtc->add_option("--zero-stage", xo.zero_stage, "ZeRO stage of the student")
        ->capture_default_str()
        ->check(CLI::Range(0, 3));
    xtc->add_option("--temperature", xo.temperature, "logit distillation's temperature")->capture_default_str();
    xtc->add_option("--logit-weight", xo.logit_weight, "weight of the logit distillation (KL) loss")
        ->capture_default_str();
    xtc->add_option("--hidden-weight", xo.hidden_weight, "weight of the blocks' hidden-state MSE")
        ->capture_default_str();
    xtc->add_option("--label-weight", xo.label_weight, "weight of the next-token cross-entropy")->capture_default_str();
    xtc->add_option("--seed", xo.seed, "the student's seed")->capture_default_str();
    xtc->add_option("--eval-batches", xo.eval_batches,
                    "batches of --batch-size sequences of --data's held-out part to measure the validation loss of "
                    "the teacher and the student on (0: none)")
        ->capture_default_str()
        ->check(CLI::NonNegativeNumber);
    xtc->add_option("--eval-interval", xo.eval_interval,
                    "steps between the student's validation losses (0: at the end only)")
        ->capture_default_str()
        ->check(CLI::NonNegativeNumber);
    xtc->add_option("--out", out, "folder to write model.h5 into")->required();
    xtc->add_flag("--quantize-embeddings", xo.recipe.quantize_embeddings,
                  "zeroquant's: refused here (xtc trains the embeddings and the output head in full precision)");
    for (const char* recipe_option : {"--wbits", "--abits", "--group-size", "--keep-layers"})
      xtc_config_option->excludes(xtc->get_option(recipe_option));
    cli.add_option("--threads", threads, "OpenMP threads (default: all cores)");
    CLI11_PARSE(cli, argc, argv);
    parallel::CommunicatorPtr world;
    if (*xtc && parallel::launched_by_mpirun()) world = parallel::init(argc, argv);
    app::set_threads(parallel::threads_per_rank(threads));

    if (std::filesystem::is_directory(checkpoint)) {
      const std::string latest = engine::latest_checkpoint(checkpoint);
      TRIAD_CHECK(!latest.empty(), "'" << checkpoint << "' is a folder without a 'latest' checkpoint pointer");
      checkpoint = latest;
    }
    std::filesystem::create_directories(out);
    const std::string path = (std::filesystem::path(out) / "model.h5").string();
    const auto copy_tokenizer = [&] {
      const std::filesystem::path tokenizer = std::filesystem::path(checkpoint).parent_path() / "tokenizer.json";
      if (std::filesystem::exists(tokenizer))
        std::filesystem::copy_file(tokenizer, std::filesystem::path(out) / "tokenizer.json",
                                   std::filesystem::copy_options::overwrite_existing);
    };
    if (*xtc) {
      const bool first = parallel::world_rank() == 0;
      const io::TokenFile tokens = io::TokenFile::open(data);
      if (!xtc_config.empty()) xo.config = engine::load_config_file(xtc_config);
      const auto on_step = [&](const engine::XtcStep& s) {
        if (!first) return;
        std::printf("step %lld: loss %.9g (logit KL %.9g, hidden MSE %.9g, label CE %.9g)", (long long)s.step, s.loss,
                    s.logit, s.hidden, s.label);
        if (!std::isnan(s.val_loss)) std::printf(", val loss %.6f (fake-quantized)", s.val_loss);
        std::printf("\n");
        std::fflush(stdout);
      };
      const engine::XtcResult result = engine::train_xtc(checkpoint, tokens, xo, world, path, on_step);
      if (first) {
        copy_tokenizer();
        const engine::QuantRecipe r = engine::read_recipe(path);
        std::printf("wrote %s (xtc W%dA%d, blocks %s of the teacher's %lld, %lld steps, of %s)\n", path.c_str(),
                    r.wbits, r.abits, nlohmann::json(r.keep_layers).dump().c_str(), (long long)r.teacher_layers,
                    (long long)r.steps, checkpoint.c_str());
        if (xo.eval_batches > 0)
          report_eval(r, result.teacher_val_loss, result.val_loss, xo.eval_batches, xo.batch_size, result.seq_len);
      }
      return 0;
    }
    recipe.validate();
    TRIAD_CHECK(lkd.steps == 0 || !data.empty(),
                "--lkd-steps " << lkd.steps << " needs --data, a token file to distil on");
    TRIAD_CHECK(eval_batches == 0 || !data.empty(),
                "--eval-batches " << eval_batches << " needs --data, the token file the model was trained on");
    const engine::LoadedModel m = engine::load_model(checkpoint);
    const int64_t t = seq_len > 0 ? seq_len : m.model->seq_len();
    TRIAD_CHECK(t <= m.model->seq_len(), "--seq-len " << t << " exceeds the model's seq_len " << m.model->seq_len());
    std::optional<io::TokenFile> tokens;
    std::optional<engine::HeldOutSplit> split;
    if (!data.empty()) tokens = io::TokenFile::open(data), split = engine::held_out_split(*tokens, m.config, t);
    std::vector<std::pair<Tensor, Tensor>> val;
    double baseline = NAN;
    if (eval_batches > 0) {
      val = engine::validation_batches(*tokens, *split, m.config, eval_batches, batch_size, t);
      baseline = engine::validation_loss(*m.model, val);
      std::printf("val loss: full precision %.6f\n", baseline);
      std::fflush(stdout);
    }
    if (lkd.steps > 0) {
      std::vector<Tensor> batches;
      const int64_t n = batch_size * t;
      for (int64_t b = 0; b < lkd_batches; ++b) {
        Tensor ids = Tensor::empty({batch_size, t}, DType::i64);
        const int64_t start = (b * n) % std::max<int64_t>(1, split->train.size() - n + 1);
        tokens->read(start, n, ids.data<int64_t>());  // Error naming the file when it is shorter than n
        batches.push_back(ids);
      }
      for (const engine::BlockDistillation& r : engine::distill_blocks(m.model, recipe, batches, lkd))
        std::printf("LKD block %lld: distillation MSE %.6g after PTQ, %.6g after %lld steps%s\n", (long long)r.block,
                    r.mse_ptq, r.mse_lkd, (long long)lkd.steps,
                    r.kept ? "" : " (not lower: the block stays as PTQ quantizes it)");
      recipe.lkd_steps = lkd.steps;
    }
    engine::save_quantized_model(m, path, recipe);
    copy_tokenizer();
    std::printf("wrote %s (%s W%dA%d, groups of %lld%s, of %s)\n", path.c_str(), recipe.method.c_str(), recipe.wbits,
                recipe.abits, (long long)recipe.group_size,
                recipe.quantize_embeddings ? ", embeddings and output head quantized" : "", checkpoint.c_str());
    if (eval_batches > 0)
      report_eval(recipe, baseline, engine::validation_loss(*engine::load_model(path).model, val), eval_batches,
                  batch_size, t);
    return 0;
  });
}
