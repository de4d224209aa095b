#!/usr/bin/env bash
# Builds what scripts/gpu_check.sh runs and gathers it in build/gpu-carry/ (the folder to carry
# to the GPU machine, which has the CUDA runtime but none of the project's Debian libraries):
# the CUDA test binary (CUDA runtime linked statically) and the shared libraries it needs that
# are not part of glibc/libstdc++. Run here, after scripts/setup.sh; docs/testing.md, "GPU".
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
[[ -x /usr/local/cuda/bin/nvcc ]] || { echo "gpu_prepare: no nvcc under /usr/local/cuda" >&2; exit 1; }
cmake -S . -B "$BUILD_DIR" -DEPSERVE_CUDA=ON >/dev/null
grep -q '^EPSERVE_HAVE_CUDA' "$BUILD_DIR/CMakeCache.txt" 2>/dev/null || true
cmake --build "$BUILD_DIR" --target cuda_test
CARRY=$BUILD_DIR/gpu-carry
rm -rf "$CARRY" && mkdir -p "$CARRY/lib"
cp "$BUILD_DIR/src/cuda/cuda_test" "$CARRY/"
# Every shared library outside glibc and the compiler runtime (the GPU machine has newer ones).
ldd "$CARRY/cuda_test" | awk '/=> \// {print $3}' | while read -r lib; do
  case $(basename "$lib") in
    libc.so* | libm.so* | libpthread.so* | libdl.so* | librt.so* | libstdc++.so* | libgcc_s.so*) ;;
    *) cp -L "$lib" "$CARRY/lib/" ;;
  esac
done
du -sh "$CARRY"
echo "gpu_prepare: carry $CARRY (run: scripts/gpu_check.sh $CARRY)"
