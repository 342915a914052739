"""Exercise 8 (positions): every mistake the spec lists, made as an edit of the solution
notebook (``EditedSolution``), loses points with its own message; unlisted edits (another
growth of the bias, reversed positions, a detached rotation...) still get feedback a
learner can act on, and right answers written differently pass; one notebook with four
mistakes goes through the sandboxed grader.
"""

from __future__ import annotations

import pytest
from grading_helpers import (
    EditedSolution,
    choice,
    graded_record,
    learner_path,
    notebook_cells,
)

from attention_course.grading import run_checks

EX = "08_positions"


# the check cells (which would only print) and the demonstrations after them (each
# starts with a comment) are not run
SOLUTION_EDITS = EditedSolution(EX, drop=(), skip=("check(", "#"))
_cells, _namespace = SOLUTION_EDITS.cells, SOLUTION_EDITS.namespace
feedback, message_of = SOLUTION_EDITS.feedback, SOLUTION_EDITS.message_of


# --------------------------------------------------------------------------- solution lines
A_H = "h = torch.arange(1, num_heads + 1, dtype=torch.float64)"
A_SLOPES = "slopes = 2.0 ** (-8.0 * h / num_heads)"
A_DISTANCE = "distance = (i[:, None] - i[None, :]).double()"
A_BIAS = "bias = -slopes[:, None, None] * distance "
A_RETURN = 'return bias.masked_fill(distance < 0, float("-inf")).float()'
R_POSITIONS = "    positions = torch.arange(n, dtype=x.dtype)"
R_THETA = "    theta = base ** (-torch.arange(0, d, 2, dtype=x.dtype) / d)"
R_PAIRS = "    even, odd = x[..., 0::2], x[..., 1::2]"
R_FIRST = "    first = even * angle.cos() - odd * angle.sin()"
R_SECOND = "    second = even * angle.sin() + odd * angle.cos()"
R_RETURN = "    return torch.stack([first, second], dim=-1).flatten(-2)"
ROTATE = "q, k = rotate_pairs(q), rotate_pairs(k)"
ATTEND = "return F.scaled_dot_product_attention(q, k, v, is_causal=True)"
SHARE = "return (1 - math.exp(-slope * w)) / (1 - math.exp(-slope * n))"
G_ROW = "weights = torch.softmax(alibi(num_heads, n).double(), dim=-1)[:, -1]"
G_FLIP = "nearest_first = weights.flip(-1).cumsum(-1)"
G_COUNT = "rows.append((nearest_first < share - 1e-12).sum(-1) + 1)"


