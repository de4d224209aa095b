#!/usr/bin/env python3
"""`epserve tokenize` against the JavaScript reference (transformers.js, reference_encode.mjs) on
every corpus item, and `epserve tokenize --decode` of those ids back to the exact text.

    compare_reference.py EPSERVE CORPUS TOKENIZER_DIR WORK_DIR

Known divergence, checked separately: transformers.js runs the pre-tokenizer's regex with
JavaScript semantics, where \\s includes U+FEFF and excludes U+0085; Hugging Face's tokenizers
(Oniguruma) and epserve (PCRE2, UCP) use Unicode White_Space, the other way round. Items
containing either character are compared only for the exact round trip, and counted.
"""
import json
import os
import subprocess
import sys

DIVERGENT = ("\u0085", "\ufeff")


def run(cmd, stdin_path):
    with open(stdin_path, "rb") as f:
        p = subprocess.run(cmd, stdin=f, capture_output=True)
    if p.returncode != 0:
        sys.exit(f"FAILED: {' '.join(cmd)} exited {p.returncode}: {p.stderr.decode(errors='replace')}")
    return p.stdout.decode(), p.stderr.decode()


def first_diff(a, b):
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return min(len(a), len(b))


def main():
    epserve, corpus, tok_dir, work = sys.argv[1:5]
    os.makedirs(work, exist_ok=True)
    here = os.path.dirname(os.path.abspath(__file__))
    texts = [json.loads(line) for line in open(corpus, encoding="utf-8") if line.strip()]
    ours_out, ours_err = run([epserve, "tokenize", "--tokenizer", tok_dir], corpus)
    ref_out, ref_err = run(["node", os.path.join(here, "reference_encode.mjs")], corpus)
    ours = [json.loads(l) for l in ours_out.split("\n") if l]
    ref = [json.loads(l) for l in ref_out.split("\n") if l]
    assert len(ours) == len(texts) == len(ref), (len(ours), len(texts), len(ref))
    print("epserve:", ours_err.strip())
    print("reference:", ref_err.strip())

    mismatches, divergent, divergent_differ = [], 0, 0
    for i, (t, a, b) in enumerate(zip(texts, ours, ref)):
        if any(c in t for c in DIVERGENT):
            divergent += 1
            divergent_differ += a != b
            continue
        if a != b:
            mismatches.append(i)
    for i in mismatches[:5]:
        k = first_diff(ours[i], ref[i])
        print(f"MISMATCH corpus line {i + 1}: {json.dumps(texts[i][:300], ensure_ascii=False)}")
        print(f"  first difference at id index {k}")
        print(f"  epserve:   ...{ours[i][max(0, k - 3):k + 8]}")
        print(f"  reference: ...{ref[i][max(0, k - 3):k + 8]}")

    ids_path = os.path.join(work, "ids.jsonl")
    with open(ids_path, "w") as f:
        f.write(ours_out)
    dec_out, dec_err = run([epserve, "tokenize", "--tokenizer", tok_dir, "--decode"], ids_path)
    decoded = [json.loads(l) for l in dec_out.split("\n") if l]
    print("decode:", dec_err.strip())
    bad_rt = [i for i, (t, d) in enumerate(zip(texts, decoded)) if t != d]
    for i in bad_rt[:5]:
        print(f"ROUND TRIP corpus line {i + 1}: {json.dumps(texts[i][:200])} -> {json.dumps(decoded[i][:200])}")

    print(f"{len(texts)} items: {len(texts) - divergent - len(mismatches)} equal to the reference, "
          f"{len(mismatches)} mismatches; {divergent} items with U+0085/U+FEFF checked by round trip only "
          f"({divergent_differ} of them tokenized differently by transformers.js); "
          f"{len(texts) - len(bad_rt)}/{len(texts)} exact round trips")
    if mismatches or bad_rt or len(decoded) != len(texts):
        sys.exit(1)


if __name__ == "__main__":
    main()
