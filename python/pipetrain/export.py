"""pipetrain export: a user's PyTorch model as a TorchScript chain of layers pipetrain can cut between.

Run by `pipetrain export` with Debian's python3-torch. The written file's top level holds one
child per layer, run in order; each takes one tensor and returns one tensor. A boundary that
carries several tensors (a residual stream beside an encoder's output) is packed by the layer
before it into one flat tensor and unpacked by the layer after it, so the runtime and its
transports move one tensor per microbatch and autograd flows through the packing.
The layer names and the input's shape and dtype go into the file as `extra/pipetrain.json`.

The file (pipetrain.model/2) holds each layer as a TorchScript archive of its own, an extra record
`extra/layer-<i>.pt` that pipetrain.json indexes (its size, its parameters' names, shapes and
dtypes, its buffers' names), so that a worker reads only its stage's layers; the top-level module
holds the loss alone. A parameter tied across layers is saved in each layer that holds it and
made one tensor again where one process holds several of them.
"""
import argparse
import collections
import contextlib
import dis
import importlib
import importlib.util
import inspect
import io
import json
import math
import linecache
import operator
import os
import re
import sys
import time
import traceback
import warnings

import torch
import torch.fx
from torch.fx.passes.shape_prop import ShapeProp

try:
    from pipetrain.batch_norm import DeferrableBatchNorm, make_deferrable
    from pipetrain.module_swap import renorming, replace_modules
    from pipetrain.files import check_room, file_sha256
    from pipetrain.export_check import (ExportError, WeightsKept, check_chain, check_leaf_inputs,
                                        reached_without_gradient, state_kept)
except ImportError:  # run as a script from python/pipetrain
    from batch_norm import DeferrableBatchNorm, make_deferrable
    from module_swap import renorming, replace_modules
    from files import check_room, file_sha256
    from export_check import (ExportError, WeightsKept, check_chain, check_leaf_inputs, reached_without_gradient,
                              state_kept)

FORMAT = "pipetrain.model/2"
# The input dtypes pipetrain trains on (src/model/scripted_model.cpp): float64 and int32 were
# offered too, and wrote files train refused.
DTYPES = {"float32": torch.float32, "int64": torch.int64}


