#include "io/hf_models.h"

#include <algorithm>
#include <cstring>
#include <regex>
#include <set>

#include "tensor/ops.h"

namespace triad::io {

namespace {

// A dimension of a tensor, from the model config: d_model, 3 d_model, 4 d_model, vocab_size,
// seq_len, intermediate_size, the key/value rows (n_kv_head x the head size), and the
// experts of an MoE block (moe.num_experts).
enum class Dim { C, C3, C4, V, T, I, KV, E };

struct TensorRule {
  std::string hf, triad;   // "{i}" stands for a layer's index, "{e}" for an expert's
  bool transpose;          // HF stores the (in, out) transpose of triad's (out, in)
  std::vector<Dim> shape;  // triad's
};

// A field of triad's model section that a model needs, and where an import finds it.
struct ModelField {
  std::string key;   // triad's key ("n_head")
  std::string hf;    // config.json's key ("n_head", "num_attention_heads")
  std::string flag;  // triad-ckpt import's flag ("--n-head"); "" when the tensors show it
};

// A model field that a tensor's dimension shows (divided by the head size: per_head).
struct ShapeSource {
  std::string key, hf;
  int dim;
  bool per_head = false;
};

// A config.json key that must be absent or take one of `allowed` (what triad builds).
struct Requirement {
  std::string hf;
  nlohmann::json allowed;
};

struct Arch {
  std::string name, hf_class;        // the architecture's name (--arch), HF's model class
  std::string model_arch;            // triad's model.arch
  std::string model_type;            // config.json's model_type
  std::string prefix;                // optional before every HF name on import; written on export
  std::vector<TensorRule> tensors;   // the whole model's and each layer's ({i})
  std::vector<std::string> skipped;  // HF buffers, not weights ({i})
  std::string counted;               // an HF tensor each layer has ({i}): the layers are those it exists for
  std::string embed;                 // the HF token embedding
  std::string tied_head;             // an HF head that must equal the embedding and is dropped ("": none)
  std::string head;                  // the HF head a tied model may omit (a copy of the embedding)
  bool ties_by_default;              // HF's default tie_word_embeddings
  std::vector<ModelField> fields;
  std::vector<ShapeSource> shape_sources;
  nlohmann::json hf_defaults;             // config.json's defaults (HF's config class)
  std::vector<Requirement> requirements;  // written on export with the first allowed value
  nlohmann::json exported;                // the other config.json keys an export writes
};

using enum Dim;

const Arch kGpt2 = {
    "gpt2",
    "GPT2LMHeadModel",
    "gpt2",
    "gpt2",
    "transformer.",
    {{"wte.weight", "wte.weight", false, {V, C}},
     {"wpe.weight", "wpe.weight", false, {T, C}},
     {"h.{i}.ln_1.weight", "blocks.{i}.ln1.weight", false, {C}},
     {"h.{i}.ln_1.bias", "blocks.{i}.ln1.bias", false, {C}},
     {"h.{i}.attn.c_attn.weight", "blocks.{i}.attn.qkv.weight", true, {C3, C}},
     {"h.{i}.attn.c_attn.bias", "blocks.{i}.attn.qkv.bias", false, {C3}},
     {"h.{i}.attn.c_proj.weight", "blocks.{i}.attn.proj.weight", true, {C, C}},
     {"h.{i}.attn.c_proj.bias", "blocks.{i}.attn.proj.bias", false, {C}},
     {"h.{i}.ln_2.weight", "blocks.{i}.ln2.weight", false, {C}},
     {"h.{i}.ln_2.bias", "blocks.{i}.ln2.bias", false, {C}},
     {"h.{i}.mlp.c_fc.weight", "blocks.{i}.mlp.fc.weight", true, {C4, C}},
     {"h.{i}.mlp.c_fc.bias", "blocks.{i}.mlp.fc.bias", false, {C4}},
     {"h.{i}.mlp.c_proj.weight", "blocks.{i}.mlp.proj.weight", true, {C, C4}},
     {"h.{i}.mlp.c_proj.bias", "blocks.{i}.mlp.proj.bias", false, {C}},
     {"ln_f.weight", "ln_f.weight", false, {C}},
     {"ln_f.bias", "ln_f.bias", false, {C}}},
    {"h.{i}.attn.bias", "h.{i}.attn.masked_bias"},
    "h.{i}.ln_1.weight",
    "wte.weight",
    "lm_head.weight",
    "",
    true,
    {{"n_layer", "n_layer", ""},
     {"n_head", "n_head", "--n-head"},
     {"d_model", "n_embd", ""},
     {"seq_len", "n_positions", ""},
     {"vocab_size", "vocab_size", ""}},
    {{"d_model", "wte.weight", 1}, {"vocab_size", "wte.weight", 0}, {"seq_len", "wpe.weight", 0}},
    {{"n_layer", 12}, {"n_head", 12}, {"n_embd", 768}, {"n_positions", 1024}, {"vocab_size", 50257}},
    {{"activation_function", {"gelu_new", "gelu_pytorch_tanh"}},
     {"layer_norm_epsilon", {1e-5}},
     {"n_inner", {nullptr}},
     {"scale_attn_weights", {true}},
     {"scale_attn_by_inverse_layer_idx", {false}},
     {"add_cross_attention", {false}}},
    {{"reorder_and_upcast_attn", false},
     {"initializer_range", 0.02},
     {"use_cache", true},
     {"summary_type", "cls_index"},
     {"summary_use_proj", true},
     {"summary_activation", nullptr},
     {"summary_proj_to_labels", true},
     {"summary_first_dropout", 0.1}},
};

// The Llama's tensors (Mixtral's too) with `mlp` as each layer's MLP, between the attention
// and the final norm.
std::vector<TensorRule> llama_tensors(const std::vector<TensorRule>& mlp) {
  std::vector<TensorRule> t = {
      {"model.embed_tokens.weight", "embed.weight", false, {V, C}},
      {"model.layers.{i}.input_layernorm.weight", "blocks.{i}.norm1.weight", false, {C}},
      {"model.layers.{i}.self_attn.q_proj.weight", "blocks.{i}.attn.q.weight", false, {C, C}},
      {"model.layers.{i}.self_attn.k_proj.weight", "blocks.{i}.attn.k.weight", false, {KV, C}},
      {"model.layers.{i}.self_attn.v_proj.weight", "blocks.{i}.attn.v.weight", false, {KV, C}},
      {"model.layers.{i}.self_attn.o_proj.weight", "blocks.{i}.attn.o.weight", false, {C, C}},
      {"model.layers.{i}.post_attention_layernorm.weight", "blocks.{i}.norm2.weight", false, {C}}};
  t.insert(t.end(), mlp.begin(), mlp.end());
  t.push_back({"model.norm.weight", "norm_f.weight", false, {C}});
  t.push_back({"lm_head.weight", "head.weight", false, {V, C}});
  return t;
}

const Arch kLlama = {
    "llama",
    "LlamaForCausalLM",
    "llama",
    "llama",
    "",
    llama_tensors({{"model.layers.{i}.mlp.gate_proj.weight", "blocks.{i}.mlp.gate.weight", false, {I, C}},
                   {"model.layers.{i}.mlp.up_proj.weight", "blocks.{i}.mlp.up.weight", false, {I, C}},
                   {"model.layers.{i}.mlp.down_proj.weight", "blocks.{i}.mlp.down.weight", false, {C, I}}}),
    {},
    "model.layers.{i}.input_layernorm.weight",
    "model.embed_tokens.weight",
    "",
    "lm_head.weight",
    false,
    {{"n_layer", "num_hidden_layers", ""},
     {"n_head", "num_attention_heads", "--n-head"},
     {"n_kv_head", "num_key_value_heads", ""},
     {"d_model", "hidden_size", ""},
     {"intermediate_size", "intermediate_size", ""},
     {"seq_len", "max_position_embeddings", "--seq-len"},
     {"vocab_size", "vocab_size", ""},
     {"rms_norm_eps", "rms_norm_eps", "--rms-eps"},
     {"rope_theta", "rope_theta", "--rope-theta"}},
    {{"d_model", "model.embed_tokens.weight", 1},
     {"vocab_size", "model.embed_tokens.weight", 0},
     {"intermediate_size", "model.layers.0.mlp.gate_proj.weight", 0},
     {"n_kv_head", "model.layers.0.self_attn.k_proj.weight", 0, true}},
    {{"num_hidden_layers", 32},
     {"num_attention_heads", 32},
     {"hidden_size", 4096},
     {"intermediate_size", 11008},
     {"max_position_embeddings", 2048},
     {"vocab_size", 32000},
     {"rms_norm_eps", 1e-6},
     {"rope_theta", 10000.0}},
    {{"hidden_act", {"silu"}}, {"rope_scaling", {nullptr}}, {"attention_bias", {false}}, {"mlp_bias", {false}}},
    {{"attention_dropout", 0.0}, {"initializer_range", 0.02}, {"pretraining_tp", 1}, {"use_cache", true}},
};

// Mixtral (MixtralForCausalLM): the Llama with every block's MLP a sparse MoE block, as the
// Hub's checkpoints and save_pretrained name it.
const Arch kMixtral = {
    "mixtral",
    "MixtralForCausalLM",
    "llama",
    "mixtral",
    "",
    llama_tensors(
        {{"model.layers.{i}.block_sparse_moe.gate.weight", "blocks.{i}.moe.gate.wg.weight", false, {E, C}},
         {"model.layers.{i}.block_sparse_moe.experts.{e}.w1.weight", "blocks.{i}.moe.experts.{e}.gate.weight", false,
          {I, C}},
         {"model.layers.{i}.block_sparse_moe.experts.{e}.w3.weight", "blocks.{i}.moe.experts.{e}.up.weight", false,
          {I, C}},
         {"model.layers.{i}.block_sparse_moe.experts.{e}.w2.weight", "blocks.{i}.moe.experts.{e}.down.weight", false,
          {C, I}}}),
    {},
    "model.layers.{i}.input_layernorm.weight",
    "model.embed_tokens.weight",
    "",
    "lm_head.weight",
    false,
    kLlama.fields,
    {{"d_model", "model.embed_tokens.weight", 1},
     {"vocab_size", "model.embed_tokens.weight", 0},
     {"intermediate_size", "model.layers.0.block_sparse_moe.experts.0.w1.weight", 0},
     {"n_kv_head", "model.layers.0.self_attn.k_proj.weight", 0, true}},
    {{"num_hidden_layers", 32},
     {"num_attention_heads", 32},
     {"hidden_size", 4096},
     {"intermediate_size", 14336},
     {"max_position_embeddings", 131072},
     {"vocab_size", 32000},
     {"rms_norm_eps", 1e-5},
     {"rope_theta", 1e6}},
    {{"hidden_act", {"silu"}}, {"rope_scaling", {nullptr}}},
    {{"attention_dropout", 0.0},
     {"initializer_range", 0.02},
     {"use_cache", true},
     {"output_router_logits", false},
     {"router_jitter_noise", 0.0},
     {"sliding_window", nullptr},
     {"head_dim", nullptr}},
};

const Arch& arch_of(const std::string& name) {
  if (name == "gpt2") return kGpt2;
  if (name == "mixtral") return kMixtral;
  TRIAD_CHECK(name == "llama",
              "unknown architecture '" << name << "' (triad converts " << hf_architecture_names() << ")");
  return kLlama;
}

// Mixtral's routing as triad's MoE options (Note [HF name maps]).
nlohmann::json mixtral_moe(int64_t experts, int64_t k, double aux_loss_coef) {
  return {{"num_experts", experts},
          {"every", 1},
          {"top_k", k},
          {"drop_tokens", false},
          {"top2_2nd_expert_sampling", false},
          {"aux_loss", "megatron"},
          {"aux_loss_coeff", aux_loss_coef * double(k)},
          {"norm_topk_prob", true}};
}

// `pattern` with `layer` for its "{i}" and `expert` for its "{e}".
std::string with_indices(std::string pattern, int64_t layer, int64_t expert = 0) {
  for (const auto& [key, value] : {std::pair{"{i}", layer}, std::pair{"{e}", expert}})
    if (const size_t at = pattern.find(key); at != std::string::npos)
      pattern = pattern.substr(0, at) + std::to_string(value) + pattern.substr(at + 3);
  return pattern;
}

// Whether `name` is `pattern` with a layer index for its "{i}" and an expert's for its "{e}"
// (returned in `layer` and `expert`).
bool matches(const std::string& pattern, const std::string& name, int64_t& layer, int64_t& expert) {
  if (pattern.find('{') == std::string::npos) return pattern == name;
  std::string regex;
  std::vector<char> order;  // 'i' or 'e', in the pattern's order
  for (size_t at = 0; at < pattern.size(); ++at) {
    if (pattern.compare(at, 3, "{i}") == 0 || pattern.compare(at, 3, "{e}") == 0) {
      order.push_back(pattern[at + 1]);
      regex += "([0-9]{1,9})";
      at += 2;
    } else {
      if (std::string_view(".[]()*+?^$|\\{}").find(pattern[at]) != std::string_view::npos) regex += '\\';
      regex += pattern[at];
    }
  }
  std::smatch m;
  if (!std::regex_match(name, m, std::regex(regex))) return false;
  for (size_t k = 0; k < order.size(); ++k) (order[k] == 'i' ? layer : expert) = std::stoll(m[int(k) + 1].str());
  return true;
}

bool matches(const std::string& pattern, const std::string& name) {
  int64_t layer = 0, expert = 0;
  return matches(pattern, name, layer, expert);
}

// The HF tensor called `name` (prefixed or not); "" when there is none.
std::string find(const Arch& a, const SafetensorsCheckpoint& hf, const std::string& name) {
  if (hf.has(name)) return name;
  if (!a.prefix.empty() && hf.has(a.prefix + name)) return a.prefix + name;
  return "";
}

int64_t dim_size(Dim d, const nlohmann::json& m) {
  const int64_t c = m.at("d_model").get<int64_t>();
  switch (d) {
    case C:
      return c;
    case C3:
      return 3 * c;
    case C4:
      return 4 * c;
    case V:
      return m.at("vocab_size").get<int64_t>();
    case T:
      return m.at("seq_len").get<int64_t>();
    case I:
      return m.at("intermediate_size").get<int64_t>();
    case KV:
      return m.at("n_kv_head").get<int64_t>() * (c / m.at("n_head").get<int64_t>());
    case E:
      return m.at("moe").at("num_experts").get<int64_t>();
  }
  TRIAD_ASSERT(false);
}

std::string shape_text(const Shape& s) { return nlohmann::json(s).dump(); }

}  // namespace

bool is_hf_architecture(const std::string& arch) { return arch == "gpt2" || arch == "llama" || arch == "mixtral"; }
std::string hf_architecture_names() {
  return "gpt2 (GPT2LMHeadModel), llama (LlamaForCausalLM) and mixtral (MixtralForCausalLM)";
}

std::string hf_architecture(const nlohmann::json& model) {
  const std::string arch = model.value("arch", "gpt2");
  if (!model.contains("moe") || model["moe"].is_null()) return arch;
  TRIAD_CHECK(arch == "llama", "a " << arch << " model with MoE blocks (model.moe) has no transformers class; "
                                    << "safetensors export converts MoE blocks of the llama (MixtralForCausalLM)");
  const nlohmann::json& moe = model["moe"];
  const nlohmann::json every = moe.value("every", nlohmann::json(2)), k = moe.value("top_k", nlohmann::json(1));
  TRIAD_CHECK(every == 1, "model.moe.every is " << every.dump()
                                                << "; MixtralForCausalLM has an MoE block in every layer (every 1)");
  const nlohmann::json experts = moe.value("num_experts", nlohmann::json(1));
  TRIAD_CHECK(experts.is_number_integer() ||
                  (experts.is_array() && std::all_of(experts.begin(), experts.end(),
                                                     [&](const nlohmann::json& e) { return e == experts.front(); })),
              "model.moe.num_experts is " << experts.dump() << "; MixtralForCausalLM has one expert count");
  TRIAD_CHECK(!moe.value("use_residual", false),
              "model.moe.use_residual is true; MixtralForCausalLM has no dense MLP beside the experts");
  const bool renormalized = moe.value("norm_topk_prob", k.is_number_integer() && k.get<int64_t>() >= 2);
  TRIAD_CHECK(renormalized, "model.moe.norm_topk_prob is "
                                << moe.value("norm_topk_prob", nlohmann::json()).dump() << " at top_k " << k.dump()
                                << "; MixtralForCausalLM renormalises a token's top-k probabilities to sum 1 "
                                   "(norm_topk_prob true)");
  return "mixtral";
}

std::string arch_from_hf_config(const nlohmann::json& config, const std::string& path) {
  TRIAD_CHECK(config.is_object() && config.contains("model_type"),
              "'" << path << "' has no model_type; pass --arch (" << hf_architecture_names() << ")");
  const nlohmann::json& type = config["model_type"];
  for (const Arch* a : {&kGpt2, &kLlama, &kMixtral})
    if (type == a->model_type) return a->name;
  TRIAD_CHECK(false, "'" << path << "': model_type " << type.dump() << " is not one triad converts ("
                         << hf_architecture_names() << ")");
  return "";
}

nlohmann::json hf_config(const nlohmann::json& model, DType dtype, const nlohmann::json& bos,
                         const nlohmann::json& eos) {
  const Arch& a = arch_of(hf_architecture(model));
  nlohmann::json config = a.exported;
  config["architectures"] = {a.hf_class};
  config["model_type"] = a.model_type;
  for (const ModelField& f : a.fields) config[f.hf] = model.at(f.key);
  for (const Requirement& r : a.requirements) config[r.hf] = r.allowed.front();
  config["tie_word_embeddings"] = a.ties_by_default;
  const char* torch_dtype = dtype == DType::f32    ? "float32"
                            : dtype == DType::f16  ? "float16"
                            : dtype == DType::bf16 ? "bfloat16"
                                                   : "float64";
  config["torch_dtype"] = config["dtype"] = torch_dtype;
  config["bos_token_id"] = bos;
  config["eos_token_id"] = eos;
  if (a.name == "gpt2") {
    config["n_ctx"] = model.at("seq_len");
    const double dropout = model.value("dropout", 0.0);
    for (const char* key : {"attn_pdrop", "embd_pdrop", "resid_pdrop"}) config[key] = dropout;
  } else {
    if (a.name == "llama") config["head_dim"] = model.at("d_model").get<int64_t>() / model.at("n_head").get<int64_t>();
    config["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", model.at("rope_theta")}};
  }
  if (a.name == "mixtral") {
    const nlohmann::json& moe = model.at("moe");
    const nlohmann::json& experts = moe.at("num_experts");
    const int64_t k = moe.at("top_k").get<int64_t>();
    config["num_local_experts"] = experts.is_array() ? experts.front() : experts;
    config["num_experts_per_tok"] = k;
    config["router_aux_loss_coef"] = moe.value("aux_loss_coeff", 0.01) / double(k);
  }
  return config;
}

