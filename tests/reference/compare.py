"""Compares engine logits/tokens against the reference's.

  /usr/bin/python3 tests/reference/compare.py --engine-logits A.npy --ref-logits B.npy \
      --engine-tokens A.json --ref-tokens B.json [--tol 1e-3]

Relative error of a [sequence, step] row = max|a - b| / max|b|; the check fails (exit 1)
when the worst row exceeds --tol, when shapes differ, or when any token differs. Optional:
--median-tol (the median row), --clean-tol/--clean-frac (at least that fraction of the rows
within --clean-tol), --tie-tol (tokens may differ at near ties), --skip-rows.
"""
import argparse
import json
import sys

import numpy as np


def row_rel_errors(a, b):
    """a, b [S, N, V] -> [S, N] relative errors (max|a-b| / max|b| per row)."""
    a, b = a.astype(np.float64), b.astype(np.float64)
    num = np.abs(a - b).max(axis=-1)
    den = np.abs(b).max(axis=-1)
    with np.errstate(divide="ignore", invalid="ignore"):
        rel = np.where(den > 0, num / np.where(den > 0, den, 1), np.where(num > 0, np.inf, 0))
    return np.where(np.isnan(a).any(-1) | np.isnan(b).any(-1), np.inf, rel)


def _gap_note(ref_logits, s, i, x, y, tol):
    """How far apart the reference put the two tokens: tells a near tie from a bug."""
    if s >= ref_logits.shape[0] or i >= ref_logits.shape[1] or not (
            0 <= x < ref_logits.shape[2] and 0 <= y < ref_logits.shape[2]):
        return ""
    row = ref_logits[s, i].astype(np.float64)
    gap = (row[y] - row[x]) / max(np.abs(row).max(), 1e-300)
    tie = " (near tie, within tol: pick other prompts)" if gap <= tol else ""
    return f"; ref logits {row[y]:.6g} vs {row[x]:.6g}, gap/max|ref| {gap:.2e}{tie}"


def compare(engine_logits, ref_logits, engine_tokens, ref_tokens, tol, median_tol=None, tie_tol=None, skip=None,
            clean=None):
    """Returns (ok, list of message lines). With tie_tol, a sequence may leave the reference's
    tokens at a near tie (gap/max|ref| <= tie_tol); its rows from there on are not compared. With
    median_tol, the median row error must also be within it. With clean = (tol, frac), at least
    frac of the compared rows must be within that tol: for errors that are discrete jumps reaching
    some rows and not others (int8 rounding, run_reference_test.sh), where a median is not robust.
    Rows marked in `skip` (a boolean [sequences, steps] array) are left out of the worst-row bound
    and reported on their own."""
    msgs, ok = [], True
    compared = np.ones(engine_logits.shape[:2], dtype=bool)
    skipped = np.zeros_like(compared) if skip is None else skip.astype(bool)
    if engine_logits.shape != ref_logits.shape:
        return False, [f"FAIL shape: engine {engine_logits.shape} vs ref {ref_logits.shape}"]
    if len(engine_tokens) != len(ref_tokens):
        return False, [f"FAIL sequences: engine {len(engine_tokens)} vs ref {len(ref_tokens)}"]
    for s, (et, rt) in enumerate(zip(engine_tokens, ref_tokens)):
        if len(et) != len(rt):
            ok = False
            msgs.append(f"FAIL tokens: sequence {s} length engine {len(et)} vs ref {len(rt)}")
            continue
        for i, (x, y) in enumerate(zip(et, rt)):
            if x != y:
                row = ref_logits[s, i].astype(np.float64) if i < ref_logits.shape[1] else None
                if tie_tol is not None and row is not None and 0 <= x < row.size:
                    gap = (row[y] - row[x]) / max(np.abs(row).max(), 1e-300)
                    if gap <= tie_tol:
                        msgs.append(f"near tie: sequence {s} leaves the reference at step {i} "
                                    f"(gap/max|ref| {gap:.2e} <= {tie_tol:g}); later steps not compared")
                        compared[s, i + 1:] = False
                        break
                ok = False
                msgs.append(f"FAIL tokens: sequence {s} generated token {i + 1} (from step {i}): "
                            f"engine {x} vs ref {y}{_gap_note(ref_logits, s, i, x, y, tol)}")
                break
    if engine_logits.size == 0:
        msgs.append("max rel err 0 (empty)")
        return ok, msgs
    rel = np.where(compared, row_rel_errors(engine_logits, ref_logits), 0.0)
    if skipped.any():
        for s, i in zip(*np.nonzero(skipped & compared)):
            msgs.append(f"skipped row: sequence {s} step {i}, rel err {rel[s, i]:.3e} (routing differs there)")
    if median_tol is not None:
        median = float(np.median(rel[compared]))
        good = median <= median_tol
        ok = ok and good
        msgs.append(f"{'OK' if good else 'FAIL'} median row rel err {median:.3e} (tol {median_tol:g})")
    if clean is not None:
        clean_tol, frac = clean
        n, within = int(compared.sum()), int((rel[compared] <= clean_tol).sum())
        good = within >= frac * n
        ok = ok and good
        msgs.append(f"{'OK' if good else 'FAIL'} {within} of {n} rows within {clean_tol:g} "
                    f"(need {frac:.0%})")
    bounded = np.where(skipped, 0.0, rel)
    s, i = np.unravel_index(int(np.argmax(bounded)), bounded.shape)
    worst = float(bounded[s, i])
    verdict = "OK" if worst <= tol else "FAIL"
    ok = ok and worst <= tol
    msgs.append(f"{verdict} max rel err {worst:.3e} (tol {tol:g}) at sequence {s} step {i}; "
                f"shape {list(ref_logits.shape)}")
    return ok, msgs


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--engine-logits", required=True)
    ap.add_argument("--ref-logits", required=True)
    ap.add_argument("--engine-tokens", required=True)
    ap.add_argument("--ref-tokens", required=True)
    ap.add_argument("--tol", type=float, default=1e-3)
    ap.add_argument("--median-tol", type=float, default=None)
    ap.add_argument("--clean-tol", type=float, default=None,
                    help="at least --clean-frac of the rows must be within this")
    ap.add_argument("--clean-frac", type=float, default=0.5)
    ap.add_argument("--skip-rows", default=None, help=".npy boolean [sequences, steps]: rows left out of --tol")
    ap.add_argument("--tie-tol", type=float, default=None,
                    help="a token may differ where the reference's top-2 gap/max|logit| is within this")
    args = ap.parse_args(argv)
    a, b = np.load(args.engine_logits), np.load(args.ref_logits)
    with open(args.engine_tokens) as f:
        ta = json.load(f)["tokens"]
    with open(args.ref_tokens) as f:
        tb = json.load(f)["tokens"]
    skip = np.load(args.skip_rows) if args.skip_rows else None
    clean = None if args.clean_tol is None else (args.clean_tol, args.clean_frac)
    ok, msgs = compare(a, b, ta, tb, args.tol, args.median_tol, args.tie_tol, skip, clean)
    for m in msgs:
        print(m)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
