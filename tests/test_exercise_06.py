"""Exercise 6 (the Transformer): every mistake the spec lists, made as an edit of the
solution notebook (``EditedSolution``), loses points with its own message; unlisted
edits (a transposed table, a mask without its head axis, a detached layer...) still get
feedback a learner can act on; and one notebook with four mistakes goes through the
sandboxed grader.
"""

from __future__ import annotations

from grading_helpers import EditedSolution, choice, graded_record

from attention_course.grading import get_exercise, run_checks

EX = "06_transformer"
EXERCISE = get_exercise(EX)
# the training demo of question 8 (seconds, and not graded), and the solution's cell that
# glues and checks what it measured
DEMO = ("train_tiny_encoder(", "with_positions[")


SOLUTION_EDITS = EditedSolution(EX, drop=DEMO, skip=("check(",))
_cells, _namespace = SOLUTION_EDITS.cells, SOLUTION_EDITS.namespace
feedback, message_of = SOLUTION_EDITS.feedback, SOLUTION_EDITS.message_of


# --------------------------------------------------------------------------- solution lines
PE_EVEN = "    pe[:, 0::2] = torch.sin(angle)\n"
PE_ODD = "    pe[:, 1::2] = torch.cos(angle[:, : d_model // 2])"
PE_ANGLE = "angle = position / 10000 ** (two_i / d_model)"
PE_TWO_I = "two_i = torch.arange(0, d_model, 2, dtype=torch.float64)"
SHIFT_ANGLE = "angle = k / 10000 ** (two_i.double() / d_model)"
SHIFT_UPPER = "    m[two_i, two_i + 1] = sin\n"
SHIFT_LOWER = "    m[two_i + 1, two_i] = -sin"
EMBED_SCALE = "x = embedding[ids] * math.sqrt(embedding.shape[1])"
EMBED_TABLE = "return x + pe_table[: ids.shape[1]]"
MASK_RETURN = "return real_keys & causal"
TRIANGLE = "# (T, T): s <= t\n    causal = torch.ones(length, length, dtype=torch.bool).tril()"
ATTEND = "attended, _ = self.self_attn(x, x, x, attn_mask=src_mask)"
FIRST_ADD = "x = self.norm1(x + attended)"
SECOND_ADD = "return self.norm2(x + self.linear2(torch.relu(self.linear1(x))))"
GAP = "return (moved - original[:, perm]).abs().max().item()"
PADDING_RUN = "layer(x[:, perm], real[:, perm][:, None, None, :]),"
TABLE_RUN = "layer(x[:, perm] + table), layer(x + table)"
GAP_TRIANGLE = "causal = torch.ones(length, length, dtype=torch.bool).tril()\n\n"


