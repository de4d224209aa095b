#!/bin/sh
# The real-trace tests' driver (CTest): finds the shared DeepSeek-V2-Lite traces in
# $EPSERVE_TRACES_DIR (default: the folder given, ../shared/traces beside the checkout), and
# exits 77 (CTest: skipped) with the reason when they are not there.
# Usage: real_traces.sh DEFAULT_DIR unpack CMAKE UNPACK_SCRIPT DEST
#        real_traces.sh DEFAULT_DIR compare CHECK_BINARY DEST
set -eu
dir="${EPSERVE_TRACES_DIR:-$1}"
tgz="$dir/deepseek-v2-lite-chat_puffin_train.tgz"
if [ ! -f "$tgz" ]; then
  echo "SKIPPED: shared traces not found at $tgz (set EPSERVE_TRACES_DIR to the folder holding it; this clone has no ../shared/traces)"
  exit 77
fi
case "$2" in
  unpack) exec "$3" -DTGZ="$tgz" -DDEST="$5" -P "$4" ;;
  compare) exec "$3" v2lite "$4/training_data_eamc" ;;
  *) echo "real_traces.sh: unknown step $2" >&2; exit 2 ;;
esac
