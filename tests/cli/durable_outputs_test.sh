#!/usr/bin/env bash
# Outputs are durable (issue 15): a failed output file is an error (exit 1) after what was
# computed is printed; no command writes over its own input; a good output leaves no temporary
# behind; make-model refuses a non-empty --out unless --force, which replaces the checkpoint
# (also a sharded one by a single file) so that the folder loads.
set -uo pipefail
EPSERVE=$1 WORK=$2
rm -rf "$WORK" && mkdir -p "$WORK"
fail() { echo "FAIL: $*"; exit 1; }
"$EPSERVE" make-model --preset tiny --seed 1 --out "$WORK/model" >/dev/null || fail "make-model"
GEN=("$EPSERVE" generate --model "$WORK/model" --prompt-ids 1,2,3 --max-tokens 3 --ignore-eos)

# expect_fail NAME TEXT CMD...: exit 1, stdout has the tokens, stderr has TEXT.
expect_fail() {
  local name=$1 text=$2
  shift 2
  "$@" >"$WORK/$name.out" 2>"$WORK/$name.err"
  local rc=$?
  ((rc == 1)) || fail "$name: exit $rc, want 1 ($(cat "$WORK/$name.err"))"
  grep -qF -- "$text" "$WORK/$name.err" || fail "$name: stderr lacks [$text]: $(cat "$WORK/$name.err")"
  echo "ok   $name: $(head -n1 "$WORK/$name.err")"
}
expect_tokens() {
  grep -qE '^sequence 0:( [0-9]+){3} ' "$WORK/$1.out" || fail "$1: the tokens were not printed: $(cat "$WORK/$1.out")"
}

# Generate: the tokens are printed, then each failed output is named.
expect_fail tokens_full "/dev/full: write failed: No space left on device" "${GEN[@]}" --tokens-out /dev/full
expect_tokens tokens_full
expect_fail trace_full "/dev/full: write failed: No space left on device" "${GEN[@]}" --trace-out /dev/full
expect_tokens trace_full
expect_fail logits_full "/dev/full: write failed: No space left on device" \
  "${GEN[@]}" --logits-out /dev/full --tokens-out "$WORK/both.json"
expect_tokens logits_full
[[ -s "$WORK/both.json" ]] || fail "the --tokens-out beside a failed --logits-out was not written"
# An output that cannot be written at all (its folder is missing) is refused before any work:
# nothing is generated, and the other output is not written either.
expect_fail logits_missing_dir "--logits-out $WORK/no/dir/l.npy: the folder $WORK/no/dir does not exist" \
  "${GEN[@]}" --logits-out "$WORK/no/dir/l.npy" --tokens-out "$WORK/early.json"
! grep -qE '^sequence 0:' "$WORK/logits_missing_dir.out" || fail "logits_missing_dir: generated before refusing"
[[ ! -e "$WORK/early.json" ]] || fail "logits_missing_dir: --tokens-out written although the run was refused"
expect_fail tokens_is_arrivals "is also an input (--arrivals)" \
  "$EPSERVE" generate --model "$WORK/model" --arrivals "$WORK/both.json" --tokens-out "$WORK/both.json"

# Good outputs replace an old file whole and leave no temporary.
mkdir -p "$WORK/out"
echo "an old, longer file that must be replaced completely" >"$WORK/out/tokens.json"
"${GEN[@]}" --tokens-out "$WORK/out/tokens.json" --logits-out "$WORK/out/l.npy" \
  --trace-out "$WORK/out/trace.bin" >/dev/null || fail "generate with good outputs"
python3 -c 'import json,sys; json.load(open(sys.argv[1]))' "$WORK/out/tokens.json" || fail "tokens.json is not JSON"
[[ -z "$(ls "$WORK/out" | grep '\.tmp\.')" ]] || fail "temporaries left: $(ls "$WORK/out")"
"$EPSERVE" trace info "$WORK/out/trace.bin" >/dev/null || fail "the recorded trace does not read back"

# trace import / place never write over their input (which stays as it was).
cp "$WORK/out/trace.bin" "$WORK/trace.bin"
for t in 0 1 2 3; do echo "{\"layer\": 1, \"token\": $t, \"experts\": [1, 2, 3, 4]}"; done >"$WORK/t.jsonl"
cp "$WORK/t.jsonl" "$WORK/t.orig"
expect_fail import_over_input "--out $WORK/t.jsonl is also an input" \
  "$EPSERVE" trace import "$WORK/t.jsonl" --out "$WORK/t.jsonl"
expect_fail import_over_input_other_spelling "is also an input" \
  "$EPSERVE" trace import "$WORK/t.jsonl" --out "$WORK/./out/../t.jsonl"
cmp -s "$WORK/t.jsonl" "$WORK/t.orig" || fail "trace import changed its input"
cp "$WORK/trace.bin" "$WORK/trace.orig"
expect_fail place_over_trace "--out $WORK/trace.bin is also an input (--trace); write elsewhere" \
  "$EPSERVE" place --trace "$WORK/trace.bin" --out "$WORK/trace.bin" --nodes 1 --ranks-per-node 2
cmp -s "$WORK/trace.bin" "$WORK/trace.orig" || fail "place changed its trace"

# make-model: a non-empty folder is refused; --force replaces the checkpoint, keeps other files.
"$EPSERVE" make-model --preset tiny --shards 3 --out "$WORK/m" >/dev/null || fail "make-model --shards 3"
echo "my notes" >"$WORK/m/notes.txt"
expect_fail make_model_not_empty "--out $WORK/m is not empty; pass --force" \
  "$EPSERVE" make-model --preset tiny --out "$WORK/m"
[[ -f "$WORK/m/model.safetensors.index.json" ]] || fail "the refused make-model changed the folder"
"$EPSERVE" make-model --preset tiny --out "$WORK/m" --force >/dev/null || fail "make-model --force"
[[ ! -e "$WORK/m/model.safetensors.index.json" ]] || fail "--force left the old shard index"
[[ -z "$(ls "$WORK/m" | grep -- '-of-')" ]] || fail "--force left old shards: $(ls "$WORK/m")"
[[ "$(cat "$WORK/m/notes.txt")" == "my notes" ]] || fail "--force removed a file that is not the checkpoint's"
"$EPSERVE" generate --model "$WORK/m" --prompt-ids 1 --max-tokens 1 >/dev/null || fail "the --force'd one-shard model does not load"
"$EPSERVE" make-model --preset tiny --shards 3 --out "$WORK/m" --force >/dev/null || fail "make-model --force --shards 3"
[[ ! -e "$WORK/m/model.safetensors" ]] || fail "--force --shards 3 left the single file"
"$EPSERVE" generate --model "$WORK/m" --prompt-ids 1 --max-tokens 1 >/dev/null || fail "the --force'd sharded model does not load"
echo "durable outputs: all checks passed"
