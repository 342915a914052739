"""Exercise 4: typical mistakes, applied to the reference solution, lose points with a
message that names them; correct alternatives keep full marks.

The wrong answers here are written the way a learner would write them (not copied from
the spec's variants), so the tests show that the grader recognises a mistake by what it
outputs, whatever the code looks like. The mistakes marked "unlisted" are not among the
spec's known mistakes: their feedback comes from the generic checks and must still say
something a learner can act on.
"""

from __future__ import annotations

import functools
import json
import math
import re

import pytest
import torch
from grading_helpers import assert_named as named
from grading_helpers import graded_record, replace_in_solution, solution_path, wrong_predictions
from grading_helpers import judge as judge_answer

from attention_course import metrics, seq2seq
from attention_course.grading import get_exercise
from attention_course.grading.exercises import ex04_seq2seq_attention as spec
from attention_course.grading.make_learner import learner_notebook

EX = "04_seq2seq_attention"
EXERCISE = get_exercise(EX)


judge = functools.partial(judge_answer, EX)
# a mistake costs every point of its question unless ``points`` says what is left
assert_named = functools.partial(named, points=0)


# =========================================================================== question 1
def student_step(states, t, enc_outputs, src_embeddings, src_valid_lens, W_q, W_k, w_v, *,
                 query="previous", keys="enc", values="enc", mask="<", mask_when="before",
                 softmax_dim=1, score="additive", fill=-1e9, keep_3d=False, swap=False,
                 detach=False, broadcast=False, mean=False, projections="right",
                 context_3d=False):
    """One attention step written as a learner might: einsum, bmm, a -1e9 fill."""
    index = {"previous": t - 1, "current": t, "last": -1, "first": 0}[query]
    s = states[:, index]
    if projections == "swapped":
        W_q, W_k = W_k, W_q
    elif projections == "untransposed":  # x @ W where W x was meant
        W_q, W_k = W_q.T, W_k.T
    k = enc_outputs if keys == "enc" else src_embeddings
    v = enc_outputs if values == "enc" else src_embeddings
    projected = s if projections == "query_unprojected" else torch.einsum("hd,bd->bh", W_q, s)
    hidden = projected[:, None, :] + torch.einsum("he,bse->bsh", W_k, k)
    if score == "additive":
        e = torch.einsum("bsh,h->bs", torch.tanh(hidden), w_v)
    elif score == "relu":
        e = torch.einsum("bsh,h->bs", torch.relu(hidden), w_v)
    elif score == "no_tanh":
        e = torch.einsum("bsh,h->bs", hidden, w_v)
    elif score == "sum":
        e = torch.tanh(hidden).sum(dim=2)
    elif score == "tanh_after":
        e = torch.tanh(torch.einsum("bsh,h->bs", hidden, w_v))
    elif score == "scaled":
        e = torch.einsum("bsh,h->bs", torch.tanh(hidden), w_v) / math.sqrt(W_q.shape[0])
    elif score == "dot":
        e = torch.einsum("bsh,bh->bs", k, s)
    elif score == "scaled_enc":
        e = torch.einsum("bsh,h->bs", torch.tanh(hidden), w_v) / enc_outputs.shape[-1] ** 0.5
    else:
        raise ValueError(score)
    pos = torch.arange(e.shape[1]).expand(e.shape[0], -1)
    lens = src_valid_lens.unsqueeze(1)
    valid = {"<": pos < lens, "<=": pos <= lens, "<-1": pos < lens - 1, "none": pos >= 0,
             ">=": pos >= lens, "first_dropped": (pos < lens) & (pos > 0)}[mask]
    if mask_when == "before":
        e = e.masked_fill(~valid, fill)
    if keep_3d:
        w = torch.softmax(e.unsqueeze(1), dim=softmax_dim).squeeze(1)
    elif softmax_dim is None:  # unlisted: no normalisation at all
        w = torch.exp(e)
    else:
        w = torch.softmax(e, dim=softmax_dim)
    if mask_when == "after":
        w = w * valid
    c = torch.matmul(w, v) if broadcast else torch.bmm(w.unsqueeze(1), v).squeeze(1)
    if context_3d:  # the squeeze forgotten
        c = c.unsqueeze(1)
    if mean:
        c = c / e.shape[1]
    if detach:
        c = torch.tensor(c.tolist())
    return (w, c) if swap else (c, w)


