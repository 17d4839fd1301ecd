"""A pipetrain checkpoint's weights as your model's state_dict.

    python3 -m pipetrain.weights MODEL.pt CHECKPOINT_DIR -o state.pt   (PYTHONPATH=<pipetrain>/python)
    model.load_state_dict(torch.load("state.pt"), strict=False)

MODEL.pt is the file `pipetrain export` wrote: its layer k's parameters, in its own order, are
param.0, param.1, ... of the checkpoint's layer-k.tensors, and their paths in the file are their
paths in the model it was exported from; buffer.0, ... are its buffers (BatchNorm's running
statistics). CHECKPOINT_DIR is a checkpoint (step-N) or the folder holding them (the newest
complete one is read). strict=False: a model may hold tensors the export left out.
"""
import argparse
import collections
import json
import os
import re
import struct
import sys
import zlib

import torch

try:
    from pipetrain.files import check_room, file_sha256
except ImportError:  # run as a script from python/pipetrain
    from files import check_room, file_sha256

# Every dtype a tensor file may hold (src/core/tensor_file.cpp): a bool buffer (GPT-2's causal
# mask) ended the command with "pipetrain.weights: 'bool'".
DTYPES = {"float32": torch.float32, "float64": torch.float64, "int64": torch.int64, "int32": torch.int32,
          "int16": torch.int16, "int8": torch.int8, "uint8": torch.uint8, "float16": torch.float16,
          "bfloat16": torch.bfloat16, "bool": torch.bool}


def read_tensor_file(path):
    """A pipetrain.tensors/1 file (src/core/tensor_file.h) as {name: tensor}."""
    # Tensor by tensor, each read once into its own buffer: the whole file read, then sliced and
    # copied, held a layer 3-4 times over.
    try:
        return _read_tensors(path)
    except (KeyError, TypeError, ValueError, struct.error, RuntimeError) as e:  # a file hand-edited past its CRC
        if str(e).startswith(path):
            raise
        raise ValueError(f"{path}: not a tensor file this reads ({type(e).__name__}: {e})") from None


def _read_tensors(path):
    out = {}
    with open(path, "rb") as f:
        head = f.read(16)
        if head[:8] != b"PTTENSR1":
            raise ValueError(f"{path}: not a pipetrain tensor file")
        (header_len,) = struct.unpack("<Q", head[8:16])
        header = json.loads(f.read(header_len))
        body = 16 + header_len
        for t in header["tensors"]:
            if not t["bytes"]:
                out[t["name"]] = torch.empty(t["shape"], dtype=DTYPES[t["dtype"]])
                continue
            raw = bytearray(t["bytes"])
            f.seek(body + t["offset"])
            if f.readinto(raw) != t["bytes"]:
                raise ValueError(f"{path}: tensor '{t['name']}' runs past the end of the file")
            out[t["name"]] = torch.frombuffer(raw, dtype=DTYPES[t["dtype"]]).reshape(t["shape"])
    return out


def complete_checkpoints(path):
    """The step-N folders under `path` that hold a manifest, newest first."""
    steps = [(int(m.group(1)), d) for d in os.listdir(path) if (m := re.fullmatch(r"step-(\d+)", d))
             and os.path.exists(os.path.join(path, d, "manifest.json"))]
    return [os.path.join(path, d) for _, d in sorted(steps, reverse=True)]


def newest_checkpoint(path):
    if os.path.exists(os.path.join(path, "manifest.json")):
        return path
    found = complete_checkpoints(path)
    if not found:
        raise ValueError(f"{path}: no complete checkpoint (step-N/manifest.json)")
    return found[0]


def verified_manifest(ck):
    """The checkpoint's manifest, once every file it lists has the size and CRC-32 it records, as
    `pipetrain train --resume` and `checkpoint inspect` require: a flipped bit read unchecked
    wrote weights off by 8.9e37 and exited 0."""
    path = os.path.join(ck, "manifest.json")
    with open(path) as f:
        try:
            manifest = json.load(f)
        except ValueError as e:  # JSONDecodeError, and a file that is not UTF-8
            raise ValueError(f"{path}: not a manifest: {e}") from None
    named = re.fullmatch(r"step-(\d+)", os.path.basename(os.path.normpath(ck)))
    if named and int(named.group(1)) != manifest.get("step"):
        raise ValueError(f"{path}: field \"step\" is {manifest.get('step')} but the folder is step {int(named.group(1))}")
    for entry in manifest.get("files", []):
        file = os.path.join(ck, entry["name"])
        if not os.path.isfile(file) or os.path.islink(file):
            raise ValueError(f"{file}: missing or not a regular file (listed in {path})")
        size = os.path.getsize(file)
        if size != entry["bytes"]:
            raise ValueError(f"{file}: {size} bytes but the manifest says a file of {entry['bytes']} bytes (truncated?)")
        crc = 0
        with open(file, "rb") as f:
            while chunk := f.read(1 << 20):
                crc = zlib.crc32(chunk, crc)
        if crc != entry["crc32"]:
            raise ValueError(f"{file}: checksum {crc} does not match the manifest's {entry['crc32']}")
    return manifest


