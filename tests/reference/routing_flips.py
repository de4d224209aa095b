"""Marks the logits rows downstream of a token that was routed differently in two engine runs.

  routing_flips.py A.trace B.trace OUT.npy --prompt-lens 1,7,33 --steps 16

Row [s, i] (the logits after step i of sequence s) comes from the token at position
p = prompt_len[s] - 1 + i, which attends to positions 0..p. It is marked when, in any MoE layer,
the set of experts the gate chose for any of those tokens differs between the two traces
(docs/trace-format.md). A near tie in a gate turns a tiny perturbation (e.g. a bf16 cache) into
a different expert: a discrete jump no tolerance on the perturbation can bound, which reaches
every later token of the sequence through its cache row.
"""
import argparse
import json

import numpy as np


def read_trace(path):
    data = open(path, "rb").read()
    first = data.index(b"\n")
    second = data.index(b"\n", first + 1)
    header = json.loads(data[first + 1:second])
    layers, k = len(header["layer_ids"]), header["model"]["top_k"]
    size = 8 + 2 * layers * k + (4 * layers * k if header["has_weights"] else 0)
    body = data[second + 1:]
    out = {}
    for r in range(len(body) // size):
        rec = body[r * size:(r + 1) * size]
        seq, pos = np.frombuffer(rec[:8], dtype=np.uint32)
        experts = np.frombuffer(rec[8:8 + 2 * layers * k], dtype=np.uint16).reshape(layers, k)
        out[(int(seq), int(pos))] = [frozenset(map(int, e)) for e in experts]
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("trace_a")
    ap.add_argument("trace_b")
    ap.add_argument("out")
    ap.add_argument("--prompt-lens", required=True)
    ap.add_argument("--steps", type=int, required=True)
    ap.add_argument("--max-share", type=float, default=0.5,
                    help="fail when more than this share of rows is downstream of a flip (too little left to test)")
    args = ap.parse_args()
    a, b = read_trace(args.trace_a), read_trace(args.trace_b)
    lens = [int(x) for x in args.prompt_lens.split(",")]
    mask = np.zeros((len(lens), args.steps), dtype=bool)
    flips = sorted(k for k in a if k in b and a[k] != b[k])
    for s, n in enumerate(lens):
        first = min((pos for seq, pos in flips if seq == s), default=None)
        if first is not None:
            mask[s, max(0, first - (n - 1)):] = True
    np.save(args.out, mask)
    print(f"routing differs at (sequence, position) {flips}: {int(mask.sum())} of {mask.size} rows downstream")
    if mask.sum() > args.max_share * mask.size:
        raise SystemExit(f"FAIL: more than {args.max_share:.0%} of the rows are downstream of a routing flip")


if __name__ == "__main__":
    main()
