"""Chapter 11: a small GPT, trained on real text.

A decoder-only language model built from the course's own parts:

* a byte-level **BPE tokenizer** (:class:`BPETokenizer`, Sennrich et al.
  2016, on bytes as in GPT-2): 256 byte tokens, then the most frequent
  adjacent pair merged into a new token, again and again;
* **blocks** of pre-norm residual layers (:class:`Block`): RMSNorm
  (:class:`RMSNorm`, Zhang & Sennrich 2019), chapter 5's
  :class:`~attention_course.multihead.MultiHeadAttention` with grouped-query
  heads and chapter 8's rotary positions inside, and a SwiGLU feed-forward
  network (:class:`SwiGLU`, Shazeer 2020), as in LLaMA (Touvron et al.
  2023);
* chapter 9's :class:`~attention_course.decoding.KVCache` for generating, and
  its :func:`~attention_course.decoding.sample_next` (temperature, top-k,
  top-p);
* training: AdamW (Loshchilov & Hutter 2019) with weight decay on the
  matrices only, a learning rate that warms up and then decays along a
  cosine (:func:`warmup_cosine`), gradient clipping, and bfloat16 autocast
  where the device has fast bfloat16 (:func:`autocast_dtype`);
  :func:`perplexity` measures the result.

Chapter 11's experiment (the corpus, baselines, the heads it finds) is in
:mod:`attention_course.experiments.gpt`.
"""

from __future__ import annotations

import heapq
import inspect
import math
import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from itertools import pairwise

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attention_course.decoding import KVCache, sample_next
from attention_course.multihead import MultiHeadAttention
from attention_course.positions import Rotary

# Words, numbers, runs of other symbols and whitespace: every character
# falls in one chunk, and merges never cross a chunk's edge.
CHUNK = re.compile(r" ?[^\W\d]\w*| ?\d+| ?[^\s\w]+|\s+(?!\S)|\s+")


class BPETokenizer:
    """Byte-level byte-pair encoding.

    Token ids ``0..255`` are the bytes; id ``256 + r`` is the ``r``-th merge,
    the pair of tokens that was the most frequent when it was learnt. Any
    string round-trips: ``decode(encode(s)) == s``.
    """

    def __init__(self, merges: list[tuple[int, int]]) -> None:
        self.merges = {pair: 256 + r for r, pair in enumerate(merges)}
        self.vocab = [bytes([b]) for b in range(256)]
        for a, b in merges:
            self.vocab.append(self.vocab[a] + self.vocab[b])
        self._cache: dict[str, list[int]] = {}

    @property
    def vocab_size(self) -> int:
        return len(self.vocab)

    @classmethod
    def train(cls, text: str, vocab_size: int) -> BPETokenizer:
        """Learn ``vocab_size - 256`` merges from ``text`` (fewer if no pair
        is left to merge)."""
        if vocab_size < 256:
            raise ValueError(f"vocab_size must be at least 256 (the bytes), "
                             f"got {vocab_size}")
        counts = Counter(CHUNK.findall(text))
        words = [list(w.encode("utf-8", "surrogatepass")) for w in counts]
        freq = list(counts.values())
        pairs: Counter = Counter()
        where: dict[tuple[int, int], set[int]] = {}
        for i, word in enumerate(words):
            for pair in pairwise(word):
                pairs[pair] += freq[i]
                where.setdefault(pair, set()).add(i)
        heap = [(-n, pair) for pair, n in pairs.items()]
        heapq.heapify(heap)
        merges: list[tuple[int, int]] = []
        while len(merges) < vocab_size - 256 and heap:
            n, pair = heapq.heappop(heap)
            if pairs[pair] != -n:  # counted again since: requeue
                if pairs[pair] > 0:
                    heapq.heappush(heap, (-pairs[pair], pair))
                continue
            new = 256 + len(merges)
            merges.append(pair)
            fresh = set()
            for i in where.pop(pair):
                old = words[i]
                words[i] = word = _merge(old, pair, new)
                for p in pairwise(old):
                    pairs[p] -= freq[i]
                for p in pairwise(word):
                    pairs[p] += freq[i]
                    if new in p:
                        where.setdefault(p, set()).add(i)
                        fresh.add(p)
            for p in fresh:
                heapq.heappush(heap, (-pairs[p], p))
        return cls(merges)

    def _encode_chunk(self, chunk: str) -> list[int]:
        ids = list(chunk.encode("utf-8", "surrogatepass"))
        while len(ids) > 1:  # apply the earliest learnt merge first
            pair = min(pairwise(ids),
                       key=lambda p: self.merges.get(p, math.inf))
            if pair not in self.merges:
                break
            ids = _merge(ids, pair, self.merges[pair])
        return ids

    def encode(self, text: str) -> list[int]:
        ids: list[int] = []
        for chunk in CHUNK.findall(text):
            if chunk not in self._cache:
                self._cache[chunk] = self._encode_chunk(chunk)
            ids.extend(self._cache[chunk])
        return ids

    def decode(self, ids: Iterable[int]) -> str:
        data = b"".join(self.vocab[int(i)] for i in ids)
        try:
            return data.decode("utf-8", "surrogatepass")
        except UnicodeDecodeError:  # sampled ids may cut a character
            return data.decode("utf-8", "replace")