def parse_args(argv):
    p = argparse.ArgumentParser(
        prog="pipetrain export", description=__doc__.split("\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="What torch.fx follows: tuple unpacking (B, T, C = x.shape; q, k, v = t.split(C, 2); "
               "out, (h, c) = lstm(x)),\nsizes read in forward and tensors built from them (torch.arange(T), "
               "torch.ones(T, T)).\nA submodule whose forward branches on a tensor's value is kept whole as one "
               "layer.\nRefused, with the line named: such a branch in the model's own forward (move it into a "
               "submodule\nor a @torch.fx.wrap function), a fixed batch size, several inputs, a tuple or dict "
               "output.\nTied parameters are recorded and stay one parameter. docs/import.md has the table.")
    p.add_argument("--model", required=True,
                   help="MODULE:CALLABLE returning an nn.Module (MODULE from PYTHONPATH or the current directory), "
                        "or a TorchScript file whose children run in order")
    p.add_argument("--input-shape", required=True, help="Example batch shape, batch first: 64,3,32,32")
    p.add_argument("--input-dtype", default="float32", choices=sorted(DTYPES), help="Input dtype (int64: token ids)")
    p.add_argument("--input-high", type=int, default=None,
                   help="Integer inputs: example values in [0, HIGH) (default 2); given, the file records it, and "
                        "synthetic data for a token classifier draws its ids below it")
    p.add_argument("--kwargs", default="{}", help="JSON object of keyword arguments for CALLABLE")
    p.add_argument("--layers", type=int, default=0, help="Layers to cut the model into (0: its natural boundaries)")
    p.add_argument("--max-boundary-tensors", type=int, default=4,
                   help="Most tensors a cut may carry when --layers asks for more layers than single-tensor cuts give")
    p.add_argument("--loss", default="", help="MODULE:CALLABLE returning an nn.Module loss(output, target), kept in the file")
    p.add_argument("--seed", type=int, default=0, help="torch.manual_seed before CALLABLE (its random weights)")
    p.add_argument("-o", "--output", required=True, help="TorchScript file to write")
    return p.parse_args(argv)


def import_callable(spec, flag):
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise ExportError(f"{flag}: expected MODULE:CALLABLE, got '{spec}'")
    try:
        module = importlib.import_module(module_name)
    except Exception as e:  # the user's module may raise anything while importing
        raise ExportError(f"{flag}: cannot import '{module_name}' (PYTHONPATH={os.environ.get('PYTHONPATH', '')}): {e}")
    obj = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise ExportError(f"{flag}: '{module_name}' has no '{attr}'")
        obj = getattr(obj, part)
    if not callable(obj):
        raise ExportError(f"{flag}: '{spec}' is not callable")
    return obj


def input_files(args):
    """(flag, path) of each file the export reads: --model's TorchScript file, or the source of the
    modules --model and --loss name (`export --model models:mlp -o models.py` wrote the TorchScript
    zip over the user's models.py, exit 0)."""
    files = []
    for flag, spec in (("--model", args.model), ("--loss", args.loss)):
        if not spec:
            continue
        if flag == "--model" and os.path.isfile(spec):
            files.append((flag, spec))
            continue
        try:
            found = importlib.util.find_spec(spec.partition(":")[0])
        except (ImportError, ValueError):  # import_callable names it later
            continue
        if found is not None and found.origin and os.path.isfile(found.origin):
            files.append((flag, found.origin))
    return files


def example_input(shape, dtype, high, batch=None):
    shape = list(shape)
    if batch is not None:
        shape[0] = batch
    g = torch.Generator().manual_seed(1)
    if dtype.is_floating_point:
        return torch.randn(shape, generator=g, dtype=dtype)
    return torch.randint(0, high, shape, generator=g, dtype=dtype)


def input_description(x):
    """What --input-shape, --input-dtype and --input-high made of the example batch."""
    dims = ",".join(str(d) for d in x.shape)
    if x.dtype.is_floating_point:
        return f"{dims}, {str(x.dtype).replace('torch.', '')}"
    return f"{dims}, {str(x.dtype).replace('torch.', '')}, ids 0 to {int(x.max()) if x.numel() else 0}"


def time_call(fn, repeats=3):
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


# ---------------------------------------------------------------- tracing the code people write

def _proxy_iter(self):
    """Proxy.__iter__ for Python 3.11: `B, T, C = x.shape`, `q, k, v = t.split(d, 2)` and
    `out, (h, c) = lstm(x)` unpack a traced value into getitem nodes. torch 1.13 finds the
    unpacking instruction at index f_lasti // 2, which Python 3.11's inline caches broke; the
    instruction's byte offset still finds it."""
    frame = inspect.currentframe().f_back
    for inst in dis.get_instructions(frame.f_code):
        if inst.offset == frame.f_lasti:
            if inst.opname == "UNPACK_SEQUENCE":
                return (self[i] for i in range(inst.argval))
            break
    return self.tracer.iter(self)


# Tensor factories that take sizes (`torch.arange(T)` with T = x.size(1)): their arguments are
# plain numbers to the C++ argument parser, so a traced size never reaches __torch_function__.
FACTORIES = ("arange", "ones", "zeros", "full", "empty", "rand", "randn", "eye", "linspace", "tril_indices",
             "triu_indices")


def _has_proxy(a):
    if isinstance(a, torch.fx.Proxy):
        return True
    if isinstance(a, (list, tuple)):
        return any(_has_proxy(x) for x in a)
    if isinstance(a, dict):
        return any(_has_proxy(x) for x in a.values())
    return False


@contextlib.contextmanager
def traceable():
    """While tracing: unpacking of traced values, and factories called with traced sizes
    recorded as graph nodes."""
    saved_iter = torch.fx.proxy.Proxy.__iter__
    saved = {name: getattr(torch, name) for name in FACTORIES}

    def recording(fn):
        def call(*args, **kwargs):
            if _has_proxy(args) or _has_proxy(kwargs):
                return _tracer_of(args, kwargs).create_proxy("call_function", fn, args, kwargs)
            return fn(*args, **kwargs)
        return call

    torch.fx.proxy.Proxy.__iter__ = _proxy_iter
    for name, fn in saved.items():
        setattr(torch, name, recording(fn))
    try:
        yield
    finally:
        torch.fx.proxy.Proxy.__iter__ = saved_iter
        for name, fn in saved.items():
            setattr(torch, name, fn)


def _tracer_of(args, kwargs):
    found = []
    torch.fx.node.map_aggregate((args, kwargs), lambda x: found.append(x) if isinstance(x, torch.fx.Proxy) else None)
    return found[0].tracer


def _user_line(tb):
    """'file:line: code' of the innermost frame of the user's code in a traceback."""
    torch_dir = os.path.dirname(torch.__file__)
    here = os.path.abspath(__file__)
    where = None
    for frame, line in traceback.walk_tb(tb):
        f = frame.f_code.co_filename
        if not f.startswith(torch_dir) and os.path.abspath(f) != here and not f.startswith("<"):
            where = (f, line)
    if where is None:
        return None
    src = linecache.getline(where[0], where[1]).strip()
    return f"{os.path.relpath(where[0]) if not where[0].startswith('/usr') else where[0]}:{where[1]}: {src}"


class ChainTracer(torch.fx.Tracer):
    """torch.fx's tracer that keeps `leaves` (module paths) whole, as it keeps torch.nn's own
    layers, and notes which module it was inside when tracing failed."""

    def __init__(self, leaves):
        super().__init__()
        self.leaves = leaves
        # A buffer becomes a node of the graph, as a parameter does: left a plain tensor, what the
        # forward does to it alone (self.ema.mul_(0.9), self.calls += 1) ran once while tracing
        # and was not recorded, so the file held neither the update nor the buffer's start.
        self.proxy_buffer_attributes = True
        self.stack = []
        self.failed_in = None

    def create_args_for_root(self, root_fn, is_module, concrete_args=None):
        """torch 1.13's fx rebuilds the code of a forward that takes keyword-only arguments, *args or
        **kwargs in Python 3.10's argument order, which 3.11 refuses ("code() argument 13 must be
        str"): such a forward is traced through one of its positional arguments alone, which calls
        it with the others at their defaults, as model(x) does."""
        code = root_fn.__code__
        if not (code.co_kwonlyargcount or code.co_flags & (inspect.CO_VARARGS | inspect.CO_VARKEYWORDS)):
            return super().create_args_for_root(root_fn, is_module, concrete_args)
        params = inspect.signature(root_fn).parameters.values()
        required = [p.name for p in params if p.kind == p.KEYWORD_ONLY and p.default is p.empty]
        if required:
            raise ExportError(f"--model: forward takes keyword-only argument(s) {', '.join(required)} without a "
                              "default; pipetrain feeds one tensor, as model(x) runs")
        names = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        scope = {"_pipetrain_users_forward": root_fn}  # a name no argument of the user's takes
        exec(f"def forward({', '.join(names)}):\n    return _pipetrain_users_forward({', '.join(names)})\n", scope)
        return super().create_args_for_root(scope["forward"], is_module, concrete_args)

    def is_leaf_module(self, m, path):
        return path in self.leaves or isinstance(m, DeferrableBatchNorm) or super().is_leaf_module(m, path)

    def call_module(self, m, forward, args, kwargs):
        path = self.path_of_module(m)
        self.stack.append(path)
        try:
            return super().call_module(m, forward, args, kwargs)
        except Exception:
            if self.failed_in is None:
                self.failed_in = list(self.stack)
            raise
        finally:
            self.stack.pop()


GRAD_MODES = ("no_grad", "enable_grad", "set_grad_enabled", "inference_mode")


def traced_otherwise(m):
    """Whether a module's own forward reads self.training (functional dropout, stochastic depth, a
    branch that only trains) or switches autograd's mode (torch.no_grad()): fx would bake in the
    mode it traces, or record the operations and drop the switch, so such a module is kept whole,
    and TorchScript follows the mode as the runtime switches it, and keeps the switch."""
    if type(m).__module__.startswith("torch.nn"):
        return False  # torch.nn's own layers: leaves of fx already
    try:
        source = inspect.getsource(type(m).forward)
    except (OSError, TypeError):
        return False
    return "training" in source or any(mode in source for mode in GRAD_MODES)


def defaults_of(model):
    """The forward's arguments after the first that have defaults, at their defaults: pipetrain feeds
    one tensor, as model(x) runs (forward(self, x, mask=None) was refused as taking 3 inputs)."""
    params = list(inspect.signature(model.forward).parameters.values())[1:]
    # Plain values only: fx flattens a tuple's or a list's (pytree) into inputs of their own, and a
    # forward taking such a default stays refused as taking several inputs.
    return {p.name: p.default for p in params
            if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD) and
            (p.default is None or isinstance(p.default, (bool, int, float, str)))}


def traced_with_defaults(tracer, model):
    """tracer.trace(model) with the arguments defaults_of gives baked in: fx keeps a placeholder
    for each and asserts it is that value, which the one input the chain takes leaves out."""
    concrete = defaults_of(model)
    graph = tracer.trace(model, concrete_args=concrete or None)
    if not concrete:
        return graph
    baked = [n for n in graph.nodes if n.op == "placeholder"][1:]
    # fx's own checks read a baked placeholder, or its comparison with the value: the forward's
    # own torch._assert calls read neither and stay.
    compared = {n for n in graph.nodes if n.op == "call_function" and n.target is operator.eq and
                any(a in baked for a in n.args)}
    for n in reversed(list(graph.nodes)):
        if n.op == "call_function" and n.target in (torch._assert, torch.fx._symbolic_trace._assert_is_none) and \
                n.args and (n.args[0] in baked or n.args[0] in compared):
            graph.erase_node(n)
    for n in compared:
        if not n.users:
            graph.erase_node(n)
    for n in baked:
        if not n.users:
            graph.erase_node(n)
    return graph


def trace(model):
    """A GraphModule of `model`. Where tracing fails inside a submodule (a branch on a tensor's
    value), that submodule becomes one operation, kept whole, and tracing starts again; a failure
    in the model's own forward is reported with the user's line. A submodule whose forward reads
    self.training is kept whole too, and the model is traced in both modes: a forward that still
    traces otherwise in training (its own read of self.training) is refused, since the file would
    hold one mode's computation (export traced in eval mode, and F.dropout(x, p, self.training)
    never dropped, exit 0)."""
    leaves = {path for path, m in model.named_modules() if path and traced_otherwise(m)}
    while True:
        tracer = ChainTracer(leaves)
        try:
            with traceable():
                graph = traced_with_defaults(tracer, model)
            gm = torch.fx.GraphModule(tracer.root, graph, type(model).__name__)
            was = model.training
            model.train(not was)
            tracer = ChainTracer(leaves)  # its failure, like the first's, keeps a submodule whole
            attributes = set(vars(model))
            try:
                with traceable():
                    other = traced_with_defaults(tracer, model)
                # fx names the constants it adds to the model anew (_tensor_constant3 for the first
                # trace's 0): compared by what they are, and taken off the model again.
                code = torch.fx.GraphModule(model, other, "other").code
            finally:
                model.train(was)
                for name in set(vars(model)) - attributes:
                    delattr(model, name)
            unnamed = lambda c: re.sub(r"_tensor_constant\d+", "_tensor_constant", c)
            same = unnamed(code) == unnamed(gm.code)
        except ExportError:
            raise
        except Exception as e:  # fx raises TraceError, TypeError, ... on what it cannot follow
            inner = [p for p in (tracer.failed_in or []) if p]
            if inner and inner[-1] not in leaves:
                leaves.add(inner[-1])
                continue
            where = _user_line(e.__traceback__)
            what = str(e).splitlines()[0] if str(e) else type(e).__name__
            raise ExportError(
                f"--model: torch.fx cannot follow {type(model).__name__}.forward"
                f"{' at ' + where if where else ''} ({what}). Code that branches or loops on a tensor's value "
                "cannot be cut: move it into a submodule (pipetrain keeps a submodule it cannot trace whole, "
                "as one operation) or into a module-level function decorated with @torch.fx.wrap") from None
        if not same:
            raise ExportError(
                f"--model: {type(model).__name__}.forward computes otherwise in training than in evaluation "
                "(it reads self.training: F.dropout(x, p, self.training), or a branch on it), which a traced "
                "chain of layers cannot hold: use nn.Dropout, or move that code into a submodule (pipetrain "
                "keeps a submodule that reads self.training whole, as one operation)")
        return gm, sorted(leaves)


# ---------------------------------------------------------------- cutting an fx graph into a chain

class Graph:
    """The traced model's nodes in order, with what each cut between two of them would carry."""

    def __init__(self, gm, x, x_other):
        self.gm = gm
        nodes = list(gm.graph.nodes)
        placeholders = [n for n in nodes if n.op == "placeholder"]
        if len(placeholders) != 1:
            raise ExportError(f"--model: forward takes {len(placeholders)} inputs; pipetrain feeds one tensor")
        self.input = placeholders[0]
        self.ops = [n for n in nodes if n.op in ("call_module", "call_function", "call_method")]
        self.output = next(n for n in nodes if n.op == "output")
        out = self.output.args[0]
        if not isinstance(out, torch.fx.Node):
            raise ExportError("--model: forward returns a tuple or a dict; pipetrain's last layer must return one tensor")
        self.shapes_batch = x.shape[0]
        self.shapes = self._shapes(x, example=True)
        self.other_shapes = self._shapes(x_other, example=False)
        self.batch, self.batch_other = x.shape[0], x_other.shape[0]
        self.index = {n: i for i, n in enumerate(self.ops)}
        self.index[self.input] = -1
        self.index[self.output] = len(self.ops)
        self._last_use = {}
        for n in [self.input] + self.ops:
            users = [self.index.get(u, len(self.ops)) for u in n.users]
            self._last_use[n] = max(users) if users else self.index[n]
        self._forbidden = self._forbidden_spans()

    def _shapes(self, x, example):
        captured = io.StringIO()  # ShapeProp prints the failing op's traceback; the error says it
        try:
            with contextlib.redirect_stderr(captured):
                ShapeProp(self.gm).propagate(x)
        except Exception as e:
            causes = [l for l in captured.getvalue().splitlines() if re.match(r"^\w+(Error|Exception): ", l)]
            where = (f"{str(e).splitlines()[0].replace('ShapeProp error for: ', '')}"
                     f"{': ' + causes[-1] if causes else ''}")
            # The example batch is the user's own: a wrong shape, dtype or id bound fails there,
            # and only a batch of another size points at a layer that fixes it.
            if example:
                raise ExportError(f"--model: running it on the example batch ({input_description(x)}) failed at "
                                  f"{where}. Check --input-shape, --input-dtype and --input-high against what the "
                                  "model takes") from None
            raise ExportError(f"--model: it ran at batch {self.shapes_batch} but at batch {x.shape[0]} failed at "
                              f"{where}. pipetrain splits minibatches into microbatches, so no layer may fix the "
                              "batch size") from None
        shapes = {}
        for n in self.gm.graph.nodes:
            meta = n.meta.get("tensor_meta")
            shapes[n] = (tuple(meta.shape), meta.dtype) if hasattr(meta, "shape") else None
        return shapes

    def _forbidden_spans(self):
        """Index ranges no cut may fall inside: a module or attribute with state used on both sides
        (tied weights), and a value modified in place after another node read it."""
        spans = []
        uses = collections.defaultdict(list)
        for n in self.gm.graph.nodes:
            if n.op in ("call_module", "get_attr"):
                target = n.target
                stateful = self.is_state(n) if n.op == "get_attr" else \
                    any(True for _ in self.gm.get_submodule(target).parameters()) or \
                    any(True for _ in self.gm.get_submodule(target).buffers())
                if stateful:
                    for u in ([n] if n.op == "call_module" else list(n.users)):
                        uses[target].append(self.index.get(u, len(self.ops)))
        # A buffer read by attribute where a module holding it runs too (a running mean a submodule
        # updates, read again at the output): the runtime ties parameters across layers, not
        # buffers, and the later layer's own copy never moved (8.5e-2 off eager, exit 0).
        for target in [t for t in uses if self._is_buffer(t)]:
            parts = target.split(".")
            for k in range(1, len(parts)):
                owner = ".".join(parts[:k])
                if owner in uses:
                    spans.append((min(uses[owner] + uses[target]), max(uses[owner] + uses[target]),
                                  f"buffer '{target}' is read where '{owner}' runs, and a layer's copy of a buffer "
                                  "is its own"))
        for target, idx in uses.items():
            if len(idx) > 1:
                spans.append((min(idx), max(idx), f"'{target}' is used by nodes on both sides"))
        for n in self.ops:
            if self.in_place(n) and n.args and isinstance(n.args[0], torch.fx.Node):
                src = n.args[0]
                spans.append((self.index.get(src, -1), self.index[n], f"'{n.name}' modifies '{src.name}' in place"))
        return spans

    _IN_PLACE_OPERATORS = (operator.iadd, operator.isub, operator.imul, operator.itruediv)

    def in_place(self, n):
        """Whether node n writes into its first argument: x.relu_(), F.relu(x, inplace=True), x += y,
        or a module built with inplace=True (torchvision's nn.ReLU(inplace=True)). A layer that
        began with one modified its input, which a stage receives as a leaf whose gradient it needs:
        squeezenet1_0 --layers 22 put features.1, a ReLU(inplace=True), alone, and profile and every
        split failed in TorchScript's words."""
        if n.kwargs.get("inplace", False) is True:
            return True
        if n.op == "call_method":
            return n.target.endswith("_") and not n.target.endswith("__")
        if n.op == "call_function":
            name = getattr(n.target, "__name__", "")
            return n.target in self._IN_PLACE_OPERATORS or (name.endswith("_") and not name.endswith("__"))
        if n.op == "call_module":
            return getattr(self.gm.get_submodule(n.target), "inplace", False) is True
        return False

    def is_state(self, n):
        """A get_attr of a parameter or a buffer (not a constant the tracer made of a tensor
        computed without the input, which any layer may hold a copy of)."""
        if re.fullmatch(r"_tensor_constant\d+", n.target):  # fx's name for them (Tracer.create_arg)
            return False
        owner, _, name = n.target.rpartition(".")
        m = self.gm.get_submodule(owner) if owner else self.gm
        return name in m._parameters or name in m._buffers

    def _is_buffer(self, target):
        owner, _, name = target.rpartition(".")
        try:
            m = self.gm.get_submodule(owner) if owner else self.gm
        except AttributeError:
            return False
        return name in m._buffers

    def live_after(self, i):
        """Values defined at or before op i that a later node reads: what a cut after op i carries."""
        return [n for n in [self.input] + self.ops[: i + 1] if self._last_use[n] > i]

    def cut_problem(self, i):
        """Why no cut may follow op i (None: it may)."""
        for lo, hi, why in self._forbidden:
            if lo <= i < hi:
                return why
        for v in self.live_after(i):
            if self.shapes.get(v) is None:
                return f"'{v.name}' is not a tensor"
            if self.layout(v) is None:
                return f"'{v.name}' does not scale with the batch in one dimension"
        return None

    def carried(self, i):
        """How many values a cut after op i carries that scale with the batch (at least 1)."""
        return max(1, sum(1 for v in self.live_after(i) if -1 in self.layout(v)[0]))

    def layout(self, v):
        """(shape with -1 for the batch dimension, dtype), or None when no single dimension scales."""
        (a, dtype), (b, _) = self.shapes[v], self.other_shapes[v]
        if len(a) != len(b):
            return None
        diff = [d for d in range(len(a)) if a[d] != b[d]]
        if not diff:
            return list(a), dtype
        if len(diff) == 1 and a[diff[0]] * self.batch_other == b[diff[0]] * self.batch:
            shape = list(a)
            shape[diff[0]] = -1
            return shape, dtype
        return None

    def has_state(self, lo, hi):
        for n in self.ops[lo:hi]:
            if n.op == "call_module":
                m = self.gm.get_submodule(n.target)
                if any(True for _ in m.parameters()) or any(True for _ in m.buffers()):
                    return True
            if any(isinstance(a, torch.fx.Node) and a.op == "get_attr" and self.is_state(a) for a in n.args):
                return True
        return False


def node_times(gm, x):
    """Seconds each op of gm takes on x (the best of a few runs): the cost the layer split balances."""
    times = collections.defaultdict(lambda: float("inf"))

    class Timed(torch.fx.Interpreter):
        def run_node(self, n):
            t0 = time.perf_counter()
            out = super().run_node(n)
            times[n] = min(times[n], time.perf_counter() - t0)
            return out

    try:
        with torch.no_grad():
            for _ in range(3):
                Timed(gm).run(x)
    except Exception:  # torch's own: nn.MultiheadAttention(bias=False)'s fast path, taken without grad, fails
        times.clear()
        for _ in range(3):
            Timed(gm).run(x)
    return times


def choose_cuts(graph, times, layers, max_tensors):
    """Cut positions (a cut after op i) giving the chain: every single-tensor cut, with layers that
    hold no state joined to a neighbour; then, to reach --layers N, the costliest layer split at
    its cheapest multi-tensor cut or the cheapest neighbouring pair joined."""
    k = len(graph.ops)
    # A cut's count is of the values that scale with the batch: a mask or a rotary table built
    # from the sequence length rides along (packed) without making every block boundary a
    # several-tensor cut.
    allowed = {i: graph.carried(i) for i in range(k - 1) if graph.cut_problem(i) is None}
    cuts = sorted(i for i, n in allowed.items() if n == 1)

    def spans(cs):
        bounds = [-1] + cs + [k - 1]
        return [(bounds[j] + 1, bounds[j + 1] + 1) for j in range(len(bounds) - 1)]

    def cost(lo, hi):
        return sum(times[n] for n in graph.ops[lo:hi])

    changed = True
    while changed and cuts:  # stateless layers (an activation, a pooling) join their neighbour
        changed = False
        for j, (lo, hi) in enumerate(spans(cuts)):
            if not graph.has_state(lo, hi):
                cuts.pop(j - 1 if j > 0 else 0)
                changed = True
                break
    if layers <= 0:
        return cuts
    while len(cuts) + 1 > layers:
        sp = spans(cuts)
        j = min(range(len(cuts)), key=lambda c: cost(*sp[c]) + cost(*sp[c + 1]))
        cuts.pop(j)
    while len(cuts) + 1 < layers:
        best = None
        for lo, hi in sorted(spans(cuts), key=lambda s: -cost(*s)):
            inner = [i for i in range(lo, hi - 1) if i in allowed and allowed[i] <= max_tensors]
            if inner:
                half = cost(lo, hi) / 2
                best = min(inner, key=lambda i: (allowed[i], abs(cost(lo, i + 1) - half)))
                break
        if best is None:
            break
        cuts = sorted(cuts + [best])
    return cuts


def build_layer(graph, lo, hi, inputs, outputs):
    """A GraphModule running ops [lo, hi) on one tensor: the unpacked `inputs`, returning the
    packed `outputs`."""
    g = torch.fx.Graph()
    env = {}
    x = g.placeholder("x")
    if len(inputs) == 1:
        env[inputs[0]] = x
    else:
        for v, t in zip(inputs, unpack(g, x, [graph.layout(v) for v in inputs])):
            env[v] = t

    def arg(a):
        if a not in env and a.op == "get_attr":
            env[a] = g.node_copy(a)
        return env[a]

    for n in graph.ops[lo:hi]:
        env[n] = g.node_copy(n, arg)
    g.output(env[outputs[0]] if len(outputs) == 1 else pack(g, [env[v] for v in outputs],
                                                            [graph.layout(v) for v in outputs]))
    return torch.fx.GraphModule(graph.gm, g)


def carrier_dtype(layouts):
    """The dtype a boundary's tensors travel in, packed into one: its first float tensor's, or
    float64 where it packs integers (float32 holds them exactly only to 2^24: hashed bigram ids
    crossed rounded and looked up other rows, exit 0). A float32 or bf16 tensor goes to float64
    and back unchanged; an int64 one crosses as two halves (carried_halves)."""
    if any(not d.is_floating_point for _, d in layouts):
        return torch.float64
    return layouts[0][1]


def carried_halves(d):
    """How many carrier elements an element of dtype d takes: an int64 crosses as its high and low
    32 bits, each exact in float64, which holds integers exactly only to 2^53 (ids hashed into
    int64's range crossed rounded and looked up other rows, 0.2 off eager with exit 0)."""
    return 2 if d == torch.int64 else 1


def pack(g, values, layouts):
    dtype = carrier_dtype(layouts)
    flat = []
    for v, (_, d) in zip(values, layouts):
        f = g.call_method("reshape", (v, -1))
        if carried_halves(d) == 2:
            high = g.call_function(operator.rshift, (f, 32))  # arithmetic: keeps the sign
            low = g.call_function(operator.and_, (f, 0xFFFFFFFF))
            flat += [g.call_method("to", (high, dtype)), g.call_method("to", (low, dtype))]
        else:
            flat.append(f if d == dtype else g.call_method("to", (f, dtype)))
    return g.call_function(torch.cat, (flat, 0))


def unpack(g, x, layouts):
    """Inverse of pack: the batch is what the packed length leaves after the fixed-size parts."""
    dtype = carrier_dtype(layouts)
    per_sample, fixed = 0, 0
    for shape, d in layouts:
        n = carried_halves(d)
        for s in shape:
            n *= abs(s)
        if -1 in shape:
            per_sample += n
        else:
            fixed += n
    numel = g.call_method("numel", (x,))
    batch = g.call_function(operator.floordiv, (g.call_function(operator.sub, (numel, fixed)), max(per_sample, 1)))
    out, offset = [], 0

    def take(size):
        nonlocal offset
        part = g.call_method("narrow", (x, 0, offset, size))
        offset = g.call_function(operator.add, (offset, size)) if not isinstance(offset, int) or \
            not isinstance(size, int) else offset + size
        return part

    for shape, d in layouts:
        n = 1
        for s in shape:
            n *= abs(s)
        size = g.call_function(operator.mul, (batch, n)) if -1 in shape else n
        if carried_halves(d) == 2:
            high = g.call_method("to", (take(size), d))
            low = g.call_method("to", (take(size), d))
            part = g.call_function(operator.or_, (g.call_function(operator.lshift, (high, 32)), low))
        else:
            part = take(size)
            part = part if d == dtype else g.call_method("to", (part, d))
        out.append(g.call_method("reshape", (part, tuple(shape))))
    return out


def layer_names(graph, spans):
    """Each layer's modules' common path (layer1.0); where two layers share it, the range of
    its children each holds (blocks.0.norm1..attn); with no common path, the owners joined
    (layer4.1+avgpool). A parameter read in the layer's own code stands for the module owning
    it (an RMSNorm traced through: norm, not norm.weight), or for the operation reading it where
    that module runs elsewhere (a GPT-2 head multiplying by wte.weight: matmul, not wte.weight);
    a parameter of the model itself, for its name (cls_token)."""
    called = {n.target for n in graph.ops if n.op == "call_module"}

    def state_name(a, op):
        owner = a.target.rpartition(".")[0]
        if not owner:
            return a.target
        return re.sub(r"_\d+$", "", op.name) if owner in called else owner

    def targets(lo, hi):
        out = []
        for n in graph.ops[lo:hi]:
            out += [n.target] if n.op == "call_module" else \
                [state_name(a, graph.ops[hi - 1]) for a in n.args
                 if isinstance(a, torch.fx.Node) and a.op == "get_attr" and graph.is_state(a)]
        return out

    prefixes = [".".join(os.path.commonprefix([t.split(".") for t in targets(*s)])) for s in spans]
    names = []
    for (lo, hi), prefix in zip(spans, prefixes):
        ts = targets(lo, hi)
        if prefix and prefixes.count(prefix) > 1:
            inner = [t[len(prefix) + 1:].split(".")[0] for t in ts if t != prefix]
            name = f"{prefix}.{inner[0]}..{inner[-1]}" if inner else prefix
        elif prefix:
            name = prefix
        elif ts:
            owners = list(dict.fromkeys(t.rsplit(".", 1)[0] for t in ts))
            name = "+".join(owners) if len(owners) <= 3 else f"{owners[0]}+..+{owners[-1]}"
        else:
            name = graph.ops[lo].name
        base, k = name, 2
        while name in names:
            name, k = f"{base}#{k}", k + 1
        names.append(name)
    return names


def split_traced(model, x, x_other, layers, max_tensors):
    gm, leaves = trace(model)
    if leaves:
        print("kept whole (torch.fx cannot follow their forward, or would drop its reads of self.training or "
              f"switches of autograd's mode): {', '.join(leaves)}")
    try:
        graph = Graph(gm, x, x_other)
    except ExportError:
        raise
    except Exception as e:
        raise ExportError(f"--model: running {type(model).__name__} at batch {x.shape[0]} and {x_other.shape[0]} "
                          f"failed: {e}. Check --input-shape, --input-dtype and --input-high against what the model "
                          "takes; pipetrain also splits minibatches into microbatches, so no layer may fix the batch size")
    cuts = choose_cuts(graph, node_times(gm, x), layers, max_tensors)
    bounds = [-1] + cuts + [len(graph.ops) - 1]
    spans = [(bounds[j] + 1, bounds[j + 1] + 1) for j in range(len(bounds) - 1)]
    modules, boundaries, exact = [], [], []
    for lo, hi in spans:
        inputs = graph.live_after(lo - 1) if lo > 0 else [graph.input]
        outputs = graph.live_after(hi - 1) if hi < len(graph.ops) else [graph.output.args[0]]
        modules.append(build_layer(graph, lo, hi, inputs, outputs))
        if hi < len(graph.ops):
            boundaries.append(len(outputs))
            # Integers packed into a float carrier (token ids beside activations) must cross
            # stages exact: bf16 holds them only up to 256, so the runtime keeps these in fp32.
            exact.append(len(outputs) > 1 and any(not graph.layout(v)[1].is_floating_point for v in outputs))
    return layer_names(graph, spans), modules, boundaries, exact


def split_sequential(model, x, layers):
    # Each layer a Sequential keyed by the original children's names, so a parameter's path in
    # the file is its path in the user's model (python/pipetrain/weights.py relies on it).
    # Every entry, a module held twice included (named_children() gives it once): the second is
    # a tie of the first.
    named = list(model.named_children()) if isinstance(model, torch.jit.ScriptModule) else \
        [(n, m) for n, m in model._modules.items() if m is not None]
    groups = [[i] for i in range(len(named))]
    # A child built with inplace=True writes into its input: it joins the layer before it (as
    # split_traced never cuts before one), or a stage starting with it fails on its leaf input.
    for j in range(len(groups) - 1, 0, -1):
        if getattr(named[groups[j][0]][1], "inplace", False) is True:
            groups[j - 1:j + 1] = [groups[j - 1] + groups[j]]
    # Buffers held by several children (a BatchNorm held twice) keep one layer: the runtime ties
    # parameters across layers, not running statistics, and each layer kept a set of its own.
    holders = collections.defaultdict(list)
    for i, (_, m) in enumerate(named):
        for b in {id(b): b for b in m.buffers()}:
            holders[b].append(i)
    for first, last in sorted({(h[0], h[-1]) for h in holders.values() if h[0] != h[-1]}):
        lo = next(j for j, g in enumerate(groups) if first in g)
        hi = next(j for j, g in enumerate(groups) if last in g)
        if lo < hi:
            print(f"note: {named[first][0]} and {named[last][0]} hold the same buffers (one module held twice): "
                  f"{named[groups[lo][0]][0]}..{named[groups[hi][-1]][0]} are one layer, so they keep one set of "
                  "running statistics", file=sys.stderr)
            groups[lo:hi + 1] = [sum(groups[lo:hi + 1], [])]
    if 0 < layers < len(groups):
        times = []
        with torch.no_grad():
            h = x
            for _, c in named:
                times.append(time_call(lambda: c(h)))
                h = c(h)
        while len(groups) > layers:
            j = min(range(len(groups) - 1), key=lambda g: sum(times[i] for i in groups[g] + groups[g + 1]))
            groups[j:j + 2] = [groups[j] + groups[j + 1]]
    names = [named[g[0]][0] if len(g) == 1 else f"{named[g[0]][0]}..{named[g[-1]][0]}" for g in groups]
    modules = [torch.nn.Sequential(collections.OrderedDict(named[i] for i in g)) for g in groups]
    return names, modules, [1] * (len(groups) - 1), [False] * (len(groups) - 1)


def tie_groups(layers):
    """Parameters held by two or more layers, by identity (tied input and output embeddings):
    [[{"layer": i, "parameter": path}, ...], ...]. pipetrain keeps such a group one parameter
    (src/runtime/tied_gradients.h); this record is for the user and the checks."""
    owners = collections.defaultdict(list)
    for i, m in enumerate(layers):
        for path, p in m.named_parameters():
            if not owners[id(p)] or owners[id(p)][-1]["layer"] != i:
                owners[id(p)].append({"layer": i, "parameter": path})
    return [g for g in owners.values() if len(g) > 1]


def held_elsewhere(model, layers):
    """{path in the model's state_dict: the path the file holds its tensor at}, for the tensors a
    layer holds at one path only (a module an nn.Sequential holds twice inside one layer: the file
    lists its first path), so that python/pipetrain/weights.py gives back every path."""
    first, in_file = {}, set()
    for m in layers:
        for path, t in list(m.named_parameters()) + list(m.named_buffers()):
            first.setdefault(id(t), path)
            in_file.add(path)
    return {path: first[id(t)] for path, t in model.state_dict(keep_vars=True).items()
            if path not in in_file and id(t) in first}


class Top(torch.nn.Module):
    """The file's top-level module: the layers are records of their own, so it holds only the
    loss, a method pipetrain calls when present."""

    def __init__(self):
        super().__init__()

    def forward(self, x):
        return x  # unused: pipetrain runs the layers one by one


def made_loss(spec):
    """The loss --loss names, made: one with parameters of its own is refused, as pipetrain's
    optimizer steps the model's layers alone (a temperature was neither trained nor checkpointed)."""
    loss = import_callable(spec, "--loss")()
    own = [n for n, p in loss.named_parameters() if p.requires_grad] if isinstance(loss, torch.nn.Module) else []
    if own:
        raise ExportError(f"--loss: the loss holds parameters of its own ({', '.join(own)}), which pipetrain would "
                          "neither train nor checkpoint: it steps the model's layers alone; move them into the "
                          "model (its last layer), or make them buffers if they are constants")
    return loss


class LossHolder(Top):
    def __init__(self, loss):
        super().__init__()
        self._pipetrain_loss = loss

    @torch.jit.export
    def loss(self, output, target):
        return self._pipetrain_loss(output, target)


DTYPE_NAMES = {torch.float32: "float32", torch.float64: "float64", torch.float16: "float16",
               torch.bfloat16: "bfloat16", torch.int64: "int64", torch.int32: "int32", torch.uint8: "uint8"}


def hooked(m):
    """The first submodule of m with forward hooks (torch.nn.utils.weight_norm and spectral_norm
    install them), which TorchScript leaves out; None where none has."""
    for path, sub in m.named_modules():
        if sub._forward_pre_hooks or sub._forward_hooks:
            return path or type(sub).__name__
    return None


def compiled_layers(children):
    """Each layer compiled with TorchScript, as the runtime will run it (the same tensors)."""
    scripted, warned = [], {}
    for i, (name, m) in enumerate(children.items()):
        try:
            with warnings.catch_warnings(record=True) as said:
                warnings.simplefilter("always")
                scripted.append(torch.jit.script(m))
        except Exception as e:
            hook = hooked(m)
            # torch 1.13's own forward reads in_proj_bias.dtype and in_proj_weight.dtype, None without
            # a bias or with keys and values of another width: its traceback named neither.
            mha = [n for n, sub in m.named_modules() if isinstance(sub, torch.nn.MultiheadAttention)
                   and (sub.in_proj_bias is None or sub.in_proj_weight is None)]
            raise ExportError(f"--model: TorchScript cannot compile layer {i} ('{name}'): " + (
                f"{mha[0]} is an nn.MultiheadAttention with bias=False or kdim/vdim other than embed_dim, which "
                "torch 1.13's TorchScript cannot compile (its forward reads the dtype of in_proj_bias or "
                "in_proj_weight, None then): give it bias=True and keys and values of embed_dim, or write the "
                "attention with nn.Linear projections. TorchScript said: " if mha else "") + f"{e}" + (
                f" ({hook} has forward hooks, as torch.nn.utils.weight_norm and spectral_norm install: TorchScript "
                "cannot run them; compute the reparametrised weight in the module's own forward)" if hook else ""))
        for w in said:
            layers = warned.setdefault(str(w.message).strip(), [])
            if f"{i} ('{name}')" not in layers:  # said once for each of a layer's modules (its 2 encoder layers)
                layers.append(f"{i} ('{name}')")
    # TorchScript's warnings name its own internals: each said once, with its layers and what it
    # means (nn.TransformerEncoderLayer's "'batch_first' was found in ScriptModule constants": its
    # __constants__ lists an attribute its forward does not read). The one about "instance-level
    # annotations" comes from torch.fx's GraphModule, which holds every traced layer: not the
    # user's code, left out.
    for message, layers in warned.items():
        if "instance-level annotations" in message:
            continue
        print(f"note: TorchScript warned compiling layer{'s' if len(layers) > 1 else ''} {', '.join(layers)}: "
              f"{message} (a compiler's warning, not an error: the layer compiled; it matters only where the "
              "layer's forward reads what it names)", file=sys.stderr)
    return scripted


def layer_records(scripted, non_persistent):
    """Each compiled layer as its own TorchScript archive, and what pipetrain.json says of it.
    `non_persistent`: the model's buffer paths registered persistent=False, which its state_dict
    leaves out (TorchScript and torch.fx keep them as plain buffers)."""
    files, index = {}, []
    for i, m in enumerate(scripted):
        buf = io.BytesIO()
        torch.jit.save(m, buf)
        record = f"layer-{i}.pt"
        files[record] = buf.getvalue()
        params = [{"name": n, "shape": list(p.shape), "dtype": DTYPE_NAMES.get(p.dtype, str(p.dtype)),
                   "requires_grad": p.requires_grad} for n, p in m.named_parameters()]
        buffers = [n for n, _ in m.named_buffers()]
        index.append({"file": record, "bytes": len(files[record]), "parameters": params, "buffers": buffers,
                      "non_persistent_buffers": [n for n in buffers if n in non_persistent]})
    return files, index


def export(args):
    try:
        shape = [int(s) for s in args.input_shape.split(",") if s.strip()]
    except ValueError:
        shape = []
    if not shape or any(s < 1 for s in shape):
        raise ExportError(f"--input-shape: expected positive sizes, batch first (64,3,32,32), got '{args.input_shape}'")
    # The example batch and one of 1.5x its samples are made whole: a shape past memory ended in
    # LibTorch's allocation traceback.
    example_bytes = math.prod(shape) * 5 // 2 * torch.empty((), dtype=DTYPES[args.input_dtype]).element_size()
    if example_bytes > 8 << 30:
        raise ExportError(f"--input-shape: {args.input_shape} takes {example_bytes / 2**30:.3g} "
                          f"GiB as the example batches export runs (the batch and one of 1.5x its samples); give a "
                          f"small batch: the example's samples only show the model its input's shape")
    def unique_keys(pairs):  # the last of two values was taken without a word
        keys = [k for k, _ in pairs]
        for k in keys:
            if keys.count(k) > 1:
                raise ExportError(f"--kwargs: key '{k}' is given {keys.count(k)} times")
        return dict(pairs)
    try:
        kwargs = json.loads(args.kwargs, object_pairs_hook=unique_keys)
    except json.JSONDecodeError as e:
        raise ExportError(f"--kwargs: not JSON: {e}")
    if not isinstance(kwargs, dict):
        raise ExportError(f"--kwargs: expected a JSON object, got {args.kwargs}")
    if args.layers < 0:
        raise ExportError(f"--layers: must be >= 0 (0: the model's natural boundaries), got {args.layers}")
    # Recorded only where given: the default's 2 is the example's, not the ids the model takes.
    high = 2 if args.input_high is None else args.input_high
    if high < 1 and not DTYPES[args.input_dtype].is_floating_point:
        raise ExportError(f"--input-high: integer inputs are drawn from [0, HIGH), so it must be >= 1, got {args.input_high}")
    # Before the work, where the file cannot be written.
    folder = os.path.dirname(os.path.abspath(args.output))
    if not os.path.isdir(folder):
        raise ExportError(f"-o {args.output}: no folder {folder}")
    if not os.access(folder, os.W_OK):
        raise ExportError(f"-o {args.output}: the folder {folder} is not writable")
    if os.path.isdir(args.output):
        raise ExportError(f"-o {args.output}: is a folder; give the file to write")
    for flag, source in input_files(args):
        if os.path.realpath(source) == os.path.realpath(args.output):
            raise ExportError(f"-o {args.output}: is {flag}'s file {source}, which this command reads: writing it "
                              f"would destroy it; give another path")
    dtype = DTYPES[args.input_dtype]
    torch.manual_seed(args.seed)
    if os.path.isfile(args.model):
        try:
            model = torch.jit.load(args.model)
        except Exception as e:
            raise ExportError(f"--model: {args.model} is not a TorchScript file: {e}")
        scripted_input = True
    else:
        make = import_callable(args.model, "--model")
        try:
            model = make(**kwargs)
        except Exception as e:  # the user's code: a keyword it does not take, or anything it raises
            raise ExportError(f"--model: {args.model}(**{kwargs}) raised {type(e).__name__}: {e}")
        if not isinstance(model, torch.nn.Module):
            raise ExportError(f"--model: {args.model} returned {type(model).__name__}, not an nn.Module")
        scripted_input = False
        # Its gradient is a sparse tensor, which the checks below and the runtime's flat buffers
        # take dense (export ended in a traceback of the sparse backend).
        for name, m in model.named_modules():
            if isinstance(m, (torch.nn.Embedding, torch.nn.EmbeddingBag)) and m.sparse:
                raise ExportError(f"--model: {name} is {type(m).__name__}(sparse=True), whose gradient is sparse: "
                                  "pipetrain trains dense gradients (torch.optim's SGD and AdamW, as sparse=False, "
                                  "the default, gives them); build it with sparse=False")
    deferrable = 0 if scripted_input else make_deferrable(model)  # same math until train defers it
    if not scripted_input:
        replace_modules(model, renorming)  # an embedding's max_norm, which TorchScript drops
    def remake():
        if scripted_input:
            return torch.jit.load(args.model)
        torch.manual_seed(args.seed)
        return make(**kwargs)
    weights = WeightsKept(model, remake)  # before the first of export's forwards
    x = example_input(shape, dtype, high)
    x_other = example_input(shape, dtype, high, batch=shape[0] + max(1, shape[0] // 2))
    was_training = model.training
    # Each module's own mode, which the file keeps and the runtime trains it in (analysis below
    # runs in evaluation mode): a fine-tuned backbone's frozen BatchNorm in a model that trains.
    modes = {m: m.training for m in model.modules()}
    frozen = []  # the outermost of them
    for n, m in model.named_modules() if was_training else ():
        if n and not m.training and not any(n.startswith(f + ".") for f in frozen):
            frozen.append(n)
    if frozen:
        print(f"note: --model: {args.model} holds {len(frozen)} module{'s' if len(frozen) > 1 else ''} in evaluation "
              f"mode in a model that trains ({', '.join(frozen[:5])}{', ...' if len(frozen) > 5 else ''}): the file "
              "keeps them so and they train so, as eager PyTorch runs them (a BatchNorm normalising by its running "
              "statistics, which do not move; dropout off)", file=sys.stderr)
    if not was_training:  # kept, as PyTorch would train it, but rarely meant: say so
        print(f"note: --model: {args.model} returned its model in evaluation mode (.eval()), and the file keeps "
              "it: it trains so, BatchNorm normalising by running statistics it never updates and dropout off; "
              "return it in training mode, the default, to train as model.train() does",
              file=sys.stderr)
    model.eval()  # analysis must not move BatchNorm's running statistics
    with state_kept(model):  # nor a buffer a forward updates in any mode
        if scripted_input or isinstance(model, torch.nn.Sequential):
            try:  # as split_traced does, not a traceback from deep in the split or the check
                with torch.no_grad():
                    model(x)
            except Exception as e:  # the user's model may raise anything
                raise ExportError(f"--model: running it on the example batch ({input_description(x)}) failed: "
                                  f"{type(e).__name__}: {e}. Check --input-shape, --input-dtype and --input-high "
                                  "against what the model takes")
            names, modules, boundaries, exact = split_sequential(model, x, args.layers)
        else:
            names, modules, boundaries, exact = split_traced(model, x, x_other, args.layers, args.max_boundary_tensors)
    if 0 < len(names) < args.layers:  # it gave fewer without a word (an ALBERT-style model: 5 of 8)
        print(f"note: --layers {args.layers}: {len(names)} layers are as many as "
              + ("its children give (an nn.Sequential or TorchScript file is cut between children only)"
                 if scripted_input or isinstance(model, torch.nn.Sequential) else
                 f"its graph allows: every other cut would carry more than --max-boundary-tensors "
                 f"{args.max_boundary_tensors} tensors that scale with the batch, or cross an in-place update or "
                 "a value that is not a tensor (a larger --max-boundary-tensors may give more)"), file=sys.stderr)
    children = collections.OrderedDict((f"l{i}_" + "".join(c if c.isalnum() else "_" for c in n), m)
                                       for i, (n, m) in enumerate(zip(names, modules)))
    ties = tie_groups(list(children.values()))
    aliases = held_elsewhere(model, list(children.values()))
    top = LossHolder(made_loss(args.loss)) if args.loss else Top()
    scripted_layers = compiled_layers(children)
    gradient_free = check_chain(model, scripted_layers, x)
    check_leaf_inputs(model, scripted_layers, names, x)
    # torch.optim skips a parameter without a gradient; pipetrain steps what is trainable, and weight
    # decay moved one read under torch.no_grad() (AdamW on 2 stages: 1.2e-3 in 4 steps, exit 0).
    held = {id(p) for m in children.values() for p in m.parameters()}
    frozen = reached_without_gradient(model, x, [(n, p) for n, p in gradient_free if id(p) in held])
    for _, p in frozen:
        p.requires_grad_(False)
    for layer, compiled in zip(children.values(), scripted_layers):
        compiled.train(was_training)
        own = dict(layer.named_modules())
        for name, sub in compiled.named_modules():  # a module before those it holds
            if name and own.get(name) in modes:
                sub.train(modes[own[name]])
    weights.put_back()
    records, index = layer_records(scripted_layers, {f"{path}.{n}" if path else n for path, sub in model.named_modules()
                                                     for n in getattr(sub, "_non_persistent_buffers_set", ())})
    try:
        scripted = torch.jit.script(top)
    except Exception as e:
        raise ExportError(f"--loss: TorchScript cannot compile the loss: {e}")
    meta = {"format": FORMAT, "source": args.model, "kwargs": kwargs, "layers": names,
            "children": list(children.keys()), "boundary_tensors": boundaries,
            "exact_boundaries": exact,
            "input": {"shape": shape[1:], "dtype": args.input_dtype, "example_batch": shape[0],
                      **({} if dtype.is_floating_point or args.input_high is None else {"high": args.input_high})},
            "loss": bool(args.loss), "ties": ties, "aliases": aliases, "deferrable_batch_norms": deferrable, "layer_files": index}
    tmp = args.output + ".partial"
    try:
        check_room(tmp, sum(len(r) for r in records.values()) + (1 << 20))
        torch.jit.save(scripted, tmp, _extra_files={"pipetrain.json": json.dumps(meta), **records})
        os.replace(tmp, args.output)
        # A model file is code (docs/runtime.md): its digest, beside it in sha256sum's format, is
        # what train and profile check and print, and what checkpoints record.
        digest = file_sha256(args.output)
        with open(args.output + ".sha256.partial", "w") as f:
            f.write(f"{digest}  {os.path.basename(args.output)}\n")
        os.replace(args.output + ".sha256.partial", args.output + ".sha256")
    except (OSError, RuntimeError) as e:
        for partial in (tmp, args.output + ".sha256.partial"):
            if os.path.exists(partial):
                os.remove(partial)
        raise ExportError(f"-o {args.output}: cannot write it: {e}")
    seen = set()
    params = sum(p.numel() for m in children.values() for p in m.parameters() if id(p) not in seen and not seen.add(id(p)))
    multi = sum(1 for b in boundaries if b > 1)
    print(f"wrote {args.output}: {len(names)} layers, {params} parameters"
          + (f", {multi} boundaries carrying several tensors" if multi else ""))
    print(f"sha256 {digest} (in {args.output}.sha256)")
    for n in names:
        print(f"  {n}")
    def listed(names):
        return ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
    # torch.fx keeps torch.nn's own modules whole, these stacks too: one layer a stage cannot split.
    stacks = [(n, m) for n, m in model.named_modules()
              if isinstance(m, (torch.nn.TransformerEncoder, torch.nn.TransformerDecoder, torch.nn.Transformer))]
    for n, m in stacks:
        if not any(n.startswith(o + ".") for o, _ in stacks if o != n):
            share = sum(p.numel() for p in m.parameters()) / max(1, params)
            print(f"note: {n} ({type(m).__name__}) is one layer, as torch.fx keeps torch.nn's own modules whole: "
                  f"{share:.0%} of the parameters, which no split divides; to split it into its layers, hold them in "
                  "an nn.ModuleList and call each in turn in your forward", file=sys.stderr)
    unused = [n for n, p in model.named_parameters() if id(p) not in held]
    if unused:  # a head kept for later, a branch switched off: said, since they go untrained
        shown = listed(unused)
        print(f"note: {len(unused)} of the model's parameters are not in the file, as its forward never uses them: "
              f"{shown}; they are not trained, and pipetrain.weights leaves them as they were", file=sys.stderr)
    if frozen:
        print(f"note: {len(frozen)} of the model's parameters move its output but get no gradient from it (read under "
              f"torch.no_grad() or through .detach()): {listed([n for n, _ in frozen])}; torch.optim never steps a "
              "parameter without a gradient, and the file keeps them frozen (requires_grad False), so that weight "
              "decay and momentum leave them as they are too", file=sys.stderr)
    for g in ties:
        print("tied (one parameter; its gradients are summed across stages): " +
              " = ".join(f"{m['parameter']} (layer {m['layer']}, '{names[m['layer']]}')" for m in g))


def main(argv=None):
    sys.path.insert(0, os.getcwd())  # MODULE from the current directory too, as `python -m` finds it
    args = parse_args(argv if argv is not None else sys.argv[1:])
    try:
        export(args)
    except ExportError as e:
        print(f"pipetrain export: {e}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # `pipetrain export ... | head`: the rest of the listing is not wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # nor a second error at exit
        return 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