# (question, mistake named in the spec, changes to the solution)
LISTED = [
    ("q1_positional_encoding", "sin_cos_swapped",
     [(PE_EVEN, "    pe[:, 0::2] = torch.cos(angle)\n"),
      (PE_ODD, "    pe[:, 1::2] = torch.sin(angle[:, : d_model // 2])")]),
    ("q1_positional_encoding", "base_1000",
     [(PE_ANGLE, "angle = position / 1000 ** (two_i / d_model)")]),
    ("q1_positional_encoding", "pair_number_over_d",
     [(PE_TWO_I, "two_i = torch.arange((d_model + 1) // 2, dtype=torch.float64)")]),
    ("q1_positional_encoding", "column_exponent",
     [(PE_ANGLE, "column = torch.arange(d_model, dtype=torch.float64)\n"
                 "    angle = position / 10000 ** (column / d_model)"),
      (PE_EVEN, "    pe[:, 0::2] = torch.sin(angle[:, 0::2])\n"),
      (PE_ODD, "    pe[:, 1::2] = torch.cos(angle[:, 1::2])")]),
    ("q1_positional_encoding", "halves",
     [(PE_EVEN, "    pe[:, : (d_model + 1) // 2] = torch.sin(angle)\n"),
      (PE_ODD, "    pe[:, (d_model + 1) // 2 :] = torch.cos(angle[:, : d_model // 2])")]),
    ("q1_positional_encoding", "multiplied",
     [(PE_ANGLE, "angle = position * 10000 ** (two_i / d_model)")]),
    ("q1_positional_encoding", "positions_from_one",
     [("position = torch.arange(num_positions, dtype=torch.float64)",
       "position = torch.arange(1, num_positions + 1, dtype=torch.float64)")]),
    ("q2_shift_map", "transposed",
     [(SHIFT_UPPER, "    m[two_i, two_i + 1] = -sin\n"),
      (SHIFT_LOWER, "    m[two_i + 1, two_i] = sin")]),
    ("q2_shift_map", "angle_k",
     [(SHIFT_ANGLE, "angle = k * torch.ones(d_model // 2, dtype=torch.float64)")]),
    ("q2_shift_map", "base_1000",
     [(SHIFT_ANGLE, "angle = k / 1000 ** (two_i.double() / d_model)")]),
    ("q2_shift_map", "pair_number_over_d",
     [(SHIFT_ANGLE, "angle = k / 10000 ** ((two_i // 2).double() / d_model)")]),
    ("q3_embed_tokens", "unfixed",
     [(EMBED_SCALE, "x = embedding[ids] / math.sqrt(embedding.shape[1])"),
      (EMBED_TABLE, "return x + pe_table[: x.shape[0]].unsqueeze(1)")]),
    ("q3_embed_tokens", "table_along_batch",
     [(EMBED_TABLE, "return x + pe_table[: x.shape[0]].unsqueeze(1)")]),
    ("q3_embed_tokens", "divided",
     [(EMBED_SCALE, "x = embedding[ids] / math.sqrt(embedding.shape[1])")]),
    ("q3_embed_tokens", "no_scale", [(EMBED_SCALE, "x = embedding[ids]")]),
    ("q3_embed_tokens", "times_d", [(EMBED_SCALE, "x = embedding[ids] * embedding.shape[1]")]),
    ("q3_embed_tokens", "vocabulary_size",
     [(EMBED_SCALE, "x = embedding[ids] * math.sqrt(embedding.shape[0])")]),
    ("q3_embed_tokens", "table_by_token_id", [(EMBED_TABLE, "return x + pe_table[ids]")]),
    ("q3_embed_tokens", "no_table", [(EMBED_TABLE, "return x")]),
    ("q3_embed_tokens", "table_scaled_too",
     [(EMBED_SCALE, "x = embedding[ids]"),
      (EMBED_TABLE, "return (x + pe_table[: ids.shape[1]]) * math.sqrt(embedding.shape[1])")]),
    ("q3_embed_tokens", "table_from_one",
     [(EMBED_TABLE, "return x + pe_table[1 : ids.shape[1] + 1]")]),
    ("q4_decoder_mask", "inverted", [(MASK_RETURN, "return ~(real_keys & causal)")]),
    ("q4_decoder_mask", "diagonal_excluded", [(TRIANGLE, TRIANGLE.replace("tril()", "tril(-1)"))]),
    ("q4_decoder_mask", "future_allowed", [(TRIANGLE, TRIANGLE.replace("tril()", "triu()"))]),
    ("q4_decoder_mask", "causal_only",
     [(MASK_RETURN, "return causal.expand(tgt_ids.shape[0], 1, -1, -1)")]),
    ("q4_decoder_mask", "padding_only",
     [(MASK_RETURN, "return real_keys.expand(-1, -1, length, -1)")]),
    ("q4_decoder_mask", "padding_inverted",
     [("real_keys = (tgt_ids != pad_id)", "real_keys = (tgt_ids == pad_id)")]),
    ("q4_decoder_mask", "pad_id_ignored",
     [("real_keys = (tgt_ids != pad_id)", "real_keys = (tgt_ids != 0)")]),
    ("q4_decoder_mask", "padding_on_queries",
     [(MASK_RETURN, "return (tgt_ids != pad_id)[:, None, :, None] & causal")]),
    ("q5_encoder_layer", "pre_norm",
     [(ATTEND, "attended, _ = self.self_attn(*[self.norm1(x)] * 3, attn_mask=src_mask)"),
      (FIRST_ADD, "x = x + attended"),
      (SECOND_ADD, "return x + self.linear2(torch.relu(self.linear1(self.norm2(x))))")]),
    ("q5_encoder_layer", "pre_norm_with_final_norm",
     [(ATTEND, "attended, _ = self.self_attn(*[self.norm1(x)] * 3, attn_mask=src_mask)"),
      (FIRST_ADD, "x = x + attended")]),
    ("q5_encoder_layer", "no_residual",
     [(FIRST_ADD, "x = self.norm1(attended)"),
      (SECOND_ADD, "return self.norm2(self.linear2(torch.relu(self.linear1(x))))")]),
    ("q5_encoder_layer", "no_attention_residual", [(FIRST_ADD, "x = self.norm1(attended)")]),
    ("q5_encoder_layer", "no_ffn_residual",
     [(SECOND_ADD, "return self.norm2(self.linear2(torch.relu(self.linear1(x))))")]),
    ("q5_encoder_layer", "norm_before_add",
     [(FIRST_ADD, "x = self.norm1(x) + attended"),
      (SECOND_ADD, "return self.norm2(x) + self.linear2(torch.relu(self.linear1(x)))")]),
    ("q5_encoder_layer", "ffn_residual_from_input",
     [(FIRST_ADD, "h = self.norm1(x + attended)"),
      (SECOND_ADD, "return self.norm2(x + self.linear2(torch.relu(self.linear1(h))))")]),
    ("q5_encoder_layer", "norms_swapped",
     [(FIRST_ADD, "x = self.norm2(x + attended)"),
      (SECOND_ADD, "return self.norm1(x + self.linear2(torch.relu(self.linear1(x))))")]),
    ("q5_encoder_layer", "norm1_twice", [(SECOND_ADD, SECOND_ADD.replace("norm2", "norm1"))]),
    ("q5_encoder_layer", "ffn_first",
     [(ATTEND, "x = self.norm1(x + self.linear2(torch.relu(self.linear1(x))))"),
      (FIRST_ADD, "attended, _ = self.self_attn(x, x, x, attn_mask=src_mask)"),
      (SECOND_ADD, "return self.norm2(x + attended)")]),
    ("q5_encoder_layer", "no_relu",
     [(SECOND_ADD, "return self.norm2(x + self.linear2(self.linear1(x)))")]),
    ("q5_encoder_layer", "relu_at_the_end",
     [(SECOND_ADD, "return self.norm2(x + torch.relu(self.linear2(self.linear1(x))))")]),
    ("q5_encoder_layer", "gelu",
     [(SECOND_ADD, SECOND_ADD.replace("torch.relu", "nn.functional.gelu"))]),
    ("q5_encoder_layer", "mask_ignored", [(ATTEND, "attended, _ = self.self_attn(x, x, x)")]),
    ("q5_encoder_layer", "mask_inverted",
     [(ATTEND, "mask = None if src_mask is None else ~src_mask\n"
               "        attended, _ = self.self_attn(x, x, x, attn_mask=mask)")]),
    ("q6_predict_equivariance", "padding_breaks",
     [choice("padding_mask", "equivariant", "not equivariant")]),
    ("q6_predict_equivariance", "table_ignored",
     [choice("positional_encoding", "not equivariant", "equivariant")]),
    ("q6_predict_equivariance", "causal_ignored",
     [choice("causal_mask", "not equivariant", "equivariant")]),
    ("q7_permutation_gaps", "original_order",
     [(GAP, "return (moved - original).abs().max().item()")]),
    ("q7_permutation_gaps", "inverse_permutation",
     [(GAP, "return (moved - original[:, torch.argsort(perm)]).abs().max().item()")]),
    ("q7_permutation_gaps", "table_travels",
     [(TABLE_RUN, "layer((x + table)[:, perm]), layer(x + table)")]),
    ("q7_permutation_gaps", "table_on_moved_input_only",
     [(TABLE_RUN, "layer(x[:, perm] + table), layer(x)")]),
    ("q7_permutation_gaps", "causal_mask_upper",
     [(GAP_TRIANGLE, GAP_TRIANGLE.replace("tril", "triu"))]),
    ("q7_permutation_gaps", "causal_mask_inverted",
     [(GAP_TRIANGLE, GAP_TRIANGLE.replace("torch.ones", "~torch.ones"))]),
    ("q7_permutation_gaps", "causal_mask_strict",
     [(GAP_TRIANGLE, GAP_TRIANGLE.replace("tril()", "tril(-1)"))]),
    ("q7_permutation_gaps", "sum_gap", [(GAP, GAP.replace(".max()", ".sum()"))]),
    ("q7_permutation_gaps", "mean_gap", [(GAP, GAP.replace(".max()", ".mean()"))]),
    ("q7_permutation_gaps", "signed_gap", [(GAP, GAP.replace(".abs()", ""))]),
    ("q7_permutation_gaps", "mask_not_permuted",
     [(PADDING_RUN, "layer(x[:, perm], real[:, None, None, :]),")]),
    ("q8_predict_tasks", "copy_impossible", [choice("copy", "possible", "impossible")]),
    ("q8_predict_tasks", "reverse_possible",
     [choice("reverse", "impossible", "possible")]),
    ("q8_predict_tasks", "largest_impossible",
     [choice("largest", "possible", "impossible")]),
    ("q8_predict_tasks", "previous_possible",
     [choice("previous", "impossible", "possible")]),
]