# (question, mistake named in the spec, changes to the solution)
LISTED = [
    ("q1_alibi", "slopes_from_zero",
     [(A_H, "h = torch.arange(num_heads, dtype=torch.float64)")]),
    ("q1_alibi", "slopes_halves", [(A_SLOPES, "slopes = 2.0 ** -h")]),
    ("q1_alibi", "slopes_reversed", [(A_SLOPES, f"slopes = ({A_SLOPES[9:]}).flip(0)")]),
    ("q1_alibi", "one_slope",
     [(A_SLOPES, "slopes = torch.full_like(h, 2.0 ** (-8.0 / num_heads))")]),
    ("q1_alibi", "positive", [(A_BIAS, "bias = slopes[:, None, None] * distance ")]),
    ("q1_alibi", "transposed", [(A_DISTANCE, "distance = (i[None, :] - i[:, None]).double()")]),
    ("q1_alibi", "no_mask",
     [(A_RETURN, "return (-slopes[:, None, None] * distance.abs()).float()")]),
    ("q1_alibi", "unmasked", [(A_RETURN, "return bias.float()")]),
    ("q1_alibi", "zero_above", [(A_RETURN, "return bias.masked_fill(distance < 0, 0.0).float()")]),
    ("q1_alibi", "large_negative",
     [(A_RETURN, "return bias.masked_fill(distance < 0, -1e9).float()")]),
    ("q1_alibi", "diagonal_masked",
     [(A_RETURN, 'return bias.masked_fill(distance <= 0, float("-inf")).float()')]),
    ("q2_rotate_pairs", "unfixed",
     [(R_POSITIONS, "    positions = torch.arange(1, n + 1, dtype=x.dtype)"),
      (R_SECOND, "    second = odd * angle.cos() - even * angle.sin()")]),
    ("q2_rotate_pairs", "sign_still_wrong",
     [(R_SECOND, "    second = odd * angle.cos() - even * angle.sin()")]),
    ("q2_rotate_pairs", "positions_from_one",
     [(R_POSITIONS, "    positions = torch.arange(1, n + 1, dtype=x.dtype)")]),
    ("q2_rotate_pairs", "clockwise",
     [(R_FIRST, "    first = even * angle.cos() + odd * angle.sin()"),
      (R_SECOND, "    second = -even * angle.sin() + odd * angle.cos()")]),
    ("q2_rotate_pairs", "rotate_half",
     [(R_PAIRS, "    even, odd = x[..., : d // 2], x[..., d // 2 :]"),
      (R_RETURN, "    return torch.cat([first, second], dim=-1)")]),
    ("q2_rotate_pairs", "base_ignored",
     [(R_THETA, "    theta = 10000 ** (-torch.arange(0, d, 2, dtype=x.dtype) / d)")]),
    ("q2_rotate_pairs", "speeds_grow",
     [(R_THETA, "    theta = base ** (torch.arange(0, d, 2, dtype=x.dtype) / d)")]),
    ("q2_rotate_pairs", "pair_number_over_d",
     [(R_THETA, "    theta = base ** (-torch.arange(d // 2, dtype=x.dtype) / d)")]),
    ("q3_rope_attention", "values_rotated",
     [(ROTATE, "q, k, v = rotate_pairs(q), rotate_pairs(k), rotate_pairs(v)")]),
    ("q3_rope_attention", "queries_only", [(ROTATE, "q = rotate_pairs(q)")]),
    ("q3_rope_attention", "keys_only", [(ROTATE, "k = rotate_pairs(k)")]),
    ("q3_rope_attention", "output_rotated",
     [(ATTEND, "return rotate_pairs(F.scaled_dot_product_attention(q, k, v, "
               "is_causal=True))")]),
    ("q3_rope_attention", "not_causal", [(ATTEND, ATTEND.replace("True", "False"))]),
    ("q3_rope_attention", "nothing_rotated", [(ROTATE, "pass")]),
    ("q3_rope_attention", "unscaled", [(ATTEND, ATTEND.replace("True)", "True, scale=1.0)"))]),
    ("q3_rope_attention", "divided_by_d",
     [(ATTEND, ATTEND.replace("True)", "True, scale=1 / q.shape[-1])"))]),
    ("q3_rope_attention", "diagonal_masked",
     [(ATTEND, "n = q.shape[-2]\n    return F.scaled_dot_product_attention(q, k, v, "
               "attn_mask=torch.ones(n, n, dtype=torch.bool).tril(-1))")]),
    ("q3_rope_attention", "softmax_over_queries",
     [(ATTEND, "scores = q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5\n"
               "    hidden = torch.ones(q.shape[-2], q.shape[-2], dtype=torch.bool).triu(1)\n"
               "    return scores.masked_fill(hidden, float('-inf')).softmax(-2) @ v")]),
    ("q4_recent_share", "endless", [(SHARE, "return 1 - math.exp(-slope * w)")]),
    ("q4_recent_share", "one_more", [(SHARE, SHARE.replace("slope * w", "slope * (w + 1)"))]),
    ("q4_recent_share", "one_fewer", [(SHARE, SHARE.replace("slope * w", "slope * (w - 1)"))]),
    ("q4_recent_share", "uniform", [(SHARE, "return w / n")]),
    ("q4_recent_share", "own_key_left_out",
     [(SHARE, "return sum(math.exp(-slope * t) for t in range(1, w + 1)) / "
              "sum(math.exp(-slope * t) for t in range(n))")]),
    ("q4_recent_share", "n_plus_one_terms",
     [(SHARE, SHARE.replace("slope * n", "slope * (n + 1)"))]),
    ("q4_recent_share", "oldest",
     [(SHARE, "return (math.exp(-slope * (n - w)) - math.exp(-slope * n)) / "
              "(1 - math.exp(-slope * n))")]),
    ("q4_recent_share", "single_key",
     [(SHARE, "return math.exp(-slope * (w - 1)) * (1 - math.exp(-slope)) / "
              "(1 - math.exp(-slope * n))")]),
    ("q5_predict_swap", "none_last_different", [choice("none_last", "same", "different")]),
    ("q5_predict_swap", "rope_last_same", [choice("rope_last", "different", "same")]),
    ("q5_predict_swap", "alibi_last_same", [choice("alibi_last", "different", "same")]),
    ("q5_predict_swap", "none_first_same", [choice("none_first", "different", "same")]),
    ("q6_alibi_reach", "not_normalised", [(G_ROW, "weights = alibi(num_heads, n).double()"
                                                   ".exp()[:, -1]")]),
    ("q6_alibi_reach", "oldest_first", [(G_FLIP, "nearest_first = weights.cumsum(-1)")]),
    ("q6_alibi_reach", "first_query", [(G_ROW, G_ROW.replace("[:, -1]", "[:, 0]"))]),
    ("q6_alibi_reach", "one_fewer", [(G_COUNT, G_COUNT.replace(" + 1)", ")"))]),
    ("q6_alibi_reach", "one_more", [(G_COUNT, G_COUNT.replace(" + 1)", " + 2)"))]),
]


