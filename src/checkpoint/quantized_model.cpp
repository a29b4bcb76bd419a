// Quantized model files (checkpoint/quantized_model.h).
#include "checkpoint/quantized_model.h"

#include <filesystem>

#include "checkpoint/checkpoint.h"
#include "io/checksum.h"
#include "io/h5file.h"
#include "nn/gpt.h"
#include "nn/llama.h"
#include "tensor/ops.h"

namespace triad::engine {

using io::H5File;

void QuantRecipe::validate() const {
  TRIAD_CHECK(method == "zeroquant" || method == "xtc",
              "quantization recipe: method must be zeroquant or xtc, got '" << method << "'");
  if (method == "zeroquant")
    TRIAD_CHECK(wbits == 8 || wbits == 4, "quantization recipe: zeroquant's wbits must be 8 or 4, got " << wbits);
  else
    TRIAD_CHECK(wbits == 2 || wbits == 1, "quantization recipe: xtc's wbits must be 2 or 1, got " << wbits);
  TRIAD_CHECK(abits == 8 || abits == 16, "quantization recipe: abits must be 8 or 16, got " << abits);
  TRIAD_CHECK((group_size > 0 || (method == "xtc" && group_size == 0)) && group_size % 8 == 0,
              "quantization recipe: group_size must be a positive multiple of 8"
                  << (method == "xtc" ? " or 0 (one scale per row)" : "") << ", got " << group_size);
  TRIAD_CHECK(symmetric, "quantization recipe: only symmetric weights are built");
  TRIAD_CHECK(lkd_steps >= 0, "quantization recipe: lkd_steps must be 0 or more, got " << lkd_steps);
  TRIAD_CHECK(steps >= 0, "quantization recipe: steps must be 0 or more, got " << steps);
  TRIAD_CHECK(!quantize_embeddings || method == "zeroquant",
              "quantization recipe: quantize_embeddings is built for zeroquant only ("
                  << method << " trains the embeddings and the output head in full precision)");
}

nlohmann::json QuantRecipe::to_json() const {
  nlohmann::json j = {{"method", method},
                      {"wbits", wbits},
                      {"abits", abits},
                      {"group_size", group_size},
                      {"symmetric", symmetric},
                      {"lkd_steps", lkd_steps},
                      {"quantize_embeddings", quantize_embeddings}};
  if (method == "xtc") j.update({{"steps", steps}, {"keep_layers", keep_layers}, {"teacher_layers", teacher_layers}});
  return j;
}

QuantRecipe QuantRecipe::from_json(const nlohmann::json& j) {
  QuantRecipe r;
  r.method = j.at("method").get<std::string>();
  r.wbits = j.at("wbits").get<int>();
  r.abits = j.at("abits").get<int>();
  r.group_size = j.at("group_size").get<int64_t>();
  r.symmetric = j.at("symmetric").get<bool>();
  r.lkd_steps = j.value("lkd_steps", int64_t(0));  // absent in files written before distillation existed
  r.quantize_embeddings = j.value("quantize_embeddings", false);  // absent before the option existed
  r.steps = j.value("steps", int64_t(0));
  r.keep_layers = j.value("keep_layers", std::vector<int64_t>{});
  r.teacher_layers = j.value("teacher_layers", int64_t(0));
  r.validate();
  return r;
}

std::vector<std::pair<std::string, std::shared_ptr<nn::Linear>>> quantized_linears(
    const std::shared_ptr<nn::LanguageModel>& model) {
  std::vector<std::pair<std::string, std::shared_ptr<nn::Linear>>> out;
  for (const auto& [name, m] : model->named_modules(model))
    if (auto linear = std::dynamic_pointer_cast<nn::Linear>(m);
        linear && name.starts_with("blocks.") && !name.ends_with(".moe.gate.wg"))
      out.emplace_back(name, linear);
  return out;
}

std::vector<std::pair<std::string, nn::ModulePtr>> quantized_embeddings(
    const std::shared_ptr<nn::LanguageModel>& model) {
  if (const auto gpt = std::dynamic_pointer_cast<nn::GPT>(model)) return {{"wte", gpt->wte}};
  const auto llama = std::dynamic_pointer_cast<nn::Llama>(model);
  TRIAD_CHECK(llama, "quantize_embeddings: the model is neither a GPT nor a Llama");
  std::vector<std::pair<std::string, nn::ModulePtr>> out{{"embed", llama->embed}};
  if (llama->head) out.emplace_back("head", llama->head);
  return out;
}

namespace {

// The weight of a module of quantized_embeddings (an nn::Embedding or an nn::Linear).
const Tensor& table_weight(const nn::Module& m) {
  if (const auto* table = dynamic_cast<const nn::Embedding*>(&m)) return table->weight;
  return dynamic_cast<const nn::Linear&>(m).weight;
}

void write(H5File& file, const std::string& name, const Tensor& t) {
  const Tensor c = ops::contiguous(t);
  file.create_dataset(name, c.dtype(), c.shape());
  file.write_range(name, 0, ops::reshape(c, {c.numel()}));
  file.set_attr_uint64(name, "checksum", io::tensor_checksum(c));
}

Tensor read_verified(const H5File& file, const std::string& name) {
  TRIAD_CHECK(file.has(name), "quantized model '" << file.path() << "' has no dataset " << name);
  const Tensor t = file.read(name);
  TRIAD_CHECK(
      file.has_attr(name, "checksum") && io::tensor_checksum(t) == file.get_attr_uint64(name, "checksum"),
      "quantized model '" << file.path() << "': dataset " << name << " fails its checksum (the file is damaged)");
  return t;
}

}  // namespace

void save_quantized_model(const std::string& checkpoint, const std::string& out, const QuantRecipe& recipe) {
  recipe.validate();
  save_quantized_model(load_model(checkpoint), out, recipe);
}

void save_quantized_model(const LoadedModel& m, const std::string& out, const QuantRecipe& recipe) {
  recipe.validate();
  std::vector<std::pair<std::string, Quantized>> quantized;
  const auto quantize = [&](const std::string& name, const Tensor& w) {
    const int64_t k = w.size(1);
    TRIAD_CHECK(k % recipe.format(k).block == 0 && k % 8 == 0,
                recipe.method << ": the group size " << recipe.format(k).block
                              << " does not divide the input dimension " << k << " of " << name << " ("
                              << shape_str(w.shape()) << "), or that is not a multiple of 8");
    quantized.emplace_back(name, ops::quantize_blocks(w, recipe.format(k)));
  };
  for (const auto& [name, linear] : quantized_linears(m.model)) quantize(name + ".weight", linear->weight);
  if (recipe.quantize_embeddings)
    for (const auto& [name, table] : quantized_embeddings(m.model)) quantize(name + ".weight", table_weight(*table));
  const std::string tmp = out + ".tmp";
  {
    H5File file = H5File::create(tmp);
    for (const auto& [name, p] : m.model->named_parameters()) {
      const bool is_quantized =
          std::any_of(quantized.begin(), quantized.end(), [&](const auto& q) { return q.first == name; });
      if (!is_quantized) write(file, "/model/" + name, ops::to(p, DType::f32));
    }
    for (const auto& [name, q] : quantized) {
      write(file, "/quantized/" + name + "/q", q.q);
      write(file, "/quantized/" + name + "/scales", q.scales);
    }
    file.set_attr_int64("/", "format_version", kCheckpointFormatVersion);
    file.set_attr_string("/", "kind", "quantized");
    file.set_attr_string("/", "config", m.config.dump());
    file.set_attr_string("/", "layout",
                         nlohmann::json{{"dp", 1}, {"tp", 1}, {"pp", 1}, {"zero_stage", 0}, {"dtype", "f32"}}.dump());
    file.set_attr_string("/", "recipe", recipe.to_json().dump());
    file.flush();
  }
  std::filesystem::rename(tmp, out);
}

QuantRecipe read_recipe(const std::string& path) {
  const H5File file = H5File::open(path);
  TRIAD_CHECK(file.has_attr("/", "recipe"), "'" << path << "' is not a quantized model (no recipe attribute)");
  return QuantRecipe::from_json(nlohmann::json::parse(file.get_attr_string("/", "recipe")));
}

namespace {

// Linear layers and token tables built without weights (quantized_layout).
class WithoutWeights : public nn::Parallelism {
 public:
  std::shared_ptr<nn::Linear> column_linear(int64_t in_features, int64_t out_features, int, bool bias) const override {
    return std::make_shared<nn::Linear>(in_features, out_features, bias, nn::Linear::WithoutWeight{});
  }
  std::shared_ptr<nn::Linear> row_linear(int64_t in_features, int64_t out_features, bool bias) const override {
    return std::make_shared<nn::Linear>(in_features, out_features, bias, nn::Linear::WithoutWeight{});
  }
  std::shared_ptr<nn::Embedding> token_embedding(int64_t vocab, int64_t dim, int64_t multiple) const override {
    return std::make_shared<nn::Embedding>(nn::vocab_rows_per_rank(vocab, 1, multiple), dim, nn::WithoutWeight{});
  }
};

int64_t nbytes(const Tensor& t) { return t.defined() ? t.numel() * int64_t(element_size(t.dtype())) : 0; }

}  // namespace

std::shared_ptr<const nn::Parallelism> quantized_layout() {
  static const std::shared_ptr<const nn::Parallelism> p = std::make_shared<WithoutWeights>();
  return p;
}

ModelBytes model_bytes(const std::shared_ptr<nn::LanguageModel>& model) {
  ModelBytes b;
  for (const auto& [name, p] : model->named_parameters()) b.resident += nbytes(p);
  for (const auto& [name, t] : model->named_buffers()) b.resident += nbytes(t);
  b.full_precision = b.resident;
  for (const auto& [name, m] : model->named_modules(model)) {
    const PackedWeight* w = nullptr;
    bool has_weight = false;
    if (const auto linear = std::dynamic_pointer_cast<nn::Linear>(m))
      w = linear->quantized(), has_weight = linear->weight.defined();
    else if (const auto table = std::dynamic_pointer_cast<nn::Embedding>(m))
      w = table->quantized(), has_weight = table->weight.defined();
    if (!w) continue;
    b.packed += nbytes(w->data) + nbytes(w->scales) + nbytes(w->offsets) + nbytes(w->sums);
    b.packed_f32 += w->n * w->k * int64_t(sizeof(float));
    if (!has_weight) b.full_precision += w->n * w->k * int64_t(sizeof(float));
  }
  b.resident += b.packed;
  return b;
}

void load_quantized_model(const std::string& path, const std::shared_ptr<nn::LanguageModel>& model) {
  const QuantRecipe recipe = read_recipe(path);
  const H5File file = H5File::open(path);
  for (const auto& [name, m] : model->named_modules(model)) {
    if (file.has("/quantized/" + name + ".weight/q")) continue;
    if (auto linear = std::dynamic_pointer_cast<nn::Linear>(m); linear && !linear->weight.defined())
      linear->set_weight(Tensor::empty({linear->out_features(), linear->in_features()}));
    if (auto table = std::dynamic_pointer_cast<nn::Embedding>(m); table && !table->weight.defined())
      table->set_weight(Tensor::empty({table->num_embeddings(), table->dim()}));
  }
  for (const auto& [name, p] : model->named_parameters()) {
    if (file.has("/quantized/" + name + "/q")) {
      ops::fill_(p, 0.0);  // unused: the layer runs on its integers
      continue;
    }
    ops::copy_(p, read_verified(file, "/model/" + name));
  }
  const auto packed = [&](const std::string& name, int64_t n, int64_t k) {
    const std::string base = "/quantized/" + name + ".weight";
    const Quantized q{read_verified(file, base + "/q"), read_verified(file, base + "/scales"), Tensor()};
    return std::make_shared<const PackedWeight>(ops::pack_weight(q, n, k, recipe.format(k)));
  };
  for (const auto& [name, linear] : quantized_linears(model))
    linear->use_quantized(packed(name, linear->out_features(), linear->in_features()), recipe.abits);
  if (!recipe.quantize_embeddings) return;
  for (const auto& [name, m] : quantized_embeddings(model)) {
    if (const auto table = std::dynamic_pointer_cast<nn::Embedding>(m))
      table->use_quantized(packed(name, table->num_embeddings(), table->dim()), recipe.abits);
    else if (const auto head = std::dynamic_pointer_cast<nn::Linear>(m))
      head->use_quantized(packed(name, head->out_features(), head->in_features()), recipe.abits);
  }
}

}  // namespace triad::engine
