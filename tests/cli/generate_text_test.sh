#!/usr/bin/env bash
# `generate --prompt TEXT [--chat]` encodes with the model's own tokenizer (and chat template)
# exactly as `epserve tokenize` does, and prints the decoded text of what it generated.
set -euo pipefail
EPSERVE=$1 WORK=$2
rm -rf "$WORK" && mkdir -p "$WORK"
"$EPSERVE" make-model --preset tiny --seed 2 --out "$WORK/model" >/dev/null
TEXT='Hello, 世界! def f(x): return x**2'
ids=$(printf '%s\n' "$(/usr/bin/python3 -c 'import json,sys; print(json.dumps({"messages":[{"role":"user","content":sys.argv[1]}],"add_generation_prompt":True}))' "$TEXT")" |
      "$EPSERVE" tokenize --tokenizer "$WORK/model" --chat 2>/dev/null | tr -d '[] ')
"$EPSERVE" generate --model "$WORK/model" --prompt "$TEXT" --chat --max-tokens 6 --ignore-eos --tokens-out "$WORK/text.json" >"$WORK/text.out"
"$EPSERVE" generate --model "$WORK/model" --prompt-ids "$ids" --max-tokens 6 --ignore-eos --tokens-out "$WORK/ids.json" >/dev/null
cmp "$WORK/text.json" "$WORK/ids.json"
grep -q '^text 0: "' "$WORK/text.out"
# A model folder without a tokenizer: --prompt is a clear error naming the file.
rm "$WORK/model/tokenizer.json"
if "$EPSERVE" generate --model "$WORK/model" --prompt hi 2>"$WORK/err.txt"; then exit 1; fi
grep -q "tokenizer.json: --prompt needs the model's tokenizer" "$WORK/err.txt"
echo "generate --prompt --chat == generate --prompt-ids of tokenize --chat ($ids)"
