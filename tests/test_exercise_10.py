"""Exercise 10 (efficient attention): typical mistakes, applied to the reference solution,
lose points with a message that names them.

Every mistake the spec lists is tried on its question; then mistakes the spec does not
list (other ways to reach the same wrong answer, and other wrong answers) must still get
feedback a learner can act on, and other right answers must pass; then one notebook with
a mistake in every question goes through the real, sandboxed grader.
"""

from __future__ import annotations

import functools
import math

import pytest
import torch
import torch.nn.functional as F
from grading_helpers import (
    assert_each_question,
    choice,
    graded_record,
    judge,
    listed_mistake_test,
    replace_in_solution,
    run_cells,
    solution_namespace,
)
from grading_helpers import assert_named as named

from attention_course.grading import get_exercise, run_checks

E = "10_efficient_attention"
EXERCISE = get_exercise(E)
MINUS_INF = float("-inf")


@pytest.fixture(scope="module")
def reference():
    """The names the solution notebook defines (run once)."""
    return solution_namespace(E)


# the feedback may name a word in any case
assert_named = functools.partial(named, ignore_case=True)


def assert_passes(result):
    assert result.status == "passed", result.message


# --------------------------------------------------------------------------- listed
test_every_listed_mistake_loses_points_with_its_message = listed_mistake_test(E)


def test_the_exercise_is_worth_18_points():
    assert EXERCISE.max_score == 18


# --------------------------------------------------------------------------- question 1
def _merge_by_logaddexp(state_a, state_b):
    """Right, another way: the merged log-sum-exp, then the sums rebuilt from it."""
    m = torch.maximum(state_a["row_max"], state_b["row_max"])
    lse = torch.logaddexp(state_a["row_max"] + state_a["row_sum"].log(),
                          state_b["row_max"] + state_b["row_sum"].log())
    safe = torch.where(torch.isinf(m), torch.zeros_like(m), m)
    row_sum = torch.where(torch.isinf(lse), torch.zeros_like(lse), torch.exp(lse - safe))
    acc = sum(torch.exp(s["row_max"] - safe)[:, None] * s["acc"] for s in (state_a, state_b))
    return {"row_max": m, "row_sum": row_sum, "acc": acc}


def _merge_nan_patched(state_a, state_b):
    """Right: the NaN of an empty row computed, then replaced (no gradients are asked)."""
    m = torch.maximum(state_a["row_max"], state_b["row_max"])
    f_a = torch.exp(state_a["row_max"] - m).nan_to_num(nan=0.0)
    f_b = torch.exp(state_b["row_max"] - m).nan_to_num(nan=0.0)
    return {"row_max": m, "row_sum": f_a * state_a["row_sum"] + f_b * state_b["row_sum"],
            "acc": f_a[:, None] * state_a["acc"] + f_b[:, None] * state_b["acc"]}


@pytest.mark.parametrize("answer", [_merge_by_logaddexp, _merge_nan_patched])
def test_other_right_merges_pass(reference, answer):
    assert_passes(judge(E, "q1_merge_states", answer))


def test_merge_mistakes_not_listed(reference):
    # the smaller maximum kept: on the first case it is the first state's maximum, and
    # the message of that mistake says what the maximum must be
    smaller = judge(E, "q1_merge_states", lambda a, b: {
        **reference["merge_states"](a, b),
        "row_max": torch.minimum(a["row_max"], b["row_max"])})
    assert smaller.points == 2, smaller.message
    assert_named(smaller, "'row_max'", "must be the larger of the two")
    # a tuple instead of a dict
    as_tuple = judge(E, "q1_merge_states",
                     lambda a, b: tuple(reference["merge_states"](a, b).values()))
    assert_named(as_tuple, "return a dict with the keys 'row_max', 'row_sum', 'acc'")
    # the factor not broadcast over the value dimension: an error, named as one
    no_broadcast = judge(E, "q1_merge_states", lambda a, b: {
        "row_max": torch.maximum(a["row_max"], b["row_max"]),
        "row_sum": a["row_sum"] + b["row_sum"],
        "acc": torch.exp(a["row_max"]) * a["acc"]})
    assert_named(no_broadcast, "raised")


