"""Checks a continuous-batching run against the same requests run alone.

  compare_runs.py ARRIVALS.jsonl CONT.json ALONE.json
Each request's tokens must equal its alone run's; a cancelled request (cancel_step) must have
finished "cancelled" with a prefix of them; every other must finish as alone. Exit 1 on any
difference, printing the request, its finish and the first differing token.
"""
import json
import sys


def main(arrivals, cont_path, alone_path):
    reqs = [json.loads(l) for l in open(arrivals) if l.strip()]
    cont, alone = json.load(open(cont_path)), json.load(open(alone_path))
    bad, cancelled = 0, 0
    for i, r in enumerate(reqs):
        ct, at = cont["tokens"][i], alone["tokens"][i]
        cf, af = cont["finish"][i], alone["finish"][i]
        if "cancel_step" in r and cf == "cancelled":
            cancelled += 1
            ok = ct == at[: len(ct)]
        else:
            ok = ct == at and cf == af
        if not ok:
            bad += 1
            k = next((j for j, (x, y) in enumerate(zip(ct, at)) if x != y), min(len(ct), len(at)))
            print(f"request {i}: continuous {cf} {len(ct)} tokens vs alone {af} {len(at)}; first difference at token {k}")
    print(f"{len(reqs) - bad}/{len(reqs)} requests identical to their alone run ({cancelled} cancelled midway)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:4]))
