"""Models written the ordinary way, one per family that people pipeline, for the export and
fidelity tests: nothing in them is arranged for pipetrain (tuple unpacking of shapes, splits and
module outputs, sizes read in forward, masks and tables built there, tied embeddings)."""
import math

import torch
from torch import nn
import torch.nn.functional as F


# ---------------------------------------------------------------- GPT-style language model

def rotary_and_mask(T, head_dim):
    """Rotary positions' cos and sin for T tokens, and the causal mask, built in forward."""
    inv_freq = 1.0 / (10000 ** (torch.arange(0, head_dim, 2).float() / head_dim))
    freqs = torch.outer(torch.arange(T).float(), inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos(), emb.sin(), torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)


def rotate_half(x):
    a, b = x.chunk(2, dim=-1)
    return torch.cat((-b, a), dim=-1)


class CausalSelfAttention(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)

    def forward(self, x, cos, sin, mask):
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=2)
        q = q.view(B, T, self.heads, C // self.heads).transpose(1, 2)
        k = k.view(B, T, self.heads, C // self.heads).transpose(1, 2)
        v = v.view(B, T, self.heads, C // self.heads).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        att = (q @ k.transpose(-2, -1)) / math.sqrt(k.size(-1))
        att = att.masked_fill(mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, C)
        return self.proj(y)


class GPTBlock(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.ln1 = nn.LayerNorm(d)
        self.attn = CausalSelfAttention(d, heads)
        self.ln2 = nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x, cos, sin, mask):
        x = x + self.attn(self.ln1(x), cos, sin, mask)
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    """Token ids [N, T] -> logits [N, T, vocab]; pre-norm, rotary positions, tied embeddings."""

    def __init__(self, vocab=32, d=32, heads=2, depth=3):
        super().__init__()
        self.wte = nn.Embedding(vocab, d)
        self.blocks = nn.ModuleList(GPTBlock(d, heads) for _ in range(depth))
        self.ln_f = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)
        self.head.weight = self.wte.weight  # tied input and output embeddings
        self.head_dim = d // heads

    def forward(self, idx):
        B, T = idx.shape
        cos, sin, mask = rotary_and_mask(T, self.head_dim)
        x = self.wte(idx)
        for block in self.blocks:
            x = block(x, cos, sin, mask)
        return self.head(self.ln_f(x))


# ---------------------------------------------------------------- Llama-style language model

class LlamaAttention(nn.Module):
    """Grouped-query attention: `kv_heads` key/value heads shared by the query heads."""

    def __init__(self, d, heads, kv_heads):
        super().__init__()
        self.heads, self.kv_heads, self.hd = heads, kv_heads, d // heads
        self.q = nn.Linear(d, d, bias=False)
        self.kv = nn.Linear(d, 2 * kv_heads * self.hd, bias=False)
        self.o = nn.Linear(d, d, bias=False)

    def forward(self, x, cos, sin, mask):
        B, T, C = x.shape
        q = self.q(x).view(B, T, self.heads, self.hd).transpose(1, 2)
        k, v = self.kv(x).view(B, T, 2 * self.kv_heads, self.hd).transpose(1, 2).chunk(2, dim=1)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        k = k.repeat_interleave(self.heads // self.kv_heads, dim=1)
        v = v.repeat_interleave(self.heads // self.kv_heads, dim=1)
        att = (q @ k.transpose(-2, -1)) / math.sqrt(self.hd)
        att = att.masked_fill(mask, float("-inf")).softmax(dim=-1)
        return self.o((att @ v).transpose(1, 2).reshape(B, T, C))


class SwiGLU(nn.Module):
    def __init__(self, d, hidden):
        super().__init__()
        self.gate = nn.Linear(d, hidden, bias=False)
        self.up = nn.Linear(d, hidden, bias=False)
        self.down = nn.Linear(hidden, d, bias=False)

    def forward(self, x):
        return self.down(F.silu(self.gate(x)) * self.up(x))


class LlamaBlock(nn.Module):
    def __init__(self, d, heads, kv_heads):
        super().__init__()
        self.attn_norm = RMSNorm(d)
        self.attn = LlamaAttention(d, heads, kv_heads)
        self.mlp_norm = RMSNorm(d)
        self.mlp = SwiGLU(d, 2 * d)

    def forward(self, x, cos, sin, mask):
        x = x + self.attn(self.attn_norm(x), cos, sin, mask)
        return x + self.mlp(self.mlp_norm(x))


class Llama(nn.Module):
    """Token ids [N, T] -> logits: RMSNorm, SwiGLU, rotary positions, grouped-query attention,
    the output head tied to the input embedding."""

    def __init__(self, vocab=32, d=32, heads=4, kv_heads=2, depth=2):
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.blocks = nn.ModuleList(LlamaBlock(d, heads, kv_heads) for _ in range(depth))
        self.norm = RMSNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)
        self.head.weight = self.embed.weight
        self.hd = d // heads

    def forward(self, idx):
        cos, sin, mask = rotary_and_mask(idx.size(1), self.hd)
        x = self.embed(idx)
        for block in self.blocks:
            x = block(x, cos, sin, mask)
        return self.head(self.norm(x))


# ---------------------------------------------------------------- LSTM classifier

class LSTMClassifier(nn.Module):
    """Token ids [N, T] -> classes, from the last step of a two-layer LSTM."""

    def __init__(self, vocab=32, d=24, classes=5):
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.lstm = nn.LSTM(d, d, num_layers=2, batch_first=True)
        self.head = nn.Linear(d, classes)

    def forward(self, tokens):
        out, (h, c) = self.lstm(self.embed(tokens))
        return self.head(out[:, -1])


# ---------------------------------------------------------------- BERT-style encoder

class EncoderLayer(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.q, self.k, self.v = nn.Linear(d, d), nn.Linear(d, d), nn.Linear(d, d)
        self.out = nn.Linear(d, d)
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.ff = nn.Sequential(nn.Linear(d, 2 * d), nn.GELU(), nn.Linear(2 * d, d))

    def forward(self, x):
        B, T, C = x.size()
        h = self.heads
        q, k, v = (f(x).view(B, T, h, C // h).transpose(1, 2) for f in (self.q, self.k, self.v))
        att = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(C // h), dim=-1)
        x = self.ln1(x + self.out((att @ v).transpose(1, 2).reshape(B, T, C)))  # post-norm
        return self.ln2(x + self.ff(x))


class BertClassifier(nn.Module):
    def __init__(self, vocab=32, d=32, heads=4, depth=2, seq=16, classes=3):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(seq, d)
        self.layers = nn.ModuleList(EncoderLayer(d, heads) for _ in range(depth))
        self.cls = nn.Linear(d, classes)

    def forward(self, ids):
        positions = torch.arange(ids.shape[1]).unsqueeze(0)
        x = self.tok(ids) + self.pos(positions)
        for layer in self.layers:
            x = layer(x)
        return self.cls(x[:, 0])


# ---------------------------------------------------------------- CNN with BatchNorm, residuals

class ResBlock(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c)
        self.conv2, self.bn2 = nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c)

    def forward(self, x):
        h = F.relu(self.bn1(self.conv1(x)))
        return F.relu(x + self.bn2(self.conv2(h)))


class ResNetSmall(nn.Module):
    def __init__(self, c=8, classes=10):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, c, 3, padding=1, bias=False), nn.BatchNorm2d(c), nn.ReLU())
        self.blocks = nn.Sequential(ResBlock(c), ResBlock(c), ResBlock(c))
        self.fc = nn.Linear(c, classes)

    def forward(self, x):
        x = self.blocks(self.stem(x))
        return self.fc(x.mean(dim=(2, 3)))


# ---------------------------------------------------------------- U-Net (segmentation)

def double_conv(i, o):
    return nn.Sequential(nn.Conv2d(i, o, 3, padding=1), nn.ReLU(), nn.Conv2d(o, o, 3, padding=1), nn.ReLU())


class UNet(nn.Module):
    """Images [N, 3, H, W] -> per-pixel class logits [N, classes, H, W], long torch.cat skips."""

    def __init__(self, c=8, classes=3):
        super().__init__()
        self.down1, self.down2 = double_conv(3, c), double_conv(c, 2 * c)
        self.bottom = double_conv(2 * c, 4 * c)
        self.up2, self.dec2 = nn.ConvTranspose2d(4 * c, 2 * c, 2, stride=2), double_conv(4 * c, 2 * c)
        self.up1, self.dec1 = nn.ConvTranspose2d(2 * c, c, 2, stride=2), double_conv(2 * c, c)
        self.out = nn.Conv2d(c, classes, 1)

    def forward(self, x):
        s1 = self.down1(x)
        s2 = self.down2(F.max_pool2d(s1, 2))
        b = self.bottom(F.max_pool2d(s2, 2))
        d2 = self.dec2(torch.cat([self.up2(b), s2], dim=1))
        d1 = self.dec1(torch.cat([self.up1(d2), s1], dim=1))
        return self.out(d1)


# ---------------------------------------------------------------- DenseNet-style concatenation

class DenseLayer(nn.Module):
    def __init__(self, i, growth):
        super().__init__()
        self.bn = nn.BatchNorm2d(i)
        self.conv = nn.Conv2d(i, growth, 3, padding=1, bias=False)

    def forward(self, features):
        return self.conv(F.relu(self.bn(torch.cat(features, 1))))


class DenseNetSmall(nn.Module):
    def __init__(self, c=8, growth=4, layers=3, classes=10):
        super().__init__()
        self.stem = nn.Conv2d(3, c, 3, padding=1, bias=False)
        self.dense = nn.ModuleList(DenseLayer(c + k * growth, growth) for k in range(layers))
        self.bn = nn.BatchNorm2d(c + layers * growth)
        self.fc = nn.Linear(c + layers * growth, classes)

    def forward(self, x):
        features = [self.stem(x)]
        for layer in self.dense:
            features.append(layer(features))
        x = F.relu(self.bn(torch.cat(features, 1)))
        return self.fc(x.mean(dim=(2, 3)))


# ---------------------------------------------------------------- what export keeps whole or refuses

class Gate(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, h):
        h = self.lin(h)
        if h.sum() > 0:  # data-dependent: fx cannot follow it, so the module stays whole
            h = h * 2
        return h


class BranchInChild(nn.Module):
    """The advice of export's error followed: the branch moved into a submodule."""

    def __init__(self):
        super().__init__()
        self.a, self.gate, self.b = nn.Linear(4, 4), Gate(), nn.Linear(4, 2)

    def forward(self, x):
        return self.b(torch.relu(self.gate(torch.relu(self.a(x)))))


class ReturnsDict(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(4, 2)

    def forward(self, x):
        return {"logits": self.a(x)}


class RMSNorm(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.weight


class HeadOnTheEmbedding(nn.Module):
    """A GPT-2-style head written as a product with the embedding's weight, after an RMSNorm
    that torch.fx traces through: layers named for what computes them."""

    def __init__(self, vocab=32, d=16):
        super().__init__()
        self.wte = nn.Embedding(vocab, d)
        self.mlp = nn.Linear(d, d)
        self.norm = RMSNorm(d)

    def forward(self, idx):
        x = self.norm(torch.relu(self.mlp(self.wte(idx))))
        return x @ self.wte.weight.T


class IdsAgainLater(nn.Module):
    """Token ids looked up at the start and again two blocks later: a cut between carries the
    ids beside the activations, packed into one float tensor (export.py's pack)."""

    def __init__(self, vocab=1024, d=16, classes=10):
        super().__init__()
        self.first = nn.Embedding(vocab, d)
        self.block1 = nn.Sequential(nn.Linear(d, 32), nn.ReLU(), nn.Linear(32, d))
        self.block2 = nn.Sequential(nn.Linear(d, 32), nn.ReLU(), nn.Linear(32, d))
        self.again = nn.Embedding(vocab, d)
        self.head = nn.Linear(d, classes)

    def forward(self, ids):
        h = torch.relu(self.block1(self.first(ids)))
        h = torch.relu(self.block2(h)) + self.again(ids)
        return self.head(h.mean(1))


def ids_again_later(**kw):
    return IdsAgainLater(**kw)


def gpt(**kw):
    return GPT(**kw)


def llama(**kw):
    return Llama(**kw)


def head_on_the_embedding(**kw):
    return HeadOnTheEmbedding(**kw)


def lstm_classifier(**kw):
    return LSTMClassifier(**kw)


def bert(**kw):
    return BertClassifier(**kw)


def resnet_small(**kw):
    return ResNetSmall(**kw)


def unet(**kw):
    return UNet(**kw)


def densenet_small(**kw):
    return DenseNetSmall(**kw)


def branch_in_child():
    return BranchInChild()


def returns_dict():
    return ReturnsDict()
