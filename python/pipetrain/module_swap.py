"""Modules `pipetrain export` puts in place of torch.nn's own, holding the same parameters and
buffers under the same names, so that the file trains as the model does and its weights load
back: DeferrableBatchNorm (batch_norm.py), and the embeddings with max_norm below, which
TorchScript compiles without their renormalisation (torch 1.13's F.embedding drops it in
script): a file of nn.Embedding(max_norm=1.0) trained on rows of norm 6, 0.67 off eager's
weights after 3 steps, exit 0.
"""
from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn


def replace_modules(model: nn.Module, replacement, made=None) -> int:
    """Puts replacement(child) in place of every module under `model` for which it returns one (not
    None), in place; returns how many. One held at several places (an nn.Sequential holding it
    twice) is replaced by one module at each, as it was one there."""
    made = {} if made is None else made
    count = 0
    for name, child in list(model._modules.items()):  # named_children() lists a module held twice once
        if child is None:
            continue
        if id(child) not in made:
            new = replacement(child)
            made[id(child)] = child if new is None else new
            if new is None:
                count += replace_modules(child, replacement, made)
            else:
                count += 1
        setattr(model, name, made[id(child)])
    return count


class RenormingEmbedding(nn.Module):
    """nn.Embedding with max_norm: the rows looked up are renormalised in place, then read."""
    __constants__ = ["max_norm", "norm_type", "padding_idx", "scale_grad_by_freq", "sparse"]

    def __init__(self, e: nn.Embedding):
        super().__init__()
        self.weight = e.weight
        self.max_norm, self.norm_type = float(e.max_norm), float(e.norm_type)
        self.padding_idx: Optional[int] = e.padding_idx
        self.scale_grad_by_freq, self.sparse = e.scale_grad_by_freq, e.sparse

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            torch.embedding_renorm_(self.weight, x.contiguous(), self.max_norm, self.norm_type)
        return F.embedding(x, self.weight, self.padding_idx, None, self.norm_type, self.scale_grad_by_freq,
                           self.sparse)


class RenormingEmbeddingBag(RenormingEmbedding):
    """nn.EmbeddingBag with max_norm, likewise."""
    __constants__ = RenormingEmbedding.__constants__ + ["mode", "include_last_offset"]

    def __init__(self, e: nn.EmbeddingBag):
        super().__init__(e)
        self.mode, self.include_last_offset = e.mode, e.include_last_offset

    def forward(self, x: torch.Tensor, offsets: Optional[torch.Tensor] = None,
                per_sample_weights: Optional[torch.Tensor] = None) -> torch.Tensor:
        with torch.no_grad():
            torch.embedding_renorm_(self.weight, x.contiguous(), self.max_norm, self.norm_type)
        return F.embedding_bag(x, self.weight, offsets, None, self.norm_type, self.scale_grad_by_freq, self.mode,
                               self.sparse, per_sample_weights, self.include_last_offset, self.padding_idx)


def renorming(child: nn.Module):
    """The module to put in place of an embedding with max_norm, else None."""
    if type(child) is nn.Embedding and child.max_norm is not None:
        return RenormingEmbedding(child)
    if type(child) is nn.EmbeddingBag and child.max_norm is not None:
        return RenormingEmbeddingBag(child)
    return None
