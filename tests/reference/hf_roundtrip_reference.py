#!/usr/bin/env python3
"""The Hugging Face round trip (triad-ckpt import/export, checkpoint/hf_checkpoint.h): tiny
models made by `transformers` itself, what `transformers` generates and computes with them, and
a check that a folder triad exported loads in `transformers` with the same results.

    pip install torch transformers tokenizers
    python3 tests/reference/hf_roundtrip_reference.py            (from the repository root)
    python3 tests/reference/hf_roundtrip_reference.py --check gpt2 DIR [llama DIR]
    python3 tests/reference/hf_roundtrip_reference.py --window-loss DIR TOKENS
    python3 tests/reference/hf_roundtrip_reference.py --chat-loop
    python3 tests/reference/hf_roundtrip_reference.py --mixtral

Making the reference (no arguments) writes under tests/data/hf_roundtrip/:
    gpt2/   GPT2LMHeadModel (2 layers, d 16, 2 heads, n_positions 64) with the byte-level BPE
            tokenizer tests/data/io/hf_gpt2_tokenizer.json (512 tokens, <|endoftext|> as bos,
            eos and the vocabulary size), tied head
    llama/  LlamaForCausalLM (2 layers, d 16, 4 heads, 2 key/value heads, intermediate 40,
            max_position_embeddings 64, rope_theta 10000, rms_norm_eps 1e-6, untied head) with
            the SentencePiece-style tokenizer tests/data/io/hf_llama2_tokenizer.json (600
            tokens, <s> bos, </s> eos)
    mixtral/ MixtralForCausalLM (the Llama's shape and tokenizer, intermediate 24, 4 experts, 2
            per token, the router's sliding_window null), whose MoE blocks save_pretrained writes
            as block_sparse_moe.gate and block_sparse_moe.experts.{e}.w1/w2/w3 (the names of the
            Mixtral checkpoints on the Hub); its seed also keeps every token's second and third
            experts apart (router "min_router_margin" > 1e-4 in probability, over the batch and
            the greedy sequence), so that no rounding changes a routing
    each as save_pretrained writes it: model.safetensors, config.json, generation_config.json,
    and the tokenizer's save_pretrained files (tokenizer.json, tokenizer_config.json; the
    Llama's chat template, Llama-2's [INST] turns, as chat_template.jinja). The
    weights are drawn with initializer_range 0.5 (seeded), so their logits are far from
    uniform and greedy choices are not near-ties.
    reference.json {"gpt2"|"llama": {"seed",
        "prompt": text, "prompt_ids": the ids generation starts from, as triad's
            io::encode_prompt makes them (the tokenizer's prefix, <s>, then the text; GPT-2 has
            none, so <|endoftext|> then the text, as a document follows one in training),
        "generated_ids": generate(prompt_ids, do_sample=False, max_new_tokens=32) past the
            prompt (stopping at eos as both generate), "text": its decode,
        "min_margin": the smallest gap between the two largest logits over those steps (a
            greedy choice that a rounding error could flip would show here),
        "batch": (2, 24) token ids of english.txt's first lines, "loss": the loss
            transformers computes on it, model(batch, labels=batch).loss: the mean
            cross-entropy of each token after the first given those before it,
        llama only: "chat": {"messages", "prompt_ids": apply_chat_template(messages,
            add_generation_prompt=True) (the ids triad-generate --chat continues), and the greedy
            "generated_ids", "text", "min_margin" from them as above, "max_new_tokens" of them:
            as many as fill max_position_embeddings},
        llama only: "chat_loop": {"turns": the user's lines, "max_new_tokens", "replies": what a
            chat loop in transformers answers them with: each turn's messages so far through
            apply_chat_template(add_generation_prompt=True), generate(do_sample=False) up to
            max_new_tokens (stopping at eos), the decoded reply (eos left out) appended as the
            assistant's message; "min_margin" over every step (triad-generate --chat, fed the
            turns on stdin, prints the same replies: tests/apps/check_hf_import.sh)}}
    The models are made, saved and read back from the folder before anything is recorded.
    mixtral_logits.tns: "batch" (int64 (2, 24)) and "logits" (float32 (2, 24, 600)), the
    Mixtral's logits on the stored batch, and "logits_top1", the same model's with
    num_experts_per_tok 1 (one expert per token, weighing 1), whose router keeps each token's
    first and second experts apart by more than 1e-4 too ("min_router_margin_top1").

--check reads folders that `triad-ckpt export --format safetensors` wrote (of models imported
from the reference folders, or trained from them) with AutoModelForCausalLM.from_pretrained and
AutoTokenizer.from_pretrained, prints the loss on the stored batch and the greedy text, and
fails unless they equal the reference's (loss within 1e-5) when the weights are the
reference's; with --trained it only prints them, for a model trained since.

--mixtral makes mixtral/, its entry in reference.json and mixtral_logits.tns alone (the other
models and entries unchanged).

--chat-loop adds "chat_loop" to reference.json from the stored Llama folder (the models and the
rest of the file unchanged).

--window-loss prints the loss transformers computes with the folder DIR on the last
max_position_embeddings + 1 tokens of a triad token file (io/token_file.h): the inputs are
all but the last, the targets all but the first. A validation split of exactly that many
tokens is the one window triad-train's validation loss reads, so the two compare
(tests/apps/check_hf_roundtrip.sh: trained on a pp 2 x dp 2 x tp 2 grid, exported).
"""

