#!/usr/bin/env bash
# cli.real_checkpoints (issue 49): checkpoints as their authors ship them load as they mean.
# - config.json re-saved by current transformers (`rope_parameters` instead of rope_scaling +
#   rope_theta) gives bit-identical logits; both spellings agreeing is fine, disagreeing an error;
# - a checkpoint whose conversion dropped the MTP layer (num_nextn_predict_layers still 1) loads
#   and generates with --mtp off exactly as the full one, the load line says what was not loaded,
#   and --mtp on names the first missing tensor;
# - a model_type epserve does not run is refused, naming config.json, what it found and the list;
# - generation_config.json's temperature / top_p / top_k are generate's defaults for flags not
#   given (--generation-config none: the built-in ones).
set -euo pipefail
EPSERVE=$1 WORK=$2
HERE=$(cd "$(dirname "$0")" && pwd)
PY=/usr/bin/python3
rm -rf "$WORK" && mkdir -p "$WORK"
fail() { echo "FAIL: $*"; exit 1; }
"$EPSERVE" make-model --preset tiny --seed 3 --out "$WORK/model" >/dev/null
gen() {  # gen MODEL NAME [flags...]: greedy run, tokens and logits in $WORK/NAME.{json,npy}
  local model=$1 name=$2
  shift 2
  "$EPSERVE" generate --model "$model" --prompt-ids 1,2,3,4,5,6,7,8 --prompt-ids 9 --max-tokens 6 \
    --ignore-eos --tokens-out "$WORK/$name.json" --logits-out "$WORK/$name.npy" "$@" >"$WORK/$name.out"
}
edit_config() {  # edit_config DIR PYTHON: runs PYTHON on the dict c of DIR/config.json
  $PY - "$1/config.json" "$2" <<'PYEOF'
import json, sys
path, code = sys.argv[1], sys.argv[2]
c = json.load(open(path))
exec(code)
json.dump(c, open(path, "w"), indent=2)
PYEOF
}
copy() { rm -rf "$WORK/$2" && cp -r "$WORK/$1" "$WORK/$2"; }

# rope_parameters: the same logits, bit for bit, as rope_scaling + rope_theta.
gen "$WORK/model" base
copy model params
edit_config "$WORK/params" '
p = dict(c.pop("rope_scaling")); p.pop("type"); p["rope_type"] = "yarn"; p["rope_theta"] = c.pop("rope_theta")
c["rope_parameters"] = p'
gen "$WORK/params" params
cmp "$WORK/base.npy" "$WORK/params.npy" || fail "rope_parameters spelling: logits differ from rope_scaling's"
# ... which YaRN changes (so the comparison above could fail): without it the logits differ.
copy model plain
edit_config "$WORK/plain" 'c["rope_scaling"] = None'
gen "$WORK/plain" plain
if cmp -s "$WORK/base.npy" "$WORK/plain.npy"; then fail "YaRN does not change the logits: the test proves nothing"; fi
# Both spellings, agreeing: the same; disagreeing: an error naming both.
copy model both
edit_config "$WORK/both" '
p = dict(c["rope_scaling"]); p.pop("type"); p["rope_type"] = "yarn"; p["rope_theta"] = c["rope_theta"]
c["rope_parameters"] = p'
gen "$WORK/both" both
cmp "$WORK/base.npy" "$WORK/both.npy" || fail "both rope spellings: logits differ"
edit_config "$WORK/both" 'c["rope_parameters"]["factor"] = 8'
if gen "$WORK/both" both 2>"$WORK/err.txt"; then fail "disagreeing rope spellings were accepted"; fi
grep -q 'both/config.json: rope_scaling and rope_parameters disagree on factor' "$WORK/err.txt" ||
  fail "disagreeing rope spellings: $(cat "$WORK/err.txt")"
echo "rope_parameters == rope_scaling (bit-identical logits)"

# The MTP layer (model.layers.4.*) only with --mtp on.
grep -q '^weights: .*; not loaded: the MTP module (model.layers.4.\*, [0-9.]* MB; --mtp off)$' "$WORK/base.out" ||
  fail "load line of --mtp off: $(grep weights "$WORK/base.out")"
