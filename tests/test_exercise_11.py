"""Exercise 11's typical mistakes, applied to the reference solution: each loses points
with a message that names it.

The first half are mistakes the spec lists (``Mistake``s, recognised by their outputs),
written here independently of the spec, as a learner would write them; the second half
are mistakes it does not list, whose feedback must still say what is off (a diagnosis, a
shape, a type, a choice). Most answers are judged by ``check``'s own code in this process;
a few notebooks with one line changed go through the real grader.
"""

from __future__ import annotations

import functools
import json
import math

import pytest
import torch
import torch.nn.functional as F
from grading_helpers import (
    assert_each_question,
    each_wrong_choice_test,
    grade_cells,
    graded_record,
    judge,
    learner_path,
    learner_starter,
    listed_mistake_test,
    lost,
    named_mistakes_test,
    notebook_cells,
    replace_in_solution,
)

EXERCISE = "11_small_gpt"

feedback = functools.partial(lost, EXERCISE)
test_every_listed_mistake_loses_points_with_its_message = listed_mistake_test(EXERCISE)


def _rope(x, positions, base=10000.0):
    """RoPE as the learner's page gives it (adjacent pairs)."""
    d = x.shape[-1]
    theta = base ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    angle = positions.double()[:, None] * theta
    cos, sin = angle.cos().to(x.dtype), angle.sin().to(x.dtype)
    even, odd = x[..., 0::2], x[..., 1::2]
    return torch.stack([even * cos - odd * sin, even * sin + odd * cos], -1).flatten(-2)


# --------------------------------------------------------------------------- question 1
def _norm(dim=-1, centre=False, eps_inside=True, gain=True, use_eps=True, total=False,
          unbiased_std=False):
    def rms_norm(x, weight, eps=1e-5):
        if unbiased_std:  # the standard deviation, as torch.std computes it
            return (x - x.mean(-1, keepdim=True)) / (x.std(-1, keepdim=True) + eps) * weight
        if centre:
            x = x - x.mean(dim=-1, keepdim=True)
        square = x * x
        size = square.sum(dim, keepdim=True) if total else square.mean(dim, keepdim=True)
        if not use_eps:
            out = x / size.sqrt()
        elif eps_inside:
            out = x / (size + eps).sqrt()
        else:
            out = x / (size.sqrt() + eps)
        return out * weight if gain else out

    return rms_norm


def _norm_all(x, weight, eps=1e-5):
    return x / (x.pow(2).mean() + eps).sqrt() * weight


# --------------------------------------------------------------------------- question 2
def _gqa(mapping="interleave", causal=True, scale="head", dim=-1, fused=False):
    def grouped_query_attention(q, k, v):
        heads, kv = q.shape[1], k.shape[1]
        group = heads // kv
        if mapping == "interleave":
            k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
        elif mapping == "repeat":
            k, v = k.repeat(1, group, 1, 1), v.repeat(1, group, 1, 1)
        else:
            k, v = k[:, [0] * heads], v[:, [0] * heads]
        if fused:
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        d = q.shape[-1]
        size = {"head": d, "model": d * heads, "none": 1}[scale]
        scores = q @ k.transpose(-2, -1) / math.sqrt(size)
        if causal:
            t = q.shape[-2]
            diagonal = 0 if causal == "strict" else 1
            scores = scores + torch.full((t, t), -math.inf).triu(diagonal)
        return scores.softmax(dim) @ v

    return grouped_query_attention


