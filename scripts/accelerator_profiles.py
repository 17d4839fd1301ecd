#!/usr/bin/env python3
"""Accelerator-scale profiles (pipetrain.profile/1) of VGG-16, ResNet-50, GNMT-16, an AWD LSTM
language model and a GPT-like transformer at full size, from counted FLOPs and bytes at a stated accelerator's sustained
rates (docs/emulation.md, "Accelerator-scale profiles").

  scripts/accelerator_profiles.py --out data/profiles            # write the five profiles
  scripts/accelerator_profiles.py --compare ../shared/data/pipedream-profiles   # vs PipeDream's V100

Cost model of one layer for a minibatch of N samples (fp32): its kernels run one after another,
  forward_ms  = forward FLOPs / rate + bytes read and written / memory bandwidth
  backward_ms = 2 x forward FLOPs / rate + 2 x bytes / memory bandwidth
                (input gradient + weight gradient; the first layer has no input gradient: 1 x)
  rate = CONV3_TFLOPS for 3x3 stride-1 convolutions (cuDNN's Winograd kernels do fewer
  multiplications than the direct FLOP count, so their effective rate passes the fp32 peak),
  DENSE_TFLOPS for other convolutions and dense layers, RNN_TFLOPS for LSTM layers (their
  per-time-step matrix products are small); bytes = the layer's input, output, weights, and the
  traffic of its element-wise kernels (ReLU, pooling, batch norm, residual add) at MEM_GBS.
  optimizer_ms = 8 x parameter bytes / memory bandwidth, once per step: what pipetrain's runtime
                 does to a stage's weights at each step (`pipetrain profile` times the same on the
                 CPU): SGD with momentum reads weights, gradients and momentum and writes weights,
                 momentum and zeroed gradients (6 passes), and weight stashing copies the weights
                 (read, write: 2).
The rates are a V100-class GPU's sustained fp32 figures, chosen once and stated here; the
--compare output shows how the result stands against PipeDream's measured V100 profiles.
Layers are the zoo's cuttable layers (src/model): a conv with its ReLU (and pool), a residual
block, an LSTM layer.
"""
import argparse
import json
import os
import sys

ACCELERATOR = ("V100-class (emulated): 20 TFLOP/s effective 3x3 conv, 12 TFLOP/s other conv/dense, "
               "9 TFLOP/s LSTM, 750 GB/s memory, fp32")
CONV3_TFLOPS = 20.0
DENSE_TFLOPS = 12.0
RNN_TFLOPS = 9.0
MEM_GBS = 750.0
F32 = 4
STEP_PASSES = 8  # passes over a layer's parameters per step: see optimizer_ms above


class Builder:
    def __init__(self, model, batch):
        self.model, self.batch, self.layers = model, batch, []

    def add(self, name, fwd_flops, out_elems, params, in_elems, rate=DENSE_TFLOPS, inputs=None, first=False,
            extra_elems=0, stash_elems=None, token_ids=False):
        """One layer; flops for the whole minibatch; elems per sample (extra_elems: element-wise
        kernels' traffic; stash_elems: what its forward keeps for the backward, when more than its
        output); params in floats. The first layer's input is the model's (token_ids: int64 ids),
        which the first stage holds per microbatch in flight (the profile's input_bytes)."""
        n = self.batch
        if first:
            self.input_bytes = in_elems * n * (8 if token_ids else F32)
        moved = (in_elems + out_elems + extra_elems) * n * F32 + params * F32
        fwd = fwd_flops / (rate * 1e9) + moved / (MEM_GBS * 1e6)
        bwd_factor = 1.0 if first else 2.0
        bwd = bwd_factor * fwd_flops / (rate * 1e9) + 2 * moved / (MEM_GBS * 1e6)
        layer = {"name": name, "forward_ms": round(fwd, 4), "backward_ms": round(bwd, 4),
                 "activation_bytes": int(out_elems * n * F32), "parameter_bytes": int(params * F32)}
        if params > 0:
            layer["optimizer_ms"] = round(STEP_PASSES * params * F32 / (MEM_GBS * 1e6), 4)
        if stash_elems is not None:
            layer["stash_bytes"] = int(stash_elems * n * F32)
        if inputs is not None:
            layer["inputs"] = inputs
        self.layers.append(layer)
        return len(self.layers) - 1

    def doc(self):
        return {"format": "pipetrain.profile/1", "model": self.model, "batch_size": self.batch,
                "device": ACCELERATOR, "recipe": "scripts/accelerator_profiles.py", "input_bytes": self.input_bytes,
                "layers": self.layers}


