#include "nn/gpt_layers.h"

#include "autograd/functions.h"

namespace triad::nn {

namespace {

// wte(indices) + wpe, then dropout; wte is the tied token table.
class GPTEmbedding : public Module {
 public:
  GPTEmbedding(const GPTConfig& c, std::shared_ptr<const Parallelism> par, ModulePtr wte)
      : Module("GPTEmbedding"), par_(std::move(par)), wte_(std::move(wte)), seq_len_(c.seq_len) {
    wpe = register_module("wpe", std::make_shared<Embedding>(c.seq_len, c.d_model));
    drop = register_module("drop", std::make_shared<Dropout>(c.dropout, par_->residual_generator()));
    par_->mark_residual_layer(*wpe);
  }
  Tensor forward(const Tensor& indices) override {
    TRIAD_CHECK(indices.dim() == 2, "GPT: expected indices (B, T), got " << shape_str(indices.shape()));
    const int64_t T = indices.size(1);
    TRIAD_CHECK(T <= seq_len_, "GPT: sequence length " << T << " exceeds the model's seq_len " << seq_len_);
    const auto [first, count] = par_->sequence_part(T);
    return (*drop)(add((*wte_)(indices), narrow(wpe->weight, 0, first, count)));
  }

  std::shared_ptr<Embedding> wpe;
  std::shared_ptr<Dropout> drop;

 private:
  std::shared_ptr<const Parallelism> par_;
  ModulePtr wte_;
  int64_t seq_len_;
};

// ln_f, then logits against the tied token table, computed inside the table's module so
// that its forward hooks (ZeRO-3's gather) fire around the use; or, fused, the loss of
// those logits (Note [Fused head loss] in nn/layer_list.h).
class GPTHead : public Module {
 public:
  GPTHead(const GPTConfig& c, std::shared_ptr<const Parallelism> par, ModulePtr wte)
      : Module("GPTHead"),
        par_(std::move(par)),
        wte_(std::static_pointer_cast<Embedding>(wte)),
        vocab_(c.vocab_size) {
    ln_f = register_module("ln_f", std::make_shared<LayerNorm>(c.d_model));
    par_->mark_residual_layer(*ln_f);
  }
  Tensor forward(const Tensor& x) override {
    const Tensor h = (*ln_f)(x);
    return wte_->call([&] { return par_->tied_logits(h, wte_->weight); });
  }
  Tensor loss(const Tensor& x, const Tensor& targets) {
    const Tensor h = (*ln_f)(x);
    return wte_->call([&] { return par_->head_loss(h, wte_->weight, targets, vocab_); });
  }

  std::shared_ptr<LayerNorm> ln_f;

 private:
  std::shared_ptr<const Parallelism> par_;
  std::shared_ptr<Embedding> wte_;
  int64_t vocab_;
};

}  // namespace

LayerList gpt_layers(const GPTConfig& config, std::shared_ptr<const Parallelism> par) {
  config.validate();
  const int tp = par->ranks();
  const int64_t C = config.d_model, V = config.vocab_size, L = config.n_layer;
  LayerList list;
  list.tied.push_back({"wte", [config, par] { return par->token_embedding(config.vocab_size, config.d_model,
                                                                            config.vocab_multiple); }});
  list.layers.push_back({"", "GPTEmbedding", V * C + config.seq_len * C, {"wte"},
                         [config, par](const TiedModules& t) {
                           return std::make_shared<GPTEmbedding>(config, par, t.at("wte"));
                         }});
  const auto sizes = config.parameter_sizes();
  for (int64_t i = 0; i < L; ++i) {
    const std::string name = "blocks." + std::to_string(i);
    int64_t params = 0;
    for (const auto& [p, n] : sizes)
      if (p.starts_with(name + ".")) params += n;
    list.layers.push_back({name, "Block", params, {}, [config, par, i](const TiedModules&) {
                             return std::make_shared<Block>(config.d_model, config.n_head, config.dropout, *par,
                                                            gpt_block_moe(config, i, *par));
                           }});
  }
  list.layers.push_back({"", "GPTHead", V * C + 2 * C, {"wte"}, [config, par](const TiedModules& t) {
                           return std::make_shared<GPTHead>(config, par, t.at("wte"));
                         }});
  list.loss = [par, V](const Tensor& logits, const Tensor& targets) { return par->cross_entropy(logits, targets, V); };
  list.head_loss = [](Module& head, const Tensor& x, const Tensor& targets) {
    return static_cast<GPTHead&>(head).loss(x, targets);
  };
  list.init = [config, tp](Module& stage) { init_gpt_parameters(config, tp, stage); };
  return list;
}

}  // namespace triad::nn
