"""Exercise 5 (multi-head attention): the typical mistakes, applied to the reference
solution, each lose points with a message that names them.

The mistakes listed in the spec are tested first, then mistakes the spec does not list
(their feedback must still say something a learner can act on), then the questions that
build on each other, the held-back cases, and the real grader on a whole notebook.
"""

from __future__ import annotations

import contextlib
import io
import math

import pytest
import torch
from grading_helpers import (
    graded_record,
    learner_starter,
    notebook_cells,
    replace_in_solution,
    solution_path,
)
from torch import nn

from attention_course.grading import get_exercise, run_checks
from attention_course.grading.exercises import ex05_multihead_attention as spec

EX = "05_multihead_attention"
SOLUTION = solution_path(EX)


def _run(cells: list[str]) -> dict:
    """Execute notebook cells in one fresh namespace (their output is swallowed)."""
    namespace: dict = {"__name__": "__main__"}
    with contextlib.redirect_stdout(io.StringIO()):
        for source in cells:
            exec(compile(source, str(SOLUTION), "exec"), namespace)
    return namespace


@pytest.fixture(scope="module")
def solution() -> dict:
    return _run(notebook_cells(SOLUTION))


def _judge(namespace: dict, question_id: str, answer=None):
    question = get_exercise(EX).question(question_id)
    if answer is not None:
        namespace = {**namespace, question.symbol: answer}
    with contextlib.redirect_stdout(io.StringIO()):
        (result,) = run_checks(EX, question.id, namespace=namespace)
    return result


def _assert_named(result, *phrases: str) -> None:
    assert result.points < result.max_points, result.message
    for phrase in phrases:
        assert phrase in result.message, (phrase, result.message)
    assert "def " not in result.hint and "torch." not in result.hint


