"""Exercise 4: attention in encoder-decoder models (chapter 4).

Seven questions, one of each kind at least:

1. ``attention_step`` (implement): one step of Bahdanau's decoder attention, recomputed
   from a finished teacher-forced pass: which state is the query, which tensors are the
   values, padding masked. Gradients must flow.
2. ``luong_step`` (debug): a broken version of Luong's "general" attention to fix (the
   current state is the query, the score is bilinear, the softmax runs over the source)
   and to complete: its mask and its context are gaps, so that the page does not show
   question 1's before the learner writes them (nor question 1's query as a bug).
3. ``long_sentence_prediction`` (predict): which model loses more on long sentences, and
   which score falls less there; the notebook then points to the chapter's tables.
4. ``attention_score_counts`` (derive): how many attention scores one teacher-forced
   batch computes, and how many of them reach the loss.
5. ``padding_prediction`` (predict): what an unmasked softmax does to a short sentence's
   context when its batch is padded.
6. ``padding_leak`` (experiment): measure it with your own ``attention_step``.
7. ``bleu_by_hand`` (derive): BLEU of two degenerate translations (clipping, the
   brevity penalty, a missing n-gram order).

The references use the package's own pieces (chapter 3's ``masked_softmax``; the BLEU
references follow ``seq2seq.corpus_bleu``, which the tests compare them with). Every
known mistake is a variant of the reference with one idea changed, so its message can
say which idea.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch

from attention_course.grading.spec import Case, Exercise, Question
from attention_course.grading.tables import changed, drawn_cases, mistake_table, prediction
from attention_course.i18n import _
from attention_course.masking import masked_softmax

SECTION_CORPUS = "4.1 A parallel corpus made in code"
SECTION_ATTENTION = "4.3 Attention: a new context for every output word"
SECTION_BY_HAND = "One decoder step, by hand"
SECTION_SCORES = "4.5 Translating, and scoring the translations"


# =========================================================================== question 1
def _source_weights(scores: torch.Tensor, src_valid_lens: torch.Tensor, mask: str = "before",
                    dim: int = -1) -> torch.Tensor:
    """The attention weights of ``scores (B, S)``: chapter 3's masked softmax over the
    source positions, or the mask slipped (``mask``: ``"none"``, ``"one_more"``,
    ``"one_less"``, ``"inverted"`` or applied ``"after"`` the softmax), or the softmax
    run over another axis ``dim``. Questions 1 and 2 share it: the learner writes the same
    mask in both."""
    if mask == "before" and dim == -1:
        return masked_softmax(scores[:, None, :], src_valid_lens)[:, 0]
    shift = {"before": 0, "after": 0, "none": 0, "inverted": 0, "one_more": 1,
             "one_less": -1}[mask]
    real = torch.arange(scores.shape[1]) < (src_valid_lens[:, None] + shift)
    if mask == "inverted":
        real = ~real
    if mask not in ("after", "none"):
        scores = scores.masked_fill(~real, float("-inf"))
    weights = torch.softmax(scores, dim=dim)
    if mask == "after":
        weights = weights.masked_fill(~real, 0.0)
    return weights


def _bahdanau(
    states: torch.Tensor,
    t: int,
    enc_outputs: torch.Tensor,
    src_embeddings: torch.Tensor,
    src_valid_lens: torch.Tensor,
    W_q: torch.Tensor,
    W_k: torch.Tensor,
    w_v: torch.Tensor,
    *,
    query_at: Callable[[int, int], int] = lambda t, last: t - 1,
    keys: str = "encoder",
    values: str = "encoder",
    score: str = "additive",
    mask: str = "before",
    softmax_over: str = "source",
    swap: bool = False,
    projections: str = "right",
    broadcast: bool = False,
    mean: bool = False,
    keep_axis: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The reference attention step, and (with one keyword changed) each known mistake."""
    query = states[:, query_at(t, states.shape[1] - 1)]  # (B, H_dec)
    key_vectors = enc_outputs if keys == "encoder" else src_embeddings
    if projections == "swapped":
        W_q, W_k = W_k, W_q
    elif projections == "untransposed":
        W_q, W_k = W_q.T, W_k.T
    projected = query if projections == "query_unprojected" else query @ W_q.T
    features = projected[:, None, :] + key_vectors @ W_k.T  # (B, S, h)
    scores = {
        "additive": lambda: torch.tanh(features) @ w_v,
        "no_tanh": lambda: features @ w_v,
        "relu": lambda: torch.relu(features) @ w_v,
        "no_w_v": lambda: torch.tanh(features).sum(-1),
        "tanh_outside": lambda: torch.tanh(features @ w_v),
        "scaled": lambda: torch.tanh(features) @ w_v / math.sqrt(w_v.shape[0]),
        "constant": lambda: torch.zeros_like(features[..., 0]),
        "dot": lambda: (key_vectors @ query[:, :, None]).squeeze(-1),
    }[score]()  # (B, S)
    length = enc_outputs.shape[1]
    weights = _source_weights(scores, src_valid_lens, mask,
                              0 if softmax_over == "batch" else -1)
    pooled = enc_outputs if values == "encoder" else src_embeddings
    context = weights @ pooled if broadcast else (weights[:, :, None] * pooled).sum(dim=1)
    if mean:
        context = context / length
    if keep_axis:
        context = context[:, None, :]
    return (weights, context) if swap else (context, weights)


