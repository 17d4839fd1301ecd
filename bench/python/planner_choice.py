"""Does `plan` pick what runs fastest here? (issue 67) For mnist-cnn (batch 64) and the zoo's GPT
(batch 16) on 2 and 4 workers of this machine: calibrate the threads' cluster (which records that
the workers share this host's cores), profile the model, `plan --top 6 --save-top DIR`, then train
every candidate plan file as `train --plan` runs it (real LibTorch, threads), median of REPEATS runs.
Prints each candidate's simulated and measured samples/s and whether the chosen one (rank 1)
measures within 5% of the best measured.
    /usr/bin/python3 bench/python/planner_choice.py --pipetrain build/pipetrain [--repeats 3]
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

LINE = re.compile(r"steps \d+, [0-9.e+]+ s, (\d+) samples/s")
MODELS = (("mnist-cnn", 64, 300), ("gpt", 16, 60))  # model, batch, steps per run


def run(exe, args):
    r = subprocess.run([exe] + args, capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"pipetrain {' '.join(args)} failed ({r.returncode}):\n{r.stderr[-2000:]}")
    return r.stdout + r.stderr


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--pipetrain", required=True)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--top", type=int, default=6)
    a = p.parse_args()
    exe = os.path.abspath(a.pipetrain)
    rows, verdicts = [], []
    with tempfile.TemporaryDirectory() as work:
        for model, batch, steps in MODELS:
            prof = os.path.join(work, f"{model}.profile.json")
            run(exe, ["profile", "--model", model, "--batch-size", str(batch), "-o", prof])
            for workers in (2, 4):
                cluster = os.path.join(work, f"threads{workers}.cluster.json")
                if not os.path.exists(cluster):
                    run(exe, ["calibrate", "--workers", str(workers), "-o", cluster])
                top = os.path.join(work, f"{model}-{workers}")
                os.makedirs(top)
                run(exe, ["plan", "--profile", prof, "--cluster", cluster, "--top", str(a.top), "--save-top", top])
                measured = []
                for k in range(1, a.top + 1):
                    plan_file = os.path.join(top, f"top-{k}.plan.json")
                    if not os.path.exists(plan_file):
                        break
                    plan = json.load(open(plan_file))
                    # replicas per stage @ the first layer of each stage after the first
                    shape = "-".join(str(s["replicas"]) for s in plan["stages"])
                    if len(plan["stages"]) > 1:
                        shape += "@" + ",".join(str(s["layers"][0]) for s in plan["stages"][1:])
                    simulated = batch * 1000.0 / plan["predicted"]["simulated_ms_per_minibatch"]
                    rates = []
                    for _ in range(a.repeats):
                        out = run(exe, ["train", "--quiet", "--model", model, "--batch-size", str(batch), "--steps",
                                        str(steps), "--plan", plan_file])
                        m = LINE.search(out)
                        if not m:
                            raise SystemExit(f"train --plan {plan_file} printed no rate:\n{out[-2000:]}")
                        rates.append(float(m.group(1)))
                    measured.append(statistics.median(rates))
                    rows.append((f"{model} x{workers}", k, shape, plan.get("bucket_mb"), simulated, measured[-1]))
                    print(*rows[-1], flush=True, file=sys.stderr)
                best = max(measured)
                verdicts.append((f"{model} x{workers}", measured[0], best, measured.index(best) + 1))
    print(f"== plan's candidates measured: samples/s, train --plan on threads, medians of {a.repeats}, "
          f"{os.cpu_count()} cores ==")
    print(f"{'case':14} {'rank':>4} {'shape':10} {'bucket':>6} {'simulated':>9} {'measured':>9} {'meas/sim':>8}")
    for case, k, shape, bucket, simulated, measured in rows:
        print(f"{case:14} {k:4d} {shape:10} {'-' if bucket is None else f'{bucket:.0f}':>6} {simulated:9.0f} {measured:9.0f} {measured / simulated:8.3f}")
    for case, chosen, best, rank in verdicts:
        print(f"{case}: the chosen plan measures {chosen:.0f} samples/s, the best candidate (rank {rank}) "
              f"{best:.0f}: {100 * (chosen / best - 1):+.1f}% ({'within' if chosen >= 0.95 * best else 'NOT within'} 5%)")


if __name__ == "__main__":
    main()
