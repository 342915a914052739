"""Chapter 9: generating text. The KV cache, beam search and sampling.

A decoder produces one token per step. Without a cache, step ``t`` runs the
whole decoder over all ``t`` tokens so far, although the keys and values of the
earlier ones cannot have changed (the decoder is causal): the work grows with
``t^2``. A :class:`KVCache` keeps each attention layer's keys and values, so a
step computes the new token's query, key and value only and attends to
everything cached, with the new queries aligned bottom-right
(:func:`attention_course.masking.causal_mask`, ``align="bottom_right"``). Its
size, :func:`kv_cache_bytes_per_token`, is what multi-query and grouped-query
attention (``MultiHeadAttention(..., num_kv_heads=...)``) shrink.

Which token to take next: the most likely one (greedy,
:meth:`attention_course.transformer.Transformer.greedy_decode`), the best of
several hypotheses kept side by side (:func:`beam_search`), or a random draw
from a sharpened or truncated distribution (:func:`sample_next`,
:func:`sample_decode`).

The searches need of ``model`` only what
:class:`~attention_course.transformer.Transformer` offers:
``encode(src_ids) -> (memory, ...)``, ``new_cache()`` (an object with
``reorder(index)``),
``decode(tgt_ids, memory, src_ids, cache=cache) -> (logits, ...)`` where
``tgt_ids`` holds the tokens not yet in the cache, ``generate(...)``, ``pad_id``
and ``max_len``.
"""

from __future__ import annotations

import time

import torch
import torch.nn.functional as F
from torch import Tensor

from attention_course.transformer import register_decoder_cache


class KVCache:
    """The keys and values ``(B, H_kv, T, head_dim)`` of one attention layer,
    kept across steps.

    ``static=False`` (self-attention): each call appends the new positions' keys
    and values, so ``T`` grows by one per generated token. ``static=True``
    (cross-attention to the encoder's memory): the first call stores the
    memory's keys and values, and later calls reuse them instead of projecting
    the memory again.
    """

    def __init__(self, static: bool = False) -> None:
        self.static = static
        self.keys: Tensor | None = None
        self.values: Tensor | None = None

    def __len__(self) -> int:
        """``T``, the number of positions held."""
        return 0 if self.keys is None else self.keys.size(-2)

    def update(self, keys: Tensor, values: Tensor) -> tuple[Tensor, Tensor]:
        """Add ``keys`` and ``values`` ``(B, H_kv, t, head_dim)`` of ``t`` new
        positions.

        Returns everything held, ``(B, H_kv, T + t, head_dim)`` each.
        """
        if self.keys is None or self.values is None:
            self.keys, self.values = keys, values
            return keys, values
        if self.static:
            raise ValueError("a static KVCache is filled once (the encoder "
                             "memory's keys and values); it cannot be "
                             "updated again")
        for name, held, new in (("keys", self.keys, keys),
                                ("values", self.values, values)):
            if (new.dim() != 4 or new.shape[:2] != held.shape[:2]
                    or new.size(3) != held.size(3)):
                raise ValueError(
                    f"new {name} of shape {tuple(new.shape)} do not continue "
                    f"the cached (B, H_kv, T, head_dim) = {tuple(held.shape)}"
                )
        self.keys = torch.cat([self.keys, keys], dim=-2)
        self.values = torch.cat([self.values, values], dim=-2)
        return self.keys, self.values

    def reorder(self, index: Tensor) -> None:
        """Keep batch rows ``index`` (in beam search each new beam continues an
        old one)."""
        if self.keys is not None and self.values is not None:
            self.keys = self.keys.index_select(0, index)
            self.values = self.values.index_select(0, index)

    @property
    def nbytes(self) -> int:
        """Bytes held by the keys and values."""
        return sum(t.numel() * t.element_size()
                   for t in (self.keys, self.values) if t is not None)


class DecoderCache:
    """The caches of a decoder stack: per layer,
    ``(self-attention, cross-attention)`` KVCaches.

    ``len(cache)`` is the number of target positions decoded so far (held by the
    first layer's self-attention cache): the position of the next token.
    """

    def __init__(self, num_layers: int) -> None:
        self.layers = [(KVCache(), KVCache(static=True))
                       for _ in range(num_layers)]

    def __len__(self) -> int:
        return len(self.layers[0][0]) if self.layers else 0

    def reorder(self, index: Tensor) -> None:
        """Keep batch rows ``index`` in every layer's caches."""
        for self_cache, cross_cache in self.layers:
            self_cache.reorder(index)
            cross_cache.reorder(index)

    @property
    def nbytes(self) -> int:
        return sum(c.nbytes for pair in self.layers for c in pair)