def attention_step(states, t, enc_outputs, src_embeddings, src_valid_lens, W_q, W_k, w_v):
    """Reference for question 1: ``(context (B, H_enc), weights (B, S))``."""
    return _bahdanau(states, t, enc_outputs, src_embeddings, src_valid_lens, W_q, W_k, w_v)


def _float64(g: torch.Generator, *shape: int, scale: float = 1.0) -> torch.Tensor:
    """Random float64 numbers (float64 throughout, so that gradients compare without
    float32 rounding noise)."""
    return torch.randn(*shape, generator=g, dtype=torch.float64) * scale


def _padded(g: torch.Generator, lens: list[int], length: int, size: int) -> torch.Tensor:
    """States ``(B, length, size)`` of sentences of valid lengths ``lens``, zero at the
    padding, as the encoder gives them (and ``<pad>`` embeds to zero)."""
    real = (torch.arange(length) < torch.tensor(lens)[:, None])[:, :, None]
    return _float64(g, len(lens), length, size) * real


def _additive_weights(g: torch.Generator, d: int, spread: float) -> tuple[torch.Tensor, ...]:
    """``W_q``, ``W_k`` (d x d) and ``w_v`` (d) of an additive score, every size d."""
    return _float64(g, d, d, scale=0.8), _float64(g, d, d, scale=0.8), _float64(g, d, scale=spread)


def _step_case(g: torch.Generator, b: int, big_t: int, t: int, s: int, d: int,
               lens: list[int]) -> Case:
    # One size d for H_dec, H_enc, E and h, as in the chapter (64 for all): then every
    # known mistake computes (embeddings in place of encoder states, the two projections
    # swapped or not transposed) and can be named, instead of raising a shape error.
    enc, emb = _padded(g, lens, s, d), _padded(g, lens, s, d)
    states = _float64(g, b, big_t + 1, d)
    return Case(args=(states, t, enc, emb, torch.tensor(lens), *_additive_weights(g, d, 1.5)),
                label=f"B={b}, T={big_t}, t={t}, S={s}, all sizes {d}, valid lengths {lens}")


# (B, T, t, S, the size d of H_dec, H_enc, E and h, the valid lengths)
attention_step_cases = drawn_cases(4101, _step_case, visible=[
    (2, 3, 2, 5, 4, [5, 3]), (3, 4, 1, 4, 5, [1, 4, 2]), (2, 3, 3, 6, 3, [6, 4]),
], hidden=[(3, 5, 3, 6, 5, [6, 2, 4]), (2, 4, 4, 7, 6, [7, 5]), (1, 2, 1, 3, 2, [3])])


def _padding_gets_weight(lens_at: int) -> Callable[[Case, Any, Any], str | None]:
    """A ``diagnose`` hook for an answer ``(context, weights)`` whose valid lengths are
    argument ``lens_at``: it names a softmax over an axis of length one, a padded position
    that got weight, a real position that got none, or a row that does not sum to 1."""

    def diagnose(case: Case, expected: Any, got: Any) -> str | None:
        try:
            return _weights_problem(got["output"][1], expected["output"][1],
                                    case.args[lens_at])
        except (KeyError, IndexError, TypeError):
            return None

    return diagnose


def _weights_problem(weights: Any, expected_weights: torch.Tensor,
                     lens: torch.Tensor) -> str | None:
    if not isinstance(weights, torch.Tensor) or weights.shape != expected_weights.shape:
        return None
    w = weights.detach().double()
    padded = torch.arange(w.shape[1]) >= lens[:, None]
    if bool((lens > 1).any()) and bool(((w - 1).abs() < 1e-6)[~padded].all()):
        return _("every real weight is 1: your softmax ran over an axis of length one (the "
                 "single query), not over the source positions")
    leak = padded & (w.abs() > 1e-6)
    if bool(leak.any()):
        b, j = (int(i) for i in leak.nonzero()[0])
        return _("sentence {b} gives weight {weight} to source position {j}, which is "
                 "padding (its valid length is {length}): padded positions must get "
                 "exactly 0").format(b=b, weight=f"{w[b, j].item():.3g}", j=j,
                                     length=int(lens[b]))
    expected_w = expected_weights.detach().double()
    dropped = ~padded & (w.abs() <= 1e-12) & (expected_w > 1e-9)
    if bool(dropped.any()):
        b, j = (int(i) for i in dropped.nonzero()[0])
        return _("sentence {b} gives no weight to source position {j}, which is real (its "
                 "valid length is {length}): only positions at or after the valid length "
                 "are padding").format(b=b, j=j, length=int(lens[b]))
    sums = w.sum(dim=1)
    bad = (sums - 1).abs() > 1e-3
    if bool(bad.any()):
        b = int(bad.nonzero()[0])
        return _("the weights of sentence {b} sum to {total}; each sentence's weights are "
                 "a softmax over its own source positions and sum to 1").format(
                     b=b, total=f"{sums[b].item():.3g}")
    return None


