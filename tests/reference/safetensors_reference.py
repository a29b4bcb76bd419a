#!/usr/bin/env python3
"""Hugging Face safetensors files for triad's import/export tests (triad-ckpt import/export).

What it produces (tests/data/safetensors/)
    gpt2/model.safetensors, gpt2/config.json
        GPT2LMHeadModel's tensors named as its save_pretrained names them ("transformer."
        prefix; no lm_head.weight, which is tied to wte), holding the initial weights of
        tests/data/gpt_reference.tns (param/<triad name>, L 2, C 64, NH 4, V 256, T 32), F32:
          wte.weight, wpe.weight, h.{i}.ln_{1,2}.*, ln_f.*   as triad holds them
          h.{i}.attn.c_attn, attn.c_proj, mlp.c_fc, mlp.c_proj: HF's Conv1D, whose weight is
              triad's Linear weight transposed, (in, out)
          h.{i}.attn.bias (1, 1, T, T) lower-triangular ones and h.{i}.attn.masked_bias ()
              -1e4: the buffers older HF files carry
        so a model loaded from it gives gpt_reference.tns's logits.
    llama/model-0000{1,2}-of-00002.safetensors, llama/model.safetensors.index.json,
    llama/config.json
        a tiny LlamaForCausalLM (L 2, C 16, 4 heads, 2 key/value heads, intermediate 40,
        V 48, an untied lm_head), sharded over two files as save_pretrained shards, F32.
        Every value is k/256 for an integer k in [-128, 128]: exactly representable in F16
        and BF16 (at most 8 significant bits).
    llama_f16.safetensors, llama_bf16.safetensors
        the same Llama tensors, one file each, as F16 and BF16 (exact, see above): importing
        any of the three gives the same f32 weights.

Files are written with the `safetensors` package (torch tensors), not with triad's writer.
When `transformers` is installed the script also loads gpt2/ into GPT2LMHeadModel and checks
its logits on gpt_reference.tns's tokens, and loads llama/ into LlamaForCausalLM with no
missing or unexpected tensors: the names and layouts are HF's own. It then writes
llama_logits.tns: idx (2, 12) int64 tokens and LlamaForCausalLM's f32 logits (2, 12, 48) on
them, which the imported triad Llama must reproduce (rotary layout, grouped heads, norms).

How to rerun
    pip install torch numpy safetensors [transformers]
    python3 tests/reference/safetensors_reference.py        (from the repository root)
"""

import json
import os
import sys

import numpy as np
import torch
from safetensors.torch import save_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from reference_common import read_tns, write_tns  # noqa: E402

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GPT_REFERENCE = os.path.join(REPO_ROOT, "tests", "data", "gpt_reference.tns")
OUT_DIR = os.path.join(REPO_ROOT, "tests", "data", "safetensors")


def write_json(path, obj):
    with open(path, "w") as f:
        json.dump(obj, f, indent=2, sort_keys=True)
        f.write("\n")


# --------------------------------------------------------------------------------------------
# GPT-2
# --------------------------------------------------------------------------------------------
CONV1D = {"attn.qkv": "attn.c_attn", "attn.proj": "attn.c_proj", "mlp.fc": "mlp.c_fc", "mlp.proj": "mlp.c_proj"}
NORMS = {"ln1": "ln_1", "ln2": "ln_2"}


def gpt2_tensors(ref):
    L, NH, C, V, T = (int(x) for x in ref["config"][:5])
    P = lambda name: torch.from_numpy(ref["param/" + name])
    out = {"transformer.wte.weight": P("wte.weight"), "transformer.wpe.weight": P("wpe.weight")}
    for i in range(L):
        for ours, theirs in NORMS.items():
            for kind in ("weight", "bias"):
                out[f"transformer.h.{i}.{theirs}.{kind}"] = P(f"blocks.{i}.{ours}.{kind}")
        for ours, theirs in CONV1D.items():
            out[f"transformer.h.{i}.{theirs}.weight"] = P(f"blocks.{i}.{ours}.weight").t().contiguous()
            out[f"transformer.h.{i}.{theirs}.bias"] = P(f"blocks.{i}.{ours}.bias")
        out[f"transformer.h.{i}.attn.bias"] = torch.tril(torch.ones(T, T)).view(1, 1, T, T)
        out[f"transformer.h.{i}.attn.masked_bias"] = torch.tensor(-1e4)
    out["transformer.ln_f.weight"] = P("ln_f.weight")
    out["transformer.ln_f.bias"] = P("ln_f.bias")
    config = {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "n_layer": L, "n_head": NH,
              "n_embd": C, "vocab_size": V, "n_positions": T, "n_ctx": T, "layer_norm_epsilon": 1e-5,
              "activation_function": "gelu_new", "n_inner": None, "resid_pdrop": 0.0, "embd_pdrop": 0.0,
              "attn_pdrop": 0.0, "tie_word_embeddings": True, "bos_token_id": V - 1, "eos_token_id": V - 1,
              "torch_dtype": "float32"}
    return out, config


def check_gpt2_with_transformers(folder, ref):
    from transformers import GPT2LMHeadModel
    model, info = GPT2LMHeadModel.from_pretrained(folder, output_loading_info=True)
    buffers = {n for n in info["unexpected_keys"] if n.endswith((".attn.bias", ".attn.masked_bias"))}
    assert not info["missing_keys"] and info["unexpected_keys"] == buffers, info
    model.eval()
    with torch.no_grad():
        logits = model(torch.from_numpy(ref["idx"])).logits.numpy()
    err = np.abs(logits - ref["logits"]).max() / np.abs(ref["logits"]).max()
    assert err < 1e-5, f"GPT2LMHeadModel's logits differ from gpt_reference.tns's by {err:.3e} (relative)"
    return err


