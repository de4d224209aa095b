#!/bin/bash
# `epserve make-model --preset tiny-v4` (issue 50): the C++ writer's V4 checkpoints in fp8 (FP8
# projections, FP4 experts) and bf16 (their decoded twin) with a tokenizer beside them, run by
# v4_generate and by the independent float64 reference (reference_v4.py reads the files on its
# own): greedy tokens identical, logits within 1e-3 relative, for both dtypes. Then --layers /
# --mtp-layers cut the config, and the real-shape presets ask for --allow-large.
# Usage: make_model_v4_test.sh EPSERVE V4_GENERATE WORKDIR
set -euo pipefail
bin=$1 gen=$2 work=$3
here=$(cd "$(dirname "$0")" && pwd)
ref=$here/../reference
PY=/usr/bin/python3
rm -rf "$work" && mkdir -p "$work"

for dtype in fp8 bf16; do
  "$bin" make-model --preset tiny-v4 --dtype "$dtype" --out "$work/$dtype" > /dev/null
  for f in config.json model.safetensors tokenizer.json tokenizer_config.json; do
    [[ -s $work/$dtype/$f ]] || { echo "FAIL: make-model tiny-v4 $dtype wrote no $f" >&2; exit 1; }
  done
done
$PY - "$work" <<'EOF'
import json, sys
w = sys.argv[1]
for dtype in ("fp8", "bf16"):
    c = json.load(open(f"{w}/{dtype}/config.json"))
    assert c["model_type"] == "deepseek_v4", c["model_type"]
    assert c["compress_ratios"] == [0, 4, 16, 4], c["compress_ratios"]
    assert c["num_nextn_predict_layers"] == 0 and c["vocab_size"] == 512
    assert ("quantization_config" in c) == (dtype == "fp8"), dtype
    t = json.load(open(f"{w}/{dtype}/tokenizer.json"))
    assert len(t["model"]["vocab"]) + len(t["added_tokens"]) >= 512
EOF

P1=5,9,13,77,200
P2=$(seq -s, 100 140)
prompts=(--prompt-ids "$P1" --prompt-ids "$P2")
$PY "$ref/reference_v4.py" --model "$work/fp8" "${prompts[@]}" --max-tokens 8 \
  --logits-out "$work/ref.npy" --tokens-out "$work/ref.json" > /dev/null
for dtype in fp8 bf16; do
  "$gen" --model "$work/$dtype" "${prompts[@]}" --max-tokens 8 \
    --logits-out "$work/$dtype.npy" --tokens-out "$work/$dtype.json" > /dev/null
  $PY "$ref/compare.py" --engine-logits "$work/$dtype.npy" --ref-logits "$work/ref.npy" \
    --engine-tokens "$work/$dtype.json" --ref-tokens "$work/ref.json" --tol 1e-3
done

"$bin" make-model --preset tiny-v4 --layers 2 --mtp-layers 1 --dtype fp8 --out "$work/cut" > /dev/null
$PY - "$work/cut" <<'EOF'
import json, struct, sys
d = sys.argv[1]
c = json.load(open(f"{d}/config.json"))
assert c["num_hidden_layers"] == 2 and c["num_nextn_predict_layers"] == 1, c
assert c["compress_ratios"] == [0, 4, 0], c["compress_ratios"]
f = open(f"{d}/model.safetensors", "rb")
names = json.loads(f.read(struct.unpack("<Q", f.read(8))[0]))
assert "mtp.0.e_proj.weight" in names and "layers.2.attn_norm.weight" not in names
assert names["layers.0.ffn.experts.3.w1.weight"]["dtype"] == "I8"
assert names["layers.0.ffn.experts.3.w1.scale"]["dtype"] == "F8_E8M0"
EOF

if out=$("$bin" make-model --preset v4-flash --dtype fp8 --out "$work/big" 2>&1); then
  echo "FAIL: v4-flash without --allow-large was written" >&2
  exit 1
fi
[[ $out == *"preset v4-flash in fp8 is a 156 GB checkpoint; --allow-large writes it anyway"* ]] ||
  { echo "FAIL: unexpected refusal: $out" >&2; exit 1; }
[[ ! -e $work/big ]] || { echo "FAIL: refused v4-flash left $work/big" >&2; exit 1; }
rm -rf "$work"
echo "make-model tiny-v4: fp8 and bf16 match the reference"