import argparse
import json
import os
import struct
import sys

import torch
import transformers
from transformers import (AutoModelForCausalLM, AutoTokenizer, GPT2Config, GPT2LMHeadModel, LlamaConfig,
                          LlamaForCausalLM, MixtralConfig, MixtralForCausalLM, PreTrainedTokenizerFast)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from reference_common import write_tns  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "..", "data")
OUT = os.path.join(DATA, "hf_roundtrip")
PROMPTS = {"gpt2": "The quick brown fox", "llama": "Once upon a time", "mixtral": "Once upon a time"}
# The Llama's chat template (Llama-2's [INST] turns), saved with its tokenizer.
LLAMA_CHAT_TEMPLATE = (
    "{% for message in messages %}{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + "
    "message['content'] | trim + ' [/INST]' }}{% else %}{{ ' ' + message['content'] | trim + ' ' + eos_token }}"
    "{% endif %}{% endfor %}"
)
# The user's lines a chat loop is fed, tried in turn for two whose replies are clear-cut and
# whole UTF-8.
CHAT_LINES = ["Hi.", "Why?", "Tell me a story.", "Who are you?", "Thanks!", "What is a fox?", "Go on.", "Yes."]
CHAT_LOOP_TOKENS = 8
CHAT = [{"role": "user", "content": "Hi."}, {"role": "assistant", "content": "Hello."}, {"role": "user", "content": "Why?"}]
NEW_TOKENS = 32


def gpt2_model():
    config = GPT2Config(n_layer=2, n_head=2, n_embd=16, n_positions=64, vocab_size=512, bos_token_id=0,
                        eos_token_id=0, initializer_range=0.5, attn_pdrop=0.0, embd_pdrop=0.0, resid_pdrop=0.0)
    return GPT2LMHeadModel(config)


def llama_model():
    config = LlamaConfig(num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, hidden_size=16,
                         intermediate_size=40, max_position_embeddings=64, vocab_size=600, rms_norm_eps=1e-6,
                         rope_theta=10000.0, tie_word_embeddings=False, bos_token_id=1, eos_token_id=2,
                         initializer_range=0.5)
    return LlamaForCausalLM(config)


def mixtral_model():
    config = MixtralConfig(num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, hidden_size=16,
                           intermediate_size=24, max_position_embeddings=64, vocab_size=600, rms_norm_eps=1e-6,
                           rope_theta=10000.0, num_local_experts=4, num_experts_per_tok=2, tie_word_embeddings=False,
                           bos_token_id=1, eos_token_id=2, initializer_range=0.5)
    return MixtralForCausalLM(config)


def router_margin(model, sequences):
    """The smallest gap, over every token of `sequences` and every MoE block, between the
    router's k-th and (k+1)-th largest probabilities (a routing that rounding could change
    would show here)."""
    k, gaps, hooks = model.config.num_experts_per_tok, [], []
    for layer in model.model.layers:
        def hook(module, inputs, output):
            probs = torch.softmax(output[0].float(), dim=-1).sort(dim=-1, descending=True).values
            gaps.append(float((probs[:, k - 1] - probs[:, k]).min()))
        hooks.append(layer.mlp.gate.register_forward_hook(hook))
    with torch.no_grad():
        for x in sequences:
            model(input_ids=x)
    for h in hooks:
        h.remove()
    return min(gaps)


def tokenizer_of(arch):
    if arch == "gpt2":
        tok = PreTrainedTokenizerFast(tokenizer_file=os.path.join(DATA, "io", "hf_gpt2_tokenizer.json"),
                                      bos_token="<|endoftext|>", eos_token="<|endoftext|>",
                                      unk_token="<|endoftext|>", model_max_length=64)
    else:
        tok = PreTrainedTokenizerFast(tokenizer_file=os.path.join(DATA, "io", "hf_llama2_tokenizer.json"),
                                      bos_token="<s>", eos_token="</s>", unk_token="<unk>", model_max_length=64)
        tok.chat_template = LLAMA_CHAT_TEMPLATE
    return tok


