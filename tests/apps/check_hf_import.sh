#!/usr/bin/env bash
# triad-ckpt import/export through the command line, with the programs that use its output:
#  - the GPT-2 reference file (tests/data/safetensors/gpt2) imports into a checkpoint that
#    verifies, and exports back to the same tensors (the mask buffers left out);
#  - a model trained by triad-train, exported to a Hugging Face folder and imported again
#    (by its config.json alone, no --arch or flags; its model.safetensors without config.json:
#    --n-head is asked for by name), samples the same greedy text in triad-generate as the
#    trained model, and triad-train resumes from the import (lr 0: its weights come out
#    unchanged, the same tensors as the first export);
#  - an import over an existing checkpoint folder is refused and leaves it as it was;
#  - a Hugging Face tokenizer.json encodes a JSONL corpus, travels with the export of a model
#    trained on it (its data.tokenizer) and with the import of that folder to triad-generate;
#  - --max-shard-size shards the export as save_pretrained does, and the shards import.
#  - triad-generate --chat on an imported transformers Llama answers as transformers' own chat
#    loop does (tests/data/hf_roundtrip/reference.json, "chat_loop").
#   check_hf_import.sh BIN_DIR DATA_DIR CONFIG
set -euo pipefail
bin=$(cd "$1" && pwd) data=$(cd "$2" && pwd) config=$3
source "$(dirname "$0")/app_steps.sh"
# same_tensors A B [SKIPPED_REGEX]: the two safetensors files hold the same tensors, bit for
# bit (read here with the standard library alone), except A's whose names match the regex.
same_tensors() {
  python3 - "$@" <<'PY'
import json, re, struct, sys
def load(path):
    b = open(path, "rb").read()
    (n,) = struct.unpack_from("<Q", b, 0)
    header = json.loads(b[8:8 + n])
    header.pop("__metadata__", None)
    return {k: (v["dtype"], v["shape"], b[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]])
            for k, v in header.items()}
a, b = load(sys.argv[1]), load(sys.argv[2])
skip = re.compile(sys.argv[3]) if len(sys.argv) > 3 else None
a = {k: v for k, v in a.items() if not (skip and skip.fullmatch(k))}
if a.keys() != b.keys():
    sys.exit(f"FAILED: names differ: {sorted(a.keys() ^ b.keys())}")
bad = [k for k in a if a[k] != b[k]]
if bad:
    sys.exit(f"FAILED: tensors differ: {bad}")
print(f"OK: {len(a)} tensors equal ({sys.argv[1]} and {sys.argv[2]})")
PY
}

# The reference GPT-2 file: import, verify, export.
run import_ref "$bin/triad-ckpt" import --from "$data/gpt2" --arch gpt2 --out "$work/ref"
run verify_ref "$bin/triad-ckpt" verify "$work/ref"
run inspect_ref "$bin/triad-ckpt" inspect "$work/ref"
grep -q '^/model/blocks.1.attn.qkv.weight  *(192, 64) ' "$work/inspect_ref" || fail "inspect lacks the qkv weight"
run export_ref "$bin/triad-ckpt" export "$work/ref" --format safetensors --out "$work/ref_hf"
same_tensors "$data/gpt2/model.safetensors" "$work/ref_hf/model.safetensors" 'transformer\.h\.[0-9]+\.attn\.(masked_)?bias'

# A model trained by triad, out to safetensors and back in.
corpus "$bin" 300
train=("$bin/triad-train" --config "$config" --set data.corpus="$work/tokens.bin" --set data.tokenizer="$work/tok.json"
  --set model.vocab_size=300 --set eval_iters=1 --set log_interval=1000)
run train "${train[@]}" --steps 3 --set output_dir="$work/trained"
run export_trained "$bin/triad-ckpt" export "$work/trained/model.h5" --format safetensors --out "$work/trained_hf"
mkdir "$work/bare"
cp "$work/trained_hf/model.safetensors" "$work/bare/"
if "$bin/triad-ckpt" import --from "$work/bare/model.safetensors" --arch gpt2 --out "$work/imported" >"$work/no_heads" 2>&1; then
  fail "an import without config.json or --n-head succeeded"
