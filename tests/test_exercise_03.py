"""Exercise 3 (masks): typical mistakes, applied to the reference solution, lose points
with a message that names them.

Every mistake the spec lists is tried on its question; then mistakes the spec does not
list (other ways to reach the same wrong answer, and other wrong answers) must still get
feedback a learner can act on; then one notebook with a mistake in every question goes
through the real, sandboxed grader.
"""

from __future__ import annotations

import functools
import math

import pytest
import torch
from grading_helpers import (
    assert_each_question,
    graded_record,
    judge,
    learner_starter,
    listed_mistake_test,
    replace_in_solution,
    run_cells,
)
from grading_helpers import assert_named as named

from attention_course.grading import get_exercise, run_checks

E = "03_masks"
EXERCISE = get_exercise(E)
MINUS_INF = float("-inf")


# the feedback may name a word in any case
assert_named = functools.partial(named, ignore_case=True)


# --------------------------------------------------------------------------- listed
test_every_listed_mistake_loses_points_with_its_message = listed_mistake_test(E)


# --------------------------------------------------------------------------- question 1
def _lens_mask(scores, valid_lens):
    lens = valid_lens[:, None, None] if valid_lens.dim() == 1 else valid_lens[:, :, None]
    return torch.arange(scores.shape[-1]) < lens


def _softmax_answer(body):
    """A masked_softmax that handles None like the reference and ``body`` otherwise."""

    def masked_softmax(scores, valid_lens):
        if valid_lens is None:
            return torch.softmax(scores, dim=-1)
        return body(scores, _lens_mask(scores, valid_lens))

    return masked_softmax


def _manual_no_guard(s, allowed):
    filled = s.masked_fill(~allowed, MINUS_INF)
    exp = torch.exp(filled - filled.amax(-1, keepdim=True))
    return exp / exp.sum(-1, keepdim=True)


def _eps_max_of_all(s, allowed):
    exp = torch.exp(s - s.amax(-1, keepdim=True)) * allowed
    return exp / (exp.sum(-1, keepdim=True) + 1e-9)


def _raw_exp(s, allowed):
    exp = torch.exp(s) * allowed
    return exp / exp.sum(-1, keepdim=True).clamp(min=1e-30)


UNLISTED_SOFTMAX_BODIES = {
    # -1e4 and the smallest float are "large finite negative" fills too
    "fill_minus_1e4": (lambda s, a: torch.softmax(s.masked_fill(~a, -1e4), -1), ["uniform"]),
    "fill_finfo_min": (lambda s, a: torch.softmax(s.masked_fill(~a, torch.finfo(s.dtype).min),
                                                  -1), ["uniform"]),
    # an additive -1e9 mask: same weights as the masked fill, other gradients
    "additive_minus_1e9": (lambda s, a: torch.softmax(s + (~a) * -1e9, -1), ["uniform"]),
    # its own softmax with a max subtraction, but no care for an empty row
    "manual_softmax_no_guard": (_manual_no_guard, ["NaN", "valid length is 0"]),
    # masking by multiplying the scores: a masked score of 0 still gets weight
    "scores_times_mask": (lambda s, a: torch.softmax(s * a, -1), ["masked key", "exactly 0"]),
    # softmax over the queries after a -inf fill: NaN columns
    "softmax_over_queries_nan": (lambda s, a: torch.softmax(s.masked_fill(~a, MINUS_INF), 1),
                                 ["columns", "over the queries"]),
    # max of all keys subtracted, epsilon in the denominator
    "max_of_all_keys_with_eps": (_eps_max_of_all, ["largest score", "masked keys included"]),
    # no max subtraction at all
    "raw_exponentials": (_raw_exp, ["overflow"]),
    # the answer rebuilt from Python numbers: no gradient
    "rebuilt_from_numbers": (
        lambda s, a: torch.tensor(torch.softmax(s.masked_fill(~a, -1e9), -1).tolist()),
        ["does not carry gradients"]),
    "detached": (lambda s, a: torch.softmax(s.masked_fill(~a, -1e9), -1).detach(),
                 ["does not carry gradients"]),
    # a log-softmax: negative numbers where the masked keys must be 0
    "log_weights": (lambda s, a: torch.log_softmax(s.masked_fill(~a, -1e9), -1),
                    ["belongs to a masked key"]),
}



