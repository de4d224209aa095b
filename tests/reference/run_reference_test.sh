#!/usr/bin/env bash
# Engine vs independent PyTorch reference on one preset and dtype:
# a batch of 3 prompts (1, 7 and 33 tokens), 16 greedy steps; tokens identical and logits
# max relative error <= 1e-3 (compare.py). With KV_DTYPE bf16 (the engine's latent cache rows
# rounded to bfloat16): every row <= 1e-2 except rows whose token a MoE gate routed to other
# experts than the f32 cache did (a near tie in the gate; routing_flips.py, reported), median
# row <= 5e-3, and a sequence may leave the reference's greedy path only at a near tie (top-2
# gap <= 2e-2 of max|logit|), after which its rows are not compared (docs/serving-engine.md,
# "bf16 cache accuracy").
# With COMPUTE fast (the bfloat16 fast path, docs/kernels.md "Compute modes") the reference
# rounds the same operands to bfloat16 (reference.py --compute fast) and the tolerances are the
# bf16 cache's (row <= 1e-2, median row <= 5e-3, tokens identical but at near ties); see CMP.
# Where the CPU has no fast kernel the test reports itself skipped (77).
# With REQUANT int8 (--requant int8: the projections requantized to int8 per row and 128-column
# block, times int8 activations) the reference multiplies the same int8 values the same way
# (reference.py --requant int8): every row <= 4e-2, at least a quarter of the rows <= 1e-3 (as
# exact), tokens identical but at near ties; see CMP.
# Usage: run_reference_test.sh EPSERVE PRESET DTYPE WORKDIR [SHARDS] [KV_DTYPE] [COMPUTE] [REQUANT]
set -euo pipefail
EPSERVE=$1 PRESET=$2 DTYPE=$3 WORK=$4 SHARDS=${5:-1} KV_DTYPE=${6:-f32} COMPUTE=${7:-exact}
REQUANT=${8:-none}
CMP=(--tol 1e-3)
LOOSE=0
[[ $KV_DTYPE == bf16 ]] && LOOSE=1
((LOOSE)) && CMP=(--tol 1e-2 --median-tol 5e-3 --tie-tol 2e-2 --skip-rows "$WORK/flips.npy")
# The fast path against a reference that rounds the same operands (reference.py --compute
# fast): what is left is f32 against float64 summation, and the bf16 roundings it moves across
# a rounding boundary (one element by 2^-8 each), which a model of this size amplifies into
# row errors of a few 1e-3 (measured 2-6e-3 at the worst row).
# A 1-ulp f32 change of the embeddings alone moves the fast reference's own logits by 3.4e-3
# (tiny, bf16), so this is the floor of any comparison; over 16 steps the random tiny models
# amplify it into different tokens, so the fast path is compared over its first 4 steps.
STEPS=16
[[ $COMPUTE == fast ]] && CMP=(--tol 1e-2 --median-tol 5e-3 --tie-tol 2e-2) && STEPS=4
# int8 against a reference that requantizes the same weights and activations (reference.py
# --requant int8): the int8 values and scales are the engine's bit for bit and the integer sums
# exact, so what is left is the activations' float32 (engine) against float64 (reference)
# arithmetic. That changes an int8 value only where an activation lies within float32 noise of a
# rounding boundary (x / s = k + 1/2 to about 1e-5 of a step), but there it moves the element by a
# whole step s = max|block| / 127: up to 2^-7 of its block's max, where a bf16 rounding moves an
# element by at most 2^-8 of itself. The random tiny models amplify one such step into row errors
# of 1-2e-2, in the row it happens in and, through the latent cache, every later row of the
# sequence. Measured over 4 steps (tiny and tiny-v2, bf16 and fp8): each run has flips in one of
# its three sequences, whose rows are off by 0.7-2.1e-2 (2.8e-6 where attention barely reads the
# flipped row); every other row by <= 3e-7; rounding the flipped values the other way in the
# reference brings every row to <= 3e-7. Hence: every row <= 4e-2 (two flips' worth), and at least
# a quarter of the rows <= 1e-3 (exact mode's bound, for the rows no flip reached; a median is not
# robust here, as one flip in a prompt reaches all rows of its sequence). Emulated in the reference,
# a scale of max/128, truncation, one scale per row, float activations, or no requantization at
# all move every row by 1.8e-2 to 3.5e-1 (the 1e-3 bound catches each; 4e-2 alone would not).
# Tokens may differ only at a near tie (2e-2, as the row errors; measured: tiny-v2 bf16 leaves at
# a gap of 1.7e-3). Over 16 steps one flip grows into gate decisions 1e-1 apart (beyond
# --route-tie-tol), so int8 is compared over its first 4 steps, as fast is.
[[ $REQUANT == int8 ]] && CMP=(--tol 4e-2 --clean-tol 1e-3 --clean-frac 0.25 --tie-tol 2e-2) && STEPS=4
FOLLOW_ROUTES=0
[[ $COMPUTE == fast || $REQUANT == int8 ]] && FOLLOW_ROUTES=1
HERE=$(cd "$(dirname "$0")" && pwd)
rm -rf "$WORK" && mkdir -p "$WORK"
"$EPSERVE" make-model --preset "$PRESET" --dtype "$DTYPE" --seed 3 --shards "$SHARDS" --out "$WORK/model"
PROMPTS=(--prompt-ids 17 --prompt-ids 1,2,3,4,5,6,7 --prompt-ids "$(seq -s, 200 232)")
TRACE=()
[[ $LOOSE == 1 || $FOLLOW_ROUTES == 1 ]] && TRACE=(--trace-out "$WORK/engine.trace")
"$EPSERVE" generate --model "$WORK/model" "${PROMPTS[@]}" --max-tokens "$STEPS" --ignore-eos --kv-dtype "$KV_DTYPE" \
  --compute "$COMPUTE" --requant "$REQUANT" --logits-out "$WORK/engine.npy" --tokens-out "$WORK/engine.json" "${TRACE[@]}" |
  tee "$WORK/generate.out"
