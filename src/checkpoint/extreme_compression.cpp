// XTC: quantization-aware distillation of a ternary or binary student (extreme_compression.h).
#include "checkpoint/extreme_compression.h"

#include <algorithm>
#include <map>
#include <sstream>

#include "autograd/functions.h"
#include "autograd/grad_mode.h"
#include "autograd/meta.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/held_out_loss.h"
#include "checkpoint/layer_distillation.h"
#include "config/compression_config.h"
#include "config/model_factory.h"
#include "engine/engine.h"
#include "nn/gpt.h"
#include "nn/llama.h"
#include "tensor/error.h"

namespace triad::engine {

namespace {

std::shared_ptr<nn::ModuleList> xtc_blocks(const nn::Module& model) {
  if (auto* gpt = dynamic_cast<const nn::GPT*>(&model)) return gpt->blocks;
  if (auto* llama = dynamic_cast<const nn::Llama*>(&model)) return llama->blocks;
  TRIAD_CHECK(false, "xtc: the model is neither a GPT nor a Llama");
  return nullptr;
}

// Each block's output of the next forward, in order, kept in `outputs` (cleared by the caller).
void record_block_outputs(const nn::Module& model, const std::shared_ptr<std::vector<Tensor>>& outputs) {
  const std::shared_ptr<nn::ModuleList> blocks = xtc_blocks(model);
  for (size_t i = 0; i < blocks->size(); ++i)
    (*blocks)[i]->register_forward_output_hook([outputs](nn::Module&, const Tensor& y) { outputs->push_back(y); });
}

// Rows [first, first + count) of the global batch of `step`: consecutive windows of t + 1
// tokens (inputs and next-token targets) cycling through `train` (held_out_split's, which
// holds at least one).
std::pair<Tensor, Tensor> batch_rows(const io::TokenFile& tokens, const io::TokenRange& train, int64_t step,
                                     int64_t batch, int64_t first, int64_t count, int64_t t) {
  const int64_t windows = (train.size() - 1) / t;
  Tensor ids = Tensor::empty({count, t}, DType::i64), targets = Tensor::empty({count, t}, DType::i64);
  std::vector<int64_t> window(size_t(t + 1));
  for (int64_t r = 0; r < count; ++r) {
    const int64_t w = (step * batch + first + r) % windows;
    tokens.read(train.begin + w * t, t + 1, window.data());
    std::copy(window.begin(), window.end() - 1, ids.data<int64_t>() + r * t);
    std::copy(window.begin() + 1, window.end(), targets.data<int64_t>() + r * t);
  }
  return {ids, targets};
}

}  // namespace

std::vector<int64_t> parse_keep_layers(const std::string& spec, int64_t n_layer) {
  std::vector<int64_t> keep;
  if (spec.empty()) {
    for (int64_t i = 0; i < n_layer; ++i) keep.push_back(i);
    return keep;
  }
  const auto bad = [&](const std::string& why) {
    TRIAD_CHECK(false, "--keep-layers '" << spec << "': " << why << " (the teacher has " << n_layer << " blocks, 0 to "
                                         << n_layer - 1 << "; expected every:K or a list such as 1,3,5)");
  };
  if (spec.starts_with("every:")) {
    int64_t k = 0;
    try {
      size_t used = 0;
      k = std::stoll(spec.substr(6), &used);
      if (used != spec.size() - 6) bad("K is not a whole number");
    } catch (const std::logic_error&) {
      bad("K is not a whole number");
    }
    if (k < 1 || k > n_layer) bad("K must be in [1, " + std::to_string(n_layer) + "]");
    for (int64_t i = k - 1; i < n_layer; i += k) keep.push_back(i);
    return keep;
  }
  std::stringstream in(spec);
  std::string item;
  while (std::getline(in, item, ',')) {
    int64_t v = -1;
    try {
      size_t used = 0;
      v = std::stoll(item, &used);
      if (used != item.size()) bad("'" + item + "' is not a block index");
    } catch (const std::logic_error&) {
      bad("'" + item + "' is not a block index");
    }
    if (v < 0 || v >= n_layer) bad("block " + std::to_string(v) + " is out of range");
    if (!keep.empty() && v <= keep.back()) bad("the blocks must be listed in increasing order");
    keep.push_back(v);
  }
  if (keep.empty()) bad("no blocks");
  return keep;
}

void apply_compression_config(const nlohmann::json& config, int64_t teacher_layers, XtcOptions& o) {
  const std::string key = "[config] compression_training";
  TRIAD_CHECK(config.contains("compression_training") && config["compression_training"].is_object(),
              key << " is missing: xtc --config reads its recipe from that section");
  const nlohmann::json& section = config["compression_training"];
  int64_t student_layers = teacher_layers;
  if (section.contains("layer_reduction") && section["layer_reduction"].value("enabled", false))
    student_layers = section["layer_reduction"].value("keep_number_layer", teacher_layers);
  std::vector<std::string> notices;
  const CompressionConfig c =
      parse_compression(JsonReader(section, "config", "compression_training"), student_layers, notices);
  const auto weights = key + ".weight_quantization";
  TRIAD_CHECK(c.weights.enabled && !c.weights.groups.empty(),
              weights << ".shared_parameters.enabled must be true with a group in different_groups for xtc");
  TRIAD_CHECK(c.weights.schedule_offset == 0, weights << ".shared_parameters.schedule_offset must be 0 for xtc (the "
                                                      << "student is quantized from the first step), got "
                                                      << c.weights.schedule_offset);
  TRIAD_CHECK(c.weights.quantize_groups == 1,
              weights << ".shared_parameters.quantize_groups must be 1 for xtc (a scale per row), got "
                      << c.weights.quantize_groups);
  TRIAD_CHECK(c.weights.symmetric, weights << ".shared_parameters.quantization_type must be symmetric for xtc");
  const int bits = c.weights.groups.front().target_bits;
  for (const WeightQuantGroup& g : c.weights.groups) {
    const std::string group = weights + ".different_groups." + g.name;
    TRIAD_CHECK(g.target_bits == 2 || g.target_bits == 1,
                group << ".params.target_bits must be 2 or 1 for xtc, got " << g.target_bits);
    TRIAD_CHECK(g.start_bits == g.target_bits, group << ".params.start_bits must equal target_bits " << g.target_bits
                                                     << " for xtc, got " << g.start_bits);
    TRIAD_CHECK(g.target_bits == bits, group << ".params.target_bits " << g.target_bits
                                             << " differs from another group's " << bits
                                             << " (xtc quantizes every layer alike)");
    TRIAD_CHECK(g.modules == std::vector<std::string>{"*"},
                group << ".modules must be [\"*\"] for xtc (every linear layer of the blocks)");
  }
  for (const ActivationQuantGroup& g : c.activations.groups)
    TRIAD_CHECK(!c.activations.enabled || g.modules == std::vector<std::string>{"*"},
                key << ".activation_quantization.different_groups." << g.name
                    << ".modules must be [\"*\"] for xtc (every linear layer of the blocks)");
  TRIAD_CHECK(c.activations.schedule_offset == 0,
              key << ".activation_quantization.shared_parameters.schedule_offset must be 0 for xtc, got "
                  << c.activations.schedule_offset);
  o.recipe.wbits = bits;
  o.recipe.group_size = 0;
  o.recipe.abits = c.activations.enabled ? 8 : 16;
  o.keep_layers.clear();
  if (c.layer_reduction.enabled)
    for (const int64_t i : c.layer_reduction.teacher_layer)
      o.keep_layers += (o.keep_layers.empty() ? "" : ",") + std::to_string(i);
}

Tensor distillation_kl(const Tensor& student, const Tensor& teacher, double temperature) {
  TRIAD_CHECK(student.shape() == teacher.shape(), "distillation_kl: student logits "
                                                      << shape_str(student.shape()) << " and teacher logits "
                                                      << shape_str(teacher.shape()) << " differ in shape");
  TRIAD_CHECK(temperature > 0, "distillation_kl: the temperature must be positive, got " << temperature);
  const int64_t v = student.shape().back();
  const Tensor s = mul(reshape(student, {-1, v}), 1.0 / temperature);
  // log softmax(s) = s - m - log sum exp(s - m), m the row's max (a constant: no gradient).
  const Tensor s0 = sub(s, ops::max(detach(s), 1, true));
  const Tensor log_ps = sub(s0, log(sum(exp(s0), 1, true)));
  // The teacher's side in plain tensor ops (constants of the loss).
  const Tensor t = ops::mul(ops::reshape(ops::contiguous(detach(teacher)), {-1, v}), 1.0 / temperature);
  const Tensor t0 = ops::sub(t, ops::max(t, 1, true));
  const Tensor log_pt = ops::sub(t0, ops::log(ops::sum(ops::exp(t0), 1, true)));
  const Tensor pt = ops::exp(log_pt);
  const double rows = double(s.size(0));
  const Tensor kl_rows = sum(mul(pt, sub(log_pt, log_ps)), 1);
  return mul(sum(kl_rows), temperature * temperature / rows);
}

nlohmann::json student_config(const nlohmann::json& teacher_config, const XtcOptions& o, int64_t ranks) {
  nlohmann::json model = teacher_config.at("model");
  model["n_layer"] = int64_t(o.recipe.keep_layers.size());
  if (model.value("arch", "gpt2") != "llama") model["dropout"] = 0.0;  // (the Llama has none)
  model.erase("tensor_parallel");
  nlohmann::json c = {{"model", model},
                      {"train_batch_size", o.batch_size},
                      {"train_micro_batch_size_per_gpu", o.batch_size / ranks},
                      {"gradient_accumulation_steps", 1},
                      {"steps", std::max<int64_t>(o.steps, 1)},
                      {"optimizer", {{"type", "AdamW"}, {"params", {{"lr", o.lr}, {"weight_decay", 0.0}}}}},
                      {"zero_optimization", {{"stage", o.zero_stage}}},
                      {"seed", o.seed},
                      {"device", "cpu"}};
  if (teacher_config.contains("data")) c["data"] = teacher_config["data"];  // names the tokenizer for generation
  return c;
}

void init_student(nn::LanguageModel& student, const nn::LanguageModel& teacher,
                  const std::vector<int64_t>& keep_layers) {
  std::map<std::string, Tensor> source;
  for (const auto& [name, p] : teacher.named_parameters()) source.emplace(name, p);
  NoGradGuard no_grad;
  for (const auto& [name, p] : student.named_parameters()) {
    std::string from = name;
    if (name.starts_with("blocks.")) {
      const size_t dot = name.find('.', 7);
      const int64_t i = std::stoll(name.substr(7, dot - 7));
      from = "blocks." + std::to_string(keep_layers.at(size_t(i))) + name.substr(dot);
    }
    const auto it = source.find(from);
    TRIAD_CHECK(it != source.end() && it->second.shape() == p.shape(),
                "xtc: the teacher has no parameter " << from << " of shape " << shape_str(p.shape())
                                                     << " for the student's " << name);
    ops::copy_(p, it->second);
  }
}

XtcResult train_xtc(const std::string& teacher_path, const io::TokenFile& tokens, XtcOptions o,
                    const parallel::CommunicatorPtr& world, const std::string& out,
                    const std::function<void(const XtcStep&)>& on_step) {
  const int64_t ranks = world ? world->size() : 1;
  const int rank = world ? world->rank() : 0;
  o.recipe.method = "xtc";
  o.recipe.steps = o.steps;
  o.recipe.validate();
  TRIAD_CHECK(o.lr > 0, "xtc: --lr must be positive, got " << o.lr);
  TRIAD_CHECK(o.batch_size > 0 && o.batch_size % ranks == 0,
              "xtc: --batch-size " << o.batch_size << " must be a positive multiple of the " << ranks << " ranks");
  TRIAD_CHECK(o.logit_weight >= 0 && o.hidden_weight >= 0 && o.label_weight >= 0 &&
                  o.logit_weight + o.hidden_weight + o.label_weight > 0,
              "xtc: the loss weights must be 0 or more and not all 0, got logit "
                  << o.logit_weight << ", hidden " << o.hidden_weight << ", label " << o.label_weight);
  TRIAD_CHECK(o.eval_batches >= 0 && o.eval_interval >= 0,
              "xtc: --eval-batches and --eval-interval must be 0 or more, got " << o.eval_batches << " and "
                                                                                << o.eval_interval);
  TRIAD_CHECK(read_summary(teacher_path).kind != "quantized",
              "xtc: the teacher '" << teacher_path << "' is a quantized model; the teacher is the full-precision one");
  const LoadedModel teacher = load_model(teacher_path);
  const int64_t n_teacher = int64_t(xtc_blocks(*teacher.model)->size());
  if (!o.config.is_null()) {
    apply_compression_config(o.config, n_teacher, o);
    o.recipe.validate();
  }
  o.recipe.keep_layers = parse_keep_layers(o.keep_layers, n_teacher);
  o.recipe.teacher_layers = n_teacher;
  const int64_t t = o.seq_len > 0 ? o.seq_len : teacher.model->seq_len();
  TRIAD_CHECK(t <= teacher.model->seq_len(),
              "xtc: --seq-len " << t << " exceeds the teacher's seq_len " << teacher.model->seq_len());
  TRIAD_CHECK(tokens.vocab_size() <= uint32_t(teacher.model->vocab_size()),
              "xtc: the token file's vocabulary of " << tokens.vocab_size() << " exceeds the teacher's "
                                                     << teacher.model->vocab_size());
  teacher.model->eval();
  const HeldOutSplit split = held_out_split(tokens, teacher.config, t);
  const int64_t rows = o.batch_size / ranks, vocab = teacher.model->vocab_size();
  // Each rank evaluates its rows of every validation batch; the mean over ranks is the global one.
  std::vector<std::pair<Tensor, Tensor>> val, val_rows;
  if (o.eval_batches > 0) val = validation_batches(tokens, split, teacher.config, o.eval_batches, o.batch_size, t);
  for (const auto& [x, y] : val)
    val_rows.emplace_back(ops::contiguous(ops::narrow(x, 0, rank * rows, rows)),
                          ops::contiguous(ops::narrow(y, 0, rank * rows, rows)));
  XtcResult result;
  result.seq_len = t;
  if (rank == 0 && !val.empty()) result.teacher_val_loss = validation_loss(*teacher.model, val);

  const TrainConfig config = parse_config(student_config(teacher.config, o, ranks), ranks);
  Engine engine(
      config,
      [&](std::shared_ptr<const nn::Parallelism> par) -> nn::ModulePtr {
        std::shared_ptr<nn::LanguageModel> m = build_model(config, std::move(par));
        init_student(*m, *teacher.model, o.recipe.keep_layers);
        for (const auto& [name, linear] : quantized_linears(m))
          linear->use_fake_quantization(o.recipe.format(linear->weight.size(1)), o.recipe.abits);
        return m;
      },
      world ? process_grid(config, world) : nullptr);
  auto student = std::dynamic_pointer_cast<nn::LanguageModel>(engine.model_ptr());
  auto teacher_out = std::make_shared<std::vector<Tensor>>(), student_out = std::make_shared<std::vector<Tensor>>();
  record_block_outputs(*teacher.model, teacher_out);
  record_block_outputs(*student, student_out);

  const auto student_val_loss = [&] {
    const Tensor sum = Tensor::full({1}, engine.evaluate(val_rows), DType::f64);
    if (world && ranks > 1) world->all_reduce(sum)->wait();
    return sum.item() / double(ranks);
  };
  for (int64_t step = 0; step < o.steps; ++step) {
    const auto [ids, targets] = batch_rows(tokens, split.train, step, o.batch_size, rank * rows, rows, t);
    teacher_out->clear();
    student_out->clear();
    Tensor teacher_logits;
    {
      NoGradGuard no_grad;
      teacher_logits = ops::narrow((*teacher.model)(ids), 2, 0, vocab);
    }
    const Tensor logits = (*student)(ids);
    const Tensor kl = distillation_kl(narrow(logits, 2, 0, vocab), teacher_logits, o.temperature);
    Tensor hidden = Tensor::zeros({});
    for (size_t i = 0; i < student_out->size(); ++i)
      hidden = add(hidden, distillation_mse((*student_out)[i], (*teacher_out)[size_t(o.recipe.keep_layers[i])]));
    hidden = mul(hidden, 1.0 / double(student_out->size()));
    const Tensor label = cross_entropy(logits, targets, -100, vocab);
    Tensor loss = add(add(mul(kl, o.logit_weight), mul(hidden, o.hidden_weight)), mul(label, o.label_weight));
    std::vector<double> parts = {loss.item(), kl.item(), hidden.item(), label.item()};
    engine.backward(loss);
    engine.step();
    if (world && ranks > 1) {
      const Tensor sums = Tensor::from_vector(parts, {4});
      world->all_reduce(sums)->wait();
      parts = sums.to_vector<double>();
      for (double& p : parts) p /= double(ranks);
    }
    XtcStep s{step + 1, parts[0], parts[1], parts[2], parts[3]};
    if (!val.empty() && ((o.eval_interval > 0 && s.step % o.eval_interval == 0) || s.step == o.steps))
      s.val_loss = student_val_loss();
    if (on_step) on_step(s);
  }

  engine.gather_parameters();
  if (rank == 0) {
    for (const auto& [name, linear] : quantized_linears(student)) linear->use_fake_quantization(std::nullopt);
    save_quantized_model(LoadedModel{student, student_config(teacher.config, o, 1)}, out, o.recipe);
    if (!val.empty()) result.val_loss = validation_loss(*load_model(out).model, val);
  }
  engine.release_parameters();
  if (world) world->barrier();
  return result;
}

}  // namespace triad::engine
