// triad-generate: samples text from a trained model.
//
//   triad-generate --checkpoint runs/demo/model.h5 --prompt "Once upon a time"
//   triad-generate --checkpoint runs/demo/checkpoints/step-00001000.h5 --chat
//                                                 (Human: / Assistant: turns on stdin; a
//                                                 Hugging Face tokenizer's chat template
//                                                 makes the model's prompt when it has one)
//   mpirun -np 2 triad-generate --tp 2 --checkpoint runs/demo/model.h5 --prompt "..."
//                                                 (the model split over 2 ranks; the same
//                                                 tokens as one process)
//   triad-generate --checkpoint runs/w8a8/model.h5 --device cuda --prompt "..."
//                                                 (on this process's GPU; a quantized
//                                                 model's layers run their integer GEMMs
//                                                 there)
#include <CLI/CLI.hpp>
#include <cstdio>
#include <filesystem>
#include <iostream>

#include "common/main_guard.h"
#include "common/report.h"
#include "checkpoint/checkpoint.h"
#include "engine/engine.h"
#include "engine/generate.h"
#include "io/chat_template.h"
#include "io/tokenizer.h"
#include "parallel/process_grid.h"
#include "parallel/runtime.h"
#include "parallel/self_communicator.h"
#include "parallel/tensor_parallel_layers.h"

namespace {

using namespace triad;

// Streams generated text to stdout as it comes (when `out`; the other ranks of a
// tensor-parallel group follow silently); with a stop string, stops before it.
struct Printer {
  const io::Tokenizer& tok;
  std::string stop;
  bool out = true;
  std::vector<int32_t> ids;
  size_t printed = 0;
  bool stopped = false;

