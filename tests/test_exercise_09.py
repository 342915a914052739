"""Exercise 9's typical mistakes, applied to the reference solution: each loses points
with a message that names it.

The first half are mistakes the spec lists (``Mistake``s, recognised by their outputs),
written here independently of the spec; the second half are mistakes it does not list,
whose feedback must still say what is off (a diagnosis, a shape, a type, a choice). Most
answers are judged by ``check``'s own code in this process; a few notebooks with one
line changed go through the real grader.
"""

from __future__ import annotations

import functools
import json
import math

import pytest
import torch
import torch.nn.functional as F
from grading_helpers import (
    choice,
    each_wrong_choice_test,
    grade_cells,
    judge,
    learner_path,
    learner_starter,
    lost,
    named_mistakes_test,
    notebook_cells,
    replace_in_solution,
)

from attention_course.device import seed_everything

EXERCISE = "09_decoding"


feedback = functools.partial(lost, EXERCISE)


# --------------------------------------------------------------------------- question 1
def _step(mask="bottom_right", order="old_first", scale="head", attend="all", dim=-1,
          append=True, hide="inf"):
    """A cached attention step written with PyTorch's fused attention where it can be."""

    def cached_attention_step(x_new, w_q, w_k, w_v, cache_k, cache_v):
        q, k_new, v_new = x_new @ w_q, x_new @ w_k, x_new @ w_v
        if not append:
            keys, values = cache_k, cache_v
        elif order == "old_first":
            keys, values = torch.cat([cache_k, k_new], 1), torch.cat([cache_v, v_new], 1)
        else:
            keys, values = torch.cat([k_new, cache_k], 1), torch.cat([v_new, cache_v], 1)
        att_k, att_v = (cache_k, cache_v) if attend == "cache" else (keys, values)
        n, t = q.shape[1], att_k.shape[1]
        if t == 0:
            return torch.zeros_like(q), keys, values
        allowed = {"bottom_right": torch.ones(n, t, dtype=torch.bool).tril(t - n),
                   "top_left": torch.ones(n, t, dtype=torch.bool).tril(0),
                   "no_diagonal": torch.ones(n, t, dtype=torch.bool).tril(t - n - 1),
                   "one_future": torch.ones(n, t, dtype=torch.bool).tril(t - n + 1),
                   "none": torch.ones(n, t, dtype=torch.bool)}[mask]
        if attend == "cache":
            allowed = torch.ones(n, t, dtype=torch.bool)
        size = {"head": q.shape[-1], "model": x_new.shape[-1], "none": 1}[scale]
        scores = q @ att_k.transpose(1, 2) / math.sqrt(size)
        if hide == "zero":  # scores times the mask: hidden keys score 0
            weights = torch.softmax(scores * allowed, dim=dim)
        elif hide == "after":  # weights times the mask, not renormalised
            weights = torch.softmax(scores, dim=dim) * allowed
        else:
            weights = torch.softmax(scores.masked_fill(~allowed, -math.inf),
                                    dim=dim).nan_to_num(0.0)
        return weights @ att_v, keys, values

    return cached_attention_step


def _is_causal_step(x_new, w_q, w_k, w_v, cache_k, cache_v):
    """PyTorch's is_causal=True with more keys than queries: top-left."""
    keys = torch.cat([cache_k, x_new @ w_k], 1)
    values = torch.cat([cache_v, x_new @ w_v], 1)
    out = F.scaled_dot_product_attention(x_new @ w_q, keys, values, is_causal=True)
    return out, keys, values


