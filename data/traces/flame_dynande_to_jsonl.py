#!/usr/bin/env python3
"""Converts the FLAME-MoE-290M sample routing traces of github.com/Akash-N-Pai/DynaNDE-Simulator
("Sample routing traces/", commit f274466b9095e0b417f701a3ef3a14a6639b6aed) into the JSONL import
form of `epserve trace import` (docs/trace-format.md).

The samples are router outputs of FLAME-MoE-290M (64 routed experts, top-6, 2 shared experts
not recorded; checkpoint iteration 5473 of run 31066), cut from CMU-FLAME/FLAME-MoE-Traces:
one CSV per MoE layer, `layer_id,token_id,expert_0..expert_63`, the six chosen experts with
their gate probability and 0 elsewhere.
  - Encoder_Batch_0-32/Layer_L/*_encoder_32seqs_2048tokens.csv: 2048 rows, which are 4 sequences
    of 512 tokens (row 512 s + p is token p of sequence s: the decoder samples' rows match them).
  - Decoder_Batch_0-64/<n>th/Layer_L/*_firstTokens_64x512.csv: token n - 1 of each of 64
    sequences (sequences 0-3 are those of the encoder sample).
Only layers 2-9 exist in FLAME-MoE-290M (8 MoE layers); the folders Layer_10..Layer_26 hold
copies of layer 2 and are skipped (the script checks that layers 2-9 differ).
The trace gets sequences 0-3 whole and the first ten tokens of sequences 4-63, ordered so that
`--train-fraction 0.5` profiles on sequences 0, 1 and 4-33 and holds out 2, 3 and 34-63.
Usage: flame_dynande_to_jsonl.py SAMPLE_DIR --out flame.jsonl
"""
import argparse
import csv
import glob
import os
import sys

LAYERS = range(2, 10)
ORDINALS = ["1st", "2nd", "3rd"] + [f"{i}th" for i in range(4, 11)]


def read_csv(path):
    """Rows of (experts by falling probability, probabilities)."""
    out = []
    with open(path, newline="", encoding="utf-8") as f:
        r = csv.reader(f)
        header = next(r)
        if header[:2] != ["layer_id", "token_id"] or len(header) != 66:
            sys.exit(f"{path}: unexpected header")
        for row in r:
            probs = [float(v) for v in row[2:]]
            chosen = sorted((i for i, p in enumerate(probs) if p > 0), key=lambda i: -probs[i])
            if len(chosen) != 6:
                sys.exit(f"{path}: a row with {len(chosen)} experts")
            out.append((chosen, [probs[i] for i in chosen]))
    return out


def one(pattern):
    files = glob.glob(pattern)
    if len(files) != 1:
        sys.exit(f"expected one file for {pattern}, found {len(files)}")
    return files[0]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    enc = {L: read_csv(one(os.path.join(args.dir, "Encoder_Batch_0-32", f"Layer_{L}", "*_2048tokens.csv")))
           for L in LAYERS}
    dec = {L: [read_csv(one(os.path.join(args.dir, "Decoder_Batch_0-64", o, f"Layer_{L}",
                                         "*_firstTokens_64x512.csv"))) for o in ORDINALS]
           for L in LAYERS}
    for a in LAYERS:
        for b in LAYERS:
            if a < b and [x[0] for x in enc[a]] == [x[0] for x in enc[b]]:
                sys.exit(f"layers {a} and {b} are identical")
    for L in LAYERS:
        for n in range(10):
            for s in range(4):
                if dec[L][n][s][0] != enc[L][512 * s + n][0]:
                    sys.exit(f"layer {L}: decoder token {n} of sequence {s} differs from the encoder's")

    def token_rows(s, p):
        if s < 4:
            return [enc[L][512 * s + p] for L in LAYERS]
        return [dec[L][p][s] for L in LAYERS]

    order = [0, 1] + list(range(4, 34)) + [2, 3] + list(range(34, 64))
    token = 0
    with open(args.out, "w", encoding="utf-8") as out:
        for s in order:
            for p in range(512 if s < 4 else 10):
                for L, (experts, weights) in zip(LAYERS, token_rows(s, p)):
                    out.write('{"layer": %d, "token": %d, "experts": %s, "weights": %s, "sequence": %d}\n'
                              % (L, token, experts, [round(w, 6) for w in weights], s))
                token += 1
    print(f"{token} tokens, layers {list(LAYERS)}, {len(order)} sequences", file=sys.stderr)


if __name__ == "__main__":
    main()
