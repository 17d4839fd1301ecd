#!/usr/bin/env bash
# The V schedules against 1F1B and ZB-H1 (emulated compute, threads): 16 identical layers of
# 20 ms forward and 40 ms backward per minibatch of 64, 4 workers (1F1B and ZB-H1: 4 stages of 4
# layers; the V schedules: 8 chunks of 2), 8 microbatches, 12 steps, three runs each; beside the
# simulator's time for the same schedule and its modelled peak activations, and the GPT-like
# profile (data/profiles/gpt-2048) on 8 workers in the simulator alone (links of 1000 Gbit/s). build/pipetrain and
# build/pipetrain-torch built; about two minutes.
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
sim() {  # profile workers schedule microbatches -> "ms bubble peak_activation_MiB"
  build/pipetrain simulate --profile "$1" --workers "$2" --bandwidth-gbps 1000 --schedule "$3" --microbatches "$4" \
    2>/dev/null | awk '/time per minibatch/{t=$4} /bubble fraction/{b=$3}
      /^ +[0-9]+ +[0-9.]+ +[0-9]+ +[0-9]+ +[0-9.]+ (GiB|MiB|KiB)/{v=$5; if($6=="GiB") v*=1024; if($6=="KiB") v/=1024; if(v>m) m=v}
      END{printf "%.1f %.3f %.1f", t, b, m}'
}
echo "== uniform 16 layers, 4 workers, 8 microbatches: emulated compute on threads (3 runs) vs simulated =="
printf "%-8s %10s %8s %12s %14s %14s %10s\n" schedule sim_ms bubble peak_act_MiB measured_ms spread vs_1f1b
base=""
for s in 1f1b zb-h1 zb-v v-half v-min; do
  read -r sms bubble peak <<<"$(sim "$dir/uniform16.json" 4 "$s" 8)"
  runs=()
  for r in 1 2 3; do
    secs=$(build/pipetrain train --compute emulated --profile "$dir/uniform16.json" --stages 4 --schedule "$s" \
             --microbatches 8 --steps 12 --quiet 2>&1 | sed -n 's/.*steps 12, \([0-9.]*\) s,.*/\1/p')
    runs+=("$(awk -v s="$secs" 'BEGIN{printf "%.1f", s * 1000 / 12}')")
  done
  med=$(printf "%s\n" "${runs[@]}" | sort -g | sed -n 2p)
  spread=$(printf "%s\n" "${runs[@]}" | sort -g | tr '\n' ' ' | awk '{printf "%.1f-%.1f", $1, $3}')
  [ -z "$base" ] && base=$med
  printf "%-8s %10s %8s %12s %14s %14s %10s\n" "$s" "$sms" "$bubble" "$peak" "$med" "$spread" \
    "$(awk -v b="$base" -v m="$med" 'BEGIN{printf "%.2fx", b / m}')"
done
echo "== gpt-2048 (data/profiles), 8 workers, 16 microbatches, 1000 Gbit/s links: simulated =="
printf "%-8s %10s %8s %12s %10s\n" schedule sim_ms bubble peak_act_MiB vs_1f1b
base=""
for s in 1f1b zb-h1 zb-v v-half v-min; do
  read -r sms bubble peak <<<"$(sim data/profiles/gpt-2048.json 8 "$s" 16)"
  [ -z "$base" ] && base=$sms
  printf "%-8s %10s %8s %12s %10s\n" "$s" "$sms" "$bubble" "$peak" "$(awk -v b="$base" -v m="$sms" 'BEGIN{printf "%.2fx", b / m}')"
done
