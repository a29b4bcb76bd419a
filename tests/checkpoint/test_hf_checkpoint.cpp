// Hugging Face checkpoints in and out (checkpoint/hf_checkpoint.h, io/hf_models.h): the GPT-2
// reference file (GPT2LMHeadModel's names, Conv1D layout) imported and loaded into nn::GPT
// gives gpt_reference.tns's logits, which proves the name map and the transposes; exporting
// gives back the original tensors; the Llama map round-trips (sharded F32, F16, BF16) with
// the names and shapes a triad Llama has, and loaded into nn::Llama gives the logits of
// transformers' LlamaForCausalLM; ties, flags and bad input behave as documented,
// the tokenizer files beside a model are copied with it, and nothing saved is overwritten by
// a failed import. Tiny models saved by transformers (hf_roundtrip_reference.py) import by
// their config.json alone and give transformers' greedy text and loss, before and after an
// export (config.json, generation_config.json, tokenizer files, shards) and a re-import; the
// Llama's chat template gives apply_chat_template's prompt ids and transformers' greedy reply.
// The Mixtral (MoE blocks) imports as a Llama with model.moe and gives MixtralForCausalLM's
// logits; what triad's MoE cannot hold is named, on import and on export.
#include <boost/test/unit_test.hpp>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>

#include "checkpoint/checkpoint.h"
#include "checkpoint/hf_checkpoint.h"
#include "engine/generate.h"
#include "io/chat_template.h"
#include "io/h5file.h"
#include "io/hf_models.h"
#include "io/safetensors.h"
#include "io/tensor_file.h"
#include "io/tokenizer.h"
#include "support/check.h"
#include "support/files.h"

BOOST_AUTO_TEST_SUITE(test_hf_checkpoint)

using namespace triad;
using test::check_error;
using test::TempDir;
namespace fs = std::filesystem;

namespace {

const std::string kDir = test::data_path("safetensors");

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() &&
         std::memcmp(ops::contiguous(a).raw_data(), ops::contiguous(b).raw_data(), a.nbytes()) == 0;
}

std::string import(const std::string& from, const std::string& arch, const std::string& out,
                   const nlohmann::json& model = nlohmann::json::object()) {
  return engine::import_hf({from, arch, model, out});
}

// Every tensor of `exported` equals the tensor of that name in `original`, which has no
// other tensors than those and `extra`.
void check_same_tensors(const io::SafetensorsCheckpoint& original, const std::string& exported,
                        const std::set<std::string>& extra = {}) {
  const io::SafetensorsFile out = io::SafetensorsFile::open(exported);
  BOOST_TEST(out.metadata().at("format") == "pt");
  std::set<std::string> names;
  for (const io::SafetensorsEntry& e : out.entries()) {
    names.insert(e.name);
    BOOST_REQUIRE_MESSAGE(original.has(e.name), "exported '" << e.name << "' is not in the original");
    BOOST_TEST(same_bits(out.read(e.name), original.read(e.name)), e.name);
  }
  for (const std::string& name : original.names()) BOOST_TEST((names.count(name) + extra.count(name)) == 1u, name);
}

const std::set<std::string> kGpt2Buffers = {"transformer.h.0.attn.bias", "transformer.h.0.attn.masked_bias",
                                            "transformer.h.1.attn.bias", "transformer.h.1.attn.masked_bias"};

// The Llama reference's tensors and config.json copied to `dir`, changed by `edit`.
void write_llama(const TempDir& dir, const std::function<void(io::NamedTensors&, nlohmann::json&)>& edit) {
  const io::SafetensorsCheckpoint src = io::SafetensorsCheckpoint::open(kDir + "/llama");
  io::NamedTensors tensors;
  for (const std::string& name : src.names()) tensors.emplace_back(name, src.read(name));
  std::ifstream in(kDir + "/llama/config.json");
  nlohmann::json config = nlohmann::json::parse(in);
  edit(tensors, config);
  io::write_safetensors(dir.file("model.safetensors"), tensors);
  dir.write("config.json", config.dump());
}

const std::string kRoundTrip = test::data_path("hf_roundtrip");

// The round trip's Mixtral's tensors and config.json copied to `dir`, changed by `edit`.
void write_mixtral(const TempDir& dir, const std::function<void(io::NamedTensors&, nlohmann::json&)>& edit) {
  const io::SafetensorsCheckpoint src = io::SafetensorsCheckpoint::open(kRoundTrip + "/mixtral");
  io::NamedTensors tensors;
  for (const std::string& name : src.names()) tensors.emplace_back(name, src.read(name));
  nlohmann::json config = nlohmann::json::parse(test::read_bytes(kRoundTrip + "/mixtral/config.json"));
  edit(tensors, config);
  io::write_safetensors(dir.file("model.safetensors"), tensors);
  dir.write("config.json", config.dump());
}

