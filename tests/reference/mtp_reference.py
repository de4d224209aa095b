"""Checks the engine's MTP drafts against the PyTorch reference's MTP module.

  /usr/bin/python3 tests/reference/mtp_reference.py --model DIR --prompt-ids 1,2,3 [...] \
      --engine-tokens T.json --draft-logits D.npy [--tol 1e-3] [--requant none|int8]

T.json and D.npy are `epserve generate --mtp on --tokens-out T.json --draft-logits-out D.npy`:
each sequence's generated tokens and the positions of its drafts, and the MTP logits row of each
draft. The reference runs the main model over the prompt plus the generated tokens, then the MTP
module (reference.Model.mtp_logits) and takes the same positions. Fails (exit 1) when a row's
relative error max|a - b| / max|b| exceeds --tol, when no draft was made, or when the engine's
greedy draft (the row's argmax) differs from the reference's outside a near tie.
"""
import argparse
import json
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compare import row_rel_errors  # noqa: E402
from reference import Model  # noqa: E402


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--prompt-ids", action="append", required=True)
    ap.add_argument("--engine-tokens", required=True)
    ap.add_argument("--draft-logits", required=True)
    ap.add_argument("--tol", type=float, default=1e-3)
    ap.add_argument("--requant", choices=("none", "int8"), default="none",
                    help="int8: the engine's --requant int8 products (reference.quantize_i8)")
    args = ap.parse_args(argv)
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    model = Model(args.model, requant=args.requant)
    prompts = [[int(t) for t in p.split(",") if t.strip()] for p in args.prompt_ids]
    with open(args.engine_tokens) as f:
        j = json.load(f)
    engine = np.load(args.draft_logits)
    if len(j["tokens"]) != len(prompts) or len(j["draft_positions"]) != len(prompts):
        print(f"FAIL: {len(prompts)} prompts, engine output for {len(j['tokens'])}")
        return 1
    ref_rows = []
    for prompt, toks, positions in zip(prompts, j["tokens"], j["draft_positions"]):
        if not positions:
            continue
        mtp = model.mtp_logits(prompt + toks)
        if max(positions) >= mtp.shape[0]:
            print(f"FAIL: a draft at position {max(positions)} of a {len(prompt + toks)}-token "
                  "sequence")
            return 1
        ref_rows.append(mtp[positions].numpy())
    if not ref_rows:
        print("FAIL: the engine made no draft")
        return 1
    ref = np.concatenate(ref_rows)
    if engine.shape != ref.shape:
        print(f"FAIL shape: engine {engine.shape} vs reference {ref.shape}")
        return 1
    rel = row_rel_errors(engine[None], ref[None])[0]
    worst = int(rel.argmax())
    ok = rel[worst] <= args.tol
    mism = 0
    for i in range(ref.shape[0]):
        a, b = int(engine[i].argmax()), int(ref[i].argmax())
        if a != b:
            gap = (ref[i, b] - ref[i, a]) / np.abs(ref[i]).max()
            if gap > args.tol:
                mism += 1
                ok = False
                print(f"FAIL draft {i}: engine drafts {a}, reference {b} (gap/max {gap:.2e})")
    print(f"{'OK' if ok else 'FAIL'} {ref.shape[0]} drafts: max rel err {rel[worst]:.3e} "
          f"(tol {args.tol}) at draft {worst}; median {np.median(rel):.3e}; "
          f"{mism} greedy drafts differ")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