def checked_manifest(checkpoint, ck):
    """verified_manifest(ck); where `ck` is the newest of folder `checkpoint`, a damaged one names
    the one before it, as --resume does."""
    try:
        return verified_manifest(ck)
    except ValueError as e:
        older = complete_checkpoints(checkpoint)[1:] if os.path.normpath(ck) != os.path.normpath(checkpoint) else []
        if not older:
            raise
        raise ValueError(f"{e}; the checkpoint before it, {os.path.basename(older[0])}, is read once "
                         f"{os.path.basename(ck)} is moved out of '{checkpoint}'") from None


def model_meta(model_file):
    """The pipetrain.json a model file holds (its layers, their parameters, its ties)."""
    import zipfile
    with zipfile.ZipFile(model_file) as z:
        found = [n for n in z.namelist() if n.endswith("/extra/pipetrain.json")]
        if not found:
            raise ValueError(f"{model_file}: no pipetrain.json (not a file `pipetrain export` wrote)")
        return json.loads(z.read(found[0]))


def layer_tensor_names(model_file, meta):
    """[(parameter names, their shapes, buffer names, the non-persistent among them)] per layer, in
    the order the checkpoint's files hold them: from pipetrain.json in a file of separate layers
    (pipetrain.model/2), from the TorchScript module's children in a pipetrain.model/1 file (which
    loads it whole)."""
    if meta.get("format") == "pipetrain.model/2":
        return [([p["name"] for p in f["parameters"]], [list(p["shape"]) for p in f["parameters"]], f["buffers"],
                 set(f.get("non_persistent_buffers", []))) for f in meta["layer_files"]]
    module = torch.jit.load(model_file)
    return [([n for n, _ in getattr(module, c).named_parameters()],
             [list(p.shape) for _, p in getattr(module, c).named_parameters()],
             [n for n, _ in getattr(module, c).named_buffers()], set()) for c in meta["children"]]


# The buffers batch_norm.DeferrableBatchNorm adds beside a BatchNorm's own.
DEFERRED_SUMS = ("pt_microbatches", "pt_seen", "pt_count", "pt_sum", "pt_sum_sq")


def deferred_batch_norm_sums(buffers):
    """The names among a layer's buffers that are a swapped-in BatchNorm's sums: all five at one
    module's path beside its running_mean. A user's own buffer named pt_count is the model's
    (a pattern on the name alone dropped it from the state_dict)."""
    held = set(buffers)
    out = set()
    for name in buffers:
        if not name.endswith("running_mean"):
            continue
        at = name[: -len("running_mean")]
        group = [at + s for s in DEFERRED_SUMS]
        if all(g in held for g in group):
            out.update(group)
    return out


