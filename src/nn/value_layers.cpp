#include "nn/value_layers.h"

#include "autograd/functions.h"
#include "nn/gpt_layers.h"

namespace triad::nn {

namespace {

constexpr const char* kBase = "base.";

class GPTFinalNorm : public Module {
 public:
  GPTFinalNorm(int64_t d_model, const Parallelism& par) : Module("GPTFinalNorm") {
    ln_f = register_module("ln_f", std::make_shared<LayerNorm>(d_model));
    par.mark_residual_layer(*ln_f);
  }
  Tensor forward(const Tensor& x) override { return (*ln_f)(x); }

  std::shared_ptr<LayerNorm> ln_f;
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

}  // namespace

LayerList gpt_value_layers(const GPTConfig& config, uint64_t seed, std::shared_ptr<const Parallelism> par) {
  LayerList gpt = gpt_layers(config, par);
  LayerList list;
  for (const TiedSpec& t : gpt.tied) list.tied.push_back({kBase + t.key, t.build});
  gpt.layers.pop_back();  // the output head
  for (const LayerSpec& l : gpt.layers) {
    LayerSpec v = l;
    v.name = l.name.empty() ? kBase : kBase + l.name;
    for (std::string& key : v.ties) key = kBase + key;
    v.build = [build = l.build](const TiedModules& tied) {  // given under the GPT's keys
      TiedModules own;
      for (const auto& [key, m] : tied) own[key.substr(std::string(kBase).size())] = m;
      return build(own);
    };
    list.layers.push_back(std::move(v));
  }
  const int64_t C = config.d_model;
  list.layers.push_back({kBase, "GPTFinalNorm", 2 * C, {}, [C, par](const TiedModules&) {
                           return std::make_shared<GPTFinalNorm>(C, *par);
                         }});
  list.layers.push_back({"", "ValueHead", C, {}, [C, seed, par](const TiedModules&) {
                           return std::make_shared<ValueHead>(C, seed, par);
                         }});
  list.loss = [](const Tensor&, const Tensor&) -> Tensor {
    throw Error("a value model's layer list has no loss of its own: the caller's loss runs on the last stage");
  };
  // The GPT's initial values, drawn for the parameters under "base." as for the GPT's own.
  list.init = [init = gpt.init](Module& stage) {
    for (const auto& [name, child] : stage.children())
      if (name + "." == kBase) init(*child);
  };
  return list;
}

}  // namespace triad::nn
