#include "config/model_factory.h"

#include <sstream>

#include "nn/gpt_layers.h"
#include "nn/llama_layers.h"
#include "nn/value_layers.h"

namespace triad::engine {

namespace {

bool is_llama(const TrainConfig& c) { return c.arch == "llama"; }

}  // namespace

ModelShape model_shape(const TrainConfig& c) {
  const auto dims = [](int64_t L, int64_t C, int64_t NH, int64_t T, int64_t V) {
    std::ostringstream s;
    s << 'L' << L << " C" << C << " NH" << NH << " T" << T << " V" << V;
    return s.str();
  };
  if (is_llama(c)) {
    const nn::LlamaConfig& m = c.llama;
    return {m.n_layer, m.n_head,     m.n_kv_head, m.d_model, m.seq_len, m.vocab_size, m.num_parameters(),
            dims(m.n_layer, m.d_model, m.n_head, m.seq_len, m.vocab_size) + " NKV" + std::to_string(m.n_kv_head) +
                " I" + std::to_string(m.intermediate)};
  }
  const nn::GPTConfig& m = c.model;
  return {m.n_layer, m.n_head,     m.n_head, m.d_model, m.seq_len, m.vocab_size, m.num_parameters(),
          dims(m.n_layer, m.d_model, m.n_head, m.seq_len, m.vocab_size)};
}

std::shared_ptr<nn::LanguageModel> build_model(const TrainConfig& c, std::shared_ptr<const nn::Parallelism> par) {
  if (is_llama(c)) return std::make_shared<nn::Llama>(c.llama, std::move(par));
  return std::make_shared<nn::GPT>(c.model, std::move(par));
}

nn::LayerList model_layers(const TrainConfig& c, std::shared_ptr<const nn::Parallelism> par) {
  return is_llama(c) ? nn::llama_layers(c.llama, std::move(par)) : nn::gpt_layers(c.model, std::move(par));
}

std::shared_ptr<nn::LanguageModel> build_value_base(const TrainConfig& c, std::shared_ptr<const nn::Parallelism> par) {
  if (is_llama(c)) return std::make_shared<nn::Llama>(c.llama, std::move(par), /*with_head=*/false);
  return std::make_shared<nn::GPT>(c.model, std::move(par));
}

nn::LayerList value_model_layers(const TrainConfig& c, uint64_t seed, std::shared_ptr<const nn::Parallelism> par) {
  return is_llama(c) ? nn::llama_value_layers(c.llama, seed, std::move(par))
                     : nn::gpt_value_layers(c.model, seed, std::move(par));
}

}  // namespace triad::engine
