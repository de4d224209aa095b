#!/usr/bin/env python3
"""Converts the Qwen1.5-MoE-A2.7B-Chat routing logs of github.com/weiran0129/vLLM-MoE-Logger
(Logs/moe_layer{0,8,12,18,23}.jsonl, commit 2c3c87c10e045aea0c495044d9b4f94cf16675b2) into the
JSONL import form of `epserve trace import` (docs/trace-format.md).

Each input file is one run of the same vLLM job (25 GSM8K questions, greedy, 128 new tokens)
with one layer's router hooked: a meta line, then one row per token and forward pass with
`token_idx` counting from 0 in every forward pass and `topk_ids` / `topk_weights` in the gate's
order. The runs are deterministic, so row i of every file is the same token; the script checks
that the forward passes line up.

What the logs do not say, and how it is filled in (docs/trace-format.md, "Provenance"):
  - The first two forward passes (8192 and 256 rows, every row the same expert set) are vLLM's
    warm-up on dummy tokens; they are dropped.
  - Requests are not named (every row has req_id "r1"). The first real pass holds the prompt of
    question 1; the second holds question 1's first decode token, then the prompts of questions
    2-25, split in proportion to the questions' lengths in characters (--prompts). In the decode
    passes, the token at position i is attributed to question i + 1 (vLLM moves a later request
    into the slot of one that finished, so after the first finish some tokens go to the wrong
    question; only which rank a token starts on depends on it).
Usage: qwen_vllm_logger_to_jsonl.py --prompts GSM8K_test.txt --out qwen.jsonl moe_layer0.jsonl ...
"""
import argparse
import json
import re
import sys


def read_log(path):
    with open(path, encoding="utf-8") as f:
        lines = [json.loads(line) for line in f if line.strip()]
    meta = lines[0]
    if meta.get("type") != "meta" or len(meta.get("layers_logged", [])) != 1:
        sys.exit(f"{path}: first line is not a one-layer meta header")
    rows = [r for r in lines[1:] if r.get("type") == "route"]
    return meta["layers_logged"][0], meta["top_k"], rows


def passes(rows):
    """Splits rows into forward passes (token_idx restarts at 0)."""
    out = []
    for r in rows:
        if r["token_idx"] == 0:
            out.append([])
        out[-1].append(r)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--prompts", required=True, help="GSM8K_test.txt of the same repository")
    ap.add_argument("--out", required=True)
    ap.add_argument("logs", nargs="+")
    args = ap.parse_args()

    with open(args.prompts, encoding="utf-8") as f:
        prompts = f.read().split("\n\n---\n\n")
    chars = [len(p) for p in prompts]
    num_requests = len(prompts)

    layers = []
    for path in args.logs:
        layer, top_k, rows = read_log(path)
        layers.append((layer, top_k, passes(rows)))
    layers.sort()
    shape = [len(p) for p in layers[0][2]]
    for layer, _, ps in layers:
        if [len(p) for p in ps] != shape:
            sys.exit(f"layer {layer}: forward passes differ from layer {layers[0][0]}'s")
    # Warm-up: the leading passes whose rows all choose one expert set.
    warm = 0
    while warm < len(shape) and len({tuple(r["topk_ids"]) for r in layers[0][2][warm]}) == 1:
        warm += 1
    real = shape[warm:]
    if len(real) < 3:
        sys.exit("expected a prompt pass, a prefill pass and decode passes after the warm-up")
    # Sequence of every token of every real pass.
    seq = []
    first, second = real[0], real[1]
    seq.append([0] * first)  # question 1's prompt
    rest = second - 1  # question 1's first decode token leads the second pass
    weights = chars[1:]
    total = sum(weights)
    counts = [rest * w // total for w in weights]
    for i in range(rest - sum(counts)):
        counts[i % len(counts)] += 1
    s = [0]
    for q, c in enumerate(counts):
        s += [q + 1] * c
    seq.append(s)
    for n in real[2:]:
        if n > num_requests:
            sys.exit(f"a decode pass of {n} tokens, more than {num_requests} requests")
        seq.append(list(range(n)))

    token = 0
    with open(args.out, "w", encoding="utf-8") as out:
        for p in range(len(real)):
            for i in range(real[p]):
                for layer, top_k, ps in layers:
                    r = ps[warm + p][i]
                    ids = r["topk_ids"]
                    if len(ids) != top_k:
                        sys.exit(f"layer {layer}: a row with {len(ids)} experts, top_k {top_k}")
                    out.write(json.dumps({"layer": layer, "token": token, "experts": ids,
                                          "weights": r["topk_weights"],
                                          "sequence": seq[p][i]}) + "\n")
                token += 1
    print(f"{token} tokens ({sum(shape[:warm])} warm-up rows dropped), {len(layers)} layers "
          f"{[l for l, _, _ in layers]}, {num_requests} requests", file=sys.stderr)


if __name__ == "__main__":
    main()