fi
grep -q "needs n_head (--n-head), which no config.json beside it" "$work/no_heads" || { cat "$work/no_heads"; fail "no_heads"; }
[[ ! -e $work/imported ]] || fail "the failed import left $work/imported behind"
run import "$bin/triad-ckpt" import --from "$work/trained_hf" --out "$work/imported"

generate=(--tokenizer "$work/tok.json" --prompt "The licence" --max-new-tokens 12 --temperature 0 --threads 1)
run gen_trained "$bin/triad-generate" --checkpoint "$work/trained/model.h5" "${generate[@]}"
run gen_imported "$bin/triad-generate" --checkpoint "$work/imported/step-00000000.h5" "${generate[@]}"
cmp -s "$work/gen_trained" "$work/gen_imported" || { diff "$work/gen_trained" "$work/gen_imported"; fail "samples differ"; }
[[ $(wc -c <"$work/gen_imported") -gt 12 ]] || fail "triad-generate printed nothing past the prompt"

run resume "${train[@]}" --steps 1 --resume "$work/imported" --set optimizer.params.lr=0 --set output_dir="$work/resumed"
grep -q "resumed from $work/imported/step-00000000.h5 at step 0" "$work/resume" || { cat "$work/resume"; fail "resume"; }
run export_resumed "$bin/triad-ckpt" export "$work/resumed/model.h5" --format safetensors --out "$work/resumed_hf"
same_tensors "$work/trained_hf/model.safetensors" "$work/resumed_hf/model.safetensors"
# Sharded: 100 kB shards, the index names them all, and they import to the same weights.
run export_sharded "$bin/triad-ckpt" export "$work/resumed/model.h5" --format safetensors --out "$work/sharded" \
  --max-shard-size 100kB
shards=$(ls "$work/sharded" | grep -c '^model-0000[0-9]-of-0000[0-9].safetensors$' || true)
[[ $shards -gt 1 && -e $work/sharded/model.safetensors.index.json && ! -e $work/sharded/model.safetensors ]] ||
  { ls "$work/sharded"; fail "no shards and index in $work/sharded"; }
run import_sharded "$bin/triad-ckpt" import --from "$work/sharded" --out "$work/imported_sharded"
run export_unsharded "$bin/triad-ckpt" export "$work/imported_sharded" --format safetensors --out "$work/sharded"
[[ $(ls "$work/sharded" | grep -c '^model') -eq 1 ]] || { ls "$work/sharded"; fail "the shards outlived a one-file export"; }
same_tensors "$work/trained_hf/model.safetensors" "$work/sharded/model.safetensors"

# Nothing saved is overwritten.
before=$(md5sum "$work/imported/step-00000000.h5")
if "$bin/triad-ckpt" import --from "$data/gpt2" --arch gpt2 --out "$work/imported" >"$work/again" 2>&1; then
  fail "an import into a checkpoint folder succeeded"
fi
grep -q "already holds checkpoints" "$work/again" || { cat "$work/again"; fail "again"; }
[[ $(md5sum "$work/imported/step-00000000.h5") == "$before" ]] || fail "the refused import changed the checkpoint"
# A Hugging Face tokenizer.json through the programs: a JSONL corpus encoded with it (given as
# its folder), a model trained on those tokens, exported with the tokenizer beside it and
# imported: the import copies it, and triad-generate finds it there by itself.
mkdir "$work/hf"
cp "$data/../io/hf_gpt2_tokenizer.json" "$work/hf/tokenizer.json"
python3 - "$work/docs.jsonl" <<'PY'
import json, os, sys
root = "/usr/share/common-licenses"
with open(sys.argv[1], "w") as f:
    for name in sorted(os.listdir(root)):
        path = os.path.join(root, name)
        if os.path.isfile(path) and not os.path.islink(path):
            text = open(path, encoding="utf-8", errors="replace").read()
            f.write(json.dumps({"text": text, "source": name}) + "\n")