def variant(**change):
    return functools.partial(student_step, **change)


def test_a_differently_written_correct_step_passes():
    assert judge("q1_step", variant()).status == "passed"


@pytest.mark.parametrize("change, phrases", [
    ({"query": "current"}, ["query is the decoder state s_t", "previous state s_(t-1)"]),
    ({"query": "last"}, ["last state s_T"]),
    ({"query": "first"}, ["s_0 whatever the step"]),
    ({"values": "emb"}, ["blend of the source embeddings"]),
    ({"keys": "emb"}, ["compare the query with the source embeddings"]),
    ({"keys": "emb", "values": "emb"}, ["attend over the source embeddings"]),
    ({"mask": "none"}, ["padded source positions get weight"]),
    ({"mask": "<="}, ["first padded position"]),
    ({"mask": "<-1"}, ["removes the last real position"]),
    ({"mask": ">=", "fill": float("-inf")}, ["keeps the padded positions and removes the real"]),
    ({"mask_when": "after"}, ["no longer sum to 1"]),
    ({"softmax_dim": 0}, ["across the sentences of the batch"]),
    ({"keep_3d": True}, ["axis of length one"]),
    ({"keep_3d": True, "fill": float("-inf")}, ["axis of length one"]),
    ({"score": "no_tanh"}, ["miss the tanh"]),
    ({"score": "relu"}, ["uses a ReLU"]),
    ({"projections": "swapped"}, ["query goes through W_k"]),
    ({"projections": "untransposed"}, ["the wrong way round (their transposes)"]),
    ({"broadcast": True}, ["shape (B, B, H_enc)"]),
    ({"score": "tanh_after"}, ["tanh comes after the projection"]),
    ({"score": "sum"}, ["instead of weighting them with the vector w_v"]),
    ({"score": "scaled"}, ["square root of a size"]),
    ({"score": "scaled_enc"}, ["square root of a size"]),
    ({"mean": True}, ["weighted sum, not a mean"]),
    ({"swap": True}, ["weights first and the context second"]),
    ({"score": "dot"}, ["dot products of the query with the encoder states"]),
    ({"projections": "query_unprojected"}, ["without its projection W_q"]),
    ({"context_3d": True}, ["context has shape (B, 1, H_enc)"]),
])
def test_attention_step_mistakes_are_named(change, phrases):
    assert_named(judge("q1_step", variant(**change)), *phrases)


def test_attention_step_unlisted_mistakes_get_useful_feedback():
    # weights that are never normalised: the rows do not sum to 1
    assert_named(judge("q1_step", variant(softmax_dim=None)), "sum to", "sum to 1")
    # a mask that drops the first real position (thinking position 0 is <bos>)
    assert_named(judge("q1_step", variant(mask="first_dropped")),
                 "gives no weight to source position 0, which is real")
    # a soft mask: padding filled with -5, not minus infinity
    assert_named(judge("q1_step", variant(fill=-5.0)), "which is padding",
                 "must get exactly 0")
    # the context rebuilt from Python numbers: no gradients
    assert_named(judge("q1_step", variant(detach=True)), "does not carry gradients")

    def three_d(*args):  # weights kept as (B, 1, S)
        context, weights = student_step(*args)
        return context, weights[:, None, :]

    assert_named(judge("q1_step", three_d), "expected shape")