def _merge(ids: list[int], pair: tuple[int, int], new: int) -> list[int]:
    """``ids`` with every occurrence of ``pair`` replaced by ``new``."""
    out, i = [], 0
    while i < len(ids):
        if i + 1 < len(ids) and (ids[i], ids[i + 1]) == pair:
            out.append(new)
            i += 2
        else:
            out.append(ids[i])
            i += 1
    return out


@dataclass
class GPTConfig:
    """The shape of a :class:`GPT`. ``num_kv_heads`` defaults to
    ``num_heads`` (multi-head attention); ``d_ff`` to about
    ``8/3 d_model``, so that SwiGLU's three matrices hold as many weights
    as a ReLU network's two of ``4 d_model``."""

    vocab_size: int = 512
    d_model: int = 128
    num_heads: int = 4
    num_kv_heads: int | None = None
    num_layers: int = 4
    max_len: int = 256
    d_ff: int | None = None
    rope_base: float = 10000.0
    norm_eps: float = 1e-5
    tie_embeddings: bool = True
    bias: bool = False

    def __post_init__(self) -> None:
        if self.num_kv_heads is None:
            self.num_kv_heads = self.num_heads
        if self.d_ff is None:
            self.d_ff = 8 * math.ceil(8 * self.d_model / 3 / 8)


class RMSNorm(nn.Module):
    """``x / sqrt(mean(x^2) + eps) * weight`` over the last dimension: a
    layer norm without the mean and the bias (Zhang & Sennrich 2019).
    Computed in float32."""

    def __init__(self, dim: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: Tensor) -> Tensor:
        x32 = x.float()
        rms = x32.pow(2).mean(-1, keepdim=True).add(self.eps).rsqrt()
        return (x32 * rms).to(x.dtype) * self.weight.to(x.dtype)