(test_the_solution_passes_as_the_tests_run_it, test_every_listed_mistake_is_tested,
 test_listed_mistake_is_named) = SOLUTION_EDITS.tests(LISTED)


def test_a_wrong_prediction_keeps_the_right_parts():
    result = feedback("q5_predict_swap", choice("rope_last", "different", "same"),
                      choice("none_first", "different", "same"))
    assert (result.points, result.max_points) == (2, 4)
    assert message_of("q5_predict_swap", "rope_last_same") in result.message
    assert message_of("q5_predict_swap", "none_first_same") in result.message


def test_the_starter_scores_nothing_and_is_named():
    learner = learner_path(EX)
    cells = [c.replace('    raise NotImplementedError("fix the two bugs, then delete this '
                       'line")\n', "")
             for c in notebook_cells(learner)]
    namespace = {**_namespace(_cells()), **{"rotate_pairs": _namespace(cells)["rotate_pairs"]}}
    (result,) = run_checks(EX, "q2_rotate_pairs", namespace=namespace)
    assert result.points == 0
    assert message_of("q2_rotate_pairs", "unfixed") in result.message


# --------------------------------------------------------------------------- mistakes the
# spec does not list: the feedback must still say something a learner can act on
def test_unlisted_squared_distance_says_the_growth_is_wrong():
    result = feedback("q1_alibi", (A_BIAS, "bias = -slopes[:, None, None] * distance ** 2 "))
    assert "right for the key just before each query, but not further back" in result.message


def test_unlisted_slopes_over_the_heads_minus_one_say_check_the_slopes():
    result = feedback("q1_alibi", (A_SLOPES, "slopes = 2.0 ** (-8.0 * h / (num_heads + 1))"))
    assert "check the slopes" in result.message


def test_unlisted_nan_above_the_diagonal_is_caught():
    result = feedback("q1_alibi", (A_RETURN, 'return bias.masked_fill(distance < 0, '
                                             'float("nan")).float()'))
    assert result.points == 0 and "minus infinity" in result.message


def test_unlisted_bias_offset_by_one_says_the_diagonal_is_wrong():
    result = feedback("q1_alibi", (A_BIAS, "bias = -slopes[:, None, None] * (distance + 1) "))
    assert "own key is at distance 0 and must get bias 0" in result.message


def test_unlisted_missing_head_axis_gets_the_shape_message():
    result = feedback("q1_alibi", (A_RETURN, A_RETURN.replace(".float()", ".float()[0]")))
    assert "expected shape (4, 5, 5), got (5, 5)" in result.message