# =========================================================================== question 2
def student_luong(states, t, enc_outputs, src_valid_lens, W, *, query="current",
                  score="general", dim=-1, fill=float("-inf"), mask="<", scale=False,
                  mask_when="before"):
    s = states[:, {"current": t, "previous": t - 1, "last": -1}[query]]
    if score == "general":
        e = torch.bmm(enc_outputs, (s @ W).unsqueeze(-1)).squeeze(-1)  # (s^T W) h_j
    elif score == "transposed":
        e = torch.bmm(enc_outputs @ W, s.unsqueeze(-1)).squeeze(-1)  # h_j^T W s
    else:
        e = torch.bmm(enc_outputs, s.unsqueeze(-1)).squeeze(-1)
    if scale:
        e = e / math.sqrt(s.shape[-1])
    pos = torch.arange(enc_outputs.shape[1])[None, :]
    lens = src_valid_lens[:, None]
    real = {"<": pos < lens, ">=": pos >= lens, "<=": pos <= lens, "<-1": pos < lens - 1,
            "none": pos >= 0}[mask]
    if mask_when == "before":
        e = e.masked_fill(~real, fill)
    w = torch.softmax(e, dim=dim)
    if mask_when == "after":
        w = w * real
    return (w.unsqueeze(-1) * enc_outputs).sum(dim=1), w


def luong(**change):
    return functools.partial(student_luong, **change)


def test_a_differently_written_luong_fix_passes():
    assert judge("q2_luong", luong()).status == "passed"
    assert judge("q2_luong", luong(dim=1)).status == "passed"


@pytest.mark.parametrize("change, phrases", [
    ({"query": "last", "score": "dot", "dim": 0}, ["code as it was given"]),
    ({"query": "last", "score": "dot"}, ["softmax is fixed, two bugs remain",
                                         "last state s_T", "plain dot product"]),
    ({"query": "last", "dim": 0}, ["score is fixed, two bugs remain"]),
    ({"score": "dot", "dim": 0}, ["query is fixed, two bugs remain"]),
    ({"query": "last"}, ["one bug remains", "current state s_t"]),
    ({"score": "dot"}, ["one bug remains", "matrix W between"]),
    ({"dim": 0}, ["one bug remains", "normalises across the batch"]),
    ({"score": "transposed"}, ["W is used the wrong way round"]),
    # a query the starter does not show: Bahdanau's habit
    ({"query": "previous"}, ["previous state s_(t-1)", "current state s_t"]),
    # the mask, a gap the learner fills in
    ({"mask": ">="}, ["keeps the padded positions and removes the real"]),
    ({"mask": "none"}, ["padded source positions get weight"]),
    ({"fill": 0.0}, ["padded source positions get weight"]),  # the same, at zero states
    ({"mask": "<="}, ["first padded position"]),
    ({"mask": "<-1"}, ["removes the last real position"]),
    ({"mask_when": "after"}, ["no longer sum to 1"]),
    ({"scale": True}, ["has no such scale"]),
])
def test_luong_half_fixes_are_named(change, phrases):
    assert_named(judge("q2_luong", luong(**change)), *phrases)


def test_luong_unlisted_mistakes_get_useful_feedback():
    # a soft mask: padding filled with -5 instead of minus infinity
    assert_named(judge("q2_luong", luong(fill=-5.0)), "which is padding")

    def no_sum(*args):  # the second gap filled with the weighted states, not summed
        context, weights = student_luong(*args)
        return weights.unsqueeze(-1) * args[2], weights

    assert_named(judge("q2_luong", no_sum), "expected shape")


def _learner_cells() -> list[dict]:
    """The cells of the learner's notebook, generated from the solution."""
    return learner_notebook(json.loads(solution_path(EX).read_text(encoding="utf-8")))["cells"]


