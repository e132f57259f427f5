#!/usr/bin/env bash
# Makes what docker-compose.yml reads, beside it (all git-ignored):
#
#   secrets/node0.key … node2.key   the nodes' keys (node0's peer id is node1's bootstrap)
#   secrets/publisher.key           signs artifacts node1 publishes (trust.publishers)
#   secrets/client.token            the API token of the client container
#   config/node0.toml … node2.toml  each node's murnode.toml
#   capsules/                       the example components and their manifests
#   .env                            SEED_0..SEED_2 (peer ids) for Compose
#
#   bash deploy/compose/prepare.sh [--mur PATH] [--components DIR]
#
# Existing keys and token are kept (the nodes keep their identities); configs, capsules
# and .env are rewritten. The containers run as uid 10001, which must read the secrets: run
# this as root (it gives them to 10001), or chown them yourself. Needs `mur` (--mur PATH;
# default: mur on PATH, else target/release/mur or target/debug/mur) and the example
# components (--components DIR; default capsules/target/wasm32-wasip2/release, built by
# `bash capsules/build.sh`).
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
mur=""
components="$root/capsules/target/wasm32-wasip2/release"
while [ $# -gt 0 ]; do
  case "$1" in
    --mur) mur="${2:?--mur needs a path}"; shift 2 ;;
    --components) components="${2:?--components needs a directory}"; shift 2 ;;
    -h|--help) sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "prepare.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done
if [ -z "$mur" ]; then
  for candidate in "$(command -v mur || true)" "${CARGO_TARGET_DIR:-$root/target}/release/mur" "${CARGO_TARGET_DIR:-$root/target}/debug/mur"; do
    if [ -n "$candidate" ] && [ -x "$candidate" ]; then mur="$candidate"; break; fi
  done
fi
[ -n "$mur" ] && [ -x "$mur" ] || { echo "prepare.sh: no mur binary (build it or pass --mur PATH)" >&2; exit 2; }
for component in echo ask wordcount; do
  [ -f "$components/$component.wasm" ] || {
    echo "prepare.sh: no $components/$component.wasm (run: bash capsules/build.sh, or pass --components DIR)" >&2
    exit 2
  }
done

umask 077
mkdir -p "$here/secrets" "$here/config"
key() {
  local file="$here/secrets/$1.key"
  if [ ! -e "$file" ]; then "$mur" key gen --out "$file" --json >/dev/null; fi
}
field() { "$mur" key show "$1" --json | sed -n "s/.*\"$2\":\"\\([^\"]*\\)\".*/\\1/p"; }
for name in node0 node1 node2 publisher; do key "$name"; done
if [ ! -e "$here/secrets/client.token" ]; then
  # 32 random bytes as 64 hex digits: within the 16..256 visible characters a token may be.
  od -An -N32 -tx1 /dev/urandom | tr -d ' \n' > "$here/secrets/client.token"
  echo >> "$here/secrets/client.token"
fi
publisher="$(field "$here/secrets/publisher.key" public_key)"
[ -n "$publisher" ] || { echo "prepare.sh: cannot read the publisher's public key" >&2; exit 1; }

: > "$here/.env.new"
for i in 0 1 2; do
  peer="$(field "$here/secrets/node$i.key" peer_id)"
  [ -n "$peer" ] || { echo "prepare.sh: cannot read the peer id of node$i.key" >&2; exit 1; }
  echo "SEED_$i=$peer" >> "$here/.env.new"
  echo "node$i  $peer"
done
mv "$here/.env.new" "$here/.env"

# The example capsules, read-only in every container at /etc/murmur/capsules.
umask 022
rm -rf "$here/capsules"
mkdir -p "$here/capsules"
for component in echo ask wordcount; do cp "$components/$component.wasm" "$here/capsules/"; done
manifest() { # name component [extra lines]
  printf 'name = "%s"\nversion = "0.1.0"\nkind = "tool"\nartifact = "/etc/murmur/capsules/%s.wasm"\n%s' "$1" "$2" "${3:-}" \
    > "$here/capsules/$1.toml"
}
manifest echo echo
manifest ask ask $'[lifecycle]\ninput_timeout_secs = 120\n'
manifest wordcount wordcount

# One config per node: the same settings, each running its own capsules.
config() { # node manifests…
  local node="$1"; shift
  local list=""
  for m in "$@"; do list="$list\"/etc/murmur/capsules/$m.toml\", "; done
  cat > "$here/config/$node.toml" <<CONFIG
# murnode.toml of $node in the Compose mesh (written by prepare.sh; edit that script).
[api]
# Every interface of the container: the client container and the health check reach it.
listen = "0.0.0.0:7420"
# mur inside the container (the health check, docker-compose exec) holds every scope.
loopback_open = true
# The client container's token (it installs artifacts: every scope).
tokens = [{ name = "client", token_file = "/run/secrets/client_token", scopes = ["admin"] }]
# The names clients reach the nodes by on the network.
hosts = ["node0", "node1", "node2"]

[network]
listen = ["/ip4/0.0.0.0/tcp/7421", "/ip4/0.0.0.0/udp/7421/quic-v1"]
# The bridge network carries multicast: node2 finds the others by mDNS alone.
mdns = true

[adverts]
# Changes show within seconds; a dead node is declared gone 5 to 7.5 s after its
# connections close, and its advert expires after 15 s at the latest.
refresh_secs = 5
ttl_secs = 15
suspect_secs = 5

[trust]
# Artifacts signed with secrets/publisher.key may be pulled by name.
publishers = ["$publisher"]

[runtime]
# A lab mesh: the clients of every node reach every capsule (the network is this
# project's own). Use "granted" with trust.authorities beyond a lab.
audience = "mesh"
manifests = [${list%, }]
CONFIG
}
config node0 echo ask
config node1 wordcount echo
config node2

if [ "$(id -u)" = 0 ]; then
  chown 10001:10001 "$here"/secrets/*
else
  echo "prepare.sh: not root: give secrets/* to uid 10001 (sudo chown 10001:10001 $here/secrets/*) so the containers can read them" >&2
fi
chmod 0644 "$here"/config/*.toml
echo "prepare.sh: wrote $here/{secrets,config,capsules,.env}; next: docker-compose -f $here/docker-compose.yml up -d"
