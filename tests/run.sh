#!/usr/bin/env bash
# Runs Murmur's whole test suite: the command the README gives and CI calls.
#
#   bash tests/run.sh
#
# Builds once (debug), then runs every test with cargo-nextest when it is installed
# (cargo test otherwise). Tests start real murnode processes on 127.0.0.1 only.
set -euo pipefail
cd "$(dirname "$0")/.."

# Each heading carries the seconds since the start, so a slow phase shows in any log.
started=$SECONDS
say() { printf '\n== %s  [%d s]\n' "$*" "$((SECONDS - started))"; }

# Guest components (wasm32-wasip2) that the runtime tests load: built from capsules/.
say "guest components (wasm32-wasip2)"
bash capsules/build.sh

# The end-to-end suites run the real binaries (murnode, mur, murmur-testpeer), which
# `cargo test` does not build for another package's tests: build them first.
say "build binaries"
cargo build --workspace --bins --locked

# The deployment files, checked offline: the systemd unit (systemd-analyze verify) and the
# Kubernetes manifests (their OpenAPI schemas, and their murnode.toml loaded by a real
# node). Each script installs its checker (Debian's systemd, PyPI's kubernetes-validate)
# when it is missing.
say "deployment files (systemd unit, Kubernetes manifests)"
bin_dir="${CARGO_TARGET_DIR:-target}/debug"
bash deploy/systemd/verify.sh --murnode "$bin_dir/murnode"
bash deploy/k8s/validate.sh --murnode "$bin_dir/murnode"

# Two suites need what not every machine has; each skips (and passes) without it, unless
# MURMUR_REQUIRE_DOCKER=1 / MURMUR_REQUIRE_BROWSER=1 (.ci/run sets both). Say which run.
if docker info >/dev/null 2>&1 && command -v docker-compose >/dev/null 2>&1; then
  say "a Docker engine answers: the Compose mesh test runs (tests/tests/compose.rs)"
else
  say "SKIPPING the Compose mesh test: no Docker engine answers \`docker info\` (or no docker-compose); .ci/run installs and starts one"
fi
if [ -x /usr/bin/chromedriver ] || [ -x /usr/lib/chromium/chromedriver ]; then
  say "chromedriver is here: the dashboard runs in headless Chromium (tests/tests/dashboard.rs)"
else
  say "SKIPPING the dashboard's browser tests: no chromedriver (apt-get install chromium chromium-driver)"
fi

if command -v cargo-nextest >/dev/null 2>&1; then
  say "build and test (cargo nextest)"
  cargo nextest run --workspace --locked --no-fail-fast
else
  say "build and test (cargo test; install cargo-nextest for a faster run)"
  cargo test --workspace --locked --no-fail-fast
fi

# The criterion benches must keep compiling (dev profile, like the tests; `cargo bench`
# runs them): criterion is already built as a dev-dependency, so this is their own code.
say "bench targets compile"
cargo build --workspace --benches --locked

# The simulator, in release mode (it alone; it does not depend on libp2p or wasmtime):
# a bounded seed sweep of every main scenario (task and artifact traffic included), the
# steady-state scenario at 2,000 nodes, then the formation scenario at 1,000 nodes (`large`;
# its 2,000-node default takes 90 s here, four times as long: forming is N²), a cold start
# of 500 nodes within a minute (formation-10k), the same cold start of 5,000 nodes with
# hash placement instead of the gossip directory (`placement`, about 45 s and 0.3 GB here),
# and the 10,000-node steady state with churn (about 60 s and 1 GB here).
say "simulation sweeps (release)"
cargo build --release --locked -p murmur-sim
sim=target/release/murmur-sim
if [ -n "${CARGO_TARGET_DIR:-}" ]; then sim="$CARGO_TARGET_DIR/release/murmur-sim"; fi
for scenario in steady churn partition lossy-wan byzantine mass-restart task-storm unauthorized-sender \
  artifact-storm byzantine-provider closed-mesh split-heal sybil revocation models; do
  "$sim" sweep "$scenario" --seeds 1..5
done
"$sim" sweep steady-10k --nodes 2000 --seeds 1..3
# The four single runs are single-threaded: the smaller ones share the cores with the
# largest, their output printed once each has finished.
runs_dir=$(mktemp -d)
trap 'rm -rf "$runs_dir"' EXIT
"$sim" run large --seed 1 --nodes 1000 >"$runs_dir/large" 2>&1 &
large=$!
"$sim" run formation-10k --nodes 500 --seed 1 >"$runs_dir/formation" 2>&1 &
formation=$!
"$sim" placement formation-10k --nodes 5000 --seed 1 >"$runs_dir/placement" 2>&1 &
placement=$!
steady=0
"$sim" run steady-10k --seed 1 || steady=$?
large_rc=0; wait "$large" || large_rc=$?
formation_rc=0; wait "$formation" || formation_rc=$?
placement_rc=0; wait "$placement" || placement_rc=$?
cat "$runs_dir/large" "$runs_dir/formation" "$runs_dir/placement"
if [ "$steady" -ne 0 ] || [ "$large_rc" -ne 0 ] || [ "$formation_rc" -ne 0 ] || [ "$placement_rc" -ne 0 ]; then
  echo "simulation runs failed: steady-10k exit $steady, large exit $large_rc, formation-10k exit $formation_rc, placement exit $placement_rc"
  exit 1
fi

say "every test and simulation passed"