nlohmann::json model_from_hf_config(const std::string& arch, const nlohmann::json& config, const std::string& path) {
  const Arch& a = arch_of(arch);
  TRIAD_CHECK(config.is_object(), "'" << path << "' is not a JSON object");
  const nlohmann::json type = config.value("model_type", nlohmann::json(a.model_type));
  TRIAD_CHECK(type == a.model_type, "'" << path << "' describes a model of model_type " << type.dump() << ", not "
                                        << a.model_type << " (" << a.hf_class << ")");
  for (const Requirement& r : a.requirements) {
    if (!config.contains(r.hf)) continue;
    const nlohmann::json& v = config[r.hf];
    TRIAD_CHECK(std::find(r.allowed.begin(), r.allowed.end(), v) != r.allowed.end(),
                "'" << path << "': " << r.hf << " is " << v.dump() << "; triad's " << a.name << " model has "
                    << r.allowed.dump());
  }
  // transformers 5 keeps RoPE's base in rope_parameters (rope_type "default": no scaling).
  nlohmann::json flat = config;
  if (a.model_arch == "llama" && config.contains("rope_parameters") && !config["rope_parameters"].is_null()) {
    const nlohmann::json& rope = config["rope_parameters"];
    TRIAD_CHECK(rope.is_object() && rope.value("rope_type", "default") == "default",
                "'" << path << "': rope_parameters is " << rope.dump()
                    << "; triad's llama model has rope_type \"default\" (no RoPE scaling)");
    if (rope.contains("rope_theta")) flat["rope_theta"] = rope["rope_theta"];
  }
  nlohmann::json model = {{"arch", a.model_arch}};
  for (const ModelField& f : a.fields) {
    const nlohmann::json& v = flat.contains(f.hf) ? flat[f.hf] : a.hf_defaults.value(f.hf, nlohmann::json());
    if (v.is_null()) continue;
    TRIAD_CHECK(v.is_number(), "'" << path << "': " << f.hf << " is " << v.dump() << ", not a number");
    model[f.key] = v;
  }
  if (a.name == "mixtral") {
    // A window as long as the sequence changes nothing; a shorter one is attention triad lacks.
    const nlohmann::json window = config.value("sliding_window", nlohmann::json());
    TRIAD_CHECK(window.is_null() || (window.is_number() && model.contains("seq_len") &&
                                     window.get<double>() >= model["seq_len"].get<double>()),
                "'" << path << "': sliding_window is " << window.dump() << ", shorter than max_position_embeddings "
                    << model.value("seq_len", nlohmann::json()).dump()
                    << "; triad's llama attends to every earlier position (sliding_window null)");
    const auto integer = [&](const char* key, int64_t fallback, int64_t least) {
      const nlohmann::json v = config.value(key, nlohmann::json(fallback));
      TRIAD_CHECK(v.is_number_integer() && v.get<int64_t>() >= least,
                  "'" << path << "': " << key << " is " << v.dump() << ", not an integer >= " << least);
      return v.get<int64_t>();
    };
    const int64_t experts = integer("num_local_experts", 8, 1);
    const int64_t k = integer("num_experts_per_tok", 2, 1);
    TRIAD_CHECK(k <= experts, "'" << path << "': num_experts_per_tok is " << k << ", more than num_local_experts ("
                                  << experts << ")");
    const nlohmann::json coef = config.value("router_aux_loss_coef", nlohmann::json(0.001));
    TRIAD_CHECK(coef.is_number() && coef.get<double>() >= 0,
                "'" << path << "': router_aux_loss_coef is " << coef.dump() << ", not a number >= 0");
    model["moe"] = mixtral_moe(experts, k, coef.get<double>());
  }
  return model;
}