nlohmann::json round_trip_reference() {
  std::ifstream in(kRoundTrip + "/reference.json");
  return nlohmann::json::parse(in);
}

// The checkpoint (with its tokenizer beside it) does what transformers did with the model of
// `ref` (hf_roundtrip_reference.py): the same prompt ids, the same 32 greedy tokens and text,
// the same loss on the stored batch (targets: the batch shifted by one, the last ignored).
void check_like_transformers(const std::string& checkpoint, const nlohmann::json& ref, const std::string& what) {
  BOOST_TEST_CONTEXT(what) {
    const engine::LoadedModel loaded = engine::load_model(checkpoint);
    const std::unique_ptr<const io::Tokenizer> tok =
        io::load_tokenizer((fs::path(checkpoint).parent_path() / "tokenizer.json").string());
    const std::vector<int32_t> prompt = io::encode_prompt(*tok, ref["prompt"].get<std::string>());
    BOOST_TEST(prompt == ref["prompt_ids"].get<std::vector<int32_t>>(), boost::test_tools::per_element());
    const engine::SamplingOptions greedy{
        .temperature = 0, .top_k = 0, .top_p = 1, .max_new_tokens = 32, .stop_token = tok->eot()};
    const std::vector<int32_t> generated = engine::generate(*loaded.model, prompt, greedy);
    BOOST_TEST(generated == ref["generated_ids"].get<std::vector<int32_t>>(), boost::test_tools::per_element());
    BOOST_TEST(tok->decode(generated) == ref["text"].get<std::string>());

    const auto rows = ref["batch"].get<std::vector<std::vector<int64_t>>>();
    const int64_t B = int64_t(rows.size()), T = int64_t(rows[0].size());
    Tensor idx = Tensor::empty({B, T}, DType::i64), targets = Tensor::empty({B, T}, DType::i64);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t = 0; t < T; ++t) {
        idx.data<int64_t>()[b * T + t] = rows[size_t(b)][size_t(t)];
        targets.data<int64_t>()[b * T + t] = t + 1 < T ? rows[size_t(b)][size_t(t + 1)] : -100;
      }
    const double loss = loaded.model->loss(idx, targets).item();
    BOOST_TEST(std::abs(loss - ref["loss"].get<double>()) < 1e-5, "loss " << loss << ", transformers' " << ref["loss"]);

    // The chat template beside the tokenizer makes apply_chat_template's ids (what
    // triad-generate --chat continues), and greedy generation from them is transformers'.
    if (ref.contains("chat")) {
      const nlohmann::json& chat = ref["chat"];
      const io::ChatTemplateConfig config = io::read_chat_template_config(fs::path(checkpoint).parent_path().string());
      BOOST_TEST(config.where.ends_with("chat_template.jinja'"));
      const std::string text = io::ChatTemplate(config.template_source, config.where)
                                   .render({{"messages", chat["messages"]},
                                            {"add_generation_prompt", true},
                                            {"bos_token", config.bos_token},
                                            {"eos_token", config.eos_token}});
      const std::vector<int32_t> ids = tok->encode(text);
      BOOST_TEST(ids == chat["prompt_ids"].get<std::vector<int32_t>>(), boost::test_tools::per_element());
      engine::SamplingOptions options = greedy;
      options.max_new_tokens = chat["max_new_tokens"].get<int64_t>();
      BOOST_TEST(engine::generate(*loaded.model, ids, options) == chat["generated_ids"].get<std::vector<int32_t>>(),
                 boost::test_tools::per_element());
    }
  }
}

}  // namespace