UNLISTED_SOFTMAX = {name: (_softmax_answer(body), words)
                    for name, (body, words) in UNLISTED_SOFTMAX_BODIES.items()}


@pytest.mark.parametrize("body", [
    lambda s, a: torch.nan_to_num(torch.softmax(s.masked_fill(~a, MINUS_INF), -1)),
    lambda s, a: torch.softmax(s.masked_fill(~a, MINUS_INF), -1).masked_fill(~a, 0.0),
], ids=["nan_to_num", "zero_masked_after"])
def test_other_correct_masked_softmaxes_pass(body):
    """Patching the NaN after a masked fill is right: the fill sends no gradient back."""
    assert judge(E, "q1_masked_softmax", _softmax_answer(body)).passed


def test_per_query_lengths_ignored_give_a_shape_error():
    def only_per_sequence(scores, valid_lens):
        if valid_lens is None:
            return torch.softmax(scores, -1)
        allowed = torch.arange(scores.shape[-1]) < valid_lens[:, None, None]
        return torch.softmax(scores.masked_fill(~allowed, -1e9), -1)

    result = judge(E, "q1_masked_softmax", only_per_sequence)
    assert result.points == 0 and "expected shape (2, 4, 4)" in result.message


# --------------------------------------------------------------------------- question 2
def _padding(right, left, cast=None):
    def padding_mask(valid_lens, max_len, side="right"):
        positions, lens = torch.arange(max_len), valid_lens[:, None]
        mask = right(positions, lens, max_len) if side == "right" else left(positions, lens,
                                                                             max_len)
        return mask if cast is None else mask.to(cast)

    return padding_mask


def _right(p, lens, n):
    return p < lens


def _left(p, lens, n):
    return p >= n - lens


UNLISTED_PADDING = {
    "float_mask": (_padding(_right, _left, torch.float32), ["stored as numbers", "boolean"]),
    "int_mask_inverted": (_padding(lambda p, lens, n: p >= lens,
                                   lambda p, lens, n: p < n - lens, torch.int64),
                          ["marks the padding", "must be boolean"]),
    "only_left_inverted": (_padding(_right, lambda p, lens, n: p < n - lens),
                           ["marks the padding"]),
    "transposed": (lambda vl, n, side="right": _padding(_right, _left)(vl, n, side).T,
                   ["shape", "swapped"]),
    "left_from_length_minus_one": (_padding(_right, lambda p, lens, n: p >= lens - 1),
                                   ["row 1", "should be True at positions 4"]),
    # the right-padded mask flipped along the batch instead of the positions
    "flipped_over_the_batch": (lambda vl, n, side="right": (
        torch.arange(n) < vl[:, None]).flip(0 if side == "left" else ()),
        ["row 0", "should be True at positions 2 to 4; yours is True at 0 to 4"]),
    # left as the default side
    "left_by_default": (lambda vl, n, side="left": _padding(_right, _left)(vl, n, side),
                        ["side 'right'", "should be True at positions 0 to 2"]),
}



def test_flipped_right_mask_is_a_correct_left_mask():
    def padding_mask(valid_lens, max_len, side="right"):
        right = torch.arange(max_len) < valid_lens[:, None]
        return right if side == "right" else right.flip(-1)

    assert judge(E, "q2_padding_mask", padding_mask).passed


# --------------------------------------------------------------------------- question 3
def _attention(scale, softmax, output=None):
    def masked_attention(query, key, value, attn_mask):
        scores = query @ key.transpose(-2, -1) / scale(query, value)
        weights = softmax(scores, attn_mask)
        out = weights @ value if output is None else output(scores, attn_mask, value)
        return out, weights

    return masked_attention


