#!/usr/bin/env bash
# An emulated cluster on one machine (docs/emulation.md, "Testbed"): one Linux network namespace
# per worker, links shaped with tc tbf, one `pipetrain train --transport gloo` worker per
# namespace (RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT set). Needs root and iproute2.
#
#   scripts/testbed.sh [options] -- ARGS...     (ARGS go to `pipetrain COMMAND --transport gloo`)
#     --workers N            namespaces = workers (default 2)
#     --rate R               one level: every worker's link (tc rate, e.g. 1gbit, 500mbit)
#     --servers G            two levels: G servers of N/G workers; --rate is then the link of each
#                            worker to its server's switch, and --uplink-rate the link of each
#                            server to the network (shared by its workers, both directions)
#     --uplink-rate R        two levels only (default: --rate / 10)
#     --uplink shared|per-worker
#                            two levels: shared (default) = one uplink per server, shared by its
#                            workers, as GPUs share a NIC; per-worker = every worker sends to
#                            other servers at --uplink-rate on its own (tc prio + tbf by
#                            destination), the model of the planner and the simulator
#     --shape both|send      both (default): a worker's links are shaped each way, like a
#                            full-duplex NIC; send: only what it sends (receivers take any number
#                            of flows at once, as the simulator's per-pair links do)
#     --out DIR              per-worker logs go to DIR/worker<r>.log (default out/testbed)
#     --bin PATH             pipetrain binary (default build/pipetrain)
#     --timeout S            stop the workers after S seconds (default 600)
#     --command C            train (default) or calibrate: measure the links the workers see
#                            (e.g. -- --workers 2,2 -o out/testbed/cluster.json)
#     --delay D              every packet a worker sends waits D (e.g. 2ms, 500us) before its
#                            link's rate: tc netem, or where the kernel has none (this one) an
#                            NFQUEUE rule and testbed_delay beside --bin (built where
#                            libnetfilter-queue is); exits 77 where neither is there
#     --memory-limit SIZE    each worker process in a memory cgroup of SIZE bytes (K, M, G
#                            suffixes; v1 memory.limit_in_bytes, v2 memory.max): a device of that
#                            size. A worker the kernel kills for it is named with its limit and
#                            peak, and the others are stopped
#   Example: scripts/testbed.sh --workers 4 --rate 1gbit -- --compute emulated \
#              --profile data/profiles/vgg16.json --stages 4 --schedule 1f1b --steps 10
#
# Topology. One level: a bridge; each worker's veth is shaped on both ends (tbf at --rate), so
# every worker sends at most --rate and receives at most --rate, like a full-duplex NIC. Two levels: a bridge per server and a core bridge; a
# worker's veth is shaped at --rate as above; each server's bridge joins the core bridge through
# a veth pair shaped on both ends at --uplink-rate, so the workers of a server share one uplink
# in each direction, as GPUs share a server's NIC. Everything is in one IPv4 subnet
# (10.66.0.0/16, worker r at 10.66.<r/250>.<r%250+1>); the bridges have no address, so the host's
# own networking is untouched. Links add no latency but --delay's.
#
# Every name starts with pt<pid of this script>, and everything is removed on exit (also on
# failure, Ctrl-C or SIGTERM). Leftovers of a run whose script died (SIGKILL) are removed at the
# next start: names pt<pid>... whose pid no longer runs.
set -euo pipefail

workers=2 rate=1gbit servers=0 uplink_rate="" uplink=shared shape_dirs=both out=out/testbed bin=build/pipetrain timeout_s=600
command=train delay="" memory_limit=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --workers) workers=$2; shift 2 ;;
    --rate) rate=$2; shift 2 ;;
    --servers) servers=$2; shift 2 ;;
    --uplink-rate) uplink_rate=$2; shift 2 ;;
    --uplink) uplink=$2; shift 2 ;;
    --shape) shape_dirs=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --bin) bin=$2; shift 2 ;;
    --timeout) timeout_s=$2; shift 2 ;;
    --command) command=$2; shift 2 ;;
    --delay) delay=$2; shift 2 ;;
    --) shift; break ;;
    --memory-limit) memory_limit=$2; shift 2 ;;
    -h|--help) sed -n '2,35p' "$0"; exit 0 ;;
    *) echo "testbed: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
done
train_args=("$@")

