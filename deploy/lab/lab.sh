#!/usr/bin/env bash
# A network lab on this machine: N murnode nodes, each in its own network namespace
# (murlab-1 … murlab-N, 10.78.0.11 …), on one Linux bridge (murlabbr), each link with
# latency and loss, finding each other by mDNS (or by bootstrap). Runs until Ctrl-C or
# SIGTERM, then removes everything it made, even when stopped by a signal.
#
#   sudo bash deploy/lab/lab.sh [--nodes 3] [--delay 20ms] [--loss 1%]
#
# Options:
#   --nodes N           nodes to start, 1..50 (default 3)
#   --delay D           added to every packet a node sends (tc netem), e.g. 20ms; 0 for none.
#                       Two nodes see a round trip of twice D.
#   --loss P            packets lost on the way into each node, e.g. 1%; 0% for none
#   --bin-dir DIR       where murnode and mur are (default target/debug)
#   --discovery WAY     mdns (default) or bootstrap (mDNS off; every node dials node 1)
#   --allow-forward     when the host's firewall drops bridged traffic (iptables FORWARD
#                       policy DROP, as Docker sets it), let the lab bridge's traffic
#                       through (ACCEPT rules, removed on exit)
#   --check             exit once every node is connected to all the others (0), or
#                       when that takes longer than 60 s (1)
#   --cleanup           remove what a lab that was killed (SIGKILL) left, then exit
#
# Needs root, iproute2 (ip, tc), and the binaries. Nothing leaves the machine: the bridge
# has no address in the host's namespace and no uplink.
set -euo pipefail

root="$(cd "$(dirname "$0")/../.." && pwd)"
nodes=3
delay=20ms
loss=1%
bin_dir="$root/target/debug"
discovery=mdns
allow_forward=0
check=0
cleanup_only=0

# Fixed names, so --cleanup finds a killed lab's leftovers; one lab at a time.
prefix=murlab
bridge=murlabbr
subnet=10.78.0
work="${TMPDIR:-/tmp}/murlab"
nodes_max=50
converge_secs=60

usage() { sed -n '2,27p' "$0" | sed 's/^# \{0,1\}//'; }
while [ $# -gt 0 ]; do
  case "$1" in
    --nodes) nodes="${2:?--nodes needs a number}"; shift 2 ;;
    --delay) delay="${2:?--delay needs a time, e.g. 20ms}"; shift 2 ;;
    --loss) loss="${2:?--loss needs a percentage, e.g. 1%}"; shift 2 ;;
    --bin-dir) bin_dir="${2:?--bin-dir needs a directory}"; shift 2 ;;
    --discovery) discovery="${2:?--discovery needs mdns or bootstrap}"; shift 2 ;;
    --allow-forward) allow_forward=1; shift ;;
    --check) check=1; shift ;;
    --cleanup) cleanup_only=1; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "lab.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done

say() { printf 'lab: %s\n' "$*"; }
die() { printf 'lab: %s\n' "$*" >&2; exit 2; }

# Everything a lab makes, whether this run made it or a killed one did: the namespaces
# and the processes in them, the bridge (its veths go with the namespaces), the firewall
# rules tagged "murlab", the work directory.
cleanup() {
  # Best effort, every step: one that fails must not leave the rest undone.
  set +e
  local ns pids
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^$prefix-[0-9]+$" || true); do
    pids="$(ip netns pids "$ns" 2>/dev/null || true)"
    if [ -n "$pids" ]; then
      # shellcheck disable=SC2086
      kill -TERM $pids 2>/dev/null || true
      for _ in $(seq 50); do
        [ -z "$(ip netns pids "$ns" 2>/dev/null)" ] && break
        sleep 0.1
      done
      pids="$(ip netns pids "$ns" 2>/dev/null || true)"
      # shellcheck disable=SC2086
      [ -z "$pids" ] || kill -KILL $pids 2>/dev/null || true
    fi
    ip netns del "$ns" 2>/dev/null || true
  done
  ip link del "$bridge" 2>/dev/null || true
  local ipt rule
  for ipt in iptables iptables-legacy; do
    command -v "$ipt" >/dev/null || continue
    "$ipt" -S FORWARD 2>/dev/null | grep -- '--comment murlab' | sed 's/^-A /-D /' | while read -r rule; do
      # shellcheck disable=SC2086
      "$ipt" $rule 2>/dev/null
    done
  done
  rm -rf "$work"
  return 0
}

[ "$(id -u)" = 0 ] || die "needs root (network namespaces, a bridge, tc)"
command -v ip >/dev/null || die "needs ip (Debian: iproute2)"

if [ "$cleanup_only" = 1 ]; then
  cleanup
  say "removed the lab's namespaces, bridge, processes, firewall rules and $work"
  exit 0
fi