def _sqrt_d(q, v):
    return math.sqrt(q.shape[-1])


def _naive(s, m):
    return torch.softmax(s.masked_fill(~m, MINUS_INF), dim=-1)


UNLISTED_ATTENTION = {
    # the smallest float as a fill, with or without the scale fixed: uniform rows
    "finfo_min_fill": (_attention(_sqrt_d, lambda s, m: torch.softmax(
        s.masked_fill(~m, torch.finfo(s.dtype).min), -1)), ["evenly", "1/Nk"]),
    "finfo_min_fill_scale_unfixed": (_attention(lambda q, v: math.sqrt(v.shape[-1]),
                                                lambda s, m: torch.softmax(s.masked_fill(
                                                    ~m, torch.finfo(s.dtype).min), -1)),
                                     ["evenly"]),
    # the weights patched, the output computed from the NaN weights
    "output_from_unpatched_weights": (_attention(_sqrt_d, lambda s, m: torch.nan_to_num(
        _naive(s, m)), output=lambda s, m, v: _naive(s, m) @ v), ["weights are right",
                                                                 "output is not"]),
    # an additive -inf mask patched after the softmax: NaN gradients
    "additive_mask_patched": (_attention(_sqrt_d, lambda s, m: torch.nan_to_num(torch.softmax(
        s + torch.zeros(m.shape).masked_fill(~m, MINUS_INF), -1))), ["gradient is NaN"]),
    # softmax over the queries
    "softmax_over_queries": (_attention(_sqrt_d, lambda s, m: torch.nan_to_num(torch.softmax(
        s.masked_fill(~m, MINUS_INF), -2))), ["over the queries"]),
    # the mask ignored
    "mask_ignored": (_attention(_sqrt_d, lambda s, m: torch.softmax(s, -1)),
                     ["masked key", "exactly 0"]),
    # the fill at the allowed positions
    "mask_inverted": (_attention(_sqrt_d, lambda s, m: torch.nan_to_num(torch.softmax(
        s.masked_fill(m, MINUS_INF), -1))), ["go to the masked keys"]),
    # the masked weights zeroed after a plain softmax: rows no longer sum to 1
    "zeroed_not_renormalised": (_attention(_sqrt_d, lambda s, m: torch.softmax(s, -1) * m),
                                ["sums to 0.601", "must sum to 1"]),
}



def test_learner_starter_with_only_the_raise_removed_fails_on_nan():
    """The learner's starter, run as given (the raise line deleted), names bug 1."""
    namespace = {"math": math, "torch": torch}
    exec(learner_starter(E, "def masked_attention"), namespace)
    result = judge(E, "q3_fix_attention", namespace["masked_attention"])
    assert_named(result, "still gets NaN weights")


@pytest.mark.parametrize(("fix", "words"), [
    ("scale", ["still gets NaN weights"]),  # bug 2 fixed, bug 1 left
    ("nan", ["square root of the value dimension"]),  # bug 1 fixed, bug 2 left
])
def test_each_bug_left_alone_is_named(fix, words):
    scale = _sqrt_d if fix == "scale" else (lambda q, v: math.sqrt(v.shape[-1]))
    softmax = _naive if fix == "scale" else (lambda s, m: _naive(s, m).masked_fill(~m, 0.0))
    assert_named(judge(E, "q3_fix_attention", _attention(scale, softmax)), *words)


@pytest.mark.parametrize("softmax", [
    lambda s, m: torch.nan_to_num(_naive(s, m)),
    lambda s, m: torch.where(m, _naive(s, m), 0.0),
], ids=["nan_to_num", "where"])
def test_other_correct_fixes_pass(softmax):
    scale = lambda q, v: math.sqrt(q.shape[-1])  # noqa: E731
    assert judge(E, "q3_fix_attention", _attention(scale, softmax)).passed


