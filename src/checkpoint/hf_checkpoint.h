// Hugging Face checkpoints in and out of triad (triad-ckpt import, export --format
// safetensors): safetensors files (io/safetensors.h) in HF's names, converted by the name
// maps of io/hf_models.h (Note [HF name maps]).
//
// An import writes a new checkpoint folder, DIR/step-00000000.h5 and DIR/latest
// (checkpoint/checkpoint_dir.h), holding the model as a run would save it before its first step
// (checkpoint/checkpoint.h, save_initial_checkpoint), with the config
//   {"model": {"arch": ..., the model's fields}, "train_batch_size": 1, "steps": 1}
// (the least a config must say: `triad-generate` builds the model from it; `triad-train
// --config ... --resume DIR` trains with its own config, whose model must be the same).
// The tokenizer files beside the safetensors files (io::kHfTokenizerFiles: tokenizer.json,
// tokenizer_config.json, special_tokens_map.json) are copied into DIR as they are, where
// `triad-generate --checkpoint DIR/...` finds tokenizer.json.
// The model's fields come from config.json beside the safetensors files when there is one,
// then from the fields given (flags), then from the tensors' shapes; a field none of these
// gives is an Error naming it and its flag.
//
// Nothing saved is overwritten by a failed import or export: everything is read and checked
// before anything is written, an import refuses a folder that already holds checkpoints, and
// files are written under temporary names and renamed into place when complete.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "tensor/dtype.h"

namespace triad::engine {

struct HfImport {
  std::string from;      // a .safetensors file, a model.safetensors.index.json, or a folder of either
  std::string arch;      // gpt2 | llama (io/hf_models.h)
  nlohmann::json model;  // model fields given by the caller (n_head, ...): over config.json's
  std::string out;       // the checkpoint folder to create
};

// Returns the checkpoint file written. Throws Error naming the file and problem.
std::string import_hf(const HfImport& import);

// Writes the model of a checkpoint or weights file as one safetensors file of HF's names, in
// dtype (f32, f16, bf16 or f64), with metadata {"format": "pt"} as transformers expects.
void export_hf(const std::string& checkpoint, const std::string& out, DType dtype);

}  // namespace triad::engine
