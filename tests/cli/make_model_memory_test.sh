#!/bin/bash
# `make-model` streams: each tensor is generated and written a chunk at a time, so its peak
# memory stays far below the shard it writes (the buffered writer held the whole shard and was
# killed writing v2-lite's single 31 GB file on a 24 GB host). Writes the bench preset in FP8 as
# ONE 2.6 GB shard, asserts peak RSS < a quarter of the shard, and that the bytes are the ones
# the buffered writer wrote (sha256 recorded from it; the values depend on seed and names only).
# Needs /usr/bin/time (Debian package `time`) and ~2.6 GB of disk under WORKDIR, removed after.
# Usage: make_model_memory_test.sh EPSERVE WORKDIR
set -euo pipefail
bin=$1 work=$2
rm -rf "$work" && mkdir -p "$work"
trap 'rm -rf "$work"' EXIT
[[ -x /usr/bin/time ]] || { echo "needs /usr/bin/time (apt-get install time)" >&2; exit 1; }

/usr/bin/time -v -o "$work/time.txt" \
  "$bin" make-model --preset bench --dtype fp8 --shards 1 --out "$work/model" > /dev/null
shard=$(stat -c %s "$work/model/model.safetensors")
peak_kb=$(sed -n 's/^[[:space:]]*Maximum resident set size (kbytes): //p' "$work/time.txt")
elapsed=$(sed -n 's/^[[:space:]]*Elapsed (wall clock) time (h:mm:ss or m:ss): //p' "$work/time.txt")
peak=$((peak_kb * 1024))
echo "shard ${shard} bytes, peak RSS ${peak} bytes ($((peak * 100 / shard))% of the shard), ${elapsed}"
if ((peak * 4 >= shard)); then
  echo "FAIL: peak RSS ${peak} is not below a quarter of the ${shard}-byte shard" >&2
  exit 1
fi

want=204225774225f2db08eb7b2dacfb6db80a0c36e0a9968698b96ce8496d393528
got=$(sha256sum "$work/model/model.safetensors" | cut -d' ' -f1)
if [[ $got != "$want" ]]; then
  echo "FAIL: model.safetensors sha256 $got, want $want (the buffered writer's bytes)" >&2
  exit 1
fi
echo "make-model streams: bytes identical"