def test_the_starter_code_is_the_unchanged_mistake():
    """The learner's starter (its first line deleted, its two gaps filled in) is
    recognised as unchanged, and passes once its three bugs are fixed."""
    (source,) = ["".join(c["source"]) for c in _learner_cells()
                 if c["cell_type"] == "code" and "def luong_step" in "".join(c["source"])]
    gaps = {
        '    raise NotImplementedError("delete this line, fix 3 bugs, fill 2 gaps")\n': "",
        "    # GAP 1: take each sentence's padded source positions out of the scores\n":
            "    real = torch.arange(scores.shape[1]) < src_valid_lens[:, None]\n"
            "    scores = scores.masked_fill(~real, float('-inf'))\n",
        "    context = ...  # GAP 2: the context c_t, shape (B, H)\n":
            "    context = torch.einsum('bs,bsh->bh', weights, enc_outputs)\n",
    }
    for gap, filled in gaps.items():
        assert source.count(gap) == 1, gap
        source = source.replace(gap, filled)
    namespace = {"torch": torch}
    exec(source, namespace)
    assert_named(judge("q2_luong", namespace["luong_step"]), "code as it was given")
    # with its three bugs fixed in place, the filled-in starter is a right answer
    fixes = {"states[:, -1]": "states[:, t]", "(enc_outputs @ query.unsqueeze(-1))":
             "(enc_outputs @ W.T @ query.unsqueeze(-1))", "dim=0": "dim=-1"}
    for bug, fix in fixes.items():
        assert source.count(bug) == 1, bug
        source = source.replace(bug, fix)
    namespace = {"torch": torch}
    exec(source, namespace)
    assert judge("q2_luong", namespace["luong_step"]).status == "passed"


# What the learner's page must not show: question 1's answer (which state is the query,
# the mask before the softmax, the context as the weighted sum of the encoder states) and
# question 6's (the sentence padded, the step called on it). Each pattern is matched in
# the code with its whitespace removed; the answer itself matches every one of them.
GIVE_AWAYS = {
    "q1_step": {
        "the previous state as the query": r"states\[:,t-1\]",
        "a mask from the valid lengths": r"<src_valid_lens\[",
        "padded scores filled before the softmax": r"\.masked_fill\(",
        "the context as a weighted sum of the encoder states":
            r"\*enc_outputs\)\.sum\(|weights@enc_outputs|weights,enc_outputs\)",
    },
    "q6_padding_measure": {
        "the sentence padded with zero states": r"torch\.cat\(|\.pad\(",
        "the attention step called on it": r"(?<!def)attention_step\(",
    },
}
# and in the page's text: question 1's query, named
TEXT_GIVE_AWAYS = {"q1_step": r"\\mathbf\{s\}_\{t-1\}|s_\(t-1\)|s_\{t-1\}"}


def _squeezed(text: str) -> str:
    return re.sub(r"\s+", "", text)


@pytest.mark.parametrize("qid", sorted(GIVE_AWAYS))
def test_the_learner_page_keeps_the_answers(qid):
    """No cell the learner sees (code or text) shows an answer: neither a later
    question's starter nor a cell that demonstrates a result."""
    symbol = EXERCISE.question(qid).symbol
    solution = json.loads(solution_path(EX).read_text(encoding="utf-8"))
    (answer,) = [_squeezed("".join(c["source"])) for c in solution["cells"]
                 if f"def {symbol}(" in "".join(c["source"])]
    shown = _learner_cells()
    for what, pattern in GIVE_AWAYS[qid].items():
        assert re.search(pattern, answer), (qid, what)  # so that its absence means something
        for cell in shown:
            found = cell["cell_type"] == "code" and re.search(
                pattern, _squeezed("".join(cell["source"])))
            assert not found, (f"the learner's page shows {qid}'s answer ({what}): "
                               f"{found[0]!r} in cell {cell.get('id')}")
    if qid in TEXT_GIVE_AWAYS:
        for cell in shown:
            found = re.search(TEXT_GIVE_AWAYS[qid], "".join(cell["source"]))
            assert not found, (f"the learner's page tells {qid}'s answer: {found[0]!r} in "
                               f"cell {cell.get('id')}")