# --------------------------------------------------------------------------- question 2
def _chunked(order="old_first", mask="bottom_right"):
    def chunked_attention(x, w_q, w_k, w_v, chunk):
        b, n, _ = x.shape
        cache_k, cache_v = x.new_zeros(b, 0, w_k.shape[1]), x.new_zeros(b, 0, w_v.shape[1])
        outputs = []
        for start in range(0, n, chunk):
            x_new = x[:, start:start + chunk]
            new = (x_new @ w_k, x_new @ w_v)
            if order == "old_first":
                cache_k, cache_v = torch.cat([cache_k, new[0]], 1), torch.cat([cache_v, new[1]], 1)
            else:
                cache_k, cache_v = torch.cat([new[0], cache_k], 1), torch.cat([new[1], cache_v], 1)
            q = x_new @ w_q
            m, t = q.shape[1], cache_k.shape[1]
            if mask == "is_causal":
                outputs.append(F.scaled_dot_product_attention(q, cache_k, cache_v,
                                                              is_causal=True))
                continue
            allowed = {"bottom_right": torch.ones(m, t, dtype=torch.bool).tril(t - m),
                       "none": torch.ones(m, t, dtype=torch.bool),
                       "no_diagonal": torch.ones(m, t, dtype=torch.bool).tril(t - m - 1),
                       "one_future": torch.ones(m, t, dtype=torch.bool).tril(t - m + 1)}[mask]
            outputs.append(F.scaled_dot_product_attention(q, cache_k, cache_v,
                                                          attn_mask=allowed).nan_to_num(0.0))
        return torch.cat(outputs, dim=1)

    return chunked_attention


