#!/usr/bin/env bash
# The GPU kit's quantized_generate step: a quantized model's greedy generation on the GPU
# gives the CPU's tokens. The tiny GPT is trained for 300 steps on the kit's corpus (on the
# GPU: a model that has learnt some words, so that its greedy text is not one token over and
# over), quantized by triad-compress zeroquant to W8A8 and W4A8 (groups of 16), and W8A8
# with --quantize-embeddings (the token table and its tied head too: the GPU's lookup of the
# packed table's rows), and each quantized model continues one prompt by 64 greedy tokens
# with triad-generate on the cpu and on the GPU: the two texts must be equal. The quantized
# layers' integer GEMMs give the CPU's values bit for bit (Note [Integer GEMM on the GPU]),
# as does the table's lookup; the layers kept in f32 (attention, norms, the head without
# --quantize-embeddings) agree to f32 rounding, so a tie between two tokens' logits could
# still tell them apart: the first differing character is printed.
#
#   quantized_generate.sh KIT WORK
set -euo pipefail
kit=$1 work=$2
mkdir -p "$work"
prompt="The meaning of life is"
triad-train --config "$kit/configs/tiny.json" --set data.corpus="$kit/data/tokens.bin" \
  --set data.tokenizer="$kit/data/tokenizer.json" --set model.vocab_size=2048 --set model.seq_len=128 \
  --set device=cuda --set output_dir="$work/train" --steps 300 >"$work/train.log"
status=0
results=()
for variant in w8a8 w4a8 w8a8_emb; do
  out=$work/$variant
  bits=${variant:1:1}
  embeddings=()
  [[ $variant == *_emb ]] && embeddings=(--quantize-embeddings)
  triad-compress zeroquant --checkpoint "$work/train/model.h5" --wbits "$bits" --abits 8 --group-size 16 \
    "${embeddings[@]}" --out "$out" >"$out.log"
  for device in cpu cuda; do
    triad-generate --checkpoint "$out/model.h5" --tokenizer "$kit/data/tokenizer.json" --prompt "$prompt" \
      --temperature 0 --max-new-tokens 64 --device "$device" >"$out.$device.txt"
  done
  if cmp -s "$out.cpu.txt" "$out.cuda.txt"; then
    echo "$variant: the GPU's 64 greedy tokens equal the CPU's: $(head -c 200 "$out.cpu.txt" | tr '\n' ' ')"
    results+=("\"${variant}_equal\": true")
  else
    echo "$variant: the GPU's text differs from the CPU's: $(cmp "$out.cpu.txt" "$out.cuda.txt" || true)"
    echo "  cpu:  $(tr '\n' ' ' <"$out.cpu.txt")"
    echo "  cuda: $(tr '\n' ' ' <"$out.cuda.txt")"
    results+=("\"${variant}_equal\": false")
    status=1
  fi
done
(IFS=,; echo "{\"check\": \"quantized_generate\", ${results[*]}}")
exit $status
