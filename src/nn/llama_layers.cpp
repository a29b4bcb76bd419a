#include "nn/llama_layers.h"

#include "autograd/functions.h"

namespace triad::nn {

namespace {

class LlamaEmbedding : public Module {
 public:
  LlamaEmbedding(const LlamaConfig& c, const Parallelism& par) : Module("LlamaEmbedding"), seq_len_(c.seq_len) {
    embed = register_module("embed", par.token_embedding(c.vocab_size, c.d_model, 1));
  }
  Tensor forward(const Tensor& indices) override {
    TRIAD_CHECK(indices.dim() == 2, "Llama: expected indices (B, T), got " << shape_str(indices.shape()));
    TRIAD_CHECK(indices.size(1) <= seq_len_,
                "Llama: sequence length " << indices.size(1) << " exceeds the model's seq_len " << seq_len_);
    return (*embed)(indices);
  }

  std::shared_ptr<Embedding> embed;

 private:
  int64_t seq_len_;
};

// norm_f, then the logits of this rank's vocabulary rows.
class LlamaHead : public Module {
 public:
  LlamaHead(const LlamaConfig& c, std::shared_ptr<const Parallelism> par)
      : Module("LlamaHead"), par_(std::move(par)), vocab_(c.vocab_size) {
    norm_f = register_module("norm_f", std::make_shared<RMSNorm>(c.d_model, c.rms_eps));
    head = register_module("head", par_->column_linear(c.d_model, c.vocab_size, 1, false));
    par_->mark_residual_layer(*norm_f);
  }
  Tensor forward(const Tensor& x) override { return (*head)((*norm_f)(x)); }
  // The loss of forward(x)'s logits, fused (Note [Fused head loss] in nn/layer_list.h).
  Tensor loss(const Tensor& x, const Tensor& targets) {
    const Tensor h = (*norm_f)(x);
    return head->call([&] { return par_->head_loss(h, head->weight, targets, vocab_); });
  }

  std::shared_ptr<RMSNorm> norm_f;
  std::shared_ptr<Linear> head;

 private:
  std::shared_ptr<const Parallelism> par_;
  int64_t vocab_;
};

}  // namespace

LayerList llama_layers(const LlamaConfig& config, std::shared_ptr<const Parallelism> par) {
  config.validate();
  const int64_t C = config.d_model, V = config.vocab_size;
  TRIAD_CHECK(V % par->ranks() == 0, "Llama: vocab_size " << V << " must be divisible by the " << par->ranks()
                                                          << " tensor-parallel ranks (the head is split by rows)");
  const auto rope = std::make_shared<const RotaryEmbedding>(C / config.n_head, config.seq_len, config.rope_theta);
  LayerList list;
  list.layers.push_back({"", "LlamaEmbedding", V * C, {}, [config, par](const TiedModules&) {
                           return std::make_shared<LlamaEmbedding>(config, *par);
                         }});
  const auto shapes = config.parameter_shapes();
  for (int64_t i = 0; i < config.n_layer; ++i) {
    const std::string name = "blocks." + std::to_string(i);
    int64_t params = 0;
    for (const auto& [p, shape] : shapes)
      if (p.starts_with(name + ".")) params += numel(shape);
    list.layers.push_back({name, "LlamaBlock", params, {}, [config, par, rope, i](const TiedModules&) {
                             return std::make_shared<LlamaBlock>(config.d_model, config.n_head, config.n_kv_head,
                                                                 config.intermediate, config.rms_eps, rope, *par,
                                                                 llama_block_moe(config, i, *par));
                           }});
  }
  list.layers.push_back({"", "LlamaHead", V * C + C, {}, [config, par](const TiedModules&) {
                           return std::make_shared<LlamaHead>(config, par);
                         }});
  list.loss = [par, V](const Tensor& logits, const Tensor& targets) { return par->cross_entropy(logits, targets, V); };
  list.head_loss = [](Module& head, const Tensor& x, const Tensor& targets) {
    return static_cast<LlamaHead&>(head).loss(x, targets);
  };
  list.init = [config](Module& stage) { init_llama_parameters(config, stage); };
  return list;
}

}  // namespace triad::nn
