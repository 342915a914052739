"""Exercise 6: the Transformer (chapter 6).

Eight questions: the sinusoidal positional encoding (implement) and the linear map that
shifts it (derive), a broken embedding function (debug), the decoder's mask and a
post-norm encoder layer (implement), and what happens without positions (predict, then
measure with the learner's own layer, then predict which tasks become impossible).

The references are the package's own chapter-6 code (``attention_course.transformer``);
each question lists the mistakes learners make, computed by what they output.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from attention_course import transformer
from attention_course.grading.spec import Case, Exercise, Question
from attention_course.grading.tables import changed, mistake_table, prediction
from attention_course.i18n import _
from attention_course.masking import causal_mask
from attention_course.multihead import MultiHeadAttention

CHAPTER_PE = "6.3 The sinusoidal positional encoding"
CHAPTER_ORDER = "6.2 Attention alone ignores order: 猫对我哈气 and 我对猫哈气"


# --------------------------------------------------------------------------- question 1
def positional_encoding(num_positions: int, d_model: int) -> torch.Tensor:
    """The reference: the chapter's table, base 10000."""
    return transformer.sinusoidal_positional_encoding(num_positions, d_model)


def _pe(num_positions: int, d_model: int, *, base: float = 10000.0, exponent: str = "2i",
        layout: str = "interleaved", first: str = "sin", start: int = 0) -> torch.Tensor:
    """The table with one thing changed: what the typical mistakes compute.

    ``exponent``: ``"2i"`` (right), ``"i"`` (pair number over d_model), ``"column"``
    (every column its own exponent, column index over d_model) or ``"multiplied"`` (the
    position times the power instead of divided by it); ``layout``:
    ``"interleaved"`` (right) or ``"halves"`` (all sines, then all cosines); ``first``:
    which function fills the even columns; ``start``: the first position.
    """
    p = torch.arange(start, start + num_positions, dtype=torch.float64)[:, None]
    pairs = (d_model + 1) // 2
    i = torch.arange(pairs, dtype=torch.float64)
    if exponent == "column":
        column = torch.arange(d_model, dtype=torch.float64)
        angle = p / base ** (column / d_model)
        even = torch.sin(angle) if first == "sin" else torch.cos(angle)
        odd = torch.cos(angle) if first == "sin" else torch.sin(angle)
        parity = (torch.arange(d_model) % 2 == 0)
        return torch.where(parity, even, odd).float()
    power = 2 * i if exponent in ("2i", "multiplied") else i
    frequency = base ** (power / d_model)
    angle = p * frequency if exponent == "multiplied" else p / frequency  # (N, pairs)
    a, b = (torch.sin, torch.cos) if first == "sin" else (torch.cos, torch.sin)
    if layout == "halves":
        return torch.cat([a(angle), b(angle[:, : d_model // 2])], dim=1).float()
    pe = torch.zeros(num_positions, d_model, dtype=torch.float64)
    pe[:, 0::2] = a(angle)
    pe[:, 1::2] = b(angle[:, : d_model // 2])
    return pe.float()


def pe_cases() -> list[Case]:
    return [
        Case(args=(6, 4), label="6 positions, d_model 4"),
        Case(args=(50, 16), label="50 positions, d_model 16"),
        Case(args=(1, 8), label="a single position"),
        Case(args=(7, 5), label="odd d_model 5: the last column is a sine without a partner"),
        Case(args=(30, 128), hidden=True),
        Case(args=(12, 7), hidden=True),
        Case(args=(100, 10), hidden=True),
    ]


PE_MISTAKES = mistake_table(changed(_pe), [
    ("sin_cos_swapped", {"first": "cos"},
     "sine and cosine are swapped: the even columns (0, 2, 4, ...) hold the sines "
     "and the odd columns the cosines"),
    ("base_1000", {"base": 1000.0},
     "your table uses the base 1000, as one of the course's source notes prints it; "
     "the paper's base is 10000 (the wavelengths then reach 10000 times 2 pi)"),
    ("pair_number_over_d", {"exponent": "i"},
     "your exponent is i over d_model, with i the number of the pair; the formula "
     "has 2i over d_model, so your frequencies fall off half as fast as they should"),
    ("column_exponent", {"exponent": "column"},
     "every column has its own frequency in your table: the exponent counts the "
     "column, but a sine column and the cosine column after it must share one "
     "frequency (pair i uses the exponent 2i over d_model for both)"),
    ("halves", {"layout": "halves"},
     "you put all the sines in the first half of the columns and all the cosines in "
     "the second half; the chapter's table interleaves them: sine in column 2i, the "
     "cosine of the same angle in column 2i + 1"),
    ("multiplied", {"exponent": "multiplied"},
     "you multiply the position by 10000 to the power 2i over d_model; divide by it, "
     "so that later pairs turn more slowly (longer wavelengths), not faster"),
    ("positions_from_one", {"start": 1},
     "your rows are shifted by one: the first position is 0 (its row is 0, 1, 0, "
     "1, ...), not 1"),
])


def diagnose_pe(case: Case, expected, got) -> str | None:
    """Say which part of the learner's table is wrong: position 0, the sine or the cosine
    columns, or the later pairs' frequencies."""
    if not isinstance(got, torch.Tensor) or got.shape != expected.shape or got.numel() == 0:
        return None
    e, g = expected.double(), got.detach().double()

    def close(a: torch.Tensor, b: torch.Tensor) -> bool:
        return bool(torch.allclose(a, b, rtol=1e-4, atol=1e-5))

    if not close(g[0], e[0]):
        return _("the row of position 0 must be 0, 1, 0, 1, ... (the sine and the cosine of "
                 "angle 0)")
    sines, cosines = close(g[:, 0::2], e[:, 0::2]), close(g[:, 1::2], e[:, 1::2])
    if sines and not cosines:
        return _("your sine columns are right, but not the cosine columns")
    if cosines and not sines:
        return _("your cosine columns are right, but not the sine columns")
    if e.shape[1] > 2 and close(g[:, :2], e[:, :2]):
        return _("your first pair of columns is right (it turns by one radian per "
                 "position), but the later pairs turn at the wrong speed: check the exponent "
                 "and the base")
    return None


# --------------------------------------------------------------------------- question 2
def _frequencies(d_model: int, base: float = 10000.0, exponent: str = "2i") -> torch.Tensor:
    i = torch.arange(d_model // 2, dtype=torch.float64)
    return base ** (-(2 * i if exponent == "2i" else i) / d_model)


def _blocks(k: float, d_model: int, omega: torch.Tensor, sign: int = 1) -> torch.Tensor:
    """Block-diagonal: for pair i the block ``[[cos, s sin], [-s sin, cos]]`` of ``k omega_i``."""
    m = torch.zeros(d_model, d_model, dtype=torch.float64)
    angle = k * omega
    c, s = torch.cos(angle), sign * torch.sin(angle)
    idx = torch.arange(d_model // 2) * 2
    m[idx, idx], m[idx + 1, idx + 1] = c, c
    m[idx, idx + 1], m[idx + 1, idx] = s, -s
    return m.float()


def shift_map(k: int, d_model: int) -> torch.Tensor:
    """The reference: ``M (d_model, d_model)`` with ``PE[p + k] = M PE[p]`` (column vectors)
    for every position ``p``, for an even ``d_model``."""
    return _blocks(k, d_model, _frequencies(d_model))


def shift_cases() -> list[Case]:
    return [
        Case(args=(1, 4), label="k = 1, d_model 4"),
        Case(args=(5, 8), label="k = 5, d_model 8"),
        Case(args=(-3, 6), hidden=True),
        Case(args=(40, 12), hidden=True),
        Case(args=(7, 2), hidden=True),
    ]


def diagnose_shift(case: Case, expected, got) -> str | None:
    """Say what the learner's matrix does to the table, when it does something recognisable."""
    if not isinstance(got, torch.Tensor) or got.shape != expected.shape:
        return None
    k, d = case.args
    m = got.detach().double()
    blocks = torch.zeros_like(m)
    for j in range(0, d - 1, 2):
        blocks[j: j + 2, j: j + 2] = 1
    if (m * (1 - blocks)).abs().max() > 1e-4:
        return _("your matrix mixes different pairs of columns: each pair (sine, cosine) "
                 "turns on its own, so only the 2 by 2 blocks on the diagonal are nonzero")
    for s in range(-100, 101):
        if s != k and torch.allclose(m, shift_map(s, d).double(), rtol=1e-4, atol=1e-5):
            if case.hidden:
                return _("your matrix shifts the table by another number of positions "
                         "than k")
            return _("your matrix shifts the table by {shift} positions, not by "
                     "k = {k}").format(shift=s, k=k)
    gram = m.T @ m
    if (gram - torch.eye(d, dtype=torch.float64)).abs().max() > 1e-3:
        return _("your matrix changes lengths: a shift keeps every pair (sine, cosine) on "
                 "the unit circle, so each 2 by 2 block must be a rotation")
    e = expected.double()
    if d > 2 and torch.allclose(m[:2, :2], e[:2, :2], rtol=1e-4, atol=1e-5):
        return _("your first pair's block is right, but the later pairs turn by the wrong "
                 "angle: pair i turns by k times its own frequency")
    return None


def _shift(sign: int = 1, base: float = 10000.0, exponent: str = "2i",
           per_pair: bool = True):
    """A shift map with one thing changed: the sign of its sines (``-1``: the transpose),
    the base and exponent of its frequencies, or one angle ``k`` for every pair
    (``per_pair=False``)."""

    def wrong(k, d):
        omega = (_frequencies(d, base, exponent) if per_pair
                 else torch.ones(d // 2, dtype=torch.float64))
        return _blocks(k, d, omega, sign)

    return wrong


SHIFT_MISTAKES = mistake_table(_shift, [
    ("transposed", {"sign": -1},
     "your matrix is the transpose of the one asked for: it moves the table back by "
     "k positions instead of forward (or you built the map for a row vector times "
     "the matrix); expand the sine and the cosine of a sum of two angles and read "
     "off the signs"),
    ("angle_k", {"per_pair": False},
     "every pair of your matrix turns by k radians; pair i turns by k times its own "
     "frequency, one over 10000 to the power 2i over d_model"),
    ("base_1000", {"base": 1000.0},
     "your frequencies use the base 1000; the table's base is 10000"),
    ("pair_number_over_d", {"exponent": "i"},
     "your frequencies use the exponent i over d_model; the table's exponent is 2i "
     "over d_model, with i the number of the pair"),
])


# --------------------------------------------------------------------------- question 3
def embed_tokens(ids: torch.Tensor, embedding: torch.Tensor,
                 pe_table: torch.Tensor) -> torch.Tensor:
    """The reference: look up, scale by sqrt(d_model), add the table's rows 0..N-1 along
    the position axis."""
    d_model = embedding.shape[1]
    return embedding[ids] * math.sqrt(d_model) + pe_table[: ids.shape[1]]


def _embed_wrong(scale: str = "sqrt", table: str = "positions"):
    def wrong(ids, embedding, pe_table):
        d_model = embedding.shape[1]
        x = embedding[ids]
        if scale == "sum":  # the table scaled along with the embeddings
            return (x + pe_table[: ids.shape[1]]) * math.sqrt(d_model)
        x = {"sqrt": x * math.sqrt(d_model), "divided": x / math.sqrt(d_model),
             "none": x, "d": x * d_model,
             "vocabulary": x * math.sqrt(embedding.shape[0])}[scale]
        if table == "batch":
            return x + pe_table[: x.shape[0]].unsqueeze(1)
        if table == "from_one":
            return x + pe_table[1: ids.shape[1] + 1]
        if table == "token_ids":
            return x + pe_table[ids]
        return x if table == "none" else x + pe_table[: ids.shape[1]]
    return wrong


def embed_cases() -> list[Case]:
    g = torch.Generator().manual_seed(603)

    def case(b: int, n: int, vocab: int, d: int, max_len: int, **kw) -> Case:
        ids = torch.randint(0, vocab, (b, n), generator=g)
        embedding = torch.randn(vocab, d, generator=g) / d**0.5
        return Case(args=(ids, embedding, positional_encoding(max_len, d)), **kw)

    # max_len >= vocabulary size, so that looking the table up by token id runs too
    return [
        case(2, 5, 10, 8, 12, label="B=2 sentences of N=5 tokens, d_model 8, max_len 12"),
        case(1, 4, 6, 6, 6, label="one sentence of 4 tokens, d_model 6"),
        case(3, 3, 7, 4, 8, hidden=True),
        case(4, 2, 5, 16, 8, hidden=True),
    ]


EMBED_MISTAKES = mistake_table(_embed_wrong, [
    ("unfixed", {"scale": "divided", "table": "batch"},
     "this is still the broken function: both of its mistakes are in it (the scale "
     "of the embeddings, and the axis along which the table is added)"),
    ("table_along_batch", {"scale": "sqrt", "table": "batch"},
     "the scale is right now, but the table is still added along the batch axis: "
     "every token of sentence b gets row b of the table, whatever its position; in a "
     "batch-first input the positions are axis 1"),
    ("divided", {"scale": "divided", "table": "positions"},
     "the table is added along the positions now, but the embeddings are still "
     "divided by the square root of d_model; they must be multiplied by it"),
    ("no_scale", {"scale": "none", "table": "positions"},
     "the embeddings are not scaled: multiply them by the square root of d_model, so "
     "that their entries have variance 1, like the sines and cosines of the table"),
    ("times_d", {"scale": "d", "table": "positions"},
     "the embeddings are multiplied by d_model; the factor is its square root"),
    ("vocabulary_size", {"scale": "vocabulary", "table": "positions"},
     "the embeddings are multiplied by the square root of the vocabulary size (the "
     "embedding matrix's number of rows); d_model is its number of columns"),
    ("table_by_token_id", {"scale": "sqrt", "table": "token_ids"},
     "you looked the table up by token id: a token's row of the table is the row of "
     "its position in the sentence, whatever the token"),
    ("no_table", {"scale": "sqrt", "table": "none"},
     "the scale is right, but the positional table is not added at all"),
    ("table_scaled_too", {"scale": "sum", "table": "positions"},
     "you scaled the table along with the embeddings: multiply only the embeddings "
     "by the square root of d_model, then add the table as it is"),
    ("table_from_one", {"scale": "sqrt", "table": "from_one"},
     "the table's rows are shifted by one: the first token is at position 0 and gets "
     "row 0 of the table"),
])


# --------------------------------------------------------------------------- question 4
def decoder_self_attention_mask(tgt_ids: torch.Tensor, pad_id: int) -> torch.Tensor:
    """Bool ``(B, 1, T, T)``: position t may attend to s when s <= t and token s is not padding."""
    real = (tgt_ids != pad_id)[:, None, None, :]
    return real & causal_mask(tgt_ids.shape[1])


def _mask_wrong(kind: str):
    def wrong(tgt_ids, pad_id):
        t = tgt_ids.shape[1]
        keys = (tgt_ids != pad_id)[:, None, None, :]
        queries = (tgt_ids != pad_id)[:, None, :, None]
        lower = torch.ones(t, t, dtype=torch.bool).tril()
        return {
            "inverted": ~(keys & lower),
            "strict": keys & torch.ones(t, t, dtype=torch.bool).tril(-1),
            "upper": keys & torch.ones(t, t, dtype=torch.bool).triu(),
            "causal_only": (lower & torch.ones_like(keys)),
            "padding_only": keys.expand(-1, -1, t, -1),
            "query_padding": queries & lower,
            "pad_zero": (tgt_ids != 0)[:, None, None, :] & lower,
            "padding_inverted": ~keys & lower,
        }[kind]
    return wrong


def mask_cases() -> list[Case]:
    return [
        Case(args=(torch.tensor([[1, 5, 6, 2]]), 0), label="one sentence, no padding"),
        Case(args=(torch.tensor([[1, 7, 2, 0, 0], [1, 4, 5, 6, 2]]), 0),
             label="B=2, the first padded with two pad_id=0"),
        Case(args=(torch.tensor([[3, 0, 9], [3, 9, 1]]), 1),
             label="pad_id = 1, and 0 is a real token here"),
        Case(args=(torch.tensor([[4, 6, 5, 2, 2, 2], [4, 5, 2, 2, 2, 2], [4, 6, 6, 6, 6, 5]]),
                   2), hidden=True),
        Case(args=(torch.tensor([[7]]), 0), hidden=True),
    ]


MASK_MISTAKES = mistake_table(_mask_wrong, [
    ("inverted", {"kind": "inverted"},
     "your mask is inverted: it is True where attention is blocked; the course's "
     "convention is True where attention is allowed"),
    ("diagonal_excluded", {"kind": "strict"},
     "your mask leaves out the diagonal: position t may attend to itself (keys at "
     "positions up to and including t); without it the first position sees nothing"),
    ("future_allowed", {"kind": "upper"},
     "your mask lets position t see the positions after it and hides the ones "
     "before: the allowed keys are those at or before the query"),
    ("causal_only", {"kind": "causal_only"},
     "the look-ahead part is right, but padding is not masked: a key that is a "
     "pad_id token must be False in every row"),
    ("padding_only", {"kind": "padding_only"},
     "the padding part is right, but nothing stops a position from looking ahead: "
     "combine it with the causal condition (the key at or before the query)"),
    ("padding_inverted", {"kind": "padding_inverted"},
     "the padding part of your mask is inverted: it keeps the padding keys and hides "
     "the real tokens"),
    ("pad_id_ignored", {"kind": "pad_zero"},
     "your mask treats the token id 0 as padding; padding is whatever id the "
     "argument pad_id gives"),
    ("padding_on_queries", {"kind": "query_padding"},
     "the rows of the padded positions are all False in your mask: you masked "
     "padding along the queries (rows); a padded token must not be attended to, so "
     "its column is False, while its own row follows the causal rule like any other"),
])


# --------------------------------------------------------------------------- question 5
class EncoderLayerReference(nn.Module):
    """The course's post-norm :class:`~attention_course.transformer.EncoderLayer`, with the
    parameter names the exercise asks for: ``self_attn.{q,k,v,out}_proj``, ``linear1``,
    ``linear2``, ``norm1``, ``norm2``; ``forward(x, src_mask=None)`` returns ``x`` only."""

    def __init__(self, d_model: int, num_heads: int, d_ff: int) -> None:
        super().__init__()
        self.layer = transformer.EncoderLayer(d_model, num_heads, d_ff)
        self.self_attn = self.layer.self_attn
        self.linear1, self.linear2 = self.layer.ffn.linear1, self.layer.ffn.linear2
        self.norm1, self.norm2 = self.layer.add_norm1.norm, self.layer.add_norm2.norm

    def forward(self, x: torch.Tensor, src_mask: torch.Tensor | None = None) -> torch.Tensor:
        return self.layer(x, src_mask)[0]


class _WrongLayer(nn.Module):
    """An encoder layer with the exercise's parameter names and one typical mistake."""

    variant = ""

    def __init__(self, d_model: int, num_heads: int, d_ff: int) -> None:
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, num_heads)
        self.linear1 = nn.Linear(d_model, d_ff)
        self.linear2 = nn.Linear(d_ff, d_model)
        self.norm1 = nn.LayerNorm(d_model)
        self.norm2 = nn.LayerNorm(d_model)

    def attend(self, h, mask):
        v = self.variant
        if v == "mask_ignored":
            mask = None
        elif v == "mask_inverted" and mask is not None:
            mask = ~mask
        return self.self_attn(h, h, h, attn_mask=mask)[0]

    def ffn(self, h):
        inner = self.linear1(h)
        if self.variant == "relu_at_the_end":
            return torch.relu(self.linear2(inner))
        if self.variant == "gelu":
            return self.linear2(nn.functional.gelu(inner))
        return self.linear2(inner if self.variant == "no_relu" else torch.relu(inner))

    def forward(self, x, src_mask=None):
        v = self.variant
        n1, n2 = {"norms_swapped": (self.norm2, self.norm1),
                  "norm1_twice": (self.norm1, self.norm1)}.get(v, (self.norm1, self.norm2))
        if v == "pre_norm":
            x = x + self.attend(n1(x), src_mask)
            return x + self.ffn(n2(x))
        if v == "pre_norm_final":
            x = x + self.attend(n1(x), src_mask)
            return n2(x + self.ffn(x))
        if v == "no_residual":
            x = n1(self.attend(x, src_mask))
            return n2(self.ffn(x))
        if v == "no_attention_residual":
            x = n1(self.attend(x, src_mask))
            return n2(x + self.ffn(x))
        if v == "no_ffn_residual":
            x = n1(x + self.attend(x, src_mask))
            return n2(self.ffn(x))
        if v == "norm_before_add":
            x = n1(x) + self.attend(x, src_mask)
            return n2(x) + self.ffn(x)
        if v == "ffn_residual_from_input":
            h = n1(x + self.attend(x, src_mask))
            return n2(x + self.ffn(h))
        if v == "ffn_first":
            x = n1(x + self.ffn(x))
            return n2(x + self.attend(x, src_mask))
        x = n1(x + self.attend(x, src_mask))
        return n2(x + self.ffn(x))


def _layer_variant(variant: str) -> type:
    return type(f"EncoderLayer_{variant}", (_WrongLayer,), {"variant": variant})


def _layer_params(d_model: int, d_ff: int, g: torch.Generator) -> dict[str, torch.Tensor]:
    params = {}
    for name in ("q_proj", "k_proj", "v_proj", "out_proj"):
        weight = torch.randn(d_model, d_model, generator=g) / d_model**0.5
        params[f"self_attn.{name}.weight"] = weight
        params[f"self_attn.{name}.bias"] = torch.randn(d_model, generator=g) * 0.1
    params["linear1.weight"] = torch.randn(d_ff, d_model, generator=g) / d_model**0.5
    params["linear1.bias"] = torch.randn(d_ff, generator=g) * 0.1
    params["linear2.weight"] = torch.randn(d_model, d_ff, generator=g) / d_ff**0.5
    params["linear2.bias"] = torch.randn(d_model, generator=g) * 0.1
    for norm in ("norm1", "norm2"):  # not the identity, so that swapped norms are caught
        params[f"{norm}.weight"] = 1 + 0.3 * torch.randn(d_model, generator=g)
        params[f"{norm}.bias"] = 0.3 * torch.randn(d_model, generator=g)
    return params


def encoder_layer_cases() -> list[Case]:
    g = torch.Generator().manual_seed(601)
    real = torch.tensor([[True] * 6, [True] * 4 + [False] * 2])[:, None, None, :]
    real3 = torch.tensor([[True] * 5, [True] * 2 + [False] * 3, [True] * 4 + [False]])
    return [
        Case(init_args=(8, 2, 16), params=_layer_params(8, 16, g),
             args=(torch.randn(2, 5, 8, generator=g),), label="d_model 8, 2 heads, d_ff 16"),
        Case(init_args=(12, 3, 24), params=_layer_params(12, 24, g),
             args=(torch.randn(2, 6, 12, generator=g),), kwargs={"src_mask": real},
             label="padding mask (B, 1, 1, S): sequence 1 has 4 real tokens"),
        Case(init_args=(4, 1, 8), params=_layer_params(4, 8, g),
             args=(torch.randn(1, 3, 4, generator=g) * 3,), label="one head, d_model 4"),
        Case(init_args=(6, 2, 10), params=_layer_params(6, 10, g),
             args=(torch.randn(3, 5, 6, generator=g) * 2 + 1,),
             kwargs={"src_mask": real3[:, None, None, :]}, hidden=True),
    ]


LAYER_MISTAKES = mistake_table(_layer_variant, [
    ("pre_norm", {"variant": "pre_norm"},
     "your layer is pre-norm (normalise the sub-layer's input, add the residual "
     "after); the question asks for post-norm as in the paper: add the residual "
     "first, then normalise the sum"),
    ("pre_norm_with_final_norm", {"variant": "pre_norm_final"},
     "your attention block is pre-norm (normalise the input, then add); both blocks "
     "must be post-norm: add the residual first, then normalise the sum"),
    ("no_residual", {"variant": "no_residual"},
     "your layer has no residual connections: each layer norm must normalise the "
     "sub-layer's input plus its output, not the output alone"),
    ("no_attention_residual", {"variant": "no_attention_residual"},
     "your attention block has no residual connection: its layer norm must normalise "
     "the block's input plus the attention's output"),
    ("no_ffn_residual", {"variant": "no_ffn_residual"},
     "your feed-forward block has no residual connection: its layer norm must "
     "normalise the block's input plus the feed-forward network's output"),
    ("norm_before_add", {"variant": "norm_before_add"},
     "you normalise the input and then add the sub-layer's output; post-norm adds "
     "first and normalises the sum, so the layer's output is always normalised"),
    ("ffn_residual_from_input", {"variant": "ffn_residual_from_input"},
     "the residual of your feed-forward block adds the layer's original input; it "
     "must add the feed-forward network's own input, the output of the first add "
     "& norm"),
    ("norms_swapped", {"variant": "norms_swapped"},
     "your two layer norms are swapped: norm1 belongs to the attention block, norm2 "
     "to the feed-forward block"),
    ("norm1_twice", {"variant": "norm1_twice"},
     "you use norm1 in both blocks; the feed-forward block has its own layer norm, "
     "norm2"),
    ("ffn_first", {"variant": "ffn_first"},
     "your sub-layers are in the wrong order: self-attention comes first, then the "
     "feed-forward network"),
    ("no_relu", {"variant": "no_relu"},
     "your feed-forward network has no ReLU between its two linear layers, so it is "
     "one linear map"),
    ("relu_at_the_end", {"variant": "relu_at_the_end"},
     "your ReLU comes after the second linear layer; it belongs between the two, on "
     "the d_ff hidden units"),
    ("gelu", {"variant": "gelu"},
     "you used GELU; the paper's feed-forward network, and this question, use ReLU"),
    ("mask_ignored", {"variant": "mask_ignored"},
     "the case without a mask is right, but the padding mask is not used: pass it "
     "to the self-attention"),
    ("mask_inverted", {"variant": "mask_inverted"},
     "you inverted the padding mask before passing it on; it is already True where "
     "attention is allowed, as the self-attention expects"),
])


# --------------------------------------------------------------------------- question 6
EQUIVARIANT, NOT_EQUIVARIANT = "equivariant", "not equivariant"
SETTINGS = ("padding_mask", "positional_encoding", "causal_mask")


EQUIVARIANCE = {"padding_mask": EQUIVARIANT, "positional_encoding": NOT_EQUIVARIANT,
                "causal_mask": NOT_EQUIVARIANT}


EQUIVARIANCE_WRONG = [
    ("padding_breaks", "padding_mask", NOT_EQUIVARIANT,
     "the padding mask belongs to the tokens, not to the positions: when the tokens are "
     "permuted their mask is permuted with them, every token still sees the same set of "
     "keys, and nothing in the computation refers to where a token stands"),
    ("table_ignored", "positional_encoding", EQUIVARIANT,
     "the table is added by position, not by token: a word that moves gets the code of its "
     "new position, so its vector, and with it every output, changes"),
    ("causal_ignored", "causal_mask", EQUIVARIANT,
     "the causal mask is tied to positions: after the permutation a word sees a different "
     "set of earlier words (the word moved to the front sees only itself), so even without "
     "a table the outputs change"),
]


# --------------------------------------------------------------------------- question 7
def _reference_layer(params: dict[str, torch.Tensor], num_heads: int) -> nn.Module:
    d_ff, d_model = params["linear1.weight"].shape
    layer = EncoderLayerReference(d_model, num_heads, d_ff)
    with torch.no_grad():
        for name, value in params.items():
            layer.get_parameter(name).copy_(value)
    return layer.eval()


def _gaps(params, num_heads, x, real, perm, *, compare_with: str = "perm",
          table: str = "after", mask: str = "permuted", causal: str = "lower",
          reduce: str = "max") -> dict[str, float]:
    """The three gaps, or what a mistake measures instead."""
    layer = _reference_layer(params, num_heads)
    n = x.shape[1]
    pe = transformer.sinusoidal_positional_encoding(n, x.shape[2])
    lower = causal_mask(n)
    causal_used = {"lower": lower, "upper": lower.T, "inverted": ~lower,
                   "strict": lower & ~torch.eye(n, dtype=torch.bool)}[causal]
    order = {"perm": perm, "inverse": torch.argsort(perm), "none": torch.arange(n)}[compare_with]

    def gap(moved: torch.Tensor, original: torch.Tensor) -> float:
        difference = moved - original[:, order]
        if reduce == "signed":
            return difference.max().item()
        size = difference.abs()
        return {"mean": size.mean, "sum": size.sum, "max": size.max}[reduce]().item()

    with torch.no_grad():
        moved_real = real[:, perm] if mask == "permuted" else real
        moved_with_table = (x + pe)[:, perm] if table == "travels" else x[:, perm] + pe
        original_with_table = x if table == "moved_only" else x + pe
        return {
            "padding_mask": gap(layer(x[:, perm], moved_real[:, None, None, :]),
                                layer(x, real[:, None, None, :])),
            "positional_encoding": gap(layer(moved_with_table), layer(original_with_table)),
            "causal_mask": gap(layer(x[:, perm], causal_used), layer(x, causal_used)),
        }


def permutation_gaps(params, num_heads, x, real, perm) -> dict[str, float]:
    """The reference: the largest change between the outputs for the permuted input and
    the permuted outputs for the original input, in the three settings."""
    return _gaps(params, num_heads, x, real, perm)


def gap_cases() -> list[Case]:
    g = torch.Generator().manual_seed(607)
    real = torch.tensor([[True] * 6, [True] * 4 + [False] * 2])
    real3 = torch.tensor([[True] * 5, [True] * 3 + [False] * 2, [True] * 2 + [False] * 3])
    return [
        Case(args=(_layer_params(8, 16, g), 2, torch.randn(2, 6, 8, generator=g), real,
                   torch.tensor([2, 0, 5, 1, 3, 4])),
             label="d_model 8, 2 heads, S=6"),
        Case(args=(_layer_params(12, 24, g), 3, torch.randn(3, 5, 12, generator=g), real3,
                   torch.tensor([1, 4, 0, 2, 3])), hidden=True),
    ]


GAP_MISTAKES = mistake_table(changed(_gaps), [
    ("original_order", {"compare_with": "none"},
     "you compared with the original outputs in their original order; re-order "
     "them by the permutation first, as you did the input"),
    ("inverse_permutation", {"compare_with": "inverse"},
     "you re-ordered the original outputs by the inverse permutation; re-order them "
     "by the permutation itself, as you did the input (a moved token takes its "
     "output along)"),
    ("table_travels", {"table": "travels"},
     "your positional gap is about zero, as if every word had kept its old "
     "position's code (the table added before permuting, or not at all); permute the "
     "words first, then add the table to both inputs: a word that moves gets the "
     "code of its new position"),
    ("table_on_moved_input_only", {"table": "moved_only"},
     "you added the table to the permuted input only; add it to the original input "
     "too, so that the two runs differ only in the order of the words"),
    ("causal_mask_upper", {"causal": "upper"},
     "your causal mask lets each position see the positions after it: the causal "
     "mask is True where the key is at or before the query"),
    ("causal_mask_inverted", {"causal": "inverted"},
     "your causal mask is inverted (True where the key lies after the query); it is "
     "True where the key is at or before the query"),
    ("causal_mask_strict", {"causal": "strict"},
     "your causal mask leaves out the diagonal: a position may attend to itself, so "
     "the mask is True where the key is at or before the query"),
    ("sum_gap", {"reduce": "sum"},
     "you added up the differences; the gap is the largest absolute difference"),
    ("mean_gap", {"reduce": "mean"},
     "you averaged the differences; the gap is the largest absolute difference"),
    ("signed_gap", {"reduce": "signed"},
     "you took the largest signed difference; the gap is the largest absolute "
     "difference"),
    ("mask_not_permuted", {"mask": "not_permuted"},
     "you permuted the tokens but not their padding mask, so the mask now hides "
     "real tokens and lets padding through; permute the mask with the tokens"),
])


# --------------------------------------------------------------------------- question 8
POSSIBLE, IMPOSSIBLE = "possible", "impossible"
TASKS = ("copy", "reverse", "largest", "previous")


TASK_ANSWERS = {"copy": POSSIBLE, "reverse": IMPOSSIBLE, "largest": POSSIBLE,
                "previous": IMPOSSIBLE}


TASK_WRONG = [
    ("copy_impossible", "copy", IMPOSSIBLE,
     "copying is possible: each output only has to name its own token, and equivariance "
     "lets the output follow its token wherever it goes"),
    ("reverse_possible", "reverse", POSSIBLE,
     "reversing is impossible: take a, b, c and b, a, c; the word a has the same neighbours "
     "in both, so it gets the same output vector, yet it must predict c in the first "
     "sentence and a in the second"),
    ("largest_impossible", "largest", IMPOSSIBLE,
     "the largest token is possible: it depends only on which tokens occur, not on their "
     "order, and every output may look at all tokens"),
    ("previous_possible", "previous", POSSIBLE,
     "naming the previous token is impossible: which token comes before a word is a fact "
     "about order, and a permuted sentence with the same tokens gives that word the same "
     "output vector"),
]


EXERCISE = Exercise(
    id="06_transformer",
    title="The Transformer",
    forbidden_imports=("attention_course.transformer",
                       "attention_course.transformer_layers"),
    questions=(
        Question(
            id="q1_positional_encoding",
            symbol="positional_encoding",
            title="The sinusoidal positional encoding",
            kind="implement",
            points=2,
            reference=positional_encoding,
            cases=pe_cases,
            rtol=1e-4, atol=1e-5,
            mistakes=PE_MISTAKES,
            diagnose=diagnose_pe,
            hint="Each pair of columns is a clock hand: one angle per position and pair, "
                 "its sine in the even column and its cosine in the odd one; the first "
                 "pair turns by one radian per position, later pairs ever more slowly.",
            section=CHAPTER_PE,
        ),
        Question(
            id="q2_shift_map",
            symbol="shift_map",
            title="A shift by k positions is a linear map",
            kind="derive",
            points=3,
            reference=shift_map,
            cases=shift_cases,
            rtol=1e-4, atol=1e-5,
            mistakes=SHIFT_MISTAKES,
            diagnose=diagnose_shift,
            hint="Write the angle at position p + k as the angle at p plus k times the "
                 "pair's frequency, expand the sine and the cosine of that sum, and read "
                 "the two new entries as combinations of the two old ones.",
            section=CHAPTER_PE,
        ),
        Question(
            id="q3_embed_tokens",
            symbol="embed_tokens",
            title="Debug: token embeddings plus positions",
            kind="debug",
            points=2,
            reference=embed_tokens,
            cases=embed_cases,
            grad=True,
            mistakes=EMBED_MISTAKES,
            hint="Two things are wrong: the factor that puts the embeddings on the scale of "
                 "the table, and which axis of a batch-first input counts positions.",
            section="6.8 Embeddings and the output layer",
        ),
        Question(
            id="q4_decoder_mask",
            symbol="decoder_self_attention_mask",
            title="The decoder's self-attention mask",
            kind="implement",
            points=2,
            reference=decoder_self_attention_mask,
            cases=mask_cases,
            mistakes=MASK_MISTAKES,
            hint="Two conditions must both hold for query t and key s: the key is not "
                 "after the query, and the key is a real token. True means allowed.",
            section="6.7 The decoder",
        ),
        Question(
            id="q5_encoder_layer",
            symbol="EncoderLayer",
            call="module",
            title="One post-norm encoder layer",
            kind="implement",
            points=3,
            reference=EncoderLayerReference,
            cases=encoder_layer_cases,
            grad=True,
            mistakes=LAYER_MISTAKES,
            hint="Post-norm as in the paper: around each sub-layer, add its input to its "
                 "output, then apply that block's layer norm to the sum; attention first, "
                 "then the feed-forward network with a ReLU inside.",
            section="6.4 Add & norm",
        ),
        prediction(
            id="q6_predict_equivariance",
            symbol="predict_equivariance",
            title="Predict: which settings still ignore order?",
            points=3,
            answer=EQUIVARIANCE,
            choices=(EQUIVARIANT, NOT_EQUIVARIANT),
            wrong=EQUIVARIANCE_WRONG,
            hint="Ask, for each setting, whether anything in the computation refers to "
                 "where a token stands, or only to which tokens there are.",
            section=CHAPTER_ORDER,
        ),
        Question(
            id="q7_permutation_gaps",
            symbol="permutation_gaps",
            title="Measure: permute the input, compare the outputs",
            kind="experiment",
            points=3,
            reference=permutation_gaps,
            cases=gap_cases,
            parts={"padding_mask": 1, "positional_encoding": 1, "causal_mask": 1},
            part_tolerance={key: (1e-3, 1e-4) for key in SETTINGS},
            mistakes=GAP_MISTAKES,
            builds_on=("q1_positional_encoding", "q5_encoder_layer"),
            hint="Run the layer twice, on the input and on the permuted input; only what "
                 "depends on the order (the table, the causal mask) stays where it is, "
                 "everything that belongs to a token moves with it.",
            section=CHAPTER_ORDER,
        ),
        prediction(
            id="q8_predict_tasks",
            symbol="predict_tasks",
            title="Predict: what can an encoder without positions not learn?",
            points=4,
            answer=TASK_ANSWERS,
            choices=(POSSIBLE, IMPOSSIBLE),
            wrong=TASK_WRONG,
            hint="Without positions, each output depends only on its own token and on the "
                 "set of tokens in the sentence: look for two sentences in which one word "
                 "must give different answers.",
            section=CHAPTER_ORDER,
        ),
    ),
)
