"""Real compute against its simulation (issue 67): LibTorch training on this machine's cores (no
emulation), each row's samples/s measured (median of REPEATS runs) beside what `train` simulates
for that very run (--profile: the schedule it ran on this host's cores; --cluster: the hand-over
between threads or gloo processes as `calibrate` measured it first). Rows: mnist-cnn on
Fashion-MNIST under 1f1b, gpipe, pipedream and dp on 2 and 4 workers over threads and gloo; the
zoo's GPT on 2 stages; three exported families (a tied GPT, an LSTM, a CNN with BatchNorm) on 2
stages. Measured rates are train's own (evaluations excluded, pipeline fill included). Each run
is profiled just before it (--profile-once: each model once, before its first run), and a row's
ratio is the median of its runs' own ratios.
    /usr/bin/python3 bench/python/real_compute.py --pipetrain build/pipetrain [--repeats 3] [--steps 300] [--profile-once]
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..")
sys.path.insert(0, os.path.join(ROOT, "tests", "python"))
sys.path.insert(0, HERE)
from families_throughput import BATCH, FAMILIES  # noqa: E402

LINE = re.compile(r"throughput: measured (\d+) samples/s, simulated (\d+) samples/s")


def run(exe, args, env=None):
    r = subprocess.run([exe] + args, capture_output=True, text=True, env=env)
    if r.returncode != 0:
        raise SystemExit(f"pipetrain {' '.join(args)} failed ({r.returncode}):\n{r.stderr[-2000:]}")
    return r.stdout + r.stderr


def measure(exe, args, repeats, profile):
    """Each run's measured and simulated samples/s and their ratio, medians over the runs. `profile`
    (the profile command's arguments) runs again before each run unless PROFILE_ONCE: this
    machine's speed drifts by up to 8% over minutes, and a profile taken at the start of the bench
    predicts its later runs through that drift as well as through the simulator."""
    measured, simulated, ratios = [], [], []
    for i in range(repeats):
        if i == 0 or not PROFILE_ONCE:
            run(exe, profile[0], env=profile[1])
        m = LINE.search(run(exe, ["train", "--quiet"] + args))
        if not m:
            raise SystemExit(f"train {' '.join(args)} printed no simulated figure")
        measured.append(float(m.group(1)))
        simulated.append(float(m.group(2)))
        ratios.append(measured[-1] / simulated[-1])
    return statistics.median(measured), statistics.median(simulated), statistics.median(ratios)


PROFILE_ONCE = False


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--pipetrain", required=True)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--profile-once", action="store_true",
                   help="profile each model once, before its first run (default: before every run)")
    a = p.parse_args()
    global PROFILE_ONCE
    PROFILE_ONCE = a.profile_once
    exe = os.path.abspath(a.pipetrain)
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "tests", "python"))
    rows = []
    with tempfile.TemporaryDirectory() as work:
        # Each run's cluster calibrated as a user would: its transport, its number of workers.
        clusters = {}
        for transport in ("threads", "gloo"):
            for workers in (2, 4):
                clusters[transport, workers] = os.path.join(work, f"{transport}{workers}.cluster.json")
                run(exe, ["calibrate", "--workers", str(workers), "--transport", transport, "-o",
                          clusters[transport, workers]])
        cnn = os.path.join(work, "mnist-cnn.profile.json")
        cnn_profile = (["profile", "--model", "mnist-cnn", "--batch-size", "64", "-o", cnn], None)
        for transport in ("threads", "gloo"):
            for workers in (2, 4):
                for kind in ("1f1b", "gpipe", "pipedream", "dp"):
                    shape = ["--schedule", "dp", "--workers", str(workers)] if kind == "dp" else \
                        ["--schedule", kind, "--stages", str(workers)]
                    if kind != "pipedream":
                        shape += ["--microbatches", "4"]
                    args = ["--model", "mnist-cnn", "--steps", str(a.steps), "--profile", cnn, "--cluster",
                            clusters[transport, workers], "--transport", transport] + shape
                    rows.append((f"mnist-cnn {kind} x{workers} {transport}", *measure(exe, args, a.repeats, cnn_profile)))
        gpt = os.path.join(work, "gpt.profile.json")
        gpt_profile = (["profile", "--model", "gpt", "--batch-size", "16", "-o", gpt], None)
        args = ["--model", "gpt", "--batch-size", "16", "--steps", str(max(a.steps // 5, 20)), "--profile", gpt,
                "--cluster", clusters["threads", 2], "--stages", "2", "--schedule", "1f1b", "--microbatches", "4"]
        rows.append(("zoo gpt 1f1b x2 threads", *measure(exe, args, a.repeats, gpt_profile)))
        for name, _, spec, shape, dtype, loss, targets in FAMILIES:
            if name not in ("gpt (tied)", "lstm", "resnet+bn"):
                continue
            g = torch.Generator().manual_seed(1)
            n = BATCH * 8
            x = torch.randint(0, 32, (n,) + shape, generator=g) if dtype == "int64" else torch.randn((n,) + shape, generator=g)
            model, data, prof = (os.path.join(work, f) for f in ("m.pt", "d.pt", "m.profile.json"))
            run(exe, ["export", "--model", spec, "--input-shape", ",".join(map(str, (BATCH,) + shape)), "--input-dtype",
                      dtype, "-o", model] + (["--input-high", "32"] if dtype == "int64" else []), env=env)
            torch.save({"x": x, "y": targets(x, g)}, data)
            family_profile = (["profile", "--model", model, "--data", data, "--loss", loss, "--batch-size", str(BATCH),
                               "-o", prof], env)
            args = ["--model", model, "--data", data, "--loss", loss, "--batch-size", str(BATCH), "--steps",
                    str(max(a.steps // 5, 40)), "--profile", prof, "--cluster", clusters["threads", 2], "--stages", "2",
                    "--schedule", "1f1b", "--microbatches", "4"]
            rows.append((f"{name} 1f1b x2 threads", *measure(exe, args, a.repeats, family_profile)))
    when = "once, before each model's first run" if a.profile_once else "before every run"
    print(f"== real compute against its simulation: samples/s, medians of {a.repeats}, {os.cpu_count()} cores; "
          f"profiled {when} ==")
    print(f"{'run':34} {'measured':>9} {'simulated':>9} {'measured/simulated':>19}")
    errors = []
    for name, measured, simulated, ratio in rows:
        errors.append(abs(ratio - 1))
        print(f"{name:34} {measured:9.0f} {simulated:9.0f} {ratio:19.3f}")
    print(f"rows within 15% of their simulation: {sum(e <= 0.15 for e in errors)} of {len(errors)}; "
          f"median error {100 * statistics.median(errors):.1f}%, largest {100 * max(errors):.1f}%")


if __name__ == "__main__":
    main()