def conv(b, name, cin, cout, k, size_in, stride=1, pool=False, first=False):
    """conv + ReLU (+ 2x2 max-pool): ReLU reads and writes the conv output, the pool reads it and
    writes a quarter."""
    size_out = size_in // stride
    flops = 2 * cin * cout * k * k * size_out * size_out * b.batch
    params = cin * cout * k * k + cout
    conv_out = cout * size_out * size_out
    out = conv_out // 4 if pool else conv_out
    rate = CONV3_TFLOPS if k == 3 and stride == 1 else DENSE_TFLOPS
    b.add(name, flops, out, params, cin * size_in * size_in, rate=rate, first=first,
          extra_elems=2 * conv_out + (conv_out if pool else 0))
    return size_out // 2 if pool else size_out


def vgg16(batch):
    b = Builder("vgg16", batch)
    plan = [(64, 2), (128, 2), (256, 3), (512, 3), (512, 3)]
    size, cin = 224, 3
    for block, (cout, reps) in enumerate(plan, 1):
        for r in range(1, reps + 1):
            size = conv(b, f"conv{block}_{r}", cin, cout, 3, size, pool=(r == reps), first=(cin == 3))
            cin = cout
    for name, i, o in [("fc6", 512 * 7 * 7, 4096), ("fc7", 4096, 4096), ("fc8", 4096, 1000)]:
        b.add(name, 2 * i * o * batch, o, i * o + o, i)
    return b.doc()


def resnet50(batch):
    b = Builder("resnet50", batch)
    # stem: 7x7/2 conv 3->64 at 224 -> 112, BN, ReLU, 3x3/2 max-pool -> 56
    b.add("stem", 2 * 3 * 64 * 49 * 112 * 112 * batch, 64 * 56 * 56, 3 * 64 * 49 + 128, 3 * 224 * 224, first=True,
          extra_elems=8 * 64 * 112 * 112)
    cin, size = 64, 56
    for stage, (mid, blocks, stride) in enumerate([(64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)], 1):
        for i in range(blocks):
            s = stride if i == 0 else 1
            out, so = 4 * mid, size // s
            macs = cin * mid * size * size + mid * mid * 9 * so * so + mid * out * so * so
            params = cin * mid + mid * mid * 9 + mid * out + 2 * (mid + mid + out)
            # Element-wise traffic: each conv output is written, read twice and written by batch
            # norm, read and written by ReLU, read by the next conv (7 passes); the last one also
            # goes through the residual add (8 passes).
            extra = 7 * (mid * size * size + mid * so * so) + 8 * out * so * so
            if i == 0:  # projection shortcut: conv + batch norm
                macs += cin * out * so * so
                params += cin * out + 2 * out
                extra += 4 * out * so * so
            b.add(f"block{stage}_{i + 1}", 2 * macs * batch, out * so * so, params, cin * size * size,
                  extra_elems=extra)
            cin, size = out, so
    b.add("head", 2 * 2048 * 1000 * batch, 1000, 2048 * 1000 + 1000, 2048 * 7 * 7)
    return b.doc()


def lstm_flops(inp, hidden, steps, batch, directions=1):
    return 2 * 4 * hidden * (inp + hidden) * steps * batch * directions


