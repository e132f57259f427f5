#!/usr/bin/env bash
# Validates deploy/k8s offline, and exits non-zero on any error or warning:
#
#   1. every manifest, with PyPI's kubernetes-validate (the Kubernetes OpenAPI schemas it
#      ships; --strict, so an unknown or misspelt field fails), for each version in
#      $K8S_VERSIONS (default "1.31.0 1.37.0");
#   2. kustomization.yaml: every file it names exists (keys/ aside: keys.sh makes those);
#   3. when kubectl is here, what `kubectl kustomize` renders (generated Secrets and
#      ConfigMap included, from throwaway keys), the same way;
#   4. configmap.yaml's murnode.toml, loaded by a real murnode (--murnode PATH, default
#      target/debug/murnode; skipped, saying so, when there is none) that must print its
#      ready line: an unknown key or a bad value fails here, not in the cluster.
#
#   bash deploy/k8s/validate.sh [--murnode PATH]
#
# Installs kubernetes-validate with pip when it is missing; needs no network after that.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
versions="${K8S_VERSIONS:-1.31.0 1.37.0}"
murnode="$root/target/debug/murnode"
while [ $# -gt 0 ]; do
  case "$1" in
    --murnode) murnode="${2:?--murnode needs a path}"; shift 2 ;;
    -h|--help) sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "validate.sh: unknown option $1" >&2; exit 2 ;;
  esac
done

if ! command -v kubernetes-validate >/dev/null; then
  echo "validate.sh: installing kubernetes-validate" >&2
  python3 -m pip install --quiet kubernetes-validate==1.37.0 || python3 -m pip install --quiet kubernetes-validate
fi

tmp="$(mktemp -d "${TMPDIR:-/tmp}/murmur-k8s.XXXXXX")"
node_pid=""
cleanup() {
  if [ -n "$node_pid" ]; then kill "$node_pid" 2>/dev/null || true; wait "$node_pid" 2>/dev/null || true; fi
  rm -rf "$tmp"
}
trap cleanup EXIT
failed=0

# kubernetes-validate exits 0 on a WARN (a kind it has no schema for was not checked at
# all), so any line but INFO counts as a failure.
check() {
  local version="$1"; shift
  local out status=0
  out="$(kubernetes-validate --strict -k "$version" "$@" 2>&1)" || status=$?
  printf '%s\n' "$out" | sed "s#$tmp/#<rendered>/#; s#$root/##; s/^/  /"
  if [ "$status" != 0 ] || printf '%s\n' "$out" | grep -qv '^INFO '; then failed=1; fi
}

manifests=()
for file in "$here"/*.yaml; do
  [ "$(basename "$file")" = kustomization.yaml ] || manifests+=("$file")
done

for version in $versions; do
  echo "== kubernetes-validate --strict -k $version (manifests)"
  check "$version" "${manifests[@]}"
done

echo "== kustomization.yaml names only files that exist"
missing="$(cd "$here" && python3 - <<'PY'
import os, yaml
k = yaml.safe_load(open("kustomization.yaml"))
named = list(k.get("resources", []))
for gen in k.get("secretGenerator", []) + k.get("configMapGenerator", []):
    named += [f.split("=", 1)[-1] for f in gen.get("files", []) + gen.get("envs", [])]
for path in named:
    if not path.startswith("keys/") and not os.path.exists(path):
        print(path)
PY
)"
if [ -n "$missing" ]; then echo "  missing: $missing"; failed=1; else echo "  ok"; fi

if command -v kubectl >/dev/null && kubectl kustomize --help >/dev/null 2>&1; then
  # A copy with throwaway keys, so the real keys/ (if any) are neither needed nor read.
  mkdir -p "$tmp/k8s/keys"
  cp "$here"/*.yaml "$tmp/k8s/"
  for i in 0 1 2; do
    head -c 32 /dev/urandom > "$tmp/k8s/keys/murnode-$i.key"
    echo "SEED_$i=12D3KooWThrowawayKey$i" >> "$tmp/k8s/keys/seeds.env"
  done
  echo "throwaway-token-0123456789abcdef" > "$tmp/k8s/keys/client.token"
  kubectl kustomize "$tmp/k8s" > "$tmp/rendered.yaml"
  for version in $versions; do
    echo "== kubernetes-validate --strict -k $version (kubectl kustomize output)"
    check "$version" "$tmp/rendered.yaml"
  done
else
  echo "== kubectl kustomize: skipped (no kubectl here)"
fi

echo "== murnode.toml of configmap.yaml, loaded by murnode"
if [ -x "$murnode" ]; then
  data="$tmp/data"
  mkdir -p "$data"
  echo "throwaway-token-0123456789abcdef" > "$tmp/client.token"
  # The token file is where the Secret is mounted in the pod; here, a throwaway one.
  python3 - "$here/configmap.yaml" "$tmp/client.token" > "$data/murnode.toml" <<'PY'
import sys, yaml
toml = yaml.safe_load(open(sys.argv[1]))["data"]["murnode.toml"]
print(toml.replace("/etc/murmur/tokens/client.token", sys.argv[2]), end="")
PY
  # init reads the config too (it reports the posture it sets up).
  if "$murnode" init --data-dir "$data" > /dev/null 2> "$tmp/stderr"; then
    # Loopback and free ports only: the check loads the config, it joins nothing.
    "$murnode" run --data-dir "$data" --api 127.0.0.1:0 --listen /ip4/127.0.0.1/tcp/0 --no-mdns \
      --json > "$tmp/ready" 2> "$tmp/stderr" &
    node_pid=$!
    for _ in $(seq 150); do
      if [ -s "$tmp/ready" ] || ! kill -0 "$node_pid" 2>/dev/null; then break; fi
      sleep 0.2
    done
  fi
  if grep -qs '"event":"ready"' "$tmp/ready"; then
    echo "  ok: murnode started with it"
  else
    echo "  murnode refused it:"; sed 's/^/    /' "$tmp/stderr"; failed=1
  fi
else
  echo "  skipped: no murnode at $murnode (build it, or pass --murnode PATH)"
fi

if [ "$failed" != 0 ]; then
  echo "validate.sh: FAILED" >&2
  exit 1
fi
echo "validate.sh: every check passed"