# The mask's slips, in question 1 and in the gap that question 2 leaves for the mask.
_MASK_SLIPS = (
    ("no_mask", {"mask": "none"},
     "padded source positions get weight: the softmax must run over the real "
     "positions only, those before each sentence's valid length"),
    ("mask_one_too_many", {"mask": "one_more"},
     "the first padded position of each short sentence still gets weight: a "
     "sentence of valid length L keeps positions 0 to L-1 only (counting from 0)"),
    ("mask_one_too_few", {"mask": "one_less"},
     "your mask also removes the last real position (the source's end-of-sentence "
     "token): a valid length L keeps positions 0 to L-1, counting from 0"),
    ("mask_inverted", {"mask": "inverted"},
     "your mask keeps the padded positions and removes the real ones (a sentence "
     "without padding gets no position at all, hence NaN): the positions to keep "
     "are those before the valid length"),
    ("mask_after_softmax", {"mask": "after"},
     "the padded positions get 0, but the weights of a padded sentence no longer "
     "sum to 1: remove the padded positions before the softmax, not after it"),
)


Q1 = Question(
    id="q1_step",
    symbol="attention_step",
    title="One step of Bahdanau's attention, recomputed",
    kind="implement",
    points=4,
    reference=attention_step,
    cases=attention_step_cases,
    grad=True,
    diagnose=_padding_gets_weight(4),
    mistakes=mistake_table(changed(_bahdanau), [
        ("current_state", {"query_at": lambda t, last: t},
         "your query is the decoder state s_t, the one step t produces; in Bahdanau's "
         "decoder the context of step t is an input of that step, so the query is the "
         "previous state s_(t-1)"),
        ("last_state", {"query_at": lambda t, last: last},
         "your query is the last state s_T for every step; the query of step t is the "
         "previous state s_(t-1), different for every output word"),
        ("first_state", {"query_at": lambda t, last: 0},
         "your query is s_0 whatever the step: right only at t = 1; at step t the "
         "query is the previous state s_(t-1)"),
        ("embeddings_as_values", {"values": "embeddings"},
         "your weights are right but the context is a blend of the source embeddings "
         "x_j; the values are the encoder states h_j, the same vectors as the keys"),
        ("embeddings_as_keys", {"keys": "embeddings"},
         "your scores compare the query with the source embeddings x_j; the keys are "
         "the encoder states h_j, which know the words around each position"),
        ("embeddings_as_keys_and_values", {"keys": "embeddings", "values": "embeddings"},
         "you attend over the source embeddings x_j (as keys and as values); the "
         "decoder attends over the encoder states h_j"),
        *_MASK_SLIPS,
        ("softmax_over_batch", {"softmax_over": "batch"},
         "your softmax normalises across the sentences of the batch (for each source "
         "position) instead of across the source positions of each sentence"),
        ("no_tanh", {"score": "no_tanh"},
         "your scores miss the tanh between the sum of the two projections and the "
         "final projection by w_v"),
        ("projections_swapped", {"projections": "swapped"},
         "your query goes through W_k and the encoder states through W_q: W_q "
         "projects the decoder state, W_k the encoder states"),
        ("projections_untransposed", {"projections": "untransposed"},
         "your projections use W_q and W_k the wrong way round (their transposes): "
         "W_q has one row per hidden unit and one column per feature of the state, "
         "so the hidden features are W_q times the state"),
        ("relu", {"score": "relu"},
         "your hidden layer uses a ReLU (the MLP score of chapter 2); the additive "
         "score squashes it with tanh"),
        ("tanh_outside", {"score": "tanh_outside"},
         "your tanh comes after the projection by w_v; it belongs inside, on the "
         "hidden features, before w_v turns them into one number"),
        ("no_w_v", {"score": "no_w_v"},
         "your scores add up the features of the hidden layer instead of weighting "
         "them with the vector w_v"),
        ("scaled", {"score": "scaled"},
         "your scores are divided by the square root of a size (of the states or of "
         "the hidden layer); the additive score has no such scale (that belongs to the "
         "scaled dot product)"),
        ("context_mean", {"mean": True},
         "your context is divided by the number of source positions: the weights "
         "already sum to 1, so the context is their weighted sum, not a mean"),
        ("uniform", {"score": "constant"},
         "your weights are uniform over the real positions, whatever the query: the "
         "scores never reached the softmax"),
        ("context_broadcast", {"broadcast": True},
         "your context has shape (B, B, H_enc): a matrix product of the (B, S) weights "
         "with the (B, S, H_enc) states pairs every sentence's weights with every "
         "sentence's states; weight each sentence's own states and sum over its "
         "source positions"),
        ("dot_score", {"score": "dot"},
         "your scores are dot products of the query with the encoder states; "
         "Bahdanau's score is additive: project both, add, squash with tanh, and "
         "read the result out with w_v"),
        ("query_not_projected", {"projections": "query_unprojected"},
         "your query enters the sum without its projection W_q; both the decoder "
         "state and the encoder states are projected into the hidden layer first"),
        ("context_kept_axis", {"keep_axis": True},
         "your context has shape (B, 1, H_enc): a batched matrix product of the "
         "weights as a (B, 1, S) row keeps the axis of the single query; the context "
         "is (B, H_enc), one vector per sentence"),
        ("swapped_outputs", {"swap": True},
         "you give back the weights first and the context second; the answer is the "
         "pair (context, weights)"),
    ]),
    hint="The query is what the decoder knew before writing word t; the keys and the values "
         "are the same vectors; the padded positions are taken out before the softmax, not "
         "after it.",
    section=SECTION_ATTENTION,
)