die() { echo "testbed: $*" >&2; exit 2; }
[[ $(id -u) -eq 0 ]] || die "needs root (network namespaces and tc)"
command -v ip >/dev/null && command -v tc >/dev/null || die "needs iproute2 (ip, tc)"
[[ -x $bin ]] || die "no pipetrain binary at '$bin' (--bin)"
[[ $workers -ge 1 && $workers -le 64 ]] || die "--workers: must be in 1..64, got $workers"
[[ $command == train || $command == calibrate ]] || die "--command: train or calibrate, got '$command'"
[[ $shape_dirs == both || $shape_dirs == send ]] || die "--shape: both or send, got '$shape_dirs'"
[[ $uplink == shared || $uplink == per-worker ]] || die "--uplink: shared or per-worker, got '$uplink'"
delay_us=""
if [[ -n $delay ]]; then
  delay_us=$(awk -v d="$delay" 'BEGIN { n = d + 0; u = d; sub(/^[0-9.]+/, "", u)
      if (u == "ms") n *= 1000; else if (u == "s") n *= 1e6; else if (u != "us" || d !~ /^[0-9]/) n = -1; print n }')
  awk -v n="$delay_us" 'BEGIN { exit !(n > 0) }' || die "--delay: a time such as 2ms, 500us or 1s, got '$delay'"
fi
delayer="$(dirname "$bin")/testbed_delay" delay_by=""
if [[ $servers -gt 0 ]]; then
  (( workers % servers == 0 )) || die "--servers: $servers does not divide --workers $workers"
  [[ -n $uplink_rate ]] || uplink_rate=$(awk -v r="$rate" 'BEGIN {
      n = r + 0; u = r; sub(/^[0-9.]+/, "", u); printf "%g%s", n / 10, u }')
fi

prefix="pt$$"
pids=() delayers=()

# Removes every namespace and link named pt<pid>... whose pid is $1, or (no argument) whose
# script no longer runs.
remove_by_prefix() {
  local only=${1:-} name pid
  for name in $(ip netns list 2>/dev/null | awk '{print $1}' | grep -E '^pt[0-9]+[a-z]' || true); do
    pid=$(sed -E 's/^pt([0-9]+).*/\1/' <<<"$name")
    if [[ -n $only ]]; then [[ $pid == "$only" ]] || continue; elif kill -0 "$pid" 2>/dev/null; then continue; fi
    ip netns delete "$name" 2>/dev/null || true
  done
  for name in $(ip -o link show 2>/dev/null | awk -F': ' '{print $2}' | sed 's/@.*//' | grep -E '^pt[0-9]+[a-z]' || true); do
    pid=$(sed -E 's/^pt([0-9]+).*/\1/' <<<"$name")
    if [[ -n $only ]]; then [[ $pid == "$only" ]] || continue; elif kill -0 "$pid" 2>/dev/null; then continue; fi
    ip link delete "$name" 2>/dev/null || true
  done
}

# --memory-limit: a memory cgroup per worker, v1 where the memory controller is mounted apart,
# else v2's unified tree.
if [[ -d /sys/fs/cgroup/memory ]]; then
  cgroot=/sys/fs/cgroup/memory limit_file=memory.limit_in_bytes peak_file=memory.max_usage_in_bytes
else
  cgroot=/sys/fs/cgroup limit_file=memory.max peak_file=memory.peak
fi
memcg() { echo "$cgroot/${prefix}w$1"; }
# "worker R exceeded its memory limit (L bytes; peak P bytes)" when the kernel killed it for it.
memory_verdict() {
  local g; g=$(memcg "$1")
  [[ -n $memory_limit && -d $g ]] || return 0
  local kills=0
  if [[ -f $g/memory.oom_control ]]; then kills=$(awk '/oom_kill /{print $2}' "$g/memory.oom_control")
  elif [[ -f $g/memory.events ]]; then kills=$(awk '/oom_kill /{print $2}' "$g/memory.events"); fi
  if (( ${kills:-0} > 0 )); then
    echo "testbed: worker $1 exceeded its memory limit and was killed by the kernel (limit $(cat "$g/$limit_file") bytes;" \
         "peak $(cat "$g/$peak_file" 2>/dev/null || echo '?') bytes)" >&2
  fi
}

teardown() {
  local code=$?
  trap - EXIT INT TERM
  for p in "${pids[@]}" "${delayers[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  sleep 0.2
  for p in "${pids[@]}" "${delayers[@]}"; do kill -KILL "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
  for (( r = 0; r < workers; r++ )); do [[ -d $(memcg "$r") ]] && rmdir "$(memcg "$r")" 2>/dev/null || true; done
  remove_by_prefix "$$"
  exit "$code"
}
trap teardown EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
mkdir -p "$out"