(test_the_solution_passes_as_the_tests_run_it, test_every_listed_mistake_is_tested,
 test_listed_mistake_is_named) = SOLUTION_EDITS.tests(LISTED)


def test_partial_credit_keeps_the_right_parts():
    result = feedback("q7_permutation_gaps",
                      (TABLE_RUN, "layer((x + table)[:, perm]), layer(x + table)"))
    assert (result.points, result.max_points) == (2, 3)
    assert result.message.startswith("'positional_encoding'")
    result = feedback("q8_predict_tasks", choice("reverse", "impossible", "possible"),
                      choice("copy", "possible", "impossible"))
    assert (result.points, result.max_points) == (2, 4)


# --------------------------------------------------------------------------- mistakes the
# spec does not list: the feedback must still say something a learner can act on
def test_unlisted_transposed_table_gets_the_shape_message():
    result = feedback("q1_positional_encoding",
                      ("    return pe.float()", "    return pe.float().T"))
    assert "expected shape (6, 4), got (4, 6)" in result.message
    assert "are two axes swapped?" in result.message


def test_unlisted_crash_on_odd_width_is_reported():
    result = feedback("q1_positional_encoding",
                      (PE_ODD, "    pe[:, 1::2] = torch.cos(angle)"))
    odd = EXERCISE.question("q1_positional_encoding").cases()[3]
    assert "odd" in odd.label and result.points == 0
    assert f"case 4 ({odd.label})" in result.message and "raised RuntimeError" in result.message


