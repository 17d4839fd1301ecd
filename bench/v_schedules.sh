#!/usr/bin/env bash
# The V schedules (zb-v, v-half, v-min, dualpipev) and interleaved zero bubble against 1F1B and
# ZB-H1 (emulated compute, threads): 16 identical layers of 20 ms forward and 40 ms backward per
# minibatch of 64, 4 workers (1F1B and ZB-H1: 4 stages of 4 layers; the V and interleaved
# schedules: 8 chunks of 2), 8 microbatches, 12 steps, three runs each; beside the
# simulator's time for the same schedule and its modelled peak activations. Then the GPT-like
# profile (below). build/pipetrain and build/pipetrain-torch built; about two minutes, and five
# more as root (the testbed).
set -euo pipefail
cd "$(dirname "$0")/.."
dir=out/bench/v_schedules
rm -rf "$dir" && mkdir -p "$dir"
python3 - "$dir/uniform16.json" <<'PY'
import json, sys
layers = [{"name": f"l{i}", "forward_ms": 20, "backward_ms": 40, "activation_bytes": 4 << 20,
           "parameter_bytes": 1 << 20} for i in range(16)]
json.dump({"format": "pipetrain.profile/1", "model": "uniform16", "batch_size": 64, "device": "emulated",
           "layers": layers}, open(sys.argv[1], "w"))
PY
chunks() { case "$1" in interleaved*) echo "--chunks 2" ;; esac; }  # the interleaved kinds: 2 per worker
sim() {  # profile cluster-flags schedule microbatches -> "ms bubble peak_activation_MiB"
  # A failed simulation stops the script: inside read <<<"$(...)" its row read 0.0 0.000 0.0, and
  # the ratios beside it inf or 0.00x.
  local out
  # shellcheck disable=SC2086
  if ! out=$(build/pipetrain simulate --profile "$1" $2 --schedule "$3" $(chunks "$3") --microbatches "$4" 2>&1); then
    echo "v_schedules.sh: simulate of $3 on $1 failed: $out" >&2
    kill -TERM $$
    exit 1
  fi
  awk '/time per minibatch/{t=$4} /bubble fraction/{b=$3}
      /^ +[0-9]+ +[0-9.]+ +[0-9]+ +[0-9]+ +[0-9.]+ (GiB|MiB|KiB)/{v=$5; if($6=="GiB") v*=1024; if($6=="KiB") v/=1024; if(v>m) m=v}
      END{if (t == "") exit 1; printf "%.1f %.3f %.1f", t, b, m}' <<<"$out"
}
echo "== uniform 16 layers, 4 workers, 8 microbatches: emulated compute on threads (3 runs) vs simulated =="
printf "%-8s %10s %8s %12s %14s %14s %10s\n" schedule sim_ms bubble peak_act_MiB measured_ms spread vs_1f1b
base=""
for s in 1f1b zb-h1 zb-v v-half v-min dualpipev interleaved-zb; do
  read -r sms bubble peak <<<"$(sim "$dir/uniform16.json" "--workers 4 --bandwidth-gbps 1000" "$s" 8)"
  runs=()
  for r in 1 2 3; do
    # shellcheck disable=SC2046
    secs=$(build/pipetrain train --compute emulated --profile "$dir/uniform16.json" --stages 4 --schedule "$s" $(chunks "$s") \
             --microbatches 8 --steps 12 --quiet 2>&1 | sed -n 's/.*steps 12, \([0-9.]*\) s,.*/\1/p')
    runs+=("$(awk -v s="$secs" 'BEGIN{printf "%.1f", s * 1000 / 12}')")
  done
  med=$(printf "%s\n" "${runs[@]}" | sort -g | sed -n 2p)
  spread=$(printf "%s\n" "${runs[@]}" | sort -g | tr '\n' ' ' | awk '{printf "%.1f-%.1f", $1, $3}')
  [ -z "$base" ] && base=$med
  printf "%-8s %10s %8s %12s %14s %14s %10s\n" "$s" "$sms" "$bubble" "$peak" "$med" "$spread" \
    "$(awk -v b="$base" -v m="$med" 'BEGIN{printf "%.2fx", b / m}')"
done
# The GPT-like profile on 8 workers of a 100 Gbit/s network: simulated, and (as root) measured on
# the namespace testbed (scripts/testbed.sh: 8 gloo workers, links shaped to 100 Gbit/s x 0.01,
# emulated compute at the profile's times and 1% of its bytes), steady state of the workers'
# merged trace, 6 minibatches, median of 3 runs.
python3 - "$dir/cluster8.json" <<'PY'
import json, sys
json.dump({"format": "pipetrain.cluster/1", "levels": [{"fan_out": 8, "bandwidth_gbps": 100}]}, open(sys.argv[1], "w"))
PY
testbed=0; [[ $(id -u) -eq 0 ]] && testbed=1
echo "== gpt-2048 (data/profiles), 8 workers, 16 microbatches, 100 Gbit/s: simulated$([[ $testbed == 1 ]] && echo ", measured on the testbed (3 runs)") =="
printf "%-8s %10s %8s %12s %10s %12s %14s %8s\n" schedule sim_ms bubble peak_act_MiB vs_1f1b measured_ms spread error
base=""
for s in 1f1b zb-h1 zb-v v-half v-min dualpipev interleaved interleaved-zb; do
  read -r sms bubble peak <<<"$(sim data/profiles/gpt-2048.json "--cluster $dir/cluster8.json" "$s" 16)"
  [ -z "$base" ] && base=$sms
  med=n/a spread=n/a err=n/a
  if [[ $testbed == 1 ]]; then
    runs=()
    for r in 1 2 3; do
      rm -f "$dir/$s.trace.json"*
      scripts/testbed.sh --workers 8 --rate 1000mbit --out "$dir/$s-$r" -- --compute emulated --time-scale 1 \
        --byte-scale 0.01 --profile data/profiles/gpt-2048.json --stages 8 --schedule "$s" $(chunks "$s") --microbatches 16 --steps 6 \
        --quiet --cluster "$PWD/$dir/cluster8.json" --trace "$PWD/$dir/$s.trace.json" >"$dir/$s-$r.log" 2>&1 || {
        echo "$s: run $r failed (see $dir/$s-$r.log)"; continue; }
      runs+=("$(build/pipetrain trace "$dir/$s.trace.json" --merge 8 2>/dev/null | awk '/time per minibatch/{print $4}')")
    done
    if [[ ${#runs[@]} -gt 0 ]]; then
      med=$(printf "%s\n" "${runs[@]}" | sort -g | awk '{v[NR]=$1} END{printf "%.1f", v[int((NR+1)/2)]}')
      spread=$(printf "%s\n" "${runs[@]}" | sort -g | awk 'NR==1{a=$1} {b=$1} END{printf "%.1f-%.1f", a, b}')
      err=$(awk -v m="$med" -v s="$sms" 'BEGIN{printf "%+.1f%%", (m - s) / s * 100}')
    fi
  fi
  printf "%-8s %10s %8s %12s %10s %12s %14s %8s\n" "$s" "$sms" "$bubble" "$peak" \
    "$(awk -v b="$base" -v m="$sms" 'BEGIN{printf "%.2fx", b / m}')" "$med" "$spread" "$err"
done