def trained_state(model_file, checkpoint):
    """{parameter path in the exported model: trained tensor}."""
    meta = model_meta(model_file)
    layer_names = layer_tensor_names(model_file, meta)
    ck = newest_checkpoint(checkpoint)
    manifest = checked_manifest(checkpoint, ck)
    # The checkpoint's model before its layers: another model of the same family (fewer blocks)
    # read layer by layer failed later, on a tie, with a misleading message. A built-in model's
    # checkpoint has an empty digest (older checkpoints of model files have none): one of as many
    # layers was read, another network's weights written with exit 0.
    digest = manifest.get("model_sha256")
    if digest == "":
        raise ValueError(f"{ck}: trained from pipetrain's built-in model '{manifest.get('model')}', not from a model "
                         f"file: {model_file} is not the model it was trained from")
    children = len(meta["children"])
    if manifest.get("layers") != children:
        raise ValueError(f"{ck}: the checkpoint holds {manifest.get('layers')} layers of '{manifest.get('model')}', but "
                         f"{model_file} has {children}: not the model it was trained from")
    if digest:
        mine = file_sha256(model_file)
        if mine != digest:
            raise ValueError(f"{ck}: trained from a model file of sha256 {digest[:12]}..., but {model_file} has "
                             f"{mine[:12]}...: not the model it was trained from")
    state = collections.OrderedDict()
    for k, (names, shapes, buffers, transient) in enumerate(layer_names):
        layer_file = os.path.join(ck, f"layer-{k}.tensors")
        tensors = read_tensor_file(layer_file)
        for i, (name, shape) in enumerate(zip(names, shapes)):
            if f"param.{i}" not in tensors:
                raise ValueError(f"{layer_file}: holds no tensor 'param.{i}', the model's {name}")
            if list(tensors[f"param.{i}"].shape) != shape:
                raise ValueError(f"{layer_file}: 'param.{i}' has shape {list(tensors[f'param.{i}'].shape)}, but "
                                 f"{model_file}'s {name} is {shape}: not the model it was trained from")
            state[name] = tensors[f"param.{i}"]
        sums = deferred_batch_norm_sums(buffers)
        for i, name in enumerate(buffers):
            if name in sums or name in transient or re.fullmatch(r"(.*\.)?_tensor_constant\d+", name):
                # deferred BatchNorm's sums, a constant torch.fx made in forward (not the model's), or a
                # buffer registered persistent=False (not in the model's state_dict)
                continue
            if f"buffer.{i}" in tensors:  # checkpoints before buffers were kept have none
                state[name] = tensors[f"buffer.{i}"]
    for path, held in meta.get("aliases", {}).items():  # a module held at several paths in one layer
        if held in state:
            state[path] = state[held]
    for group in meta.get("ties", []):
        # One parameter held by several layers: each stage's copy took the same steps.
        first = state[group[0]["parameter"]]
        for m in group[1:]:
            if not torch.equal(state[m["parameter"]], first):
                diff = (state[m["parameter"]] - first).abs().max().item()
                raise ValueError(f"{ck}: the tied copies {group[0]['parameter']} (layer {group[0]['layer']}) and "
                                 f"{m['parameter']} (layer {m['layer']}) differ by up to {diff:.3g}")
    return state


def main(argv=None):
    p = argparse.ArgumentParser(prog="python3 -m pipetrain.weights", description=__doc__.split("\n")[0])
    p.add_argument("model", help="the model file `pipetrain export` wrote")
    p.add_argument("checkpoint", help="a checkpoint directory (or the --checkpoint-dir holding several)")
    p.add_argument("-o", "--output", required=True, help="state_dict file to write (torch.save)")
    a = p.parse_args(argv)
    folder = os.path.dirname(os.path.abspath(a.output))
    if not os.path.isdir(folder):
        print(f"pipetrain.weights: -o {a.output}: no folder {folder} to write it in", file=sys.stderr)
        return 1
    # The files it reads are not written over (-o naming the model file replaced it, exit 0): the
    # model, its .sha256 beside it, and anything under the checkpoint folder.
    out = os.path.realpath(a.output)
    ck = os.path.realpath(a.checkpoint)
    for reads in (a.model, a.model + ".sha256"):
        if os.path.realpath(reads) == out:
            print(f"pipetrain.weights: -o {a.output} is {reads}, which this command reads: writing it would destroy "
                  f"it; give another -o", file=sys.stderr)
            return 1
    if out == ck or out.startswith(ck + os.sep):
        print(f"pipetrain.weights: -o {a.output} lies in the checkpoint {a.checkpoint}, which this command reads; "
              f"give a path outside it", file=sys.stderr)
        return 1
    try:
        state = trained_state(a.model, a.checkpoint)
    except (OSError, ValueError, KeyError, RuntimeError) as e:
        print(f"pipetrain.weights: {e}", file=sys.stderr)
        return 1
    # Whole or not at all: a failed write leaves an earlier file of that name as it was.
    tmp = f"{a.output}.tmp-{os.getpid()}"
    try:
        check_room(tmp, sum(t.numel() * t.element_size() for t in state.values()) + (1 << 20))
        torch.save(state, tmp)
        os.replace(tmp, a.output)
    except (OSError, RuntimeError) as e:  # torch.save raises RuntimeError where it cannot open the file
        if os.path.exists(tmp):
            os.remove(tmp)
        print(f"pipetrain.weights: -o {a.output}: {e}", file=sys.stderr)
        return 1
    print(f"wrote {a.output}: {len(state)} tensors from {newest_checkpoint(a.checkpoint)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