def prompt_ids(arch, tok):
    ids = tok(PROMPTS[arch]).input_ids  # the post-processor's prefix (<s>) and the text
    return [tok.eos_token_id] + ids if arch == "gpt2" else ids


def batch_of(tok):
    with open(os.path.join(DATA, "io", "english.txt"), encoding="utf-8") as f:
        ids = tok(f.read(), add_special_tokens=False).input_ids
    return torch.tensor([ids[:24], ids[24:48]], dtype=torch.long)


def chat_ids(tok):
    return list(tok.apply_chat_template(CHAT, add_generation_prompt=True, return_dict=True)["input_ids"])


def greedy(model, tok, ids, new_tokens=NEW_TOKENS):
    """generate(do_sample=False) past the prompt, and the smallest top-2 logit gap on the way."""
    x = torch.tensor([ids])
    with torch.no_grad():
        out = model.generate(x, do_sample=False, max_new_tokens=new_tokens, output_scores=True,
                             return_dict_in_generate=True, pad_token_id=tok.eos_token_id)
    margin = min(float((s[0].topk(2).values[0] - s[0].topk(2).values[1])) for s in out.scores)
    new = out.sequences[0, len(ids):].tolist()
    return new, tok.decode(new, skip_special_tokens=False), margin


def chat_loop(model, tok, turns):
    """The replies of a chat loop to `turns`, and the smallest top-2 logit gap over them."""
    messages, replies, margins = [], [], []
    for line in turns:
        messages.append({"role": "user", "content": line})
        ids = list(tok.apply_chat_template(messages, add_generation_prompt=True, return_dict=True)["input_ids"])
        new, _, margin = greedy(model, tok, ids, CHAT_LOOP_TOKENS)
        if new and new[-1] == tok.eos_token_id:
            new = new[:-1]
        reply = tok.decode(new, skip_special_tokens=False)
        messages.append({"role": "assistant", "content": reply})
        replies.append(reply)
        margins.append(margin)
    return replies, min(margins)


def add_chat_loop():
    torch.set_num_threads(1)
    path = os.path.join(OUT, "reference.json")
    with open(path, encoding="utf-8") as f:
        reference = json.load(f)
    folder = os.path.join(OUT, "llama")
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    tok = AutoTokenizer.from_pretrained(folder)
    for first in CHAT_LINES:
        for second in CHAT_LINES:
            replies, margin = chat_loop(model, tok, [first, second])
            if margin > 1e-3 and all(r and "\ufffd" not in r for r in replies):
                break
        else:
            continue
        break
    else:
        sys.exit("no two lines gave clear-cut replies of whole UTF-8")
    print(f"chat loop: {[first, second]} -> {replies} (min margin {margin:.4f})")
    reference["llama"]["chat_loop"] = {"turns": [first, second], "max_new_tokens": CHAT_LOOP_TOKENS,
                                       "replies": replies, "min_margin": margin}
    with open(path, "w") as f:
        json.dump(reference, f, indent=1, ensure_ascii=False)
        f.write("\n")


def loss_of(model, batch):
    with torch.no_grad():
        return float(model(input_ids=batch, labels=batch).loss)


BUILDERS = {"gpt2": gpt2_model, "llama": llama_model, "mixtral": mixtral_model}


def make_model(arch):
    """Saves `arch`'s model and tokenizer under OUT and returns its reference entry."""
    folder = os.path.join(OUT, arch)
    for seed in range(1, 200):  # the first seed whose greedy text is clear-cut, whole UTF-8 and all 32 tokens
        torch.manual_seed(seed)
        BUILDERS[arch]().save_pretrained(folder)
        tokenizer_of(arch).save_pretrained(folder)
        model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
        tok = AutoTokenizer.from_pretrained(folder)
        ids = prompt_ids(arch, tok)
        new, text, margin = greedy(model, tok, ids)
        if margin <= 1e-3 or "\ufffd" in text or len(new) < NEW_TOKENS:
            continue
        if arch == "mixtral":
            routed = router_margin(model, [batch_of(tok), torch.tensor([ids + new])])
            if routed <= 1e-4:
                continue
        break
    else:
        sys.exit(f"{arch}: no seed gave a clear-cut greedy text of whole UTF-8 and {NEW_TOKENS} tokens")
    batch = batch_of(tok)
    print(f"{arch}: seed {seed}, {text!r} (min margin {margin:.4f}), loss {loss_of(model, batch):.6f}")
    entry = {"seed": seed, "prompt": PROMPTS[arch], "prompt_ids": ids, "generated_ids": new, "text": text,
             "min_margin": margin, "batch": batch.tolist(), "loss": loss_of(model, batch)}
    if arch == "llama":
        ids = chat_ids(tok)
        new_tokens = model.config.max_position_embeddings - len(ids)  # the sequence within the positions
        new, text, margin = greedy(model, tok, ids, new_tokens)
        assert new_tokens >= 8 and margin > 1e-3, (new_tokens, margin)
        entry["chat"] = {"messages": CHAT, "prompt_ids": ids, "max_new_tokens": new_tokens, "generated_ids": new,
                         "text": text, "min_margin": margin}
    if arch == "mixtral":
        entry["min_router_margin"] = routed
        print(f"mixtral: min router margin {routed:.6f}")
        with torch.no_grad():
            logits = model(input_ids=batch).logits
        top1 = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, num_experts_per_tok=1).eval()
        entry["min_router_margin_top1"] = router_margin(top1, [batch])
        assert entry["min_router_margin_top1"] > 1e-4, entry["min_router_margin_top1"]
        with torch.no_grad():
            logits_top1 = top1(input_ids=batch).logits
        write_tns(os.path.join(OUT, "mixtral_logits.tns"),
                  [("batch", batch.numpy().astype("<i8")), ("logits", logits.numpy().astype("<f4")),
                   ("logits_top1", logits_top1.numpy().astype("<f4"))])
    return entry