# --------------------------------------------------------------------------- question 2
def _block_backward_einsum(query, key, value, grad_out, out, lse, scale):
    """Right, written with einsum and the softmax's derivative spelled out."""
    probs = torch.exp(torch.einsum("bqd,bkd->bqk", query, key) * scale - lse[..., None])
    grad_probs = torch.einsum("bqe,bke->bqk", grad_out, value)
    delta = torch.einsum("bqe,bqe->bq", grad_out, out)[..., None]
    grad_scores = probs * grad_probs - probs * delta
    return {"grad_query": torch.einsum("bqk,bkd->bqd", grad_scores, key) * scale,
            "grad_key": torch.einsum("bqk,bqd->bkd", grad_scores, query) * scale,
            "grad_value": torch.einsum("bqk,bqe->bke", probs, grad_out)}


def test_another_right_block_backward_passes(reference):
    assert_passes(judge(E, "q2_block_backward", _block_backward_einsum))


def test_block_backward_mistakes_not_listed(reference):
    right = reference["block_backward"]

    # dV as dO^T P: the right numbers, axes the wrong way round
    def swapped(*args):
        probs = torch.exp(args[6] * args[0] @ args[1].transpose(-1, -2) - args[5][..., None])
        return {**right(*args), "grad_value": args[3].transpose(-1, -2) @ probs}

    result = judge(E, "q2_block_backward", swapped)
    assert result.points == 2
    assert_named(result, "'grad_value'", "shape")

    # a softmax over the block AND no subtracted term: two listed mistakes at once
    def both(query, key, value, grad_out, out, lse, scale):
        probs = torch.softmax(scale * query @ key.transpose(-1, -2), dim=-1)
        grad_scores = probs * (grad_out @ value.transpose(-1, -2))
        return {"grad_query": scale * grad_scores @ key,
                "grad_key": scale * grad_scores.transpose(-1, -2) @ query,
                "grad_value": probs.transpose(-1, -2) @ grad_out}

    result = judge(E, "q2_block_backward", both)
    assert result.points == 0
    assert_named(result, "'grad_value'", "a softmax over this block's keys alone")

    # one over the square root of d used instead of the given scale
    def fixed_scale(query, key, value, grad_out, out, lse, scale):
        return right(query, key, value, grad_out, out, lse, 1 / math.sqrt(query.shape[-1]))

    result = judge(E, "q2_block_backward", fixed_scale)
    assert result.points == 0 and "scale 0.7" in result.message, result.message


