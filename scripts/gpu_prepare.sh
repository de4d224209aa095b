#!/usr/bin/env bash
# Builds what scripts/gpu_check.sh runs and gathers it in build/gpu-carry/, the folder to carry
# to the GPU machine (it has the CUDA runtime but none of the project's Debian libraries and no
# registry, no node): the CUDA test binary and the epserve binary (CUDA runtime linked
# statically), the shared libraries they need beyond glibc and the compiler runtime, and node
# with the openai client for the serve part, in one bundle.tar.xz (about 45 MB; unpacked it is
# over the 64 MiB a device call can carry). docs/testing.md, "GPU".
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
[[ -x /usr/local/cuda/bin/nvcc ]] || { echo "gpu_prepare: no nvcc under /usr/local/cuda" >&2; exit 1; }
cmake -S . -B "$BUILD_DIR" -DEPSERVE_CUDA=ON >/dev/null
cmake --build "$BUILD_DIR" --target cuda_test epserve
CARRY=$BUILD_DIR/gpu-carry
STAGE=$(mktemp -d)
trap 'rm -rf "$STAGE"' EXIT
mkdir -p "$STAGE/bin" "$STAGE/lib"
cp "$BUILD_DIR/src/cuda/cuda_test" "$BUILD_DIR/tools/epserve" "$STAGE/bin/"
for bin in "$STAGE/bin/cuda_test" "$STAGE/bin/epserve"; do
  ldd "$bin" | awk '/=> \// {print $3}' | while read -r lib; do
    case $(basename "$lib") in
      libc.so* | libm.so* | libpthread.so* | libdl.so* | librt.so* | libstdc++.so* | libgcc_s.so*) ;;
      *) cp -L "$lib" "$STAGE/lib/" ;;
    esac
  done
done
# The serve part's client: node (NodeSource's build needs only glibc and libstdc++) and the
# pinned openai package, where this machine has them.
if command -v node >/dev/null && [[ -d tests/serve/node_modules/openai ]]; then
  cp "$(readlink -f "$(command -v node)")" "$STAGE/bin/node"
  cp -r tests/serve/node_modules "$STAGE/node_modules"
fi
rm -rf "$CARRY" && mkdir -p "$CARRY"
tar -C "$STAGE" -cf - . | xz -T"$(nproc)" -6 >"$CARRY/bundle.tar.xz"
du -sh "$CARRY/bundle.tar.xz"
echo "gpu_prepare: carry $CARRY (run: scripts/gpu_check.sh $CARRY)"
