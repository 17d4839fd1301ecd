#!/usr/bin/env bash
# The testbed's smoke test (ctest testbed_smoke and testbed_latency, label integration): 2 network
# namespaces, a few emulated 1F1B steps over gloo, then no namespace or link of the run may be
# left; calibrate's rate on shaped links (part `smoke`) and its latency on delayed ones (part
# `latency`, which ctest runs alone: it reads milliseconds off a sleeping holder).
# Exit 77 (ctest: skipped) with the reason when not root or network namespaces do not work here.
#   testbed_smoke.sh PIPETRAIN [smoke|latency|all]
set -euo pipefail
bin=${1:?usage: testbed_smoke.sh PIPETRAIN [smoke|latency|all]}
part=${2:-all}
[[ $part == smoke || $part == latency || $part == all ]] || { echo "unknown part '$part': smoke, latency or all"; exit 2; }
here=$(cd "$(dirname "$0")" && pwd)
skip() { echo "SKIPPED: $*"; exit 77; }
[[ $(id -u) -eq 0 ]] || skip "the testbed needs root (network namespaces, tc)"
command -v ip >/dev/null && command -v tc >/dev/null || skip "iproute2 (ip, tc) is not installed"
probe="pt$$probe"
ip netns add "$probe" 2>/dev/null || skip "'ip netns add' does not work here"
ip netns delete "$probe"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# 4 layers at batch 8: 5 ms forward, 10 ms backward each; 256 KB activations, 1 MB weights.
{
  echo '{"format": "pipetrain.profile/1", "model": "smoke", "batch_size": 8, "device": "emulated", "layers": ['
  for i in 0 1 2 3; do
    echo "{\"name\": \"l$i\", \"forward_ms\": 5, \"backward_ms\": 10, \"activation_bytes\": 262144, \"parameter_bytes\": 1048576}$([[ $i -lt 3 ]] && echo ,)"
  done
  echo ']}'
} >"$tmp/profile.json"

if [[ $part != latency ]]; then
status=0
"$here/testbed.sh" --workers 2 --rate 500mbit --bin "$bin" --out "$tmp/out" --timeout 120 -- \
  --compute emulated --profile "$tmp/profile.json" --stages 2 --schedule 1f1b --microbatches 2 --steps 4 \
  --quiet >"$tmp/log" 2>&1 || status=$?
cat "$tmp/log"
if grep -q "is not built into this binary" "$tmp"/out/worker*.log 2>/dev/null; then
  skip "this pipetrain has no 'train --transport gloo' worker path yet"
fi
[[ $status -eq 0 ]] || { echo "FAILED: testbed exited $status"; tail -n 20 "$tmp"/out/worker*.log; exit 1; }
grep -q '^\[emulated.*\] steps 4' "$tmp/log" || { echo "FAILED: no emulated result line for 4 steps"; exit 1; }
prefix=$(sed -n 's/.*names \(pt[0-9]*\)).*/\1/p' "$tmp/log")
[[ -n $prefix ]] || { echo "FAILED: the testbed did not say its name prefix"; exit 1; }
if ip netns list | grep -q "^${prefix}[a-z]" || ip -o link show | grep -q ": ${prefix}[a-z]"; then
  echo "FAILED: namespaces or links named ${prefix}... were left behind"; exit 1
fi

# calibrate over the same kind of links (issue 33): the rate tc sets is what it measures, within
# 10% (tbf lets a burst of 128 KB through faster; the fit takes the rate from large messages).
"$here/testbed.sh" --workers 2 --rate 500mbit --bin "$bin" --out "$tmp/cal" --timeout 120 --command calibrate -- \
  --workers 2 --max-mb 4 -o "$tmp/cluster.json" >"$tmp/cal.log" 2>&1 || { cat "$tmp/cal.log"; echo "FAILED: calibrate"; exit 1; }
cat "$tmp/cal.log"
gbps=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['levels'][0]['bandwidth_gbps'])" "$tmp/cluster.json")
awk -v g="$gbps" 'BEGIN { exit !(g > 0.45 && g < 0.55) }' || { echo "FAILED: calibrate measured $gbps Gbit/s on 500mbit links"; exit 1; }
echo "calibrate measured $gbps Gbit/s on links shaped to 0.5"
# Workers meeting across addresses are hosts of their own: rates of worker 0's host running them
# all there are no core rates of theirs (a train prediction over them shared 2 cores among 2 hosts).
python3 -c "import json,sys; sys.exit('core_rates' in json.load(open(sys.argv[1])))" "$tmp/cluster.json" ||
  { echo "FAILED: calibrate across namespaces wrote core_rates"; exit 1; }

# Real compute on 3 namespaces, more than this machine's cores where it has 2: each worker is a
# host of its own, so train's prediction gives each a core (it shared this host's 2 among them).
"$bin" profile --data synthetic --batch-size 32 -o "$tmp/cnn.json" >/dev/null 2>&1 || { echo "FAILED: profile"; exit 1; }
"$here/testbed.sh" --workers 3 --rate 500mbit --bin "$bin" --out "$tmp/real" --timeout 120 -- \
  --data synthetic --batch-size 32 --profile "$tmp/cnn.json" --stages 3 --schedule 1f1b --steps 8 --quiet \
  >"$tmp/real.log" 2>&1 || { cat "$tmp/real.log"; echo "FAILED: real compute on 3 namespaces"; exit 1; }
grep -q "simulated [0-9]* samples/s for this run" "$tmp/real.log" || { cat "$tmp/real.log"; echo "FAILED: no prediction"; exit 1; }
if grep -q "sharing this machine's" "$tmp/real.log"; then
  cat "$tmp/real.log"; echo "FAILED: workers on 3 hosts were predicted sharing one host's cores"; exit 1
