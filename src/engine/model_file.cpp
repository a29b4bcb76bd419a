#include "engine/model_file.h"

#include <filesystem>

#include "engine/config.h"
#include "io/tensor_file.h"
#include "tensor/ops.h"

namespace triad::engine {

void save_model(const std::string& path, const nn::GPT& model, const nlohmann::json& config) {
  io::NamedTensors tensors = model.named_parameters();
  const std::string text = config.dump();
  Tensor meta = Tensor::empty({int64_t(text.size())}, DType::i8);
  std::copy(text.begin(), text.end(), meta.data<int8_t>());
  tensors.emplace_back("meta/config", meta);
  const std::filesystem::path target(path);
  if (target.has_parent_path()) std::filesystem::create_directories(target.parent_path());
  io::write_tensor_file(path, tensors);  // atomic: an earlier model survives a failed save
}

LoadedModel load_model(const std::string& path) {
  const io::NamedTensors tensors = io::read_tensor_file(path);
  const Tensor& meta = io::find_tensor(tensors, "meta/config", path);
  const std::string text(meta.data<int8_t>(), meta.data<int8_t>() + meta.numel());
  LoadedModel out;
  try {
    out.config = nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    throw Error("model file '" + path + "': its meta/config is not valid JSON");
  }
  // The saved config is resolved for the data-parallel size it ran with; recover that size.
  const int64_t batch = out.config.value("train_batch_size", int64_t(1));
  const int64_t per_rank = out.config.value("train_micro_batch_size_per_gpu", int64_t(1)) *
                           out.config.value("gradient_accumulation_steps", int64_t(1));
  const TrainConfig config = parse_config(out.config, per_rank > 0 && batch % per_rank == 0 ? batch / per_rank : 1);
  out.model = std::make_shared<nn::GPT>(config.model);
  for (auto& [name, p] : out.model->named_parameters()) {
    const Tensor& t = io::find_tensor(tensors, name, path);
    // bf16/f16 files (mixed-precision runs) load into the f32 model.
    TRIAD_CHECK(t.shape() == p.shape() && is_floating(t.dtype()), "model file '" << path << "': tensor '" << name
                                                                                 << "' is " << t.str()
                                                                                 << ", the model expects " << p.str());
    ops::copy_(p, t);
  }
  return out;
}

}  // namespace triad::engine
