"""What export checks before it writes a model file: the layers, compiled as the runtime will run
them, give the model's output and its parameters' gradients on the example batch, each run from
the same state. A trace records tensor operations only: code that switches autograd's mode
(torch.no_grad()), a custom torch.autograd.Function (traced through its forward, whose autograd
then replaces its backward) or a buffer the forward rebinds would train another model, exit 0,
if only the output were compared.
"""
import contextlib
import hashlib

import torch


class ExportError(Exception):
    pass


# Tolerances of the comparison, relative to the largest output value or gradient: the chain runs
# the model's own operations, so only the order of float sums may differ.
RTOL, ATOL = 1e-4, 1e-5


@contextlib.contextmanager
def state_kept(*modules):
    """Puts every buffer back as it was, the same tensor with the same values: the analysis's and
    the check's forwards must leave the file the model's state (an average a module updates in
    any mode moved on each of them, and export wrote the moved one)."""
    saved = []
    for module in modules:
        for m in module.modules():
            for name, b in m._buffers.items():
                if b is not None:
                    saved.append((m, name, b, b.detach().clone()))
    try:
        yield
    finally:
        with torch.no_grad():
            for m, name, b, value in saved:
                m._buffers[name] = b
                b.copy_(value)


def _digest(p):
    """A parameter's bytes, hashed in place (no copy: one of every parameter would double export's
    memory). Its version counter would not do: the check for gradients that never reach a
    parameter moves it and back."""
    return hashlib.blake2b(p.detach().contiguous().reshape(-1).view(torch.uint8).numpy().data).digest()


class WeightsKept:
    """The parameters as they were before export's forwards, put back before the file is written.
    An embedding with max_norm renormalises the rows it looks up, in place, on every forward: the
    file held the rows the analysis and the check had moved (exit 0, 0.67 off eager's weights
    after 3 steps). A moved parameter's first values come from the model built again by `remake`
    (the callable under the same seed, or the TorchScript file read again), where that gives the
    same model; copies kept of every parameter would double export's memory for a rare case."""

    def __init__(self, model, remake):
        self.model, self.remake = model, remake
        self.digests = {n: _digest(p) for n, p in model.named_parameters()}

    def put_back(self):
        params = dict(self.model.named_parameters())
        moved = [n for n, p in params.items() if _digest(p) != self.digests[n]]
        if not moved:
            return
        first, again = (dict(self.remake().named_parameters()) for _ in range(2))
        # The same model again: every parameter the forwards left alone equal to its rebuilt one,
        # and the moved ones equal in two builds.
        same = all(n in first and n in again and first[n].shape == params[n].shape for n in params) and all(
            _digest(first[n]) == (_digest(again[n]) if n in moved else self.digests[n]) for n in params)
        if not same:
            raise ExportError(f"--model: its forward changes {len(moved)} parameter{'s' if len(moved) > 1 else ''} "
                              f"in place ({', '.join(moved[:5])}{', ...' if len(moved) > 5 else ''}), and building it "
                              "again under the same --seed gives another model, so export cannot put their first "
                              "values back after the forwards it runs to analyse and check it: seed every random "
                              "draw of its construction from torch's generator, or change them outside forward")
        with torch.no_grad():
            for n in moved:
                params[n].copy_(first[n])


def _gradients(run, x, params):
    """run(x)'s output, and each parameter's gradient of a fixed random projection of it (None
    where the output does not reach the parameter). Each run draws the same random numbers: a
    forward that samples in evaluation mode (a VAE's torch.randn_like, noise injected) draws
    them in the same order in the model and in its chain, and the runtime keys each layer's
    draws (docs/runtime.md); the user's generator is left as it was."""
    for p in params:
        p.grad = None
    with torch.random.fork_rng(devices=[]):
        torch.random.default_generator.manual_seed(4)
        out = run(x.clone())  # a clone each: a forward that modifies its input in place
    if isinstance(out, torch.Tensor) and out.is_floating_point() and out.requires_grad:
        weights = torch.randn(out.shape, generator=torch.Generator().manual_seed(2), dtype=out.dtype)
        (out * weights).sum().backward()
    grads = [None if p.grad is None else p.grad.detach().clone() for p in params]
    for p in params:
        p.grad = None
    return (out.detach() if isinstance(out, torch.Tensor) else out), grads


def _chain(layers):
    def run(h):
        for i, m in enumerate(layers):
            try:
                h = m(h)
            except Exception as e:  # compiled, but failing where eager ran: a parametrization
                why = str(e).strip().splitlines()
                raise ExportError(f"--model: layer {i}, compiled by TorchScript, fails on the example batch where "
                                  f"the model's own code runs: {why[-1] if why else type(e).__name__}") from None
        return h
    return run