def write_reference(reference):
    with open(os.path.join(OUT, "reference.json"), "w") as f:
        json.dump(reference, f, indent=1, ensure_ascii=False)
        f.write("\n")


def make():
    torch.set_num_threads(1)
    write_reference({arch: make_model(arch) for arch in BUILDERS})
    add_chat_loop()
    print(f"transformers {transformers.__version__}, torch {torch.__version__}")


def add_mixtral():
    torch.set_num_threads(1)
    with open(os.path.join(OUT, "reference.json"), encoding="utf-8") as f:
        reference = json.load(f)
    reference["mixtral"] = make_model("mixtral")
    write_reference(reference)
    print(f"transformers {transformers.__version__}, torch {torch.__version__}")


def check(pairs, trained):
    torch.set_num_threads(1)
    with open(os.path.join(OUT, "reference.json"), encoding="utf-8") as f:
        reference = json.load(f)
    ok = True
    for arch, folder in pairs:
        ref = reference[arch]
        model = AutoModelForCausalLM.from_pretrained(folder).eval()
        tok = AutoTokenizer.from_pretrained(folder)
        loss = loss_of(model, torch.tensor(ref["batch"]))
        new, text, _ = greedy(model, tok, prompt_ids(arch, tok))
        print(f"{arch} {folder}: {type(model).__name__}, {type(tok).__name__}, loss {loss:.8f}, text {text!r}")
        if not trained:
            same = abs(loss - ref["loss"]) <= 1e-5 and new == ref["generated_ids"] and text == ref["text"]
            print(f"  {'OK' if same else 'FAILED'}: reference loss {ref['loss']:.8f}, text {ref['text']!r}")
            ok = ok and same
    return ok


def window_loss(folder, tokens_path):
    torch.set_num_threads(1)
    model = AutoModelForCausalLM.from_pretrained(folder).eval()
    with open(tokens_path, "rb") as f:
        data = f.read()
    magic, _, width, _, count, _ = struct.unpack_from("<8sIIIQQ", data, 0)
    assert magic == b"TRIADTOK", f"{tokens_path} is not a triad token file"
    n = model.config.max_position_embeddings + 1
    ids = struct.unpack_from(f"<{count}{'H' if width == 2 else 'I'}", data, 36)[-n:]
    ids = torch.tensor(ids)
    with torch.no_grad():  # the model's positions hold the inputs: the loss is taken here, not by labels=
        loss = float(torch.nn.functional.cross_entropy(model(input_ids=ids[None, :-1]).logits[0], ids[1:]))
    print(f"{loss:.10f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--check", nargs="+", metavar="ARCH DIR", help="gpt2|llama|mixtral and a triad-exported folder")
    parser.add_argument("--trained", action="store_true", help="print only: the weights were trained since")
    parser.add_argument("--chat-loop", action="store_true", help="add the chat loop's replies to reference.json")
    parser.add_argument("--mixtral", action="store_true", help="make the Mixtral and its reference alone")
    parser.add_argument("--window-loss", nargs=2, metavar=("DIR", "TOKENS"), help="loss on a token file's last window")
    args = parser.parse_args()
    if args.window_loss:
        window_loss(*args.window_loss)
    elif args.chat_loop:
        add_chat_loop()
    elif args.mixtral:
        add_mixtral()
    elif not args.check:
        make()
    else:
        if len(args.check) % 2:
            sys.exit("--check takes pairs: ARCH DIR")
        sys.exit(0 if check(list(zip(args.check[::2], args.check[1::2])), args.trained) else 1)
