#!/usr/bin/env bash
# epserve tokenize / make-model's tokenizer: bad input lines and malformed tokenizer files give
# one-line errors naming the line or file and place; make-model writes a tokenizer that fills
# the preset's vocab_size and round-trips text; --tokenizer copies a real one.
#   tokenize_cli_test.sh EPSERVE WORK_DIR [REAL_TOKENIZER_DIR]
set -euo pipefail
BIN=$1 WORK=$2 REAL=${3:-}
rm -rf "$WORK" && mkdir -p "$WORK"
fail() { echo "FAIL: $*" >&2; exit 1; }

# expect_error NEEDLE CMD...: the command fails and its one-line error contains NEEDLE.
expect_error() {
  local needle=$1; shift
  if "$@" >"$WORK/out" 2>"$WORK/err"; then fail "expected failure: $*"; fi
  grep -qF -- "$needle" "$WORK/err" || fail "error of '$*' lacks '$needle': $(cat "$WORK/err")"
  [[ $(grep -c . "$WORK/err") -eq 1 ]] || fail "error is not one line: $(cat "$WORK/err")"
}

"$BIN" make-model --preset tiny --out "$WORK/model" >/dev/null
vocab=$(/usr/bin/python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['vocab_size'])" "$WORK/model/config.json")
/usr/bin/python3 - "$WORK/model" "$vocab" <<'PY'
import json, sys
d, vocab = sys.argv[1], int(sys.argv[2])
t = json.load(open(d + "/tokenizer.json"))
ids = set(t["model"]["vocab"].values()) | {a["id"] for a in t["added_tokens"]}
assert ids == set(range(vocab)), f"tokenizer ids are not exactly 0..{vocab - 1}"
c = json.load(open(d + "/tokenizer_config.json"))
assert c["bos_token"]["content"] == "<｜begin▁of▁sentence｜>" and "chat_template" in c
PY

printf '"Hello, world! 你好 😀"\n"<｜User｜>hi<｜Assistant｜>"\n' >"$WORK/in.jsonl"
"$BIN" tokenize --tokenizer "$WORK/model" <"$WORK/in.jsonl" >"$WORK/ids.jsonl" 2>/dev/null
"$BIN" tokenize --tokenizer "$WORK/model" --decode <"$WORK/ids.jsonl" >"$WORK/back.jsonl" 2>/dev/null
cmp -s "$WORK/in.jsonl" "$WORK/back.jsonl" || fail "round trip through the made tokenizer: $(cat "$WORK/back.jsonl")"

printf '"ok"\n{"not": "a string"}\n' >"$WORK/bad.jsonl"
expect_error "stdin line 2: expected a JSON string" "$BIN" tokenize --tokenizer "$WORK/model" <"$WORK/bad.jsonl"
printf '"ok"\n\n"unterminated\n' >"$WORK/bad.jsonl"
expect_error "stdin line 3: invalid JSON" "$BIN" tokenize --tokenizer "$WORK/model" <"$WORK/bad.jsonl"
printf '[1, 2]\n[99999999]\n' >"$WORK/bad.jsonl"
expect_error "stdin line 2: token id 99999999 is not in the vocabulary" \
  "$BIN" tokenize --tokenizer "$WORK/model" --decode <"$WORK/bad.jsonl"

mkdir -p "$WORK/broken"
head -c 300 "$WORK/model/tokenizer.json" >"$WORK/broken/tokenizer.json"
expect_error "$WORK/broken/tokenizer.json: invalid JSON at line" "$BIN" tokenize --tokenizer "$WORK/broken" </dev/null
/usr/bin/python3 - "$WORK/model/tokenizer.json" "$WORK/broken/tokenizer.json" <<'PY'
import json, sys
t = json.load(open(sys.argv[1]))
t["pre_tokenizer"]["pretokenizers"][2] = {"type": "Foo"}
json.dump(t, open(sys.argv[2], "w"))
PY
expect_error "$WORK/broken/tokenizer.json: pre_tokenizer.pretokenizers[2]: unsupported type \"Foo\"" \
  "$BIN" tokenize --tokenizer "$WORK/broken" </dev/null
cp "$WORK/model/tokenizer.json" "$WORK/broken/tokenizer.json"
echo '{"bos_token": ["wrong"]}' >"$WORK/broken/tokenizer_config.json"
expect_error "$WORK/broken/tokenizer_config.json: bos_token: expected a string or {\"content\": ...}, got array" \
  "$BIN" tokenize --tokenizer "$WORK/broken" </dev/null

if [[ -n "$REAL" && -f "$REAL/tokenizer.json" ]]; then
  "$BIN" make-model --preset tiny --tokenizer "$REAL" --out "$WORK/real" >/dev/null
  v=$(/usr/bin/python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['vocab_size'])" "$WORK/real/config.json")
  [[ $v -eq 128815 ]] || fail "make-model --tokenizer: vocab_size $v, expected the tokenizer's 128815"
  cmp -s "$REAL/tokenizer.json" "$WORK/real/tokenizer.json" || fail "tokenizer.json not copied"
else
  echo "note: no real tokenizer given; make-model --tokenizer not checked"
fi
echo "PASS"