copy model no_mtp
$PY "$HERE/drop_tensors.py" "$WORK/no_mtp/model.safetensors" model.layers.4. >/dev/null
gen "$WORK/no_mtp" no_mtp
cmp "$WORK/base.json" "$WORK/no_mtp.json" || fail "without the MTP layer: other tokens"
cmp "$WORK/base.npy" "$WORK/no_mtp.npy" || fail "without the MTP layer: other logits"
grep -q '^weights: .*; the MTP module (model.layers.4.\*) is not in the checkpoint, not needed with --mtp off$' \
  "$WORK/no_mtp.out" || fail "load line without the MTP layer: $(grep weights "$WORK/no_mtp.out")"
if gen "$WORK/no_mtp" no_mtp_on --mtp on 2>"$WORK/err.txt"; then fail "--mtp on loaded a checkpoint without the MTP layer"; fi
grep -q "no_mtp/model.safetensors: missing tensor model.layers.4.enorm.weight (want \[256\]), of the MTP module (num_nextn_predict_layers is 1); --mtp off loads the model without it" \
  "$WORK/err.txt" || fail "--mtp on without the MTP layer: $(cat "$WORK/err.txt")"
echo "MTP layer dropped: --mtp off gives the full checkpoint's tokens; --mtp on: $(cat "$WORK/err.txt")"

# model_type and architectures.
SUPPORTED='(supported: deepseek_v2 (DeepseekV2ForCausalLM), deepseek_v3 (DeepseekV3ForCausalLM), deepseek_v32 (DeepseekV32ForCausalLM))'
# deepseek_v4 goes to the V4 loader (its own config fields), so a V3 config relabelled is
# refused naming the first V4 field it lacks.
copy model type_deepseek_v4
edit_config "$WORK/type_deepseek_v4" "c['model_type'] = 'deepseek_v4'; c.pop('architectures')"
if gen "$WORK/type_deepseek_v4" type_deepseek_v4 2>"$WORK/err.txt"; then fail "a V3 config as deepseek_v4 was accepted"; fi
grep -qF "type_deepseek_v4/config.json: head_dim is missing" "$WORK/err.txt" ||
  fail "model_type deepseek_v4: $(cat "$WORK/err.txt")"
for t in deepseek_v5 llama; do
  copy model "type_$t"
  edit_config "$WORK/type_$t" "c['model_type'] = '$t'; c.pop('architectures')"
  if gen "$WORK/type_$t" "type_$t" 2>"$WORK/err.txt"; then fail "model_type $t was accepted"; fi
  grep -qF "type_$t/config.json: model_type \"$t\" is not supported $SUPPORTED" "$WORK/err.txt" ||
    fail "model_type $t: $(cat "$WORK/err.txt")"
done
copy model arch
edit_config "$WORK/arch" 'c["architectures"] = ["DeepseekV2ForCausalLM"]'
if gen "$WORK/arch" arch 2>"$WORK/err.txt"; then fail "contradicting architectures were accepted"; fi
grep -qF 'arch/config.json: architectures entry "DeepseekV2ForCausalLM" contradicts model_type "deepseek_v3"' \
  "$WORK/err.txt" || fail "architectures: $(cat "$WORK/err.txt")"
echo "model_type / architectures checked"

# generation_config.json: the defaults of the sampling flags not given.
copy model sampled
echo '{"do_sample": true, "temperature": 1.0, "top_p": 0.9, "transformers_version": "4.46.3"}' \
  >"$WORK/sampled/generation_config.json"
gen "$WORK/sampled" sampled --seed 5
grep -q "^sampling: temperature 1, top_p 0.9, top_k 0 (temperature, top_p from .*sampled/generation_config.json; the flags given win)$" \
  "$WORK/sampled.out" || fail "no sampling line: $(cat "$WORK/sampled.out")"
if cmp -s "$WORK/base.json" "$WORK/sampled.json"; then fail "generation_config.json's temperature was not used"; fi
gen "$WORK/sampled" sampled_greedy --temperature 0
cmp "$WORK/base.json" "$WORK/sampled_greedy.json" || fail "--temperature 0 did not win over the file"
gen "$WORK/sampled" sampled_none --generation-config none
cmp "$WORK/base.json" "$WORK/sampled_none.json" || fail "--generation-config none still sampled"
echo '{"top_p": 2}' >"$WORK/bad.json"
if gen "$WORK/model" bad --generation-config "$WORK/bad.json" 2>"$WORK/err.txt"; then fail "a bad generation config was accepted"; fi
grep -qF 'bad.json: field "top_p" must be a number in (0, 1], got 2' "$WORK/err.txt" ||
  fail "bad generation config: $(cat "$WORK/err.txt")"
echo "generation_config.json: defaults for the flags not given"
echo "cli.real_checkpoints: ok"
