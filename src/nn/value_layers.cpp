#include "nn/value_layers.h"

#include "autograd/functions.h"
#include "nn/gpt_layers.h"
#include "nn/llama_layers.h"

namespace triad::nn {

namespace {

constexpr const char* kBase = "base.";

// The base model's final norm, registered as `name` (the GPT's ln_f, the Llama's norm_f).
class FinalNorm : public Module {
 public:
  FinalNorm(const std::string& type, const std::string& name, ModulePtr norm, const Parallelism& par)
      : Module(type), norm_(register_module(name, std::move(norm))) {
    par.mark_residual_layer(*norm_);
  }
  Tensor forward(const Tensor& x) override { return (*norm_)(x); }

 private:
  ModulePtr norm_;
};

// As nn::ValueModel's head: one value per token, the sequence gathered whole.
class ValueHead : public Module {
 public:
  ValueHead(int64_t d_model, uint64_t seed, std::shared_ptr<const Parallelism> par)
      : Module("ValueHead"), par_(std::move(par)) {
    Generator gen(seed);
    v_head = register_module("v_head", std::make_shared<Linear>(d_model, 1, /*bias=*/false, gen));
    par_->mark_residual_layer(*v_head);
  }
  Tensor forward(const Tensor& h) override {
    return par_->whole_sequence(reshape((*v_head)(h), {h.size(0), h.size(1)}));
  }

  std::shared_ptr<Linear> v_head;

 private:
  std::shared_ptr<const Parallelism> par_;
};

// A language model's list with its output head (the last layer) replaced by the base's final
// norm, then the value head; every layer of the base under "base.".
LayerList value_layers(LayerList lm, LayerSpec final_norm, int64_t C, uint64_t seed,
                       std::shared_ptr<const Parallelism> par) {
  LayerList list;
  for (const TiedSpec& t : lm.tied) list.tied.push_back({kBase + t.key, t.build});
  lm.layers.pop_back();  // the output head
  for (const LayerSpec& l : lm.layers) {
    LayerSpec v = l;
    v.name = l.name.empty() ? kBase : kBase + l.name;
    for (std::string& key : v.ties) key = kBase + key;
    v.build = [build = l.build](const TiedModules& tied) {  // given under the model's keys
      TiedModules own;
      for (const auto& [key, m] : tied) own[key.substr(std::string(kBase).size())] = m;
      return build(own);
    };
    list.layers.push_back(std::move(v));
  }
  final_norm.name = kBase;
  list.layers.push_back(std::move(final_norm));
  list.layers.push_back({"", "ValueHead", C, {}, [C, seed, par](const TiedModules&) {
                           return std::make_shared<ValueHead>(C, seed, par);
                         }});
  list.loss = [](const Tensor&, const Tensor&) -> Tensor {
    throw Error("a value model's layer list has no loss of its own: the caller's loss runs on the last stage");
  };
  // The model's initial values, drawn for the parameters under "base." as for the model's own.
  list.init = [init = lm.init](Module& stage) {
    for (const auto& [name, child] : stage.children())
      if (name + "." == kBase) init(*child);
  };
  return list;
}

}  // namespace

LayerList gpt_value_layers(const GPTConfig& config, uint64_t seed, std::shared_ptr<const Parallelism> par) {
  const int64_t C = config.d_model;
  LayerSpec norm{"", "GPTFinalNorm", 2 * C, {}, [C, par](const TiedModules&) {
                   return std::make_shared<FinalNorm>("GPTFinalNorm", "ln_f", std::make_shared<LayerNorm>(C), *par);
                 }};
  return value_layers(gpt_layers(config, par), std::move(norm), C, seed, par);
}

LayerList llama_value_layers(const LlamaConfig& config, uint64_t seed, std::shared_ptr<const Parallelism> par) {
  const int64_t C = config.d_model;
  const double eps = config.rms_eps;
  LayerSpec norm{"", "LlamaFinalNorm", C, {}, [C, eps, par](const TiedModules&) {
                   return std::make_shared<FinalNorm>("LlamaFinalNorm", "norm_f", std::make_shared<RMSNorm>(C, eps),
                                                      *par);
                 }};
  return value_layers(llama_layers(config, par), std::move(norm), C, seed, par);
}

}  // namespace triad::nn
