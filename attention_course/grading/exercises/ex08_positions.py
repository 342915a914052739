"""Exercise 8: positions and length (chapter 8).

Six questions: ALiBi's bias (implement), a rotary embedding with two bugs (debug), RoPE
inside causal attention, before the kernel (implement), the share of attention an ALiBi
head gives to the most recent keys (derive), which changes of a sequence a causal
attention notices with each scheme (predict), and how far each ALiBi head reaches as the
sequence grows (experiment).

The references are the package's chapter-8 code (``attention_course.positions``); each
question lists the mistakes learners make, computed by what they output.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from attention_course import positions
from attention_course.grading.spec import Case, Exercise, Mistake, Question
from attention_course.grading.tables import changed, mistake_table, prediction
from attention_course.i18n import _

ALIBI = "8.5 ALiBi: a linear penalty on distance"
ROPE = "8.4 RoPE: rotating pairs of features"
FUSED = "Both, inside multi-head attention, on the fused path"
WHY = "8.1 Why attention needs positions"


# --------------------------------------------------------------------------- question 1
def alibi(num_heads: int, n: int) -> torch.Tensor:
    """The reference: the causal ALiBi bias ``(num_heads, n, n)``."""
    return positions.alibi_bias(num_heads, n)


def _alibi(num_heads: int, n: int, *, slopes: str = "right", sign: float = -1.0,
           above: float = -math.inf, diagonal: bool = False, layout: str = "lower"
           ) -> torch.Tensor:
    """The bias with one thing changed: what the typical mistakes compute.

    ``slopes``: ``"right"`` (2^(-8h/H), h = 1..H), ``"from_zero"`` (h = 0..H-1),
    ``"halves"`` (2^-h whatever H), ``"reversed"`` (the shallowest first) or ``"one"``
    (every head the first head's slope); ``sign`` of the distance term; ``above``: what
    the keys after the query get; ``diagonal``: the query's own key masked too;
    ``layout``: ``"lower"`` (keys at or before the query allowed), ``"upper"`` (the
    transpose), ``"both"`` (no mask, the symmetric bias) or ``"unmasked"`` (no mask, and
    the signed distance everywhere: keys after the query get a positive bias).
    """
    h = torch.arange(1, num_heads + 1, dtype=torch.float64)
    m = {"right": 2.0 ** (-8.0 * h / num_heads),
         "from_zero": 2.0 ** (-8.0 * (h - 1) / num_heads),
         "halves": 2.0 ** -h,
         "reversed": (2.0 ** (-8.0 * h / num_heads)).flip(0),
         "one": torch.full_like(h, 2.0 ** (-8.0 / num_heads))}[slopes]
    i = torch.arange(n, dtype=torch.float64)
    distance = i[:, None] - i[None, :]                   # query - key
    bias = sign * m[:, None, None] * (distance if layout == "unmasked" else distance.abs())
    everywhere = torch.ones(n, n, dtype=torch.bool)
    allowed = {"lower": distance >= 0, "upper": distance <= 0, "both": everywhere,
               "unmasked": everywhere}[layout]
    if diagonal:
        allowed = allowed & (distance != 0)
    return bias.masked_fill(~allowed, above).float()


def alibi_cases() -> list[Case]:
    return [
        Case(args=(4, 5), label="4 heads, 5 positions"),
        Case(args=(8, 6), label="8 heads, 6 positions"),
        Case(args=(1, 3), label="a single head"),
        Case(args=(3, 4), label="3 heads: not a power of two"),
        Case(args=(2, 7), hidden=True),
        Case(args=(6, 5), hidden=True),
        Case(args=(16, 4), hidden=True),
    ]


ALIBI_MISTAKES = mistake_table(changed(_alibi), [
    ("slopes_from_zero", {"slopes": "from_zero"},
     "your first head has slope 1 and every head is one step too steep: the heads "
     "count from h = 1, so the first slope is 2 to the power -8/H"),
    ("slopes_halves", {"slopes": "halves"},
     "your slopes are 1/2, 1/4, 1/8, ... whatever the number of heads; that is the "
     "sequence for 8 heads only: the exponent is -8h/H, so the slopes always run "
     "from 2 to the power -8/H down to 1/256"),
    ("slopes_reversed", {"slopes": "reversed"},
     "your heads are in the reverse order: head 1 has the steepest slope, the last "
     "head the shallowest (1/256)"),
    ("one_slope", {"slopes": "one"},
     "every head has the same slope; each head has its own, a geometric sequence "
     "from 2 to the power -8/H down to 1/256"),
    ("positive", {"sign": 1.0},
     "your bias grows with distance: it must be a penalty, minus the slope times "
     "the distance, so that far keys get lower scores"),
    ("transposed", {"layout": "upper"},
     "your bias is transposed: each query may see the keys after it and not those "
     "before; rows are queries, columns keys, and a query sees the keys at or "
     "before its own position"),
    ("no_mask", {"layout": "both"},
     "your bias is symmetric, with no causal mask: the keys after a query must get "
     "minus infinity, since ALiBi's bias is here the causal one of a decoder"),
    ("unmasked", {"layout": "unmasked"},
     "the keys after each query are not masked, and your bias even rewards them "
     "(the distance is negative there); they must get minus infinity"),
    ("zero_above", {"above": 0.0},
     "the keys after each query get a bias of 0, which even favours them over the "
     "earlier keys; they must get minus infinity"),
    ("large_negative", {"above": -1e9},
     "the keys after each query get a large negative number; the question asks for "
     "minus infinity there (exact, and safe in float16)"),
    ("diagonal_masked", {"diagonal": True},
     "your mask also hides each query's own position; a query may attend to itself, "
     "with bias 0"),
])


def diagnose_alibi(case: Case, expected, got) -> str | None:
    """Say which part of the learner's bias is wrong: the mask, the diagonal, the slopes
    (read off the neighbours' bias) or the growth with distance."""
    if not isinstance(got, torch.Tensor) or got.shape != expected.shape:
        return None
    e, g = expected.double(), got.detach().double()
    num_heads, n = case.args
    above = torch.ones(n, n, dtype=torch.bool).triu(1)
    if n > 1 and not bool(torch.all(g[:, above] == -math.inf)):
        return _("the keys after each query must get minus infinity, and some of yours do "
                 "not")
    if not torch.allclose(g.diagonal(dim1=-2, dim2=-1), torch.zeros(num_heads, n,
                                                                    dtype=torch.float64)):
        return _("a query's own key is at distance 0 and must get bias 0")
    if n > 1:
        neighbours = g.diagonal(offset=-1, dim1=-2, dim2=-1)
        if not torch.allclose(neighbours, e.diagonal(offset=-1, dim1=-2, dim2=-1),
                              rtol=1e-5, atol=1e-6):
            return _("the bias of the key just before each query is wrong in some head: it "
                     "is minus that head's slope, so check the slopes")
        return _("your bias is right for the key just before each query, but not further "
                 "back: it must fall linearly, the slope times the distance")
    return None


# --------------------------------------------------------------------------- question 2
def rotate_pairs(x: torch.Tensor, base: float = 10000.0) -> torch.Tensor:
    """The reference: RoPE on adjacent pairs at positions ``0..N-1``."""
    return positions.rotary_embedding(x, base=base)


def _rotate(x: torch.Tensor, base: float = 10000.0, *, start: int = 0,
            second: str = "right", layout: str = "adjacent", exponent: str = "2i",
            sign: float = -1.0) -> torch.Tensor:
    """A rotation with one thing changed.

    ``start``: the first position; ``second``: how the second entry of a pair is made,
    ``"right"`` (a sin + b cos), ``"starter"`` (b cos - a sin, not a rotation) or
    ``"clockwise"`` (both signs flipped: a rotation the other way); ``layout``:
    ``"adjacent"`` pairs or ``"half"`` (feature i with feature i + d/2); ``exponent``:
    ``"2i"`` or ``"i"`` over d.
    """
    n, d = x.shape[-2], x.shape[-1]
    work = x.double()
    position = torch.arange(start, start + n, dtype=torch.float64)
    i = torch.arange(d // 2, dtype=torch.float64)
    theta = base ** (sign * (2 * i if exponent == "2i" else i) / d)
    angle = position[:, None] * theta
    cos, sin = angle.cos(), angle.sin()
    if layout == "half":
        a, b = work[..., : d // 2], work[..., d // 2:]
    else:
        a, b = work[..., 0::2], work[..., 1::2]
    if second == "clockwise":
        first, other = a * cos + b * sin, -a * sin + b * cos
    elif second == "starter":
        first, other = a * cos - b * sin, b * cos - a * sin
    else:
        first, other = a * cos - b * sin, a * sin + b * cos
    if layout == "half":
        return torch.cat([first, other], -1).to(x.dtype)
    return torch.stack([first, other], -1).flatten(-2).to(x.dtype)


def rotate_cases() -> list[Case]:
    g = torch.Generator().manual_seed(802)
    return [
        Case(args=(torch.randn(2, 5, 4, generator=g),), label="B=2, N=5, d=4"),
        Case(args=(torch.randn(1, 7, 8, generator=g), 100.0),
             label="N=7, d=8, base 100"),
        Case(args=(torch.randn(2, 3, 6, 10, generator=g),),
             label="(B, heads, N, d) = (2, 3, 6, 10)"),
        Case(args=(torch.randn(3, 9, 16, generator=g),), hidden=True),
        Case(args=(torch.randn(1, 2, 12, 2, generator=g), 10.0), hidden=True),
    ]


def _rotating(base_ignored: bool = False, **settings):
    """``rotate_pairs`` with one thing changed (see :func:`_rotate`), or its ``base``
    argument ignored (always 10000)."""

    def rotate(x, base=10000.0):
        return _rotate(x, 10000.0 if base_ignored else base, **settings)

    return rotate


ROTATE_MISTAKES = mistake_table(_rotating, [
    ("unfixed", {"start": 1, "second": "starter"},
     "this is still the broken function: both of its bugs are in it (where the "
     "positions start, and how the second entry of each pair is made)"),
    ("sign_still_wrong", {"second": "starter"},
     "the positions are right now, but the second entry of each pair is still not "
     "that of a rotation: your function changes the length of the vectors (the "
     "chapter's norm check fails); expand the rotation of the pair by the angle and "
     "compare the signs"),
    ("positions_from_one", {"start": 1},
     "the rotation is right now, but the first token is still turned: positions "
     "start at 0, and position 0 must leave the vector as it is"),
    ("clockwise", {"second": "clockwise"},
     "your pairs turn the other way (by minus the angle): a rotation, so the "
     "lengths and the relative property hold, but not the direction the chapter's "
     "formula turns; compare your two signs with the rotation matrix"),
    ("rotate_half", {"layout": "half"},
     "you paired feature i with feature i + d/2 (the rotate-half layout of some "
     "code bases); the question pairs adjacent features, 0 with 1, 2 with 3, ..."),
    ("base_ignored", {"base_ignored": True},
     "your function ignores its base argument and always uses 10000; the pairs' "
     "speeds are the given base to the power -2i/d"),
    ("speeds_grow", {"sign": 1.0},
     "your pairs turn faster and faster along the vector: the exponent of the base "
     "has lost its minus sign; the first pair turns fastest, by one radian per "
     "position, and the later pairs ever more slowly"),
    ("pair_number_over_d", {"exponent": "i"},
     "your frequencies use the exponent i over d, with i the number of the pair; "
     "the speed of pair i is the base to the power -2i/d"),
])


def diagnose_rotation(case: Case, expected, got) -> str | None:
    """Say which of the chapter's properties the learner's rotation breaks."""
    if type(got) is dict:
        got = got.get("output")
    x = case.args[0]
    if not isinstance(got, torch.Tensor) or got.shape != x.shape:
        return None
    g = got.detach().double()
    if not torch.allclose(g.norm(dim=-1), x.double().norm(dim=-1), rtol=1e-4, atol=1e-5):
        return _("your function changes the length of the vectors, and a rotation keeps "
                 "it")
    if not torch.allclose(g[..., 0, :], x[..., 0, :].double(), rtol=1e-4, atol=1e-5):
        return _("the vectors at position 0 are changed, and position 0 is the identity")
    return None


# --------------------------------------------------------------------------- question 3
def rope_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """The reference: causal attention with RoPE on the queries and keys."""
    return F.scaled_dot_product_attention(positions.rotary_embedding(q),
                                          positions.rotary_embedding(k), v, is_causal=True)


def _rope_attention(rotate: str = "qk", causal: bool = True, output: bool = False,
                    scale: str = "sqrt", diagonal: bool = True, axis: int = -1):
    """Causal attention with RoPE, one thing changed: what is rotated, the mask (none, or
    without the diagonal), the ``scale`` (``"sqrt"``, ``"none"`` or ``"d"``) or the
    ``axis`` of the softmax (-2: over the queries)."""
    def wrong(q, k, v):
        r = positions.rotary_embedding
        q = r(q) if "q" in rotate else q
        k = r(k) if "k" in rotate else k
        v = r(v) if "v" in rotate else v
        if scale == "sqrt" and diagonal and axis == -1:
            out = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        else:
            d, n = q.shape[-1], q.shape[-2]
            factor = {"sqrt": d ** -0.5, "none": 1.0, "d": 1.0 / d}[scale]
            scores = factor * q @ k.transpose(-2, -1)
            hidden = torch.ones(n, n, dtype=torch.bool).triu(0 if not diagonal else 1)
            scores = scores.masked_fill(hidden, -math.inf)
            weights = torch.softmax(scores, dim=axis).nan_to_num(0.0)
            out = weights @ v
        return r(out) if output else out
    return wrong


def rope_attention_cases() -> list[Case]:
    g = torch.Generator().manual_seed(803)

    def qkv(*shape: int) -> tuple[torch.Tensor, ...]:
        return tuple(torch.randn(*shape, generator=g) for _copy in range(3))

    return [
        Case(args=qkv(2, 2, 5, 4), label="B=2, 2 heads, N=5, d=4"),
        Case(args=qkv(1, 3, 8, 8), label="B=1, 3 heads, N=8, d=8"),
        Case(args=qkv(2, 1, 6, 16), hidden=True),
        Case(args=qkv(1, 4, 3, 6), hidden=True),
    ]


ROPE_ATTENTION_MISTAKES = (
    *mistake_table(_rope_attention, [
        ("values_rotated", {"rotate": "qkv"},
         "you rotated the values too; RoPE turns only the queries and the keys, so that "
         "the scores depend on the offset, and leaves the values, the content that is "
         "mixed, as they are"),
        ("queries_only", {"rotate": "q"},
         "only the queries are rotated; the keys must be turned by their own positions "
         "too, or the scores depend on the query's place, not on the offset"),
        ("keys_only", {"rotate": "k"},
         "only the keys are rotated; the queries must be turned by their own positions "
         "too, or the scores depend on the key's place, not on the offset"),
        ("output_rotated", {"rotate": "qk", "output": True},
         "the queries and keys are right, but you also rotated the output of the "
         "attention; RoPE acts on the scores only"),
        ("not_causal", {"rotate": "qk", "causal": False},
         "the rotations are right, but the attention is not causal: each query may see "
         "only the keys at or before its own position"),
    ]),
    *mistake_table(_rope_attention, [
        ("unscaled", {"scale": "none"},
         "the rotations and the mask are right, but your scores are not divided by the "
         "square root of d: they are that many times too large"),
        ("divided_by_d", {"scale": "d"},
         "the rotations and the mask are right, but your scores are divided by d, not "
         "by its square root"),
        ("diagonal_masked", {"diagonal": False},
         "your causal mask also hides each query's own position (the first query then "
         "sees nothing); a query may attend to itself and to the keys before it"),
        ("softmax_over_queries", {"axis": -2},
         "your softmax normalises over the queries, down each column; each query's "
         "weights over its keys must sum to 1, along each row"),
    ]),
    Mistake("nothing_rotated", _rope_attention(""),
            "nothing is rotated: this is causal attention without positions"),
)


# --------------------------------------------------------------------------- question 4
def recent_share(slope: float, n: int, w: int) -> float:
    """The reference: the share of the last query's weight on its ``w`` most recent keys
    (itself included) when every ``q . k`` is equal, under the ALiBi slope ``slope``, over
    ``n`` keys: a geometric series, ``(1 - e^(-m w)) / (1 - e^(-m n))``."""
    return (1 - math.exp(-slope * w)) / (1 - math.exp(-slope * n))


def share_cases() -> list[Case]:
    return [
        Case(args=(0.5, 10, 3), label="slope 1/2, 10 keys, the 3 most recent"),
        Case(args=(0.25, 64, 8), label="slope 1/4, 64 keys, the 8 most recent"),
        Case(args=(1 / 256, 100, 10), label="slope 1/256, 100 keys, the 10 most recent"),
        Case(args=(0.125, 30, 1), hidden=True),
        Case(args=(0.0625, 200, 50), hidden=True),
        Case(args=(0.5, 6, 6), hidden=True),
        Case(args=(2 ** -1.5, 40, 7), hidden=True),
    ]


SHARE_MISTAKES = (
    Mistake("endless", lambda m, n, w: 1 - math.exp(-m * w),
            "your share is that of an endless sequence: the weights are normalised over "
            "the n keys there are, so divide by the sum of the whole finite series"),
    Mistake("one_more", lambda m, n, w: (1 - math.exp(-m * (w + 1))) / (1 - math.exp(-m * n)),
            "you counted one key too many: the w most recent keys are at distances 0 to "
            "w - 1 (the query's own key, at distance 0, is the first of them)"),
    Mistake("one_fewer", lambda m, n, w: (1 - math.exp(-m * (w - 1))) / (1 - math.exp(-m * n)),
            "you counted one key too few: the w most recent keys are at distances 0 to "
            "w - 1, and the query's own key, at distance 0, is one of them"),
    Mistake("own_key_left_out",
            lambda m, n, w: math.exp(-m) * recent_share(m, n, w),
            "you summed the keys at distances 1 to w, leaving out the query's own key; the "
            "w most recent keys are at distances 0 to w - 1, the own key first"),
    Mistake("n_plus_one_terms",
            lambda m, n, w: (1 - math.exp(-m * w)) / (1 - math.exp(-m * (n + 1))),
            "your normalising sum has one term too many: the last query sees n keys, at "
            "distances 0 to n - 1"),
    Mistake("uniform", lambda m, n, w: w / n,
            "your share ignores the bias: with equal contents the weights are not equal, "
            "each key's weight falls by a factor e to the power -m per step back"),
    Mistake("oldest", lambda m, n, w: recent_share(m, n, n) - recent_share(m, n, n - w),
            "you took the w oldest keys, those at the start of the sequence (or, the same "
            "number, your weights grow with the distance instead of falling); the question "
            "asks for the w most recent ones, nearest the query, which weigh most"),
    Mistake("single_key", lambda m, n, w: recent_share(m, n, w) - recent_share(m, n, w - 1),
            "your answer is the weight of one key, the w-th most recent; the question asks "
            "for the total weight of the w most recent keys"),
)


# --------------------------------------------------------------------------- question 5
SAME, DIFFERENT = "same", "different"
SCENARIOS = ("none_last", "rope_last", "alibi_last", "none_first")


SWAP = {"none_last": SAME, "rope_last": DIFFERENT, "alibi_last": DIFFERENT,
        "none_first": DIFFERENT}


SWAP_WRONG = [
    ("none_last_different", "none_last", DIFFERENT,
     "without positions the last query sees every token of the sequence, the same set "
     "before and after the swap; its weights move with their keys and its output, a "
     "weighted sum, does not change: a causal mask alone does not make the last position "
     "notice the order of the tokens before it"),
    ("rope_last_same", "rope_last", SAME,
     "with RoPE each score depends on the offset between the query and the key: after the "
     "swap the last query sees the two tokens at other offsets, so their scores, and the "
     "output, change"),
    ("alibi_last_same", "alibi_last", SAME,
     "with ALiBi the bias of a key depends on its distance from the query: after the swap "
     "the two tokens are at other distances from the last query, so their weights, and "
     "the output, change"),
    ("none_first_same", "none_first", SAME,
     "the first position sees only itself, and after the swap a different token stands "
     "there: its output is that token's value; the causal mask is positional, so even "
     "without positions the first output changes"),
]


# --------------------------------------------------------------------------- question 6
def alibi_reach(num_heads: int, lengths: list[int], share: float) -> torch.Tensor:
    """The reference: long ``(len(lengths), num_heads)``, the fewest most recent keys that
    hold at least ``share`` of the last query's weight, with equal contents."""
    return _reach(num_heads, lengths, share)


def _reach(num_heads: int, lengths: list[int], share: float, *, order: str = "recent",
           query: str = "last", offset: int = 0) -> torch.Tensor:
    rows = []
    for n in lengths:
        weights = torch.softmax(alibi(num_heads, n).double(), dim=-1)
        row = weights[:, -1 if query == "last" else 0]           # (heads, n)
        if order == "recent":
            row = row.flip(-1)                                     # nearest key first
        cumulative = row.cumsum(-1)
        rows.append((cumulative < share - 1e-12).sum(-1) + 1 + offset)
    return torch.stack(rows).long()


def reach_cases() -> list[Case]:
    return [
        Case(args=(4, [8, 64, 512], 0.9), label="4 heads, lengths 8, 64, 512, share 0.9"),
        Case(args=(8, [16, 256], 0.5), label="8 heads, lengths 16 and 256, share 0.5"),
        Case(args=(2, [4, 40, 350], 0.75), hidden=True),
        Case(args=(3, [2, 30, 300, 700], 0.9), hidden=True),
    ]


REACH_MISTAKES = (
    Mistake("not_normalised",
            lambda h, lengths, s: torch.ones(len(lengths), h, dtype=torch.long),
            "every count is 1: the most recent key alone reaches the share, as happens when "
            "the weights are not normalised across the keys the last query sees; turn its "
            "row of the bias into weights with a softmax over the keys"),
    *mistake_table(changed(_reach), [
        ("oldest_first", {"order": "oldest"},
         "you counted keys from the start of the sequence; count from the query back, "
         "the most recent key first"),
        ("first_query", {"query": "first"},
         "you measured the first query, which sees only itself; the question asks about "
         "the last query, which sees the whole sequence"),
        ("one_fewer", {"offset": -1},
         "each of your counts is one too small: count the query's own key too (it is "
         "the most recent one)"),
        ("one_more", {"offset": 1},
         "each of your counts is one too large: stop at the first key with which the "
         "running total reaches the share"),
    ]),
)


EXERCISE = Exercise(
    id="08_positions",
    title="Positions and length",
    forbidden_imports=("attention_course.positions",),
    questions=(
        Question(
            id="q1_alibi",
            symbol="alibi",
            title="ALiBi's bias",
            kind="implement",
            points=2,
            reference=alibi,
            cases=alibi_cases,
            rtol=1e-5, atol=1e-6,
            mistakes=ALIBI_MISTAKES,
            diagnose=diagnose_alibi,
            hint="Each head has its own slope from a geometric sequence that ends at 1/256; "
                 "the bias is the slope times the distance, with a minus sign, for keys at "
                 "or before the query, and minus infinity after it.",
            section=ALIBI,
        ),
        Question(
            id="q2_rotate_pairs",
            symbol="rotate_pairs",
            title="Debug: a rotary embedding",
            kind="debug",
            points=3,
            reference=rotate_pairs,
            cases=rotate_cases,
            grad=True,
            rtol=1e-4, atol=1e-5,
            mistakes=ROTATE_MISTAKES,
            diagnose=diagnose_rotation,
            hint="Two of the chapter's properties fail for the broken function: check that "
                 "it keeps every vector's length, and that position 0 leaves a vector as "
                 "it is.",
            section=ROPE,
        ),
        Question(
            id="q3_rope_attention",
            symbol="rope_attention",
            title="RoPE inside causal attention",
            kind="implement",
            points=2,
            reference=rope_attention,
            cases=rope_attention_cases,
            grad=True,
            rtol=1e-4, atol=1e-5,
            mistakes=ROPE_ATTENTION_MISTAKES,
            builds_on=("q2_rotate_pairs",),
            hint="RoPE changes the scores only: turn what is compared, the queries and the "
                 "keys, each at its own position, then run the causal attention as usual.",
            section=FUSED,
        ),
        Question(
            id="q4_recent_share",
            symbol="recent_share",
            title="Derive: how much an ALiBi head looks at the recent keys",
            kind="derive",
            points=3,
            reference=recent_share,
            cases=share_cases,
            rtol=1e-6, atol=1e-9,
            mistakes=SHARE_MISTAKES,
            hint="With equal contents the weight of the key t steps back is proportional to "
                 "e to the power -m t: the weights form a geometric series; sum its first w "
                 "terms and divide by the sum of all n.",
            section=ALIBI,
        ),
        prediction(
            id="q5_predict_swap",
            symbol="predict_swap",
            title="Predict: who notices a swap?",
            points=4,
            answer=SWAP,
            choices=(SAME, DIFFERENT),
            wrong=SWAP_WRONG,
            hint="Ask, for each output, which keys its query sees, and whether anything "
                 "in its scores depends on where those keys stand.",
            section=WHY,
        ),
        Question(
            id="q6_alibi_reach",
            symbol="alibi_reach",
            title="Measure: how far each ALiBi head reaches",
            kind="experiment",
            points=3,
            reference=alibi_reach,
            cases=reach_cases,
            mistakes=REACH_MISTAKES,
            builds_on=("q1_alibi",),
            hint="Turn the last row of each head's bias into weights, walk back from the "
                 "query adding them up, and count the keys until the total reaches the "
                 "share.",
            section=ALIBI,
            time_limit=20.0,
        ),
    ),
)
