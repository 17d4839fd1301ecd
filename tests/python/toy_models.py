"""Models written here for the export and fidelity tests: a small transformer language model
and an encoder-decoder whose decoder layers read the encoder's output (a boundary of two tensors)."""
import torch
from torch import nn


class Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.norm1 = nn.LayerNorm(d)
        self.attn = nn.MultiheadAttention(d, heads, batch_first=True)
        self.norm2 = nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x):
        h = self.norm1(x)
        x = x + self.attn(h, h, h, need_weights=False)[0]
        return x + self.mlp(self.norm2(x))


class TinyLM(nn.Module):
    """Token ids [N, T] -> logits [N, T, vocab]."""

    def __init__(self, vocab=32, d=32, heads=2, depth=2, seq=16):
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.pos = nn.Parameter(torch.randn(seq, d) * 0.02)
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(depth))
        self.norm = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab)

    def forward(self, tokens):
        x = self.embed(tokens) + self.pos
        for b in self.blocks:
            x = b(x)
        return self.head(self.norm(x))


class CrossBlock(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.mix = nn.Linear(2 * d, d)

    def forward(self, h, memory):
        return h + torch.tanh(self.mix(torch.cat([h, memory], -1)))


class EncoderDecoder(nn.Module):
    """x [N, F] -> classes: every decoder layer reads the encoder's output beside its own input."""

    def __init__(self, features=12, d=16, classes=5, depth=3):
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(features, d), nn.Tanh(), nn.Linear(d, d))
        self.start = nn.Linear(d, d)
        self.decoder = nn.ModuleList(CrossBlock(d) for _ in range(depth))
        self.head = nn.Linear(d, classes)

    def forward(self, x):
        memory = self.encoder(x)
        h = self.start(memory)
        for layer in self.decoder:
            h = layer(h, memory)
        return self.head(h)


def tiny_lm(**kw):
    return TinyLM(**kw)


def encoder_decoder(**kw):
    return EncoderDecoder(**kw)


class Branchy(nn.Module):
    """Data-dependent control flow: torch.fx cannot follow it."""

    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(4, 4), nn.Linear(4, 2)

    def forward(self, x):
        h = self.a(x)
        if h.sum() > 0:
            h = h * 2
        return self.b(h)


class FixedBatch(nn.Module):
    """Reshapes to a batch of 8 whatever it is given: microbatches would break it."""

    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(4, 4), nn.Linear(4, 2)

    def forward(self, x):
        return self.b(self.a(x).reshape(8, -1))


def branchy():
    return Branchy()


def fixed_batch():
    return FixedBatch()


class SpareHead(nn.Module):
    """A head kept for later that the forward never uses: export leaves it out, and says so."""

    def __init__(self):
        super().__init__()
        self.body = nn.Linear(4, 3)
        self.spare = nn.Linear(4, 7)

    def forward(self, x):
        return self.body(x)


def spare_head():
    return SpareHead()


class HalfCrossEntropy(nn.Module):
    """A loss kept in the model file (`pipetrain export --loss`)."""

    def forward(self, output, target):
        return 0.5 * nn.functional.cross_entropy(output, target)


def half_cross_entropy():
    return HalfCrossEntropy()


class FunctionalDropout(nn.Module):
    """Dropout written as a function of self.training in the model's own forward."""

    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(16, 16), nn.Linear(16, 4)

    def forward(self, x):
        return self.b(nn.functional.dropout(torch.relu(self.a(x)), 0.5, self.training))


class HalvesWhileTraining(nn.Module):
    def forward(self, x):
        return x * 0.5 if self.training else x


class TrainOnlyHalving(nn.Module):
    """A submodule that computes otherwise in training (a branch on self.training)."""

    def __init__(self):
        super().__init__()
        self.a, self.h, self.b = nn.Linear(16, 16), HalvesWhileTraining(), nn.Linear(16, 4)

    def forward(self, x):
        return self.b(self.h(torch.relu(self.a(x))))


def functional_dropout():
    return FunctionalDropout()


def train_only_halving():
    return TrainOnlyHalving()


def sum_cross_entropy():
    """A loss summed over the samples, not averaged: not what a split minibatch averages."""
    return nn.CrossEntropyLoss(reduction="sum")