# =========================================================================== question 2
def _luong(
    states: torch.Tensor,
    t: int,
    enc_outputs: torch.Tensor,
    src_valid_lens: torch.Tensor,
    W: torch.Tensor,
    *,
    query_at: str = "current",
    general: bool = True,
    softmax_dim: int = -1,
    transposed: bool = False,
    scaled: bool = False,
    mask: str = "before",
) -> tuple[torch.Tensor, torch.Tensor]:
    """The reference Luong step, and (with keywords changed) its bugs and half-fixes, and
    the slips of the two gaps the learner fills in (the mask and the context)."""
    index = {"current": t, "previous": t - 1, "last": states.shape[1] - 1}[query_at]
    query = states[:, index]  # (B, H)
    if general:
        matrix = W.T if transposed else W
        keys = enc_outputs @ matrix.T  # row j holds W h_j (or W^T h_j)
    else:
        keys = enc_outputs
    scores = (keys @ query[:, :, None]).squeeze(-1)  # (B, S): s^T W h_j
    if scaled:
        scores = scores / math.sqrt(query.shape[-1])
    weights = _source_weights(scores, src_valid_lens, mask, softmax_dim)
    return (weights[:, :, None] * enc_outputs).sum(dim=1), weights


def luong_step(states, t, enc_outputs, src_valid_lens, W):
    """Reference for question 2: ``(context (B, H), weights (B, S))``."""
    return _luong(states, t, enc_outputs, src_valid_lens, W)


def _luong_case(g: torch.Generator, b: int, big_t: int, t: int, s: int, h: int,
                lens: list[int]) -> Case:
    args = (_float64(g, b, big_t + 1, h), t, _padded(g, lens, s, h), torch.tensor(lens),
            _float64(g, h, h, scale=0.7))
    return Case(args=args, label=f"B={b}, T={big_t}, t={t}, S={s}, H={h}, valid lengths {lens}")


luong_cases = drawn_cases(4201, _luong_case,
                          visible=[(2, 3, 2, 5, 4, [5, 3]), (3, 4, 4, 4, 3, [2, 4, 1])],
                          hidden=[(3, 5, 4, 6, 5, [3, 6, 2]), (2, 2, 2, 4, 6, [4, 4])])


_LAST = "the query is still the last state s_T, the same for every step; Luong attends " \
        "after the RNN step of step t, with the current state s_t"
_DOT = "the score is still a plain dot product; the 'general' score puts the matrix W " \
       "between the decoder state and the encoder state"
_BATCH = "the softmax still normalises across the batch; each sentence's weights must be a " \
         "softmax over its own source positions"