def lstm_params(inp, hidden, directions=1):
    return 4 * hidden * (inp + hidden + 2) * directions


def gnmt16(batch, src_len=25, tgt_len=25, hidden=1024, vocab=32000):
    """GNMT with 8 encoder and 8 decoder LSTM layers (Wu et al., 2016), as PipeDream's GNMT-16, at
    sentences of 25 tokens (the length PipeDream's gnmt_large profile was measured at).
    The decoder layers read the previous decoder layer and the encoder's output (attention), so
    the encoder output rides through every stage boundary in the decoder."""
    b = Builder("gnmt16", batch)
    h = hidden
    b.add("enc_embed", 0, src_len * h, vocab * h, src_len, first=True, token_ids=True)
    b.add("enc_lstm1", lstm_flops(h, h, src_len, batch, 2), src_len * 2 * h, lstm_params(h, h, 2), src_len * h,
          rate=RNN_TFLOPS)
    b.add("enc_lstm2", lstm_flops(2 * h, h, src_len, batch), src_len * h, lstm_params(2 * h, h), src_len * 2 * h,
          rate=RNN_TFLOPS)
    for i in range(3, 9):  # residual from layer 3 on (inside the layer)
        b.add(f"enc_lstm{i}", lstm_flops(h, h, src_len, batch), src_len * h, lstm_params(h, h), src_len * h,
              rate=RNN_TFLOPS)
    enc_out = len(b.layers) - 1
    b.add("dec_embed", 0, tgt_len * h, vocab * h, tgt_len, inputs=[enc_out])
    # Attention: scores and context per target step over the source, plus the first LSTM layer.
    attn = 2 * 2 * tgt_len * src_len * h * batch + 2 * tgt_len * h * h * batch
    prev = b.add("dec_attn_lstm1", lstm_flops(h, h, tgt_len, batch) + attn, tgt_len * 2 * h,
                 lstm_params(h, h) + h * h, tgt_len * h + src_len * h, rate=RNN_TFLOPS,
                 inputs=[len(b.layers) - 1, enc_out])
    for i in range(2, 9):  # each reads the previous layer's output and the attention context
        prev = b.add(f"dec_lstm{i}", lstm_flops(2 * h, h, tgt_len, batch), tgt_len * 2 * h, lstm_params(2 * h, h),
                     tgt_len * 2 * h, rate=RNN_TFLOPS, inputs=[prev])
    b.add("classifier", 2 * 2 * h * vocab * tgt_len * batch, tgt_len * vocab, 2 * h * vocab + vocab,
          tgt_len * 2 * h, inputs=[prev])
    return b.doc()


def awd_lm(batch, seq=70, emb=400, hidden=1150, vocab=10000):
    """AWD-LSTM language model (Merity et al., 2018) on Penn Treebank sizes: embedding 400, LSTM
    1150-1150-400, tied decoder; PipeDream's AWD LM."""
    b = Builder("awd-lm", batch)
    b.add("embed", 0, seq * emb, vocab * emb, seq, first=True, token_ids=True)
    sizes = [(emb, hidden), (hidden, hidden), (hidden, emb)]
    for i, (inp, h) in enumerate(sizes, 1):
        b.add(f"lstm{i}", lstm_flops(inp, h, seq, batch), seq * h, lstm_params(inp, h), seq * inp, rate=RNN_TFLOPS)
    b.add("decoder", 2 * emb * vocab * seq * batch, seq * vocab, emb * vocab + vocab, seq * emb)
    return b.doc()