remove_by_prefix  # a previous run that died without its teardown

# tbf: the burst must stay small (~128 KB) for the rate to hold at <= 2 Gbit/s; the queue holds
# 20 ms of traffic (PT_TBF_LATENCY overrides it, to see what a deeper switch buffer changes).
# --delay: netem at the root of a worker's own end (a message pays it once, at its sender), the
# tbf under it; where tc has no netem, what the worker sends out of that end goes through
# NFQUEUE queue 0 of its namespace, where testbed_delay holds each packet (started per worker
# below), before the tbf.
shape() {  # shape [netns] DEV RATE
  local ns=() dev rate at=(root)
  if [[ $# -eq 3 ]]; then ns=(ip netns exec "$1"); shift; fi
  dev=$1 rate=$2
  if [[ -n $delay && ${#ns[@]} -gt 0 ]]; then
    if [[ $delay_by != nfqueue ]] && "${ns[@]}" tc qdisc replace dev "$dev" root handle 1: netem delay "$delay" 2>/dev/null; then
      delay_by=netem at=(parent 1:1 handle 10:)
    elif [[ -x $delayer ]] && command -v iptables >/dev/null &&
         "${ns[@]}" iptables -A OUTPUT -o "$dev" -j NFQUEUE --queue-num 0 --queue-bypass 2>/dev/null; then
      delay_by=nfqueue
    else
      echo "testbed: --delay $delay: this kernel's tc has no netem, and no $delayer with iptables' NFQUEUE to hold packets instead" >&2
      exit 77
    fi
  fi
  "${ns[@]}" tc qdisc replace dev "$dev" "${at[@]}" tbf rate "$rate" burst 128kb latency "${PT_TBF_LATENCY:-20ms}"
}

# Jumbo frames, as cluster networks use: every packet costs this machine's 2 cores kernel time
# that a real cluster's NICs and per-worker CPUs do not pay, and 1500-byte frames made data
# parallelism's all-reduces measurably slower than their links allow.
mtu=9000

# Worker r of server g (the g-th block of N/G workers) is 10.66.g.(index in server + 1).
per_server=$(( servers > 0 ? workers / servers : 250 ))
addr() { echo "10.66.$(( $1 / per_server )).$(( $1 % per_server + 1 ))"; }

core="${prefix}c"
ip link add "$core" type bridge
ip link set "$core" up
for (( g = 0; g < servers; g++ )); do
  br="${prefix}b$g"
  ip link add "$br" type bridge
  ip link set "$br" up
  [[ $uplink == shared ]] || continue
  ip link add "${prefix}u$g" mtu "$mtu" type veth peer name "${prefix}d$g" mtu "$mtu"  # u: on the server, d: on the core
  ip link set "${prefix}u$g" master "$br" up
  ip link set "${prefix}d$g" master "$core" up
  shape "${prefix}u$g" "$uplink_rate"   # server -> network
  shape "${prefix}d$g" "$uplink_rate"   # network -> server
done
for (( r = 0; r < workers; r++ )); do
  ns="${prefix}n$r" host="${prefix}h$r"
  ip netns add "$ns"
  ip link add "$host" mtu "$mtu" type veth peer name eth0 mtu "$mtu" netns "$ns"
  if [[ $servers -gt 0 ]]; then ip link set "$host" master "${prefix}b$(( r / per_server ))" up
  else ip link set "$host" master "$core" up; fi
  ip netns exec "$ns" ip link set lo up
  ip netns exec "$ns" ip link set eth0 up
  if [[ $servers -gt 0 && $uplink == per-worker ]]; then
    # Per-worker uplinks (tc here has tbf but no classful qdisc to shape by destination, so
    # routing does it): a second veth, eth1, joins the core bridge at --uplink-rate and holds
    # the worker's address; host routes send traffic for the workers of its own server over
    # eth0 (the server bridge), which their eth0 answers ARP for (Linux's weak host model).
    slow="${prefix}s$r"
    ip link add "$slow" mtu "$mtu" type veth peer name eth1 mtu "$mtu" netns "$ns"
    ip link set "$slow" master "$core" up
    ip netns exec "$ns" sysctl -qw net.ipv4.conf.all.rp_filter=0 net.ipv4.conf.default.rp_filter=0
    ip netns exec "$ns" ip addr add "$(addr "$r")/16" dev eth1
    ip netns exec "$ns" ip link set eth1 up
    for (( p = r / per_server * per_server; p < (r / per_server + 1) * per_server; p++ )); do
      (( p == r )) || ip netns exec "$ns" ip route add "$(addr "$p")/32" dev eth0
    done
    shape "$ns" eth1 "$uplink_rate"   # worker -> other servers
    [[ $shape_dirs == send ]] || shape "$slow" "$uplink_rate"   # other servers -> worker
  else
    ip netns exec "$ns" ip addr add "$(addr "$r")/16" dev eth0
  fi
  shape "$ns" eth0 "$rate"   # worker -> switch
  [[ $shape_dirs == send ]] || shape "$host" "$rate"   # switch -> worker: a NIC limits what it receives too
  if [[ $delay_by == nfqueue ]]; then
    ip netns exec "$ns" "$delayer" 0 "$delay_us" 2>"$out/delay$r.log" &
    delayers+=($!)
  fi
done

if [[ $delay_by == nfqueue ]]; then
  sleep 0.3  # the holders bind their queues (until then --queue-bypass lets packets through)
  for p in "${delayers[@]}"; do kill -0 "$p" 2>/dev/null || die "--delay: testbed_delay stopped (logs: $out/delay*.log)"; done
fi
if [[ $servers -gt 0 ]]; then
  echo "testbed: $workers workers in $servers servers, worker links $rate, server uplinks $uplink_rate $uplink (tc tbf, ${delay:-no} added latency${delay_by:+ by $delay_by}; names $prefix)"
else
  echo "testbed: $workers workers, links $rate (tc tbf, ${delay:-no} added latency${delay_by:+ by $delay_by}; names $prefix)"
fi
port=$(( 20000 + $$ % 20000 ))
# The job's secret, which the workers prove to each other at rendezvous (docs/runtime.md).
secret=$(od -An -N32 -tx1 /dev/urandom | tr -d ' \n')
enter=()
for (( r = 0; r < workers; r++ )); do
  if [[ -n $memory_limit ]]; then
    mkdir -p "$(memcg "$r")" || die "--memory-limit: cannot make the cgroup $(memcg "$r")"
    echo "$memory_limit" > "$(memcg "$r")/$limit_file" || die "--memory-limit: $memory_limit not taken by $(memcg "$r")/$limit_file"
    # The worker joins its cgroup before it execs (sh's own pid is the worker's), outside the
    # namespace: `ip netns exec` mounts a sysfs of its own, without the cgroup tree.
    enter=(sh -c 'echo $$ > "$0/cgroup.procs" && exec "$@"' "$(memcg "$r")")
  fi
  "${enter[@]}" ip netns exec "${prefix}n$r" env RANK=$r WORLD_SIZE=$workers MASTER_ADDR="$(addr 0)" MASTER_PORT=$port \
    PIPETRAIN_JOB_SECRET="$secret" \
    timeout "$timeout_s" "$bin" "$command" --transport gloo "${train_args[@]}" >"$out/worker$r.log" 2>&1 &
  pids+=($!)
done
[[ -n $memory_limit ]] && echo "testbed: each worker in a memory cgroup of $memory_limit ($cgroot)"

# Wait for all; the first failure stops the others (they would wait for it until their timeout).
status=0 running=$workers
declare -A done_
while (( running > 0 )); do
  for (( r = 0; r < workers; r++ )); do
    [[ -z ${done_[$r]:-} ]] && ! kill -0 "${pids[$r]}" 2>/dev/null || continue
    done_[$r]=1; running=$(( running - 1 ))
    if ! wait "${pids[$r]}"; then
      echo "testbed: worker $r failed (log: $out/worker$r.log):" >&2
      tail -5 "$out/worker$r.log" >&2
      memory_verdict "$r"
      if (( status == 0 )); then for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done; fi
      status=1
    fi
  done
  sleep 0.2
done
pids=()
if [[ -n $memory_limit ]]; then
  for (( r = 0; r < workers; r++ )); do
    echo "testbed: worker $r peak memory (its cgroup's account) $(cat "$(memcg "$r")/$peak_file" 2>/dev/null || echo '?') bytes of $(cat "$(memcg "$r")/$limit_file") allowed"
  done
fi
# The reporting worker prints the result lines (steps, throughput); show them.
grep -h -E '^\[emulated|^steps|^throughput|^level|^all-reduce|^wrote' "$out"/worker*.log || true
exit $status