def test_unlisted_sines_everywhere_says_the_cosines_are_wrong():
    result = feedback("q1_positional_encoding",
                      (PE_ODD, "    pe[:, 1::2] = torch.sin(angle[:, : d_model // 2])"))
    assert "row of position 0 must be 0, 1, 0, 1" in result.message


def test_unlisted_other_base_says_the_later_pairs_are_wrong():
    result = feedback("q1_positional_encoding",
                      (PE_ANGLE, "angle = position / 500 ** (two_i / d_model)"))
    assert "first pair of columns is right" in result.message
    assert "later pairs turn at the wrong speed" in result.message
    assert "hint:" in result.line() and "6.3 The sinusoidal positional encoding" in result.hint


def test_unlisted_cosines_of_other_angles_are_located():
    result = feedback("q1_positional_encoding",
                      (PE_ODD, "    pe[:, 1::2] = torch.cos(2 * angle[:, : d_model // 2])"))
    assert "your sine columns are right, but not the cosine columns" in result.message


def test_unlisted_positions_backwards_are_caught_at_position_zero():
    result = feedback("q1_positional_encoding",
                      ("position = torch.arange(num_positions, dtype=torch.float64)",
                       "position = torch.arange(num_positions, dtype=torch.float64).flip(0)"))
    assert "row of position 0 must be 0, 1, 0, 1" in result.message