# --------------------------------------------------------------------------- question 4
def test_a_prediction_outside_the_choices_is_refused_and_the_others_still_count():
    result = judge(E, "q4_predict_inverted", lambda: {
        "careful_a": "padding", "careful_b": "no position (zero weights)", "broken_b": "NaN"})
    assert result.points == 2 and "not one of the choices" in result.message


def test_the_not_inverted_reading_is_explained_in_every_part():
    result = judge(E, "q4_predict_inverted", lambda: dict.fromkeys(
        ("careful_a", "careful_b", "broken_b"), "only the real tokens"))
    assert result.points == 0
    assert_named(result, "allows exactly the padding", "False everywhere",
                 "allows no key at all")


# --------------------------------------------------------------------------- question 5
UNLISTED_CACHED = {
    "float_mask": (lambda n, nk: torch.ones(n, nk).tril(nk - n), ["stored as numbers"]),
    "first_rows_of_full_mask": (lambda n, nk: torch.ones(nk, nk, dtype=torch.bool).tril()[:n],
                                ["top-left"]),
    "int_top_left": (lambda n, nk: torch.ones(n, nk, dtype=torch.int64).tril(),
                     ["top-left", "must be boolean"]),
    "transposed": (lambda n, nk: torch.ones(nk, n, dtype=torch.bool).triu(n - nk),
                   ["shape", "swapped"]),
    "square": (lambda n, nk: torch.ones(n, n, dtype=torch.bool).tril(), ["shape (3, 5)"]),
    "strict_upper_with_offset": (lambda n, nk: torch.ones(n, nk, dtype=torch.bool).triu(
        nk - n + 1), ["forbidden (future) keys"]),
    "new_block_only": (lambda n, nk: torch.cat([torch.zeros(n, nk - n, dtype=torch.bool),
                                                torch.ones(n, n, dtype=torch.bool).tril()], 1),
                       ["query 0", "should be True at keys 0 to 2"]),
    # the keys in reverse order
    "keys_flipped": (lambda n, nk: torch.ones(n, nk, dtype=torch.bool).tril(nk - n).flip(-1),
                     ["query 0", "should be True at keys 0 to 2; yours is True at 2 to 4"]),
    # an offset of n (the number of new tokens) instead of num_keys - n
    "offset_n": (lambda n, nk: torch.ones(n, nk, dtype=torch.bool).tril(n),
                 ["right after its own position"]),
}



def test_last_rows_of_the_full_causal_mask_are_correct():
    answer = lambda n, nk: torch.ones(nk, nk, dtype=torch.bool).tril()[nk - n:]  # noqa: E731
    assert judge(E, "q5_cached_causal_mask", answer).passed


def test_a_mask_fitted_to_the_visible_cases_fails_a_held_back_one():
    visible = {(3, 5): torch.ones(3, 5, dtype=torch.bool).tril(2),
               (1, 6): torch.ones(1, 6, dtype=torch.bool),
               (4, 4): torch.ones(4, 4, dtype=torch.bool).tril()}
    answer = lambda n, nk: visible.get((n, nk), torch.zeros(n, nk, dtype=torch.bool))  # noqa: E731
    assert_named(judge(E, "q5_cached_causal_mask", answer), "held-back case")


# --------------------------------------------------------------------------- question 6
def _counts(right, left, empty):
    return lambda n, lens: {"pairs_right": sum(right(n, L) for L in lens),
                            "pairs_left": sum(left(n, L) for L in lens),
                            "empty_rows_left": sum(empty(n, L) for L in lens)}


def _tri(n, L):
    return L * (L + 1) // 2


def _right_count(n, L):
    return _tri(n, L) + (n - L) * L


def test_floats_for_whole_numbers_are_accepted():
    answer = _counts(lambda n, L: L * (L + 1) / 2 + (n - L) * L, lambda n, L: L * (L + 1) / 2,
                     lambda n, L: float(n - L))
    assert judge(E, "q6_count_allowed", answer).passed