# --------------------------------------------------------------------------- question 4
def _step(first="t", rotate_values=False, rotate_cache=False, rotate_queries=True):
    def rope_cache_step(q_new, k_new, v_new, cache_k, cache_v):
        t, n = cache_k.shape[1], q_new.shape[1]
        start = {"t": t, "t+1": t + 1, "t-1": t - 1, "0": 0}[first]
        positions = torch.arange(start, start + n)
        q = _rope(q_new, positions) if rotate_queries else q_new
        k = _rope(k_new, positions)
        v = _rope(v_new, positions) if rotate_values else v_new
        if rotate_cache:
            cache_k = _rope(cache_k, torch.arange(t))
        keys, values = torch.cat([cache_k, k], 1), torch.cat([cache_v, v], 1)
        allowed = torch.ones(n, t + n, dtype=torch.bool).tril(t)
        return F.scaled_dot_product_attention(q, keys, values, attn_mask=allowed), keys, values

    return rope_cache_step


# --------------------------------------------------------------------------- question 5
def _weights(kv="grouped", ffn=3, tied=True, norm=1, biases=False, gains_in_parts=False):
    def gpt_weights(vocab_size, d_model, num_layers, num_heads, num_kv_heads, d_ff):
        head = d_model // num_heads
        width = {"grouped": num_kv_heads * head, "full": d_model, "one": head}[kv]
        attention = d_model * d_model * 2 + d_model * width * 2
        feed = ffn * d_model * d_ff
        if biases:
            attention += 2 * d_model + 2 * width
            feed += (ffn - 1) * d_ff + d_model
        gains = norm * d_model
        embedding = vocab_size * d_model * (1 if tied else 2)
        total = embedding + num_layers * (attention + feed + 2 * gains) + gains
        if gains_in_parts:
            attention, feed = attention + gains, feed + gains
        return {"attention": attention, "ffn": feed, "total": total}

    return gpt_weights


# --------------------------------------------------------------------------- question 6
def _top_p(rule="before", descending=True, scatter=True):
    def top_p_keep(probs, p):
        values, order = probs.sort(dim=-1, descending=descending)
        running = values.cumsum(-1)
        keep = {"before": running - values < p, "within": running <= p,
                "each": values >= p}[rule]
        if not scatter:
            return keep
        out = torch.zeros_like(keep)
        out.scatter_(-1, order, keep)
        return out

    return top_p_keep


# --------------------------------------------------------------------------- question 7
def _smoothing(rows="pairs", reverse=False, extra="alpha_v", total=False, pick="value"):
    def smoothing_experiment(train_ids, val_ids, vocab_size, alphas):
        a, b = train_ids[:-1], train_ids[1:]
        if reverse:
            a, b = b, a
        counts = torch.zeros(vocab_size, vocab_size, dtype=torch.float64)
        for x, y in zip(a.tolist(), b.tolist(), strict=True):
            counts[x, y] += 1
        start = {"pairs": counts.sum(1),
                 "tokens": torch.bincount(train_ids, minlength=vocab_size).double(),
                 "all": torch.full((vocab_size,), float(len(a)), dtype=torch.float64)}[rows]
        out = []
        for alpha in alphas:
            add = {"alpha_v": alpha * vocab_size, "alpha": alpha,
                   "seen": alpha * (int(train_ids.max()) + 1)}[extra]
            p = (counts + alpha) / (start[:, None] + add)
            logs = torch.log(p[val_ids[:-1], val_ids[1:]])
            out.append(math.exp(-(logs.sum() if total else logs.mean()).item()))
        best = {"value": alphas[out.index(min(out))], "index": out.index(min(out)),
                "largest": max(alphas)}[pick]
        return {"perplexities": out, "best_alpha": best}

    return smoothing_experiment