case "$nodes" in ''|*[!0-9]*) die "--nodes must be a number" ;; esac
if [ "$nodes" -lt 1 ] || [ "$nodes" -gt "$nodes_max" ]; then die "--nodes must be 1..$nodes_max"; fi
case "$discovery" in mdns|bootstrap) ;; *) die "--discovery is mdns or bootstrap" ;; esac
for bin in murnode mur; do
  [ -x "$bin_dir/$bin" ] || die "no executable $bin_dir/$bin (cargo build, or --bin-dir DIR)"
done
bin_dir="$(cd "$bin_dir" && pwd)"
if ip link show "$bridge" >/dev/null 2>&1 || ip netns list | grep -qE "^$prefix-[0-9]+( |$)"; then
  die "a lab is running, or one was killed and left $bridge/$prefix-*: stop it, or run lab.sh --cleanup"
fi

# The trap that makes it happen on every exit: normal, error, Ctrl-C, SIGTERM.
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# Bridged traffic passes the host's iptables FORWARD chain when br_netfilter's
# bridge-nf-call-iptables is 1. Docker's daemon sets that chain's policy to DROP, which
# cuts the namespaces off one another without a word: find out now, and say so.
forward_drops=""
if [ "$(cat /proc/sys/net/bridge/bridge-nf-call-iptables 2>/dev/null || echo 0)" = 1 ]; then
  for ipt in iptables iptables-legacy; do
    command -v "$ipt" >/dev/null || continue
    if "$ipt" -S FORWARD 2>/dev/null | grep -q '^-P FORWARD DROP'; then forward_drops="$forward_drops $ipt"; fi
  done
fi
if [ -n "$forward_drops" ]; then
  if [ "$allow_forward" = 0 ]; then
    echo "lab: the host's firewall drops the lab's traffic:${forward_drops} FORWARD policy is DROP" >&2
    echo "lab: (Docker's daemon sets it) and net.bridge.bridge-nf-call-iptables = 1, so packets" >&2
    echo "lab: between the namespaces never arrive. Rerun with --allow-forward (ACCEPT rules for" >&2
    echo "lab: $bridge only, removed on exit), or restore the policy: iptables -P FORWARD ACCEPT" >&2
    exit 1
  fi
  for ipt in $forward_drops; do
    "$ipt" -I FORWARD -i "$bridge" -o "$bridge" -m comment --comment murlab -j ACCEPT
  done
  say "FORWARD policy is DROP (${forward_drops# }): inserted ACCEPT for $bridge (removed on exit)"
fi

mkdir -p "$work"
chmod 0700 "$work"
# A client token for reaching a node's API from another namespace (same-namespace
# clients come over loopback and need none).
od -An -N16 -tx1 /dev/urandom | tr -d ' \n' > "$work/token"
token="$(cat "$work/token")"

ns_of() { echo "$prefix-$1"; }
ip_of() { echo "$subnet.$((10 + $1))"; }

ip link add "$bridge" type bridge mcast_snooping 0
ip link set "$bridge" up

# Latency and loss: tc netem on each namespace's eth0 where the kernel has it. Without
# netem, loss alone through iptables' statistic match on the way in (where iptables is),
# and no delay: said once, plainly.
shaping=none
netem_args=""
if [ "$delay" != 0 ] && [ "$delay" != 0ms ]; then netem_args="$netem_args delay $delay"; fi
if [ "${loss%\%}" != 0 ]; then netem_args="$netem_args loss $loss"; fi
shape() {
  local ns="$1" args="$netem_args"
  if [ -z "$args" ]; then shaping=off; return 0; fi
  if [ "$shaping" = none ] || [ "$shaping" = netem ]; then
    # shellcheck disable=SC2086
    if err="$(ip netns exec "$ns" tc qdisc add dev eth0 root netem $args 2>&1)"; then
      shaping=netem
      return 0
    fi
    if [ "$shaping" = netem ]; then die "tc netem failed on $ns: $err"; fi
    say "tc netem is not available in this kernel ($err): no added delay"
    shaping=fallback
  fi
  if [ "${loss%\%}" != 0 ]; then
    local probability
    probability="$(awk -v p="${loss%\%}" 'BEGIN { printf "%.4f", p / 100 }')"
    if ip netns exec "$ns" iptables -A INPUT -i eth0 -m statistic --mode random \
        --probability "$probability" -j DROP 2>/dev/null; then
      if [ "$ns" = "$(ns_of 1)" ]; then say "loss $loss: iptables statistic match on the way into each node"; fi
    elif [ "$ns" = "$(ns_of 1)" ]; then
      say "no iptables statistic match either: no loss"
    fi
  fi
  return 0
}

for i in $(seq 1 "$nodes"); do
  ns="$(ns_of "$i")"
  ip netns add "$ns"
  ip link add "${prefix}${i}v" type veth peer name "${prefix}${i}w"
  ip link set "${prefix}${i}w" netns "$ns"
  ip link set "${prefix}${i}v" master "$bridge" up
  ip -n "$ns" link set "${prefix}${i}w" name eth0
  ip -n "$ns" addr add "$(ip_of "$i")/24" dev eth0
  ip -n "$ns" link set eth0 up
  ip -n "$ns" link set lo up
  # mDNS sends to 224.0.0.251: on the lab's link, not the default route (there is none).
  ip -n "$ns" route add 224.0.0.0/4 dev eth0
  shape "$ns"