def gpt(batch, blocks=24, hidden=2048, seq=1024, heads=16, vocab=50257):
    """A GPT-like decoder (GPT-3 XL's shape: 24 blocks, hidden 2048, sequence 1024, 16 heads;
    GPT-2's vocabulary), fp32. A block's forward keeps, per sample, 17 s h + 2.5 a s^2 floats for
    its backward (Korthikanti et al., "Reducing Activation Recomputation in Large Transformer
    Models", 2022: 34 s h + 5 a s^2 bytes in fp16 with 1-byte dropout masks), about 310 MB: the
    activations, not the weights, fill a 16 GB device, which is what recomputation is for."""
    b = Builder("gpt-2048", batch)
    s, h, a = seq, hidden, heads
    b.add("embed", 0, s * h, vocab * h + s * h, s, first=True, token_ids=True)
    for i in range(1, blocks + 1):
        flops = (24 * s * h * h + 4 * s * s * h) * batch  # QKV, projection, MLP (4h); scores and context
        b.add(f"block{i}", flops, s * h, 12 * h * h + 13 * h, s * h, extra_elems=16 * s * h + 2 * a * s * s,
              stash_elems=17 * s * h + 2.5 * a * s * s)
    b.add("head", 2 * s * h * vocab * batch, s * vocab, vocab * h + 2 * h, s * h, stash_elems=2 * s * vocab + s * h)
    return b.doc()


MODELS = {"vgg16": (vgg16, 64), "resnet50": (resnet50, 128), "gnmt16": (gnmt16, 64), "awd-lm": (awd_lm, 80),
          "gpt-2048": (gpt, 16)}
# Ours -> PipeDream's profile of the same network (None: PipeDream published none).
PIPEDREAM = {"vgg16": "vgg16.json", "resnet50": "resnet50.json", "gnmt16": "gnmt_large.json", "awd-lm": None,
             "gpt-2048": None}


def totals(layers, batch, skip_input=False):
    """Per-sample forward+backward ms, parameter MB and activation MB (PipeDream's Input nodes,
    data loading, left out as its optimizer does)."""
    keep = [l for l in layers if not (skip_input and l["name"].startswith("Input"))]
    ms = sum(l["forward_ms"] + l["backward_ms"] for l in keep)
    return ms / batch, sum(l["parameter_bytes"] for l in keep) / 1e6, sum(l["activation_bytes"] for l in keep) / batch / 1e6


def compare(shared_dir, profiles):
    print("Accelerator-scale profiles vs PipeDream's measured V100 profiles (per sample; ours: " + ACCELERATOR + ")")
    print(f"{'model':10} {'layers':>6} {'fwd+bwd ms/sample':>18} {'params MB':>10} {'activations MB/sample':>22}   vs PipeDream")
    for name, doc in profiles.items():
        ms, pm, am = totals(doc["layers"], doc["batch_size"])
        row = f"{name:10} {len(doc['layers']):6} {ms:18.3f} {pm:10.1f} {am:22.2f}"
        theirs = PIPEDREAM[name]
        if theirs is None:
            print(row + "   (no PipeDream profile)")
            continue
        path = os.path.join(shared_dir, theirs)
        with open(path) as f:
            pd = json.load(f)
        tms, tpm, tam = totals(pd["layers"], pd["profiled_batch_size"], skip_input=True)
        print(row + f"   {theirs}: {len(pd['layers'])} layers, {tms:.3f} ms/sample ({ms / tms:.2f}x), "
              f"{tpm:.1f} MB params ({pm / tpm:.2f}x), {tam:.2f} MB act/sample ({am / tam:.2f}x)")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", help="directory to write <model>.json into")
    ap.add_argument("--compare", metavar="DIR", help="PipeDream's JSON profiles (../shared/data/pipedream-profiles)")
    args = ap.parse_args()
    profiles = {name: fn(batch) for name, (fn, batch) in MODELS.items()}
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        for name, doc in profiles.items():
            path = os.path.join(args.out, name + ".json")
            with open(path, "w") as f:
                json.dump(doc, f, indent=1)
                f.write("\n")
            print("wrote " + path, file=sys.stderr)
    if args.compare:
        compare(args.compare, profiles)
    if not args.out and not args.compare:
        ap.print_help()


if __name__ == "__main__":
    main()