LISTED = [
    ("q1_rms_norm", _norm(dim=0), "along the first axis"),
    ("q1_rms_norm", _norm(dim=-2), "along the positions"),
    ("q1_rms_norm", _norm_all, "over the whole tensor"),
    ("q1_rms_norm", _norm(centre=True), "that is layer normalisation"),
    ("q1_rms_norm", _norm(eps_inside=False), "added after the square root"),
    ("q1_rms_norm", _norm(use_eps=False), "you ignore the eps argument"),
    ("q1_rms_norm", _norm(gain=False), "not multiplied by the learned gain"),
    ("q1_rms_norm", _norm(total=True), "root of the sum of the squares"),
    ("q2_gqa", _gqa(mapping="repeat"), "take the key/value heads in turn"),
    ("q2_gqa", _gqa(mapping="repeat", fused=True), "take the key/value heads in turn"),
    ("q2_gqa", _gqa(mapping="first"), "that is multi-query attention"),
    ("q2_gqa", _gqa(causal=False), "also sees the keys after it"),
    ("q2_gqa", _gqa(causal=False, fused=True), "also sees the keys after it"),
    ("q2_gqa", _gqa(causal="strict"), "a fully masked row gives NaN"),
    ("q2_gqa", _gqa(scale="none"), "not divided by the square root of the head size"),
    ("q2_gqa", _gqa(scale="model"), "square root of the whole width"),
    ("q2_gqa", _gqa(dim=-2), "normalises over the queries"),
    ("q4_rope_cache", _step(first="t+1", rotate_values=True), "what the given code computes"),
    ("q4_rope_cache", _step(rotate_values=True), "the values are still rotated"),
    ("q4_rope_cache", _step(first="t+1"), "still sit one position too far"),
    ("q4_rope_cache", _step(first="t-1"), "one position too early"),
    ("q4_rope_cache", _step(first="0"), "as if they were the first of the sequence"),
    ("q4_rope_cache", _step(rotate_cache=True), "rotated the cached keys again"),
    ("q4_rope_cache", _step(rotate_queries=False), "new queries are not rotated"),
    ("q5_weights", _weights(kv="full"), "as wide as the query's"),
    ("q5_weights", _weights(kv="one"), "produce one head"),
    ("q5_weights", _weights(ffn=2), "SwiGLU has three"),
    ("q5_weights", _weights(tied=False), "tied weights"),
    ("q5_weights", _weights(norm=0), "leaves out the RMSNorm gains"),
    ("q5_weights", _weights(norm=2), "as layer normalisation has"),
    ("q5_weights", _weights(biases=True), "biases in the linear layers"),
    ("q5_weights", _weights(gains_in_parts=True), "the gains count in the total"),
    ("q6_top_p", _top_p(rule="within"), "the token that takes the total past p is lost"),
    ("q6_top_p", _top_p(descending=False), "the least likely tokens"),
    ("q6_top_p", _top_p(rule="each"), "each at least p likely"),
    ("q6_top_p", _top_p(scatter=False), "in the sorted order"),
    ("q7_smoothing", _smoothing(rows="tokens"), "the last training token starts no pair"),
    ("q7_smoothing", _smoothing(rows="all"), "joint probability"),
    ("q7_smoothing", _smoothing(reverse=True), "the wrong way round"),
    ("q7_smoothing", _smoothing(extra="alpha"), "added alpha once"),
    ("q7_smoothing", _smoothing(total=True), "summed negative log-likelihood"),
    ("q7_smoothing", _smoothing(extra="seen"), "up to the largest one in the training text"),
]


test_every_wrong_choice_has_its_own_message = each_wrong_choice_test(
    EXERCISE, ["q3_predict_invariance"])


# --------------------------------------------------------------------------- not listed
def _norm_float_eps(x, weight, eps=1e-5):
    """eps ignored in favour of a constant of one's own: right only when eps is 1e-5."""
    return _norm()(x, weight, 1e-5)


def _gqa_transposed_output(q, k, v):
    return _gqa()(q, k, v).transpose(1, 2)


def _gqa_half_groups(q, k, v):
    """Each key/value head repeated for half of the query heads it should serve: the
    first query head of a group is right, the others read a neighbouring group."""
    heads, kv = q.shape[1], k.shape[1]
    group = heads // kv
    order = torch.arange(heads) // group
    order = torch.where(torch.arange(heads) % group == 0, order, (order + 1) % kv)
    return F.scaled_dot_product_attention(q, k[:, order], v[:, order], is_causal=True)