Q2 = Question(
    id="q2_luong",
    symbol="luong_step",
    title="Debug: Luong's attention with the 'general' score",
    kind="debug",
    points=3,
    reference=luong_step,
    cases=luong_cases,
    grad=True,
    diagnose=_padding_gets_weight(3),
    mistakes=mistake_table(changed(_luong), [
        ("unchanged", {"query_at": "last", "general": False, "softmax_dim": 0},
         "this is the code as it was given: all three bugs are still there (which "
         "state is the query, how the score is computed, over which axis the softmax "
         "normalises)"),
        ("last_and_dot", {"query_at": "last", "general": False},
         "the softmax is fixed, two bugs remain: " + _LAST + "; and " + _DOT),
        ("last_and_batch", {"query_at": "last", "softmax_dim": 0},
         "the score is fixed, two bugs remain: " + _LAST + "; and " + _BATCH),
        ("dot_and_batch", {"general": False, "softmax_dim": 0},
         "the query is fixed, two bugs remain: " + _DOT + "; and " + _BATCH),
        ("last", {"query_at": "last"},
         "one bug remains: " + _LAST),
        ("dot", {"general": False},
         "one bug remains: " + _DOT),
        ("batch", {"softmax_dim": 0},
         "one bug remains: " + _BATCH),
        ("transposed", {"transposed": True},
         "W is used the wrong way round: the score is the decoder state, times W, "
         "times the encoder state (the rows of W belong to the decoder side)"),
        ("previous", {"query_at": "previous"},
         "your query is the previous state s_(t-1), the state before step t; Luong's "
         "decoder attends after the RNN step of step t, with the current state s_t"),
        *_MASK_SLIPS,  # the first gap of the starter
        ("scaled", {"scaled": True},
         "your scores are divided by the square root of the state size; Luong's "
         "'general' score has no such scale (that belongs to the Transformer's "
         "scaled dot product)"),
    ]),
    hint="Compare each line with the description above the code: which state is the query, "
         "what the 'general' score multiplies, and which axis of the scores runs over the "
         "source positions.",
    section=SECTION_ATTENTION,
)


# =========================================================================== question 3
LONG_CHOICES = ("fixed context", "attention", "both about the same", "exact match", "BLEU")
LONG_ANSWER = {"drops_more": "fixed context", "falls_less": "BLEU"}


def _predict(qid: str, symbol: str, title: str, answer: dict[str, str],
             choices: tuple[str, ...], explain: dict[tuple[str, str], str], hint: str,
             section: str) -> Question:
    """A prediction of one choice per part, a point per part. Every wrong choice of every
    part is a known mistake: the misconception behind it is explained, and a choice that
    belongs to another part is said to be one (the right answer is never printed)."""
    wrong = [(f"{key}_{choice.replace(' ', '_')}", key, choice, explain.get((key, choice)) or (
                f"{choice!r} does not answer this part ({key!r}): it is a choice for "
                f"another part of the question; reread what {key!r} asks"))
             for key, right in answer.items() for choice in choices if choice != right]
    return prediction(id=qid, symbol=symbol, title=title, points=len(answer), answer=answer,
                      choices=choices, wrong=wrong, hint=hint, section=section)


Q3 = _predict(
    "q3_long", "long_sentence_prediction", "Predict: long sentences",
    LONG_ANSWER, LONG_CHOICES, {
        ("drops_more", "attention"):
            "the attention decoder rebuilds its context for every output word from all the "
            "encoder states, so nothing has to survive in one vector from the first word to "
            "the last; which model has to do that?",
        ("drops_more", "both about the same"):
            "the models differ exactly in how much of a long sentence must fit in one "
            "vector of fixed size; think about which of them depends on that",
        ("falls_less", "exact match"):
            "exact match is all or nothing: one wrong word of twenty fails the whole "
            "sentence, and a long sentence has more words to get wrong; think about how the "
            "other score counts such a translation",
        ("falls_less", "both about the same"):
            "the two scores treat a translation with one wrong word very differently: one "
            "counts it as a failure, the other still finds most of its n-grams in the "
            "reference",
    },
    hint="The fixed-context decoder sees the source only through one vector of the same "
         "size for every sentence; the attention decoder reads every encoder state again at "
         "every step. Exact match gives a translation credit only when every word is right.",
    section=SECTION_SCORES,
)


# =========================================================================== question 4
def attention_score_counts(src_lens: list[int], tgt_lens: list[int]) -> dict[str, int]:
    """Reference for question 4."""
    s = [n + 1 for n in src_lens]  # the source words and <eos>
    t = [n + 1 for n in tgt_lens]  # <bos> + the words in, the words + <eos> out
    return {"computed": len(s) * max(s) * max(t),
            "used": sum(a * b for a, b in zip(s, t, strict=True))}


def _counts(src_extra: int = 1, tgt_extra: int = 1, computed: str = "padded",
            used: str = "real") -> Callable[..., dict[str, int]]:
    """A wrong count: ``src_extra`` and ``tgt_extra`` special tokens added to each length
    (1 each is right), the scores ``computed`` and ``used`` counted another way."""
    def wrong(src_lens: list[int], tgt_lens: list[int]) -> dict[str, int]:
        s = [n + src_extra for n in src_lens]
        t = [n + tgt_extra for n in tgt_lens]
        real = sum(a * b for a, b in zip(s, t, strict=True))
        padded = len(s) * max(s) * max(t)
        return {
            "computed": {"padded": padded, "real": real, "one_sentence": max(s) * max(t),
                         "target_unpadded": sum(max(s) * b for b in t),
                         "source_unpadded": sum(a * max(t) for a in s)}[computed],
            "used": {"real": real, "computed": padded,
                     "target_padding": sum(a * max(t) for a in s),
                     "source_padding": sum(max(s) * b for b in t),
                     "product_of_sums": sum(s) * sum(t)}[used],
        }

    return wrong


