"""Fidelity of imported models: a model exported from PyTorch and trained by pipetrain (one
worker; 1F1B on 2 and 4 stages; threads and gloo) ends with the weights PyTorch's own SGD
gives it, to 1e-5 relative.

    /usr/bin/python3 tests/python/fidelity_test.py --pipetrain build/pipetrain

The reference trains the model as its author would in PyTorch (eager, torch.optim.SGD),
splitting each minibatch into the same microbatches as the pipeline (BatchNorm then sees the
same samples) and summing their losses / M, which is what a synchronous pipeline computes.
"""
import argparse
import collections
import contextlib
import glob
import io
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import unittest
import zipfile

# The references compute on one thread, as each pipetrain worker does, OpenBLAS's threads too:
# torch.set_num_threads leaves OpenBLAS's pool as it is, whose GEMMs on 2 threads summed in
# another order (an LSTM 7.4e-8 off pipetrain's bit-exact weights, mobilenet_v2 diverged apart).
# Read by OpenBLAS when torch loads it.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import torch  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))
from pipetrain.weights import trained_state  # noqa: E402
import toy_models  # noqa: E402

PIPETRAIN = None
LR, MOMENTUM, BATCH, STEPS = 0.05, 0.9, 8, 3


def run(args, **kw):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([HERE, os.path.join(HERE, "..", "..", "python")]))
    r = subprocess.run(args, capture_output=True, text=True, env=env, **kw)
    if r.returncode != 0:
        raise AssertionError(f"{' '.join(args)} failed ({r.returncode}):\n{r.stdout}\n{r.stderr}")
    return r


def export(args):
    """`pipetrain export ARGS` without a new interpreter: the binary runs python/pipetrain/export.py
    with ARGS as they are (apps/export.cpp), and this calls the same main() here, where torch is
    imported already; a new interpreter's `import torch` cost 1.5 s of CPU an export. The tests
    that need the binary's own path (its exit code, stderr, no traceback) still run it."""
    from pipetrain import export as exporter
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = exporter.main(list(args))
        except SystemExit as e:  # argparse's refusals
            code = e.code
    return subprocess.CompletedProcess(["pipetrain", "export"] + list(args), code, out.getvalue(), err.getvalue())


# The optimizers the tests train with beside SGD: (pipetrain's flags, PyTorch's optimizer, its
# learning-rate schedule: pipetrain's warm-up, the rate of step s x (s + 1) / W for s < W).
ADAMW = (["--optimizer", "adamw", "--lr", "0.01", "--betas", "0.9,0.95", "--weight-decay", "0.1",
          "--warmup-steps", "2"],
         lambda params: torch.optim.AdamW(params, lr=0.01, betas=(0.9, 0.95), weight_decay=0.1),
         lambda opt: torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 2)))