void check_hf_names(const std::string& arch, const SafetensorsCheckpoint& hf) {
  const Arch& a = arch_of(arch);
  std::vector<std::string> patterns = a.skipped;
  for (const TensorRule& r : a.tensors) patterns.push_back(r.hf);
  if (!a.tied_head.empty()) patterns.push_back(a.tied_head);
  for (const std::string& stored : hf.names()) {
    const std::string name =
        !a.prefix.empty() && stored.starts_with(a.prefix) ? stored.substr(a.prefix.size()) : stored;
    TRIAD_CHECK(std::any_of(patterns.begin(), patterns.end(), [&](const auto& p) { return matches(p, name); }),
                "'" << hf.path() << "': tensor '" << stored << "' is not part of a " << a.name << " model ("
                    << a.hf_class << ")");
  }
}

bool hf_ties_head(const std::string& arch, const nlohmann::json& config) {
  const nlohmann::json& tie = config.is_object() && config.contains("tie_word_embeddings")
                                  ? config["tie_word_embeddings"]
                                  : nlohmann::json(arch_of(arch).ties_by_default);
  return tie.is_boolean() && tie.get<bool>();
}

void complete_model_from_tensors(const std::string& arch, const SafetensorsCheckpoint& hf, nlohmann::json& model) {
  const Arch& a = arch_of(arch);
  model["arch"] = a.model_arch;
  if (!model.contains("n_layer")) {
    int64_t layers = 0;
    while (!find(a, hf, with_indices(a.counted, layers)).empty()) ++layers;
    if (layers > 0) model["n_layer"] = layers;
  }
  // (no config.json: HF's default routing, two experts per token, over the gate's rows)
  const std::string gate = "model.layers.0.block_sparse_moe.gate.weight";
  if (a.name == "mixtral" && !model.contains("moe") && hf.has(gate) && hf.entry(gate).shape.size() == 2)
    model["moe"] = mixtral_moe(hf.entry(gate).shape[0], 2, 0.001);
  for (const ShapeSource& s : a.shape_sources) {
    const std::string name = find(a, hf, s.hf);
    if (model.contains(s.key) || name.empty() || int(hf.entry(name).shape.size()) <= s.dim) continue;
    const int64_t size = hf.entry(name).shape[size_t(s.dim)];
    if (!s.per_head) {
      model[s.key] = size;
    } else if (model.contains("n_head") && model.contains("d_model")) {
      const int64_t head = model["d_model"].get<int64_t>() / std::max<int64_t>(1, model["n_head"].get<int64_t>());
      if (head > 0 && size % head == 0) model[s.key] = size / head;
    }
  }
}

