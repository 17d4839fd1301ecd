"""Samples/s per model family (tests/python/family_models.py): eager PyTorch (torch.optim.SGD, one
thread, and all of this machine's threads), pipetrain on one worker, and pipetrain's 1F1B on 2
stages (a thread per stage), side by side; runs interleaved, medians of REPEATS.

    /usr/bin/python3 bench/python/families_throughput.py --pipetrain build/pipetrain [--steps 40] [--repeats 3]
"""
import argparse
import csv
import ctypes
import os
import statistics
import subprocess
import sys
import tempfile
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..")
sys.path.insert(0, os.path.join(ROOT, "tests", "python"))
import family_models as fm  # noqa: E402

BATCH = 32
# name, factory, spec, example shape, dtype, loss flag, target maker
FAMILIES = [
    ("gpt (tied)", fm.gpt, "family_models:gpt", (16,), "int64", "lm", lambda x, g: torch.roll(x, -1, 1)),
    ("lstm", fm.lstm_classifier, "family_models:lstm_classifier", (16,), "int64", "cross-entropy",
     lambda x, g: torch.randint(0, 5, (x.size(0),), generator=g)),
    ("bert", fm.bert, "family_models:bert", (16,), "int64", "cross-entropy",
     lambda x, g: torch.randint(0, 3, (x.size(0),), generator=g)),
    ("resnet+bn", fm.resnet_small, "family_models:resnet_small", (3, 32, 32), "float32", "cross-entropy",
     lambda x, g: torch.randint(0, 10, (x.size(0),), generator=g)),
    ("u-net", fm.unet, "family_models:unet", (3, 32, 32), "float32", "cross-entropy",
     lambda x, g: torch.randint(0, 3, (x.size(0), 32, 32), generator=g)),
    ("densenet", fm.densenet_small, "family_models:densenet_small", (3, 32, 32), "float32", "cross-entropy",
     lambda x, g: torch.randint(0, 10, (x.size(0),), generator=g)),
]


def loss_fn(flag):
    if flag == "lm":
        return lambda out, y: torch.nn.functional.cross_entropy(out.reshape(-1, out.size(-1)), y.reshape(-1))
    return torch.nn.functional.cross_entropy


def blas_threads(n):
    """OpenBLAS's own threads, which torch.set_num_threads leaves at one per core: a one-thread
    eager run then ran 1.10-1.27x slower than with one, where each pipetrain worker computes with
    one (src/model/compute_threads.cpp)."""
    try:
        ctypes.CDLL("libopenblas.so.0").openblas_set_num_threads(n)
    except (OSError, AttributeError):  # another BLAS: its threads are torch's
        pass


def eager_rate(make, x, y, flag, steps, threads):
    torch.set_num_threads(threads)
    blas_threads(threads)
    torch.manual_seed(0)
    model = make()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    f = loss_fn(flag)
    n = x.size(0) // BATCH

    def step(s):
        i = s % n
        opt.zero_grad()
        f(model(x[i * BATCH:(i + 1) * BATCH]), y[i * BATCH:(i + 1) * BATCH]).backward()
        opt.step()

    for s in range(3):  # warm-up, as pipetrain's first steps allocate
        step(s)
    t0 = time.perf_counter()
    for s in range(steps):
        step(s)
    return steps * BATCH / (time.perf_counter() - t0)


def pipetrain_rate(exe, model, data, flag, steps, extra):
    """Over the steps after the first 3, as eager_rate times its own: train's figure counts every
    step, and its first (allocating) took 21 ms against 8 for the rest, 4.7% off on the tied GPT."""
    metrics = os.path.join(os.path.dirname(data), "rate.csv")
    if os.path.exists(metrics):
        os.remove(metrics)
    r = subprocess.run([exe, "train", "--model", model, "--data", data, "--loss", flag, "--steps", str(steps + 3),
                        "--batch-size", str(BATCH), "--lr", "0.01", "--quiet", "--metrics", metrics] + extra,
                       capture_output=True, text=True)
    if r.returncode != 0 or not os.path.exists(metrics):
        raise SystemExit(f"{model}: pipetrain failed ({r.returncode}):\n{r.stderr}")
    with open(metrics) as f:
        at = {int(row["step"]): float(row["train_s"]) for row in csv.DictReader(f)}
    if 3 not in at or steps + 3 not in at or at[steps + 3] <= at[3]:
        raise SystemExit(f"{model}: {metrics} lacks the rows of steps 3 and {steps + 3}: {sorted(at)[:5]}...")
    return steps * BATCH / (at[steps + 3] - at[3])


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--pipetrain", required=True)
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--repeats", type=int, default=3)
    a = p.parse_args()
    exe = os.path.abspath(a.pipetrain)
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "tests", "python"))
    rows = []
    with tempfile.TemporaryDirectory() as work:
        for name, make, spec, shape, dtype, flag, targets in FAMILIES:
            g = torch.Generator().manual_seed(1)
            n = BATCH * 8
            x = torch.randint(0, 32, (n,) + shape, generator=g) if dtype == "int64" else torch.randn((n,) + shape, generator=g)
            y = targets(x, g)
            model, data = os.path.join(work, "m.pt"), os.path.join(work, "d.pt")
            args = [exe, "export", "--model", spec, "--input-shape", ",".join(map(str, (BATCH,) + shape)),
                    "--input-dtype", dtype, "-o", model] + (["--input-high", "32"] if dtype == "int64" else [])
            subprocess.run(args, check=True, capture_output=True, env=env)
            torch.save({"x": x, "y": y}, data)
            runs = {k: [] for k in ("eager1", "eagerN", "one", "two")}
            for _ in range(a.repeats):
                runs["eager1"].append(eager_rate(make, x, y, flag, a.steps, 1))
                runs["eagerN"].append(eager_rate(make, x, y, flag, a.steps, os.cpu_count()))
                runs["one"].append(pipetrain_rate(exe, model, data, flag, a.steps, []))
                runs["two"].append(pipetrain_rate(exe, model, data, flag, a.steps,
                                                  ["--schedule", "1f1b", "--stages", "2", "--microbatches", "4"]))
            rows.append((name, {k: statistics.median(v) for k, v in runs.items()}))
    print(f"== samples/s per family: batch {BATCH}, {a.steps} steps, medians of {a.repeats}, {os.cpu_count()} cores ==")
    print(f"{'family':12} {'eager 1 thr':>11} {'eager ' + str(os.cpu_count()) + ' thr':>11} {'pt 1 worker':>11} "
          f"{'pt 1f1b x2':>11} {'pt1/eager1':>10} {'x2/pt1':>7}")
    for name, r in rows:
        print(f"{name:12} {r['eager1']:11.0f} {r['eagerN']:11.0f} {r['one']:11.0f} {r['two']:11.0f} "
              f"{r['one'] / r['eager1']:10.2f} {r['two'] / r['one']:7.2f}")


if __name__ == "__main__":
    main()