# --------------------------------------------------------------------------------------------
# Llama
# --------------------------------------------------------------------------------------------
LLAMA = dict(L=2, C=16, NH=4, KV=2, I=40, V=48, T=64)


def llama_tensors(gen):
    L, C, NH, KV, I, V = (LLAMA[k] for k in ("L", "C", "NH", "KV", "I", "V"))
    kv = KV * (C // NH)
    draw = lambda *shape: torch.randint(-128, 129, shape, generator=gen).to(torch.float32) / 256
    out = {"model.embed_tokens.weight": draw(V, C)}
    for i in range(L):
        p = f"model.layers.{i}."
        out[p + "input_layernorm.weight"] = draw(C)
        out[p + "self_attn.q_proj.weight"] = draw(C, C)
        out[p + "self_attn.k_proj.weight"] = draw(kv, C)
        out[p + "self_attn.v_proj.weight"] = draw(kv, C)
        out[p + "self_attn.o_proj.weight"] = draw(C, C)
        out[p + "post_attention_layernorm.weight"] = draw(C)
        out[p + "mlp.gate_proj.weight"] = draw(I, C)
        out[p + "mlp.up_proj.weight"] = draw(I, C)
        out[p + "mlp.down_proj.weight"] = draw(C, I)
    out["model.norm.weight"] = draw(C)
    out["lm_head.weight"] = draw(V, C)
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": C,
              "num_hidden_layers": L, "num_attention_heads": NH, "num_key_value_heads": KV,
              "intermediate_size": I, "vocab_size": V, "max_position_embeddings": LLAMA["T"],
              "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "hidden_act": "silu",
              "tie_word_embeddings": False, "attention_bias": False, "torch_dtype": "float32"}
    return out, config


def write_sharded(folder, tensors, first_shard_names):
    shards = [{n: t for n, t in tensors.items() if n in first_shard_names},
              {n: t for n, t in tensors.items() if n not in first_shard_names}]
    weight_map = {}
    for k, shard in enumerate(shards):
        name = f"model-{k + 1:05d}-of-{len(shards):05d}.safetensors"
        save_file(shard, os.path.join(folder, name), metadata={"format": "pt"})
        weight_map.update({n: name for n in shard})
    total = sum(t.numel() * t.element_size() for t in tensors.values())
    write_json(os.path.join(folder, "model.safetensors.index.json"),
               {"metadata": {"total_size": total}, "weight_map": weight_map})


def check_llama_with_transformers(folder):
    """Loads llama/ into LlamaForCausalLM (every tensor used, none left over) and returns
    its logits on fixed tokens, for llama_logits.tns."""
    from transformers import LlamaForCausalLM
    model, info = LlamaForCausalLM.from_pretrained(folder, output_loading_info=True, torch_dtype=torch.float32)
    assert not info["missing_keys"] and not info["unexpected_keys"], info
    model.eval()
    idx = torch.randint(0, model.config.vocab_size, (2, 12), generator=torch.Generator().manual_seed(7))
    with torch.no_grad():
        logits = model(idx).logits
    return idx, logits


def main():
    ref = {name: arr.copy() for name, arr in read_tns(GPT_REFERENCE)}  # writable, for torch.from_numpy
    gpt2_dir, llama_dir = os.path.join(OUT_DIR, "gpt2"), os.path.join(OUT_DIR, "llama")
    os.makedirs(gpt2_dir, exist_ok=True)
    os.makedirs(llama_dir, exist_ok=True)

    gpt2, gpt2_config = gpt2_tensors(ref)
    save_file(gpt2, os.path.join(gpt2_dir, "model.safetensors"), metadata={"format": "pt"})
    write_json(os.path.join(gpt2_dir, "config.json"), gpt2_config)

    llama, llama_config = llama_tensors(torch.Generator().manual_seed(1234))
    first = {n for n in llama if n.startswith("model.embed_tokens") or n.startswith("model.layers.0.")}
    write_sharded(llama_dir, llama, first)
    write_json(os.path.join(llama_dir, "config.json"), llama_config)
    for dtype, name in ((torch.float16, "llama_f16"), (torch.bfloat16, "llama_bf16")):
        low = {n: t.to(dtype) for n, t in llama.items()}
        assert all(torch.equal(low[n].to(torch.float32), llama[n]) for n in llama), f"{name} is not exact"
        save_file(low, os.path.join(OUT_DIR, name + ".safetensors"), metadata={"format": "pt"})

    try:
        import transformers  # noqa: F401
    except ImportError:
        print("transformers is not installed: the files were not loaded into HF's models")
    else:
        err = check_gpt2_with_transformers(gpt2_dir, ref)
        idx, logits = check_llama_with_transformers(llama_dir)
        write_tns(os.path.join(OUT_DIR, "llama_logits.tns"), [("idx", idx.numpy()), ("logits", logits.numpy())])
        print(f"GPT2LMHeadModel on gpt2/: logits within {err:.2e} (relative) of gpt_reference.tns; "
              "LlamaForCausalLM loads llama/ with no missing or unexpected tensors (its logits: llama_logits.tns)")
    for root, _, files in sorted(os.walk(OUT_DIR)):
        for f in sorted(files):
            print(f"wrote {os.path.relpath(os.path.join(root, f), REPO_ROOT)}: "
                  f"{os.path.getsize(os.path.join(root, f))} bytes")


if __name__ == "__main__":
    sys.exit(main())