def test_numbers_copied_from_the_visible_cases_fail():
    copied = {5: {"pairs_right": 27, "pairs_left": 21, "empty_rows_left": 2},
              4: {"pairs_right": 13, "pairs_left": 13, "empty_rows_left": 6}}
    result = judge(E, "q6_count_allowed",
                   lambda n, lens: copied.get(n, {"pairs_right": 0, "pairs_left": 0,
                                                  "empty_rows_left": 0}))
    assert result.points == 0 and "held-back case" in result.message


def test_independent_parts_earn_their_points():
    """Right padding right, left padding treated like right padding: 1 of 3 points."""
    answer = _counts(_right_count, _right_count, lambda n, L: 0)
    result = judge(E, "q6_count_allowed", answer)
    assert result.points == 1
    assert_named(result, "padding comes first")


def test_per_sequence_counts_instead_of_totals_are_refused():
    answer = lambda n, lens: {k: [v] for k, v in  # noqa: E731
                              {"pairs_right": 1, "pairs_left": 1, "empty_rows_left": 1}.items()}
    assert_named(judge(E, "q6_count_allowed", answer), "expected a number")


def test_a_diagonal_left_out_everywhere_is_named_in_every_part():
    answer = _counts(lambda n, L: L * (L - 1) // 2 + (n - L) * L, lambda n, L: L * (L - 1) // 2,
                     lambda n, L: n - L + (L > 0))
    result = judge(E, "q6_count_allowed", answer)
    assert result.points == 0 and result.message.count("left out the diagonal") == 1
    assert result.message.startswith("'pairs_right', 'pairs_left' and 'empty_rows_left' in ")


# --------------------------------------------------------------------------- unlisted
UNLISTED = [(question_id, name, *entry)
            for question_id, table in (("q1_masked_softmax", UNLISTED_SOFTMAX),
                                       ("q2_padding_mask", UNLISTED_PADDING),
                                       ("q3_fix_attention", UNLISTED_ATTENTION),
                                       ("q5_cached_causal_mask", UNLISTED_CACHED))
            for name, entry in table.items()]


@pytest.mark.parametrize(("question_id", "name", "answer", "words"), UNLISTED,
                         ids=[f"{q}-{n}" for q, n, *_ in UNLISTED])
def test_unlisted_mistakes_are_named(question_id, name, answer, words):
    """Mistakes the spec does not list still get feedback that names them."""
    assert_named(judge(E, question_id, answer), *words)