# --------------------------------------------------------------------------- question 1, 2
def _split_view(x, h):
    batch, n, dim = x.shape
    return x.view(batch, h, n, dim // h)


def _split_interleaved(x, h):
    batch, n, dim = x.shape
    return x.view(batch, n, dim // h, h).permute(0, 3, 1, 2)


def _split_not_moved(x, h):
    batch, n, dim = x.shape
    return x.view(batch, n, h, dim // h)


def _split_swapped_sizes(x, h):
    batch, n, dim = x.shape
    return x.view(batch, n, dim // h, h).transpose(1, 2)


def _merge_view(x):
    batch, h, n, d = x.shape
    return x.reshape(batch, n, h * d)


@pytest.mark.parametrize(("answer", "phrases"), [
    (_split_view, ["tokens and features are mixed up"]),
    (_split_interleaved, ["every h-th feature"]),
    (_split_not_moved, ["left the head axis behind the token axis"]),
    (_split_swapped_sizes, ["d_k heads of num_heads features"]),
    (lambda x, h: _split_not_moved(x, h).transpose(2, 3), ["swapped the last two axes"]),
    (lambda x, h: x.transpose(1, 2).reshape(x.shape[0], h, x.shape[1], x.shape[2] // h),
     ["swapped the token and feature axes before cutting"]),
])
def test_split_mistakes_are_named(solution, answer, phrases):
    _assert_named(_judge(solution, "q1_split_heads", answer), *phrases)


@pytest.mark.parametrize(("answer", "phrases"), [
    (_merge_view, ["features of different tokens are mixed"]),
    (lambda x: x.permute(0, 2, 3, 1).reshape(x.shape[0], x.shape[2], -1),
     ["alternate between the heads"]),
    (lambda x: x.sum(dim=1), ["added the heads up"]),
    (lambda x: x.mean(dim=1), ["averaged the heads"]),
])
def test_merge_mistakes_are_named(solution, answer, phrases):
    _assert_named(_judge(solution, "q2_merge_heads", answer), *phrases)


def test_other_ways_to_split_and_merge_pass(solution):
    assert _judge(solution, "q1_split_heads",
                  lambda x, h: torch.stack(x.chunk(h, dim=-1), dim=1)).passed
    assert _judge(solution, "q2_merge_heads", lambda x: torch.cat(x.unbind(1), dim=-1)).passed


def test_unlisted_reorderings_are_explained(solution):
    """Heads in reverse order, or a merge that swaps the last two axes: not in the spec,
    but the feedback says the numbers are right and their places are not."""
    flipped = _judge(solution, "q1_split_heads",
                     lambda x, h: solution["split_heads"](x, h).flip(1))
    _assert_named(flipped, "exactly the right numbers, but in the wrong places")
    wrong_axes = _judge(solution, "q2_merge_heads",
                        lambda x: x.transpose(2, 3).reshape(x.shape[0], x.shape[2], -1))
    _assert_named(wrong_axes, "exactly the right numbers, but in the wrong places")


# --------------------------------------------------------------------------- question 3
class _Base(nn.Module):
    def __init__(self, embed_dim, num_heads):
        super().__init__()
        self.num_heads = num_heads
        self.q_proj = nn.Linear(embed_dim, embed_dim)
        self.k_proj = nn.Linear(embed_dim, embed_dim)
        self.v_proj = nn.Linear(embed_dim, embed_dim)
        self.out_proj = nn.Linear(embed_dim, embed_dim)

    def heads(self, query, key, value):
        return tuple(spec._split(t, self.num_heads) for t in
                     (self.q_proj(query), self.k_proj(key), self.v_proj(value)))

    def attend(self, query, key, value, attn_mask=None, *, scale=None, fill=None,
               softmax_dim=-1, project=True):
        q, k, v = self.heads(query, key, value)
        scores = q @ k.transpose(-2, -1) / (scale or math.sqrt(q.shape[-1]))
        if attn_mask is not None:
            scores = fill(scores, attn_mask) if fill else scores.masked_fill(
                ~attn_mask, float("-inf"))
        weights = scores.softmax(dim=softmax_dim)
        heads = spec._merge(weights @ v)
        return (self.out_proj(heads) if project else heads), weights


def _module(forward):
    return type("MultiHeadAttention", (_Base,), {"forward": forward})


LISTED_MHA = [
    ("scores divided by sqrt(embed_dim)",
     lambda self, q, k, v, attn_mask=None: self.attend(
         q, k, v, attn_mask, scale=math.sqrt(self.q_proj.in_features)),
     ["square root of embed_dim"]),
    ("mask inverted",
     lambda self, q, k, v, attn_mask=None: self.attend(
         q, k, v, attn_mask, fill=lambda s, m: s.masked_fill(m, float("-inf"))),
     ["blocks exactly the positions the mask allows", "True where attention is allowed"]),
    ("masked scores set to zero",
     lambda self, q, k, v, attn_mask=None: self.attend(
         q, k, v, attn_mask, fill=lambda s, m: s.masked_fill(~m, 0.0)),
     ["a score of 0 still counts in the softmax"]),
    ("softmax over the queries",
     lambda self, q, k, v, attn_mask=None: self.attend(q, k, v, attn_mask, softmax_dim=-2),
     ["sum to 1 over the queries"]),
    ("no output projection",
     lambda self, q, k, v, attn_mask=None: self.attend(q, k, v, attn_mask, project=False),
     ["without the output projection"]),
    ("weights averaged over the heads",
     lambda self, q, k, v, attn_mask=None: (
         self.attend(q, k, v, attn_mask)[0], self.attend(q, k, v, attn_mask)[1].mean(dim=1)),
     ["averaged over the heads"]),
    ("keys and values from the query",
     lambda self, q, k, v, attn_mask=None: self.attend(q, q, q, None),
     ["computed from the query"]),
    ("mask ignored",
     lambda self, q, k, v, attn_mask=None: self.attend(q, k, v, None),
     ["the attention mask is not applied"]),
    ("residual connection added",
     lambda self, q, k, v, attn_mask=None: (
         q + self.attend(q, k, v, attn_mask)[0], self.attend(q, k, v, attn_mask)[1]),
     ["residual connection belongs to the Transformer layer"]),
]


@pytest.mark.parametrize(("forward", "phrases"), [(f, p) for _, f, p in LISTED_MHA],
                         ids=[name for name, _, _ in LISTED_MHA])
def test_multihead_mistakes_are_named(solution, forward, phrases):
    result = _judge(solution, "q3_multihead", _module(forward))
    _assert_named(result, *phrases)
    assert "division by zero" not in result.message


UNLISTED_MHA = [
    ("scores divided by sqrt(num_heads)",
     lambda self, q, k, v, attn_mask=None: self.attend(
         q, k, v, attn_mask, scale=math.sqrt(self.num_heads)),
     ["scores 1.41 times the right ones", "the scale is wrong"]),
    ("mask inverted with -1e9 (no NaN)",
     lambda self, q, k, v, attn_mask=None: self.attend(
         q, k, v, attn_mask, fill=lambda s, m: torch.where(m, torch.tensor(-1e9), s)),
     ["the mask is used the wrong way round"]),
    ("boolean mask added to the scores",
     lambda self, q, k, v, attn_mask=None: self.attend(
         q, k, v, attn_mask, fill=lambda s, m: s + m.float()),
     ["masked keys still get some weight"]),
    ("softmax over the heads",
     lambda self, q, k, v, attn_mask=None: self.attend(q, k, v, attn_mask, softmax_dim=1),
     ["does not sum to 1"]),
    ("values projected from the key",
     lambda self, q, k, v, attn_mask=None: self.attend(q, k, k, attn_mask),
     ["its gradient with respect to the key argument is wrong"]),
    ("output bias dropped",
     lambda self, q, k, v, attn_mask=None: (
         self.attend(q, k, v, attn_mask)[0] - self.out_proj.bias,
         self.attend(q, k, v, attn_mask)[1]),
     ["attention weights are right but the output is not"]),
    ("output detached",
     lambda self, q, k, v, attn_mask=None: (
         self.attend(q, k, v, attn_mask)[0].detach(), self.attend(q, k, v, attn_mask)[1]),
     ["does not carry gradients"]),
    ("output rebuilt from Python numbers",
     lambda self, q, k, v, attn_mask=None: (
         torch.tensor(self.attend(q, k, v, attn_mask)[0].tolist()),
         self.attend(q, k, v, attn_mask)[1]),
     ["does not carry gradients"]),
    ("output and weights swapped",
     lambda self, q, k, v, attn_mask=None: self.attend(q, k, v, attn_mask)[::-1],
     ["expected shape (2, 5, 8)"]),
    ("a dropout on the weights, active in training mode",
     lambda self, q, k, v, attn_mask=None: _with_dropout(self, q, k, v, attn_mask),
     ["is a dropout active?"]),
    ("the mask applied after the softmax",
     lambda self, q, k, v, attn_mask=None: self.attend(q, k, v, None) if attn_mask is None
     else _masked_after(self, q, k, v, attn_mask), ["does not sum to 1"]),
    ("values not projected",
     lambda self, q, k, v, attn_mask=None: _values_unprojected(self, q, k, v, attn_mask),
     ["attention weights are right but the output is not"]),
]


def _with_dropout(self, q, k, v, attn_mask):
    _, weights = self.attend(q, k, v, attn_mask)
    weights = nn.functional.dropout(weights, 0.2, training=True)
    return self.out_proj(spec._merge(weights @ self.heads(q, k, v)[2])), weights


def _masked_after(self, q, k, v, attn_mask):
    _, weights = self.attend(q, k, v, None)
    weights = weights * attn_mask
    return self.out_proj(spec._merge(weights @ self.heads(q, k, v)[2])), weights


def _values_unprojected(self, q, k, v, attn_mask):
    _, weights = self.attend(q, k, v, attn_mask)
    return self.out_proj(spec._merge(weights @ spec._split(v, self.num_heads))), weights


@pytest.mark.parametrize(("forward", "phrases"), [(f, p) for _, f, p in UNLISTED_MHA],
                         ids=[name for name, _, _ in UNLISTED_MHA])
def test_unlisted_multihead_mistakes_get_useful_feedback(solution, forward, phrases):
    result = _judge(solution, "q3_multihead", _module(forward))
    _assert_named(result, *phrases)


def test_a_module_without_biases_is_told_the_parameter_is_missing(solution):
    class NoBias(_Base):
        def __init__(self, embed_dim, num_heads):
            super().__init__(embed_dim, num_heads)
            self.q_proj = nn.Linear(embed_dim, embed_dim, bias=False)

        def forward(self, q, k, v, attn_mask=None):
            return self.attend(q, k, v, attn_mask)

    result = _judge(solution, "q3_multihead", NoBias)
    _assert_named(result, "no parameter or buffer named 'q_proj.bias'")


def test_a_broken_split_is_named_in_the_module_question_too():
    """The solution notebook with question 1's classic mistake: question 3 says that the
    split is what fails (both the builds_on note and the recognised module), and the
    questions that do not use the split keep their points."""
    cells = replace_in_solution(
        EX, ("return x.view(batch, length, num_heads, dim // num_heads).transpose(1, 2)",
             "return x.view(batch, num_heads, length, dim // num_heads)"))
    namespace = _run(cells)
    with contextlib.redirect_stdout(io.StringIO()):
        results = {r.id: r for r in run_checks(EX, namespace=namespace)}
    _assert_named(results["q1_split_heads"], "tokens and features are mixed up")
    _assert_named(results["q3_multihead"], "calls your answer to q1_split_heads",
                  "without the transpose", "the rest of your module looks right")
    lost = {qid for qid, r in results.items() if not r.passed}
    assert lost == {"q1_split_heads", "q3_multihead"}
    assert sum(r.points for r in results.values()) == 16 - 5


def test_a_broken_merge_is_named_in_the_module_question_too():
    cells = replace_in_solution(
        EX, ("return x.transpose(1, 2).reshape(batch, length, heads * head_dim)",
             "return x.reshape(batch, length, heads * head_dim)"))
    with contextlib.redirect_stdout(io.StringIO()):
        results = {r.id: r for r in run_checks(EX, namespace=_run(cells))}
    _assert_named(results["q2_merge_heads"], "features of different tokens are mixed")
    _assert_named(results["q3_multihead"], "calls your answer to q2_merge_heads",
                  "see question 2")


# --------------------------------------------------------------------------- question 4
def _masks(padding_meaning="ours", padding_axis="keys", combine="and", attn="ours"):
    def convert(key_padding_mask, attn_mask):
        kpm = ~key_padding_mask if padding_meaning == "ours" else key_padding_mask
        am = ~attn_mask if attn == "ours" else attn_mask
        pad = kpm[:, None, None, :] if padding_axis == "keys" else kpm[:, None, :, None]
        return pad & am if combine == "and" else pad | am
    return convert


@pytest.mark.parametrize(("answer", "phrases"), [
    (_masks(padding_meaning="torch", padding_axis="queries"),
     ["exactly what the broken function gives"]),
    (_masks(padding_meaning="torch"), ["still has PyTorch's meaning", "only the padded keys"]),
    (_masks(padding_axis="queries"), ["masks queries (rows) instead of keys (columns)"]),
    (_masks(combine="or"), ["real AND allowed"]),
    (_masks(attn="torch"), ["see only the future"]),
    (lambda kpm, am: (~kpm)[:, None, :] & ~am, ["no head axis"]),
    (lambda kpm, am: (~kpm)[:, None, None, :], ["holds only the padding"]),
])
def test_mask_conversion_mistakes_are_named(solution, answer, phrases):
    _assert_named(_judge(solution, "q4_torch_masks", answer), *phrases)


@pytest.mark.parametrize(("answer", "phrases"), [
    (lambda kpm, am: (~kpm)[:, None, None, :] & ~am.T,
     ["which PyTorch's attention mask forbids"]),
    (lambda kpm, am: (~kpm)[:, None, None, :] ^ am, ["which is padding"]),
    (lambda kpm, am: ((~kpm)[:, None, None, :] & ~am).float(),
     ["expected a boolean tensor"]),
    (lambda kpm, am: (~kpm)[:, None, None, :] & ~am & (torch.rand(am.shape) > 0.1),
     ["forbids query"]),
])
def test_unlisted_mask_mistakes_get_useful_feedback(solution, answer, phrases):
    _assert_named(_judge(solution, "q4_torch_masks", answer), *phrases)


def test_the_starter_with_its_raise_line_deleted_is_recognised():
    """What a learner runs first: the learner's version of question 4, raise line deleted."""
    starter = learner_starter(EX, "def torch_masks_to_ours")
    namespace = _run(notebook_cells(SOLUTION)[:1] + [starter])
    _assert_named(_judge(namespace, "q4_torch_masks"), "exactly what the broken function gives")


def test_other_correct_mask_conversions_pass(solution):
    assert _judge(solution, "q4_torch_masks",
                  lambda kpm, am: ~(kpm[:, None, None, :] | am)).passed


# --------------------------------------------------------------------------- question 5
RIGHT = {"score_flops": "same", "weight_entries": "more", "output": "different"}


@pytest.mark.parametrize(("change", "phrase"), [
    ({"score_flops": "more"}, "the multiply-adds do not grow"),
    ({"score_flops": "fewer"}, "the savings and the extra heads cancel"),
    ({"weight_entries": "same"}, "its own Nq by Nk map"),
    ({"weight_entries": "fewer"}, "not smaller maps"),
    ({"output": "same"}, "not mere bookkeeping"),
    ({"output": "more"}, "answer same or different"),
])
def test_wrong_predictions_get_their_misconception_explained(solution, change, phrase):
    result = _judge(solution, "q5_predict_heads", lambda: {**RIGHT, **change})
    _assert_named(result, phrase)
    assert result.points == 2  # the other two parts still count


def test_predictions_outside_the_choices_are_refused(solution):
    result = _judge(solution, "q5_predict_heads", lambda: {**RIGHT, "output": "Different"})
    _assert_named(result, "not one of the choices")
    result = _judge(solution, "q5_predict_heads", lambda: ["same", "more", "different"])
    _assert_named(result, "return a dict with the keys")


# --------------------------------------------------------------------------- question 6
def _gqa(**change):
    def answer(embed_dim, num_heads, num_kv_heads):
        out = spec.gqa_numbers(embed_dim, num_heads, num_kv_heads)
        head_dim = embed_dim // num_heads
        for key, fn in change.items():
            out[key] = fn(embed_dim, num_heads, num_kv_heads, head_dim)
        return out
    return answer


@pytest.mark.parametrize(("answer", "phrases", "points"), [
    (_gqa(parameters=lambda d, h, g, k: 4 * d * d + 4 * d), ["full-width key and value"], 2),
    (_gqa(parameters=lambda d, h, g, k: 2 * d * d + 2 * d * g * k), ["not the biases"], 2),
    (_gqa(parameters=lambda d, h, g, k: 2 * d * d + 2 * d + 2 * d * g * k),
     ["not those of the key and value projections"], 2),
    (_gqa(cache_per_token=lambda d, h, g, k: g * k), ["both the keys and the values"], 2),
    (_gqa(cache_per_token=lambda d, h, g, k: 2 * d), ["cache of ordinary multi-head"], 2),
    (_gqa(cache_per_token=lambda d, h, g, k: 8 * g * k), ["counted bytes of float32"], 2),
    (_gqa(kv_head=lambda d, h, g, k: torch.arange(h) % g), ["hand the query heads out in turn"],
     2),
    (_gqa(kv_head=lambda d, h, g, k: torch.arange(h) // g), ["divide it by the size of a group"],
     2),
    (_gqa(parameters=lambda d, h, g, k: 2 * (d * d + d) + 2 * (d * d // g + d // g),
          cache_per_token=lambda d, h, g, k: 2 * d // g),
     ["your key and value heads are embed_dim / num_kv_heads wide"], 1),
    (_gqa(cache_per_token=lambda d, h, g, k: 2 * g * k + d), ["also cached the query"], 2),
    (_gqa(parameters=lambda d, h, g, k: 4 * d * d + 4 * d,
          kv_head=lambda d, h, g, k: torch.arange(h) % g),
     ["full-width key and value", "hand the query heads out in turn"], 1),
])
def test_gqa_mistakes_are_named_and_other_parts_keep_their_points(solution, answer, phrases,
                                                                  points):
    result = _judge(solution, "q6_gqa", answer)
    _assert_named(result, *phrases)
    assert result.points == points


@pytest.mark.parametrize(("answer", "phrases"), [
    (_gqa(kv_head=lambda d, h, g, k: (torch.arange(h) // (h // g)).float()),
     ["expected an integer tensor"]),
    (_gqa(kv_head=lambda d, h, g, k: (torch.arange(h) // (h // g)).tolist()),
     ["expected a tensor of shape"]),
    (_gqa(cache_per_token=lambda d, h, g, k: 2 * g * k + 2 * g), ["'cache_per_token'"]),
])
def test_unlisted_gqa_mistakes_get_useful_feedback(solution, answer, phrases):
    _assert_named(_judge(solution, "q6_gqa", answer), *phrases)


def test_gqa_other_correct_forms_pass(solution):
    assert _judge(solution, "q6_gqa", _gqa(
        kv_head=lambda d, h, g, k: torch.arange(h) * g // h,
        parameters=lambda d, h, g, k: float(2 * (d + 1) * (d + g * k))),
    ).passed


def test_gqa_numbers_copied_from_the_visible_cases_fail_a_held_back_case(solution):
    seen = {(c.args): spec.gqa_numbers(*c.args) for c in spec.gqa_cases() if not c.hidden}

    def fitted(embed_dim, num_heads, num_kv_heads):
        return seen.get((embed_dim, num_heads, num_kv_heads), seen[(768, 12, 2)])

    result = _judge(solution, "q6_gqa", fitted)
    _assert_named(result, "held-back case")
    assert result.points == 0


# --------------------------------------------------------------------------- question 7
@pytest.mark.parametrize(("n", "heads"), [(6, 3), (4, 2), (8, 4), (7, 2), (5, 1), (9, 3)])
def test_the_worked_out_dependency_map_is_what_a_measurement_gives(n, heads):
    measured = spec.measure_dependencies(n, heads, spec._split_without_transpose)
    assert torch.equal(measured, spec.dependency_map(n, heads))
    correct = spec.measure_dependencies(n, heads, lambda x, h: spec._split(x, h))
    assert torch.equal(correct, torch.ones(n, n, dtype=torch.bool).tril())


def test_the_broken_split_leaks_the_future():
    """The point of question 7: with 6 tokens and 3 heads, output 0 reads tokens 2 and 4."""
    first_row = spec.dependency_map(6, 3)[0]
    assert first_row.tolist() == [True, False, True, False, True, False]


@pytest.mark.parametrize(("answer", "phrases"), [
    (lambda n, h: torch.ones(n, n, dtype=torch.bool).tril(), ["map of a correct split"]),
    (lambda n, h: spec.dependency_map(n, h).T, ["rows and columns are swapped"]),
    (lambda n, h: torch.ones(n, n, dtype=torch.bool), ["change one input token at a time"]),
    # not listed in the spec
    (lambda n, h: spec.dependency_map(n, h).int(), ["expected a boolean tensor"]),
    (lambda n, h: spec.dependency_map(n, h) & ~torch.eye(n, dtype=torch.bool),
     ["entry (0, 0) is False in your map"]),
    (lambda n, h: torch.ones(n, n, dtype=torch.bool).triu(), ["is False in your map"]),
])
def test_dependency_map_mistakes_are_named(solution, answer, phrases):
    _assert_named(_judge(solution, "q7_dependency_map", answer), *phrases)


def test_a_dependency_map_fitted_to_the_visible_cases_fails(solution):
    def fitted(n, heads):
        if (n, heads) in ((6, 3), (4, 2)):
            return spec.dependency_map(n, heads)
        return torch.ones(n, n, dtype=torch.bool).tril()

    _assert_named(_judge(solution, "q7_dependency_map", fitted), "held-back case")


def test_the_learners_measurement_with_their_own_split_gives_the_triangle(solution):
    measured = solution["dependency_map"](6, 3, split=solution["split_heads"])
    assert torch.equal(measured, torch.ones(6, 6, dtype=torch.bool).tril())


# --------------------------------------------------------------------------- one-line edits
EDITS = [
    ("scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])",
     "scores = q @ k.transpose(-2, -1) / math.sqrt(query.shape[-1])",
     "q3_multihead", "square root of embed_dim"),
    ('scores = scores.masked_fill(~attn_mask, float("-inf"))',
     'scores = scores.masked_fill(attn_mask, float("-inf"))',
     "q3_multihead", "True where attention is allowed"),
    ("weights = scores.softmax(dim=-1)", "weights = scores.softmax(dim=2)",
     "q3_multihead", "sum to 1 over the queries"),
    ("v = split_heads(self.v_proj(value), self.num_heads)",
     "v = split_heads(self.v_proj(key), self.num_heads)",
     "q3_multihead", "gradient with respect to the key argument"),
    ("return self.out_proj(merge_heads(weights @ v)), weights",
     "return query + self.out_proj(merge_heads(weights @ v)), weights",
     "q3_multihead", "residual connection"),
    ("real_keys = ~key_padding_mask[:, None, None, :]",
     "real_keys = key_padding_mask[:, None, None, :]",
     "q4_torch_masks", "still has PyTorch's meaning"),
    ("group = num_heads // num_kv_heads", "group = num_kv_heads",
     "q6_gqa", "divide it by the size of a group"),
    ("changed = x.clone()", "changed = x", "q7_dependency_map",
     "change one input token at a time"),
    ("> 1e-6", "> 1", "q7_dependency_map", "is your threshold too large"),
]


@pytest.mark.parametrize(("old", "new", "question_id", "phrase"), EDITS,
                         ids=[new for _, new, _, _ in EDITS])
def test_one_line_edits_of_the_solution_are_named(old, new, question_id, phrase):
    with contextlib.redirect_stdout(io.StringIO()):
        results = {r.id: r for r in run_checks(EX, namespace=_run(
            replace_in_solution(EX, (old, new))))}
    _assert_named(results[question_id], phrase)
    assert [r.id for r in results.values() if not r.passed] == [question_id]


# --------------------------------------------------------------------------- the grader
def test_grader_names_the_mistakes_of_a_whole_notebook(tmp_path, server):
    """Through the sandboxed grader: an inverted mask in the module and a round-robin
    head assignment; everything else stays right."""
    cells = replace_in_solution(
        EX, ('scores = scores.masked_fill(~attn_mask, float("-inf"))',
             'scores = scores.masked_fill(attn_mask, float("-inf"))'),
        ('"kv_head": torch.arange(num_heads) // group,',
         '"kv_head": torch.arange(num_heads) % num_kv_heads,'))
    graded = graded_record(EX, tmp_path, cells, server)
    by_id = {q.id: q for q in graded.questions}
    assert graded.score == graded.max_score - 4 - 1
    assert "True where attention is allowed" in by_id["q3_multihead"].message
    assert "division by zero" not in by_id["q3_multihead"].message
    assert "in turn" in by_id["q6_gqa"].message and by_id["q6_gqa"].points == 2
    assert graded.notebook_errors == []