# =========================================================================== questions 3, 5
def test_every_wrong_prediction_is_explained_without_giving_the_answer():
    for qid, answer, fn in (("q3_long", spec.LONG_ANSWER, "long_sentence_prediction"),
                            ("q5_padding_predict", spec.PADDING_ANSWER, "padding_prediction")):
        question = EXERCISE.question(qid)
        for key, wrong in wrong_predictions(EX, qid):
            result = judge(qid, lambda wrong=wrong: wrong)
            assert result.points == question.points - question.parts[key], result
            assert result.message.startswith(repr(key)), result.message
            assert repr(answer[key]) not in result.message, result.message
        assert judge(qid, lambda answer=answer: dict(answer)).status == "passed", fn


def test_prediction_feedback_on_keys_and_spelling():
    assert_named(judge("q3_long", lambda: {"drops_more": "fixed context"}),
                 "return a dict with the keys")
    result = judge("q3_long", lambda: {"drops_more": "Fixed context", "falls_less": "BLEU"})
    assert_named(result, "not one of the choices", points=1)
    result = judge("q3_long", lambda: {"drops_more": "fixed context", "falls_less": "bleu"})
    assert_named(result, "not one of the choices", points=1)
    result = judge("q5_padding_predict", lambda: {"size": "grows", "direction": "stays the same"})
    assert_named(result, "zero vectors", points=1)


# =========================================================================== question 4
def test_score_counts_match_the_course_model():
    """The reference formulas count what the course's attention model really computes."""
    from attention_course.data.translation import make_translation_corpus

    corpus = make_translation_corpus(n_train=200, n_val=0, n_test=0, seed=1)
    pairs = corpus.train[:4]
    batch = corpus.collate(pairs)
    torch.manual_seed(0)
    model = seq2seq.make_seq2seq(len(corpus.src_vocab), len(corpus.tgt_vocab), hidden_dim=8,
                                 embed_dim=4)
    counted = []
    model.decoder.attention_score.register_forward_hook(
        lambda module, inputs, output: counted.append(output.numel()))
    with torch.no_grad():
        _, weights = model(batch.src, batch.src_valid_lens, batch.tgt_in)
    real_steps = torch.arange(weights.shape[1]) < batch.tgt_valid_lens[:, None]
    want = spec.attention_score_counts([len(s) for s, _ in pairs], [len(t) for _, t in pairs])
    assert want == {"computed": sum(counted),
                    "used": int(((weights > 0) & real_steps[:, :, None]).sum())}


def counts(src_extra=1, tgt_extra=1, computed="padded", used="real"):
    def answer(src_lens, tgt_lens):
        s = [n + src_extra for n in src_lens]
        t = [n + tgt_extra for n in tgt_lens]
        pairs = list(zip(s, t, strict=True))
        total = {"padded": len(s) * max(s) * max(t), "real": sum(a * b for a, b in pairs),
                 "no_batch": max(s) * max(t), "steps": sum(max(s) * b for b in t),
                 "positions": sum(a * max(t) for a in s)}[computed]
        return {"computed": total,
                "used": {"real": sum(a * b for a, b in pairs),
                         "all": len(s) * max(s) * max(t),
                         "tgt_pad": sum(a * max(t) for a in s),
                         "src_pad": sum(max(s) * b for b in t),
                         "sums": sum(s) * sum(t)}[used]}
    return answer


def test_score_counts_pass_and_floats_are_accepted():
    assert judge("q4_counts", counts()).status == "passed"
    result = judge("q4_counts", lambda a, b: {k: float(v) for k, v in counts()(a, b).items()})
    assert result.status == "passed"


@pytest.mark.parametrize("answer, points, phrases", [
    (counts(0, 0), 0, ["count the words only"]),
    (counts(1, 0), 0, ["one step more than the Chinese sentence has words: its input"]),
    (counts(0, 1), 0, ["also ends in <eos>"]),
    (counts(2, 1), 0, ["no <bos>"]),
    (counts(1, 2), 0, ["not two"]),
    (counts(computed="real"), 1, ["does not skip padding"]),
    (counts(computed="no_batch"), 1, ["every one of its B sentences"]),
    (counts(computed="steps"), 1, ["runs every step for every sentence"]),
    (counts(computed="positions"), 1, ["scored at every source position of the batch"]),
    (counts(used="all"), 1, ["not every computed score"]),
    (counts(used="tgt_pad"), 1, ["padded decoder steps of a short target"]),
    (counts(used="src_pad"), 1, ["padded source position gets weight exactly 0"]),
    (counts(used="sums"), 1, ["one product per sentence"]),
])
def test_score_count_mistakes_are_named(answer, points, phrases):
    assert_named(judge("q4_counts", answer), *phrases, points=points)