def decay_groups(params):
    """nanoGPT's groups: decay on the parameters of 2+ dimensions, none on biases and norm scales."""
    params = list(params)
    return [{"params": [p for p in params if p.dim() >= 2]},
            {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]


# ADAMW with decay on matrices only (--weight-decay-on matrices), as LM recipes group it.
ADAMW_MATRICES = (ADAMW[0] + ["--weight-decay-on", "matrices"],
                  lambda params: torch.optim.AdamW(decay_groups(params), lr=0.01, betas=(0.9, 0.95), weight_decay=0.1),
                  ADAMW[2])


def reference(make_model, x, y, loss_fn, microbatches, clip=0.0, optimizer=None, steps=STEPS, bf16=False,
              losses=None, set_to_none=False):
    """Weights after `steps` of PyTorch SGD (or `optimizer`, ADAMW's form) on minibatches
    [s*B, (s+1)*B), M microbatches each (clip > 0: each step's gradient clipped to that norm by
    torch.nn.utils.clip_grad_norm_). bf16: forward and loss under torch.autocast("cpu",
    torch.bfloat16), as its users write it. `losses` (a list) gets each step's loss. set_to_none:
    opt.zero_grad's, torch 2's default (torch 1.13's is False).
    On one thread, as each pipetrain worker computes: PyTorch's multithreaded kernels sum in
    another order (mobilenet_v2, 2 microbatches: 4.7e-3 apart after one step on 2 threads, 0 on
    one; BatchNorm over few values per channel magnifies rounding)."""
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = make_model()
    model.train()
    opt = optimizer[1](model.parameters()) if optimizer else torch.optim.SGD(model.parameters(), lr=LR,
                                                                             momentum=MOMENTUM)
    schedule = optimizer[2](opt) if optimizer else None
    for s in range(steps):
        xb, yb = x[s * BATCH:(s + 1) * BATCH], y[s * BATCH:(s + 1) * BATCH]
        opt.zero_grad(set_to_none=set_to_none)
        step_loss = 0.0
        for xm, ym in zip(xb.chunk(microbatches), yb.chunk(microbatches)):
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
                loss = loss_fn(model(xm.clone()), ym) / microbatches  # rows of its own, as pipetrain's
            loss.backward()
            step_loss += loss.item()
        if losses is not None:
            losses.append(step_loss)
        if clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        opt.step()
        if schedule:
            schedule.step()
    # state_dict names a tied parameter under each of its paths, as the checkpoint holds it.
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def max_relative_error(got, want):
    worst = 0.0
    for name, w in want.items():
        g = got[name]
        assert g.shape == w.shape, f"{name}: {tuple(g.shape)} vs {tuple(w.shape)}"
        g, w = g.double(), w.double()
        worst = max(worst, ((g - w).abs().max() / w.abs().max().clamp_min(1e-12)).item())
    return worst


class Case:
    def __init__(self, work, name, spec, kwargs, shape, dtype, make_model, x, y, loss_fn, loss_flag, layers=0):
        self.work, self.name = work, name
        self.model_file = os.path.join(work, name + ".pt")
        self.data_file = os.path.join(work, name + "-data.pt")
        args = ["--model", spec, "--kwargs", kwargs, "--input-shape", shape, "--input-dtype", dtype,
                "-o", self.model_file]
        if dtype == "int64":
            args += ["--input-high", "32"]
        if layers:
            args += ["--layers", str(layers)]
        r = export(args)
        if r.returncode != 0:
            raise AssertionError(f"pipetrain export {' '.join(args)} failed ({r.returncode}):\n{r.stderr}")
        self.export_log = r.stdout
        torch.save({"x": x, "y": y, "x_test": x[:BATCH], "y_test": y[:BATCH]}, self.data_file)
        self.make_model, self.x, self.y, self.loss_fn, self.loss_flag = make_model, x, y, loss_fn, loss_flag
        m = self._seeded()
        self.initial = {k: v.detach().clone() for k, v in m.state_dict().items()}
        self.references = {}
        self.reference_losses = {}

    def _seeded(self):
        torch.manual_seed(0)
        return self.make_model()

    def want(self, microbatches, clip=0.0, optimizer=None, steps=STEPS, bf16=False):
        """The reference's weights; its losses by step are in self.reference_losses[key]."""
        key = (microbatches, clip, tuple(optimizer[0]) if optimizer else None, steps, bf16)
        if key not in self.references:
            losses = []
            self.references[key] = reference(self.make_model, self.x, self.y, self.loss_fn, microbatches, clip,
                                             optimizer, steps, bf16, losses)
            self.reference_losses[key] = losses
        return self.references[key]

    def train(self, tag, extra, steps=STEPS):
        ck = os.path.join(self.work, f"{self.name}-{tag}")
        sgd = [] if "--optimizer" in extra else ["--lr", str(LR), "--momentum", str(MOMENTUM)]
        run([PIPETRAIN, "train", "--model", self.model_file, "--data", self.data_file, "--loss", self.loss_flag,
             "--steps", str(steps), "--batch-size", str(BATCH)] + sgd +
            ["--no-shuffle", "--quiet", "--checkpoint-dir", ck, "--timeout", "60"] + extra)
        return trained_state(self.model_file, ck)


class Fidelity(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        work = cls.tmp.name
        g = torch.Generator().manual_seed(7)
        n = BATCH * STEPS
        import torchvision
        cls.resnet = Case(work, "resnet18", "torchvision.models:resnet18", '{"num_classes": 10}', f"{BATCH},3,32,32",
                          "float32", lambda: torchvision.models.resnet18(num_classes=10),
                          torch.randn(n, 3, 32, 32, generator=g), torch.randint(0, 10, (n,), generator=g),
                          torch.nn.functional.cross_entropy, "cross-entropy")
        tokens = torch.randint(0, 32, (n, 17), generator=g)
        cls.lm = Case(work, "tiny-lm", "toy_models:tiny_lm", "{}", f"{BATCH},16", "int64", toy_models.tiny_lm,
                      tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous(),
                      lambda out, y: torch.nn.functional.cross_entropy(out.reshape(-1, out.size(-1)), y.reshape(-1)),
                      "lm")
        cls.encdec = Case(work, "encdec", "toy_models:encoder_decoder", "{}", f"{BATCH},12", "float32",
                          toy_models.encoder_decoder, torch.randn(n, 12, generator=g),
                          torch.randint(0, 5, (n,), generator=g), torch.nn.functional.cross_entropy,
                          "cross-entropy", layers=6)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def check(self, case, tag, extra, microbatches, clip=0.0, optimizer=None, steps=STEPS):
        got = case.train(tag, extra + (["--clip-grad-norm", str(clip)] if clip > 0 else []) +
                         (optimizer[0] if optimizer else []), steps)
        want = case.want(microbatches, clip, optimizer, steps)
        self.assertEqual(set(got), set(want), f"{case.name}: parameter and buffer names")
        moved = max((want[k] - case.initial[k]).abs().max().item() for k in want if want[k].is_floating_point())
        self.assertGreater(moved, 1e-3, f"{case.name}: training did not move the weights ({moved})")
        err = max_relative_error(got, want)
        print(f"{case.name} {tag}: max relative error {err:.2e} (weights moved {moved:.2e})", file=sys.stderr)
        self.assertLess(err, 1e-5, f"{case.name} {tag}")
        # Without a tie, every operation is the reference's own, in its order, on one thread of the
        # same LibTorch: the weights are equal, not close. (The graph executor optimising on the
        # stage threads left the encoder-decoder 8e-8 away, inside the tolerance above.) A tie's
        # copies sum their gradients in another order (1.5e-7).
        if "tied" not in case.export_log:
            self.assertEqual(err, 0.0, f"{case.name} {tag}: not bit-exact")

    def run_all(self, case, runs=((1, "threads"), (2, "threads"), (2, "gloo"), (4, "threads"), (4, "gloo"))):
        for stages, transport in runs:
            with self.subTest(stages=stages, transport=transport):
                if stages == 1:
                    self.check(case, "one-worker", [], 1)
                    continue
                self.check(case, f"1f1b-{stages}-{transport}",
                           ["--schedule", "1f1b", "--stages", str(stages), "--microbatches", "2",
                            "--transport", transport], 2)

    def test_a_frozen_batch_norm_stays_frozen(self):
        """A BatchNorm its user froze (.eval()) in a model that trains was trained in training mode:
        export set every module training, and so did the runtime. It normalised by its batches and
        moved its statistics, exit 0. Each module now trains in the mode the user left it, as in
        eager PyTorch: the weights and the statistics are the reference's."""
        g = torch.Generator().manual_seed(11)
        n = BATCH * STEPS
        case = Case(self.tmp.name, "frozen-bn", "toy_models:frozen_batch_norm", "{}", f"{BATCH},16", "float32",
                    toy_models.frozen_batch_norm, torch.randn(n, 16, generator=g),
                    torch.randint(0, 4, (n,), generator=g), torch.nn.functional.cross_entropy, "cross-entropy")
        self.run_all(case, runs=((1, "threads"), (2, "threads")))
        r = export(["--model", "toy_models:frozen_batch_norm", "--input-shape", "8,16", "-o",
                    os.path.join(self.tmp.name, "frozen-again.pt")])
        self.assertIn("holds 1 module in evaluation mode in a model that trains (body.1)", r.stderr)

    def test_a_forward_with_optional_arguments_trains_at_their_defaults(self):
        """forward(self, x, scale=2.0, mask=None) was refused as taking 3 inputs, where model(x) runs;
        forward(x, bias=None, *args, scale=3.0, mask=None, **kwargs) as branching on a tensor (fx's
        own failure under Python 3.11). A keyword-only argument without a default is refused by name."""
        g = torch.Generator().manual_seed(13)
        n = BATCH * STEPS
        for name, build in (("optional_arguments", toy_models.optional_arguments),
                            ("keyword_options", toy_models.keyword_options)):
            case = Case(self.tmp.name, name, f"toy_models:{name}", "{}", f"{BATCH},12", "float32", build,
                        torch.randn(n, 12, generator=g), torch.randint(0, 5, (n,), generator=g),
                        torch.nn.functional.cross_entropy, "cross-entropy")
            self.run_all(case, runs=((1, "threads"), (2, "threads")))
        r = export(["--model", "toy_models:keyword_options", "--kwargs", '{"mask_required": true}',
                    "--input-shape", "8,12", "-o", os.path.join(self.tmp.name, "masked.pt")])
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("forward takes keyword-only argument(s) mask without a default", r.stderr)

    def test_resnet18(self):
        # Two of the five runs: each of ResNet-18's costs 5-10 s of CPU (11M parameters written to
        # every checkpoint, read back, and TorchScript's first runs), and the language model
        # below runs all five on the same code paths.
        self.run_all(self.resnet, runs=((2, "threads"), (4, "gloo")))

    def test_transformer_lm(self):
        self.run_all(self.lm)

    def test_token_ids_beyond_the_vocabulary(self):
        """An id past the embedding's rows is named before training (it failed at its minibatch, or
        at the final evaluation, in a TorchScript traceback, and no checkpoint was written)."""
        c = self.lm
        for key in ("x", "x_test"):
            data = {"x": c.x.clone(), "y": c.y, "x_test": c.x[:BATCH].clone(), "y_test": c.y[:BATCH]}
            data[key][3, 5] = 40  # the vocabulary is 32
            path = os.path.join(self.tmp.name, f"bad-ids-{key}.pt")
            torch.save(data, path)
            ck = os.path.join(self.tmp.name, f"bad-ids-{key}")
            r = run_failing([PIPETRAIN, "train", "--model", c.model_file, "--data", path, "--loss", "lm", "--steps", "1",
                             "--batch-size", str(BATCH), "--checkpoint-dir", ck])
            self.assertNotEqual(r.returncode, 0, r.stderr)
            self.assertIn(f"'{key}' holds token id 40 (sample 3)", r.stderr)
            self.assertNotIn("Traceback", r.stderr)
            self.assertFalse(os.path.exists(ck), "a checkpoint folder was made")

    def test_export_errors_are_one_line_naming_the_flag(self):
        """A folder that is not there, keyword arguments the model does not take and a negative
        --layers are named in one line (they printed Python tracebacks, or were taken)."""
        out = os.path.join(self.tmp.name, "no-such-folder", "m.pt")
        cases = ((["-o", out], f"-o {out}: no folder"),
                 (["-o", os.path.join(self.tmp.name, "m.pt"), "--kwargs", '{"nope": 1}'],
                  "--model: torchvision.models:resnet18(**{'nope': 1}) raised TypeError"),
                 (["-o", os.path.join(self.tmp.name, "m.pt"), "--layers", "-1"],
                  "--layers: must be >= 0 (0: the model's natural boundaries), got -1"))
        for extra, needle in cases:
            r = run_failing([PIPETRAIN, "export", "--model", "torchvision.models:resnet18", "--input-shape", "2,3,32,32"]
                            + extra)
            self.assertEqual(r.returncode, 2, r.stderr)
            self.assertIn(needle, r.stderr)
            self.assertNotIn("Traceback", r.stderr)
        self.assertFalse(os.path.exists(os.path.join(self.tmp.name, "m.pt")))
        # An nn.Sequential the example batch does not fit, integer inputs drawn from [0, 0) and an
        # example past memory: all printed Python tracebacks. A key given twice was taken at its last.
        for extra, needle in ((["--input-shape", "4,5"], "running it on the example batch (4,5, float32) failed"),
                              (["--input-shape", "4,12", "--input-dtype", "int64", "--input-high", "0"],
                               "--input-high: integer inputs are drawn from [0, HIGH), so it must be >= 1, got 0"),
                              (["--input-shape", "99999999,99999999"], "--input-shape: 99999999,99999999 takes"),
                              (["--input-shape", "4,12", "--kwargs", '{"p": 0.1, "p": 0.2}'],
                               "--kwargs: key 'p' is given 2 times")):
            r = run_failing([PIPETRAIN, "export", "--model", "toy_models:dropout_mlp", "-o",
                             os.path.join(self.tmp.name, "m.pt")] + extra)
            self.assertEqual(r.returncode, 2, r.stderr)
            self.assertIn(needle, r.stderr)
            self.assertNotIn("Traceback", r.stderr)
        self.assertFalse(os.path.exists(os.path.join(self.tmp.name, "m.pt")))
        # A sparse gradient ended in a traceback of the sparse backend.
        r = run_failing([PIPETRAIN, "export", "--model", "toy_models:sparse_embedding", "--input-shape", "4,12",
                         "--input-dtype", "int64", "--input-high", "32", "-o", os.path.join(self.tmp.name, "m.pt")])
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("--model: 0 is Embedding(sparse=True), whose gradient is sparse", r.stderr)
        self.assertNotIn("Traceback", r.stderr)

    def test_export_keeps_the_files_it_reads(self):
        """-o given the model's own source (MODULE:CALLABLE's module) or its TorchScript file wrote
        the TorchScript zip over it, exit 0; -o a folder failed after the export's work."""
        folder = os.path.join(self.tmp.name, "own")
        os.makedirs(folder, exist_ok=True)
        source = os.path.join(folder, "own_models.py")
        text = "import torch\n\ndef mlp():\n    return torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU())\n"
        with open(source, "w") as f:
            f.write(text)
        env = dict(os.environ, PYTHONPATH=folder)
        base = [PIPETRAIN, "export", "--model", "own_models:mlp", "--input-shape", "2,4"]
        for out, needle in ((source, f"-o {source}: is --model's file {source}, which this command reads"),
                            (folder, f"-o {folder}: is a folder")):
            r = subprocess.run(base + ["-o", out], capture_output=True, text=True, env=env)
            self.assertEqual(r.returncode, 2, r.stderr)
            self.assertIn(needle, r.stderr)
        with open(source) as f:
            self.assertEqual(f.read(), text)
        scripted = os.path.join(folder, "m.pt")
        subprocess.run(base + ["-o", scripted], capture_output=True, text=True, env=env, check=True)
        with open(scripted, "rb") as f:
            zipped = f.read()
        r = subprocess.run([PIPETRAIN, "export", "--model", scripted, "--input-shape", "2,4", "-o", scripted],
                           capture_output=True, text=True, env=env)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn(f"-o {scripted}: is --model's file", r.stderr)
        with open(scripted, "rb") as f:
            self.assertEqual(f.read(), zipped)

    def test_fashion_mnist_labels_past_a_model_files_classes_are_refused(self):
        """A model file of 5 classes on Fashion-MNIST's 10 failed at its first forward, in LibTorch's
        "Target 6 is out of bounds" and its stack; own data's labels were checked so already."""
        folder = os.path.join(self.tmp.name, "five")
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, "five_models.py"), "w") as f:
            f.write("import torch\n\ndef five():\n"
                    "    return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(784, 5))\n")
        env = dict(os.environ, PYTHONPATH=folder)
        model = os.path.join(folder, "five.pt")
        subprocess.run([PIPETRAIN, "export", "--model", "five_models:five", "--input-shape", "2,1,28,28", "-o", model],
                       capture_output=True, text=True, env=env, check=True)
        r = run_failing([PIPETRAIN, "train", "--model", model, "--data", "fashion-mnist", "--steps", "1"])
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn(f"--data fashion-mnist: its labels are classes 0..9, but {model} outputs 5 classes", r.stderr)
        self.assertNotIn("out of bounds", r.stderr)

    def test_a_language_model_without_loss_lm_is_told_so(self):
        """Token targets of the inputs' shape under the default cross-entropy: the refusal names
        --loss lm and the shift (it named only cross-entropy's [N, 256])."""
        c = self.lm
        r = run_failing([PIPETRAIN, "train", "--model", c.model_file, "--data", c.data_file, "--steps", "1",
                         "--batch-size", str(BATCH)])
        self.assertNotEqual(r.returncode, 0, r.stderr)
        self.assertIn("give --loss lm", r.stderr)
        self.assertIn("shifted by one token", r.stderr)
        # A token file: the same (it said the model is not a language model).
        ids = os.path.join(self.tmp.name, "ids.bin")
        torch.randint(0, 32, (4096,), dtype=torch.int16).numpy().tofile(ids)
        r = run_failing([PIPETRAIN, "train", "--model", c.model_file, "--data", ids, "--steps", "1",
                         "--batch-size", str(BATCH)])
        self.assertNotEqual(r.returncode, 0, r.stderr)
        self.assertIn(f"--data {ids}: a file of token ids trains a language model; give --loss lm", r.stderr)

    def test_a_language_models_own_loss_counts_next_tokens(self):
        """A language model exported with its own loss: the test accuracy counts each token's
        scores over the vocabulary (it took the argmax over the tokens: 0.00% here, where T != V),
        as --loss lm counts, on its data file and on a token file (which was refused for a model
        file without --loss lm, dropping the file's loss); where T = V no figure is given, and said."""
        c = self.lm
        own = os.path.join(self.tmp.name, "lm-own-loss.pt")
        export(["--model", "toy_models:tiny_lm", "--input-shape", f"{BATCH},16", "--input-dtype", "int64",
                "--input-high", "32", "--loss", "toy_models:token_cross_entropy", "-o", own])
        ids = os.path.join(self.tmp.name, "own-loss-ids.bin")
        c.x.flatten().repeat(10).to(torch.int16).numpy().tofile(ids)  # 22 windows to test on
        common = ["--steps", "2", "--batch-size", str(BATCH), "--no-shuffle", "--quiet"]
        for data in (c.data_file, ids):
            with self.subTest(data=data):
                want = run([PIPETRAIN, "train", "--model", c.model_file, "--data", data, "--loss", "lm"] + common)
                got = run([PIPETRAIN, "train", "--model", own, "--data", data, "--schedule", "1f1b", "--stages",
                           "2"] + common)
                accuracy = [line for line in want.stdout.splitlines() if line.startswith("test accuracy")]
                self.assertEqual(len(accuracy), 1, want.stdout)
                self.assertNotEqual(accuracy[0], "test accuracy 0.00%")
                self.assertIn(accuracy[0] + "\n", got.stdout)
                self.assertNotIn("perplexity", got.stdout)  # e^loss only of pipetrain's own cross-entropy
        # --loss names pipetrain's in place of the file's: said (it was dropped without a word).
        r = run([PIPETRAIN, "train", "--model", own, "--data", c.data_file, "--loss", "lm"] + common)
        self.assertEqual(r.stderr.count(f"note: --loss lm replaces {own}'s own loss"), 1, r.stderr)
        square = os.path.join(self.tmp.name, "lm-own-loss-square.pt")
        export(["--model", "toy_models:tiny_lm", "--kwargs", '{"vocab": 16}', "--input-shape", f"{BATCH},16",
                "--input-dtype", "int64", "--input-high", "16", "--loss", "toy_models:token_cross_entropy",
                "-o", square])
        data = os.path.join(self.tmp.name, "square-data.pt")
        torch.save({"x": c.x % 16, "y": c.y % 16}, data)
        r = run([PIPETRAIN, "train", "--model", square, "--data", data] + common)
        self.assertNotIn("test accuracy", r.stdout)
        self.assertIn("note: no test accuracy is counted (the test loss is)", r.stderr)
        self.assertIn("dimension 1 and the last (2) both fit", r.stderr)

    def test_a_flattened_lm_output_trains_as_eager(self):
        """--loss lm takes scores flattened to [N x T, V]; the built-in loss's check on the probe
        narrowed them to 2 rows against 2 samples' targets, and refused them."""
        c = self.lm
        model = os.path.join(self.tmp.name, "flat-lm.pt")
        r = export(["--model", "toy_models:flat_lm", "--input-shape", f"{BATCH},16", "--input-dtype", "int64",
                    "--input-high", "32", "-o", model])
        self.assertEqual(r.returncode, 0, r.stderr)
        ck = os.path.join(self.tmp.name, "flat-lm")
        run([PIPETRAIN, "train", "--model", model, "--data", c.data_file, "--loss", "lm", "--steps", str(STEPS),
             "--batch-size", str(BATCH), "--lr", str(LR), "--momentum", str(MOMENTUM), "--no-shuffle", "--quiet",
             "--checkpoint-dir", ck, "--timeout", "60"])
        want = reference(toy_models.flat_lm, c.x, c.y,
                         lambda out, y: torch.nn.functional.cross_entropy(out, y.reshape(-1)), 1)
        self.assertEqual(max_relative_error(trained_state(model, ck), want), 0.0)

    def test_a_model_that_fails_in_bf16_alone_blames_the_precision(self):
        """nn.MultiheadAttention's fused path (evaluation mode, no gradients: how pipetrain checks
        and tests a model) fails under bf16 autocast in PyTorch 1.13. The error blamed the data
        file and its key 'x' (a token file has none), or printed a TorchScript traceback on
        synthetic data."""
        c = self.lm
        for data in (c.data_file, "synthetic"):
            with self.subTest(data=data):
                r = run_failing([PIPETRAIN, "train", "--model", c.model_file, "--data", data, "--loss", "lm",
                                 "--precision", "bf16", "--steps", "1", "--batch-size", str(BATCH)])
                self.assertNotEqual(r.returncode, 0, r.stderr)
                self.assertIn("--precision bf16: the model fails under bf16 autocast in evaluation mode without "
                              "gradients (as pipetrain checks and tests it), where it runs in fp32: ", r.stderr)
                self.assertNotIn("Traceback", r.stderr)
                self.assertNotIn("'x'", r.stderr)

    def test_weights_of_another_model_are_refused(self):
        """Read back with another model's file, a checkpoint names both layer counts (it failed
        later, on a tie or a shape)."""
        c = self.lm
        ck = os.path.join(self.tmp.name, "lm-one-step")
        run([PIPETRAIN, "train", "--model", c.model_file, "--data", c.data_file, "--loss", "lm", "--steps", "1",
             "--batch-size", str(BATCH), "--quiet", "--checkpoint-dir", ck])
        with self.assertRaises(ValueError) as e:
            trained_state(self.encdec.model_file, ck)
        self.assertIn("not the model it was trained from", str(e.exception))
        self.assertIn("embed.weight", trained_state(c.model_file, ck))  # its own model reads back
        # A checkpoint of a built-in model: no digest to compare, and of as many layers it was read
        # (another network's weights written, exit 0).
        zoo = os.path.join(self.tmp.name, "zoo-mlp")
        run([PIPETRAIN, "train", "--model", "mlp", "--width", "0.015625", "--data", "synthetic", "--synthetic-samples", "64",
             "--steps", "1", "--batch-size", "8", "--quiet", "--checkpoint-dir", zoo])
        with self.assertRaises(ValueError) as e:
            trained_state(c.model_file, zoo)
        self.assertIn("built-in model 'mlp'", str(e.exception))
        # Without a digest (a checkpoint older than them), a tensor of another shape is refused.
        older = os.path.join(self.tmp.name, "lm-no-digest")
        shutil.copytree(ck, older)
        other = os.path.join(self.tmp.name, "lm-wider.pt")
        r = export(["--model", "toy_models:tiny_lm", "--kwargs", '{"d": 48}', "--input-shape", f"{BATCH},16",
                    "--input-dtype", "int64", "--input-high", "32", "-o", other])
        self.assertEqual(r.returncode, 0, r.stderr)
        for manifest in glob.glob(os.path.join(older, "step-*", "manifest.json")):
            with open(manifest) as f:
                m = json.load(f)
            del m["model_sha256"]
            with open(manifest, "w") as f:
                json.dump(m, f)
        self.assertIn("embed.weight", trained_state(c.model_file, older))
        with self.assertRaises(ValueError) as e:
            trained_state(other, older)
        self.assertIn("has shape", str(e.exception))
        # Its command line writes over none of the files it reads (-o the model file replaced the
        # export with a state dict, exit 0).
        with open(c.model_file, "rb") as f:
            model_bytes = f.read()
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
        for out in (c.model_file, os.path.join(ck, "step-00000001", "manifest.json")):
            r = subprocess.run([sys.executable, "-m", "pipetrain.weights", c.model_file, ck, "-o", out],
                               capture_output=True, text=True, env=env)
            self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
            self.assertIn("which this command reads", r.stderr)
        with open(c.model_file, "rb") as f:
            self.assertEqual(f.read(), model_bytes)
        saved = os.path.join(self.tmp.name, "lm-weights.pt")
        r = subprocess.run([sys.executable, "-m", "pipetrain.weights", c.model_file, ck, "-o", saved],
                           capture_output=True, text=True, env=env)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("embed.weight", torch.load(saved))

    def test_a_damaged_checkpoint_is_refused(self):
        """A flipped bit in a layer file is refused by its CRC-32, naming the file, as --resume
        refuses it (read unchecked, the weights came out 8.9e37 off with exit 0); where it is the
        newest of a folder, the one before it is named."""
        c = self.lm
        ck = os.path.join(self.tmp.name, "lm-two-checkpoints")
        run([PIPETRAIN, "train", "--model", c.model_file, "--data", c.data_file, "--loss", "lm", "--steps", "2",
             "--checkpoint-every", "1", "--batch-size", str(BATCH), "--quiet", "--checkpoint-dir", ck])
        good = trained_state(c.model_file, ck)
        layer = os.path.join(ck, "step-00000002", "layer-1.tensors")
        with open(layer, "r+b") as f:
            f.seek(os.path.getsize(layer) - 3)
            byte = f.read(1)
            f.seek(-1, os.SEEK_CUR)
            f.write(bytes([byte[0] ^ 0x40]))
        for path in (ck, os.path.join(ck, "step-00000002")):
            with self.assertRaises(ValueError) as e:
                trained_state(c.model_file, path)
            self.assertIn(f"{layer}: checksum", str(e.exception))
        with self.assertRaises(ValueError) as e:
            trained_state(c.model_file, ck)
        self.assertIn("the checkpoint before it, step-00000001", str(e.exception))
        self.assertEqual(len(trained_state(c.model_file, os.path.join(ck, "step-00000001"))), len(good))

    def test_profile_plan_and_train_pipedream(self):
        """The README's "bring your model": export, profile, plan, train the plan with pipedream."""
        c = self.lm
        prof, plan = os.path.join(c.work, "lm-profile.json"), os.path.join(c.work, "lm-plan.json")
        run([PIPETRAIN, "profile", "--model", c.model_file, "--loss", c.loss_flag, "--batch-size", str(BATCH), "-o", prof])
        run([PIPETRAIN, "plan", "--profile", prof, "--workers", "3", "--bandwidth-gbps", "1", "-o", plan])
        for transport in ("threads", "gloo"):
            with self.subTest(transport=transport):
                # Epochs, not --steps: the plan (timed here) may replicate a stage, and its replicas
                # take minibatches in whole rounds, which a --steps of another multiple is refused.
                r = run([PIPETRAIN, "train", "--model", c.model_file, "--data", c.data_file, "--loss", c.loss_flag,
                         "--plan", plan, "--schedule", "pipedream", "--epochs", "2", "--batch-size", str(BATCH),
                         "--transport", transport])
                self.assertIn("test accuracy", r.stdout)

    def test_loss_kept_in_the_file_and_data_in_shards(self):
        c = self.encdec
        model = os.path.join(c.work, "encdec-own-loss.pt")
        run([PIPETRAIN, "export", "--model", "toy_models:encoder_decoder", "--input-shape", f"{BATCH},12",
             "--loss", "toy_models:half_cross_entropy", "--layers", "6", "-o", model])
        shards = os.path.join(c.work, "shards")
        os.makedirs(shards)
        half = BATCH * STEPS // 2  # the shards' concatenation, in name order, is the data set
        torch.save({"x": c.x[:half], "y": c.y[:half], "x_test": c.x[:BATCH], "y_test": c.y[:BATCH]},
                   os.path.join(shards, "a.pt"))
        torch.save({"x": c.x[half:], "y": c.y[half:]}, os.path.join(shards, "b.pt"))
        ck = os.path.join(c.work, "own-loss")
        run([PIPETRAIN, "train", "--model", model, "--data", shards, "--steps", str(STEPS), "--batch-size", str(BATCH),
             "--lr", str(LR), "--momentum", str(MOMENTUM), "--no-shuffle", "--quiet", "--checkpoint-dir", ck,
             "--schedule", "1f1b", "--stages", "3", "--microbatches", "2"])
        half_ce = lambda out, y: 0.5 * torch.nn.functional.cross_entropy(out, y)
        want = reference(c.make_model, c.x, c.y, half_ce, 2)
        err = max_relative_error(trained_state(model, ck), want)
        self.assertLess(err, 1e-5)
        # The full loss would have moved the weights twice as far: the file's loss was used.
        self.assertGreater(max_relative_error(trained_state(model, ck), c.want(2)), 1e-3)

    def test_a_loss_that_is_not_a_mean_over_samples_is_not_split(self):
        """A kept loss that sums over samples, or averages over the targets an ignore_index keeps
        (padding), is refused where a run splits minibatches (it trained another model, exit 0: 1/m
        of the summed gradient, 8x a padded batch's); one worker trains it whole, as PyTorch. Padding
        that first shows past the first 8 samples is found too (2.6e-2 off eager's weights, exit 0)."""
        c = self.encdec
        padded, late = c.y.clone(), c.y.clone()
        padded[:BATCH // 2 - 1] = -100  # the first half of a minibatch mostly padding
        late[-3:] = -100  # the first 8 samples keep all their targets
        shard = c.y.clone()
        shard[len(shard) // 2:] = -100  # a folder whose second shard is padding alone: each shard's own are equal
        unequal = "8 samples keeping unequal numbers of targets"
        for loss, y, said, shards in (("sum_cross_entropy", c.y, "the first 8 samples is", False),
                                      ("padded_cross_entropy", padded, unequal, False),
                                      ("padded_cross_entropy", late, unequal, False),
                                      ("padded_cross_entropy", shard, unequal, True)):
            with self.subTest(loss=loss, padded=int((y == -100).sum()), shards=shards):
                model = os.path.join(c.work, f"encdec-{loss}.pt")
                export(["--model", "toy_models:encoder_decoder", "--input-shape", f"{BATCH},12", "--loss",
                        f"toy_models:{loss}", "-o", model])
                data = os.path.join(c.work, f"{loss}-{int((y == -100).sum())}{'-shards' if shards else '.pt'}")
                if shards:
                    os.makedirs(data)
                    half = len(y) // 2
                    torch.save({"x": c.x[:half], "y": y[:half], "x_test": c.x[:BATCH], "y_test": c.y[:BATCH]},
                               os.path.join(data, "a.pt"))
                    torch.save({"x": c.x[half:], "y": y[half:]}, os.path.join(data, "b.pt"))
                else:
                    torch.save({"x": c.x, "y": y}, data)
                args = [PIPETRAIN, "train", "--model", model, "--data", data, "--steps", "1", "--batch-size", str(BATCH),
                        "--quiet"]
                r = run_failing(args + ["--schedule", "1f1b", "--stages", "2", "--microbatches", "2"])
                self.assertNotEqual(r.returncode, 0, r.stderr)
                self.assertIn("the model file's own loss is not a mean over samples: its loss on " + said, r.stderr)
                self.assertIn("1f1b splits each minibatch into 2 microbatches", r.stderr)
                if not shards:  # (the padded shard's minibatches have no mean: NaN, as in PyTorch)
                    run(args)

    def test_a_file_of_the_first_layout_still_trains(self):
        """A pipetrain.model/1 file (one TorchScript module whose children are the layers, exports
        before pipetrain.model/2) loads whole, says so, and trains as before."""
        import zipfile
        c = self.encdec
        with zipfile.ZipFile(c.model_file) as z:
            name = lambda tail: next(n for n in z.namelist() if n.endswith(tail))
            meta = json.loads(z.read(name("/extra/pipetrain.json")))
            layers = [torch.jit.load(io.BytesIO(z.read(name("/extra/" + f["file"])))) for f in meta["layer_files"]]
        self.assertEqual(meta["format"], "pipetrain.model/2")
        old = os.path.join(c.work, "encdec-v1.pt")
        chain = torch.jit.script(torch.nn.Sequential(collections.OrderedDict(zip(meta["children"], layers))))
        meta = {k: v for k, v in meta.items() if k != "layer_files"}
        meta["format"] = "pipetrain.model/1"
        torch.jit.save(chain, old, _extra_files={"pipetrain.json": json.dumps(meta)})
        ck = os.path.join(c.work, "encdec-v1-ck")
        r = run([PIPETRAIN, "train", "--model", old, "--data", c.data_file, "--steps", str(STEPS), "--batch-size",
                 str(BATCH), "--lr", str(LR), "--momentum", str(MOMENTUM), "--no-shuffle", "--quiet",
                 "--checkpoint-dir", ck, "--schedule", "1f1b", "--stages", "2", "--microbatches", "2",
                 "--transport", "gloo", "--timeout", "60"])
        self.assertIn("is a pipetrain.model/1 file, read whole by every worker", r.stderr)
        self.assertLess(max_relative_error(trained_state(old, ck), c.want(2)), 1e-5)

    def test_a_worker_reads_only_its_layers_of_a_model_file(self):
        """16 dense layers of 2048 x 2048 (268 MB of weights; with gradients and momentum 805 MB):
        each of 4 gloo ranks reads its stage's layers of the file, not the model, so its peak RSS
        (the OS's, from wait4) is far below one worker's."""
        model = os.path.join(self.tmp.name, "wide-mlp.pt")
        r = export(["--model", "toy_models:wide_mlp", "--kwargs", '{"depth": 16}', "--input-shape", "8,2048", "-o", model])
        self.assertEqual(r.returncode, 0, r.stderr)
        base = [PIPETRAIN, "train", "--model", model, "--data", "synthetic", "--synthetic-samples", "32",
                "--batch-size", "8", "--steps", "2", "--quiet", "--timeout", "60"]

        def peak_rss(args):
            # Through GNU time, whose wait4 sees the largest of the process and its children (the
            # ranks): a child of this process would count this process's own RSS (the kernel
            # keeps the high-water mark of the memory it was forked from across exec).
            report = os.path.join(self.tmp.name, "peak-rss.txt")
            r = run(["/usr/bin/time", "-f", "%M", "-o", report] + args)
            with open(report) as f:
                return int(f.read().split()[-1]) * 1024, r.stdout + r.stderr

        one, _ = peak_rss(base)
        rank, out = peak_rss(base + ["--stages", "4", "--schedule", "1f1b", "--microbatches", "2", "--transport", "gloo"])
        print(f"wide mlp: one worker {one / 1e6:.0f} MB, the largest gloo rank of 4 {rank / 1e6:.0f} MB "
              f"({rank / one:.2f}x)", file=sys.stderr)
        self.assertGreater(one, 805e6)
        self.assertLess(rank, 0.5 * one, out)

    def test_dropout_draws_each_layers_own_masks(self):
        """A layer's dropout masks are drawn per microbatch (seed, layer, microbatch): the same
        weights on 2 stages or 3, on threads or gloo, run after run, recomputed, and resumed. From
        the process's one generator, the threads of a run raced for it (weights 9% apart from run
        to run), and every gloo process drew the same masks, on each stage and each replica."""
        model = os.path.join(self.tmp.name, "dropout-mlp.pt")
        r = export(["--model", "toy_models:dropout_mlp", "--input-shape", "8,12", "-o", model])
        self.assertEqual(r.returncode, 0, r.stderr)
        data = os.path.join(self.tmp.name, "dropout-data.pt")
        g = torch.Generator().manual_seed(3)
        n = BATCH * 6
        torch.save({"x": torch.randn(n, 12, generator=g), "y": torch.randint(0, 5, (n,), generator=g)}, data)

        def trained(tag, extra, steps=6):
            ck = os.path.join(self.tmp.name, f"dropout-{tag}")
            run([PIPETRAIN, "train", "--model", model, "--data", data, "--steps", str(steps), "--batch-size", str(BATCH),
                 "--lr", "0.05", "--no-shuffle", "--quiet", "--checkpoint-dir", ck, "--timeout", "60"] + extra)
            return trained_state(model, ck)

        pipeline = ["--schedule", "1f1b", "--microbatches", "4"]
        want = trained("threads-2", pipeline + ["--stages", "2"])
        for tag, extra in [("threads-2-again", pipeline + ["--stages", "2"]),
                           ("gloo-2", pipeline + ["--stages", "2", "--transport", "gloo"]),
                           ("threads-3", pipeline + ["--stages", "3"]),
                           ("recomputed", pipeline + ["--stages", "2", "--recompute"])]:
            with self.subTest(run=tag):
                self.assertEqual(max_relative_error(trained(tag, extra), want), 0.0, tag)
        # Resumed after 3 steps: the masks of steps 4-6 are an uninterrupted run's.
        trained("resumed", pipeline + ["--stages", "2"], steps=3)
        self.assertEqual(max_relative_error(trained("resumed", pipeline + ["--stages", "2", "--resume"]), want), 0.0)
        # --seed keys the masks: a model file's layers drew with seed 0 whatever it said.
        self.assertGreater(max_relative_error(trained("seed-1", pipeline + ["--stages", "2", "--seed", "1"]), want), 1e-3)
        # Data parallelism's replicas draw on gloo what they draw on threads.
        dp = trained("dp-threads", ["--schedule", "dp", "--workers", "2", "--microbatches", "4"])
        self.assertEqual(max_relative_error(trained("dp-gloo", ["--schedule", "dp", "--workers", "2", "--microbatches", "4",
                                                                "--transport", "gloo"]), dp), 0.0)

    def test_noise_drawn_in_every_mode_trains_pipelined(self):
        """A forward that samples outside dropout (a VAE's torch.randn_like, drawn in evaluation mode
        too) was refused at export: its check ran the model and its chain of layers on other draws
        ("the chain of layers does not compute what the model computes"). Each check now runs on the
        same draws; the runtime keys them by layer and microbatch, so the pipelines train the
        weights of one stage of the same microbatches, recomputed or not, on threads or gloo."""
        model = os.path.join(self.tmp.name, "reparameterized.pt")
        r = export(["--model", "toy_models:reparameterized", "--input-shape", "8,12", "-o", model])
        self.assertEqual(r.returncode, 0, r.stderr)
        data = os.path.join(self.tmp.name, "reparameterized-data.pt")
        g = torch.Generator().manual_seed(5)
        n = BATCH * 4
        torch.save({"x": torch.randn(n, 12, generator=g), "y": torch.randint(0, 5, (n,), generator=g)}, data)

        def trained(tag, extra):
            ck = os.path.join(self.tmp.name, f"reparameterized-{tag}")
            run([PIPETRAIN, "train", "--model", model, "--data", data, "--steps", "4", "--batch-size", str(BATCH),
                 "--lr", "0.05", "--no-shuffle", "--quiet", "--checkpoint-dir", ck, "--timeout", "60",
                 "--schedule", "1f1b", "--microbatches", "4"] + extra)
            return trained_state(model, ck)

        want = trained("one-stage", ["--stages", "1"])
        torch.manual_seed(0)
        initial = toy_models.reparameterized().state_dict()
        self.assertGreater(max((want[k] - initial[k]).abs().max().item() for k in want), 1e-3)
        for tag, extra in [("threads-2", ["--stages", "2"]), ("gloo-3", ["--stages", "3", "--transport", "gloo"]),
                           ("recomputed", ["--stages", "2", "--recompute"])]:
            with self.subTest(run=tag):
                self.assertEqual(max_relative_error(trained(tag, extra), want), 0.0, tag)

    def test_boundary_of_two_tensors_trains_pipelined(self):
        self.assertIn("2 boundaries carrying several tensors", self.encdec.export_log)
        for transport in ("threads", "gloo"):
            with self.subTest(transport=transport):
                self.check(self.encdec, f"1f1b-6-{transport}",
                           ["--schedule", "1f1b", "--stages", "6", "--microbatches", "2", "--transport", transport], 2)


    def test_padded_targets_train_as_pytorchs_ignore_index(self):
        """Targets of -100 (PyTorch's ignore_index: padding after a text's end, a pixel without a
        label) train as eager PyTorch trains each minibatch whole: cross-entropy's mean over the
        targets it keeps. They were refused ("'y' holds -100"); a pipeline weighing each
        microbatch 1/m would weigh a padded microbatch's tokens up. Here the samples keep 0 to all
        16 of their tokens (a microbatch of padding alone, whose mean is 0/0), and the test loss
        and accuracy count the kept tokens alone."""
        c = self.lm
        g = torch.Generator().manual_seed(11)
        y = c.y.clone()
        keep = torch.randint(0, 17, (y.size(0),), generator=g)
        keep[0] = keep[1] = 0  # the first microbatch of 4: padding alone
        keep[2] = 16
        y[torch.arange(16).expand_as(y) >= keep[:, None]] = -100
        data = os.path.join(self.tmp.name, "padded-lm.pt")
        torch.save({"x": c.x, "y": y, "x_test": c.x[:BATCH], "y_test": y[:BATCH]}, data)

        def token_loss(out, t):
            return torch.nn.functional.cross_entropy(out.reshape(-1, out.size(-1)), t.reshape(-1))
        want = reference(c.make_model, c.x, y, token_loss, 1)
        model = c._seeded()
        model.load_state_dict(want)
        model.eval()
        with torch.no_grad():
            out = model(c.x[:BATCH])
        test_loss = token_loss(out, y[:BATCH]).item()
        kept = y[:BATCH] != -100
        test_accuracy = (out.argmax(-1)[kept] == y[:BATCH][kept]).double().mean().item()
        for tag, extra in (("one-worker", []),
                           ("1f1b-2-threads", ["--schedule", "1f1b", "--stages", "2", "--microbatches", "4"]),
                           ("gpipe-2-gloo", ["--schedule", "gpipe", "--stages", "2", "--microbatches", "4",
                                             "--transport", "gloo"]),
                           ("dp-2-threads", ["--schedule", "dp", "--workers", "2", "--microbatches", "4"])):
            with self.subTest(run=tag):
                ck = os.path.join(self.tmp.name, "padded-" + tag)
                r = run([PIPETRAIN, "train", "--model", c.model_file, "--data", data, "--loss", "lm", "--steps",
                         str(STEPS), "--batch-size", str(BATCH), "--lr", str(LR), "--momentum", str(MOMENTUM),
                         "--no-shuffle", "--checkpoint-dir", ck, "--timeout", "60"] + extra)
                err = max_relative_error(trained_state(c.model_file, ck), want)
                print(f"padded lm {tag}: max relative error {err:.2e}", file=sys.stderr)
                self.assertLess(err, 1e-5)
                if tag == "one-worker":  # the minibatch whole, as the reference computes it
                    self.assertEqual(err, 0.0)
                printed = re.search(r"^test loss (\S+)", r.stdout, re.M)
                self.assertIsNotNone(printed, r.stdout)
                self.assertAlmostEqual(float(printed.group(1)), test_loss, delta=1e-5 * test_loss)
                self.assertIn(f"test accuracy {100 * test_accuracy:.2f}%", r.stdout)
        # A class per sample, some unlabelled: cross-entropy skips them as --loss lm does.
        e = self.encdec
        labels = e.y.clone()
        labels[torch.randperm(labels.size(0), generator=g)[:labels.size(0) // 3]] = -100
        data = os.path.join(self.tmp.name, "unlabelled.pt")
        torch.save({"x": e.x, "y": labels, "x_test": e.x[:BATCH], "y_test": labels[:BATCH]}, data)
        ck = os.path.join(self.tmp.name, "unlabelled-1f1b")
        run([PIPETRAIN, "train", "--model", e.model_file, "--data", data, "--steps", str(STEPS), "--batch-size",
             str(BATCH), "--lr", str(LR), "--momentum", str(MOMENTUM), "--no-shuffle", "--quiet", "--checkpoint-dir",
             ck, "--timeout", "60", "--schedule", "1f1b", "--stages", "3", "--microbatches", "4"])
        err = max_relative_error(trained_state(e.model_file, ck),
                                 reference(e.make_model, e.x, labels, torch.nn.functional.cross_entropy, 1))
        print(f"unlabelled samples 1f1b-3: max relative error {err:.2e}", file=sys.stderr)
        self.assertLess(err, 1e-5)

    def test_an_embedding_with_max_norm_renormalises_as_pytorchs(self):
        """nn.Embedding and nn.EmbeddingBag with max_norm renormalise the rows they look up, in
        place, at every forward, evaluations too. TorchScript drops that, and export's own forwards
        had renormalised every row of the file's initial weights: 0.67 off eager after 3 steps,
        exit 0. Two forwards in flight on their stage fail in PyTorch's autograd, as in eager
        PyTorch, and are said in those terms. Its bool buffer reads back (pipetrain.weights
        stopped at "'bool'")."""
        model_file = os.path.join(self.tmp.name, "max-norm.pt")
        r = export(["--model", "toy_models:max_norm_bag", "--input-shape", f"{BATCH},6", "--input-dtype", "int64",
                    "--input-high", "32", "-o", model_file])
        self.assertEqual(r.returncode, 0, r.stderr)
        g = torch.Generator().manual_seed(5)
        x = torch.randint(0, 16, (STEPS * BATCH, 6), generator=g)  # rows 16..31 are never looked up
        y = torch.randint(0, 4, (STEPS * BATCH,), generator=g)
        data = os.path.join(self.tmp.name, "max-norm-data.pt")
        torch.save({"x": x, "y": y, "x_test": x[:BATCH], "y_test": y[:BATCH]}, data)
        model = toy_models.max_norm_bag()
        model.load_state_dict(reference(toy_models.max_norm_bag, x, y, torch.nn.functional.cross_entropy, 1))
        model.eval()
        with torch.no_grad():
            model(x[:BATCH])  # the test set's evaluation renormalises too
        want = {k: v.clone() for k, v in model.state_dict().items()}
        self.assertGreater(want["emb.weight"][16:].norm(dim=1).min().item(), 2.0)
        args = [PIPETRAIN, "train", "--model", model_file, "--data", data, "--steps", str(STEPS), "--batch-size",
                str(BATCH), "--lr", str(LR), "--momentum", str(MOMENTUM), "--no-shuffle", "--quiet", "--timeout", "60"]
        for tag, extra in (("one-worker", []),
                           ("1f1b-2-gloo", ["--schedule", "1f1b", "--stages", "2", "--microbatches", "1",
                                            "--transport", "gloo"])):
            with self.subTest(run=tag):
                ck = os.path.join(self.tmp.name, "max-norm-" + tag)
                run(args + ["--checkpoint-dir", ck] + extra)
                err = max_relative_error(trained_state(model_file, ck), want)
                print(f"max_norm embeddings {tag}: max relative error {err:.2e}", file=sys.stderr)
                self.assertLess(err, 1e-6)
        r = run_failing(args + ["--schedule", "1f1b", "--stages", "2", "--microbatches", "2"])
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("an embedding with max_norm renormalises its weight so): its stage must run each backward "
                      "before its next forward", r.stderr)

    def test_a_parameter_no_backward_reached_is_skipped_as_torch_optim_skips_it(self):
        """An expert no row was routed to gets no gradient, and torch.optim skips it: no weight
        decay, no momentum, no Adam step counted. pipetrain stepped every parameter with a zero
        gradient: 5.9e-3 off eager's weights after 6 AdamW steps, 2.2e-2 with SGD's decay on an
        expert eager never touches, exit 0 (a helper's audit). --zero-grad none skips it each step
        it is not reached (zero_grad(set_to_none=True), torch 2's default); zeros until its first
        gradient (torch 1.13's default). A replicated stage steps what any replica reached, and the
        zero head makes the first step's other gradients zero, reached or not: the replicas ask
        each other then."""
        model_file = os.path.join(self.tmp.name, "experts.pt")
        r = export(["--model", "toy_models:routed_experts", "--input-shape", f"{BATCH},12", "-o", model_file])
        self.assertEqual(r.returncode, 0, r.stderr)
        steps = 6
        g = torch.Generator().manual_seed(7)
        x, y = torch.randn(steps * BATCH, 12, generator=g), torch.randint(0, 5, (steps * BATCH,), generator=g)
        with torch.no_grad():  # the first step's zero gradients reach an expert on dp's second replica alone
            m = toy_models.routed_experts()
            chosen = m.moe.router(torch.tanh(m.inp(x[:BATCH]))).argmax(-1)
        self.assertTrue(set(chosen[BATCH // 2:].tolist()) - set(chosen[:BATCH // 2].tolist()))
        data = os.path.join(self.tmp.name, "experts-data.pt")
        torch.save({"x": x, "y": y, "x_test": x[:BATCH], "y_test": y[:BATCH]}, data)
        sgd = (["--lr", str(LR), "--momentum", str(MOMENTUM), "--weight-decay", "0.05"],
               lambda params: torch.optim.SGD(params, lr=LR, momentum=MOMENTUM, weight_decay=0.05),
               lambda opt: None)
        base = [PIPETRAIN, "train", "--model", model_file, "--data", data, "--steps", str(steps), "--batch-size",
                str(BATCH), "--no-shuffle", "--quiet", "--timeout", "60"]
        ce = torch.nn.functional.cross_entropy
        for name, opt in (("adamw", ADAMW), ("sgd", sgd)):
            none = reference(toy_models.routed_experts, x, y, ce, 1, optimizer=opt, steps=steps, set_to_none=True)
            zeros = reference(toy_models.routed_experts, x, y, ce, 1, optimizer=opt, steps=steps)
            # The data leave experts unreached: the two modes (and stepping everything) differ.
            self.assertGreater(max_relative_error(none, zeros), 1e-4)
            for mode, want, runs in (("none", none, (("one-worker", []),
                                                     ("1f1b-3", ["--schedule", "1f1b", "--stages", "3"]),
                                                     ("dp-2-gloo", ["--schedule", "dp", "--workers", "2",
                                                                    "--transport", "gloo"]))),
                                     ("zeros", zeros, (("one-worker", []),))):
                for tag, extra in runs:
                    with self.subTest(optimizer=name, zero_grad=mode, run=tag):
                        ck = os.path.join(self.tmp.name, f"experts-{name}-{mode}-{tag}")
                        run(base + opt[0] + ["--zero-grad", mode, "--checkpoint-dir", ck] + extra)
                        err = max_relative_error(trained_state(model_file, ck), want)
                        print(f"routed experts {name} --zero-grad {mode} {tag}: max relative error {err:.2e}",
                              file=sys.stderr)
                        self.assertLess(err, 1e-5)
            with self.subTest(optimizer=name, run="resumed"):  # each parameter's own count, from the checkpoint
                ck = os.path.join(self.tmp.name, f"experts-{name}-resumed")
                half = [a if a != str(steps) else str(steps // 2) for a in base]
                run(half + opt[0] + ["--checkpoint-dir", ck])
                run(base + opt[0] + ["--checkpoint-dir", ck, "--resume"])
                err = max_relative_error(trained_state(model_file, ck), none)
                print(f"routed experts {name} resumed at step {steps // 2}: max relative error {err:.2e}",
                      file=sys.stderr)
                self.assertLess(err, 1e-5)

    def test_label_smoothing_trains_as_pytorchs(self):
        """--label-smoothing as PyTorch's cross_entropy(label_smoothing=) trains (ViT's and
        translation's recipes; no flag reached it): eager PyTorch's weights, padding skipped as
        ever, and the test loss the plain cross-entropy, whose exp is the perplexity."""
        c = self.lm
        y = c.y.clone()
        y[1::2, 12:] = -100  # every other text ends early

        def token_loss(smoothing):
            return lambda out, t: torch.nn.functional.cross_entropy(out.reshape(-1, out.size(-1)), t.reshape(-1),
                                                                    label_smoothing=smoothing)
        want = reference(c.make_model, c.x, y, token_loss(0.1), 1)
        data = os.path.join(self.tmp.name, "smoothed-lm.pt")
        torch.save({"x": c.x, "y": y, "x_test": c.x[:BATCH], "y_test": y[:BATCH]}, data)
        model = c._seeded()
        model.load_state_dict(want)
        model.eval()
        with torch.no_grad():
            test_loss = token_loss(0.0)(model(c.x[:BATCH]), y[:BATCH]).item()
        for tag, extra in (("one-worker", []),
                           ("1f1b-2-gloo", ["--schedule", "1f1b", "--stages", "2", "--microbatches", "4",
                                            "--transport", "gloo"])):
            with self.subTest(run=tag):
                ck = os.path.join(self.tmp.name, "smoothed-" + tag)
                r = run([PIPETRAIN, "train", "--model", c.model_file, "--data", data, "--loss", "lm", "--steps",
                         str(STEPS), "--batch-size", str(BATCH), "--lr", str(LR), "--momentum", str(MOMENTUM),
                         "--no-shuffle", "--checkpoint-dir", ck, "--timeout", "60", "--label-smoothing", "0.1"] + extra)
                err = max_relative_error(trained_state(c.model_file, ck), want)
                print(f"label smoothing lm {tag}: max relative error {err:.2e}", file=sys.stderr)
                self.assertLess(err, 1e-5)
                if tag == "one-worker":
                    self.assertEqual(err, 0.0)
                printed = re.search(r"^test loss (\S+)", r.stdout, re.M)
                self.assertIsNotNone(printed, r.stdout)
                self.assertAlmostEqual(float(printed.group(1)), test_loss, delta=1e-5 * test_loss)
        # Resumed under another smoothing: said.
        r = run([PIPETRAIN, "train", "--model", c.model_file, "--data", data, "--loss", "lm", "--steps",
                 str(STEPS + 1), "--batch-size", str(BATCH), "--lr", str(LR), "--momentum", str(MOMENTUM),
                 "--no-shuffle", "--quiet", "--checkpoint-dir", os.path.join(self.tmp.name, "smoothed-one-worker"),
                 "--resume", "--label-smoothing", "0.2"])
        self.assertNotIn("other optimizer settings", r.stderr)
        self.assertIn(f"was trained with --label-smoothing 0.1 and this run smooths by 0.2: steps {STEPS + 1} on "
                      "differ", r.stderr)
        # A class per sample, on 3 stages.
        e = self.encdec
        data = os.path.join(self.tmp.name, "smoothed-classes.pt")
        torch.save({"x": e.x, "y": e.y, "x_test": e.x[:BATCH], "y_test": e.y[:BATCH]}, data)
        ck = os.path.join(self.tmp.name, "smoothed-1f1b")
        run([PIPETRAIN, "train", "--model", e.model_file, "--data", data, "--steps", str(STEPS), "--batch-size",
             str(BATCH), "--lr", str(LR), "--momentum", str(MOMENTUM), "--no-shuffle", "--quiet", "--checkpoint-dir",
             ck, "--timeout", "60", "--schedule", "1f1b", "--stages", "3", "--microbatches", "4",
             "--label-smoothing", "0.2"])
        smoothed = lambda out, t: torch.nn.functional.cross_entropy(out, t, label_smoothing=0.2)
        err = max_relative_error(trained_state(e.model_file, ck), reference(e.make_model, e.x, e.y, smoothed, 1))
        print(f"label smoothing classes 1f1b-3: max relative error {err:.2e}", file=sys.stderr)
        self.assertLess(err, 1e-5)
        # Other negative targets stay refused, and a file of padding alone has nothing to train on.
        for bad, said in ((-5, "'y' holds -5 but the model outputs 32 token scores (ids 0..31, or -100 for a "
                                "target to skip)"),
                          (-100, "every target of 'y' is -100")):
            with self.subTest(bad=bad):
                path = os.path.join(self.tmp.name, f"bad-padding{bad}.pt")
                torch.save({"x": c.x, "y": torch.where(y == -100, bad, y) if bad != -100 else torch.full_like(y, -100)},
                           path)
                r = run_failing([PIPETRAIN, "train", "--model", c.model_file, "--data", path, "--loss", "lm",
                                 "--steps", "1", "--batch-size", str(BATCH)])
                self.assertNotEqual(r.returncode, 0)
                self.assertIn(said, r.stderr)


def run_failing(args):
    env = dict(os.environ, PYTHONPATH=HERE)
    return subprocess.run(args, capture_output=True, text=True, env=env)


def flip_a_byte_of_the_largest_record(path):
    """Flips a bit in the middle of the zip archive's largest record (a tensor's bytes), leaving
    its recorded CRC-32 as it was; returns the record's name."""
    import zipfile
    with zipfile.ZipFile(path) as z:
        record = max(z.infolist(), key=lambda i: i.file_size)
    with open(path, "r+b") as f:
        f.seek(record.header_offset + 26)
        name_len, extra_len = struct.unpack("<HH", f.read(4))
        f.seek(record.header_offset + 30 + name_len + extra_len + record.file_size // 2)
        byte = f.read(1)
        f.seek(-1, 1)
        f.write(bytes([byte[0] ^ 0x10]))
    return record.filename


class Errors(unittest.TestCase):
    """A model or a data file that does not fit: a clear error before training, nothing written."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.model = os.path.join(cls.tmp.name, "ed.pt")
        r = export(["--model", "toy_models:encoder_decoder", "--input-shape", "4,12", "-o", cls.model])
        assert r.returncode == 0, r.stderr

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def test_a_file_is_written_only_where_it_fits(self):
        """torch 1.13's writer aborts on a full disk (exit 134, the partial file left): export and
        weights check the folder's free space first, and refuse saying how much is needed."""
        from pipetrain.files import check_room
        out = os.path.join(self.tmp.name, "state.pt")
        check_room(out, 1)
        with self.assertRaises(OSError) as e:
            check_room(out, 1 << 60)
        self.assertIn(f"it needs about {(1 << 60) / 2**20:.1f} MiB and {self.tmp.name} has", str(e.exception))

    def train_fails(self, data, *needles, extra=(), legacy=False):
        path = os.path.join(self.tmp.name, "data.pt")
        torch.save(data, path, _use_new_zipfile_serialization=not legacy)
        ck, metrics = os.path.join(self.tmp.name, "ck"), os.path.join(self.tmp.name, "m.csv")
        r = run_failing([PIPETRAIN, "train", "--model", self.model, "--data", path, "--steps", "1", "--batch-size", "4",
                         "--checkpoint-dir", ck, "--metrics", metrics, *extra])
        self.assertNotEqual(r.returncode, 0, r.stderr)
        for n in needles:
            self.assertIn(n, r.stderr)
        self.assertNotIn("Traceback", r.stderr)
        self.assertFalse(os.path.exists(ck) or os.path.exists(metrics), "something was written")

    def test_a_damaged_data_file_is_refused(self):
        """A flipped byte in a data file's tensor trained on (LibTorch does not check its CRC-32s)."""
        path = os.path.join(self.tmp.name, "damaged.pt")
        torch.save({"x": torch.randn(40, 12), "y": torch.randint(0, 5, (40,))}, path)
        record = flip_a_byte_of_the_largest_record(path)
        shards = os.path.join(self.tmp.name, "damaged-shards")
        os.makedirs(shards)
        os.link(path, os.path.join(shards, "a.pt"))
        for data in (path, shards):
            r = run_failing([PIPETRAIN, "train", "--model", self.model, "--data", data, "--steps", "1", "--batch-size", "4"])
            self.assertNotEqual(r.returncode, 0, r.stderr)
            self.assertIn(f"record '{record}' does not match its CRC-32", r.stderr)

    def test_the_same_export_writes_the_same_file(self):
        """TorchScript wrote a module's constants in an order that followed Python's per-process
        string hash seed: the same model exported twice had two SHA-256s, and pipetrain.weights
        refused a checkpoint trained from the other."""
        digests = set()
        for k in range(3):
            folder = os.path.join(self.tmp.name, f"again{k}")
            os.makedirs(folder)
            out = os.path.join(folder, "rs.pt")
            # Through the binary: each export its own interpreter, as users run it.
            run([PIPETRAIN, "export", "--model", "family_models:resnet_small", "--input-shape", "4,3,8,8", "-o", out])
            with open(out + ".sha256") as f:
                digests.add(f.read().split()[0])
        self.assertEqual(len(digests), 1, digests)

    def test_resuming_with_other_batches_for_batch_norm_is_said(self):
        """A model's BatchNorms follow the microbatches and --deferred-batch-norm: a resume under
        others trained on, exit 0, to other statistics and losses, without a word."""
        model, path = self.toy_mlp("batch_norm_mlp", "bn-resume", 64)
        train = [PIPETRAIN, "train", "--model", model, "--data", path, "--batch-size", "8", "--stages", "2",
                 "--schedule", "1f1b", "--quiet"]
        for name, again, said in (("same", [], None),
                                  ("other", ["--microbatches", "2"],
                                   "was trained with other batches for its BatchNorms (microbatches a minibatch 4 -> 2; "
                                   "--deferred-batch-norm on -> off): steps 3 on differ")):
            ck = os.path.join(self.tmp.name, "bn-ck-" + name)
            run(train + ["--steps", "2", "--checkpoint-dir", ck, "--microbatches", "4", "--deferred-batch-norm"])
            r = run(train + ["--steps", "4", "--checkpoint-dir", ck, "--resume"] +
                    (again or ["--microbatches", "4", "--deferred-batch-norm"]))
            if said:
                self.assertIn(said, r.stderr)
            else:
                self.assertNotIn("other batches for its BatchNorms", r.stderr)
        r = run([PIPETRAIN, "checkpoint", "inspect", ck])
        self.assertIn("(2 workers, 2 microbatches)", r.stdout)

    def test_resuming_a_dropout_model_with_other_microbatches_is_said(self):
        """Dropout's masks are drawn by microbatch: resumed with other --microbatches, a model
        trained on other masks than the run it continued, exit 0, without a word."""
        model, path = self.toy_mlp("dropout_mlp", "dropout-resume", 64)
        train = [PIPETRAIN, "train", "--model", model, "--data", path, "--batch-size", "8", "--stages", "2",
                 "--schedule", "1f1b", "--quiet"]
        said = "was trained with 4 microbatches a minibatch and this run takes 2: dropout's masks are drawn by microbatch"
        for name, microbatches in (("same", "4"), ("other", "2")):
            ck = os.path.join(self.tmp.name, "dropout-ck-" + name)
            run(train + ["--steps", "2", "--checkpoint-dir", ck, "--microbatches", "4"])
            r = run(train + ["--steps", "4", "--checkpoint-dir", ck, "--resume", "--microbatches", microbatches])
            self.assertIn("resuming from", r.stderr)
            if microbatches == "4":
                self.assertNotIn("dropout's masks", r.stderr)
            else:
                self.assertIn(said, r.stderr)

    def test_label_smoothing_without_the_built_in_cross_entropy_is_refused(self):
        """--label-smoothing smooths the built-in cross-entropy alone: under mse, or outside [0, 1],
        it is refused by name, not dropped."""
        model, data = self.toy_mlp("batch_norm_mlp", "smooth-mse", 16)
        torch.save({"x": torch.randn(16, 12), "y": torch.randn(16, 5)}, data)
        base = [PIPETRAIN, "train", "--model", model, "--data", data, "--batch-size", "8", "--steps", "1", "--quiet"]
        for extra, said in ((["--loss", "mse", "--label-smoothing", "0.1"], "--label-smoothing: --loss mse has no "
                                                                            "classes to smooth"),
                            (["--label-smoothing", "1.5"], "--label-smoothing: must be in 0..1")):
            r = run_failing(base + extra)
            self.assertNotEqual(r.returncode, 0, r.stderr)
            self.assertIn(said, r.stderr)

    def toy_mlp(self, factory, name, samples):
        """toy_models.FACTORY (12 features in, 5 classes out) exported as NAME.pt, and a data file
        of SAMPLES for it."""
        model, data = os.path.join(self.tmp.name, name + ".pt"), os.path.join(self.tmp.name, name + "-data.pt")
        r = export(["--model", "toy_models:" + factory, "--input-shape", "4,12", "-o", model])
        self.assertEqual(r.returncode, 0, r.stderr)
        torch.save({"x": torch.randn(samples, 12), "y": torch.randint(0, 5, (samples,))}, data)
        return model, data

    def test_batch_norm_over_few_samples_a_microbatch_is_noted(self):
        """A plan's microbatches of 2 samples trained a BatchNorm network over statistics of 2, as
        PyTorch would a batch of 2, without a word (regnet_y_400mf diverged in 16 microbatches of 2
        where one of 32 did not)."""
        model, data = self.toy_mlp("batch_norm_mlp", "bn-few", 64)
        base = [PIPETRAIN, "train", "--model", model, "--data", data, "--batch-size", "8", "--steps", "2", "--quiet",
                "--stages", "2", "--schedule", "1f1b"]
        r = run(base + ["--microbatches", "4"])
        self.assertIn("note: bn-few.pt's 1 BatchNorm normalises each microbatch over its own 2 samples, not the "
                      "minibatch's 8", r.stderr)
        r = run(base + ["--microbatches", "1"])
        self.assertNotIn("each microbatch over its own", r.stderr)
        # The profile counts them, for `plan` to note a split into microbatches of few samples.
        prof = os.path.join(self.tmp.name, "bn-few.json")
        run([PIPETRAIN, "profile", "--model", model, "--data", data, "--batch-size", "32", "-o", prof])
        with open(prof) as f:
            self.assertEqual(json.load(f)["batch_norms"], 1)

    def test_batch_norm_at_one_sample_a_microbatch_is_said_in_its_terms(self):
        """It failed at the first forward with a TorchScript traceback alone (as eager PyTorch fails)."""
        model, path = self.toy_mlp("batch_norm_mlp", "bn", 40)
        # In a worker's forward, in the timing of the layers for a split made here (at a batch of 1),
        # and in profile's: each with the flags that give it more, without the 70-line traceback.
        train = [PIPETRAIN, "train", "--model", model, "--data", path, "--steps", "1", "--stages", "2", "--schedule",
                 "1f1b"]
        for command, remedy in ((train + ["--batch-size", "4", "--microbatches", "4"], "fewer --microbatches"),
                                (train + ["--batch-size", "1", "--microbatches", "1"], "--batch-size is 1; give 2"),
                                ([PIPETRAIN, "profile", "--model", model, "--data", path, "--batch-size", "1", "-o",
                                  os.path.join(self.tmp.name, "p.json")], "time batches of 2 or more"),
                                # The default sizes' doing: it blamed --batch-sizes 1, which was never given.
                                ([PIPETRAIN, "profile", "--model", model, "--data", path, "--batch-size", "8", "-o",
                                  os.path.join(self.tmp.name, "p.json")],
                                 "(by default the batch's halves down to a sixteenth: 1 of --batch-size 8); give "
                                 "--batch-sizes of 2 or more (2,4)")):
            r = run_failing(command)
            self.assertNotEqual(r.returncode, 0, r.stderr)
            self.assertIn("a BatchNorm layer got one value per channel", r.stderr)
            self.assertIn(remedy, r.stderr)
            self.assertIn("got input size [1, 16]", r.stderr)
            self.assertNotIn("Traceback", r.stderr)

    def test_data_that_does_not_fit(self):
        x, y = torch.randn(40, 12), torch.randint(0, 5, (40,))
        self.train_fails({"x": torch.randn(40, 13), "y": y}, "data.pt", "'x' has shape [40, 13]", "takes [N, 12]")
        self.train_fails({"x": x.double(), "y": y}, "'x' is Double", "takes Float")
        too_high = torch.randint(0, 9, (40,))
        too_high[0] = 8  # drawn alone, 8 is missing from 1 draw in 110 (CI saw "'y' holds 7")
        self.train_fails({"x": x, "y": too_high}, "'y' holds 8", "outputs 5 classes")
        self.train_fails({"x": x, "y": y[:30]}, "'y' has shape [30]", "40 samples")
        # What the model outputs per minibatch of N, not its 2-sample probe's [2, 5].
        self.train_fails({"x": x, "y": y[:, None]}, "'y' has shape [40, 1]; the model outputs [N, 5], so cross-entropy "
                         "needs class ids of shape [N]")
        self.train_fails({"x": x, "y": y.float()}, "'y' is Float", "int64")
        self.train_fails({"x": x, "x_test": x}, "no 'y'")
        self.train_fails({"x": x}, "holds a dict of one entry", "a data file is a dict of tensors, 'x' and 'y'")
        # Said as Python names them (it said "'x' is a GenericDict"), and where LibTorch's unpickler
        # fails on a list of one, that (it said "a dict of one entry").
        self.train_fails({"x": {"a": x, "b": x}, "y": y}, "'x' is a dict, not a tensor")
        self.train_fails({"x": [x], "y": y}, "holds a list of one entry")
        self.train_fails({"x": x, "y": y}, "torch.save's legacy format", "save it again", legacy=True)
        # Token ids in a file not named .bin reached the archive reader, whose words alone were shown.
        tokens = os.path.join(self.tmp.name, "tokens.dat")
        with open(tokens, "wb") as f:
            f.write(struct.pack("<64H", *range(64)))
        r = run_failing([PIPETRAIN, "train", "--model", self.model, "--data", tokens, "--steps", "1"])
        self.assertNotEqual(r.returncode, 0, r.stderr)
        self.assertIn("tokens.dat: not a file torch.save wrote", r.stderr)
        self.assertIn("if it holds token ids, name it FILE.bin", r.stderr)
        self.train_fails({"x": x, "y": y, "labels": y}, "unknown key 'labels'")
        self.train_fails([x, y], "expected a dict of tensors")
        # LibTorch's unpickler asserts on an OrderedDict: its "INTERNAL ASSERT FAILED" was shown.
        from collections import OrderedDict
        self.train_fails(OrderedDict(x=x, y=y), "a dict subclass (an OrderedDict?)", "torch.save(dict(d), path)")
        self.train_fails({"x": x, "y": y}, "--loss lm", "int64 token ids", extra=("--loss", "lm"))
        # A NaN or an infinity is named at its sample (it trained until the loss was NaN, then
        # blamed the learning rate).
        nan, inf = x.clone(), x[:8].clone()
        nan[7, 2], inf[3, 0] = float("nan"), float("-inf")
        self.train_fails({"x": nan, "y": y}, "'x' holds nan (sample 7)", "makes the loss NaN")
        self.train_fails({"x": x, "y": y, "x_test": inf, "y_test": y[:8]}, "'x_test' holds -inf (sample 3)")

    def test_a_file_loss_is_tried_on_every_target(self):
        """A label past the classes at sample 20, with the loss kept in the file: only the first
        targets were tried, and training failed at that minibatch in a traceback that named
        neither the file nor the sample."""
        model = os.path.join(self.tmp.name, "ed-loss.pt")
        r = export(["--model", "toy_models:encoder_decoder", "--input-shape", "4,12", "--loss",
                    "toy_models:half_cross_entropy", "-o", model])
        self.assertEqual(r.returncode, 0, r.stderr)
        y = torch.randint(0, 5, (40,))
        y[20] = 5
        path = os.path.join(self.tmp.name, "label-past.pt")
        torch.save({"x": torch.randn(40, 12), "y": y}, path)
        r = run_failing([PIPETRAIN, "train", "--model", model, "--data", path, "--steps", "1", "--batch-size", "4"])
        self.assertNotEqual(r.returncode, 0, r.stderr)
        self.assertIn("label-past.pt: the model file's own loss refuses 'y' at sample 20 (5)", r.stderr)
        self.assertIn("Target 5 is out of bounds", r.stderr)

    def test_a_language_models_output_puts_its_samples_first(self):
        """A model whose scores are [T, N, V] (the sequence first) trained under --loss lm on
        misaligned targets, exit 0: the loss stayed at ln V and no accuracy was printed."""
        model = os.path.join(self.tmp.name, "seq-first.pt")
        r = export(["--model", "toy_models:sequence_first_lm", "--input-shape", "4,8", "--input-dtype", "int64",
                    "--input-high", "32", "-o", model])
        self.assertEqual(r.returncode, 0, r.stderr)
        x = torch.randint(0, 32, (40, 8))
        path = os.path.join(self.tmp.name, "tokens.pt")
        torch.save({"x": x, "y": x}, path)
        ids = os.path.join(self.tmp.name, "tokens.bin")
        x.flatten().to(torch.int16).numpy().tofile(ids)
        for data in (path, ids):
            with self.subTest(data=data):
                r = run_failing([PIPETRAIN, "train", "--model", model, "--data", data, "--loss", "lm", "--steps", "1",
                                 "--batch-size", "4"])
                self.assertNotEqual(r.returncode, 0, r.stderr)
                self.assertIn("--loss lm needs the model's output [N, T, V] for tokens [N, T]", r.stderr)
                self.assertIn(f"it outputs [8, {2 if data == path else 1}, 32] for tokens [N, 8]", r.stderr)

    def test_a_float16_output_is_named_before_training(self):
        """Scores in float16 failed at the first step, named by a kernel ("pipeline failed: worker 0
        at 0F0: "log_softmax_lastdim_kernel_impl" not implemented for 'Half'")."""
        model = os.path.join(self.tmp.name, "half-output.pt")
        r = export(["--model", "toy_models:half_output", "--input-shape", "4,12", "-o", model])
        self.assertEqual(r.returncode, 0, r.stderr)
        path = os.path.join(self.tmp.name, "half-data.pt")
        torch.save({"x": torch.randn(16, 12), "y": torch.randint(0, 5, (16,))}, path)
        r = run_failing([PIPETRAIN, "train", "--model", model, "--data", path, "--steps", "1", "--batch-size", "4",
                         "--stages", "2", "--schedule", "1f1b"])
        self.assertNotEqual(r.returncode, 0, r.stderr)
        self.assertIn(f"{path}: the model's output (Half, [N, 5]) fails cross-entropy: ", r.stderr)
        self.assertIn("return output.float(), or train with --precision bf16", r.stderr)
        self.assertNotIn("pipeline failed", r.stderr)

    def test_a_file_loss_that_cannot_train_is_refused(self):
        """A loss that detaches the output trained nothing, exit 0 (every weight as it started); one
        per sample failed at the first step in a C++ traceback; NaN in float targets blamed --lr."""
        cases = [("toy_models:detached_cross_entropy", torch.randint(0, 5, (40,)),
                  "gives the output no gradient, so nothing would train"),
                 ("toy_models:unreduced_cross_entropy", torch.randint(0, 5, (40,)),
                  "returns a tensor of shape [2], where a loss is one number")]
        nan = torch.randn(40, 5)
        nan[7, 1] = float("nan")
        cases.append(("toy_models:squared_error", nan, "'y' holds nan (sample 7)"))
        for loss, y, needle in cases:
            with self.subTest(loss=loss):
                model = os.path.join(self.tmp.name, loss.split(":")[1] + ".pt")
                r = export(["--model", "toy_models:encoder_decoder", "--input-shape", "4,12", "--loss", loss, "-o", model])
                self.assertEqual(r.returncode, 0, r.stderr)
                path = os.path.join(self.tmp.name, "loss-data.pt")
                torch.save({"x": torch.randn(40, 12), "y": y}, path)
                r = run_failing([PIPETRAIN, "train", "--model", model, "--data", path, "--steps", "1", "--batch-size", "4"])
                self.assertNotEqual(r.returncode, 0, r.stderr)
                self.assertIn(needle, r.stderr)
                self.assertNotIn("Exception raised from", r.stderr)  # no C++ backtrace

    def test_a_model_whose_own_backward_fails_is_refused_at_export(self):
        """The export's check ran the model's backward eagerly and died in a Python traceback."""
        r = export(["--model", "toy_models:in_place_after_tanh", "--input-shape", "4,12", "-o",
                    os.path.join(self.tmp.name, "in-place.pt")])
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("--model: the model's own forward and backward fail on the example batch", r.stderr)
        self.assertIn("modified by an inplace operation", r.stderr)

    def test_a_forward_that_changes_its_parameters_exports_their_first_values(self):
        """Export's own forwards moved them (a weight clipped as the forward runs, the same at every
        forward, which the check of the chain cannot tell), and the file started from the moved
        values, exit 0. They are put back from the model built again; where building it again
        gives another model, export refuses."""
        out = os.path.join(self.tmp.name, "clips.pt")
        r = export(["--model", "toy_models:clips_its_weight", "--input-shape", "4,12", "-o", out])
        self.assertEqual(r.returncode, 0, r.stderr)
        torch.manual_seed(0)
        first = toy_models.clips_its_weight().state_dict()
        self.assertGreater(first["body.lin.weight"].abs().max().item(), 0.1)
        held = {}
        with zipfile.ZipFile(out) as z:  # each layer's own archive (python/pipetrain/export.py)
            for record in z.namelist():
                if re.search(r"/extra/layer-\d+\.pt$", record):
                    held.update(torch.jit.load(io.BytesIO(z.read(record))).named_parameters())
        self.assertEqual(sorted(held), sorted(first))
        for n, p in held.items():
            self.assertTrue(torch.equal(p, first[n]), n)
        r = export(["--model", "toy_models:clips_another_weight", "--input-shape", "4,12", "-o", out + "2"])
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("--model: its forward changes 1 parameter in place (body.lin.weight), and building it again "
                      "under the same --seed gives another model", r.stderr)
        self.assertFalse(os.path.exists(out + "2"))

    def test_a_text_classifier_profiles_and_trains_on_synthetic_data(self):
        """Token ids in, a class a sample out: synthetic data gave it a language model's targets, a
        token each, and profile failed ("0D or 1D target tensor expected") under --loss cross-entropy."""
        model = os.path.join(self.tmp.name, "text-classifier.pt")
        r = export(["--model", "toy_models:max_norm_bag", "--input-shape", "8,6", "--input-dtype", "int64",
                    "--input-high", "32", "-o", model])
        self.assertEqual(r.returncode, 0, r.stderr)
        run([PIPETRAIN, "profile", "--model", model, "--loss", "cross-entropy", "--batch-size", "8", "-o",
             os.path.join(self.tmp.name, "text-classifier.json")])
        r = run([PIPETRAIN, "train", "--model", model, "--loss", "cross-entropy", "--data", "synthetic", "--batch-size",
                 "8", "--steps", "2", "--quiet"])
        self.assertRegex(r.stdout, r"test accuracy \d")

    def test_attention_torchscript_cannot_compile_is_named(self):
        """torch 1.13's TorchScript fails on nn.MultiheadAttention(bias=False) inside torch's own
        code ("'NoneType' object has no attribute or method 'dtype'"), which named neither."""
        r = export(["--model", "toy_models:unbiased_attention", "--input-shape", "4,3,12", "-o",
                    os.path.join(self.tmp.name, "unbiased.pt")])
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("attn is an nn.MultiheadAttention with bias=False or kdim/vdim other than embed_dim, which "
                      "torch 1.13's TorchScript cannot compile", r.stderr)
        self.assertIn("give it bias=True", r.stderr)

    def test_a_transformer_stack_kept_whole_is_said(self):
        """nn.TransformerEncoder stays one layer (torch.fx keeps torch.nn's modules whole), which
        no split divides: said, with the way to split it, where export said nothing."""
        r = export(["--model", "toy_models:stacked_encoder", "--input-shape", "4,6", "--input-dtype", "int64",
                    "--input-high", "32", "-o", os.path.join(self.tmp.name, "stacked.pt")])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertRegex(r.stderr, r"note: encoder \(TransformerEncoder\) is one layer, as torch.fx keeps "
                                   r"torch.nn's own modules whole: \d+% of the parameters")
        self.assertIn("hold them in an nn.ModuleList", r.stderr)
        # TorchScript's warning on its 2 encoder layers names the layer once (it said "layers 1 (...), 1 (...)").
        self.assertIn("note: TorchScript warned compiling layer 1 ('l1_encoder'): ", r.stderr)

    def test_a_file_loss_that_trains_is_not_refused(self):
        """The checks above refuse no loss that trains: one that shifts its input in place (the
        check's leaf output refused it), one that masks NaN targets, and any loss on a test set
        of one sample (checked against a probe of two, it failed in a C++ error)."""
        nan = torch.randn(40, 5)
        nan[7, 1] = float("nan")
        one = {"x_test": torch.randn(1, 12), "y_test": torch.randint(0, 5, (1,))}
        for loss, data in (("toy_models:shifted_cross_entropy", {"y": torch.randint(0, 5, (40,))}),
                           ("toy_models:masked_squared_error", {"y": nan}),
                           ("toy_models:half_cross_entropy", dict(one, y=torch.randint(0, 5, (40,))))):
            with self.subTest(loss=loss):
                model = os.path.join(self.tmp.name, loss.split(":")[1] + ".pt")
                r = export(["--model", "toy_models:encoder_decoder", "--input-shape", "4,12", "--loss", loss, "-o", model])
                self.assertEqual(r.returncode, 0, r.stderr)
                path = os.path.join(self.tmp.name, "trains.pt")
                torch.save(dict(data, x=torch.randn(40, 12)), path)
                r = run_failing([PIPETRAIN, "train", "--model", model, "--data", path, "--steps", "2", "--batch-size", "4"])
                self.assertEqual(r.returncode, 0, r.stderr)

    def test_a_loss_with_parameters_is_refused_at_export(self):
        """A loss's own parameter was neither trained nor checkpointed, without a word."""
        r = export(["--model", "toy_models:encoder_decoder", "--input-shape", "4,12", "--loss",
                    "toy_models:tempered_cross_entropy", "-o", os.path.join(self.tmp.name, "tempered.pt")])
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("--loss: the loss holds parameters of its own (temperature)", r.stderr)

    def test_a_directory_of_one_shard_without_a_test_set(self):
        shards = os.path.join(self.tmp.name, "one-shard")
        os.makedirs(shards, exist_ok=True)
        torch.save({"x": torch.randn(40, 12), "y": torch.randint(0, 5, (40,))}, os.path.join(shards, "a.pt"))
        r = run_failing([PIPETRAIN, "train", "--model", self.model, "--data", shards, "--steps", "1"])
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("one shard and no x_test", r.stderr)
        # With a second shard, the last one is held out for testing.
        torch.save({"x": torch.randn(8, 12), "y": torch.randint(0, 5, (8,))}, os.path.join(shards, "b.pt"))
        r = run([PIPETRAIN, "train", "--model", self.model, "--data", shards, "--steps", "2", "--batch-size", "4"])
        self.assertIn("40 training / 8 test samples", r.stderr)

    def test_model_file_that_is_not_an_export(self):
        plain = os.path.join(self.tmp.name, "plain.pt")
        torch.jit.script(torch.nn.Linear(12, 5)).save(plain)
        r = run_failing([PIPETRAIN, "train", "--model", plain, "--steps", "1"])
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("without pipetrain.json", r.stderr)
        self.assertIn("pipetrain export", r.stderr)
        junk = os.path.join(self.tmp.name, "junk.pt")
        with open(junk, "w") as f:
            f.write("not a model")
        r = run_failing([PIPETRAIN, "train", "--model", junk, "--steps", "1"])
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("junk.pt: not a TorchScript file", r.stderr)
        # torch.save's zip of a module is no TorchScript: it was called one, and the export the
        # message suggested refused the file.
        pickled = os.path.join(self.tmp.name, "pickled.pt")
        torch.save(torch.nn.Linear(12, 5), pickled)
        r = run_failing([PIPETRAIN, "train", "--model", pickled, "--steps", "1"])
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("pickled.pt: a file torch.save wrote (a pickle), not TorchScript", r.stderr)

    def test_model_file_digest(self):
        """A model file is code (docs/runtime.md): export writes its SHA-256 beside it, train
        prints it, a checkpoint records it, and a file changed since export is refused."""
        import hashlib
        import shutil
        with open(self.model, "rb") as f:
            digest = hashlib.sha256(f.read()).hexdigest()
        with open(self.model + ".sha256") as f:
            self.assertEqual(f.read(), f"{digest}  ed.pt\n")
        ck = os.path.join(self.tmp.name, "digest-ck")
        r = run([PIPETRAIN, "train", "--model", self.model, "--steps", "2", "--batch-size", "4", "--checkpoint-dir", ck])
        self.assertIn(f"model file {self.model}: sha256 {digest}", r.stderr)
        step = sorted(d for d in os.listdir(ck) if d.startswith("step-"))[-1]
        with open(os.path.join(ck, step, "manifest.json")) as f:
            self.assertEqual(json.load(f)["model_sha256"], digest)
        changed = os.path.join(self.tmp.name, "changed.pt")
        shutil.copy(self.model, changed)
        shutil.copy(self.model + ".sha256", changed + ".sha256")
        with open(changed, "ab") as f:
            f.write(b"\0")
        r = run_failing([PIPETRAIN, "train", "--model", changed, "--steps", "1"])
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("the file changed since it was exported", r.stderr)
        # Copied without its .sha256: its zip records' CRC-32s, which LibTorch does not check (a
        # flipped weight byte trained, exit 0). The copy as it was trains.
        bare = os.path.join(self.tmp.name, "bare.pt")
        shutil.copy(self.model, bare)
        r = run([PIPETRAIN, "train", "--model", bare, "--steps", "1", "--batch-size", "4"])
        record = flip_a_byte_of_the_largest_record(bare)
        r = run_failing([PIPETRAIN, "train", "--model", bare, "--steps", "1", "--batch-size", "4"])
        self.assertNotEqual(r.returncode, 0)
        self.assertIn(f"bare.pt: record '{record}' does not match its CRC-32", r.stderr)

    def test_what_export_cannot_split(self):
        out = os.path.join(self.tmp.name, "x.pt")
        # The last through the binary (its exit code and stderr), the others in this process.
        # A wrong example batch is the user's input, not a layer that fixes the batch: every
        # failure on it said "no layer may fix the batch size", and a size that is no number
        # ended in a traceback.
        for spec, needle, shape in (
                ("toy_models:branchy", "control flow", "8,4"),
                ("toy_models:fixed_batch", "it ran at batch 8 but at batch 12 failed", "8,4"),
                ("toy_models:nothing", "has no 'nothing'", "8,4"),
                ("toy_models:fixed_batch", "running it on the example batch (8,5, float32) failed", "8,5"),
                ("toy_models:fixed_batch", "expected positive sizes, batch first (64,3,32,32), got '8,x'", "8,x"),
                ("no_such_module:f", "cannot import", "8,4")):
            with self.subTest(spec=spec, shape=shape):
                args = ["--model", spec, "--input-shape", shape, "-o", out]
                r = run_failing([PIPETRAIN, "export"] + args) if spec.startswith("no_such") else export(args)
                self.assertEqual(r.returncode, 2, r.stderr)
                self.assertIn(needle, r.stderr)
                self.assertEqual("fix the batch size" in r.stderr, needle.startswith("it ran at batch"), r.stderr)
                self.assertNotIn("Traceback", r.stderr)
                self.assertFalse(os.path.exists(out))

    def test_a_model_returned_in_evaluation_mode_is_noted(self):
        """A factory returning model.eval() exported and trained in evaluation mode without a word
        (BatchNorm's running statistics never moved), as PyTorch would train it: now said at export."""
        out = os.path.join(self.tmp.name, "evalmode.pt")
        r = export(["--model", "toy_models:batch_norm_in_eval_mode", "--input-shape", "8,16", "-o", out])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("returned its model in evaluation mode (.eval())", r.stderr)
        r = export(["--model", "toy_models:spare_head", "--input-shape", "8,4", "-o", out])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertNotIn("evaluation mode", r.stderr)

    def test_no_layer_begins_by_writing_into_its_input(self):
        """A layer that began with an in-place write (squeezenet1_0 --layers 22 put features.1, a
        ReLU(inplace=True), alone) exported, exit 0, and profile and every split failed on the leaf
        input a stage receives, in TorchScript's words. Export keeps such a write with what made its
        input, and refuses, by layer, one it cannot see."""
        data = os.path.join(self.tmp.name, "inplace-data.pt")
        torch.save({"x": torch.randn(16, 16), "y": torch.randint(0, 4, (16,))}, data)
        for toy, layers in (("in_place_activation", "3"), ("in_place_activation_sequential", "0")):
            out = os.path.join(self.tmp.name, toy + ".pt")
            r = export(["--model", "toy_models:" + toy, "--input-shape", "8,16", "--layers", layers, "-o", out])
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertIn("2 layers", r.stdout)
            run([PIPETRAIN, "profile", "--model", out, "--data", data, "--batch-size", "8", "-o",
                 os.path.join(self.tmp.name, toy + ".json")])
        r = export(["--model", "toy_models:writes_its_input", "--input-shape", "8,16", "-o",
                    os.path.join(self.tmp.name, "writes.pt")])
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("layer 1 (1) writes into its input in place", r.stderr)

    def test_a_forward_that_reads_self_training(self):
        """Export traced in eval mode, so what reads self.training outside torch.nn's layers was
        frozen to evaluation (F.dropout never dropped, a training-only branch never ran), exit 0. A
        submodule that reads it is kept whole and follows the mode; the model's own forward
        reading it is refused."""
        out = os.path.join(self.tmp.name, "fdrop.pt")
        r = export(["--model", "toy_models:functional_dropout", "--input-shape", "8,16", "-o", out])
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("FunctionalDropout.forward computes otherwise in training than in evaluation", r.stderr)
        model = os.path.join(self.tmp.name, "halving.pt")
        r = export(["--model", "toy_models:train_only_halving", "--input-shape", "8,16", "-o", model])
        self.assertEqual(r.returncode, 0, r.stderr)
        g = torch.Generator().manual_seed(3)
        x, y = torch.randn(BATCH * STEPS, 16, generator=g), torch.randint(0, 4, (BATCH * STEPS,), generator=g)
        data, ck = os.path.join(self.tmp.name, "halving-data.pt"), os.path.join(self.tmp.name, "halving-ck")
        torch.save({"x": x, "y": y, "x_test": x[:BATCH], "y_test": y[:BATCH]}, data)
        run([PIPETRAIN, "train", "--model", model, "--data", data, "--steps", str(STEPS), "--batch-size", str(BATCH),
             "--lr", str(LR), "--momentum", str(MOMENTUM), "--no-shuffle", "--quiet", "--checkpoint-dir", ck,
             "--stages", "2", "--schedule", "1f1b", "--microbatches", "2"])
        want = reference(toy_models.train_only_halving, x, y, torch.nn.functional.cross_entropy, 2)
        self.assertLess(max_relative_error(trained_state(model, ck), want), 1e-5)

    def test_what_a_trace_cannot_see_is_refused(self):
        """A trace records tensor operations and nothing around them: torch.no_grad() in the model's
        own forward, and a custom autograd.Function's backward, trained another model, exit 0 (its
        stem trained; the straight-through gradient was round's, zero). Export compares the
        parameters' gradients too."""
        out = os.path.join(self.tmp.name, "untraceable.pt")
        for spec, needle in (("toy_models:no_grad_stem", "stem.weight otherwise than the model does (the model's "
                              "forward gives it no gradient, the chain one)"),
                             ("toy_models:straight_through", "a.weight otherwise than the model does (max difference")):
            with self.subTest(spec=spec):
                r = export(["--model", spec, "--input-shape", "8,12", "-o", out])
                self.assertEqual(r.returncode, 2, r.stderr)
                self.assertIn(needle, r.stderr)
                self.assertFalse(os.path.exists(out))

    def train_against_eager(self, name, make, microbatches, extra, tag="", export_extra=(), optimizer=None):
        """The model exported and trained by pipetrain, and by eager PyTorch on the same rows, the
        test set's evaluation included (a buffer a forward updates in any mode moves there too,
        each microbatch of it): their states. SGD, or `optimizer` (ADAMW's form)."""
        model = os.path.join(self.tmp.name, name + ".pt")
        r = export(["--model", f"toy_models:{name}", "--input-shape", f"{BATCH},12", "-o", model, *export_extra])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.export_stderr = r.stderr
        g = torch.Generator().manual_seed(5)
        x, y = torch.randn(BATCH * STEPS, 12, generator=g), torch.randint(0, 5, (BATCH * STEPS,), generator=g)
        x_test = torch.randn(BATCH, 12, generator=g)
        data, ck = os.path.join(self.tmp.name, name + "-data.pt"), os.path.join(self.tmp.name, name + tag + "-ck")
        torch.save({"x": x, "y": y, "x_test": x_test, "y_test": y[:BATCH]}, data)
        stepping = optimizer[0] if optimizer else ["--lr", str(LR), "--momentum", str(MOMENTUM)]
        run([PIPETRAIN, "train", "--model", model, "--data", data, "--steps", str(STEPS), "--batch-size", str(BATCH),
             "--no-shuffle", "--quiet", "--checkpoint-dir", ck] + stepping + extra)
        want = reference(make, x, y, torch.nn.functional.cross_entropy, microbatches, optimizer=optimizer)
        torch.manual_seed(0)
        eager = make()
        start = {k: v.clone() for k, v in eager.state_dict().items()}
        eager.load_state_dict(want)
        eager.eval()
        with torch.no_grad():
            for part in x_test.chunk(microbatches):
                eager(part.clone())
        return trained_state(model, ck), eager.state_dict(), start

    def test_a_forward_that_updates_state_trains_as_eager(self):
        """fx ran what a forward does to a buffer alone (self.calls += 1, self.mean.mul_(0.9)) once
        while tracing and recorded none of it: the counter was not in the file, the file's average
        started where export's own forwards had moved it, and train's checks moved it again. A
        forward that modified its input in place changed the data set's rows (the checks'
        forwards ran on views of it). A submodule's torch.no_grad() is kept whole."""
        for stages, microbatches in ((1, 1), (2, 2), (3, 2)):
            with self.subTest(stages=stages):
                extra = [] if stages == 1 else ["--stages", str(stages), "--schedule", "1f1b",
                                                "--microbatches", str(microbatches)]
                got, want, start = self.train_against_eager("stateful_forward", toy_models.stateful_forward,
                                                            microbatches, extra, tag=str(stages))
                self.assertEqual(set(got), set(want))
                self.assertEqual(got["a1.calls"].item(), STEPS * microbatches + microbatches)
                self.assertTrue(torch.equal(got["stem.lin.weight"], start["stem.lin.weight"]), "the frozen stem trained")
                self.assertLess(max_relative_error(got, want), 1e-6)

    def test_hashed_ids_cross_a_packed_boundary_exact(self):
        """Integer ids packed beside activations into one tensor at a cut crossed as float32, exact
        only up to 2^24: hashed bigrams (1000003 a + b) were rounded and other rows of their
        embedding looked up, 1.0e-2 off eager with exit 0 (and export refused an example batch that
        reached 2^24 as a chain that does not compute the model). They cross as float64."""
        model, data = os.path.join(self.tmp.name, "hashed.pt"), os.path.join(self.tmp.name, "hashed-data.pt")
        r = export(["--model", "toy_models:hashed_bigrams", "--input-shape", f"{BATCH},16", "--input-dtype", "int64",
                    "--input-high", "32", "--layers", "4", "-o", model])
        self.assertEqual(r.returncode, 0, r.stderr)
        g = torch.Generator().manual_seed(5)
        x, y = torch.randint(1, 32, (BATCH * STEPS, 16), generator=g), torch.randint(0, 4, (BATCH * STEPS,), generator=g)
        torch.save({"x": x, "y": y, "x_test": x[:BATCH], "y_test": y[:BATCH]}, data)
        want = reference(toy_models.hashed_bigrams, x, y, torch.nn.functional.cross_entropy, 1)
        for stages in (1, 4):
            with self.subTest(stages=stages):
                ck = os.path.join(self.tmp.name, f"hashed-{stages}-ck")
                extra = [] if stages == 1 else ["--stages", str(stages), "--schedule", "1f1b", "--microbatches", "1"]
                run([PIPETRAIN, "train", "--model", model, "--data", data, "--loss", "cross-entropy", "--steps",
                     str(STEPS), "--batch-size", str(BATCH), "--lr", str(LR), "--momentum", str(MOMENTUM),
                     "--no-shuffle", "--quiet", "--checkpoint-dir", ck] + extra)
                self.assertLess(max_relative_error(trained_state(model, ck), want), 1e-6)

    def test_int64_ids_cross_a_packed_boundary_exact(self):
        """Ids hashed into int64's range (here 2^55 to 2^62) packed beside activations at a cut
        crossed as float64, exact only up to 2^53: the second embedding looked up other rows, 0.2 off
        eager on one worker and on two, exit 0, from a file exported with ids below 2^31 (one exported
        with ids past 2^53 was refused as a chain that does not compute the model). An int64 crosses
        as its two 32-bit halves."""
        model, data = os.path.join(self.tmp.name, "ids64.pt"), os.path.join(self.tmp.name, "ids64-data.pt")
        r = export(["--model", "toy_models:hashed_ids", "--input-shape", f"{BATCH},6", "--input-dtype", "int64",
                    "--input-high", str(2 ** 31), "--layers", "4", "-o", model])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("boundaries carrying several tensors", r.stdout)
        g = torch.Generator().manual_seed(7)
        x, y = torch.randint(2 ** 55, 2 ** 62, (BATCH * STEPS, 6), generator=g), torch.randint(0, 4, (BATCH * STEPS,), generator=g)
        torch.save({"x": x, "y": y, "x_test": x[:BATCH], "y_test": y[:BATCH]}, data)
        want = reference(toy_models.hashed_ids, x, y, torch.nn.functional.cross_entropy, 1)
        for stages in (1, 2):
            with self.subTest(stages=stages):
                ck = os.path.join(self.tmp.name, f"ids64-{stages}-ck")
                extra = [] if stages == 1 else ["--stages", str(stages), "--schedule", "1f1b", "--microbatches", "1"]
                run([PIPETRAIN, "train", "--model", model, "--data", data, "--loss", "cross-entropy", "--steps",
                     str(STEPS), "--batch-size", str(BATCH), "--lr", str(LR), "--momentum", str(MOMENTUM),
                     "--no-shuffle", "--quiet", "--checkpoint-dir", ck] + extra)
                self.assertLess(max_relative_error(trained_state(model, ck), want), 1e-6)

    def test_a_buffer_read_again_layers_later_stays_with_its_module(self):
        """A running mean a submodule updates, read again by attribute at the output: export cut
        between them, each layer kept its own copy of the buffer, and the later one never moved
        (8.5e-2 off eager on one worker, exit 0). The two now share a layer."""
        for stages in (1, 3):
            with self.subTest(stages=stages):
                extra = [] if stages == 1 else ["--stages", str(stages), "--schedule", "1f1b", "--microbatches", "1"]
                got, want, start = self.train_against_eager("mean_read_at_the_output", toy_models.mean_read_at_the_output,
                                                            1, extra, tag=str(stages))
                self.assertFalse(torch.equal(got["norm.m"], start["norm.m"]), "the running mean did not move")
                self.assertLess(max_relative_error(got, want), 1e-6)

    def test_paths_that_meet_as_libtorch_names_train_as_eager(self):
        """proj.weight and proj_weight were one name in LibTorch (dots made underscores): train and
        profile failed, blaming the data file."""
        for stages in (1, 2):
            with self.subTest(stages=stages):
                extra = [] if stages == 1 else ["--stages", "2", "--schedule", "1f1b", "--microbatches", "2"]
                got, want, _ = self.train_against_eager("names_that_meet", toy_models.names_that_meet,
                                                        1 if stages == 1 else 2, extra, tag=str(stages))
                self.assertEqual(set(got), set(want))
                self.assertLess(max_relative_error(got, want), 1e-6)

    def test_a_non_persistent_buffer_stays_out_of_the_weights(self):
        """A buffer registered persistent=False came back as a state_dict key the model does not
        have (load_state_dict(strict=True) failed, strict=False ignored it)."""
        got, want, _ = self.train_against_eager("transient_buffer", toy_models.transient_buffer, 1, [])
        self.assertEqual(set(got), set(want))
        self.assertLess(max_relative_error(got, want), 1e-6)

    def test_a_parameter_of_no_elements_exports_and_trains(self):
        """Export's gradient check ended in a traceback (the max of an empty gradient)."""
        got, want, _ = self.train_against_eager("empty_parameter", toy_models.empty_parameter, 1, [])
        self.assertEqual(set(got), set(want))
        self.assertEqual(got["none"].numel(), 0)
        del got["none"], want["none"]
        self.assertLess(max_relative_error(got, want), 1e-6)

    def test_a_users_buffer_named_like_deferred_batch_norms_sums_reads_back(self):
        """pipetrain.weights dropped every buffer named pt_*, meant for deferred BatchNorm's sums
        alone: a user's pt_count counted 4 forwards in the checkpoint and was missing from the
        state_dict, so load_state_dict(strict=False) kept its 0 (exit 0)."""
        got, want, start = self.train_against_eager("counted_forwards", toy_models.counted_forwards, 1, [])
        self.assertEqual(set(got), set(want))
        self.assertEqual(got["pt_count"].item(), STEPS + 1)
        self.assertLess(max_relative_error(got, want), 1e-6)

    def test_recomputing_a_forward_that_reads_buffers_it_updates_is_refused_naming_them(self):
        """Refusing it is right (a recomputed forward reads its running means moved on), but the
        message blamed random numbers the forward does not draw; it names the buffers now."""
        model = os.path.join(self.tmp.name, "recompute_buffers.pt")
        r = export(["--model", "toy_models:centred_by_running_mean", "--input-shape", f"{BATCH},12", "-o", model])
        self.assertEqual(r.returncode, 0, r.stderr)
        g = torch.Generator().manual_seed(6)
        data = os.path.join(self.tmp.name, "recompute_buffers.pt.data.pt")
        torch.save({"x": torch.randn(64, 12, generator=g), "y": torch.randint(0, 5, (64,), generator=g)}, data)
        r = subprocess.run([PIPETRAIN, "train", "--model", model, "--data", data, "--steps", "1", "--batch-size",
                            str(BATCH), "--stages", "2", "--schedule", "1f1b", "--microbatches", "2", "--recompute"],
                           capture_output=True, text=True)
        self.assertNotEqual(r.returncode, 0, r.stderr)
        self.assertIn("its output differs: the forward updates buffers (", r.stderr)
        self.assertIn("_mean) and reads what it updated", r.stderr)
        self.assertNotIn("random numbers", r.stderr)

    def test_an_id_past_a_smaller_embedding_of_a_packed_input_is_named(self):
        """Only the sample holding the largest id was run: a segment id 5 (3 rows) beside token ids
        up to 19 (20 rows) trained a step and failed at its minibatch in a TorchScript traceback, or
        at the final evaluation with no checkpoint written. Each position's largest is tried now."""
        model = os.path.join(self.tmp.name, "packed_ids.pt")
        r = export(["--model", "toy_models:packed_ids", "--input-shape", f"{BATCH},7", "--input-dtype", "int64",
                    "--input-high", "3", "-o", model])
        self.assertEqual(r.returncode, 0, r.stderr)
        g = torch.Generator().manual_seed(4)
        x = torch.cat([torch.randint(0, 3, (40, 1), generator=g), torch.randint(0, 20, (40, 6), generator=g)], 1)
        y = torch.randint(0, 5, (40,), generator=g)
        # 20: every position's largest is 19 (sample 0's tokens), and sample 20's segment id is 19 too
        for row, expect in ((None, None), (11, "'x' holds token id 5 at position 0 of sample 11, which the model refuses"),
                            (38, "'x' holds token id 4 at position 0 of sample 38, which the model refuses"),
                            (20, "'x' holds token id 19 at position 0 of sample 20, which the model refuses")):
            with self.subTest(row=row):
                bad = x.clone()
                if row == 20:
                    bad[0, 1:] = 19
                if row is not None:
                    bad[row, 0] = {11: 5, 38: 4, 20: 19}[row]  # 38: in the held-out tenth
                data, ck = (os.path.join(self.tmp.name, f"packed-{row}{s}") for s in ("-data.pt", "-ck"))
                torch.save({"x": bad, "y": y}, data)
                r = subprocess.run([PIPETRAIN, "train", "--model", model, "--data", data, "--steps", "2", "--batch-size",
                                    str(BATCH), "--no-shuffle", "--quiet", "--checkpoint-dir", ck],
                                   capture_output=True, text=True)
                if expect is None:
                    self.assertEqual(r.returncode, 0, r.stderr)
                    continue
                self.assertNotEqual(r.returncode, 0, r.stderr)
                self.assertIn(expect, r.stderr)
                self.assertNotIn("Traceback", r.stderr)
                self.assertFalse(os.path.exists(ck), "a checkpoint folder was made")

    def test_synthetic_ids_are_those_the_export_said_the_model_takes(self):
        """Synthetic data drew a token classifier's ids below its classes: a model of 4 token ids
        and 10 classes failed its embedding's lookup in profile and train (a TorchScript traceback).
        export records --input-high, and the ids are drawn below it."""
        model = os.path.join(self.tmp.name, "few_tokens.pt")
        r = export(["--model", "toy_models:few_tokens_many_classes", "--input-shape", f"{BATCH},12", "--input-dtype",
                    "int64", "--input-high", "4", "-o", model])
        self.assertEqual(r.returncode, 0, r.stderr)
        for args in (["profile", "--model", model, "--batch-size", str(BATCH), "--repeats", "1", "--warmup", "0",
                      "-o", os.path.join(self.tmp.name, "few_tokens_profile.json")],
                     ["train", "--model", model, "--steps", "2", "--batch-size", str(BATCH), "--quiet"]):
            with self.subTest(command=args[0]):
                r = subprocess.run([PIPETRAIN] + args, capture_output=True, text=True)
                self.assertEqual(r.returncode, 0, r.stderr)

    def test_a_parameter_the_forward_gives_no_gradient_takes_no_step(self):
        """torch.optim skips a parameter without a gradient: one read under torch.no_grad() (a
        submodule's) or through .detach(). pipetrain stepped it with a zero gradient, and AdamW's
        weight decay moved it (1.2e-3 in 4 steps on 2 stages), exit 0. export keeps it frozen now."""
        for name, make, param in (("stateful_forward", toy_models.stateful_forward, "stem.lin.weight"),
                                  ("detached_offset", toy_models.detached_offset, "offset")):
            for stages in (1, 2):
                with self.subTest(model=name, stages=stages):
                    extra = [] if stages == 1 else ["--stages", "2", "--schedule", "1f1b", "--microbatches", "2"]
                    got, want, start = self.train_against_eager(name, make, 1 if stages == 1 else 2, extra,
                                                                tag=f"-adamw{stages}", optimizer=ADAMW)
                    self.assertIn(f"get no gradient from it (read under torch.no_grad() or through .detach()): {param}",
                                  self.export_stderr)
                    self.assertTrue(torch.equal(got[param], start[param]), f"{param} moved")
                    self.assertLess(max_relative_error(got, want), 2e-5)

    def test_a_module_an_nn_sequential_holds_twice_is_a_tie(self):
        """named_children() lists it once: the chain had a layer fewer than the model, refused."""
        got, want, _ = self.train_against_eager("shared_in_sequential", toy_models.shared_in_sequential, 2,
                                                ["--stages", "3", "--schedule", "1f1b", "--microbatches", "2"])
        self.assertLess(max_relative_error(got, want), 1e-6)

    def test_the_same_data_by_another_path_resumes(self):
        """A checkpoint names its data by path and CRC: the same file moved, or named from another
        folder, was refused as other data ("trained on file:../d.pt ..., but this run's data is
        file:d.pt ...", the same CRC). The same samples resume, said; other samples are refused."""
        model = os.path.join(self.tmp.name, "moved_data_model.pt")
        r = export(["--model", "toy_models:detached_offset", "--input-shape", f"{BATCH},12", "-o", model])
        self.assertEqual(r.returncode, 0, r.stderr)
        first, moved = (os.path.join(self.tmp.name, d) for d in ("data-here", "data-moved"))
        os.makedirs(first)
        g = torch.Generator().manual_seed(3)
        torch.save({"x": torch.randn(64, 12, generator=g), "y": torch.randint(0, 5, (64,), generator=g)},
                   os.path.join(first, "d.pt"))
        ck = os.path.join(self.tmp.name, "moved-data-ck")

        def train(folder, steps):
            return subprocess.run([PIPETRAIN, "train", "--model", model, "--data", os.path.join(folder, "d.pt"),
                                   "--batch-size", "8", "--steps", str(steps), "--checkpoint-dir", ck]
                                  + (["--resume"] if steps > 2 else []), capture_output=True, text=True)
        r = train(first, 2)
        self.assertEqual(r.returncode, 0, r.stderr)
        os.rename(first, moved)
        r = train(moved, 4)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn(f"was trained on file:{first}/d.pt, and this run reads file:{moved}/d.pt (", r.stderr)
        self.assertIn("): the same samples", r.stderr)
        torch.save({"x": torch.randn(64, 12, generator=g), "y": torch.randint(0, 5, (64,), generator=g)},
                   os.path.join(moved, "d.pt"))
        r = train(moved, 6)
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertIn(f"the checkpoint was trained on file:{moved}/d.pt (", r.stderr)
        self.assertIn("but this run's data is", r.stderr)

    def test_a_replicas_own_buffers_survive_a_resume(self):
        """Nothing keeps a replica's buffers in step with replica 0's, and a checkpoint held replica
        0's alone: resumed, a forward reading the running average it updates trained 7e-4 apart
        from the run it continued (dp on 2 workers), exit 0. Each replica's own are kept now."""
        import shutil
        model = os.path.join(self.tmp.name, "stateful_dp.pt")
        r = export(["--model", "toy_models:stateful_forward", "--input-shape", f"{BATCH},12", "-o", model])
        self.assertEqual(r.returncode, 0, r.stderr)
        g = torch.Generator().manual_seed(3)
        data = os.path.join(self.tmp.name, "stateful_dp.data.pt")
        torch.save({"x": torch.randn(256, 12, generator=g), "y": torch.randint(0, 5, (256,), generator=g)}, data)
        straight, resumed = (os.path.join(self.tmp.name, "dp-" + n) for n in ("straight", "resumed"))
        args = [PIPETRAIN, "train", "--model", model, "--data", data, "--batch-size", "16", "--workers", "2",
                "--schedule", "dp", "--steps", "12", "--checkpoint-every", "6", "--quiet"]
        run(args + ["--checkpoint-dir", straight])
        os.makedirs(resumed)
        shutil.copytree(os.path.join(straight, "step-00000006"), os.path.join(resumed, "step-00000006"))
        run(args + ["--checkpoint-dir", resumed, "--resume"])
        want, got = (os.path.join(d, "step-00000012") for d in (straight, resumed))
        files = sorted(f for f in os.listdir(want) if f != "manifest.json")
        self.assertTrue(any(".replica-1." in f for f in files), files)
        self.assertEqual(files, sorted(f for f in os.listdir(got) if f != "manifest.json"))
        for f in files:
            with open(os.path.join(want, f), "rb") as a, open(os.path.join(got, f), "rb") as b:
                self.assertEqual(a.read(), b.read(), f)

    def test_a_module_held_twice_inside_one_layer_trains_as_eager(self):
        """Exported as one layer: LibTorch listed its weights under both paths, and train refused the
        layer as holding 10 parameters where pipetrain.json lists 8. pipetrain.weights gives back
        both paths (the file lists the first)."""
        got, want, _ = self.train_against_eager("shared_in_sequential", toy_models.shared_in_sequential, 1, [],
                                                tag="layers1", export_extra=["--layers", "1"])
        self.assertEqual(set(got), set(want))
        self.assertLess(max_relative_error(got, want), 1e-6)

    def test_a_batch_norm_an_nn_sequential_holds_twice_keeps_one_set_of_statistics(self):
        """Ties join parameters: each layer holding it kept running statistics of its own, 0.56
        relative from eager's, exit 0. The children between its uses are now one layer."""
        for stages in (1, 2):
            with self.subTest(stages=stages):
                extra = ["--stages", str(stages), "--schedule", "1f1b", "--microbatches", "2"]
                got, want, _ = self.train_against_eager("shared_batch_norm_in_sequential",
                                                        toy_models.shared_batch_norm_in_sequential, 2, extra,
                                                        tag=str(stages))
                self.assertIn("note: 1 and 4 hold the same buffers (one module held twice): 1..4 are one layer",
                              self.export_stderr)
                self.assertEqual(set(got), set(want))
                self.assertLess(max_relative_error(got, want), 1e-6)

    def test_parameters_the_forward_never_uses_are_named(self):
        """They are not in the file and go untrained: export says which (it dropped them without
        a word)."""
        out = os.path.join(self.tmp.name, "spare.pt")
        r = export(["--model", "toy_models:spare_head", "--input-shape", "8,4", "-o", out])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("note: 2 of the model's parameters are not in the file, as its forward never uses them: "
                      "spare.weight, spare.bias", r.stderr)


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--pipetrain", required=True)
    a, rest = p.parse_known_args()
    PIPETRAIN = os.path.abspath(a.pipetrain)
    unittest.main(argv=[sys.argv[0]] + rest)