def test_unlisted_shift_by_another_amount_is_diagnosed():
    result = feedback("q2_shift_map",
                      (SHIFT_ANGLE, "angle = (k + 1) / 10000 ** (two_i.double() / d_model)"))
    assert ("case 1 (k = 1, d_model 4): your matrix shifts the table by 2 positions, not by "
            "k = 1") in result.message


def test_unlisted_lost_sign_is_not_a_rotation():
    result = feedback("q2_shift_map", (SHIFT_LOWER, "    m[two_i + 1, two_i] = sin"))
    assert "your matrix changes lengths" in result.message


def test_unlisted_wrong_frequencies_of_later_pairs():
    result = feedback("q2_shift_map",
                      (SHIFT_ANGLE, "angle = k / 10000 ** (two_i.double() / (d_model + 2))"))
    assert "first pair's block is right, but the later pairs turn by the wrong angle" \
        in result.message


def test_unlisted_blocks_in_the_wrong_place_mix_pairs():
    result = feedback("q2_shift_map", ("two_i = torch.arange(0, d_model, 2)\n",
                                       "two_i = torch.arange(0, d_model // 2)\n"))
    assert "mixes different pairs of columns" in result.message


def test_unlisted_hidden_case_keeps_its_inputs_to_itself():
    # right only up to d_model 8, the widths the check shows: a held-back case fails
    result = feedback("q2_shift_map", ("two_i = torch.arange(0, d_model, 2)\n",
                                       "two_i = torch.arange(0, min(d_model, 8), 2)\n"))
    assert "held-back case 4 (the check does not show its inputs)" in result.message
    assert "your matrix changes lengths" in result.message
    assert "40" not in result.message and "12" not in result.message


def test_unlisted_detached_embeddings_lose_the_gradient():
    result = feedback("q3_embed_tokens",
                      (EMBED_SCALE, "x = embedding[ids].detach() * math.sqrt(embedding.shape[1])"))
    assert "the output is right, but not its gradient" in result.message


def test_unlisted_float_mask_gets_the_dtype_message():
    result = feedback("q4_decoder_mask", (MASK_RETURN, "return (real_keys & causal).float()"))
    assert "expected a boolean tensor" in result.message


def test_unlisted_mask_without_head_axis_gets_the_shape_message():
    result = feedback("q4_decoder_mask", (MASK_RETURN, "return (real_keys & causal)[:, 0]"))
    assert "expected shape (1, 1, 4, 4), got (1, 4, 4)" in result.message


def test_unlisted_detached_layer_output_says_so():
    result = feedback("q5_encoder_layer", (SECOND_ADD, SECOND_ADD.replace("return ", "return (")
                                           + ").detach()"))
    assert "does not carry gradients back to the inputs" in result.message


def test_unlisted_attention_weights_instead_of_output_say_what_raised():
    result = feedback("q5_encoder_layer",
                      (ATTEND, "_, attended = self.self_attn(x, x, x, attn_mask=src_mask)"))
    assert result.status == "error" and "TypeError" in result.message


def test_unlisted_table_from_its_last_rows_says_where_values_differ():
    result = feedback("q3_embed_tokens", (EMBED_TABLE, "return x + pe_table[-ids.shape[1]:]"))
    assert result.points == 0 and "values differ; at index" in result.message
    assert "scale of the table" in result.hint