std::vector<std::string> missing_model_fields(const std::string& arch, const nlohmann::json& model) {
  std::vector<std::string> out;
  for (const ModelField& f : arch_of(arch).fields)
    if (!model.contains(f.key)) out.push_back(f.key + (f.flag.empty() ? "" : " (" + f.flag + ")"));
  return out;
}

NamedTensors from_hf(const std::string& arch, const nlohmann::json& model, const SafetensorsCheckpoint& hf,
                     bool tie_head) {
  const Arch& a = arch_of(arch);
  const int64_t layers = model.at("n_layer").get<int64_t>();
  const int64_t c = model.at("d_model").get<int64_t>(), heads = model.at("n_head").get<int64_t>();
  TRIAD_CHECK(heads > 0 && c % heads == 0,
              "'" << hf.path() << "': d_model " << c << " is not a multiple of n_head " << heads);
  const std::string what = "a " + a.name + " model of " + std::to_string(layers) + " layers (" + a.hf_class + ")";
  // Every HF name the model has, unprefixed: its tensors, then its skipped buffers.
  struct Wanted {
    std::string hf, triad;
    const TensorRule* rule;
  };
  std::vector<Wanted> wanted;
  std::set<std::string> known, skipped;
  for (const TensorRule& r : a.tensors) {
    const bool per_layer = r.hf.find("{i}") != std::string::npos, per_expert = r.hf.find("{e}") != std::string::npos;
    const int64_t experts = per_expert ? dim_size(E, model) : 1;
    for (int64_t i = 0; i < (per_layer ? layers : 1); ++i)
      for (int64_t e = 0; e < experts; ++e)
        wanted.push_back({with_indices(r.hf, i, e), with_indices(r.triad, i, e), &r});
  }
  for (const Wanted& w : wanted) known.insert(w.hf);
  for (const std::string& s : a.skipped)
    for (int64_t i = 0; i < layers; ++i) skipped.insert(with_indices(s, i));
  for (const std::string& stored : hf.names()) {
    const std::string name =
        !a.prefix.empty() && stored.starts_with(a.prefix) ? stored.substr(a.prefix.size()) : stored;
    TRIAD_CHECK(known.count(name) || skipped.count(name) || name == a.tied_head,
                "'" << hf.path() << "': tensor '" << stored << "' is not part of " << what);
  }
  NamedTensors out;
  for (const auto& [hf_name, triad_name, rule] : wanted) {
    std::string stored = find(a, hf, hf_name);
    if (stored.empty() && hf_name == a.head && tie_head) stored = find(a, hf, a.embed);
    TRIAD_CHECK(!stored.empty(), "'" << hf.path() << "' has no tensor '" << hf_name << "', which " << what << " has");
    Shape shape;
    for (Dim d : rule->shape) shape.push_back(dim_size(d, model));
    Shape hf_shape = shape;
    if (rule->transpose) std::reverse(hf_shape.begin(), hf_shape.end());
    const Shape& found = hf.entry(stored).shape;
    TRIAD_CHECK(found == hf_shape, "'" << hf.path() << "': tensor '" << stored << "' has shape " << shape_text(found)
                                       << "; the model's config gives " << shape_text(hf_shape));
    Tensor t = ops::to(hf.read(stored), DType::f32);
    if (rule->transpose) t = ops::transpose(t, 0, 1);
    out.emplace_back(triad_name, ops::contiguous(t));
  }
  const std::string head = a.tied_head.empty() ? "" : find(a, hf, a.tied_head);
  if (!head.empty()) {
    const std::string embed = find(a, hf, a.embed);
    const Tensor h = ops::to(hf.read(head), DType::f32), e = ops::to(hf.read(embed), DType::f32);
    TRIAD_CHECK(h.shape() == e.shape() && std::memcmp(h.raw_data(), e.raw_data(), h.nbytes()) == 0,
                "'" << hf.path() << "': " << head << " differs from " << embed << "; triad's " << a.name
                    << " ties its output head to the token embedding");
  }
  return out;
}

NamedTensors to_hf(const std::string& arch, const NamedTensors& triad, DType dtype) {
  const Arch& a = arch_of(arch);
  NamedTensors out;
  for (const auto& [name, t] : triad) {
    int64_t layer = 0, expert = 0;
    const auto rule = std::find_if(a.tensors.begin(), a.tensors.end(),
                                   [&](const TensorRule& r) { return matches(r.triad, name, layer, expert); });
    TRIAD_CHECK(rule != a.tensors.end(),
                "parameter '" << name << "' is not part of a " << a.name << " model (" << a.hf_class << ")");
    const Tensor hf = rule->transpose ? ops::transpose(t, 0, 1) : t;
    out.emplace_back(a.prefix + with_indices(rule->hf, layer, expert), ops::contiguous(ops::to(hf, dtype)));
  }
  return out;
}

}  // namespace triad::io
