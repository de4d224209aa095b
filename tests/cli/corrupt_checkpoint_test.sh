#!/usr/bin/env bash
# Each way a checkpoint can be broken gives a one-line error from `epserve generate` that names
# the file and the tensor (or field), exit code 1, and no crash.
# Usage: corrupt_checkpoint_test.sh EPSERVE WORKDIR
set -uo pipefail
EPSERVE=$1 WORK=$2
HERE=$(cd "$(dirname "$0")" && pwd)
rm -rf "$WORK" && mkdir -p "$WORK"
"$EPSERVE" make-model --preset tiny --dtype fp8 --out "$WORK/good" >/dev/null || exit 1
fail=0
# check NAME EXPECTED_SUBSTRING: runs generate on $WORK/NAME and checks the error.
check() {
  local name=$1 want=$2 err rc lines
  err=$("$EPSERVE" generate --model "$WORK/$name" --prompt-ids 1,2 --max-tokens 1 2>&1 >/dev/null)
  rc=$?
  lines=$(printf '%s\n' "$err" | grep -c .)
  if [[ $rc -ne 1 || $lines -ne 1 || "$err" != *"$want"* ]]; then
    echo "FAIL $name: rc=$rc lines=$lines err=[$err] want=[$want]"
    fail=1
  else
    echo "ok   $name: $err"
  fi
}
corrupt() {  # corrupt NAME KIND: a copy of the good model broken one way
  rm -rf "$WORK/$1" && cp -r "$WORK/good" "$WORK/$1"
  /usr/bin/python3 "$HERE/corrupt.py" "$WORK/$1/model.safetensors" "$2"
}

corrupt truncated truncate;  check truncated "truncated file?"
corrupt bad_json bad_json;   check bad_json "model.safetensors: bad header JSON"
corrupt offsets offsets;     check offsets "tensor lm_head.weight: data_offsets"
corrupt missing missing;     check missing "missing tensor model.layers.3.mlp.experts.30.down_proj.weight"
corrupt extra extra;         check extra "tensor model.layers.0.self_attn.bogus.weight: unexpected tensor"
corrupt shape shape;         check shape "tensor model.layers.1.self_attn.q_a_layernorm.weight: shape [64, 2], want [128]"
corrupt dtype dtype;         check dtype "tensor model.norm.weight: dtype F8_E4M3 is not allowed here"
corrupt size size;           check size "tensor model.norm.weight: 512 bytes for BF16 [128]"

rm -rf "$WORK/config" && cp -r "$WORK/good" "$WORK/config"
sed -i 's/"kv_lora_rank": 128/"kv_lora_rank": "wide"/' "$WORK/config/config.json"
check config "config.json: field \"kv_lora_rank\" must be an integer"
check does_not_exist "not a checkpoint directory"
exit $fail
