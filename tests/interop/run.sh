#!/usr/bin/env bash
# Runs the official A2A Python SDK against a local Murmur mesh (`murnode demo`).
# Needs python3 and PyPI (it installs a2a-sdk into a throwaway venv). Not part of CI.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
work="$(mktemp -d)"
trap 'kill "${demo:-0}" 2>/dev/null || true; rm -rf "$work"' EXIT
python3 -m venv "$work/venv"
"$work/venv/bin/pip" install -q "a2a-sdk>=1.3" httpx
cargo build -q --bin murnode
touch "$work/demo.log"
"$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys;print(json.load(sys.stdin)["target_directory"])')/debug/murnode" \
  demo --dir "$work/mesh" > "$work/demo.log" 2>&1 &
demo=$!
for _ in $(seq 1 120); do
  grep -q "Every step behaved as expected" "$work/demo.log" && break
  sleep 1
done
grep -q "Every step behaved as expected" "$work/demo.log" || { cat "$work/demo.log"; exit 1; }
api="$(grep -o 'node1 .*api http://[0-9.:]*' "$work/demo.log" | grep -o 'http://[0-9.:]*')"
"$work/venv/bin/python" "$here/a2a_sdk_check.py" "$api"