def score_count_cases() -> list[Case]:
    return [
        Case(args=([3], [4]), label="one pair: Tom chased Jerry -> 汤姆 追 了 杰瑞"),
        Case(args=([3, 9], [3, 8]), label="the chapter's two sentences, 3 and 9 English words"),
        Case(args=([5, 12, 7], [4, 10, 9]), hidden=True),
        Case(args=([8, 8, 2, 15], [7, 9, 2, 11]), hidden=True),
    ]


Q4 = Question(
    id="q4_counts",
    symbol="attention_score_counts",
    title="Derive: how many attention scores?",
    kind="derive",
    points=2,
    reference=attention_score_counts,
    cases=score_count_cases,
    parts={"computed": 1, "used": 1},
    mistakes=mistake_table(_counts, [
        ("no_specials", {"src_extra": 0, "tgt_extra": 0},
         "you count the words only: the source also ends in <eos> (the model scores "
         "it too), and the decoder makes one step more than the sentence has words "
         "(the last step writes <eos>)"),
        ("no_eos_step", {"src_extra": 1, "tgt_extra": 0},
         "the source side is right, but the decoder makes one step more than the "
         "Chinese sentence has words: its input starts with <bos>, its last output is "
         "<eos>"),
        ("no_source_eos", {"src_extra": 0, "tgt_extra": 1},
         "the decoder's steps are right, but every source sentence also ends in "
         "<eos>, one more position to score"),
        ("source_bos", {"src_extra": 2, "tgt_extra": 1},
         "the source gets <eos> only, no <bos>: one extra position per English "
         "sentence, not two"),
        ("two_extra_steps", {"src_extra": 1, "tgt_extra": 2},
         "the decoder makes one step more than the Chinese sentence has words, not "
         "two: <bos> is the input of the first step and <eos> the output of the last"),
        ("padding_skipped", {"computed": "real"},
         "the model does not skip padding: every sentence of the batch is scored at "
         "every padded source position and for every padded decoder step (the mask "
         "only sets weights to 0 afterwards)"),
        ("target_steps_unpadded", {"computed": "target_unpadded"},
         "the decoder runs every step for every sentence of the batch, the padded "
         "steps after a short target's end too (the loop does not stop early for "
         "one sentence)"),
        ("source_unpadded", {"computed": "source_unpadded"},
         "every sentence is scored at every source position of the batch, the "
         "padded positions after a short source's end too"),
        ("one_sentence", {"computed": "one_sentence"},
         "you count the scores of one sentence; the batch scores every one of its B "
         "sentences"),
        ("all_used", {"used": "computed"},
         "not every computed score can change the loss: those at padded source "
         "positions get weight 0, and the padded decoder steps are left out of the "
         "loss"),
        ("product_of_sums", {"used": "product_of_sums"},
         "a sentence attends only over its own source: add up one product per "
         "sentence, instead of multiplying the summed lengths"),
        ("target_padding_used", {"used": "target_padding"},
         "the padded decoder steps of a short target do not reach the loss, which "
         "averages over the real target positions only"),
        ("source_padding_used", {"used": "source_padding"},
         "a score at a padded source position gets weight exactly 0 from the mask, so "
         "it cannot change the context or the loss"),
    ]),
    hint="Count the positions the model sees, not the words: what the batch adds to each "
         "source and each target, what padding adds, and what the mask and the loss then "
         "throw away.",
    section=SECTION_CORPUS,
)


# =========================================================================== question 5
PADDING_CHOICES = ("grows", "shrinks", "stays the same", "turns")
PADDING_ANSWER = {"size": "shrinks", "direction": "stays the same"}


Q5 = _predict(
    "q5_padding_predict", "padding_prediction", "Predict: an unmasked softmax in a padded batch",
    PADDING_ANSWER, PADDING_CHOICES, {
        ("size", "grows"):
            "the padded encoder states are zero vectors: whatever weight they take adds "
            "nothing to the sum, and the real states keep less of the weight",
        ("size", "stays the same"):
            "without the mask the padded positions take part of the weight (their score is "
            "not minus infinity), so the real states keep less of it",
        ("direction", "turns"):
            "the padded states are all zero, so they add no new direction: every real "
            "state's weight is divided by the same larger total",
    },
    hint="Write the unmasked context as a sum over real and padded positions, and recall "
         "what the encoder outputs at a padded position.",
    section=SECTION_BY_HAND,
)


# =========================================================================== question 6
def _pad_sentence(x: torch.Tensor, num_pads: int) -> torch.Tensor:
    return torch.cat([x, x.new_zeros(x.shape[0], num_pads, x.shape[2])], dim=1)


