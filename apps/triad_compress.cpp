// triad-compress: compresses a trained model (docs/compression.md); one process.
//
//   triad-compress zeroquant --checkpoint runs/demo/model.h5 --wbits 8 --abits 8 --group-size 64 --out runs/w8a8
//                                   ZeroQuant post-training quantization: the blocks' linear
//                                   layers to integers with group-wise scales, written to
//                                   DIR/model.h5 (triad-generate --checkpoint runs it)
//   triad-compress zeroquant ... --lkd-steps 200 --data data/train.bin
//                                   the same after layer-by-layer distillation of each
//                                   block on batches of the token file
#include <CLI/CLI.hpp>
#include <cstdio>
#include <filesystem>

#include "checkpoint/checkpoint_dir.h"
#include "checkpoint/layer_distillation.h"
#include "checkpoint/quantized_model.h"
#include "common/main_guard.h"
#include "common/report.h"
#include "io/token_file.h"

int main(int argc, char** argv) {
  using namespace triad;
  return app::guarded_main([&] {
    CLI::App cli{"triad-compress: compress a trained model"};
    cli.require_subcommand(1);
    std::string checkpoint, out;
    engine::QuantRecipe recipe;
    int threads = 0;
    engine::LkdOptions lkd;
    std::string data;
    int64_t lkd_batches = 16, batch_size = 4, seq_len = 0;
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
    zq->add_option("--seq-len", seq_len, "tokens per distillation sequence (default: the model's seq_len)")
        ->check(CLI::PositiveNumber);
    zq->add_option("--out", out, "folder to write model.h5 into")->required();
    cli.add_option("--threads", threads, "OpenMP threads (default: all cores)");
    CLI11_PARSE(cli, argc, argv);
    app::set_threads(threads);

    if (std::filesystem::is_directory(checkpoint)) {
      const std::string latest = engine::latest_checkpoint(checkpoint);
      TRIAD_CHECK(!latest.empty(), "'" << checkpoint << "' is a folder without a 'latest' checkpoint pointer");
      checkpoint = latest;
    }
    std::filesystem::create_directories(out);
    const std::string path = (std::filesystem::path(out) / "model.h5").string();
    if (lkd.steps == 0) {
      engine::save_quantized_model(checkpoint, path, recipe);
    } else {
      TRIAD_CHECK(!data.empty(), "--lkd-steps " << lkd.steps << " needs --data, a token file to distil on");
      recipe.validate();
      const engine::LoadedModel m = engine::load_model(checkpoint);
      const io::TokenFile tokens = io::TokenFile::open(data);
      const int64_t t = seq_len > 0 ? seq_len : m.model->seq_len();
      TRIAD_CHECK(t <= m.model->seq_len(), "--seq-len " << t << " exceeds the model's seq_len " << m.model->seq_len());
      std::vector<Tensor> batches;
      for (int64_t b = 0; b < lkd_batches; ++b) {
        Tensor ids = Tensor::empty({batch_size, t}, DType::i64);
        const int64_t n = batch_size * t, start = (b * n) % std::max<int64_t>(1, tokens.size() - n + 1);
        tokens.read(start, n, ids.data<int64_t>());  // Error naming the file when it is shorter than n
        batches.push_back(ids);
      }
      for (const engine::BlockDistillation& r : engine::distill_blocks(m.model, recipe, batches, lkd))
        std::printf("LKD block %lld: distillation MSE %.6g after PTQ, %.6g after %lld steps\n", (long long)r.block,
                    r.mse_ptq, r.mse_lkd, (long long)lkd.steps);
      recipe.lkd_steps = lkd.steps;
      engine::save_quantized_model(m, path, recipe);
    }
    const std::filesystem::path tokenizer = std::filesystem::path(checkpoint).parent_path() / "tokenizer.json";
    if (std::filesystem::exists(tokenizer))
      std::filesystem::copy_file(tokenizer, std::filesystem::path(out) / "tokenizer.json",
                                 std::filesystem::copy_options::overwrite_existing);
    std::printf("wrote %s (%s W%dA%d, groups of %lld, of %s)\n", path.c_str(), recipe.method.c_str(), recipe.wbits,
                recipe.abits, (long long)recipe.group_size, checkpoint.c_str());
    return 0;
  });
}
