#!/usr/bin/env bash
# Makes what kustomization.yaml's generators read, in deploy/k8s/keys/ (git-ignored):
#
#   keys/murnode-0.key … murnode-2.key   the seeds' node keys (Secret murnode-keys)
#   keys/seeds.env                       SEED_0..SEED_2=<peer id> (ConfigMap murnode-seeds)
#   keys/client.token                    the API token of the client `client` (Secret murnode-tokens)
#
#   bash deploy/k8s/keys.sh [--mur PATH]
#
# Existing files are kept (run it again to rewrite seeds.env from the keys), so the
# seeds keep their identities. The keys are the nodes' identities: keep keys/ private.
# Needs `mur` (--mur PATH; default: mur on PATH, else target/release/mur or target/debug/mur).
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
out="$here/keys"
mur=""
while [ $# -gt 0 ]; do
  case "$1" in
    --mur) mur="${2:?--mur needs a path}"; shift 2 ;;
    -h|--help) sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "keys.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
if [ -z "$mur" ]; then
  for candidate in "$(command -v mur || true)" "$root/target/release/mur" "$root/target/debug/mur"; do
    if [ -n "$candidate" ] && [ -x "$candidate" ]; then mur="$candidate"; break; fi
  done
fi
if [ -z "$mur" ] || [ ! -x "$mur" ]; then echo "keys.sh: no mur binary (build it or pass --mur PATH)" >&2; exit 2; fi

umask 077
mkdir -p "$out"
peer_of() { "$mur" key show "$1" --json | sed -n 's/.*"peer_id":"\([^"]*\)".*/\1/p'; }
seeds="$out/seeds.env.new"
: > "$seeds"
for i in 0 1 2; do
  key="$out/murnode-$i.key"
  if [ -e "$key" ]; then
    state=kept
  else
    "$mur" key gen --out "$key" --json >/dev/null
    state=new
  fi
  peer="$(peer_of "$key")"
  [ -n "$peer" ] || { echo "keys.sh: cannot read the peer id of $key" >&2; exit 1; }
  echo "SEED_$i=$peer" >> "$seeds"
  echo "murnode-$i  $peer  ($state key)"
done
mv "$seeds" "$out/seeds.env"
if [ ! -e "$out/client.token" ]; then
  # 32 random bytes as 64 hex digits: within the 16..256 visible characters a token may be.
  od -An -N32 -tx1 /dev/urandom | tr -d ' \n' > "$out/client.token"
  echo >> "$out/client.token"
  echo "client.token  new"
else
  echo "client.token  kept"
fi
echo "keys.sh: wrote $out; next: kubectl apply -k $here"