def _leak(states, t, enc_outputs, src_embeddings, W_q, W_k, w_v, num_pads,
          step=attention_step, masked_length: str = "real", ratio: str = "unmasked/alone",
          prepend: bool = False):
    length = enc_outputs.shape[1]
    if prepend:  # the padding put before the sentence
        enc, emb = (_pad_sentence(x.flip(1), num_pads).flip(1)
                    for x in (enc_outputs, src_embeddings))
    else:
        enc, emb = _pad_sentence(enc_outputs, num_pads), _pad_sentence(src_embeddings, num_pads)
    alone, _weights = step(states, t, enc_outputs, src_embeddings, torch.tensor([length]),
                           W_q, W_k, w_v)
    real_len = length if masked_length == "real" else length + num_pads
    masked, _weights = step(states, t, enc, emb, torch.tensor([real_len]), W_q, W_k, w_v)
    unmasked, _weights = step(states, t, enc, emb, torch.tensor([length + num_pads]),
                              W_q, W_k, w_v)
    a, u, m = float(alone.norm()), float(unmasked.norm()), float(masked.norm())
    return {
        "masked_change": float((masked - alone).abs().max()),
        "shrink": {"unmasked/alone": u / a, "alone/unmasked": a / u, "difference": a - u,
                   "relative_change": float((unmasked - alone).norm()) / a,
                   "squared": (u / a) ** 2, "masked/alone": m / a}[ratio],
    }


def padding_leak(states, t, enc_outputs, src_embeddings, W_q, W_k, w_v, num_pads):
    """Reference for question 6 (with the reference attention step)."""
    return _leak(states, t, enc_outputs, src_embeddings, W_q, W_k, w_v, num_pads)


def _leak_case(g: torch.Generator, big_t: int, t: int, length: int, d: int,
               pads: int) -> Case:
    """One sentence of ``length`` real positions, to be padded by ``pads``; every size d,
    as in question 1."""
    args = (_float64(g, 1, big_t + 1, d), t, _float64(g, 1, length, d),
            _float64(g, 1, length, d), *_additive_weights(g, d, 0.5), pads)
    return Case(args=args, label=f"{length} real positions, {pads} padded, t={t}")


# the first: Tom chases Jerry <eos>, batched with a 10-token source
padding_leak_cases = drawn_cases(4601, _leak_case,
                                 visible=[(3, 1, 4, 5, 6), (4, 3, 5, 4, 2)],
                                 hidden=[(5, 2, 3, 5, 17), (2, 2, 6, 3, 9)])


Q6 = Question(
    id="q6_padding_measure",
    symbol="padding_leak",
    title="Experiment: measure the leak",
    kind="experiment",
    points=2,
    reference=padding_leak,
    cases=padding_leak_cases,
    parts={"masked_change": 1, "shrink": 1},
    part_tolerance={"masked_change": (0.0, 1e-5), "shrink": (1e-4, 1e-6)},
    builds_on=("q1_step",),
    mistakes=mistake_table(changed(_leak), [
        ("masked_with_padded_length", {"masked_length": "padded"},
         "your masked_change is as large as the change of the unmasked context: "
         "compare the padded context computed with the sentence's real valid length "
         "L with the context of the sentence alone"),
        ("ratio_inverted", {"ratio": "alone/unmasked"},
         "your shrink factor is above 1: it is upside down; divide the norm of the "
         "unmasked context by the norm of the context of the sentence alone"),
        ("difference", {"ratio": "difference"},
         "your shrink is a difference of norms; the question asks for their ratio "
         "(unmasked over alone)"),
        ("relative_change", {"ratio": "relative_change"},
         "your shrink is the relative change of the context (one minus the ratio); "
         "the question asks for the ratio of the norms, unmasked over alone"),
        ("squared", {"ratio": "squared"},
         "your shrink is the ratio of the squared norms; take the norms themselves"),
        ("masked_over_alone", {"ratio": "masked/alone"},
         "your shrink compares the masked context with the alone one, which the mask "
         "keeps as it was (a ratio of 1); the shrink is that of the unmasked context"),
        ("padding_prepended", {"prepend": True},
         "your masked context is not the alone one: the padding went before the "
         "sentence, where a valid length of L keeps the first L positions, some of "
         "them padding; append the padded positions after the sentence"),
    ]),
    hint="Three calls of your attention step on the same sentence: alone, padded with the "
         "real valid length, padded with the padded length; then compare the contexts.",
    section=SECTION_BY_HAND,
)