def test_score_count_unlisted_mistake_shows_the_numbers():
    # lengths added instead of multiplied: every step scores every position
    def mixed(src_lens, tgt_lens):
        s, t = [n + 1 for n in src_lens], [n + 1 for n in tgt_lens]
        return {"computed": len(s) * (max(s) + max(t)),
                "used": sum(a + b for a, b in zip(s, t, strict=True))}

    result = judge("q4_counts", mixed)
    assert_named(result, "'computed' and 'used' in case", "got 9, which is", "too small")


# =========================================================================== question 6
def student_leak(states, t, enc_outputs, src_embeddings, W_q, W_k, w_v, num_pads, *,
                 masked_len="real", shrink="ratio", step=None, before=False):
    step = step or student_step
    length, width = enc_outputs.shape[1], enc_outputs.shape[2]
    where = (0, 0, num_pads, 0) if before else (0, 0, 0, num_pads)
    enc = torch.nn.functional.pad(enc_outputs, where)
    emb = torch.nn.functional.pad(src_embeddings, where)
    alone, _ = step(states, t, enc_outputs, src_embeddings, torch.tensor([length]),
                    W_q, W_k, w_v)
    real = length if masked_len == "real" else length + num_pads
    masked, _ = step(states, t, enc, emb, torch.tensor([real]), W_q, W_k, w_v)
    unmasked, weights = step(states, t, enc, emb, torch.tensor([length + num_pads]),
                             W_q, W_k, w_v)
    ratio = {"ratio": unmasked.norm() / alone.norm(),
             "weight_mass": weights[0, :length].sum(),  # correct too: Z / (Z + P e^b)
             "inverted": alone.norm() / unmasked.norm(),
             "difference": alone.norm() - unmasked.norm(),
             "relative": (unmasked - alone).norm() / alone.norm(),
             "squared": unmasked.norm() ** 2 / alone.norm() ** 2,
             "masked": masked.norm() / alone.norm()}[shrink]
    assert width == enc.shape[2]
    return {"masked_change": (masked - alone).abs().max(), "shrink": ratio}


def leak(**change):
    return functools.partial(student_leak, **change)


def test_padding_leak_passes_also_from_the_weights():
    assert judge("q6_padding_measure", leak()).status == "passed"
    assert judge("q6_padding_measure", leak(shrink="weight_mass")).status == "passed"


@pytest.mark.parametrize("change, points, phrases", [
    ({"masked_len": "padded"}, 1, ["real valid length"]),
    ({"shrink": "inverted"}, 1, ["upside down"]),
    ({"shrink": "difference"}, 1, ["difference of norms"]),
    ({"shrink": "relative"}, 1, ["relative change"]),
    ({"shrink": "squared"}, 1, ["squared norms"]),
    ({"shrink": "masked"}, 1, ["compares the masked context with the alone one"]),
    ({"before": True}, 1, ["the padding went before the sentence"]),
])
def test_padding_leak_mistakes_are_named(change, points, phrases):
    assert_named(judge("q6_padding_measure", leak(**change)), *phrases, points=points)


def test_padding_leak_says_when_question_1_is_what_fails():
    wrong_step = variant(query="current")
    result = judge("q6_padding_measure", leak(step=wrong_step), attention_step=wrong_step)
    assert_named(result, "calls your answer to q1_step", "fix that first", points=1)