def padded_cross_entropy():
    """A mean over the targets it does not ignore (-100: padding)."""
    return nn.CrossEntropyLoss(ignore_index=-100)


class TokenCrossEntropy(nn.Module):
    """A language model's next-token loss, as people write it: scores [N, T, V] flattened."""

    def forward(self, output, target):
        return nn.functional.cross_entropy(output.reshape(-1, output.size(-1)), target.reshape(-1))


def token_cross_entropy():
    return TokenCrossEntropy()


class SequenceFirstLM(nn.Module):
    """Token ids [N, T] -> logits [T, N, vocab]: the sequence first, as nn.Transformer's default."""

    def __init__(self, vocab=32, d=16):
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.head = nn.Linear(d, vocab)

    def forward(self, tokens):
        return self.head(self.embed(tokens)).transpose(0, 1)


def sequence_first_lm():
    return SequenceFirstLM()


class DetachedCrossEntropy(nn.Module):
    """A loss that gives the output no gradient: nothing would train."""

    def forward(self, output, target):
        return nn.functional.cross_entropy(output.detach(), target)


def detached_cross_entropy():
    return DetachedCrossEntropy()


def unreduced_cross_entropy():
    """A loss per sample (reduction 'none'), not one number."""
    return nn.CrossEntropyLoss(reduction="none")


class ShiftedCrossEntropy(nn.Module):
    """Cross-entropy that shifts the scores in place first, as numerically careful code does."""

    def forward(self, output, target):
        output -= output.max(1, keepdim=True).values.detach()
        return nn.functional.cross_entropy(output, target)


def shifted_cross_entropy():
    return ShiftedCrossEntropy()


class MaskedSquaredError(nn.Module):
    """Squared error over the targets that are not NaN (a missing label)."""

    def forward(self, output, target):
        known = torch.isfinite(target)
        return ((output - torch.nan_to_num(target)) ** 2 * known).sum() / known.sum().clamp(min=1) / output.size(0)


def masked_squared_error():
    return MaskedSquaredError()


class TemperedCrossEntropy(nn.Module):
    """A loss with a parameter of its own, which the model's optimizer would never see."""

    def __init__(self):
        super().__init__()
        self.temperature = nn.Parameter(torch.ones(()))

    def forward(self, output, target):
        return nn.functional.cross_entropy(output * self.temperature, target)


def tempered_cross_entropy():
    return TemperedCrossEntropy()


def squared_error():
    return nn.MSELoss()


class OptionalArguments(nn.Module):
    """forward(x, scale=2.0, mask=None), as transformer code writes its options: model(x) runs it."""

    def __init__(self):
        super().__init__()
        self.a = nn.Linear(12, 16)
        self.b = nn.Linear(16, 5)

    def forward(self, x, scale: float = 2.0, mask=None):
        h = torch.relu(self.a(x)) * scale
        if mask is not None:
            h = h * mask
        return self.b(h)


def optional_arguments():
    return OptionalArguments()


class KeywordOptions(nn.Module):
    """forward(x, bias=None, *args, scale=3.0, mask=None, **kwargs): torch 1.13's fx fails on such a
    forward under Python 3.11, which export then blamed on a branch."""

    def __init__(self):
        super().__init__()
        self.a = nn.Linear(12, 16)
        self.b = nn.Linear(16, 5)

    def forward(self, x, bias=None, *args, scale: float = 3.0, mask=None, **kwargs):
        h = torch.relu(self.a(x)) * scale
        if bias is not None:
            h = h + bias
        if mask is not None:
            h = h * mask
        return self.b(h)


class RequiredMask(KeywordOptions):
    def forward(self, x, *, mask):
        return self.b(torch.relu(self.a(x)) * mask)


def keyword_options(mask_required=False):
    return RequiredMask() if mask_required else KeywordOptions()


class InPlaceAfterTanh(nn.Module):
    """A forward that changes in place what tanh saved for its backward: PyTorch's own backward fails."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(12, 5)

    def forward(self, x):
        h = torch.tanh(self.fc(x))
        h.add_(1)
        return h


def in_place_after_tanh():
    return InPlaceAfterTanh()


def wide_mlp(width=2048, depth=8, classes=10):
    """Dense layers whose weights dwarf a process's own memory: what a worker that reads only its
    stage's layers of a model file saves shows in its peak RSS."""
    layers = []
    for _ in range(depth):
        layers += [nn.Linear(width, width), nn.ReLU()]
    return nn.Sequential(*layers, nn.Linear(width, classes))


