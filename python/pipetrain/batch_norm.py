"""BatchNorm that pipetrain can defer (train --deferred-batch-norm): torchgpipe's meaning, the
running statistics follow the whole minibatch rather than each microbatch.

`pipetrain export` puts one in place of every nn.BatchNorm1d/2d/3d of the model, holding the same
parameters and buffers under the same names. While its `pt_microbatches` buffer is 1 (the
default) it computes exactly what nn.BatchNorm computes. When the runtime defers it (any value
above 1), each microbatch is still normalised by its own statistics (so gradients do not change),
but its sums only gather in the pt_* buffers: once per minibatch the runtime adds them up over
the stage's replicas and folds them into the running mean and variance
(src/model/deferred_batch_norm.h), reading `momentum_value` and `cumulative` from here.
"""
import torch
import torch.nn.functional as F
from torch import nn

try:
    from pipetrain.module_swap import replace_modules
except ImportError:  # run as a script from python/pipetrain
    from module_swap import replace_modules


class DeferrableBatchNorm(nn.Module):
    __constants__ = ["eps", "cumulative", "momentum_value", "input_dims"]

    def __init__(self, bn: nn.modules.batchnorm._BatchNorm):
        super().__init__()
        self.eps = float(bn.eps)
        self.cumulative = bn.momentum is None  # nn.BatchNorm's cumulative moving average
        self.momentum_value = 0.0 if bn.momentum is None else float(bn.momentum)
        self.input_dims = {nn.BatchNorm1d: -1, nn.BatchNorm2d: 4, nn.BatchNorm3d: 5}.get(type(bn), -1)
        self.weight = bn.weight  # the same Parameters (None without affine) and buffers
        self.bias = bn.bias
        self.register_buffer("running_mean", bn.running_mean)
        self.register_buffer("running_var", bn.running_var)
        self.register_buffer("num_batches_tracked", bn.num_batches_tracked)
        c = bn.num_features
        self.register_buffer("pt_microbatches", torch.ones((), dtype=torch.long))
        self.register_buffer("pt_seen", torch.zeros((), dtype=torch.long))
        self.register_buffer("pt_count", torch.zeros((), dtype=torch.float64))
        self.register_buffer("pt_sum", torch.zeros(c, dtype=torch.float64))
        self.register_buffer("pt_sum_sq", torch.zeros(c, dtype=torch.float64))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.input_dims > 0 and x.dim() != self.input_dims:
            raise ValueError(f"expected {self.input_dims}D input (got {x.dim()}D input)")
        if not self.training or int(self.pt_microbatches.item()) <= 1:
            return self._plain(x)
        # Deferred: this microbatch's statistics normalise it; its sums wait for the runtime's fold.
        dims = [0] + list(range(2, x.dim()))
        xd = x.detach().to(torch.float64)
        self.pt_sum.add_(xd.sum(dims))
        self.pt_sum_sq.add_((xd * xd).sum(dims))
        self.pt_count.add_(float(x.numel() // x.size(1)))
        self.pt_seen.add_(1)
        return F.batch_norm(x, None, None, self.weight, self.bias, True, 0.0, self.eps)

    def _plain(self, x: torch.Tensor) -> torch.Tensor:
        # nn.BatchNorm's forward with running statistics, step for step.
        factor = self.momentum_value
        if self.training:
            self.num_batches_tracked.add_(1)
            if self.cumulative:
                factor = 1.0 / float(self.num_batches_tracked.item())
        return F.batch_norm(x, self.running_mean, self.running_var, self.weight, self.bias, self.training, factor,
                            self.eps)


def make_deferrable(model: nn.Module) -> int:
    """Replaces every BatchNorm1d/2d/3d of `model` that keeps running statistics and trains, in
    place; returns how many. One its user froze (.eval()) normalises by statistics that do not
    move: nothing to defer, and it stays as it is, in its mode."""
    return replace_modules(model, lambda child: DeferrableBatchNorm(child)
                           if type(child) in (nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d)
                           and child.track_running_stats and child.training else None)