def test_unlisted_reversed_positions_are_caught_at_position_zero():
    result = feedback("q2_rotate_pairs",
                      (R_POSITIONS, "    positions = torch.arange(n, dtype=x.dtype).flip(0)"))
    assert "position 0 is the identity" in result.message


def test_unlisted_outputs_in_the_wrong_order_are_caught_at_position_zero():
    result = feedback("q2_rotate_pairs",
                      (R_RETURN, "    return torch.stack([second, first], dim=-1).flatten(-2)"))
    assert "position 0 is the identity" in result.message


def test_unlisted_doubled_angle_gets_the_values_message():
    result = feedback("q2_rotate_pairs",
                      ("    angle = positions[:, None] * theta",
                       "    angle = 2 * positions[:, None] * theta"))
    assert result.points == 0 and "values differ; at index" in result.message
    assert "8.4 RoPE: rotating pairs of features" in result.hint


def test_unlisted_detached_rotation_loses_the_gradient():
    result = feedback("q2_rotate_pairs", (R_RETURN, R_RETURN + ".detach()"))
    assert "does not carry gradients back to the inputs" in result.message


def test_unlisted_broken_rotation_is_named_in_the_attention_question():
    results = run_checks(EX, "q2_rotate_pairs", "q3_rope_attention", namespace=_namespace(
        _cells((R_POSITIONS, "    positions = torch.arange(1, n + 1, dtype=x.dtype)"))))
    rotate, attention = results
    assert not rotate.passed
    # positions from 1 shift every position alike: relative scores, so attention passes
    assert attention.passed
    results = run_checks(EX, "q2_rotate_pairs", "q3_rope_attention", namespace=_namespace(
        _cells((R_SECOND, "    second = odd * angle.cos() - even * angle.sin()"))))
    assert results[1].message.startswith("this question calls your answer to q2_rotate_pairs")


def test_unlisted_unscaled_scores_in_the_attention():
    attention = ("    qr, kr = rotate_pairs(q), rotate_pairs(k)\n"
                 "    weights = torch.softmax((qr @ kr.transpose(-2, -1)).masked_fill(\n"
                 "        torch.ones(q.shape[-2], q.shape[-2]).triu(1).bool(), "
                 "float('-inf')), dim=-1)\n"
                 "    return weights @ v")
    result = feedback("q3_rope_attention", (f"    {ROTATE}\n    {ATTEND}", attention))
    assert result.points == 0 and message_of("q3_rope_attention", "unscaled") in result.message


def test_unlisted_base_two_in_the_derivation_says_by_how_much():
    result = feedback("q4_recent_share",
                      (SHARE, "return (1 - 2 ** (-slope * w)) / (1 - 2 ** (-slope * n))"))
    assert result.points == 0 and "times too" in result.message
    assert "expected" not in result.message  # a derived number is never given away


def test_unlisted_answer_outside_the_choices_lists_them():
    result = feedback("q5_predict_swap", choice("alibi_last", "different", "changes"))
    assert "'changes' is not one of the choices: 'same', 'different'" in result.message
    assert result.points == 3


def test_unlisted_missing_key_names_the_keys():
    result = feedback("q5_predict_swap", ('"none_last": "same", ', ""))
    assert ("return a dict with the keys 'none_last', 'rope_last', 'alibi_last', "
            "'none_first'") in result.message


def test_unlisted_float_reach_gets_the_dtype_message():
    result = feedback("q6_alibi_reach", ("return torch.stack(rows)", "return torch.stack(rows)"
                                                                     ".float()"))
    assert "expected an integer tensor" in result.message


def test_unlisted_heads_by_lengths_gets_the_shape_message():
    result = feedback("q6_alibi_reach", ("return torch.stack(rows)", "return torch.stack(rows).T"))
    assert "expected shape (3, 4), got (4, 3)" in result.message