done
case "$shaping" in
  netem) say "links: tc netem$netem_args on each node's eth0 (a round trip crosses two)" ;;
  off) say "links: no added delay or loss" ;;
esac

# The nodes: API on every address of the namespace (port 7420), libp2p on 7421 TCP and
# QUIC, the token above for clients from other namespaces.
first_peer=""
for i in $(seq 1 "$nodes"); do
  ns="$(ns_of "$i")"
  dir="$work/$ns"
  "$bin_dir/murnode" init --data-dir "$dir" > /dev/null 2>&1
  printf '[api]\ntokens = ["%s"]\n' "$token" > "$dir/murnode.toml"
  flags=(--api 0.0.0.0:7420)
  if [ "$discovery" = bootstrap ]; then
    flags+=(--no-mdns)
    [ -z "$first_peer" ] || flags+=(--bootstrap "/ip4/$(ip_of 1)/tcp/7421/p2p/$first_peer")
  fi
  ip netns exec "$ns" "$bin_dir/murnode" run --data-dir "$dir" --json "${flags[@]}" \
    > "$dir/ready.json" 2> "$dir/murnode.log" &
  echo $! > "$dir/pid"
  # Bounded wait for the ready line (the API and every listener are up).
  for _ in $(seq 300); do
    [ -s "$dir/ready.json" ] && break
    kill -0 "$(cat "$dir/pid")" 2>/dev/null || die "node $i exited: $(tail -n 3 "$dir/murnode.log")"
    sleep 0.1
  done
  [ -s "$dir/ready.json" ] || die "node $i printed no ready line within 30 s (see $dir/murnode.log)"
  peer="$(sed -n 's/.*"peer_id":"\([^"]*\)".*/\1/p' "$dir/ready.json")"
  if [ -z "$first_peer" ]; then first_peer="$peer"; fi
  echo "$peer" > "$dir/peer_id"
done

# Peers node i has an open connection to.
connected() {
  ip netns exec "$(ns_of "$1")" "$bin_dir/mur" peers --json 2>/dev/null \
    | grep -o '"connected":true' | wc -l || true
}

say "$nodes nodes up; waiting (at most ${converge_secs} s) until each is connected to the $((nodes - 1)) others"
start=$SECONDS
while :; do
  done_count=0
  for i in $(seq 1 "$nodes"); do
    if [ "$(connected "$i")" -ge $((nodes - 1)) ]; then done_count=$((done_count + 1)); fi
  done
  if [ "$done_count" = "$nodes" ]; then break; fi
  if [ $((SECONDS - start)) -ge "$converge_secs" ]; then
    say "after ${converge_secs} s only $done_count of $nodes nodes see every other node (logs: $work/$prefix-N/murnode.log)"
    if [ "$check" = 1 ]; then exit 1; fi
    break
  fi
  sleep 1
done
if [ "$done_count" = "$nodes" ]; then say "mesh formed in $((SECONDS - start)) s"; fi

printf '\n%-10s %-13s %-54s %s\n' NODE ADDRESS PEER_ID CONNECTED
for i in $(seq 1 "$nodes"); do
  printf '%-10s %-13s %-54s %s\n' "$(ns_of "$i")" "$(ip_of "$i")" "$(cat "$work/$(ns_of "$i")/peer_id")" "$(connected "$i")"
done
mur="$bin_dir/mur"
case "$mur" in "$root"/*) mur="${mur#"$root"/}" ;; esac
cat <<EOF

Reach a node's API from its own namespace (loopback: no token):
  ip netns exec $(ns_of 1) $mur peers
  ip netns exec $(ns_of 1) $mur directory --json
From another namespace, with the lab's token:
  MURMUR_TOKEN=$token ip netns exec $(ns_of 1) $mur peers --node http://$(ip_of "$nodes"):7420
Stop a node to watch the mesh heal, then look again:
  kill \$(cat $work/$(ns_of "$nodes")/pid)
Logs: $work/$prefix-N/murnode.log
EOF

if [ "$check" = 1 ]; then
  say "--check: every node sees every other node; cleaning up"
  exit 0
fi
say "running; Ctrl-C or SIGTERM stops it and removes everything"
gone=" "
while :; do
  # `wait` on a short sleep, so a signal is handled at once rather than after a sleep.
  sleep 1 & wait $! || true
  for i in $(seq 1 "$nodes"); do
    case "$gone" in *" $i "*) continue ;; esac
    if ! kill -0 "$(cat "$work/$(ns_of "$i")/pid")" 2>/dev/null; then
      say "$(ns_of "$i") stopped (log: $work/$(ns_of "$i")/murnode.log)"
      gone="$gone$i "
    fi
  done
done