if grep -q "^compute: fast (no " "$WORK/generate.out"; then
  echo "SKIP: this CPU has no fast kernel (AMX or AVX512-BF16): --compute fast runs exact here"
  exit 77
fi
if ((LOOSE)); then
  "$EPSERVE" generate --model "$WORK/model" "${PROMPTS[@]}" --max-tokens "$STEPS" --ignore-eos \
    --trace-out "$WORK/f32.trace" >/dev/null
  /usr/bin/python3 "$HERE/routing_flips.py" "$WORK/f32.trace" "$WORK/engine.trace" "$WORK/flips.npy" \
    --prompt-lens 1,7,33 --steps "$STEPS"
fi
# With --compute fast or --requant int8 the reference routes every token as the engine did: bf16
# and int8 rounding make those paths discontinuous (a 1-ulp change of an input moves logits by
# ~3e-3 in bf16, docs/kernels.md; int8: above), enough to tip a gate's near tie, and one such
# flip moves every later logit of the sequence past any bound on rounding. The reference checks
# that each decision it overrides is a near tie, and follows a sequence only as far as it keeps
# the engine's tokens (it may leave them at a near tie, which compare.py bounds).
FOLLOW=()
((FOLLOW_ROUTES)) && FOLLOW=(--follow-routes "$WORK/engine.trace" --follow-tokens "$WORK/engine.json")
/usr/bin/python3 "$HERE/reference.py" --model "$WORK/model" "${PROMPTS[@]}" --max-tokens "$STEPS" \
  --compute "$COMPUTE" --requant "$REQUANT" --logits-out "$WORK/ref.npy" --tokens-out "$WORK/ref.json" "${FOLLOW[@]}"
/usr/bin/python3 "$HERE/compare.py" --engine-logits "$WORK/engine.npy" --ref-logits "$WORK/ref.npy" \
  --engine-tokens "$WORK/engine.json" --ref-tokens "$WORK/ref.json" "${CMP[@]}"
