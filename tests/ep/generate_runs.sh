# Sourced by the tests that compare `epserve generate` runs bit for bit (overlap_test.sh,
# fast_tp_test.sh, int8_test.sh). Needs EPSERVE, WORK (the model in $WORK/model), P (the --prompt-ids
# arguments) and MAX_TOKENS.

# run NAME [launcher...] -- [generate args...]: greedy generation with every logit and token kept
# in $WORK/NAME.npy / .json, its output in $WORK/NAME.out (stderr in .err); fails on an error.
run() {
  local name=$1
  shift
  local launch=()
  while [[ $1 != -- ]]; do launch+=("$1"); shift; done
  shift
  timeout 300 "${launch[@]}" "$EPSERVE" generate --model "$WORK/model" "${P[@]}" --max-tokens "$MAX_TOKENS" \
    --ignore-eos --logits-out "$WORK/$name.npy" --tokens-out "$WORK/$name.json" "$@" \
    >"$WORK/$name.out" 2>"$WORK/$name.err" || { echo "FAIL: $name"; cat "$WORK/$name.err"; exit 1; }
}

# same A B: identical tokens and logits files.
same() {
  cmp "$WORK/$1.json" "$WORK/$2.json" && cmp "$WORK/$1.npy" "$WORK/$2.npy" ||
    { echo "FAIL: $1 differs from $2"; exit 1; }
  echo "$1 = $2"
}