PY
docs=$(wc -l <"$work/docs.jsonl")
run encode_hf "$bin/triad-data" encode --tokenizer "$work/hf" --corpus "$work/docs.jsonl" --out "$work/hf_tokens.bin"
grep -q "(vocab_size 512, uint16 tokens)" "$work/encode_hf" || { cat "$work/encode_hf"; fail "encode_hf"; }
run inspect_hf "$bin/triad-data" inspect "$work/hf_tokens.bin" --tokenizer "$work/hf/tokenizer.json" --count 4
grep -q "^documents:   $docs ($((docs - 1)) end-of-text tokens)" "$work/inspect_hf" || { cat "$work/inspect_hf"; fail "inspect_hf"; }
hf_train=("$bin/triad-train" --config "$config" --set data.corpus="$work/hf_tokens.bin" --set data.tokenizer="$work/hf"
  --set model.vocab_size=512 --set eval_iters=1 --set log_interval=1000)
run train_hf "${hf_train[@]}" --steps 3 --set output_dir="$work/hf_trained"
run export_hf "$bin/triad-ckpt" export "$work/hf_trained/model.h5" --format safetensors --out "$work/hf_export"
cmp -s "$work/hf/tokenizer.json" "$work/hf_export/tokenizer.json" || fail "the export did not copy tokenizer.json"
run import_hf "$bin/triad-ckpt" import --from "$work/hf_export" --out "$work/hf_imported"
grep -q "copied tokenizer.json into $work/hf_imported" "$work/import_hf" || { cat "$work/import_hf"; fail "import_hf"; }
cmp -s "$work/hf/tokenizer.json" "$work/hf_imported/tokenizer.json" || fail "the imported tokenizer.json differs"
hf_generate=(--prompt "The licence" --max-new-tokens 12 --temperature 0 --threads 1)
run gen_hf_trained "$bin/triad-generate" --checkpoint "$work/hf_trained/model.h5" "${hf_generate[@]}"
run gen_hf_imported "$bin/triad-generate" --checkpoint "$work/hf_imported/step-00000000.h5" "${hf_generate[@]}"
cmp -s "$work/gen_hf_trained" "$work/gen_hf_imported" || { diff "$work/gen_hf_trained" "$work/gen_hf_imported"; fail "HF samples differ"; }
[[ $(wc -c <"$work/gen_hf_imported") -gt 12 ]] || fail "triad-generate printed nothing past the prompt (HF tokenizer)"
# triad-generate --chat on a transformers Llama imported with its tokenizer and chat template:
# fed the reference's turns on stdin, it answers each with the reply transformers' own chat
# loop gives (tests/reference/hf_roundtrip_reference.py, "chat_loop"), the second turn
# templated over the first reply.
roundtrip=$data/../hf_roundtrip
run import_llama "$bin/triad-ckpt" import --from "$roundtrip/llama" --out "$work/llama"
python3 -c 'import json, sys; print("\n".join(json.load(open(sys.argv[1]))["llama"]["chat_loop"]["turns"]))' \
  "$roundtrip/reference.json" >"$work/chat_turns"
new_tokens=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["llama"]["chat_loop"]["max_new_tokens"])' \
  "$roundtrip/reference.json")
"$bin/triad-generate" --checkpoint "$work/llama/step-00000000.h5" --chat --temperature 0 \
  --max-new-tokens "$new_tokens" --threads 1 <"$work/chat_turns" >"$work/chat" 2>"$work/chat_errors" ||
  { cat "$work/chat_errors"; fail "triad-generate --chat exited non-zero"; }
python3 - "$roundtrip/reference.json" "$work/chat" <<'PY' || fail "triad-generate --chat's replies are not transformers'"
import json, sys
replies = json.load(open(sys.argv[1], encoding="utf-8"))["llama"]["chat_loop"]["replies"]
got = open(sys.argv[2], encoding="utf-8").read()
want = "Human: " + "".join(f"Assistant: {r}\nHuman: " for r in replies) + "\n"
if got != want:
    sys.exit(f"FAILED: --chat printed {got!r}, want {want!r}")
print(f"OK: --chat answered {len(replies)} turns as transformers does: {replies}")
PY
echo "OK: import/export round trips, generate and resume from an import, refusals, a Hugging Face tokenizer, a chat loop"