# =========================================================================== question 7
def student_bleu(k, m, r, c, *, clip="min", bp="exp", short_zero=True, over="k", shortest=4,
                 root=1.0):
    def penalty(length):
        ratio = r / length
        return {"exp": 1.0 if length > r else math.exp(1 - ratio), "none": 1.0,
                "linear": min(1.0, length / r),
                "inverted": min(1.0, math.exp(1 - length / r)),
                "uncapped": math.exp(1 - ratio),
                "no_exp": 1.0 if length > r else 1 - ratio}[bp]

    matches = {"min": min(k, m), "none": k, "m": m, "r": min(k, r)}[clip]
    repeated = penalty(k) * (matches / (k if over == "k" else r)) ** root
    prefix = penalty(c) if (c >= shortest or not short_zero) else 0.0
    return {"repeated": repeated, "prefix": prefix}


def bleu(**change):
    return functools.partial(student_bleu, **change)


def test_bleu_reference_agrees_with_corpus_bleu():
    for k, m, r, c in [(7, 2, 6, 5), (3, 1, 6, 3), (3, 5, 8, 6), (12, 5, 9, 9), (1, 1, 4, 1)]:
        others = [f"x{i}" for i in range(r - m)]
        reference = ["w"] * m + others
        want = spec.bleu_by_hand(k, m, r, c)
        assert math.isclose(want["repeated"],
                            metrics.corpus_bleu([["w"] * k], [reference], max_n=1))
        distinct = [f"y{i}" for i in range(r)]
        assert math.isclose(want["prefix"],
                            metrics.corpus_bleu([distinct[:c]], [distinct], max_n=4))
    assert judge("q7_bleu", bleu()).status == "passed"


@pytest.mark.parametrize("change, points, phrases", [
    ({"clip": "none"}, 1, ["every copy of the repeated word counts"]),
    ({"clip": "m"}, 1, ["can exceed 1"]),
    ({"clip": "r"}, 1, ["clip the matches at the reference's length"]),
    ({"bp": "none"}, 0, ["no brevity penalty"]),
    ({"bp": "linear"}, 0, ["length ratio c/r"]),
    ({"bp": "uncapped"}, 1, ["capped at 1"]),
    ({"short_zero": False}, 1, ["no 4-gram at all"]),
    ({"shortest": 5}, 1, ["exactly 4 words has one 4-gram"]),
    ({"over": "r"}, 1, ["divides by the reference's length"]),
    ({"bp": "no_exp"}, 0, ["the exponent 1 - r/c itself"]),
    ({"root": 0.25}, 1, ["fourth root of the unigram precision"]),
])
def test_bleu_mistakes_are_named(change, points, phrases):
    assert_named(judge("q7_bleu", bleu(**change)), *phrases, points=points)


def test_inverted_brevity_penalty_is_named_where_it_differs():
    result = judge("q7_bleu", bleu(bp="inverted"))
    assert result.points == 0
    assert "upside down" in result.message  # on the repeated word, longer than r
    assert "no brevity penalty" in result.message  # a shorter prefix gets penalty 1


# =========================================================================== the grader
@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """The real grader on the solution with one line of question 1 changed."""
    cells = replace_in_solution(EX, ("query = states[:, t - 1]  # s_(t-1)",
                                     "query = states[:, t]  # s_(t-1)"))
    return graded_record(EX, tmp_path_factory.mktemp("ex04"), cells)


def test_grader_names_the_current_state_and_the_dependency(graded):
    by_id = {q.id: q for q in graded.questions}
    assert graded.notebook_errors == []
    assert by_id["q1_step"].points == 0
    assert "previous state s_(t-1)" in by_id["q1_step"].message
    assert "calls your answer to q1_step" in by_id["q6_padding_measure"].message
    others = ("q2_luong", "q3_long", "q4_counts", "q5_padding_predict", "q7_bleu")
    assert all(by_id[q].status == "passed" for q in others)
    assert graded.score == graded.max_score - 4 - 1  # q6 keeps its masked_change point


def test_at_most_a_third_of_the_points_implement():
    assert EXERCISE.share_beyond("implement") >= 0.6
    assert {q.kind for q in EXERCISE.questions} == {"implement", "debug", "predict", "derive",
                                                     "experiment"}