# --------------------------------------------------------------------------- question 3
def _work(rows=lambda t: t * (t + 1) // 2, pairs=lambda t: t * (t + 1) * (t + 2) // 6,
          cached=lambda t: t * (t + 1) // 2):
    def decoding_work(num_tokens):
        return {"uncached_rows": rows(num_tokens), "uncached_pairs": pairs(num_tokens),
                "cached_pairs": cached(num_tokens)}

    return decoding_work


def _loop_count(num_tokens):
    """Counting step by step, as a learner might, but every pair of a step (no mask)."""
    return {"uncached_rows": sum(range(1, num_tokens + 1)),
            "uncached_pairs": sum(t * t for t in range(1, num_tokens + 1)),
            "cached_pairs": sum(range(1, num_tokens + 1))}


# --------------------------------------------------------------------------- question 5
def _heads(per_head, divisor=True, strict=False, smallest=False, nothing=0):
    def largest_num_kv_heads(num_layers, num_heads, head_dim, bytes_per_number, num_tokens,
                             budget_bytes):
        size = per_head(num_layers, head_dim, bytes_per_number, num_tokens)
        best = nothing
        candidates = range(num_heads, 0, -1) if not smallest else range(1, num_heads + 1)
        for h in candidates:
            if divisor and num_heads % h:
                continue
            if (h * size < budget_bytes) if strict else (h * size <= budget_bytes):
                return h
        return best

    return largest_num_kv_heads


def _bytes(layers, head_dim, number, tokens):
    return 2 * layers * head_dim * number * tokens


# --------------------------------------------------------------------------- question 6
def _beam(width=lambda k, v: k, rank=lambda a, b: a + b, report=lambda a, b: a + b):
    def two_step_beam(log_p1, log_p2, beam_size):
        vocab = log_p1.shape[0]
        k = max(1, min(width(beam_size, vocab), vocab))
        kept = sorted(range(vocab), key=lambda a: -float(log_p1[a]))[:k]
        best = max(((a, b) for a in kept for b in range(vocab)),
                   key=lambda ab: float(rank(log_p1[ab[0]], log_p2[ab])))
        return best[0], best[1], float(report(log_p1[best[0]], log_p2[best]))

    return two_step_beam


LISTED = [
    # q1: the mask, the cache, the scale, the softmax
    ("q1_cached_step", _is_causal_step, "as if they were the first positions"),
    ("q1_cached_step", _step(mask="top_left"), "as if they were the first positions"),
    ("q1_cached_step", _step(mask="none"), "also sees the new tokens after it"),
    ("q1_cached_step", _step(mask="no_diagonal"), "denied its own key"),
    ("q1_cached_step", _step(order="new_first"), "come before the cached ones"),
    ("q1_cached_step", _step(mask="one_future"), "your mask is shifted by one"),
    ("q1_cached_step", _step(hide="zero"), "a score of 0 still gets weight"),
    ("q1_cached_step", _step(hide="after"), "weights after the softmax"),
    ("q1_cached_step", _step(append=False, attend="cache"), "hold only the old cache"),
    ("q1_cached_step", _step(attend="cache"), "attend only to the old cache"),
    ("q1_cached_step", _step(scale="none"), "not divided by the square root of the head size"),
    ("q1_cached_step", _step(scale="model"), "square root of the input width"),
    ("q1_cached_step", _step(dim=-2), "normalises over the queries"),
    # q2: the given code and its half-fixes
    ("q2_chunked_debug", _chunked("new_first", "is_causal"), "what the given code computes"),
    ("q2_chunked_debug", _chunked("new_first", "bottom_right"),
     "still go in front of the cache"),
    ("q2_chunked_debug", _chunked("old_first", "is_causal"), "still aligned top-left"),
    ("q2_chunked_debug", _chunked("old_first", "none"), "without a mask"),
    ("q2_chunked_debug", _chunked("new_first", "none"), "without a mask"),
    ("q2_chunked_debug", _chunked("old_first", "no_diagonal"), "denied its own key"),
    # q3: the counts
    ("q3_work", _work(rows=lambda t: t * t), "you counted T tokens at every step"),
    ("q3_work", _work(rows=lambda t: t * (t - 1) // 2), "already reads one token"),
    ("q3_work", _work(rows=lambda t: t), "that is the count with the cache"),
    ("q3_work", _work(rows=lambda t: sum(s + 1 for s in range(1, t + 1))),
     "reads t tokens, <bos> included"),
    ("q3_work", _work(pairs=lambda t: sum((s + 1) * (s + 2) // 2 for s in range(1, t + 1))),
     "attends among t tokens, <bos> included"),
    ("q3_work", _work(cached=lambda t: sum(s + 1 for s in range(1, t + 1))),
     "meets t keys, <bos> and its own included"),
    ("q3_work", _loop_count, "every query-key pair of a step"),
    ("q3_work", _work(pairs=lambda t: (t - 1) * t * (t + 1) // 6), "left out the diagonal"),
    ("q3_work", _work(pairs=lambda t: t * (t + 1) // 2), "the pairs of one step"),
    ("q3_work", _work(cached=lambda t: t), "its one query meets t keys"),
    ("q3_work", _work(cached=lambda t: t * (t - 1) // 2), "attends to itself too"),
    # q5: the budget
    ("q5_kv_heads", _heads(lambda L, d, b, t: L * d * b * t), "a key and a value"),
    ("q5_kv_heads", _heads(lambda L, d, b, t: 2 * d * b * t), "every layer of the decoder"),
    ("q5_kv_heads", _heads(_bytes, divisor=False), "does not divide the number of query"),
    ("q5_kv_heads", _heads(lambda L, d, b, t: 2 * L * b * t), "one number per dimension"),
    ("q5_kv_heads", _heads(lambda L, d, b, t: 2 * L * d * t), "you counted numbers, not bytes"),
    ("q5_kv_heads",
     lambda L, H, d, b, t, budget: _heads(lambda *a: H * _bytes(*a))(L, H, d, b, t, budget),
     "once per query head as well"),
    ("q5_kv_heads", _heads(lambda L, d, b, t: 8 * _bytes(L, d, b, t)), "you counted bits"),
    ("q5_kv_heads", _heads(_bytes, strict=True), "fills the budget exactly"),
    ("q5_kv_heads", _heads(_bytes, smallest=True), "the smallest number that fits"),
    ("q5_kv_heads", _heads(_bytes, nothing=1), "the answer is 0"),
    # q6: the beam
    ("q6_beam", _beam(width=lambda k, v: 1), "that is greedy decoding"),
    ("q6_beam", _beam(width=lambda k, v: v), "as wide as the vocabulary"),
    ("q6_beam", _beam(width=lambda k, v: k + 1), "one first token more"),
    ("q6_beam", _beam(width=lambda k, v: k - 1), "one first token fewer"),
    ("q6_beam", _beam(rank=lambda a, b: b), "second token's log-probability alone"),
    ("q6_beam", _beam(rank=lambda a, b: a * b, report=lambda a, b: a * b),
     "multiplied log-probabilities"),
    ("q6_beam", _beam(report=lambda a, b: b), "the second token's alone"),
    ("q6_beam", _beam(report=lambda a, b: (a + b) / 2), "the mean of the two tokens'"),
]


test_every_wrong_choice_has_its_own_message = each_wrong_choice_test(
    EXERCISE, ["q4_predict_mqa"])


# --------------------------------------------------------------------------- not listed
def _step_keys_from_queries(x_new, w_q, w_k, w_v, cache_k, cache_v):
    """A typo: the new keys come from the query projection."""
    return _step()(x_new, w_q, w_q, w_v, cache_k, cache_v)


def _step_additive_ones(x_new, w_q, w_k, w_v, cache_k, cache_v):
    """The mask added as numbers (1 = allowed) instead of hiding the future."""
    q = x_new @ w_q
    keys = torch.cat([cache_k, x_new @ w_k], 1)
    values = torch.cat([cache_v, x_new @ w_v], 1)
    n, t = q.shape[1], keys.shape[1]
    mask = torch.ones(n, t).tril(t - n)
    scores = q @ keys.transpose(1, 2) / math.sqrt(q.shape[-1]) + mask
    return torch.softmax(scores, -1) @ values, keys, values


def _step_wrong_axis(x_new, w_q, w_k, w_v, cache_k, cache_v):
    """The cache extended along the features instead of the positions."""
    out, _, _ = _step()(x_new, w_q, w_k, w_v, cache_k, cache_v)
    if cache_k.shape[1] != x_new.shape[1]:
        raise RuntimeError("Sizes of tensors must match except in dimension 2")
    return out, torch.cat([cache_k, x_new @ w_k], 2), torch.cat([cache_v, x_new @ w_v], 2)


def _step_output_only(x_new, w_q, w_k, w_v, cache_k, cache_v):
    return _step()(x_new, w_q, w_k, w_v, cache_k, cache_v)[0]


def _beam_probability(log_p1, log_p2, beam_size):
    first, second, log_prob = _beam()(log_p1, log_p2, beam_size)
    return first, second, math.exp(log_prob)


def _beam_swapped(log_p1, log_p2, beam_size):
    first, second, log_prob = _beam()(log_p1, log_p2, beam_size)
    return second, first, log_prob


def _chunked_own_chunk_only(x, w_q, w_k, w_v, chunk):
    """The cache replaced by each chunk instead of extended: the same outputs as the given
    code, whose message must say that each token sees only its own chunk."""
    outputs = []
    for start in range(0, x.shape[1], chunk):
        x_new = x[:, start:start + chunk]
        outputs.append(F.scaled_dot_product_attention(x_new @ w_q, x_new @ w_k, x_new @ w_v,
                                                      is_causal=True))
    return torch.cat(outputs, dim=1)


def _beam_index_by_beam_size(log_p1, log_p2, beam_size):
    """The flat index of the best extension divided by the beam size, not the vocabulary."""
    vocab = log_p1.shape[0]
    kept = log_p1.topk(min(beam_size, vocab)).indices
    totals = log_p1[kept, None] + log_p2[kept]
    best = int(totals.argmax())
    return int(kept[best // beam_size]), best % vocab, float(totals.flatten()[best])


def _beam_rank(log_p1, log_p2, beam_size):
    """The position in the sorted beam returned instead of the token id."""
    vocab = log_p1.shape[0]
    kept = log_p1.topk(min(beam_size, vocab)).indices
    totals = log_p1[kept, None] + log_p2[kept]
    best = int(totals.argmax())
    return best // vocab, best % vocab, float(totals.flatten()[best])


NOT_LISTED = [
    ("q1_cached_step", _step_keys_from_queries, "output[0]: values differ"),
    ("q1_cached_step", _step_additive_ones, "your keys and values are right, the output is not"),
    ("q1_cached_step", _step_wrong_axis, "raised RuntimeError"),
    ("q1_cached_step", _step_output_only, "expected a tuple of length 3, got a tensor"),
    ("q2_chunked_debug", _chunked("old_first", "one_future"), "without a mask"),
    ("q2_chunked_debug", lambda x, w_q, w_k, w_v, chunk: _chunked()(x, w_q, w_k, w_k, chunk),
     "wrong from the first position on (token 1 of chunk 1"),
    ("q3_work", _work(pairs=lambda t: t**3 // 6), "'uncached_pairs'"),
    ("q3_work", _work(rows=lambda t: t * (t + 1) / 2 + 0.5), "'uncached_rows'"),
    ("q3_work", lambda t: {"uncached_rows": t * (t + 1) // 2}, "return a dict with the keys"),
    ("q4_predict_mqa", lambda: {"cache_bytes": "8 times smaller",
                                "query_key_scores": "the same",
                                "projection_parameters": "smaller"},
     "'8 times smaller' is not one of the choices"),
    ("q5_kv_heads", lambda L, H, d, b, t, budget: budget // _bytes(L, d, b, t),
     "does not divide the number of query heads"),
    ("q5_kv_heads", lambda L, H, d, b, t, budget: budget / _bytes(L, d, b, t) / 3,
     "output: got"),
    ("q6_beam", _beam_probability, "returned the output's probability"),
    ("q6_beam", _beam_swapped, "your two tokens are swapped"),
    ("q6_beam", _beam_rank, "its rank among the most likely first tokens"),
    ("q2_chunked_debug", _chunked_own_chunk_only,
     "each token sees only the tokens of its own chunk"),
    ("q6_beam", _beam_index_by_beam_size, "raised IndexError"),
]


test_each_mistake_loses_points_with_a_message_that_names_it = named_mistakes_test(
    EXERCISE, LISTED, NOT_LISTED)


def _step_float64_einsum(x_new, w_q, w_k, w_v, cache_k, cache_v):
    """Right, in float64 and with einsum."""
    x_new, w_q, w_k, w_v, cache_k, cache_v = (
        t.double() for t in (x_new, w_q, w_k, w_v, cache_k, cache_v))
    q = x_new @ w_q
    keys, values = torch.cat([cache_k, x_new @ w_k], 1), torch.cat([cache_v, x_new @ w_v], 1)
    n, t = q.shape[1], keys.shape[1]
    scores = torch.einsum("bqd,bkd->bqk", q, keys) / q.shape[-1] ** 0.5
    hidden = ~torch.ones(n, t, dtype=torch.bool).tril(t - n)
    weights = torch.softmax(scores.masked_fill(hidden, -math.inf), -1).nan_to_num(0.0)
    return torch.einsum("bqk,bkd->bqd", weights, values), keys, values


def _beam_best_per_first_token(log_p1, log_p2, beam_size):
    """Right: each kept first token's best second token, then the best of those."""
    kept = log_p1.topk(min(beam_size, log_p1.shape[0])).indices
    seconds = log_p2[kept].argmax(-1)
    totals = log_p1[kept] + log_p2[kept, seconds]
    i = int(totals.argmax())
    return int(kept[i]), int(seconds[i]), float(totals[i])


CORRECT_BUT_DIFFERENT = [
    ("q1_cached_step", _step_float64_einsum),
    ("q3_work", lambda t: {"uncached_rows": sum(range(1, t + 1)),
                           "uncached_pairs": sum(s * (s + 1) // 2 for s in range(1, t + 1)),
                           "cached_pairs": sum(range(1, t + 1))}),
    ("q5_kv_heads", _heads(_bytes)),
    ("q6_beam", _beam_best_per_first_token),
]


@pytest.mark.parametrize("question_id, answer", CORRECT_BUT_DIFFERENT,
                         ids=[q for q, _ in CORRECT_BUT_DIFFERENT])
def test_a_correct_but_different_answer_gets_full_marks(question_id, answer):
    result = judge(EXERCISE, question_id, answer)
    assert result.passed, result.message


def test_partial_credit_per_part():
    result = judge(EXERCISE, "q3_work", _loop_count)
    assert (result.points, result.status) == (2, "failed")
    assert "'uncached_pairs'" in result.message and "'cached_pairs'" not in result.message


def test_derived_numbers_are_never_shown():
    """A derive question's message says how an answer misses, not what the answer is."""
    result = feedback("q5_kv_heads", lambda *args: 3)
    assert "expected" not in result.message
    result = feedback("q3_work", _work(pairs=lambda t: 1))
    assert "expected" not in result.message


def test_numbers_fitted_to_the_visible_cases_fail_the_held_back_ones():
    seen = {4: (10, 20, 10), 10: (55, 220, 55)}  # T = 4 and T = 10, from the printout

    def fitted(num_tokens):
        rows, pairs, cached = seen.get(num_tokens, (1, 1, 1))
        return {"uncached_rows": rows, "uncached_pairs": pairs, "cached_pairs": cached}

    result = feedback("q3_work", fitted)
    assert result.points == 0 and "held-back case" in result.message


def test_the_learners_starter_is_recognised_once_its_raise_line_is_gone():
    namespace: dict = {"torch": torch, "F": F}
    exec(learner_starter(EXERCISE, "def chunked_attention"), namespace)
    result = feedback("q2_chunked_debug", namespace["chunked_attention"])
    assert "what the given code computes" in result.message
    assert "held-back" not in result.message  # a visible case shows it


def test_a_one_token_chunk_hides_the_order_bug():
    """With one token a chunk and the right mask, the order of the cache does not matter;
    the check catches the order bug on the cases with longer chunks."""
    result = feedback("q2_chunked_debug", _chunked("new_first", "bottom_right"))
    assert result.message.startswith("case 2 (B=1, N=6, chunk=2)")


# --------------------------------------------------------------------------- the page
def _flat(text: str) -> str:
    return "".join(text.split())


# What question 4's experiment computes or says: the three sizes the question asks the
# learner to predict (the key/value heads, the cache's bytes, the number of scores, the
# shared keys' broadcast).
MQA_TELLTALES = ["kv_heads", ".element_size()", ".numel()", "k.transpose(-1, -2)",
                 "either way", "broadcast"]


def test_question_4s_experiment_comes_after_the_committed_prediction(capsys):
    """The learner's page shows nothing that computes or states question 4's answers
    before its check cell, and the experiment after it measures only once
    ``predict_mqa`` returns an answer."""
    nb = json.loads(learner_path(EXERCISE).read_text(encoding="utf-8"))
    cells = [(c["cell_type"], "".join(c["source"])) for c in nb["cells"]]
    (check_at,) = [i for i, (kind, source) in enumerate(cells) if kind == "code"
                   and _flat(source) == _flat('check("09_decoding", predict_mqa)')]
    for _kind, source in cells[:check_at]:
        shown = [t for t in MQA_TELLTALES if _flat(t) in _flat(source)]
        assert not shown, f"before question 4's check, {source[:50]!r}... shows {shown}"
    (experiment,) = [source for kind, source in cells[check_at:]
                     if kind == "code" and ".element_size()" in source]
    assert experiment.index("predict_mqa()") < experiment.index(".element_size()")

    def predict_mqa():
        raise NotImplementedError("replace this line with your code")

    exec(experiment, {"torch": torch, "seed_everything": seed_everything,
                      "predict_mqa": predict_mqa})
    printed = capsys.readouterr().out
    assert printed.startswith("write predict_mqa") and "->" not in printed, printed


def test_the_bottom_right_mask_is_shown_nowhere_on_the_learners_page():
    """Questions 1 and 2 ask for it; no visible cell writes it."""
    for source in notebook_cells(learner_path(EXERCISE)):
        assert ".tril(" not in source and "attn_mask" not in source, source[:60]


# --------------------------------------------------------------------------- the real grader
def test_grader_names_one_line_mistakes(tmp_path, server):
    cells = replace_in_solution(
        EXERCISE, (".tril(num_keys - n)", ".tril(0)"),
        ("torch.cat([cache_k, x_new @ w_k], dim=1)  # in position order",
         "torch.cat([x_new @ w_k, cache_k], dim=1)"),
        ("torch.cat([cache_v, x_new @ w_v], dim=1)\n        q = x_new @ w_q",
         "torch.cat([x_new @ w_v, cache_v], dim=1)\n        q = x_new @ w_q"),
        choice("query_key_scores", "the same", "smaller"),
        ("h * per_head <= budget_bytes", "h * per_head < budget_bytes"))
    graded = grade_cells(EXERCISE, tmp_path, cells, server)
    assert "as if they were the first positions" in graded["q1_cached_step"].message
    assert "still go in front of the cache" in graded["q2_chunked_debug"].message
    assert graded["q4_predict_mqa"].points == 2
    assert "they do not skip them" in graded["q4_predict_mqa"].message
    assert "fills the budget exactly" in graded["q5_kv_heads"].message
    for passing in ("q3_work", "q6_beam"):
        assert graded[passing].status == "passed"


def test_grader_refuses_the_chapters_modules(tmp_path, server):
    cells = replace_in_solution(
        EXERCISE, ("    # BEGIN SOLUTION\n    t = num_tokens",
                   "    # BEGIN SOLUTION\n    from attention_course import decoding  # noqa: F401\n"
                   "    t = num_tokens"))
    graded = grade_cells(EXERCISE, tmp_path, cells, server)
    assert graded["q3_work"].status == "error"
    assert "write the code yourself" in graded["q3_work"].message