def _step_output_only(q_new, k_new, v_new, cache_k, cache_v):
    return _step()(q_new, k_new, v_new, cache_k, cache_v)[0]


def _step_keys_unrotated_in_cache(q_new, k_new, v_new, cache_k, cache_v):
    """Right output, but the cache given back holds the new keys before their rotation."""
    out, _, values = _step()(q_new, k_new, v_new, cache_k, cache_v)
    return out, torch.cat([cache_k, k_new], 1), values


def _top_p_float(probs, p):
    return _top_p()(probs, p).float()


def _top_p_strict(probs, p):
    """Keep until the running total is strictly above p (right whenever no total equals p
    exactly, which the cases never have): a correct answer."""
    values, order = probs.sort(dim=-1, descending=True)
    keep = torch.cat([torch.ones_like(values[..., :1], dtype=torch.bool),
                      values.cumsum(-1)[..., :-1] < p], -1)
    return torch.zeros_like(keep).scatter(-1, order, keep)


NOT_LISTED = [
    ("q1_rms_norm", _norm_float_eps, "you ignore the eps argument (case 3 passes eps = 1)"),
    ("q1_rms_norm", _norm(unbiased_std=True), "values differ"),
    ("q2_gqa", _gqa_transposed_output, "expected shape"),
    ("q2_gqa", _gqa_half_groups, "the first query head of each group is right"),
    ("q4_rope_cache", _step_output_only, "expected a tuple of length 3, got a tensor"),
    ("q4_rope_cache", _step_keys_unrotated_in_cache,
     "your output is right, but the keys you return are not"),
    ("q5_weights", lambda *args: {"attention": 1, "ffn": 2}, "return a dict with the keys"),
    ("q6_top_p", _top_p_float, "boolean"),
    ("q3_predict_invariance",
     lambda: {"reversed_cache": "same", "shifted_positions": "the same",
              "scaled_input": "the same"}, "'same' is not one of the choices"),
    ("q7_smoothing", lambda *args: {"perplexities": [1.0], "best_alpha": 0.1}, "perplexities"),
]


test_each_mistake_loses_points_with_a_message_that_names_it = named_mistakes_test(
    EXERCISE, LISTED, NOT_LISTED)


def _norm_rsqrt_float64(x, weight, eps=1e-5):
    y = x.double()
    return (y * torch.rsqrt(y.square().mean(-1, keepdim=True) + eps)).to(x.dtype) * weight


