"""Writes the arrivals files of the engine tests (deterministic for a seed).

  make_arrivals.py mixed OUT.jsonl ALONE.jsonl [--n 50] [--seed 1] [--vocab 1024]
      OUT: N greedy requests of mixed prompt lengths (1..150) and output lengths (1..24),
      arriving at random steps 0..40; a third share a 64- or 128-token prefix with another
      request; some are cancelled a few steps after they arrive.
      ALONE: the same requests one at a time (each arrives after the previous one must have
      finished, no cancellations), so each runs alone in the engine.
  make_arrivals.py prefix OUT.jsonl
      two requests: a 150-token prompt, then (after it finished) a prompt extending it.
"""
import json
import random
import sys


def mixed(out_path, alone_path, n=50, seed=1, vocab=1024, budget=64):
    rng = random.Random(seed)
    prefixes = [[rng.randrange(2, vocab) for _ in range(128)] for _ in range(3)]
    reqs = []
    for i in range(n):
        if i % 3 == 0:
            p = prefixes[rng.randrange(3)][: rng.choice([64, 128])]
            prompt = p + [rng.randrange(2, vocab) for _ in range(rng.randrange(1, 30))]
        else:
            prompt = [rng.randrange(2, vocab) for _ in range(rng.choice([1, 2, 5, 17, 40, 63, 64, 65, 100, 150]))]
        r = {"step": rng.randrange(0, 41), "prompt_ids": prompt, "max_tokens": rng.randrange(1, 25),
             "ignore_eos": True}
        if i % 7 == 3:
            r["cancel_step"] = r["step"] + rng.randrange(1, 6)
        reqs.append(r)
    with open(out_path, "w") as f:
        for r in reqs:
            f.write(json.dumps(r) + "\n")
    step = 0
    with open(alone_path, "w") as f:
        for r in reqs:
            a = {k: v for k, v in r.items() if k != "cancel_step"}
            a["step"] = step
            step += -(-len(r["prompt_ids"]) // budget) + r["max_tokens"] + 1
            f.write(json.dumps(a) + "\n")


def prefix(out_path, vocab=1024):
    rng = random.Random(5)
    base = [rng.randrange(2, vocab) for _ in range(150)]
    ext = base + [rng.randrange(2, vocab) for _ in range(40)]
    with open(out_path, "w") as f:
        f.write(json.dumps({"step": 0, "prompt_ids": base, "max_tokens": 4, "ignore_eos": True}) + "\n")
        f.write(json.dumps({"step": 20, "prompt_ids": ext, "max_tokens": 8, "ignore_eos": True}) + "\n")


if __name__ == "__main__":
    if sys.argv[1] == "mixed":
        # Optional: --vocab V (token ids drawn from [2, V)).
        vocab = int(sys.argv[sys.argv.index("--vocab") + 1]) if "--vocab" in sys.argv else 1024
        mixed(sys.argv[2], sys.argv[3], vocab=vocab)
    elif sys.argv[1] == "prefix":
        prefix(sys.argv[2])
    else:
        sys.exit("usage: make_arrivals.py mixed OUT ALONE | prefix OUT")
