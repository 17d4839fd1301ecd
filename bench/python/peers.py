"""Peers for bench/runtime_vs_peers.sh, written here: mnist-cnn trained by PyTorch's
DistributedDataParallel (gloo, one process per worker) and by a GPipe written in plain PyTorch
(one process per stage, microbatches filled then drained, point-to-point over gloo). Fashion-MNIST
from Debian's dataset-fashion-mnist, normalised as pipetrain normalises it; one compute thread
per process; prints "samples/s X" measured after a warm-up.

    python3 peers.py ddp   --workers 2 --batch 64 --steps 300
    python3 peers.py gpipe --microbatches 4 --batch 64 --steps 300
"""
import argparse
import gzip
import os
import struct
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mnist_cnn import mnist_cnn  # noqa: E402

DATA = "/usr/share/datasets/fashion-mnist"
WARMUP = 20


def load_images():
    with gzip.open(os.path.join(DATA, "train-images-idx3-ubyte.gz")) as f:
        _, n, rows, cols = struct.unpack(">IIII", f.read(16))
        x = torch.frombuffer(bytearray(f.read()), dtype=torch.uint8).reshape(n, 1, rows, cols)
    with gzip.open(os.path.join(DATA, "train-labels-idx1-ubyte.gz")) as f:
        f.read(8)
        y = torch.frombuffer(bytearray(f.read()), dtype=torch.uint8).long()
    return (x.float() / 255 - 0.2860) / 0.3530, y


def batches(x, y, batch, rank, workers, steps, seed=0):
    g = torch.Generator().manual_seed(seed)
    order = torch.randperm(x.shape[0], generator=g)
    per_epoch = x.shape[0] // (batch * workers)
    for s in range(steps):
        k = s % per_epoch
        idx = order[(k * workers + rank) * batch:(k * workers + rank + 1) * batch]
        yield x[idx], y[idx]


def setup(rank, world, port):
    torch.set_num_threads(1)
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world)


def ddp_worker(rank, args, out):
    setup(rank, args.workers, args.port)
    x, y = load_images()
    torch.manual_seed(0)
    model = nn.parallel.DistributedDataParallel(mnist_cnn())
    opt = torch.optim.SGD(model.parameters(), lr=0.02, momentum=0.9)
    t0 = None
    for s, (xb, yb) in enumerate(batches(x, y, args.batch, rank, args.workers, args.steps + WARMUP)):
        if s == WARMUP:
            dist.barrier()
            t0 = time.perf_counter()
        opt.zero_grad()
        nn.functional.cross_entropy(model(xb), yb).backward()
        opt.step()
    dist.barrier()
    if rank == 0:
        out.put(args.steps * args.batch * args.workers / (time.perf_counter() - t0))
    dist.destroy_process_group()


def gpipe_worker(rank, args, out):
    """Stage 0: the two conv layers; stage 1: the three dense ones (pipetrain's 2-stage split)."""
    setup(rank, 2, args.port)
    x, y = load_images()
    torch.manual_seed(0)
    layers = list(mnist_cnn().children())
    stage = nn.Sequential(*(layers[:2] if rank == 0 else layers[2:]))
    opt = torch.optim.SGD(stage.parameters(), lr=0.02, momentum=0.9)
    m = args.microbatches
    mb = args.batch // m
    shape = (mb, 32, 7, 7)
    t0 = None
    for s, (xb, yb) in enumerate(batches(x, y, args.batch, 0, 1, args.steps + WARMUP)):
        if s == WARMUP:
            dist.barrier()
            t0 = time.perf_counter()
        opt.zero_grad()
        if rank == 0:
            outs, sends = [], []
            for xm in xb.chunk(m):  # fill: every microbatch's forward, sent as it is done
                o = stage(xm)
                outs.append(o)
                sends.append(dist.isend(o.detach().contiguous(), 1))
            grads = [torch.empty(shape) for _ in range(m)]
            recvs = [dist.irecv(g, 1) for g in grads]
            for w in sends:
                w.wait()
            for o, g, r in zip(outs, grads, recvs):  # drain
                r.wait()
                o.backward(g)
        else:
            inputs = [torch.empty(shape) for _ in range(m)]
            recvs = [dist.irecv(t, 0) for t in inputs]
            losses = []
            for t, r, ym in zip(inputs, recvs, yb.chunk(m)):
                r.wait()
                t.requires_grad_(True)
                losses.append((t, nn.functional.cross_entropy(stage(t), ym) / m))
            sends = []
            for t, loss in losses:
                loss.backward()
                sends.append(dist.isend(t.grad.contiguous(), 0))
            for w in sends:
                w.wait()
        opt.step()
    dist.barrier()
    if rank == 0:
        out.put(args.steps * args.batch / (time.perf_counter() - t0))
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("peer", choices=["ddp", "gpipe"])
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--batch", type=int, default=64, help="per worker (ddp); per minibatch (gpipe)")
    p.add_argument("--microbatches", type=int, default=4)
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--port", type=int, default=29611)
    args = p.parse_args()
    ctx = mp.get_context("spawn")
    out = ctx.SimpleQueue()
    fn, n = (ddp_worker, args.workers) if args.peer == "ddp" else (gpipe_worker, 2)
    mp.start_processes(fn, args=(args, out), nprocs=n, start_method="spawn")
    print(f"samples/s {out.get():.1f}")


if __name__ == "__main__":
    main()