  bool operator()(int32_t id) {
    if (id == tok.eot()) return false;
    ids.push_back(id);
    std::string text = tok.decode(ids);
    size_t end = text.size();
    if (!stop.empty()) {
      const size_t at = text.find(stop);
      if (at != std::string::npos)
        end = at, stopped = true;
      else
        end = text.size() >= stop.size() ? text.size() - stop.size() + 1 : 0;  // hold a possible prefix
    }
    if (end > printed) {
      if (out) std::fwrite(text.data() + printed, 1, end - printed, stdout);
      std::fflush(stdout);
      printed = end;
    }
    return !stopped;
  }
  void flush() {
    const std::string text = tok.decode(ids);
    if (out && !stopped && text.size() > printed)
      std::fwrite(text.data() + printed, 1, text.size() - printed, stdout);
    std::fflush(stdout);
  }
};

// The next line of stdin on rank 0, given to every rank of `group` (mpirun feeds stdin to
// rank 0 alone); false at the end of the input.
bool next_line(std::string& line, parallel::Communicator* group) {
  const bool leader = !group || group->rank() == 0;
  bool more = leader && bool(std::getline(std::cin, line));
  if (!group) return more;
  Tensor size = Tensor::full({1}, more ? double(line.size()) : -1.0, DType::i64);
  group->broadcast(size, 0)->wait();
  if (size.item() < 0) return false;
  Tensor bytes = Tensor::empty({int64_t(size.item())}, DType::i8);
  if (leader) std::copy(line.begin(), line.end(), bytes.data<int8_t>());
  if (bytes.numel() > 0) group->broadcast(bytes, 0)->wait();
  line.assign(reinterpret_cast<const char*>(bytes.data<int8_t>()), size_t(bytes.numel()));
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  return app::guarded_main([&] {
    CLI::App cli{"triad-generate: sample text from a trained model"};
    std::string model_path, tokenizer_path, prompt;
    bool chat = false;
    int threads = 0, tp_ranks = 1;
    std::string device_name = "cpu";
    engine::SamplingOptions o;
    cli.add_option("--checkpoint", model_path,
                   "a checkpoint or weights file (triad-train's output_dir/model.h5, triad-ckpt export)")
        ->required();
    cli.add_option("--tokenizer", tokenizer_path,
                   "triad's tokenizer file, a Hugging Face tokenizer.json or its folder (default: the one the model "
                   "was trained with, else tokenizer.json beside the checkpoint, as triad-ckpt import puts it)");
    cli.add_option("--prompt", prompt, "text to continue");
    cli.add_flag("--chat", chat,
                 "interactive turns on stdin, through the tokenizer's chat template (chat_template.jinja or "
                 "tokenizer_config.json's chat_template beside it) when it has one, else as Human:/Assistant: text");
    cli.add_option("--max-new-tokens", o.max_new_tokens, "tokens to generate")->capture_default_str();
    cli.add_option("--temperature", o.temperature, "0 = greedy")->capture_default_str();
    cli.add_option("--top-k", o.top_k, "keep the k most likely tokens (0 = all)")->capture_default_str();
    cli.add_option("--top-p", o.top_p, "keep the most likely tokens up to this probability mass")
        ->capture_default_str();
    cli.add_option("--seed", o.seed, "sampling seed")->capture_default_str();
    cli.add_option("--threads", threads, "OpenMP threads (default: all cores)");
    cli.add_option("--device", device_name, "cpu, cuda (this process's GPU) or cuda:N (one process: --tp 1)")
        ->capture_default_str();
    cli.add_option("--tp", tp_ranks, "tensor-parallel ranks: split the model over the ranks of mpirun -np TP")
        ->check(CLI::PositiveNumber);
    CLI11_PARSE(cli, argc, argv);
    o.validate();

    parallel::CommunicatorPtr world = std::make_shared<parallel::SelfCommunicator>();
    if (tp_ranks > 1) {
      TRIAD_CHECK(parallel::launched_by_mpirun(), "--tp " << tp_ranks << ": run under mpirun -np " << tp_ranks);
      world = parallel::init(argc, argv);
      TRIAD_CHECK(world->size() == tp_ranks,
                  "--tp " << tp_ranks << " needs mpirun -np " << tp_ranks << ", got " << world->size() << " ranks");
    }
    const parallel::ProcessGrid grid(world, {.tp = tp_ranks});
    const parallel::CommunicatorPtr& tp = grid.tp();
    const std::shared_ptr<const nn::Parallelism> parallelism =
        parallel::layer_parallelism(tp, /*sequence_parallel=*/false);
    const bool leader = tp->rank() == 0;
    app::set_threads(tp_ranks > 1 ? parallel::threads_per_rank(threads) : threads);

    const Device device = engine::training_device(device_name);
    TRIAD_CHECK(device.is_cpu() || tp_ranks == 1,
                "--device " << device_name << " runs one process; --tp " << tp_ranks << " runs on the cpu");
    engine::LoadedModel loaded = engine::load_model(model_path, parallelism);
    loaded.model->to(device);
    if (tokenizer_path.empty() && loaded.config.contains("data"))
      tokenizer_path = loaded.config["data"].value("tokenizer", "");
    const std::filesystem::path beside = std::filesystem::path(model_path).parent_path() / "tokenizer.json";
    if (tokenizer_path.empty() && std::filesystem::exists(beside)) tokenizer_path = beside.string();
    TRIAD_CHECK(!tokenizer_path.empty(),
                "the model file does not name its tokenizer and no tokenizer.json is beside it; pass --tokenizer");
    const std::unique_ptr<const io::Tokenizer> tokenizer = io::load_tokenizer(tokenizer_path);
    const io::Tokenizer& tok = *tokenizer;
    TRIAD_CHECK(tok.vocab_size() <= loaded.model->vocab_size(),
                "tokenizer '" << tokenizer_path << "' has " << tok.vocab_size() << " tokens, more than the model's "
                              << loaded.model->vocab_size());
    o.stop_token = tok.eot();

    if (!chat) {
      if (leader) std::fwrite(prompt.data(), 1, prompt.size(), stdout);
      Printer print{tok, "", leader};
      engine::generate(*loaded.model, io::encode_prompt(tok, prompt), o, std::ref(print));
      print.flush();
      if (leader) std::printf("\n");
      return 0;
    }
    const std::filesystem::path tokenizer_folder = std::filesystem::is_directory(tokenizer_path)
                                                       ? std::filesystem::path(tokenizer_path)
                                                       : std::filesystem::path(tokenizer_path).parent_path();
    const io::ChatTemplateConfig templated = io::read_chat_template_config(tokenizer_folder.string());
    std::string history;
    std::string line;
    const auto say = [&](const char* text) {
      if (leader) std::printf("%s", text), std::fflush(stdout);
    };
    say("Human: ");
    if (!templated.template_source.empty()) {  // the model's own turns (io/chat_template.h)
      const io::ChatTemplate chat_template(templated.template_source, templated.where);
      nlohmann::json messages = nlohmann::json::array();
      while (next_line(line, tp.get())) {
        messages.push_back({{"role", "user"}, {"content", line}});
        const std::string text = chat_template.render({{"messages", messages},
                                                       {"add_generation_prompt", true},
                                                       {"bos_token", templated.bos_token},
                                                       {"eos_token", templated.eos_token}});
        say("Assistant: ");
        Printer print{tok, "", leader};
        engine::generate(*loaded.model, tok.encode(text), o, std::ref(print));
        print.flush();
        messages.push_back({{"role", "assistant"}, {"content", tok.decode(print.ids)}});
        o.seed += 1;
        say("\nHuman: ");
      }
      say("\n");
      return 0;
    }
    while (next_line(line, tp.get())) {
      history += "Human: " + line + "\nAssistant:";
      say("Assistant:");
      Printer print{tok, "\nHuman:", leader};
      const std::vector<int32_t> reply =
          engine::generate(*loaded.model, io::encode_prompt(tok, history), o, std::ref(print));
      if (!print.stopped) print.flush();
      history += tok.decode(print.ids).substr(0, print.printed) + "\n";
      o.seed += 1;
      say("\nHuman: ");
    }
    say("\n");
    return 0;
  });
}