def _gqa_loop(q, k, v):
    """Right: one head at a time, with PyTorch's fused kernel."""
    group = q.shape[1] // k.shape[1]
    heads = [F.scaled_dot_product_attention(q[:, h], k[:, h // group], v[:, h // group],
                                            is_causal=True) for h in range(q.shape[1])]
    return torch.stack(heads, 1)


def _weights_by_matrix(vocab_size, d_model, num_layers, num_heads, num_kv_heads, d_ff):
    """Right, matrix by matrix."""
    head = d_model // num_heads
    shapes = [(d_model, d_model), (num_kv_heads * head, d_model),
              (num_kv_heads * head, d_model), (d_model, d_model)]
    attention = sum(a * b for a, b in shapes)
    ffn = sum(a * b for a, b in [(d_ff, d_model)] * 3)
    total = vocab_size * d_model + d_model + num_layers * (attention + ffn + 2 * d_model)
    return {"attention": attention, "ffn": ffn, "total": total}


def _smoothing_log2(train_ids, val_ids, vocab_size, alphas):
    """Right: the perplexity in bits, 2 to the mean of -log2 p, is the same number."""
    result = _smoothing()(train_ids, val_ids, vocab_size, alphas)
    counts = torch.zeros(vocab_size, vocab_size, dtype=torch.float64)
    counts.index_put_((train_ids[:-1], train_ids[1:]),
                      torch.ones(len(train_ids) - 1, dtype=torch.float64), accumulate=True)
    out = []
    for alpha in alphas:
        p = (counts + alpha) / (counts.sum(1, keepdim=True) + alpha * vocab_size)
        out.append(2 ** (-p[val_ids[:-1], val_ids[1:]].log2().mean().item()))
    return {"perplexities": out, "best_alpha": result["best_alpha"]}


def _smoothing_tensor(train_ids, val_ids, vocab_size, alphas):
    """Right: the perplexities as a 1-D tensor."""
    result = _smoothing()(train_ids, val_ids, vocab_size, alphas)
    return {**result, "perplexities": torch.tensor(result["perplexities"])}


def _smoothing_tuple(train_ids, val_ids, vocab_size, alphas):
    """Right: the perplexities as a tuple."""
    result = _smoothing()(train_ids, val_ids, vocab_size, alphas)
    return {**result, "perplexities": tuple(result["perplexities"])}


CORRECT_BUT_DIFFERENT = [
    ("q1_rms_norm", _norm_rsqrt_float64),
    ("q2_gqa", _gqa_loop),
    ("q2_gqa", _gqa(fused=True)),
    ("q4_rope_cache", _step()),
    ("q5_weights", _weights_by_matrix),
    ("q6_top_p", _top_p_strict),
    ("q7_smoothing", _smoothing_log2),
    ("q7_smoothing", _smoothing_tensor),
    ("q7_smoothing", _smoothing_tuple),
]


@pytest.mark.parametrize("question_id, answer", CORRECT_BUT_DIFFERENT,
                         ids=[f"{q}-{i}" for i, (q, _) in enumerate(CORRECT_BUT_DIFFERENT)])
def test_a_correct_but_different_answer_gets_full_marks(question_id, answer):
    result = judge(EXERCISE, question_id, answer)
    assert result.passed, result.message


def test_partial_credit_per_part():
    result = judge(EXERCISE, "q5_weights", _weights(norm=0))
    assert (result.points, result.status) == (2, "failed")
    assert "'total'" in result.message and "'attention'" not in result.message
    result = judge(EXERCISE, "q7_smoothing", _smoothing(extra="alpha"))
    assert result.points in (0, 1) and "added alpha once" in result.message


def test_alpha_counted_from_the_training_ids_loses_the_perplexities():
    """A held-back case's text never shows the vocabulary's highest ids: int(train_ids.max())
    + 1 instead of vocab_size in the denominator is caught there."""
    result = judge(EXERCISE, "q7_smoothing", _smoothing(extra="seen"))
    assert result.points == 1 and "held-back case 5" in result.message
    assert "up to the largest one in the training text" in result.message


@pytest.mark.parametrize("answer, words", [
    (_smoothing(extra="alpha"), "fix those first"),
    (_smoothing(pick="index"), "not its index in alphas"),
    (_smoothing(pick="largest"), "not the alpha of the lowest perplexity"),
])
def test_a_wrong_best_alpha_is_never_named_after_a_mistake_it_shares(answer, words):
    """best_alpha takes one of three or four values, which several mistakes share: its
    feedback says where a wrong one comes from, and names no mistake."""
    result = judge(EXERCISE, "q7_smoothing", answer)
    assert "'best_alpha'" in result.message and words in result.message
    assert "joint probability" not in result.message


def test_norm_gains_counted_in_the_parts_lose_those_parts_only():
    result = judge(EXERCISE, "q5_weights", _weights(gains_in_parts=True))
    assert result.points == 1 and "the gains count in the total" in result.message


def test_each_reference_names_its_own_question():
    """A reference's docstring that says "the reference of question N" has N right."""
    import re

    from attention_course.grading.registry import get_exercise

    for number, question in enumerate(get_exercise(EXERCISE).questions, 1):
        named = re.findall(r"reference of question (\d+)", question.reference.__doc__ or "")
        assert named in ([], [str(number)]), (question.id, named)


def test_derived_numbers_are_never_shown():
    """A derive question's message says how an answer misses, not what the answer is."""
    result = feedback("q5_weights", lambda *args: {"attention": 3, "ffn": 3, "total": 3})
    assert "expected" not in result.message


def test_an_empty_cache_hides_the_offset_from_the_output():
    """With an empty cache the off-by-one positions change the keys given back, not the
    output: the feedback says so for the visible case without a cache."""
    result = feedback("q4_rope_cache", _step(first="t+1"))
    assert "empty cache" in result.message


# --------------------------------------------------------------------------- the page
def _flat(text: str) -> str:
    return "".join(text.split())


def test_question_3s_experiment_comes_after_the_committed_prediction(capsys):
    """Nothing on the learner's page measures question 3's changes before its check cell,
    and the experiment measures only once ``predict_invariance`` returns an answer."""
    nb = json.loads(learner_path(EXERCISE).read_text(encoding="utf-8"))
    cells = [(c["cell_type"], "".join(c["source"])) for c in nb["cells"]]
    (check_at,) = [i for i, (kind, source) in enumerate(cells) if kind == "code"
                   and _flat(source) == _flat('check("11_small_gpt", predict_invariance)')]
    for kind, source in cells[:check_at]:
        if kind == "markdown" or source.startswith("def predict_invariance"):
            continue
        for telltale in ("largest change", "order", "10 * x", "shift", "+ 100"):
            assert telltale not in source, (telltale, source[:60])
    (experiment,) = [source for kind, source in cells[check_at:]
                     if kind == "code" and "largest change" in source]
    assert experiment.index("predict_invariance()") < experiment.index("rope(k, pos)")

    def predict_invariance():
        raise NotImplementedError("replace this line with your code")

    for answer in (predict_invariance, dict, lambda: {"reversed_cache": "the same"},
                   lambda: dict.fromkeys(("reversed_cache", "shifted_positions",
                                          "scaled_input"), "the same ")):
        exec(experiment, {"torch": torch, "math": math, "seed_everything": lambda s: None,
                          "predict_invariance": answer, "rope": _rope})
        printed = capsys.readouterr().out
        assert printed.startswith("write predict_invariance") and "largest" not in printed


def test_question_3_takes_a_choice_with_stray_spaces_and_lists_the_choices_for_a_bool():
    right = {"reversed_cache": "the same", "shifted_positions": " the same",
             "scaled_input": "changes\n"}
    assert judge(EXERCISE, "q3_predict_invariance", lambda: right).passed
    result = judge(EXERCISE, "q3_predict_invariance",
                   lambda: {**right, "reversed_cache": False})
    assert result.points == 2
    assert "False is not one of the choices: 'the same', 'changes'" in result.message


def test_question_3_cannot_be_guessed_with_one_answer_for_all():
    """The answers are not all alike: one choice everywhere earns at most 2 of 3 points."""
    keys = ("reversed_cache", "shifted_positions", "scaled_input")
    for choice in ("the same", "changes"):
        result = judge(EXERCISE, "q3_predict_invariance",
                       lambda choice=choice: dict.fromkeys(keys, choice))
        assert result.points < 3, choice
    result = judge(EXERCISE, "q3_predict_invariance", lambda: dict.fromkeys(keys, "the same"))
    assert result.points == 2 and "the residual path adds it to 10 x" in result.message


def test_question_3s_description_does_not_give_the_answer_away():
    nb = json.loads(learner_path(EXERCISE).read_text(encoding="utf-8"))
    for cell in nb["cells"]:
        source = "".join(cell["source"])
        assert "do not notice" not in source and "does not change" not in source


@pytest.mark.parametrize("step, fixed", [(_step(), True), (_step(first="t+1"), False),
                                         (_step(rotate_values=True), False)])
def test_question_4s_self_check_does_not_confirm_a_half_fix(capsys, step, fixed):
    """The cell that feeds a sequence through the step token by token starts from a cache
    filled as a prefill fills it, and compares the keys too: with the values fixed but
    the positions one too far (RoPE sees only offsets) it does not print a small gap."""
    from attention_course.device import seed_everything

    (cell,) = [c for c in notebook_cells(learner_path(EXERCISE))
               if "one token at a time vs the whole sequence" in c]
    exec(cell, {"torch": torch, "math": math, "F": F, "seed_everything": seed_everything,
                "rope": _rope, "rope_cache_step": step})
    gaps = [float(line.rsplit(": ", 1)[1]) for line in capsys.readouterr().out.splitlines()]
    assert len(gaps) == 2 and (max(gaps) < 1e-5) == fixed, gaps


def test_the_learners_page_shows_no_answer():
    """No visible cell computes the nucleus, the grouped heads or the smoothed counts."""
    for source in notebook_cells(learner_path(EXERCISE)):
        for telltale in ("repeat_interleave", "cumsum", "index_put_", "rsqrt",
                         "torch.arange(t, t + n)"):
            assert telltale not in source, (telltale, source[:60])


def test_the_learners_starter_is_recognised_once_its_raise_line_is_gone():
    (rope_cell,) = [c for c in notebook_cells(learner_path(EXERCISE))
                    if c.startswith("def rope(")]
    namespace: dict = {"torch": torch, "math": math}
    exec(rope_cell, namespace)
    exec(learner_starter(EXERCISE, "def rope_cache_step"), namespace)
    result = feedback("q4_rope_cache", namespace["rope_cache_step"])
    assert "what the given code computes" in result.message


# --------------------------------------------------------------------------- the real grader

MISTAKES_IN_FOUR_QUESTIONS = [
    # q2: the key/value heads cycled
    ("k.repeat_interleave(group, dim=1)", "k.repeat(1, group, 1, 1)"),
    ("v.repeat_interleave(group, dim=1)", "v.repeat(1, group, 1, 1)"),
    # q4: one bug fixed (the values), the positions still one too far
    ("torch.arange(t, t + n)", "torch.arange(t + 1, t + n + 1)"),
    # q5: a ReLU network's two matrices
    ("ffn = 3 * d_model * d_ff", "ffn = 2 * d_model * d_ff"),
    # q6: the crossing token lost
    ("keep_sorted = before < p", "keep_sorted = sorted_probs.cumsum(dim=-1) <= p"),
]


GRADED = {  # question: (points left, words of the message)
    "q1_rms_norm": (2, "all 6 cases match"),
    "q2_gqa": (0, "take the key/value heads in turn"),
    "q3_predict_invariance": (3, "every part matches"),
    "q4_rope_cache": (0, "still sit one position too far"),
    "q5_weights": (1, "SwiGLU has three"),
    "q6_top_p": (0, "the token that takes the total past p is lost"),
    "q7_smoothing": (3, "every part matches"),
}


def test_grader_names_one_line_mistakes(tmp_path, server):
    record = graded_record(EXERCISE, tmp_path,
                           replace_in_solution(EXERCISE, *MISTAKES_IN_FOUR_QUESTIONS), server)
    assert_each_question(record, GRADED)
    assert (record.score, record.max_score) == (9, 19)


def test_grader_refuses_the_chapters_modules(tmp_path, server):
    cells = replace_in_solution(
        EXERCISE, ("    # BEGIN SOLUTION\n    kv_width",
                   "    # BEGIN SOLUTION\n    from attention_course import gpt  # noqa: F401\n"
                   "    kv_width"))
    graded = grade_cells(EXERCISE, tmp_path, cells, server)
    assert graded["q5_weights"].status == "error"
    assert "write the code yourself" in graded["q5_weights"].message