register_decoder_cache(DecoderCache)  # Transformer.new_cache() makes these


def kv_cache_bytes_per_token(num_layers: int, num_kv_heads: int, head_dim: int,
                             dtype: torch.dtype = torch.float32) -> int:
    """Bytes one more token adds to a self-attention KV cache:
    ``2 L H_kv d_head`` numbers.

    A key and a value (2) per layer (``num_layers``) and key/value head.
    Multi-head attention has ``num_kv_heads = num_heads``; grouped-query
    attention fewer; multi-query attention 1, so its cache is ``num_heads``
    times smaller.
    """
    for name, value in (("num_layers", num_layers),
                        ("num_kv_heads", num_kv_heads),
                        ("head_dim", head_dim)):
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise ValueError(f"{name} must be a positive int, got {value!r}")
    return 2 * num_layers * num_kv_heads * head_dim * dtype.itemsize


@torch.no_grad()
def step_times(model, src_ids: Tensor, bos_id: int, num_tokens: int,
               use_cache: bool = True) -> Tensor:
    """Seconds spent on each generated token, float64 ``(num_tokens,)``.

    Greedy decoding (``model.generate``) with an ``eos_id`` that no model
    produces, so that every row runs ``num_tokens`` steps. The clock is read
    each time a next token is picked: entry ``t`` is the time of step ``t``
    (entry 0 includes the encoder's run).
    """
    if not 1 <= num_tokens <= model.max_len - 1:
        raise ValueError(f"num_tokens must be in 1..max_len - 1 = "
                         f"{model.max_len - 1}, got {num_tokens}")
    stamps: list[float] = []

    def pick(logits: Tensor) -> Tensor:
        # wait for the step to finish before reading the clock
        if logits.is_cuda:
            torch.cuda.synchronize(logits.device)
        stamps.append(time.perf_counter())
        return logits.argmax(-1)

    start = time.perf_counter()
    model.generate(src_ids, bos_id, -1, pick, num_tokens, use_cache)
    return torch.tensor([start, *stamps], dtype=torch.float64).diff()


@torch.no_grad()
def sequence_log_probs(model, src_ids: Tensor, ids: Tensor,
                       bos_id: int) -> Tensor:
    """The summed log-probability the model gives to each output: ``(B,)``.

    ``ids (B, L)`` as decoding returns them (each row's tokens, ``<eos>``,
    then ``pad_id``; a reference's ``tgt_out`` has the same form). One
    teacher-forced pass reads ``<bos>`` and the tokens; positions holding
    ``pad_id`` are not counted.
    """
    if ids.dim() != 2 or ids.size(0) != src_ids.size(0):
        raise ValueError(f"ids must be (B, L) with the B of src_ids "
                         f"{tuple(src_ids.shape)}, got {tuple(ids.shape)}")
    bos = torch.full_like(ids[:, :1], bos_id)
    logits = model(src_ids, torch.cat([bos, ids[:, :-1]], dim=1))
    log_probs = F.log_softmax(logits.float(), dim=-1)
    chosen = log_probs.gather(-1, ids[..., None])[..., 0]
    return chosen.masked_fill(ids == model.pad_id, 0.0).sum(-1)


# ---------------------------------------------------------------- sampling


def filter_logits(logits: Tensor, top_k: int | None = None,
                  top_p: float | None = None) -> Tensor:
    """Set to ``-inf`` the logits ``(..., V)`` of tokens outside the top-k and
    the nucleus.

    ``top_k`` keeps the ``k`` largest logits (and any tied with the ``k``-th).
    ``top_p`` keeps the nucleus of Holtzman et al. 2020: the smallest set of
    most likely tokens whose probabilities sum to at least ``top_p`` (always at
    least the most likely one). With both, top-k is applied first.
    """
    if top_k is not None:
        if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1:
            raise ValueError(f"top_k must be a positive int, got {top_k!r}")
        kth = logits.topk(min(top_k, logits.size(-1)), dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p is not None:
        if not 0.0 < top_p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1], got {top_p!r}")
        sorted_logits, order = logits.sort(dim=-1, descending=True)
        probs = sorted_logits.softmax(dim=-1)
        # the mass of the more likely tokens
        before = probs.cumsum(dim=-1) - probs
        outside = (before >= top_p).scatter(-1, order, before >= top_p)
        logits = logits.masked_fill(outside, float("-inf"))
    return logits