# --------------------------------------------------------------------------- question 3
def _count_closed_form(n, block_size):
    """Right, in closed form: full blocks, then the last one."""
    full = n // block_size
    computed = block_size * sum(n - t * block_size for t in range(full))
    rest = n - full * block_size
    computed += rest * rest
    return {"computed": computed, "masked": computed - n * (n + 1) // 2}


def test_closed_form_count_passes(reference):
    assert_passes(judge(E, "q3_scores_computed", _count_closed_form))


def test_count_mistakes_not_listed(reference):
    # tiles of queries AND keys, the diagonal tiles and those below: the same scores
    # (a key block's rows from its first key on are the query tiles at or below it)
    def query_tiles(n, b):
        tiles = range(0, n, b)
        computed = sum(min(b, n - i) * min(b, n - j) for i in tiles for j in tiles if j <= i)
        return {"computed": computed, "masked": computed - n * (n + 1) // 2}

    assert_passes(judge(E, "q3_scores_computed", query_tiles))
    # one row too few per block
    result = judge(E, "q3_scores_computed", lambda n, b: {
        "computed": sum(min(b, n - s) * (n - s - 1) for s in range(0, n, b)),
        "masked": reference["causal_scores_computed"](n, b)["masked"]})
    assert result.points == 1
    assert_named(result, "'computed'", "too small")


# --------------------------------------------------------------------------- question 4
def test_prediction_not_among_the_choices(reference):
    result = judge(E, "q4_predict_memory",
                   lambda: {"explicit": "4x", "blockwise": "about 2x", "fused": "about 2x"})
    assert_named(result, "'4x' is not one of the choices", "'about 4x'")


def test_every_part_of_a_prediction_is_judged_on_its_own(reference):
    result = judge(E, "q4_predict_memory",
                   lambda: {"explicit": "about 2x", "blockwise": "about 4x",
                            "fused": "about 2x"})
    assert result.points == 1
    assert_named(result, "an N by N matrix grows fourfold",
                 "never holds more than one block")


# --------------------------------------------------------------------------- question 5
def _window_errors_with(mask, reference_kwargs=None, denominator="exact", as_list=False):
    def window_errors(query, key, value, windows):
        n = query.shape[-2]
        exact = F.scaled_dot_product_attention(query, key, value,
                                               **(reference_kwargs or {"is_causal": True}))
        errors = []
        for w in windows:
            approx = F.scaled_dot_product_attention(query, key, value, attn_mask=mask(n, w))
            norm = exact.norm() if denominator == "exact" else 1.0
            errors.append(float((approx - exact).norm() / norm))
        below = [w for w, e in zip(windows, errors, strict=True) if e < 0.1]
        return {"errors": errors if as_list else torch.tensor(errors),
                "smallest": min(below) if below else 0}

    return window_errors


def _triu_window(n, w):
    """One key too many, built another way: tril, then triu(-w) keeps j >= i - w."""
    return torch.ones(n, n, dtype=torch.bool).tril().triu(-w)


def _right_window(n, w):
    return torch.ones(n, n, dtype=torch.bool).tril().triu(1 - w)


def test_window_experiment_right_in_float32_passes(reference):
    def float32(query, key, value, windows):
        answer = reference["window_errors"](query.float(), key.float(), value.float(), windows)
        return {"errors": answer["errors"].double(), "smallest": answer["smallest"]}

    assert_passes(judge(E, "q5_window_errors", float32))
    assert_passes(judge(E, "q5_window_errors", _window_errors_with(_right_window)))


def test_window_mistakes_not_listed(reference):
    # the one-key-too-many window reached another way is still named
    result = judge(E, "q5_window_errors", _window_errors_with(_triu_window))
    assert_named(result, "one key too many")
    # the errors as a Python list
    result = judge(E, "q5_window_errors",
                   _window_errors_with(_right_window, as_list=True))
    assert result.points == 1
    assert_named(result, "'errors'", "expected a tensor")
    # no mask at all: every window gives the non-causal answer, and the reference is causal
    result = judge(E, "q5_window_errors",
                   _window_errors_with(lambda n, w: None))
    assert result.points == 0
    assert_named(result, "'errors'")


def test_the_explanation_of_question_5_holds_on_the_checks_cases():
    """What the solution's explanation says of the check's cases (fixed inputs, so a test,
    not a reading): every error falls as the window grows, to 0 for the whole row; in the
    visible cases the local head's is the smaller at every window, and a window short of
    its row gets below 0.1; with no locality only the whole row does."""
    spec = EXERCISE.question("q5_window_errors")
    cases = spec.cases()  # local, no locality, local (held back), no locality (held back)
    errors = {}
    for index, case in enumerate(cases):
        *inputs, windows = case.args
        answer = spec.reference(*inputs, windows)
        errors[index] = dict(zip(windows, answer["errors"].tolist(), strict=True))
        values = list(errors[index].values())
        assert all(a > b for a, b in zip(values[:-1], values[1:], strict=True))
        assert values[-1] < 1e-12
        if index % 2 == 1:
            assert answer["smallest"] == windows[-1], (index, values)
    assert 0 < spec.reference(*cases[0].args)["smallest"] < cases[0].args[-1][-1]
    # the two visible cases: at every window shorter than both rows, the local head's
    # error is the smaller
    shared = set(errors[0]) & set(errors[1]) - {max(errors[0]), max(errors[1])}
    assert shared and all(errors[0][w] < errors[1][w] for w in shared), errors


# --------------------------------------------------------------------------- question 6
def test_debug_question_other_fixes(reference):
    broken = reference["blockwise_attention"]

    def rewritten(query, key, value, block_size):
        return F.scaled_dot_product_attention(query, key, value)

    assert_passes(judge(E, "q6_fix_blockwise", rewritten))

    def detached(query, key, value, block_size):
        return broken(query, key, value, block_size).detach()

    assert_named(judge(E, "q6_fix_blockwise", detached), "gradients")

    def ceil_loop(query, key, value, block_size):
        """Right: the blocks counted with a ceiling."""
        scale = 1 / math.sqrt(query.shape[-1])
        m = torch.full(query.shape[:-1], MINUS_INF, dtype=query.dtype)
        s = torch.zeros(query.shape[:-1], dtype=query.dtype)
        a = torch.zeros(*query.shape[:-1], value.shape[-1], dtype=query.dtype)
        for block in range(math.ceil(key.shape[-2] / block_size)):
            keys = slice(block * block_size, (block + 1) * block_size)
            scores = scale * query @ key[..., keys, :].transpose(-1, -2)
            new = torch.maximum(m, scores.amax(-1))
            p = torch.exp(scores - new[..., None])
            s = torch.exp(m - new) * s + p.sum(-1)
            a = torch.exp(m - new)[..., None] * a + p @ value[..., keys, :]
            m = new
        return a / s[..., None]

    assert_passes(judge(E, "q6_fix_blockwise", ceil_loop))


@pytest.mark.parametrize(("old", "new", "words"), [
    # one bug fixed, the other not
    ("rescale * row_sum + probs.sum(dim=-1)  # rescaled", "row_sum + probs.sum(dim=-1)  # rescaled",
     ["running sum is still not rescaled"]),
    ("range(0, n_keys, block_size):  # every key",
     "range(0, n_keys // block_size * block_size, block_size):  # every",
     ["the last, shorter block"]),
    # a loop one block too long: an empty block of scores has no maximum
    ("range(0, n_keys, block_size):  # every key",
     "range(0, n_keys + block_size, block_size):  # every", ["raised"]),
])
def test_one_line_edits_of_the_debugged_code_are_named(old, new, words):
    namespace = run_cells(replace_in_solution(E, (old, new)), "edited solution")
    (result,) = run_checks(E, "q6_fix_blockwise", namespace=namespace)
    assert_named(result, *words)


# --------------------------------------------------------------------------- found by a
# tester acting as a student: written here as a learner would, each must be named
def _merge_absolute(a, b):
    """The exponentials of the maxima themselves: a log-sum-exp without its maximum."""
    f_a, f_b = torch.exp(a["row_max"]), torch.exp(b["row_max"])
    return {"row_max": torch.maximum(a["row_max"], b["row_max"]),
            "row_sum": f_a * a["row_sum"] + f_b * b["row_sum"],
            "acc": f_a[:, None] * a["acc"] + f_b[:, None] * b["acc"]}


def _backward(weights="lse", weighted_delta=True):
    def block_backward(query, key, value, grad_out, out, lse, scale):
        products = query @ key.transpose(-1, -2)
        probs = (torch.exp(scale * (products - lse[..., None])) if weights == "lse_scaled"
                 else torch.exp(scale * products - lse[..., None]))
        grad_probs = grad_out @ value.transpose(-1, -2)
        delta = (grad_out * out).sum(dim=-1, keepdim=True)
        grad_scores = (probs * (grad_probs - delta) if weighted_delta
                       else probs * grad_probs - delta)
        return {"grad_query": scale * grad_scores @ key,
                "grad_key": scale * grad_scores.transpose(-1, -2) @ query,
                "grad_value": probs.transpose(-1, -2) @ grad_out}

    return block_backward


def _count_full_blocks_only(n, b):
    computed = sum(b * (n - start) for start in range(0, n // b * b, b))
    return {"computed": computed, "masked": computed - n * (n + 1) // 2}


def _count_masked_as_skipped(n, b):
    computed = sum(min(b, n - start) * (n - start) for start in range(0, n, b))
    return {"computed": computed, "masked": n * n - computed}


def _windows(error="relative", inverted=False, position=False):
    def window_errors(query, key, value, windows):
        n = query.shape[-2]
        exact = F.scaled_dot_product_attention(query, key, value, is_causal=True)
        i, j = torch.arange(n)[:, None], torch.arange(n)[None, :]
        errors = []
        for w in windows:
            allowed = (j <= i) & (j > i - w)
            approx = F.scaled_dot_product_attention(
                query, key, value, attn_mask=~allowed if inverted else allowed)
            diff = approx - exact
            if error == "rows":
                errors.append((diff.norm(dim=-1) / exact.norm(dim=-1)).mean())
            elif error == "mse":
                errors.append((diff**2).mean())
            else:
                relative = diff.norm() / exact.norm()
                errors.append(relative**2 if error == "squared" else relative)
        errors = torch.stack(errors)
        below = [k for k, e in enumerate(errors.tolist()) if e < 0.1]
        smallest = (below[0] if position else windows[below[0]]) if below else 0
        return {"errors": errors, "smallest": smallest}

    return window_errors


TESTER_MISTAKES = [
    ("q1_merge_states", _merge_absolute, 1, "exponential of its own maximum alone"),
    ("q2_block_backward", _backward(weighted_delta=False), 1, "outside the product"),
    ("q2_block_backward", _backward(weights="lse_scaled"), 0, "log-sum-exp by the scale too"),
    ("q3_scores_computed", _count_full_blocks_only, 0, "left out the last, shorter block"),
    ("q3_scores_computed", _count_masked_as_skipped, 2, "scores skipped, never computed"),
    ("q5_window_errors", _windows(error="squared"), 0, "the square of the relative error"),
    ("q5_window_errors", _windows(error="rows"), 0, "averaged the relative errors of the rows"),
    ("q5_window_errors", _windows(error="mse"), 0, "mean of the squared differences"),
    ("q5_window_errors", _windows(inverted=True), 0, "the wrong way round"),
    ("q5_window_errors", _windows(position=True), 2, "not the window itself"),
]


@pytest.mark.parametrize(("question_id", "answer", "points", "words"), TESTER_MISTAKES,
                         ids=[f"{q}-{i}" for i, (q, *_) in enumerate(TESTER_MISTAKES)])
def test_mistakes_written_as_a_learner_would_are_named(reference, question_id, answer,
                                                       points, words):
    result = judge(E, question_id, answer)
    assert result.points == points, result.message
    assert_named(result, words)


def test_more_right_answers_pass(reference):
    def merge_row_by_row(a, b):
        """Right, one row at a time with Python numbers."""
        rows = {"row_max": [], "row_sum": [], "acc": []}
        for r in range(a["row_max"].shape[0]):
            m = max(float(a["row_max"][r]), float(b["row_max"][r]))
            f = [0.0 if m == MINUS_INF else math.exp(float(s["row_max"][r]) - m)
                 for s in (a, b)]
            rows["row_max"].append(torch.tensor(m, dtype=torch.float64))
            rows["row_sum"].append(f[0] * a["row_sum"][r] + f[1] * b["row_sum"][r])
            rows["acc"].append(f[0] * a["acc"][r] + f[1] * b["acc"][r])
        return {k: torch.stack(v) for k, v in rows.items()}

    assert_passes(judge(E, "q1_merge_states", merge_row_by_row))
    assert_passes(judge(E, "q5_window_errors", _windows()))

    def each_block_its_own_maximum(query, key, value, block_size):
        """Right: every block measured from its own maximum, the running state moved to
        it (the factor may exceed 1, the result is the same)."""
        scale = 1 / math.sqrt(query.shape[-1])
        m = torch.full(query.shape[:-1], MINUS_INF, dtype=query.dtype)
        s = torch.zeros(query.shape[:-1], dtype=query.dtype)
        a = torch.zeros(*query.shape[:-1], value.shape[-1], dtype=query.dtype)
        for start in range(0, key.shape[-2], block_size):
            keys = slice(start, start + block_size)
            scores = scale * query @ key[..., keys, :].transpose(-1, -2)
            new = scores.amax(-1)
            p = torch.exp(scores - new[..., None])
            factor = torch.exp(m - new)
            s, a, m = factor * s + p.sum(-1), factor[..., None] * a + p @ value[..., keys, :], new
        return a / s[..., None]

    assert_passes(judge(E, "q6_fix_blockwise", each_block_its_own_maximum))


# --------------------------------------------------------------------------- the grader
MISTAKES_IN_EVERY_QUESTION = [
    # q1: only the first state rescaled
    ('        factor = torch.exp(state["row_max"] - safe_max)',
     '        factor = (torch.exp(state["row_max"] - safe_max) if state is state_a\n'
     '                  else torch.ones_like(safe_max))'),
    # q2: D from the block's own weights
    ("    delta = (grad_out * out).sum(dim=-1, keepdim=True)",
     "    delta = (probs * (grad_out @ value.transpose(-1, -2))).sum(dim=-1, keepdim=True)"),
    # q3: every row computes every block
    ("        rows = n - start  # queries", "        rows = n  # queries"),
    # q4: the blockwise path thought quadratic
    choice("blockwise", "about 2x", "about 4x"),
    # q5: compared with non-causal attention
    ("    exact = F.scaled_dot_product_attention(query, key, value, is_causal=True)",
     "    exact = F.scaled_dot_product_attention(query, key, value)"),
    # q6: the sum not rescaled
    ("        row_sum = rescale * row_sum + probs.sum(dim=-1)",
     "        row_sum = row_sum + probs.sum(dim=-1)"),
]


GRADED = {  # question: (points left, words of the message)
    "q1_merge_states": (1, "only the first state is brought to the new maximum"),
    "q2_block_backward": (1, "computed D from this block's weights alone"),
    "q3_scores_computed": (0, "the rows above it are skipped"),
    "q4_predict_memory": (2, "never holds more than one block"),
    "q5_window_errors": (0, "also sees the later keys"),
    "q6_fix_blockwise": (0, "running sum is still not rescaled"),
}


def test_the_grader_names_a_mistake_in_every_question(tmp_path):
    record = graded_record(E, tmp_path, replace_in_solution(E, *MISTAKES_IN_EVERY_QUESTION))
    assert_each_question(record, GRADED)
    assert (record.score, record.max_score) == (4, 18)
