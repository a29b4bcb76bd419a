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
// tokenizer_config.json, special_tokens_map.json, chat_template.jinja) are copied into DIR as
// they are, where `triad-generate --checkpoint DIR/...` finds tokenizer.json (and --chat the
// chat template).
// The model's fields come from config.json beside the safetensors files when there is one,
// then from the fields given (flags), then from the tensors' shapes; a field none of these
// gives is an Error naming it and its flag.
//
// Export writes the folder transformers reads (export_hf below); import reads one back.
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
  std::string arch;      // gpt2 | llama (io/hf_models.h); "": config.json's model_type
  nlohmann::json model;  // model fields given by the caller (n_head, ...): over config.json's
  std::string out;       // the checkpoint folder to create
};

// Returns the checkpoint file written. Throws Error naming the file and problem (a
// config.json whose model_type triad does not convert, an index naming a missing shard, ...).
std::string import_hf(const HfImport& import);

struct HfExport {
  std::string checkpoint;                   // a checkpoint or weights file
  std::string out;                          // the folder to write (created when absent)
  DType dtype = DType::f32;                 // f32, f16, bf16 or f64
  int64_t max_shard_bytes = 5'000'000'000;  // save_pretrained's default, "5GB"
};

// Writes the model of a checkpoint or weights file as a folder that transformers'
// AutoModelForCausalLM.from_pretrained (and, with a Hugging Face tokenizer,
// AutoTokenizer.from_pretrained) loads as it is, laid out as save_pretrained lays it out:
//   model.safetensors, or model-0000i-of-0000N.safetensors shards of at most max_shard_bytes
//     and model.safetensors.index.json (io::write_safetensors_shards): HF's tensor names, in
//     dtype, metadata {"format": "pt"};
//   config.json (io::hf_config), generation_config.json {bos_token_id, eos_token_id};
//   the tokenizer files (io::kHfTokenizerFiles) of the checkpoint's tokenizer, when it is a
//   Hugging Face one.
// The tokenizer is the tokenizer.json beside the checkpoint file (where import copies it),
// else the checkpoint config's data.tokenizer; its end-of-text token is eos_token_id, its
// prefix()'s first token (else eos) bos_token_id; without a tokenizer both are null.
// Model files of an earlier export in `out` that this one does not write (a single file
// after shards, other shards) are removed, so the folder holds one model.
void export_hf(const HfExport& exp);

// A shard size as save_pretrained's max_shard_size reads it: bytes, or a number with KB, MB,
// GB, TB (powers of 1000) or KiB, MiB, GiB, TiB (powers of 1024), in any case. Throws Error
// naming the text.
int64_t parse_shard_size(const std::string& text);

}  // namespace triad::engine