fi

# --memory-limit: each worker in a memory cgroup (a device of that size). Under 1 GiB the job
# runs and each worker's peak is said; under 40 MiB (less than LibTorch itself) the kernel kills
# the worker, and the testbed names it with its limit and peak and fails. No cgroup is left.
if [[ -d /sys/fs/cgroup/memory || -f /sys/fs/cgroup/cgroup.controllers ]]; then
  for limit in 1073741824 41943040; do
    status=0
    "$here/testbed.sh" --workers 2 --rate 500mbit --bin "$bin" --out "$tmp/mem$limit" --timeout 120 --memory-limit "$limit" -- \
      --compute emulated --profile "$tmp/profile.json" --stages 2 --schedule 1f1b --microbatches 2 --steps 2 \
      --quiet >"$tmp/mem.log" 2>&1 || status=$?
    cat "$tmp/mem.log"
    if [[ $limit == 1073741824 ]]; then
      [[ $status -eq 0 ]] || { echo "FAILED: the job under a 1 GiB limit per worker exited $status"; exit 1; }
      grep -q "worker 1 peak memory (its cgroup's account) [0-9]* bytes of $limit allowed" "$tmp/mem.log" ||
        { echo "FAILED: no peak for worker 1 under its limit"; exit 1; }
    else
      [[ $status -ne 0 ]] || { echo "FAILED: a job under 40 MiB per worker succeeded"; exit 1; }
      grep -q "exceeded its memory limit and was killed by the kernel (limit $limit bytes; peak" "$tmp/mem.log" ||
        { echo "FAILED: the worker killed for memory was not named with its limit and peak"; exit 1; }
    fi
    mem_prefix=$(sed -n 's/.*names \(pt[0-9]*\)).*/\1/p' "$tmp/mem.log")
    if ls -d /sys/fs/cgroup/memory/"${mem_prefix}"w* /sys/fs/cgroup/"${mem_prefix}"w* 2>/dev/null | grep -q .; then
      echo "FAILED: memory cgroups were left behind"; exit 1
    fi
  done
  echo "memory limits: a worker under its limit ran, one over it was named"
else
  echo "memory limits: no memory cgroup controller here, not tested"
fi
fi
[[ $part != smoke ]] || { echo "testbed smoke test passed (names $prefix... all removed)"; exit 0; }
# And a latency added to every packet (testbed.sh --delay: netem, or where the kernel has none, as
# here, NFQUEUE and testbed_delay): calibrate reads the links' own latency (measured first, on the
# same small messages) plus the 5 ms,
# within 10% of the 5 ms (issue 33; 5 ms rather than 2: on a busy machine the holder wakes 0.1-0.3
# ms late). Exit 77 from testbed.sh: neither is there; the fit's reading of a latency is then
# checked on threads alone (Calibration.RecoversALatencySetOnTheLinks). Against what the holder
# reports it held (5.25 ms on average here: it wakes late), and with messages of 1 and 4 KiB only:
# with 5 ms added, TCP's window makes a 64 KiB message take several round trips (16 ms one way),
# a "rate" of 0.05 Gbit/s that the fit subtracted from the small messages' times (4.6 ms read).
# This part runs alone (testbed_latency, RUN_SERIAL): in one CI run a loaded machine's wake-ups made the undelayed
# links read 1.7 ms a message.
# The links' own latency, read by the same small messages without the delay.
"$here/testbed.sh" --workers 2 --rate 500mbit --bin "$bin" --out "$tmp/calb" --timeout 120 --command calibrate -- \
  --workers 2 --max-mb 0.004 -o "$tmp/base.json" >"$tmp/calb.log" 2>&1 || { cat "$tmp/calb.log"; echo "FAILED: calibrate"; exit 1; }
base=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['levels'][0].get('latency_us', 0))" "$tmp/base.json")
rc=0
"$here/testbed.sh" --workers 2 --rate 500mbit --delay 5ms --bin "$bin" --out "$tmp/cald" --timeout 120 \
  --command calibrate -- --workers 2 --max-mb 0.004 -o "$tmp/delayed.json" >"$tmp/cald.log" 2>&1 || rc=$?
if [[ $rc -eq 77 ]]; then
  echo "no way to delay packets here (no netem, no testbed_delay): the latency check runs on threads (Calibration.RecoversALatencySetOnTheLinks)"
elif [[ $rc -ne 0 ]]; then
  cat "$tmp/cald.log"; echo "FAILED: calibrate with --delay 5ms"; exit 1
else
  grep -m1 "^testbed:" "$tmp/cald.log"
  us=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['levels'][0]['latency_us'])" "$tmp/delayed.json")
  # netem adds 5 ms exactly; testbed_delay says what it held (the mean of its logs).
  held=$(sed -n 's/.*held [0-9]* packets for \([0-9.]*\) us on average.*/\1/p' "$tmp"/cald/delay*.log 2>/dev/null |
         awk '{ s += $1; n++ } END { if (n) printf "%.1f", s / n; else print 5000 }')
  awk -v u="$us" -v b="$base" -v h="$held" 'BEGIN { d = u - b - h; exit !(d < 0.1 * h && -d < 0.1 * h) }' ||
    { cat "$tmp/cald.log" "$tmp"/cald/delay*.log 2>/dev/null; echo "FAILED: calibrate read $us us per message on links of $base us with $held held"; exit 1; }
  echo "calibrate measured $us us per message on links of $base us with $held us added (5 ms asked)"
fi
echo "testbed latency test passed"