class SwiGLU(nn.Module):
    """``W2 (SiLU(W1 x) * W3 x)``: a gated feed-forward network (Shazeer
    2020), without biases."""

    def __init__(self, d_model: int, d_ff: int) -> None:
        super().__init__()
        self.w1 = nn.Linear(d_model, d_ff, bias=False)
        self.w3 = nn.Linear(d_model, d_ff, bias=False)
        self.w2 = nn.Linear(d_ff, d_model, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class Block(nn.Module):
    """One decoder block, pre-norm: ``h = x + Attn(Norm(x))``, then
    ``h + FFN(Norm(h))``. Attention is causal, with RoPE inside and
    ``num_kv_heads`` key/value heads."""

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.attn_norm = RMSNorm(config.d_model, config.norm_eps)
        self.attn = MultiHeadAttention(
            config.d_model, config.num_heads, bias=config.bias,
            num_kv_heads=config.num_kv_heads,
            positions=Rotary(config.rope_base))
        self.ffn_norm = RMSNorm(config.d_model, config.norm_eps)
        self.ffn = SwiGLU(config.d_model, config.d_ff)

    def forward(self, x: Tensor, cache: KVCache | None = None,
                need_weights: bool = False) -> tuple[Tensor, Tensor | None]:
        y = self.attn_norm(x)
        y, weights = self.attn(y, y, y, is_causal=True, cache=cache,
                               need_weights=need_weights)
        h = x + y
        return h + self.ffn(self.ffn_norm(h)), weights


class GPT(nn.Module):
    """A decoder-only language model: token embedding, ``num_layers``
    blocks, a final RMSNorm and the output layer (sharing the embedding's
    weights when ``tie_embeddings``). No position table: RoPE is inside
    attention, so a sequence may run past ``max_len``, the training
    length, although the model was not trained there."""

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.config = config
        self.embed = nn.Embedding(config.vocab_size, config.d_model)
        self.blocks = nn.ModuleList(Block(config)
                                    for _ in range(config.num_layers))
        self.norm = RMSNorm(config.d_model, config.norm_eps)
        self.head = nn.Linear(config.d_model, config.vocab_size, bias=False)
        if config.tie_embeddings:
            self.head.weight = self.embed.weight
        for name, p in self.named_parameters():
            if p.dim() == 2:  # residual outputs start smaller (GPT-2)
                deep = name.endswith(("out_proj.weight", "w2.weight"))
                std = 0.02 / math.sqrt(2 * config.num_layers) if deep else 0.02
                nn.init.normal_(p, std=std)

    def new_cache(self) -> list[KVCache]:
        """An empty KV cache per block (chapter 9)."""
        return [KVCache() for _ in self.blocks]

    def forward(self, ids: Tensor,
                cache: list[KVCache] | None = None) -> Tensor:
        """``ids (B, T)`` -> logits ``(B, T, vocab_size)``. With a
        ``cache``, ``ids`` are the tokens after the cached ones."""
        x = self.embed(ids)
        for i, block in enumerate(self.blocks):
            x, _ = block(x, None if cache is None else cache[i])
        return self.head(self.norm(x))

    @torch.no_grad()
    def attention_weights(self, ids: Tensor) -> list[Tensor]:
        """Every block's weights ``(B, num_heads, T, T)`` on ``ids``."""
        weights, x = [], self.embed(ids)
        for block in self.blocks:
            x, w = block(x, need_weights=True)
            weights.append(w)
        return weights

    @torch.no_grad()
    def generate(self, ids: Tensor, max_new_tokens: int,
                 temperature: float = 0.0, use_cache: bool = True,
                 top_k: int | None = None, top_p: float | None = None,
                 generator: torch.Generator | None = None) -> Tensor:
        """Continue ``ids (B, T)`` by ``max_new_tokens`` tokens drawn by
        chapter 9's :func:`~attention_course.decoding.sample_next`
        (``temperature=0``: the most likely one): ``(B, T + new)``. The
        cache gives the same ids as running the whole sequence each step."""
        was_training = self.training
        self.eval()
        cache = self.new_cache() if use_cache else None
        out, fresh = ids, ids
        for _ in range(max_new_tokens):
            logits = self(fresh if use_cache else out, cache)[:, -1]
            token = sample_next(logits, temperature, top_k, top_p, generator)
            out = torch.cat([out, token[:, None]], dim=1)
            fresh = token[:, None]
        self.train(was_training)
        return out


# ---------------------------------------------------------------- training


def autocast_dtype(device: torch.device | str) -> torch.dtype | None:
    """``torch.bfloat16`` on a CUDA GPU with bfloat16 units, else ``None``
    (float32: on every CPU, and on older GPUs that only emulate bfloat16)."""
    device = torch.device(device)
    if device.type == "cuda" and _bf16_in_hardware():
        return torch.bfloat16
    return None


def _bf16_in_hardware() -> bool:
    """Whether the current CUDA GPU computes in bfloat16 itself: older
    torches have no ``including_emulation`` argument (and then count only
    native support), newer ones count emulation unless told not to."""
    check = torch.cuda.is_bf16_supported
    if "including_emulation" in inspect.signature(check).parameters:
        return check(including_emulation=False)
    return check()


def lm_loss(model: GPT, batch: Tensor) -> Tensor:
    """The mean cross-entropy of predicting ``batch[:, 1:]`` from
    ``batch[:, :-1]`` (``batch (B, T + 1)`` token ids), in nats per
    token. The forward pass runs under bfloat16 autocast where
    :func:`autocast_dtype` allows it."""
    dtype = autocast_dtype(batch.device)
    with torch.autocast(batch.device.type, dtype=dtype,
                        enabled=dtype is not None):
        logits = model(batch[:, :-1])
    return F.cross_entropy(logits.float().flatten(0, 1),
                           batch[:, 1:].flatten())


def make_optimizer(model: nn.Module, lr: float, weight_decay: float = 0.1,
                   betas: tuple[float, float] = (0.9, 0.95)
                   ) -> torch.optim.AdamW:
    """AdamW with decoupled weight decay on the matrices (the embedding
    included); the norms' gains are not decayed."""
    params = [p for p in model.parameters() if p.requires_grad]
    groups = [{"params": [p for p in params if p.dim() >= 2],
               "weight_decay": weight_decay},
              {"params": [p for p in params if p.dim() < 2],
               "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=lr, betas=betas)


def warmup_cosine(step: int, warmup: int, total: int,
                  floor: float = 0.1) -> float:
    """The learning rate's factor at ``step``: a linear rise over
    ``warmup`` steps, then a cosine from 1 down to ``floor`` at
    ``total``."""
    if step < warmup:
        return (step + 1) / warmup
    progress = min(1.0, (step - warmup) / max(1, total - warmup))
    return floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * progress))


@torch.no_grad()
def perplexity(model: GPT, batches: Iterable[Tensor]) -> float:
    """``exp`` of the mean cross-entropy per token over ``batches``
    (each ``(B, T + 1)``): the number of tokens the model is, on average,
    as unsure between as a uniform choice would be."""
    was_training = model.training
    model.eval()
    total, count = 0.0, 0
    for batch in batches:
        logits = model(batch[:, :-1]).float()
        total += F.cross_entropy(logits.flatten(0, 1), batch[:, 1:].flatten(),
                                 reduction="sum").item()
        count += batch[:, 1:].numel()
    model.train(was_training)
    return math.exp(total / count)