def check_chain(model, layers, x):
    """Refuses (ExportError) layers whose output or gradients differ from the model's. Returns the
    trainable parameters (name, parameter) to which the model's forward gives no gradient."""
    named, seen = [], set()
    for name, p in model.named_parameters():
        if p.requires_grad and id(p) not in seen:
            seen.add(id(p))
            named.append((name, p))
    params = [p for _, p in named]
    with state_kept(model, *layers):
        try:
            expected, want = _gradients(model, x, params)
        except ExportError:
            raise
        except Exception as e:  # the user's own forward or backward, run eagerly: a traceback said nothing more
            why = str(e).strip().splitlines()
            raise ExportError(f"--model: the model's own forward and backward fail on the example batch, run as "
                              f"PyTorch runs them: {why[-1] if why else type(e).__name__}") from None
    with state_kept(model, *layers):
        got, have = _gradients(_chain(layers), x, params)
    if not isinstance(expected, torch.Tensor) or got.shape != expected.shape or \
            not torch.allclose(got, expected, rtol=RTOL, atol=ATOL):
        raise ExportError("--model: the chain of layers does not compute what the model computes "
                          f"(max difference {(got - expected).abs().max().item() if got.shape == expected.shape else 'shape'}); "
                          "its forward may not be a chain of its children")
    scale = max([g.abs().max().item() for g in want if g is not None and g.numel()] + [0.0])
    gradient_free = []
    for (name, p), g_want, g_have in zip(named, want, have):
        if g_want is None and g_have is None:
            gradient_free.append((name, p))
            continue
        if g_want is None:
            why = "the model's forward gives it no gradient, the chain one"
        elif g_have is None:
            why = "the model's forward gives it a gradient, the chain none"
        elif g_want.numel() == 0:  # a parameter of no elements (torch.zeros(0)) has no gradient to differ
            continue
        else:
            worst = (g_have - g_want).abs().max().item()
            if worst <= ATOL * max(scale, 1e-30) + RTOL * g_want.abs().max().item():
                continue
            why = f"max difference {worst:.3g}, the model's largest gradient {scale:.3g}"
        raise ExportError(
            f"--model: the chain of layers computes the gradient of {name} otherwise than the model does ({why}). A trace records tensor operations "
            "and nothing around them: torch.no_grad() or torch.enable_grad() in the model's own forward (a "
            "submodule's forward that uses them is kept whole, and TorchScript keeps them), or a custom "
            "torch.autograd.Function (the trace keeps its forward, and autograd of that replaces its backward: "
            "write it with tensor operations whose gradient is the one wanted, e.g. x + (f(x) - x).detach() for a "
            "straight-through estimator)")
    return gradient_free


def reached_without_gradient(model, x, candidates):
    """Of `candidates` (name, parameter), none of which gets a gradient, those that move the model's
    output on the example batch: read under torch.no_grad() or through .detach(). A parameter the
    batch does not reach (an expert no row was routed to) is not one; nor is any where the output
    is not the same on two forwards (noise drawn in evaluation mode), which cannot tell."""
    if not candidates:
        return []
    def output():
        with torch.no_grad(), state_kept(model):
            return model(x.clone())
    base = output()
    if not isinstance(base, torch.Tensor) or not torch.equal(base, output()):
        return []
    found = []
    for name, p in candidates:
        saved = p.detach().clone()
        with torch.no_grad():  # a draw of its own scale: a constant shift can cancel (a softmax's bias)
            p.add_(torch.randn(p.shape, generator=torch.Generator().manual_seed(3), dtype=p.dtype) * (1 + saved.abs()))
        try:
            moved = output()
        finally:
            with torch.no_grad():
                p.copy_(saved)
        if not torch.equal(moved, base):
            found.append((name, p))
    return found


def check_leaf_inputs(model, layers, names, x):
    """Refuses (ExportError) a layer that writes into its input: a pipeline stage receives its input
    as a leaf whose gradient it needs, and `pipetrain profile` times each layer so, where autograd
    forbids the write (export keeps such an operation with what made its input; this catches one
    inside a submodule's own code)."""
    with state_kept(model, *layers):
        h = x
        for i, (m, name) in enumerate(zip(layers, names)):
            given = h.detach().requires_grad_() if i > 0 and h.is_floating_point() else h
            try:
                h = m(given).detach()
            except RuntimeError as e:
                if "in-place" not in str(e):
                    raise
                why = str(e).strip().splitlines()[-1].removeprefix("RuntimeError: ").rstrip(".")
                raise ExportError(f"--model: layer {i} ({name}) writes into its input in place, which a pipeline "
                                  f"stage starting with it receives as a leaf whose gradient it needs (autograd: {why}). Make the operation out of place "
                                  "(inplace=False, x = x + y), or export with another --layers") from None
