"""Multi-head attention: project, split into heads, attend per head,
concatenate, project.

One module serves self-attention (query, key and value are the same sequence)
and cross-attention (the query comes from one sequence, keys and values from
another). It has two paths that compute the same function:

* the **explicit** path (``need_weights=True``) runs
  :func:`attention_course.masking.scaled_dot_product_attention` and returns the
  attention weights of every head, ``(B, num_heads, Nq, Nk)``, for teaching and
  plots;
* the **fused** path (``need_weights=False``, the default) calls
  :func:`torch.nn.functional.scaled_dot_product_attention`, which never
  materialises the ``(Nq, Nk)`` weight matrix and so needs memory linear in the
  sequence length.

Masks follow the course's single convention: a boolean mask is ``True`` where
attention is *allowed*; a float mask is added to the scores. Shapes are
batch-first.

Section 5.4 trains it: :func:`lookup_batch` makes a task whose answer at
every position needs two kinds of context (the previous token, and the token
of the same colour), :class:`LookupModel` solves it with one multi-head layer,
and :func:`head_diversity` and :func:`head_roles` measure how far the trained
heads differ and what each one looks at.

Part II adds three options. ``num_kv_heads`` gives grouped-query attention
(fewer key and value heads than query heads, each shared by a group; ``1`` is
multi-query attention). ``positional="rope"`` or ``"alibi"`` puts relative
positions inside attention (:mod:`attention_course.positions`). A
:class:`~attention_course.decoding.KVCache` passed as ``cache`` keeps the keys
and values of earlier calls, for generating one token at a time.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator, Sequence
from typing import Any, NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from tqdm.auto import tqdm

from attention_course.decoding import KVCache
from attention_course.device import get_device
from attention_course.masking import causal_mask, scaled_dot_product_attention
from attention_course.positions import alibi_bias, rotary_embedding
from attention_course.training import to_device, train

POSITIONAL = (None, "rope", "alibi")


def _sdpa_takes_enable_gqa() -> bool:
    """Whether this PyTorch's fused kernel shares key/value heads itself
    (2.5 and later)."""
    query, key_value = torch.zeros(1, 2, 1, 1), torch.zeros(1, 1, 1, 1)
    try:
        F.scaled_dot_product_attention(query, key_value, key_value,
                                       enable_gqa=True)
    except TypeError:
        return False
    return True


_SDPA_GQA = _sdpa_takes_enable_gqa()


def split_heads(x: Tensor, num_heads: int) -> Tensor:
    """``(B, N, num_heads * head_dim)`` -> ``(B, num_heads, N, head_dim)``
    (a view)."""
    batch, length, dim = x.shape
    if dim % num_heads:
        raise ValueError(f"last dimension {dim} of x (shape "
                         f"{tuple(x.shape)}) is not divisible by "
                         f"num_heads={num_heads}")
    head_dim = dim // num_heads
    return x.view(batch, length, num_heads, head_dim).transpose(1, 2)


def merge_heads(x: Tensor) -> Tensor:
    """``(B, num_heads, N, head_dim)`` -> ``(B, N, num_heads * head_dim)``:
    the concatenation."""
    batch, num_heads, length, head_dim = x.shape
    return x.transpose(1, 2).reshape(batch, length, num_heads * head_dim)


class MultiHeadAttention(nn.Module):
    """Multi-head scaled dot-product attention (Vaswani et al., 2017).

    ``embed_dim`` is split into ``num_heads`` heads of
    ``embed_dim // num_heads`` dimensions each. ``kdim`` and ``vdim`` are the
    feature sizes of keys and values (default ``embed_dim``), so the module also
    does cross-attention between sequences of different widths. The projections
    are the ``nn.Linear`` submodules ``q_proj``, ``k_proj``, ``v_proj`` and
    ``out_proj``.

    ``num_kv_heads`` (default ``num_heads``) gives grouped-query attention
    (Ainslie et al. 2023): ``k_proj`` and ``v_proj`` produce
    ``num_kv_heads * head_dim`` features, and query head ``h`` uses key/value
    head ``h // (num_heads // num_kv_heads)``; ``num_kv_heads=1`` is multi-query
    attention (Shazeer 2019).

    ``positional`` puts relative positions inside attention: ``None`` (the
    default; any position information comes with the inputs), ``"rope"``
    (queries and keys are rotated by
    :func:`~attention_course.positions.rotary_embedding` with base
    ``rope_base``, after the head split and before the kernel) or ``"alibi"``
    (the bias of :func:`~attention_course.positions.alibi_bias` is added to the
    scores: causal with ``is_causal``, symmetric without). Queries and keys are
    at positions ``0, 1, ...``, after the cached ones when there is a cache.
    Meant for self-attention.
    """

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        dropout: float = 0.0,
        bias: bool = True,
        kdim: int | None = None,
        vdim: int | None = None,
        num_kv_heads: int | None = None,
        positional: str | None = None,
        rope_base: float = 10000.0,
    ) -> None:
        super().__init__()
        if embed_dim <= 0 or num_heads <= 0:
            raise ValueError(f"embed_dim and num_heads must be positive, got "
                             f"embed_dim={embed_dim}, num_heads={num_heads}")
        if embed_dim % num_heads:
            raise ValueError(f"embed_dim={embed_dim} is not divisible by "
                             f"num_heads={num_heads}")
        num_kv_heads = num_heads if num_kv_heads is None else num_kv_heads
        if num_kv_heads <= 0 or num_heads % num_kv_heads:
            raise ValueError(f"num_kv_heads must be positive and divide "
                             f"num_heads={num_heads} (each key/value head "
                             f"serves a group of query heads), got "
                             f"num_kv_heads={num_kv_heads}")
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {dropout}")
        if positional not in POSITIONAL:
            raise ValueError(f"positional must be one of {POSITIONAL}, "
                             f"got {positional!r}")
        self.embed_dim, self.num_heads = embed_dim, num_heads
        self.dropout = dropout
        self.num_kv_heads, self.positional = num_kv_heads, positional
        self.rope_base = rope_base
        self.head_dim = embed_dim // num_heads
        if positional == "rope" and self.head_dim % 2:
            raise ValueError(f"rope rotates pairs of features: head_dim = "
                             f"embed_dim / num_heads = {embed_dim} / "
                             f"{num_heads} = {self.head_dim} must be even")
        self.kdim = embed_dim if kdim is None else kdim
        self.vdim = embed_dim if vdim is None else vdim
        kv_dim = num_kv_heads * self.head_dim
        self.q_proj = nn.Linear(embed_dim, embed_dim, bias=bias)
        self.k_proj = nn.Linear(self.kdim, kv_dim, bias=bias)
        self.v_proj = nn.Linear(self.vdim, kv_dim, bias=bias)
        self.out_proj = nn.Linear(embed_dim, embed_dim, bias=bias)

    def forward(
        self,
        query: Tensor,
        key: Tensor,
        value: Tensor,
        attn_mask: Tensor | None = None,
        is_causal: bool = False,
        need_weights: bool = False,
        cache: KVCache | None = None,
    ) -> tuple[Tensor, Tensor | None]:
        """Attend from ``query (B, Nq, embed_dim)`` to ``key (B, Nk, kdim)`` and
        ``value``.

        ``attn_mask`` is broadcastable to ``(B, num_heads, Nq, Nk)``: boolean
        (``True`` = allowed) or float (added to the scores); a key-padding mask
        ``(B, Nk)`` becomes ``mask[:, None, None, :]``. ``is_causal`` lets query
        ``i`` see keys ``j <= i`` only (combined with ``attn_mask`` when both
        are given). Returns the output ``(B, Nq, embed_dim)`` and, when
        ``need_weights``, the weights of every (query) head
        ``(B, num_heads, Nq, Nk)``, else ``None``. Unbatched inputs ``(N, dim)``
        give unbatched results.

        ``cache`` (a :class:`~attention_course.decoding.KVCache`) carries keys
        and values from call to call. A growing cache (self-attention while
        generating): this call's keys and values are appended, and the queries,
        the newest positions, attend to all ``Nk`` cached ones; ``is_causal``
        then aligns bottom-right (a single new query sees every cached key), and
        RoPE and ALiBi count positions from the start of the cache. A static
        cache (cross-attention): the first call stores the projected ``key`` and
        ``value``, later calls reuse them.
        """
        if query.dim() == 2 and key.dim() == 2 and value.dim() == 2:
            out, weights = self(query[None], key[None], value[None], attn_mask,
                                is_causal, need_weights, cache)
            return out[0], None if weights is None else weights[0]
        self._check_inputs(query, key, value)
        if (cache is not None and cache.static
                and (is_causal or self.positional is not None)):
            raise ValueError("a static cache holds cross-attention keys (the "
                             "encoder memory): it takes neither is_causal nor "
                             "positional='rope'/'alibi'")
        q, k, v = self._attention_inputs(query, key, value, cache)
        align = "top_left" if cache is None else "bottom_right"
        attn_mask, kernel_causal = self._prepare_mask(
            attn_mask, is_causal, q.size(-2), k.size(-2), query, align
        )
        options = dict(attn_mask=attn_mask, is_causal=kernel_causal,
                       dropout_p=self.dropout if self.training else 0.0)
        if need_weights:
            out, weights = scaled_dot_product_attention(
                q, *self._share_kv_heads(k, v), **options
            )
        elif _SDPA_GQA and self.num_kv_heads != self.num_heads:
            out, weights = F.scaled_dot_product_attention(
                q, k, v, **options, enable_gqa=True
            ), None
        else:
            out, weights = F.scaled_dot_product_attention(
                q, *self._share_kv_heads(k, v), **options
            ), None
        return self.out_proj(merge_heads(out)), weights

    def _project(self, query: Tensor, key: Tensor,
                 value: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """The three input projections, split into heads:
        ``q (B, num_heads, Nq, head_dim)``, ``k`` and
        ``v (B, num_kv_heads, Nk, head_dim)``.

        In self-attention (one tensor passed as query, key and value) the three
        projections run as one matrix product, which saves two passes over the
        input.
        """
        if (query is key and key is value
                and self.kdim == self.vdim == self.embed_dim):
            weight = torch.cat([self.q_proj.weight, self.k_proj.weight,
                                self.v_proj.weight])
            bias = None
            if self.q_proj.bias is not None:
                bias = torch.cat([self.q_proj.bias, self.k_proj.bias,
                                  self.v_proj.bias])
            kv_dim = self.num_kv_heads * self.head_dim
            q, k, v = F.linear(query, weight, bias).split(
                [self.embed_dim, kv_dim, kv_dim], -1
            )
        else:
            q, k, v = self.q_proj(query), self.k_proj(key), self.v_proj(value)
        return (split_heads(q, self.num_heads),
                split_heads(k, self.num_kv_heads),
                split_heads(v, self.num_kv_heads))

    def _attention_inputs(
        self, query: Tensor, key: Tensor, value: Tensor, cache: KVCache | None
    ) -> tuple[Tensor, Tensor, Tensor]:
        """Projected heads, rotated when ``positional="rope"``, joined with
        the cache."""
        if cache is not None and cache.static and len(cache):
            return (split_heads(self.q_proj(query), self.num_heads),
                    cache.keys, cache.values)
        q, k, v = self._project(query, key, value)
        if self.positional == "rope":
            # the position of the first new token
            start = 0 if cache is None else len(cache)
            q = rotary_embedding(
                q, torch.arange(start, start + q.size(-2), device=q.device),
                self.rope_base,
            )
            k = rotary_embedding(
                k, torch.arange(start, start + k.size(-2), device=k.device),
                self.rope_base,
            )
        if cache is not None:
            k, v = cache.append(k, v)
        return q, k, v

    def _share_kv_heads(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Repeat each key/value head for its group of query heads:
        ``(B, num_heads, Nk, d)``."""
        group = self.num_heads // self.num_kv_heads
        if group == 1:
            return k, v
        return (k.repeat_interleave(group, dim=1),
                v.repeat_interleave(group, dim=1))

    def _check_inputs(self, query: Tensor, key: Tensor, value: Tensor) -> None:
        shapes = (f"query {tuple(query.shape)}, key {tuple(key.shape)}, "
                  f"value {tuple(value.shape)}")
        if not query.dim() == key.dim() == value.dim() == 3:
            raise ValueError(f"query, key and value must all be (B, N, dim) "
                             f"(or all unbatched (N, dim)); got {shapes}")
        if query.size(-1) != self.embed_dim:
            raise ValueError(f"query's last dimension must be "
                             f"embed_dim={self.embed_dim}; got {shapes}")
        if key.size(-1) != self.kdim or value.size(-1) != self.vdim:
            raise ValueError(f"key's last dimension must be kdim={self.kdim} "
                             f"and value's vdim={self.vdim}; got {shapes}")
        if key.shape[:2] != value.shape[:2]:
            raise ValueError(f"key and value must have the same batch size "
                             f"and length; got {shapes}")
        if query.size(0) != key.size(0):
            raise ValueError(f"query and key must have the same batch size; "
                             f"got {shapes}")

    def _prepare_mask(self, attn_mask: Tensor | None, is_causal: bool,
                      nq: int, nk: int, query: Tensor,
                      align: str) -> tuple[Tensor | None, bool]:
        """Check ``attn_mask``; fold ``is_causal`` (aligned as ``align``) and
        ALiBi into it.

        Returns the mask for the kernel and whether the kernel should apply its
        own (top-left) causal mask, its fastest way, instead.
        """
        if attn_mask is not None:
            if (attn_mask.dtype != torch.bool
                    and not attn_mask.is_floating_point()):
                raise ValueError(
                    f"attn_mask must be bool (True = allowed) or float "
                    f"(added to the scores); got dtype {attn_mask.dtype}"
                )
            target = (query.size(0), self.num_heads, nq, nk)
            try:
                if attn_mask.dim() > 4:
                    raise RuntimeError
                torch.broadcast_shapes(attn_mask.shape, target)
            except RuntimeError:
                raise ValueError(
                    f"attn_mask of shape {tuple(attn_mask.shape)} is not "
                    f"broadcastable to (B, num_heads, Nq, Nk) = {target}"
                ) from None
            if attn_mask.is_floating_point():
                attn_mask = attn_mask.to(query.dtype)
        if self.positional == "alibi":
            bias = alibi_bias(self.num_heads, nq, nk, causal=is_causal,
                              align=align, device=query.device).to(query.dtype)
            return _add_to_bias(bias, attn_mask), False
        if not is_causal:
            return attn_mask, False
        if attn_mask is None:
            if align == "top_left" or nq == nk:
                return None, True
            if nq == 1:  # a single new query sees every cached key
                return None, False
        causal = causal_mask(nq, nk, device=query.device, align=align)
        if attn_mask is None:
            return causal, False
        if attn_mask.dtype == torch.bool:
            return attn_mask & causal, False
        return _add_to_bias(attn_mask, causal), False


