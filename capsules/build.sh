#!/usr/bin/env bash
# Builds every guest component for wasm32-wasip2. Output:
#   capsules/target/wasm32-wasip2/release/<crate>.wasm   (crate names with `_` for `-`)
set -euo pipefail
cd "$(dirname "$0")"
if command -v rustup >/dev/null 2>&1; then
  rustup target add wasm32-wasip2 >/dev/null
fi
# Always capsules/target, even when CARGO_TARGET_DIR points elsewhere: tests and manifests
# find the components there.
# Not linted: .ci/run's clippy wrapper is for the host workspace, not the guests.
env -u RUSTC_WORKSPACE_WRAPPER -u CLIPPY_ARGS \
  cargo build --release --target wasm32-wasip2 --target-dir "$PWD/target"
ls -1 target/wasm32-wasip2/release/*.wasm