def sample_next(logits: Tensor, temperature: float = 1.0,
                top_k: int | None = None, top_p: float | None = None,
                generator: torch.Generator | None = None) -> Tensor:
    """Draw one token id per row of ``logits (..., V)``: long ``(...)``.

    The logits are divided by ``temperature`` (below 1 sharpens, above 1
    flattens the distribution; ``0`` takes the argmax, the limit as the
    temperature goes to 0), then filtered by :func:`filter_logits`, then sampled
    from their softmax.
    """
    if temperature < 0:
        raise ValueError(f"temperature must be >= 0, got {temperature}")
    if temperature == 0:
        return logits.argmax(dim=-1)
    logits = filter_logits(logits.float() / temperature, top_k, top_p)
    probs = logits.softmax(dim=-1).reshape(-1, logits.size(-1))
    return torch.multinomial(probs, 1,
                             generator=generator).view(logits.shape[:-1])


@torch.no_grad()
def sample_decode(model, src_ids: Tensor, bos_id: int, eos_id: int,
                  max_len: int | None = None, temperature: float = 1.0,
                  top_k: int | None = None, top_p: float | None = None,
                  generator: torch.Generator | None = None,
                  use_cache: bool = True) -> Tensor:
    """Generate by sampling each next token with :func:`sample_next`: ids
    ``(B, L)``.

    The same loop as greedy decoding (``model.generate``): rows end with
    ``eos_id`` (unless ``max_len`` steps ran out) followed by padding.
    ``temperature=0`` is greedy decoding. A ``generator`` must be on the model's
    device.
    """
    return model.generate(src_ids, bos_id, eos_id,
                          lambda logits: sample_next(logits, temperature, top_k,
                                                     top_p, generator),
                          max_len, use_cache)


# ---------------------------------------------------------------- beam search


def length_penalty_factor(length: int, alpha: float) -> float:
    """GNMT's length penalty ``((5 + length) / 6) ** alpha``
    (Wu et al. 2016); 1 for alpha=0."""
    return ((5 + length) / 6) ** alpha