// The Hugging Face round trip: tiny models saved by transformers' save_pretrained (config.json,
// tokenizer files) import with nothing but their folder, and generate and score as
// transformers does; exported (config.json, generation_config.json, tokenizer files; sharded
// too) and imported again, the same. That transformers loads the exported folder with
// AutoModelForCausalLM / AutoTokenizer and gets this loss is checked by
// `hf_roundtrip_reference.py --check`, where transformers is installed.
BOOST_AUTO_TEST_CASE(transformers_models_round_trip) {
  const nlohmann::json reference = round_trip_reference();
  for (const std::string arch : {"gpt2", "llama", "mixtral"}) {
    TempDir dir;
    const std::string path = import(kRoundTrip + "/" + arch, "", dir.file("ckpt"));
    BOOST_TEST(engine::read_summary(path).config["model"]["arch"] == (arch == "mixtral" ? "llama" : arch));
    check_like_transformers(path, reference[arch], arch + " imported");

    engine::export_hf({path, dir.file("hf"), DType::f32});
    const nlohmann::json config = nlohmann::json::parse(test::read_bytes(dir.file("hf/config.json")));
    const nlohmann::json original = nlohmann::json::parse(test::read_bytes(kRoundTrip + "/" + arch + "/config.json"));
    // What transformers wrote, triad writes too (but the init's spread, which triad's model
    // does not keep, and the keys a default stands for).
    for (const auto& [key, value] : original.items())
      if (key != "transformers_version" && key != "pad_token_id" && key != "initializer_range")
        BOOST_TEST(config[key] == value, arch << " config.json " << key << ": " << config[key] << " vs " << value);
    BOOST_TEST(config["torch_dtype"] == "float32");
    BOOST_TEST(
        nlohmann::json::parse(test::read_bytes(dir.file("hf/generation_config.json"))) ==
        nlohmann::json({{"bos_token_id", original["bos_token_id"]}, {"eos_token_id", original["eos_token_id"]}}));
    for (const char* file : {"tokenizer.json", "tokenizer_config.json", "chat_template.jinja"})
      if (fs::exists(kRoundTrip + "/" + arch + "/" + file))
        BOOST_TEST(test::read_bytes(dir.file(std::string("hf/") + file)) ==
                   test::read_bytes(kRoundTrip + "/" + arch + "/" + file));
    BOOST_TEST(fs::exists(kRoundTrip + "/llama/chat_template.jinja"));
    BOOST_TEST(reference["llama"].contains("chat"));
    check_same_tensors(io::SafetensorsCheckpoint::open(kRoundTrip + "/" + arch), dir.file("hf/model.safetensors"));
    check_like_transformers(import(dir.file("hf"), "", dir.file("again")), reference[arch], arch + " re-imported");

    // Sharded at 20 kB: every shard but a lone large tensor's within the limit, and the
    // shards import to the same model.
    engine::export_hf({path, dir.file("sharded"), DType::f32, 20'000});
    const nlohmann::json index =
        nlohmann::json::parse(test::read_bytes(dir.file("sharded/model.safetensors.index.json")));
    std::set<std::string> shards;
    for (const auto& [name, shard] : index["weight_map"].items()) shards.insert(shard.get<std::string>());
    int64_t total = 0;
    for (const std::string& shard : shards) {
      const io::SafetensorsFile f = io::SafetensorsFile::open(dir.file("sharded/" + shard));
      int64_t bytes = 0;
      for (const io::SafetensorsEntry& e : f.entries()) bytes += e.end - e.begin;
      BOOST_TEST((bytes <= 20'000 || f.entries().size() == 1u), shard << ": " << bytes << " bytes");
      total += bytes;
    }
    BOOST_TEST(shards.size() > 2u);
    BOOST_TEST(index["metadata"]["total_size"] == total);
    BOOST_TEST(!fs::exists(dir.file("sharded/model.safetensors")));
    check_like_transformers(import(dir.file("sharded"), "", dir.file("from_shards")), reference[arch],
                            arch + " from shards");
  }
}

BOOST_AUTO_TEST_CASE(what_config_json_names_is_checked) {
  TempDir dir;
  // A model_type triad does not convert, or none (then --arch is asked for).
  write_llama(dir, [](io::NamedTensors&, nlohmann::json& c) { c["model_type"] = "mistral"; });
  check_error([&] { import(dir.path().string(), "", dir.file("a")); },
              {dir.file("config.json"), "model_type \"mistral\" is not one triad converts (gpt2 (GPT2LMHeadModel)"});
  write_llama(dir, [](io::NamedTensors&, nlohmann::json& c) { c.erase("model_type"); });
  check_error([&] { import(dir.path().string(), "", dir.file("a")); }, {"has no model_type; pass --arch"});
  fs::remove(dir.file("config.json"));
  check_error([&] { import(dir.path().string(), "", dir.file("a")); },
              {"no config.json beside", "names the model_type; pass --arch"});
  // transformers 5's rope_parameters: its rope_theta is taken, a scaled RoPE refused.
  write_llama(dir, [](io::NamedTensors&, nlohmann::json& c) {
    c.erase("rope_theta");
    c["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 500000.0}};
  });
  BOOST_TEST(engine::read_summary(import(dir.path().string(), "", dir.file("b"))).config["model"]["rope_theta"] ==
             500000.0);
  write_llama(dir, [](io::NamedTensors&, nlohmann::json& c) {
    c["rope_parameters"] = {{"rope_type", "llama3"}, {"rope_theta", 500000.0}, {"factor", 8.0}};
  });
  check_error([&] { import(dir.path().string(), "", dir.file("c")); },
              {"rope_parameters is", "triad's llama model has rope_type \"default\" (no RoPE scaling)"});
  BOOST_TEST(!fs::exists(dir.file("a")));
  BOOST_TEST(!fs::exists(dir.file("c")));
}

BOOST_AUTO_TEST_CASE(shard_sizes_read_as_save_pretrained_reads_them) {
  BOOST_TEST(engine::parse_shard_size("5GB") == 5'000'000'000);
  BOOST_TEST(engine::parse_shard_size("500MB") == 500'000'000);
  BOOST_TEST(engine::parse_shard_size("100kB") == 100'000);
  BOOST_TEST(engine::parse_shard_size("2GiB") == int64_t(2) << 30);
  BOOST_TEST(engine::parse_shard_size("1.5MiB") == 1572864);
  BOOST_TEST(engine::parse_shard_size("4096") == 4096);
  for (const std::string bad : {"", "GB", "5XB", "-1GB", "0"})
    check_error([&] { engine::parse_shard_size(bad); }, {"--max-shard-size '" + bad + "' is not a positive size"});
}

BOOST_AUTO_TEST_CASE(imported_gpt2_gives_the_reference_logits) {
  TempDir dir;
  const std::string path = import(kDir + "/gpt2", "gpt2", dir.file("ckpt"));
  BOOST_TEST(path == dir.file("ckpt/step-00000000.h5"));
  BOOST_TEST(test::read_bytes(dir.file("ckpt/latest")) == "step-00000000.h5\n");
  const engine::LoadedModel loaded = engine::load_model(path);
  BOOST_TEST(
      loaded.config["model"] ==
      nlohmann::json(
          {{"arch", "gpt2"}, {"n_layer", 2}, {"n_head", 4}, {"d_model", 64}, {"seq_len", 32}, {"vocab_size", 256}}));
  const io::NamedTensors ref = io::read_tensor_file(test::data_path("gpt_reference.tns"));
  const Tensor logits = (*loaded.model)(io::find_tensor(ref, "idx", "reference"));
  BOOST_TEST(test::relative_error(logits, io::find_tensor(ref, "logits", "reference")) < 1e-5);

  // A fresh optimizer's state: step 0, master weights equal to the parameters, zero moments.
  const io::H5File file = io::H5File::open(path);
  BOOST_TEST(file.read("/state/step").item() == 0.0);
  BOOST_TEST(
      same_bits(file.read("/optim/blocks.0.attn.qkv.weight/master"), file.read("/model/blocks.0.attn.qkv.weight")));
  BOOST_TEST(ops::max_abs(file.read("/optim/wte.weight/exp_avg_sq")) == 0.0);
  BOOST_TEST(engine::failed_checksums(path).empty());
}

BOOST_AUTO_TEST_CASE(gpt2_export_gives_back_the_original_tensors) {
  TempDir dir;
  const std::string path = import(kDir + "/gpt2", "gpt2", dir.file("ckpt"));
  const io::SafetensorsCheckpoint original = io::SafetensorsCheckpoint::open(kDir + "/gpt2");
  engine::export_hf({path, dir.file("out"), DType::f32});
  check_same_tensors(original, dir.file("out/model.safetensors"), kGpt2Buffers);
  // In 16 bits: each tensor rounded from the f32 weights.
  engine::export_hf({path, dir.file("out16"), DType::bf16});
  const io::SafetensorsFile low = io::SafetensorsFile::open(dir.file("out16/model.safetensors"));
  const std::string w = "transformer.h.1.mlp.c_proj.weight";
  BOOST_TEST(low.entry(w).dtype == "BF16");
  BOOST_TEST(same_bits(low.read(w), ops::to(original.read(w), DType::bf16)));
}

// The tiny Llama imported and loaded into nn::Llama gives LlamaForCausalLM's own logits
// (llama_logits.tns, from transformers): the rotary layout, the grouped key/value heads and
// the RMSNorm epsilon agree with HF's implementation, not only the names.
BOOST_AUTO_TEST_CASE(imported_llama_gives_the_transformers_logits) {
  TempDir dir;
  const engine::LoadedModel loaded = engine::load_model(import(kDir + "/llama", "llama", dir.file("ckpt")));
  const io::NamedTensors ref = io::read_tensor_file(kDir + "/llama_logits.tns");
  const Tensor logits = (*loaded.model)(io::find_tensor(ref, "idx", "llama_logits.tns"));
  BOOST_TEST(test::relative_error(logits, io::find_tensor(ref, "logits", "llama_logits.tns")) < 1e-5);
}

// The Mixtral of the round trip (MixtralForCausalLM saved by transformers) imports as triad's
// Llama with an MoE block in every layer, Mixtral's routing (dropless top-2, renormalised, no
// sampling) and its experts at their triad names; loaded, it gives transformers' logits.
// Without config.json (--arch mixtral and the flags) the tensors give the expert count and
// the routing is HF's default, the same model.
BOOST_AUTO_TEST_CASE(imported_mixtral_gives_the_transformers_logits) {
  TempDir dir;
  const std::string path = import(kRoundTrip + "/mixtral", "", dir.file("ckpt"));
  const nlohmann::json model = engine::read_summary(path).config["model"];
  const nlohmann::json moe = {{"num_experts", 4},
                              {"every", 1},
                              {"top_k", 2},
                              {"drop_tokens", false},
                              {"aux_loss", "megatron"},
                              {"aux_loss_coeff", 0.002},
                              {"top2_2nd_expert_sampling", false},
                              {"norm_topk_prob", true}};
  BOOST_TEST(model == nlohmann::json({{"arch", "llama"},
                                      {"n_layer", 2},
                                      {"n_head", 4},
                                      {"n_kv_head", 2},
                                      {"d_model", 16},
                                      {"intermediate_size", 24},
                                      {"seq_len", 64},
                                      {"vocab_size", 600},
                                      {"rms_norm_eps", 1e-6},
                                      {"rope_theta", 10000.0},
                                      {"moe", moe}}));
  const io::SafetensorsCheckpoint original = io::SafetensorsCheckpoint::open(kRoundTrip + "/mixtral");
  const io::H5File file = io::H5File::open(path);
  BOOST_TEST(same_bits(file.read("/model/blocks.1.moe.experts.3.down.weight"),
                       original.read("model.layers.1.block_sparse_moe.experts.3.w2.weight")));
  BOOST_TEST(same_bits(file.read("/model/blocks.0.moe.experts.2.up.weight"),
                       original.read("model.layers.0.block_sparse_moe.experts.2.w3.weight")));
  BOOST_TEST(same_bits(file.read("/model/blocks.0.moe.gate.wg.weight"),
                       original.read("model.layers.0.block_sparse_moe.gate.weight")));

  const engine::LoadedModel loaded = engine::load_model(path);
  const io::NamedTensors ref = io::read_tensor_file(kRoundTrip + "/mixtral_logits.tns");
  const Tensor logits = (*loaded.model)(io::find_tensor(ref, "batch", "mixtral_logits.tns"));
  const Tensor want = io::find_tensor(ref, "logits", "mixtral_logits.tns");
  BOOST_TEST(test::relative_error(logits, want) < 1e-5);
  BOOST_TEST(ops::max_abs(ops::sub(logits, want)) < 1e-4);

  TempDir bare;
  io::NamedTensors tensors;
  for (const std::string& name : original.names()) tensors.emplace_back(name, original.read(name));
  io::write_safetensors(bare.file("model.safetensors"), tensors);
  const nlohmann::json flags = {{"n_head", 4}, {"seq_len", 64}, {"rope_theta", 10000.0}, {"rms_norm_eps", 1e-6}};
  const std::string from_tensors = import(bare.file("model.safetensors"), "mixtral", bare.file("ckpt"), flags);
  BOOST_TEST(engine::read_summary(from_tensors).config["model"] == model);

  // One expert per token: Mixtral weighs it by 1 (norm_topk_prob true), and so does triad.
  TempDir top1;
  write_mixtral(top1, [](io::NamedTensors&, nlohmann::json& c) { c["num_experts_per_tok"] = 1; });
  const engine::LoadedModel one = engine::load_model(import(top1.path().string(), "", top1.file("ckpt")));
  const Tensor logits_top1 = (*one.model)(io::find_tensor(ref, "batch", "mixtral_logits.tns"));
  const Tensor want_top1 = io::find_tensor(ref, "logits_top1", "mixtral_logits.tns");
  BOOST_TEST(test::relative_error(logits_top1, want_top1) < 1e-5);
  BOOST_TEST(ops::max_abs(ops::sub(logits_top1, want_top1)) < 1e-4);
}

// What MixtralForCausalLM and triad's MoE do not share is named: on import, a sliding window
// shorter than the sequence (a window as long as the sequence imports) and more experts per
// token than there are; on export, MoE blocks Mixtral cannot hold.
BOOST_AUTO_TEST_CASE(mixtral_features_triad_lacks_are_named) {
  TempDir dir;
  write_mixtral(dir, [](io::NamedTensors&, nlohmann::json& c) { c["sliding_window"] = 16; });
  check_error([&] { import(dir.path().string(), "", dir.file("a")); },
              {dir.file("config.json"), "sliding_window is 16, shorter than max_position_embeddings 64"});
  write_mixtral(dir, [](io::NamedTensors&, nlohmann::json& c) { c["num_experts_per_tok"] = 5; });
  check_error([&] { import(dir.path().string(), "", dir.file("a")); },
              {"num_experts_per_tok is 5, more than num_local_experts (4)"});
  write_mixtral(dir, [](io::NamedTensors& t, nlohmann::json&) {
    std::erase_if(t, [](const auto& p) { return p.first == "model.layers.1.block_sparse_moe.experts.3.w1.weight"; });
  });
  check_error(
      [&] { import(dir.path().string(), "", dir.file("a")); },
      {"has no tensor 'model.layers.1.block_sparse_moe.experts.3.w1.weight', which a mixtral model of 2 layers"});
  BOOST_TEST(!fs::exists(dir.file("a")));
  write_mixtral(dir, [](io::NamedTensors&, nlohmann::json& c) { c["sliding_window"] = 4096; });
  BOOST_TEST(engine::read_summary(import(dir.path().string(), "", dir.file("b"))).config["model"]["moe"]["top_k"] == 2);

  const nlohmann::json mixtral = {{"arch", "llama"}, {"moe", {{"num_experts", 4}, {"every", 1}, {"top_k", 2}}}};
  BOOST_TEST(io::hf_architecture(mixtral) == "mixtral");
  BOOST_TEST(io::hf_architecture({{"arch", "llama"}}) == "llama");
  const auto refused = [&](const nlohmann::json& change, const std::string& message) {
    nlohmann::json m = mixtral;
    m.merge_patch(change);
    check_error([&] { io::hf_architecture(m); }, {message});
  };
  refused({{"moe", {{"every", 2}}}}, "model.moe.every is 2; MixtralForCausalLM has an MoE block in every layer");
  refused({{"moe", {{"num_experts", {4, 8}}}}},
          "model.moe.num_experts is [4,8]; MixtralForCausalLM has one expert count");
  refused({{"moe", {{"use_residual", true}}}}, "model.moe.use_residual is true");
  refused({{"moe", {{"top_k", 1}}}}, "model.moe.norm_topk_prob is null at top_k 1; MixtralForCausalLM renormalises");
  refused({{"moe", {{"norm_topk_prob", false}}}}, "model.moe.norm_topk_prob is false at top_k 2");
  nlohmann::json top1 = mixtral;
  top1["moe"].update({{"top_k", 1}, {"norm_topk_prob", true}});
  BOOST_TEST(io::hf_architecture(top1) == "mixtral");
  refused({{"arch", "gpt2"}}, "a gpt2 model with MoE blocks (model.moe) has no transformers class");
}

BOOST_AUTO_TEST_CASE(llama_round_trips_with_triad_names) {
  TempDir dir;
  const std::string path = import(kDir + "/llama", "llama", dir.file("ckpt"));
  const engine::CheckpointSummary s = engine::read_summary(path);
  BOOST_TEST(s.config["model"] == nlohmann::json({{"arch", "llama"},
                                                  {"n_layer", 2},
                                                  {"n_head", 4},
                                                  {"n_kv_head", 2},
                                                  {"d_model", 16},
                                                  {"intermediate_size", 40},
                                                  {"seq_len", 64},
                                                  {"vocab_size", 48},
                                                  {"rms_norm_eps", 1e-6},
                                                  {"rope_theta", 10000.0}}));
  std::map<std::string, Shape> shapes;
  for (const auto& d : s.datasets)
    if (d.name.starts_with("/model/")) shapes[d.name.substr(7)] = d.shape;
  std::map<std::string, Shape> want = {{"embed.weight", {48, 16}}, {"norm_f.weight", {16}}, {"head.weight", {48, 16}}};
  for (int i = 0; i < 2; ++i) {
    const std::string b = "blocks." + std::to_string(i) + ".";
    want[b + "norm1.weight"] = want[b + "norm2.weight"] = {16};
    want[b + "attn.q.weight"] = want[b + "attn.o.weight"] = {16, 16};
    want[b + "attn.k.weight"] = want[b + "attn.v.weight"] = {8, 16};
    want[b + "mlp.gate.weight"] = want[b + "mlp.up.weight"] = {40, 16};
    want[b + "mlp.down.weight"] = {16, 40};
  }
  BOOST_TEST(shapes == want);
  const io::SafetensorsCheckpoint original = io::SafetensorsCheckpoint::open(kDir + "/llama");
  const io::H5File file = io::H5File::open(path);
  BOOST_TEST(
      same_bits(file.read("/model/blocks.1.mlp.down.weight"), original.read("model.layers.1.mlp.down_proj.weight")));
  engine::export_hf({path, dir.file("out"), DType::f32});
  check_same_tensors(original, dir.file("out/model.safetensors"));

  // The F16 and BF16 copies (no config.json beside them: the flags give what the tensors
  // cannot) import to the same weights and export back to themselves.
  const nlohmann::json flags = {{"n_head", 4}, {"seq_len", 64}, {"rope_theta", 10000.0}, {"rms_norm_eps", 1e-6}};
  for (const auto& [name, dtype] : {std::pair{"llama_f16", DType::f16}, std::pair{"llama_bf16", DType::bf16}}) {
    const std::string low = import(kDir + "/" + name + ".safetensors", "llama", dir.file(name), flags);
    BOOST_TEST(engine::read_summary(low).config == s.config, name);
    const io::H5File f = io::H5File::open(low);
    for (const auto& [param, shape] : want)
      BOOST_TEST(same_bits(f.read("/model/" + param), file.read("/model/" + param)));
    engine::export_hf({low, dir.file(std::string(name) + ".out"), dtype});
    check_same_tensors(io::SafetensorsCheckpoint::open(kDir + "/" + name + ".safetensors"),
                       dir.file(std::string(name) + ".out/model.safetensors"));
  }
}

BOOST_AUTO_TEST_CASE(heads_tied_to_the_embedding) {
  // Llama without lm_head.weight: a copy of the embedding when config.json ties them.
  TempDir tied;
  write_llama(tied, [](io::NamedTensors& t, nlohmann::json& c) {
    std::erase_if(t, [](const auto& p) { return p.first == "lm_head.weight"; });
    c["tie_word_embeddings"] = true;
  });
  const io::H5File f = io::H5File::open(import(tied.path().string(), "llama", tied.file("ckpt")));
  BOOST_TEST(same_bits(f.read("/model/head.weight"), f.read("/model/embed.weight")));
  TempDir untied;
  write_llama(untied, [](io::NamedTensors& t, nlohmann::json&) {
    std::erase_if(t, [](const auto& p) { return p.first == "lm_head.weight"; });
  });
  check_error([&] { import(untied.path().string(), "llama", untied.file("ckpt")); },
              {"has no tensor 'lm_head.weight', which a llama model of 2 layers (LlamaForCausalLM) has"});

  // GPT-2 with lm_head.weight: it must be wte itself.
  const io::SafetensorsCheckpoint gpt2 = io::SafetensorsCheckpoint::open(kDir + "/gpt2");
  for (const bool equal : {true, false}) {
    TempDir dir;
    io::NamedTensors t;
    for (const std::string& name : gpt2.names())
      t.emplace_back(name.substr(std::string("transformer.").size()), gpt2.read(name));
    Tensor head = ops::clone(gpt2.read("transformer.wte.weight"));
    if (!equal) head.data<float>()[5] += 1.0f;
    t.emplace_back("lm_head.weight", head);
    io::write_safetensors(dir.file("model.safetensors"), t);
    fs::copy(kDir + "/gpt2/config.json", dir.file("config.json"));
    if (equal)
      BOOST_TEST(engine::read_summary(import(dir.path().string(), "gpt2", dir.file("ckpt"))).datasets.size() ==
                 4 * 28u + 7);
    else
      check_error([&] { import(dir.path().string(), "gpt2", dir.file("ckpt")); },
                  {"lm_head.weight differs from wte.weight; triad's gpt2 ties its output head to the token embedding"});
  }
}

BOOST_AUTO_TEST_CASE(what_the_model_needs_is_named) {
  TempDir dir;
  // No config.json: the tensors give the shapes, and n_head is asked for by its flag.
  fs::copy(kDir + "/gpt2/model.safetensors", dir.file("model.safetensors"));
  check_error([&] { import(dir.file("model.safetensors"), "gpt2", dir.file("a")); },
              {"needs n_head (--n-head), which no config.json beside it and its tensors do not give",
               R"("d_model":64,"n_layer":2,"seq_len":32,"vocab_size":256)"});
  BOOST_TEST(!fs::exists(dir.file("a")));
  import(dir.file("model.safetensors"), "gpt2", dir.file("a"), {{ "n_head", 4 }});
  check_error(
      [&] {
        import(kDir + "/llama_bf16.safetensors", "llama", dir.file("b"), {{ "n_head", 4 }});
      },
      {"needs seq_len (--seq-len), rms_norm_eps (--rms-eps), rope_theta (--rope-theta)"});
  // A flag that contradicts the tensors: the shape it implies is named.
  check_error(
      [&] {
        import(kDir + "/gpt2", "gpt2", dir.file("c"), {{ "seq_len", 16 }});
      },
      {"tensor 'transformer.wpe.weight' has shape [32,64]; the model's config gives [16,64]"});
  // Another architecture's checkpoint, or a model triad does not build.
  check_error([&] { import(kDir + "/llama", "gpt2", dir.file("d")); },
              {"describes a model of model_type \"llama\", not gpt2 (GPT2LMHeadModel)"});
  check_error(
      [&] {
        import(kDir + "/llama_f16.safetensors", "gpt2", dir.file("d"), {{ "n_head", 4 }});
      },
      {"tensor 'model.embed_tokens.weight' is not part of a gpt2 model (GPT2LMHeadModel)"});
  TempDir relu;
  write_llama(relu, [](io::NamedTensors&, nlohmann::json& c) { c["hidden_act"] = "relu"; });
  check_error([&] { import(relu.path().string(), "llama", relu.file("ckpt")); },
              {relu.file("config.json"), "hidden_act is \"relu\"; triad's llama model has [\"silu\"]"});
  BOOST_TEST(!fs::exists(dir.file("c")));
  BOOST_TEST(!fs::exists(dir.file("d")));
}

BOOST_AUTO_TEST_CASE(nothing_saved_is_overwritten) {
  TempDir dir;
  const std::string path = import(kDir + "/gpt2", "gpt2", dir.file("ckpt"));
  const std::string before = test::read_bytes(path);
  check_error([&] { import(kDir + "/gpt2", "gpt2", dir.file("ckpt")); },
              {"already holds checkpoints; import into a new folder"});
  BOOST_TEST(test::read_bytes(path) == before);
  // An export that fails (here: in a dtype safetensors export does not write) leaves the
  // file it was to replace as it was.
  engine::export_hf({path, dir.file("out"), DType::f32});
  const std::string exported = test::read_bytes(dir.file("out/model.safetensors"));
  check_error(
      [&] {
        engine::export_hf({path, dir.file("out"), DType::i32});
      },
      {"triad writes F64, F32, F16 and BF16, not i32"});
  BOOST_TEST(test::read_bytes(dir.file("out/model.safetensors")) == exported);
}

BOOST_AUTO_TEST_CASE(import_copies_the_tokenizer_files) {
  TempDir dir;
  fs::copy(kDir + "/gpt2", dir.file("hub"), fs::copy_options::recursive);
  const std::string tokenizer = test::read_bytes(test::data_path("io/hf_gpt2_tokenizer.json"));
  const std::string config = R"({"eos_token": "<|endoftext|>", "model_max_length": 1024})";
  dir.write("hub/tokenizer.json", tokenizer);
  dir.write("hub/tokenizer_config.json", config);
  import(dir.file("hub"), "gpt2", dir.file("ckpt"));
  BOOST_TEST(test::read_bytes(dir.file("ckpt/tokenizer.json")) == tokenizer);
  BOOST_TEST(test::read_bytes(dir.file("ckpt/tokenizer_config.json")) == config);
  BOOST_TEST(!fs::exists(dir.file("ckpt/special_tokens_map.json")));  // not in the source: not made up
  // Without tokenizer files beside the model, none are written.
  import(kDir + "/gpt2", "gpt2", dir.file("bare"));
  BOOST_TEST(!fs::exists(dir.file("bare/tokenizer.json")));
}

BOOST_AUTO_TEST_SUITE_END()  // test_hf_checkpoint