def _add_to_bias(bias: Tensor, mask: Tensor | None) -> Tensor:
    """A float ``bias`` combined with ``mask``: ``-inf`` where a bool mask is
    False, a float mask added; shapes broadcast."""
    if mask is None:
        return bias
    if mask.dtype == torch.bool:
        return torch.where(mask, bias, float("-inf"))
    return bias + mask


# --- A task on which heads specialise (section 5.4) ---------------------------

IGNORE = -100  # the target of a position that has no previous token


class LookupBatch(NamedTuple):
    """A batch of the previous-and-partner task; every field is ``(B, N)``.

    ``colours`` and ``values`` are the input tokens. The targets:
    ``previous``, the value of token ``i - 1`` (``IGNORE`` at ``i = 0``), and
    ``partner_value``, the value of ``partner``, the position of the other
    token with the same colour.
    """

    colours: Tensor
    values: Tensor
    previous: Tensor
    partner: Tensor
    partner_value: Tensor


def lookup_batch(batch_size: int, length: int = 12, num_values: int = 8,
                 generator: torch.Generator | None = None) -> LookupBatch:
    """``batch_size`` random sequences of ``length`` tokens, each a colour
    and a value; every one of the ``length // 2`` colours appears twice."""
    if batch_size < 1 or length < 2 or length % 2 or num_values < 2:
        raise ValueError(f"need batch_size >= 1, an even length >= 2 and "
                         f"num_values >= 2; got batch_size={batch_size}, "
                         f"length={length}, num_values={num_values}")
    order = torch.rand(batch_size, length, generator=generator).argsort(-1)
    colours = order % (length // 2)                     # each colour twice
    values = torch.randint(num_values, (batch_size, length),
                           generator=generator)
    same = colours[:, :, None] == colours[:, None, :]   # (B, N, N)
    same &= ~torch.eye(length, dtype=torch.bool)        # not itself
    partner = same.int().argmax(-1)                     # (B, N)
    previous = values.roll(1, dims=1)
    previous[:, 0] = IGNORE                             # no token before 0
    return LookupBatch(colours, values, previous, partner,
                       values.gather(1, partner))


class LookupModel(nn.Module):
    """Embeddings, one multi-head self-attention layer, a linear read-out.

    Token ``i`` enters as the sum of its colour's and its value's embedding
    and a learned vector for position ``i`` (without it, attention could not
    find "the previous token"). The read-out sees only the attention output,
    so everything it predicts has come through the heads.
    """

    def __init__(self, num_heads: int, embed_dim: int = 32, length: int = 12,
                 num_values: int = 8) -> None:
        super().__init__()
        self.length, self.num_values = length, num_values
        self.colour_embedding = nn.Embedding(length // 2, embed_dim)
        self.value_embedding = nn.Embedding(num_values, embed_dim)
        self.position = nn.Parameter(torch.randn(length, embed_dim))
        self.attention = MultiHeadAttention(embed_dim, num_heads)
        self.readout = nn.Linear(embed_dim, 2 * num_values)

    def forward(self, colours: Tensor, values: Tensor,
                need_weights: bool = False
                ) -> tuple[Tensor, Tensor, Tensor | None]:
        """``colours``, ``values (B, N)`` -> logits for the previous token's
        value and for the partner's, each ``(B, N, num_values)``, and the
        weights ``(B, num_heads, N, N)`` when ``need_weights``."""
        if colours.shape != values.shape or colours.shape[-1] != self.length:
            raise ValueError(f"colours and values must both be (B, "
                             f"{self.length}); got {tuple(colours.shape)} "
                             f"and {tuple(values.shape)}")
        x = (self.colour_embedding(colours) + self.value_embedding(values)
             + self.position)
        mixed, weights = self.attention(x, x, x, need_weights=need_weights)
        previous, partner = self.readout(mixed).chunk(2, dim=-1)
        return previous, partner, weights


def lookup_loss(model: LookupModel, batch: LookupBatch) -> Tensor:
    """Cross-entropy of both predictions, summed (position 0's previous
    token is ignored)."""
    previous, partner, _ = model(batch.colours, batch.values)
    return (F.cross_entropy(previous.flatten(0, 1), batch.previous.flatten(),
                            ignore_index=IGNORE)
            + F.cross_entropy(partner.flatten(0, 1),
                              batch.partner_value.flatten()))


@torch.no_grad()
def lookup_accuracy(model: LookupModel, batch: LookupBatch) -> Tensor:
    """``(2,)``: the share of right answers for the previous token's value
    and for the partner's value."""
    previous, partner, _ = model(batch.colours, batch.values)
    has_previous = batch.previous != IGNORE
    right = previous.argmax(-1) == batch.previous
    return torch.stack([
        right[has_previous].float().mean(),
        (partner.argmax(-1) == batch.partner_value).float().mean(),
    ]).cpu()


def head_diversity(weights: Tensor) -> Tensor:
    """How different the heads' maps are: a number in ``[0, 1]``.

    ``weights (B, h, Nq, Nk)`` with ``h >= 2``. For every pair of different
    heads and every query, the total variation distance between their rows,
    ``0.5 * sum_j |w_a[j] - w_b[j]|`` (0 for the same row, 1 for rows that
    put their weight on different keys), averaged over pairs, queries and
    the batch.
    """
    if weights.dim() != 4 or weights.size(1) < 2:
        raise ValueError(f"weights must be (B, h, Nq, Nk) with h >= 2 "
                         f"heads; got shape {tuple(weights.shape)}")
    heads = weights.size(1)
    rows = weights[:, :, None] - weights[:, None]       # (B, h, h, Nq, Nk)
    distance = 0.5 * rows.abs().sum(-1).mean((0, 3))    # (h, h)
    pairs = ~torch.eye(heads, dtype=torch.bool, device=weights.device)
    return distance[pairs].mean()


def head_roles(weights: Tensor, partner: Tensor) -> Tensor:
    """``(h, 2)``: each head's mean weight on the previous token (queries 1
    to N - 1) and on the partner (every query).

    ``weights (B, h, N, N)`` from a :class:`LookupModel`, ``partner (B, N)``
    from its :class:`LookupBatch`.
    """
    if weights.dim() != 4 or partner.shape != (weights.size(0),
                                               weights.size(2)):
        raise ValueError(f"weights must be (B, h, N, N) and partner (B, N); "
                         f"got {tuple(weights.shape)} and "
                         f"{tuple(partner.shape)}")
    batch, heads, n, _ = weights.shape
    query = torch.arange(1, n, device=weights.device)
    on_previous = weights[:, :, query, query - 1].mean((0, 2))
    index = partner[:, None, :, None].expand(batch, heads, n, 1)
    on_partner = weights.gather(-1, index.to(weights.device)).mean((0, 2, 3))
    return torch.stack([on_previous, on_partner], dim=-1)


class LookupRun(NamedTuple):
    """One training run: the model before and after, the loss of every
    step, and the validation accuracy ``(len(steps), 2)`` (previous,
    partner) measured at ``steps``."""

    num_heads: int
    seed: int
    untrained: LookupModel
    trained: LookupModel
    losses: list[float]
    steps: list[int]
    accuracy: Tensor


def lookup_batches(batch_size: int, generator: torch.Generator,
                   **task: int) -> Iterator[LookupBatch]:
    """Fresh batches of :func:`lookup_batch`, without end."""
    while True:
        yield lookup_batch(batch_size, generator=generator, **task)


def train_lookup(num_heads: int, seed: int, validation: LookupBatch, *,
                 steps: int = 250, eval_every: int = 25,
                 batch_size: int = 64, lr: float = 3e-3,
                 embed_dim: int = 32, num_values: int = 8,
                 device: torch.device | str | None = None,
                 on_step: Callable[[int], None] | None = None) -> LookupRun:
    """Train a :class:`LookupModel` with ``num_heads`` heads from ``seed``
    (which fixes its initial weights and its training batches) with Adam,
    measuring accuracy on ``validation`` every ``eval_every`` steps.

    ``on_step(n)`` is called after each block of ``n`` steps (a progress
    bar's ``update``).
    """
    if steps < 1 or eval_every < 1:
        raise ValueError(f"steps and eval_every must be positive; got "
                         f"steps={steps}, eval_every={eval_every}")
    if int(validation.values.max()) >= num_values:
        raise ValueError(f"validation holds values up to "
                         f"{int(validation.values.max())}, more than "
                         f"num_values={num_values} allows")
    device = torch.device(device) if device is not None else get_device()
    length = validation.colours.size(1)
    torch.manual_seed(seed)
    model = LookupModel(num_heads, embed_dim, length, num_values).to(device)
    untrained = copy.deepcopy(model).eval()
    validation = to_device(validation, device)
    data = lookup_batches(batch_size, torch.Generator().manual_seed(seed),
                          length=length, num_values=num_values)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    losses: list[float] = []
    measured_at, accuracy = [0], [lookup_accuracy(model, validation)]
    while len(losses) < steps:
        block = min(eval_every, steps - len(losses))
        losses += train(model, lookup_loss, data, max_steps=block,
                        optimizer=optimizer, device=device, progress=False)
        measured_at.append(len(losses))
        accuracy.append(lookup_accuracy(model, validation))
        if on_step is not None:
            on_step(block)
    return LookupRun(num_heads, seed, untrained, model, losses, measured_at,
                     torch.stack(accuracy))


def head_count_experiment(head_counts: Sequence[int], seeds: Sequence[int],
                          validation: LookupBatch, *, steps: int = 250,
                          num_threads: int | None = 1, progress: bool = True,
                          **options: Any) -> list[LookupRun]:
    """:func:`train_lookup` for every head count and seed, under one progress
    bar; ``options`` go to :func:`train_lookup`.

    On a CPU the runs use ``num_threads`` threads (``None``: leave torch's
    setting), restored afterwards. The default is one: the matrices are so
    small that further threads only wait for each other, which on a busy
    machine made training many times slower.
    """
    runs = []
    total = len(head_counts) * len(seeds) * steps
    threads = torch.get_num_threads()
    if num_threads is not None:
        torch.set_num_threads(num_threads)
    try:
        with tqdm(total=total, desc="training", disable=not progress) as bar:
            for num_heads in head_counts:
                for seed in seeds:
                    bar.set_postfix(heads=num_heads, seed=seed)
                    runs.append(train_lookup(
                        num_heads, seed, validation, steps=steps,
                        on_step=bar.update, **options,
                    ))
    finally:
        torch.set_num_threads(threads)
    return runs
