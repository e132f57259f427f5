#!/usr/bin/env bash
# Checks deploy/systemd/murnode.service with `systemd-analyze verify`, and fails on any
# warning or error it prints about the unit.
#
#   bash deploy/systemd/verify.sh [--murnode PATH] [--unit FILE]
#
# verify insists that ExecStart's binary exists, so the unit is checked from a copy in a
# temporary directory whose /usr/local/bin/murnode is replaced by PATH (default
# target/debug/murnode). --unit checks another copy of the unit instead. Installs
# Debian's systemd package when systemd-analyze is missing. Also prints `systemd-analyze
# security` for the unit (informational: the score is not checked).
set -euo pipefail

root="$(cd "$(dirname "$0")/../.." && pwd)"
unit="$root/deploy/systemd/murnode.service"
murnode="$root/target/debug/murnode"
while [ $# -gt 0 ]; do
  case "$1" in
    --murnode) murnode="${2:?--murnode needs a path}"; shift 2 ;;
    --unit) unit="${2:?--unit needs a file}"; shift 2 ;;
    -h|--help) sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "verify.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
if [ -x "$murnode" ]; then murnode="$(cd "$(dirname "$murnode")" && pwd)/$(basename "$murnode")"; fi
if [ ! -x "$murnode" ] || [ "${murnode#/}" = "$murnode" ]; then
  echo "verify.sh: $murnode is not an executable (build it, or pass --murnode PATH)" >&2
  exit 2
fi
if ! command -v systemd-analyze >/dev/null; then
  echo "verify.sh: installing systemd (for systemd-analyze)" >&2
  apt-get install -y -q systemd >/dev/null || { apt-get update -q >/dev/null && apt-get install -y -q systemd >/dev/null; }
fi

tmp="$(mktemp -d "${TMPDIR:-/tmp}/murnode-unit.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
sed "s#/usr/local/bin/murnode#$murnode#g" "$unit" > "$tmp/murnode.service"
if grep -q /usr/local/bin/murnode "$tmp/murnode.service"; then
  echo "verify.sh: ExecStart was not rewritten" >&2
  exit 1
fi

echo "== systemd-analyze verify murnode.service (murnode: $murnode)"
status=0
out="$(cd "$tmp" && systemd-analyze verify --man=no ./murnode.service 2>&1)" || status=$?
# Lines about other units of this machine (verify loads the dependencies) are not ours.
ours="$(printf '%s\n' "$out" | grep -E 'murnode' || true)"
printf '%s\n' "$out" | sed '/^$/d; s/^/  /'
if [ "$status" != 0 ] || [ -n "$ours" ]; then
  echo "verify.sh: FAILED (exit $status${ours:+; the lines above that name murnode.service})" >&2
  exit 1
fi
echo "verify.sh: murnode.service verifies (no warning, no error)"

echo "== systemd-analyze security murnode.service (informational)"
(cd "$tmp" && systemd-analyze security --offline=yes ./murnode.service 2>&1 | tail -n 1) || true