def test_unlisted_half_fix_keeping_the_unsqueeze_says_what_raised():
    result = feedback("q3_embed_tokens",
                      (EMBED_TABLE, "return x + pe_table[: ids.shape[1]].unsqueeze(1)"))
    assert result.points == 0 and "must match the size of tensor b" in result.message


def test_unlisted_padded_queries_masked_too_are_named():
    result = feedback("q4_decoder_mask",
                      (MASK_RETURN, "return real_keys & causal & (tgt_ids != pad_id)[:, None, "
                                    ":, None]"))
    assert result.points == 0 and "rows of the padded positions are all False" in result.message


def test_unlisted_precedence_in_the_frequency_divides_by_zero():
    result = feedback("q1_positional_encoding",
                      (PE_ANGLE, "angle = position / (10000 ** 2 * two_i / d_model)"))
    assert result.points == 0 and "look for a division by zero" in result.message


def test_unlisted_wrong_layer_makes_the_experiment_say_so():
    pre_norm = _namespace(_cells(
        (FIRST_ADD, "x = x + attended"),
        (ATTEND, "attended, _ = self.self_attn(*[self.norm1(x)] * 3, attn_mask=src_mask)")))
    layer, gaps = run_checks(EX, "q5_encoder_layer", "q7_permutation_gaps", namespace=pre_norm)
    assert not layer.passed and gaps.points == 1  # any layer is equivariant with padding
    assert gaps.message.startswith("this question calls your answer to q5_encoder_layer")


def test_unlisted_table_in_the_causal_run_is_compared_part_by_part():
    result = feedback("q7_permutation_gaps",
                      ("gap(layer(x[:, perm], causal), layer(x, causal))",
                       "gap(layer(x[:, perm] + table, causal), layer(x + table, causal))"))
    assert result.points == 2
    assert result.message.startswith("'causal_mask' in case 1")
    assert "times too large" in result.message and "expected" not in result.message


def test_unlisted_answer_outside_the_choices_lists_them():
    result = feedback("q6_predict_equivariance",
                      choice("causal_mask", "not equivariant", "no"))
    assert "'no' is not one of the choices: 'equivariant', 'not equivariant'" in result.message
    assert result.points == 2


def test_unlisted_missing_key_names_the_keys():
    result = feedback("q8_predict_tasks", ('"copy": "possible",\n', ""))
    assert "return a dict with the keys 'copy', 'reverse', 'largest', 'previous'" in result.message


# --------------------------------------------------------------------------- the grader
def test_grader_names_the_mistakes_in_the_sandbox(tmp_path):
    cells = _cells(
        (PE_ANGLE, "angle = position / 1000 ** (two_i / d_model)"),
        (EMBED_TABLE, "return x + pe_table[: x.shape[0]].unsqueeze(1)"),
        (MASK_RETURN, "return causal.expand(tgt_ids.shape[0], 1, -1, -1)"),
        choice("causal_mask", "not equivariant", "equivariant"),
    )
    record = graded_record(EX, tmp_path, cells)
    by_id = {q.id: q for q in record.questions}
    assert record.error is None and record.notebook_errors == []
    # q1, q3, q4 lose everything, q6 one part, q7 the part that uses the wrong table
    assert record.score == record.max_score - 2 - 2 - 2 - 1 - 1
    assert message_of("q1_positional_encoding", "base_1000") in \
        by_id["q1_positional_encoding"].message
    assert message_of("q3_embed_tokens", "table_along_batch") in by_id["q3_embed_tokens"].message
    assert message_of("q4_decoder_mask", "causal_only") in by_id["q4_decoder_mask"].message
    assert message_of("q6_predict_equivariance", "causal_ignored") in \
        by_id["q6_predict_equivariance"].message
    assert by_id["q6_predict_equivariance"].points == 2
    assert by_id["q7_permutation_gaps"].points == 2
    assert by_id["q7_permutation_gaps"].message.startswith(
        "this question calls your answer to q1_positional_encoding")
    assert by_id["q2_shift_map"].passed and by_id["q5_encoder_layer"].passed