# --------------------------------------------------------------------------- one-line edits
ONE_LINE_EDITS = [
    # q1: no guard on the row sum (0/0), no guard on the row maximum, a finite fill, <=,
    # the maximum taken over the queries
    ("q1_masked_softmax", "return exp / torch.where(total > 0, total, torch.ones_like(total))",
     "return exp / total", ["came out NaN", "0/0"]),
    ("q1_masked_softmax", "    row_max = torch.where(\n"
     "        torch.isfinite(row_max), row_max, torch.zeros_like(row_max)\n    )\n", "",
     ["came out NaN"]),
    ("q1_masked_softmax", "filled = scores.masked_fill(~allowed, -math.inf)",
     "filled = scores.masked_fill(~allowed, -1e9)", ["came out uniform"]),
    ("q1_masked_softmax", "allowed = torch.arange(scores.shape[-1]) < lens",
     "allowed = torch.arange(scores.shape[-1]) <= lens", ["one key too many"]),
    ("q1_masked_softmax", "total = exp.sum(dim=-1, keepdim=True)",
     "total = exp.sum(dim=1, keepdim=True)", ["over the queries"]),
    # q2
    ("q2_padding_mask", "return positions >= max_len - lens", "return positions > max_len - lens",
     ["one real token too few"]),
    ("q2_padding_mask", "return positions < lens  #", "return positions <= lens  #",
     ["one position too many"]),
    # q3: the second masked_fill inverted; the scale left as it was
    ("q3_fix_attention", ".masked_fill(~attn_mask, 0.0)", ".masked_fill(attn_mask, 0.0)",
     ["is 0, but that key is allowed"]),
    ("q3_fix_attention", "math.sqrt(query.shape[-1])\n", "math.sqrt(value.shape[-1])\n",
     ["square root of the value dimension"]),
    ("q3_fix_attention", "math.sqrt(query.shape[-1])\n", "query.shape[-1]\n",
     ["divided by d, not by its square root"]),
    # q5
    ("q5_cached_causal_mask", "tril(num_keys - n)\n", "tril(n - num_keys)\n",
     ["fewer keys"]),
    ("q5_cached_causal_mask", "dtype=torch.bool).tril(num_keys", "dtype=torch.int64).tril(num_keys",
     ["stored as numbers"]),
    # q6
    ("q6_count_allowed", "+ (n - L) * L\n", "+ (n - L) * (L + 1)\n", ["own position"]),
    ("q6_count_allowed", "empty_rows_left += n - L  #", "empty_rows_left += L  #",
     ["counted the real queries"]),
    # listed since the red-team pass
    ("q2_padding_mask", "positions = torch.arange(max_len)",
     "positions = torch.arange(int(valid_lens.max()))", ["as wide as the longest valid length"]),
    ("q3_fix_attention", "math.sqrt(query.shape[-1])\n", "math.sqrt(key.shape[-2])\n",
     ["square root of the number of keys"]),
    ("q6_count_allowed", "pairs_right += L * (L + 1) // 2 +", "pairs_right += L * L // 2 +",
     ["half of L squared"]),
    ("q6_count_allowed", "pairs_left += L * (L + 1) // 2\n",
     "pairs_left += L * (L + 1) // 2 + (n - L) * (n - L + 1) // 2\n",
     ["see the padding before it"]),
]


@pytest.mark.parametrize(("question_id", "old", "new", "words"), ONE_LINE_EDITS,
                         ids=[f"{e[0]}-{i}" for i, e in enumerate(ONE_LINE_EDITS)])
def test_one_line_edits_of_the_solution_are_named(capsys, question_id, old, new, words):
    namespace = run_cells(replace_in_solution(E, (old, new)), "edited solution")
    (result,) = run_checks(E, question_id, namespace=namespace)
    assert_named(result, *words)


# --------------------------------------------------------------------------- the grader
MISTAKES_IN_EVERY_QUESTION = [
    # q1: a large negative fill instead of -inf and the careful softmax
    ("    filled = scores.masked_fill(~allowed, -math.inf)\n    # -inf",
     "    return torch.softmax(scores.masked_fill(~allowed, -1e9), dim=-1)\n    # -inf"),
    # q2: a float mask
    ("        return positions < lens  # real tokens first",
     "        return (positions < lens).float()  # real tokens first"),
    # q3: only the scale fixed
    ("    weights = torch.softmax(scores, dim=-1).masked_fill(~attn_mask, 0.0)\n",
     "    weights = torch.softmax(scores, dim=-1)\n"),
    # q4: one wrong prediction
    ('    return {"careful_a": "only the padding",',
     '    return {"careful_a": "only the real tokens",'),
    # q5: top-left alignment
    ("tril(num_keys - n)\n", "tril()\n"),
    # q6: padded queries left out with right padding
    ("        pairs_right += L * (L + 1) // 2 + (n - L) * L",
     "        pairs_right += L * (L + 1) // 2"),
]


def test_the_grader_names_a_mistake_in_every_question(tmp_path):
    record = graded_record(E, tmp_path, replace_in_solution(E, *MISTAKES_IN_EVERY_QUESTION))
    assert_each_question(record, {
        "q1_masked_softmax": (0, "came out uniform"),
        "q2_padding_mask": (0, "stored as numbers"),
        "q3_fix_attention": (0, "still gets NaN weights"),
        "q4_predict_inverted": (2, "allows exactly the padding"),
        "q5_cached_causal_mask": (0, "top-left alignment"),
        "q6_count_allowed": (2, "counted only the real queries"),
    })
    assert record.score == 4 and record.max_score == 15