# =========================================================================== question 7
def _bleu_parts(k: int, m: int, r: int, c: int, *, clip: bool | str = True, brevity: str = "exp",
                zero_order: bool | str = True, precision_over: str = "candidate",
                root: float = 1.0) -> dict[str, float]:
    def penalty(cand_len: int) -> float:
        if brevity == "none":
            return 1.0
        if brevity == "linear":
            return min(1.0, cand_len / r)
        if brevity == "inverted":
            return math.exp(min(0.0, 1 - cand_len / r))
        if brevity == "uncapped":
            return math.exp(1 - r / cand_len)
        if brevity == "exponent":
            return min(0.0, 1 - r / cand_len)
        return math.exp(min(0.0, 1 - r / cand_len))

    matches = {True: min(k, m), False: k, "m": m, "r": min(k, r)}[clip]
    p1 = matches / (k if precision_over == "candidate" else r)
    repeated = penalty(k) * p1**root
    prefix = 0.0 if (c < 4 and zero_order) or (c <= 4 and zero_order == "four") else penalty(c)
    return {"repeated": repeated, "prefix": prefix}


def bleu_by_hand(k: int, m: int, r: int, c: int) -> dict[str, float]:
    """Reference for question 7 (equal to ``seq2seq.corpus_bleu`` on such sentences)."""
    return _bleu_parts(k, m, r, c)


def bleu_cases() -> list[Case]:
    return [
        Case(args=(7, 2, 6, 5), label="k=7, m=2, r=6, c=5"),
        Case(args=(3, 1, 6, 3), label="k=3, m=1, r=6, c=3"),
        Case(args=(4, 4, 10, 8), hidden=True),
        Case(args=(12, 5, 9, 9), hidden=True),
        Case(args=(2, 1, 5, 2), hidden=True),
        Case(args=(3, 5, 8, 6), hidden=True),
        Case(args=(5, 2, 7, 4), hidden=True),
    ]


Q7 = Question(
    id="q7_bleu",
    symbol="bleu_by_hand",
    title="Derive: BLEU of two degenerate translations",
    kind="derive",
    points=2,
    reference=bleu_by_hand,
    cases=bleu_cases,
    parts={"repeated": 1, "prefix": 1},
    mistakes=mistake_table(changed(_bleu_parts), [
        ("no_clipping", {"clip": False},
         "every copy of the repeated word counts as a match; a candidate n-gram counts "
         "at most as often as it occurs in the reference (the clipped, 'modified' "
         "precision)"),
        ("no_brevity_penalty", {"brevity": "none"},
         "there is no brevity penalty: a candidate shorter than its reference loses "
         "the factor e to the power 1 - r/c"),
        ("clipped_by_length", {"clip": "r"},
         "you clip the matches at the reference's length; a word matches at most as "
         "often as the reference contains that word (m times)"),
        ("unclipped_m", {"clip": "m"},
         "your precision can exceed 1: the matches are clipped at the candidate's own "
         "count too, so w matches the smaller of k and m times"),
        ("inverted_penalty", {"brevity": "inverted"},
         "your brevity penalty is upside down: it punishes a candidate shorter than "
         "its reference, with the exponent 1 - r/c for r reference and c candidate "
         "words"),
        ("uncapped_penalty", {"brevity": "uncapped"},
         "your brevity penalty rewards a candidate longer than its reference; the "
         "penalty is capped at 1"),
        ("linear_penalty", {"brevity": "linear"},
         "your brevity penalty is the length ratio c/r; BLEU's penalty is exponential, "
         "e to the power 1 - r/c"),
        ("penalty_without_exp", {"brevity": "exponent"},
         "your brevity penalty is the exponent 1 - r/c itself (zero or negative); "
         "the penalty is e to that power, between 0 and 1"),
        ("fourth_root_for_one_order", {"root": 0.25},
         "you took the fourth root of the unigram precision; with N = 1 the geometric "
         "mean of one precision is that precision itself (the weights are 1/N)"),
        ("short_prefix_not_zero", {"zero_order": False},
         "a candidate of fewer than 4 words has no 4-gram at all, so p_4 is 0 and, "
         "without smoothing, BLEU is 0"),
        ("four_words_zero", {"zero_order": "four"},
         "a candidate of exactly 4 words has one 4-gram, and it matches, so p_4 is 1 "
         "and BLEU is not 0"),
        ("recall", {"precision_over": "reference"},
         "your precision divides by the reference's length; BLEU's precision divides "
         "the clipped matches by the number of n-grams in the candidate"),
    ]),
    hint="Work out each p_n and the brevity penalty separately, then combine them as in the "
         "chapter's formula; check what happens to a precision when a sentence has no "
         "n-gram of that order.",
    section=SECTION_SCORES,
)


EXERCISE = Exercise(
    id="04_seq2seq_attention",
    title="Attention in encoder-decoder models",
    forbidden_imports=(
        "attention_course.seq2seq",
        "attention_course.masking",
        "attention_course.scoring",
        "attention_course.metrics",
    ),
    questions=(Q1, Q2, Q3, Q4, Q5, Q6, Q7),
)