def batch_norm_mlp():
    """BatchNorm1d: in training it needs two samples or more a microbatch."""
    return nn.Sequential(nn.Linear(12, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Linear(16, 5))


def dropout_mlp():
    """Two dropouts, one on each side of any split into two stages."""
    return nn.Sequential(nn.Linear(12, 32), nn.Tanh(), nn.Dropout(0.5), nn.Linear(32, 32), nn.ReLU(),
                         nn.Linear(32, 32), nn.Tanh(), nn.Dropout(0.3), nn.Linear(32, 32), nn.ReLU(),
                         nn.Linear(32, 5))


class Reparameterized(nn.Module):
    """A VAE's sampling step: z = mu + sigma x noise, drawn in every mode (not a dropout)."""

    def __init__(self):
        super().__init__()
        self.encoder, self.mu, self.log_var = nn.Linear(12, 32), nn.Linear(32, 8), nn.Linear(32, 8)
        self.decoder = nn.Sequential(nn.Linear(8, 32), nn.Tanh(), nn.Linear(32, 5))

    def forward(self, x):
        h = torch.tanh(self.encoder(x))
        mu, log_var = self.mu(h), self.log_var(h)
        return self.decoder(mu + torch.exp(0.5 * log_var) * torch.randn_like(mu))


def reparameterized():
    return Reparameterized()


class FlatLM(TinyLM):
    """TinyLM whose scores come flattened, [N x T, vocab], as a model written for its own loss."""

    def forward(self, tokens):
        out = super().forward(tokens)
        return out.reshape(-1, out.size(-1))


def flat_lm(**kw):
    return FlatLM(**kw)


class HalfOutput(nn.Module):
    """Scores returned in float16, which LibTorch's CPU losses do not take."""

    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(12, 16), nn.Linear(16, 5)

    def forward(self, x):
        return self.b(torch.relu(self.a(x))).half()


def half_output():
    return HalfOutput()


class NoGradStem(nn.Module):
    """torch.no_grad() in the model's own forward: its stem does not train."""

    def __init__(self):
        super().__init__()
        self.stem, self.head = nn.Linear(12, 16), nn.Linear(16, 5)

    def forward(self, x):
        with torch.no_grad():
            h = torch.tanh(self.stem(x))
        return self.head(h)


class Rounded(torch.autograd.Function):
    """A straight-through estimator: rounds forward, passes the gradient through."""

    @staticmethod
    def forward(ctx, x):
        return torch.round(x * 4) / 4

    @staticmethod
    def backward(ctx, g):
        return g


class StraightThrough(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(12, 16), nn.Linear(16, 5)

    def forward(self, x):
        return self.b(Rounded.apply(torch.tanh(self.a(x))))


class FrozenByNoGrad(nn.Module):
    """A submodule whose forward runs under torch.no_grad(): kept whole, so it stays frozen."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(12, 16)

    def forward(self, x):
        with torch.no_grad():
            return torch.tanh(self.lin(x))


class DetachedOffset(nn.Module):
    """A parameter read through .detach(): it moves the output, and no gradient reaches it."""

    def __init__(self):
        super().__init__()
        self.lin, self.head = nn.Linear(12, 16), nn.Linear(16, 5)
        self.offset = nn.Parameter(torch.randn(16) * 0.1)

    def forward(self, x):
        return self.head(torch.tanh(self.lin(x) + self.offset.detach()))


def detached_offset():
    return DetachedOffset()


class Averages(nn.Module):
    """Updates its buffers in every mode, as a monitor or a running mean outside BatchNorm does: a
    counter rebound by +=, an average moved in place and read by the output."""

    def __init__(self, d):
        super().__init__()
        self.lin = nn.Linear(d, d)
        self.register_buffer("calls", torch.zeros(()))
        self.register_buffer("mean", torch.zeros(d))

    def forward(self, x):
        self.calls += 1
        self.mean.mul_(0.9).add_(x.detach().mean(0), alpha=0.1)
        return torch.tanh(self.lin(x - self.mean))


class CountedForwards(nn.Module):
    """A user's own buffer whose name starts as deferred BatchNorm's sums do (pt_count)."""

    def __init__(self, d=12):
        super().__init__()
        self.lin, self.head = nn.Linear(d, d), nn.Linear(d, 5)
        self.register_buffer("pt_count", torch.zeros(()))

    def forward(self, x):
        self.pt_count.add_(1)  # in place: a top-level buffer rebound by += is refused
        return self.head(torch.tanh(self.lin(x)))


def counted_forwards():
    return CountedForwards()


class PackedIds(nn.Module):
    """Two vocabularies packed in one input: column 0 a segment id (3 rows), the rest tokens (20)."""

    def __init__(self):
        super().__init__()
        self.segment, self.token = nn.Embedding(3, 8), nn.Embedding(20, 8)
        self.head = nn.Linear(8, 5)

    def forward(self, x):
        return self.head(self.token(x[:, 1:]).mean(1) + self.segment(x[:, 0]))


def packed_ids():
    return PackedIds()


def few_tokens_many_classes():
    """A DNA classifier: 4 token ids, 10 classes."""
    return nn.Sequential(nn.Embedding(4, 8), nn.Flatten(), nn.Linear(8 * 12, 10))


def centred_by_running_mean():
    """A layer that centres its input by a running mean it updates (Averages), between two Linears."""
    return nn.Sequential(nn.Linear(12, 16), Averages(16), nn.Linear(16, 5))


def sparse_embedding():
    """nn.Embedding(sparse=True): its gradient is a sparse tensor."""
    return nn.Sequential(nn.Embedding(32, 8, sparse=True), nn.Flatten(), nn.Linear(96, 4))


class HashedBigrams(nn.Module):
    """fastText's hashed bigrams: ids past 2^24 made at the input and looked up after the stack."""

    def __init__(self, buckets=4099):
        super().__init__()
        self.emb, self.buckets = nn.Embedding(64, 16), buckets
        self.blocks = nn.ModuleList(nn.Linear(16, 16) for _ in range(4))
        self.hashed, self.head = nn.Embedding(buckets, 16), nn.Linear(16, 4)

    def forward(self, x):
        bigrams = x[:, :-1] * 1000003 + x[:, 1:]
        h = self.emb(x).mean(1)
        for b in self.blocks:
            h = torch.tanh(b(h))
        return self.head(h + self.hashed(bigrams % self.buckets).mean(1))


def hashed_bigrams():
    return HashedBigrams()


class HashedIds(nn.Module):
    """The hashing trick over ids anywhere in int64's range: two moduli, the second looked up after
    the stack, so the raw ids cross a cut packed beside the activations."""

    def __init__(self):
        super().__init__()
        self.first, self.second = nn.Embedding(1000, 16), nn.Embedding(997, 16)
        self.blocks = nn.ModuleList(nn.Linear(16, 16) for _ in range(3))
        self.head = nn.Linear(16, 4)

    def forward(self, x):
        h = self.first(x % 1000)
        for b in self.blocks:
            h = torch.tanh(b(h))
        return self.head((h + self.second(x % 997)).mean(1))


def hashed_ids():
    return HashedIds()


class RunningMean(nn.Module):
    """Subtracts a running mean of its input, updated in training (a branch on self.training:
    export keeps the module whole)."""

    def __init__(self, d):
        super().__init__()
        self.register_buffer("m", torch.zeros(d))

    def forward(self, x):
        if self.training:
            self.m.mul_(0.9).add_(0.1 * x.detach().mean(0))
        return x - self.m


class MeanReadAtTheOutput(nn.Module):
    """A normaliser whose statistics the output reads again by attribute, layers later (as
    observation normalisers are written)."""

    def __init__(self):
        super().__init__()
        self.inp, self.norm = nn.Linear(12, 16), RunningMean(16)
        self.blocks, self.head = nn.ModuleList(nn.Linear(16, 16) for _ in range(3)), nn.Linear(16, 5)

    def forward(self, x):
        h = self.norm(self.inp(x))
        for b in self.blocks:
            h = torch.tanh(b(h))
        return self.head(h + self.norm.m)


def mean_read_at_the_output():
    return MeanReadAtTheOutput()


class StatefulForward(nn.Module):
    """What fx runs once while tracing unless told otherwise: its input modified in place, a
    buffer of its own forward updated in place, submodules that update theirs, a frozen stem."""

    def __init__(self):
        super().__init__()
        self.stem = FrozenByNoGrad()
        self.a1, self.mid, self.a2, self.head = Averages(16), nn.Linear(16, 16), Averages(16), nn.Linear(16, 5)
        self.register_buffer("seen", torch.zeros(12))

    def forward(self, x):
        x.mul_(2.0)
        self.seen.mul_(0.5).add_(x.mean(0))
        h = self.a1(self.stem(x - self.seen))
        h = self.mid(h)
        h.tanh_()
        return self.head(self.a2(h))


def no_grad_stem():
    return NoGradStem()


def straight_through():
    return StraightThrough()


def stateful_forward():
    return StatefulForward()


def shared_in_sequential():
    """One Linear held twice by an nn.Sequential (named_children() lists it once)."""
    shared = nn.Linear(16, 16)
    return nn.Sequential(nn.Linear(12, 16), nn.Tanh(), shared, nn.Tanh(), nn.Linear(16, 16), nn.Tanh(), shared,
                         nn.Tanh(), nn.Linear(16, 5))


def shared_batch_norm_in_sequential():
    """One BatchNorm held twice by an nn.Sequential: one set of running statistics, moved by both uses."""
    shared = nn.BatchNorm1d(16)
    return nn.Sequential(nn.Linear(12, 16), shared, nn.Tanh(), nn.Linear(16, 16), shared, nn.Tanh(), nn.Linear(16, 5))


def batch_norm_in_eval_mode():
    # What a user writes to switch dropout off, which also freezes BatchNorm's statistics.
    return nn.Sequential(nn.Linear(16, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 4)).eval()


class FrozenBatchNorm(nn.Module):
    # A fine-tuned backbone's habit: a BatchNorm frozen (.eval(): its statistics fixed) in a model
    # that trains, kept so by train(), as such code overrides it.
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(16, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 4))
        with torch.no_grad():  # statistics of its own, as a pretrained BatchNorm holds
            self.body[1].running_mean.uniform_(-0.5, 0.5)
            self.body[1].running_var.uniform_(0.5, 2.0)
        self.body[1].eval()

    def train(self, mode=True):
        super().train(mode)
        self.body[1].eval()
        return self

    def forward(self, x):
        return self.body(x)


def frozen_batch_norm():
    return FrozenBatchNorm()


class InPlaceActivation(nn.Module):
    # torchvision's habit: the activation after a layer with weights built with inplace=True.
    def __init__(self):
        super().__init__()
        self.a, self.act, self.b = nn.Linear(16, 32), nn.ReLU(inplace=True), nn.Linear(32, 4)

    def forward(self, x):
        return self.b(self.act(self.a(x)))


def in_place_activation():
    return InPlaceActivation()


def in_place_activation_sequential():
    return nn.Sequential(nn.Linear(16, 32), nn.ReLU(inplace=True), nn.Linear(32, 4))


class DoublesItsInput(nn.Module):
    # Code of its own that writes into its input, with no inplace flag to read.
    def forward(self, x):
        return x.mul_(2)


def writes_its_input():
    return nn.Sequential(nn.Linear(16, 32), DoublesItsInput(), nn.Linear(32, 4))


class MaxNormBag(nn.Module):
    """Token ids [N, T] -> 4 classes through embeddings with max_norm, which renormalise the rows
    they look up, in place, at every forward; a feature masked by a bool buffer."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(32, 16, max_norm=1.0)
        self.bag = nn.EmbeddingBag(32, 8, max_norm=0.5, mode="mean")
        self.fc = nn.Linear(24, 4)
        self.register_buffer("keep", torch.arange(24) != 3)  # a bool buffer, as GPT-2's causal mask

    def forward(self, x):
        return self.fc(torch.cat([self.emb(x).mean(1), self.bag(x)], 1).masked_fill(~self.keep, 0.0))


def max_norm_bag():
    return MaxNormBag()


class ClippingLinear(nn.Module):
    """A forward that changes its parameter in place by hand: weight clipping as it runs (WGAN's),
    the same at every forward, which the check of the chain against the model cannot tell."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(12, 5)

    def forward(self, x):
        with torch.no_grad():
            self.lin.weight.clamp_(-0.1, 0.1)
        return self.lin(x)


class ClipsItsWeight(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = ClippingLinear()

    def forward(self, x):
        return self.body(x).tanh()


def clips_its_weight():
    return ClipsItsWeight()


_builds = [0]


def clips_another_weight():
    """The same, but each build draws other weights (its generator is not torch's)."""
    _builds[0] += 1
    m = ClipsItsWeight()
    with torch.no_grad():
        m.body.lin.weight.add_(_builds[0])
    return m


class StackedEncoder(nn.Module):
    """Token ids [N, T] -> 4 classes through torch's own nn.TransformerEncoder."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(32, 16)
        self.encoder = nn.TransformerEncoder(nn.TransformerEncoderLayer(16, 2, 32, 0.0, batch_first=True), 2)
        self.head = nn.Linear(16, 4)

    def forward(self, x):
        return self.head(self.encoder(self.emb(x)).mean(1))


def stacked_encoder():
    return StackedEncoder()


class UnbiasedAttention(nn.Module):
    """nn.MultiheadAttention(bias=False), self-attention, then a class per sample."""

    def __init__(self):
        super().__init__()
        self.attn = nn.MultiheadAttention(12, 2, bias=False, batch_first=True)
        self.head = nn.Linear(12, 5)

    def forward(self, x):
        return self.head(self.attn(x, x, x, need_weights=False)[0].mean(1))


def unbiased_attention():
    return UnbiasedAttention()


class TopOneExperts(nn.Module):
    """Top-1 mixture of experts as MoE code writes it: an expert no row was routed to is skipped,
    so its parameters get no gradient that step (export keeps this branch on data whole)."""

    def __init__(self, d=16, experts=4):
        super().__init__()
        self.router = nn.Linear(d, experts)
        self.experts = nn.ModuleList(nn.Linear(d, d) for _ in range(experts))
        with torch.no_grad():
            self.router.bias.copy_(torch.tensor([0.0, 0.0, 0.0, -1.5]))  # the last: rarely chosen

    def forward(self, h):
        choice = self.router(h).argmax(-1)
        out = h.clone()
        for e, expert in enumerate(self.experts):
            rows = (choice == e).nonzero().flatten()
            if rows.numel() > 0:
                out = out.index_add(0, rows, torch.tanh(expert(h.index_select(0, rows))))
        return out


class RoutedExperts(nn.Module):
    """TopOneExperts between two linears. The head starts at zero, as zero-initialised output
    layers do: every gradient but the head's is zero at the first step, reached or not."""

    def __init__(self):
        super().__init__()
        self.inp = nn.Linear(12, 16)
        self.moe = TopOneExperts()
        self.head = nn.Linear(16, 5)
        with torch.no_grad():
            self.head.weight.zero_()

    def forward(self, x):
        return self.head(self.moe(torch.tanh(self.inp(x))))


def routed_experts():
    torch.manual_seed(0)
    return RoutedExperts()


class NamesThatMeet(nn.Module):
    """A module `proj` beside a parameter `proj_weight`: as LibTorch's names, whose dots became
    underscores, proj.weight and proj_weight were one, and the file failed to load."""

    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(12, 12)
        self.proj_weight = nn.Parameter(torch.linspace(0.5, 1.5, 12))

    def forward(self, x):
        return torch.tanh(self.proj(x) * self.proj_weight)


def names_that_meet():
    torch.manual_seed(0)
    return nn.Sequential(NamesThatMeet(), nn.Linear(12, 5))


class TransientBuffer(nn.Module):
    """A buffer registered persistent=False (a rotary table, a mask), which state_dict leaves out."""

    def __init__(self):
        super().__init__()
        self.l1 = nn.Linear(12, 12)
        self.register_buffer("scale", torch.linspace(0.5, 1.5, 12), persistent=False)
        self.l2 = nn.Linear(12, 5)

    def forward(self, x):
        return self.l2(torch.tanh(self.l1(x)) * self.scale)


def transient_buffer():
    torch.manual_seed(0)
    return TransientBuffer()


class EmptyParameter(nn.Module):
    """A parameter of no elements read in forward: export's gradient check took the max of none."""

    def __init__(self):
        super().__init__()
        self.l1 = nn.Linear(12, 5)
        self.none = nn.Parameter(torch.zeros(0))

    def forward(self, x):
        return self.l1(x) + self.none.sum()


def empty_parameter():
    torch.manual_seed(0)
    return EmptyParameter()