@torch.no_grad()
def beam_search(model, src_ids: Tensor, bos_id: int, eos_id: int,
                beam_size: int = 4, max_len: int | None = None,
                length_penalty: float = 0.0) -> tuple[Tensor, Tensor]:
    """Keep the ``beam_size`` most likely hypotheses per sentence; return the
    best finished one.

    Every step extends each live hypothesis by every token, scores each
    candidate by its summed log-probability, and keeps the best ``beam_size``
    that do not end in ``eos_id``; a candidate among the best ``beam_size`` that
    ends in ``eos_id`` is finished and set aside (the best ``beam_size``
    finished ones are kept). Finished hypotheses are compared by
    ``score / lp(length)`` with GNMT's length penalty
    ``lp = ((5 + length) / 6) ** length_penalty`` (Wu et al. 2016; ``length``
    counts the generated tokens with ``<eos>``): ``0`` compares raw sums, which
    favour short outputs; larger values favour longer ones. A sentence is done
    once it has ``beam_size`` finished hypotheses and no live one can still beat
    them; at ``max_len`` steps the live ones count as finished. The decoder runs
    with its KV cache, reordered as beams move.

    Returns ``ids (B, L)`` (without ``<bos>``, each row ending in ``eos_id``
    unless cut by ``max_len``, then ``pad_id``) and ``scores (B,)``, the summed
    log-probabilities of the chosen hypotheses. ``beam_size=1`` is greedy
    decoding.
    """
    if (isinstance(beam_size, bool) or not isinstance(beam_size, int)
            or beam_size < 1):
        raise ValueError(f"beam_size must be a positive int, got {beam_size!r}")
    max_len = (model.max_len - 1 if max_len is None
               else min(max_len, model.max_len - 1))
    batch, k, device = src_ids.size(0), beam_size, src_ids.device
    memory, *_ = model.encode(src_ids)
    memory, src = (memory.repeat_interleave(k, 0),
                   src_ids.repeat_interleave(k, 0))
    cache = model.new_cache()
    tokens = torch.full((batch * k, 1), bos_id, dtype=torch.long, device=device)
    scores = torch.full((batch, k), float("-inf"), device=device)
    scores[:, 0] = 0.0  # one live hypothesis, <bos>, to start with
    finished: list[list[tuple[float, float, list[int]]]] = [
        [] for _ in range(batch)
    ]
    done = [False] * batch
    rows = torch.arange(batch, device=device)[:, None] * k
    # candidates of this step have `step` tokens
    for step in range(1, max_len + 1):
        logits = model.decode(tokens[:, -1:], memory, src,
                              cache=cache)[0][:, -1]
        log_probs = F.log_softmax(logits.float(), dim=-1)
        vocab = log_probs.size(-1)
        candidates = (scores[..., None]
                      + log_probs.view(batch, k, vocab)).view(batch, -1)
        top_scores, top_index = candidates.topk(min(2 * k, k * vocab), dim=-1)
        # the next live hypotheses (score, beam it extends, token),
        # k per sentence
        live = [[(float("-inf"), 0, model.pad_id)] * k for _ in range(batch)]
        for b, (row_scores, row_index) in enumerate(
                zip(top_scores.tolist(), top_index.tolist(), strict=True)):
            if done[b]:
                continue
            kept = 0
            for rank, (score, index) in enumerate(
                    zip(row_scores, row_index, strict=True)):
                if score == float("-inf") or kept == k:
                    break
                beam, token = divmod(index, vocab)
                if token != eos_id:
                    live[b][kept] = (score, beam, token)
                    kept += 1
                elif rank < k:
                    hypothesis = tokens[b * k + beam, 1:].tolist() + [eos_id]
                    _keep_best(finished[b], score, hypothesis,
                               length_penalty, k)
            done[b] = _search_is_over(
                finished[b], [s for s, _, _ in live[b]], step, max_len,
                length_penalty, k,
            )
        if all(done):
            break
        next_scores, next_beam, next_token = (
            torch.tensor(live, device=device).unbind(-1)
        )
        index = (rows + next_beam.long()).view(-1)
        tokens = torch.cat([tokens[index], next_token.long().view(-1, 1)],
                           dim=1)
        cache.reorder(index)
        scores = next_scores
    for b in range(batch):  # out of steps: live hypotheses count as finished
        if not done[b]:
            for beam, score in enumerate(scores[b].tolist()):
                if score > float("-inf"):
                    _keep_best(finished[b], score,
                               tokens[b * k + beam, 1:].tolist(),
                               length_penalty, k)
    best = [max(hyps, key=lambda h: h[0]) for hyps in finished]
    length = max(len(h[2]) for h in best)
    ids = torch.full((batch, length), model.pad_id, dtype=torch.long,
                     device=device)
    for b, (_, _, hypothesis) in enumerate(best):
        ids[b, : len(hypothesis)] = torch.tensor(hypothesis, dtype=torch.long)
    return ids, torch.tensor([h[1] for h in best], device=device)


def _keep_best(finished: list[tuple[float, float, list[int]]], score: float,
               hypothesis: list[int], alpha: float, k: int) -> None:
    """Add ``(normalised score, score, ids)`` to ``finished``; keep the
    ``k`` best."""
    finished.append((score / length_penalty_factor(len(hypothesis), alpha),
                     score, hypothesis))
    finished.sort(key=lambda h: h[0], reverse=True)
    del finished[k:]


def _search_is_over(finished: list[tuple[float, float, list[int]]],
                    live_scores: list[float], step: int, max_len: int,
                    alpha: float, k: int) -> bool:
    """True when no live hypothesis (of ``step`` tokens) can beat the ``k``
    finished ones.

    A live score can only fall (log-probabilities are <= 0), and
    ``score / lp(length)`` for a fixed score is monotonic in the length, so its
    best future value is at one end of the lengths it can still reach,
    ``step .. max_len``.
    """
    live = [s for s in live_scores if s > float("-inf")]
    if not live:
        return True
    if len(finished) < k:
        return False
    best_possible = max(s / length_penalty_factor(n, alpha)
                        for s in live for n in (step, max_len))
    return best_possible <= finished[-1][0]