def test_unlisted_wrong_bias_makes_the_experiment_say_so():
    result = run_checks(EX, "q1_alibi", "q6_alibi_reach", namespace=_namespace(
        _cells((A_H, "h = torch.arange(num_heads, dtype=torch.float64)"))))
    assert not result[0].passed and not result[1].passed
    assert result[1].message.startswith("this question calls your answer to q1_alibi")


def test_unlisted_growing_weights_are_named_like_the_oldest_keys():
    result = feedback("q4_recent_share",
                      (SHARE, "return (1 - math.exp(slope * w)) / (1 - math.exp(slope * n))"))
    assert result.points == 0 and "weights grow with the distance" in result.message


def test_unlisted_softmax_over_the_queries_in_the_experiment_is_named():
    result = feedback("q6_alibi_reach", (G_ROW, G_ROW.replace("dim=-1", "dim=-2")))
    assert result.points == 0
    assert message_of("q6_alibi_reach", "not_normalised") in result.message


CORRECT_BUT_DIFFERENT = [
    ("q1_alibi", [(A_RETURN, 'return bias.masked_fill(distance < 0, float("-inf"))')]),
    ("q2_rotate_pairs", [(R_POSITIONS, "    x = x.double()\n" + R_POSITIONS)]),
    ("q2_rotate_pairs", [(R_RETURN, "    out = torch.zeros_like(x)\n"
                                    "    for j in range(d // 2):\n"
                                    "        out = out.clone()\n"
                                    "        out[..., 2 * j] = first[..., j]\n"
                                    "        out[..., 2 * j + 1] = second[..., j]\n"
                                    "    return out")]),
    ("q3_rope_attention",
     [(ATTEND, "s = torch.einsum('bhid,bhjd->bhij', q, k) / q.shape[-1] ** 0.5\n"
               "    hidden = torch.ones(s.shape[-2], s.shape[-1], dtype=torch.bool).triu(1)\n"
               "    return torch.einsum('bhij,bhjd->bhid', "
               "s.masked_fill(hidden, float('-inf')).softmax(-1), v)")]),
    ("q4_recent_share",
     [(SHARE, "return sum(math.exp(-slope * t) for t in range(w)) / "
              "sum(math.exp(-slope * t) for t in range(n))")]),
    ("q6_alibi_reach", [(G_COUNT, "rows.append((nearest_first <= share).sum(-1) + 1)")]),
]


@pytest.mark.parametrize(("question", "changes"), CORRECT_BUT_DIFFERENT,
                         ids=[f"{q}-{i}" for i, (q, _) in enumerate(CORRECT_BUT_DIFFERENT)])
def test_a_correct_but_different_answer_gets_full_marks(question, changes):
    result = feedback(question, *changes)
    assert result.passed, result.message


# --------------------------------------------------------------------------- the grader
def test_grader_names_the_mistakes_in_the_sandbox(tmp_path):
    cells = _cells(
        (A_SLOPES, "slopes = 2.0 ** -h"),
        (R_SECOND, "    second = odd * angle.cos() - even * angle.sin()"),
        (SHARE, "return 1 - math.exp(-slope * w)"),
        choice("none_last", "same", "different"),
    )
    record = graded_record(EX, tmp_path, cells)
    by_id = {q.id: q for q in record.questions}
    assert record.error is None and record.notebook_errors == []
    # q1, q2, q3 (calls q2), q4 and q6 (calls q1) lose everything, q5 one part
    assert record.score == record.max_score - 2 - 3 - 2 - 3 - 1 - 3
    assert message_of("q1_alibi", "slopes_halves") in by_id["q1_alibi"].message
    assert message_of("q2_rotate_pairs", "sign_still_wrong") in by_id["q2_rotate_pairs"].message
    assert by_id["q3_rope_attention"].message.startswith(
        "this question calls your answer to q2_rotate_pairs")
    assert message_of("q4_recent_share", "endless") in by_id["q4_recent_share"].message
    assert message_of("q5_predict_swap", "none_last_different") in \
        by_id["q5_predict_swap"].message
    assert by_id["q5_predict_swap"].points == 3
    assert by_id["q6_alibi_reach"].message.startswith("this question calls your answer to q1_alibi")
