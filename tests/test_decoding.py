"""Tests for attention_course.decoding: caches, sampling, beam search."""

from __future__ import annotations

import itertools
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from module_helpers import seeded

import attention_course.positions  # noqa: F401  (registers rope, alibi)
from attention_course.decoding import (
    DecoderCache,
    KVCache,
    beam_search,
    filter_logits,
    kv_cache_bytes_per_token,
    length_penalty_factor,
    sample_decode,
    sample_next,
)
from attention_course.transformer import Transformer

PROPERTY = settings(max_examples=25, deadline=None)
PAD, BOS, EOS, A, B = 0, 1, 2, 3, 4  # the stub's vocabulary
NEG = float("-inf")


class TableModel:
    """A stand-in decoder whose next-token distribution is a fixed function of the prefix.

    ``table(src, prefix)`` gives the probabilities of ``(EOS, A, B)`` after ``prefix`` (a
    tuple of generated ids) for source sentence ``src`` (a tuple). The tokens so far live
    in a :class:`KVCache`, so a search that reorders the cache wrongly reads wrong prefixes.
    """

    pad_id = PAD

    def __init__(self, table, max_len: int = 10) -> None:
        self.table, self.max_len = table, max_len

    def encode(self, src_ids):
        return src_ids.float()[..., None], []

    def new_cache(self) -> KVCache:
        return KVCache()

    def decode(self, tgt_ids, memory, src_ids, cache=None):
        tokens = tgt_ids.float()[:, None, :, None]
        held, _ = cache.update(tokens, tokens)
        rows = []
        for src, prefix in zip(src_ids.tolist(), held[:, 0, :, 0].long().tolist(), strict=True):
            probs = torch.tensor(self.table(tuple(src), tuple(prefix[1:])), dtype=torch.float64)
            rows.append(torch.cat([torch.full((2,), NEG), probs.log().float()]))
        return torch.stack(rows)[:, None, :], [], []


def _three_way(eos: float, a: float, b: float) -> list[float]:
    return [eos, a, b]


def _greedy_trap(src, prefix):
    """Greedy takes A (0.5) then EOS (0.4): 0.2. The best is B then EOS: 0.4 * 0.9 = 0.36."""
    if prefix == ():
        return _three_way(0.1, 0.5, 0.4)
    if prefix[-1] == B:
        return _three_way(0.9, 0.05, 0.05)
    return _three_way(0.4, 0.3, 0.3)


def _long_or_short(src, prefix):
    """EOS now: 0.4 (length 1). A, A, EOS: 0.6 * 0.5 * 0.9 = 0.27 (length 3)."""
    table = {(): (0.4, 0.6, 0.0), (A,): (0.5, 0.5, 0.0), (A, A): (0.9, 0.05, 0.05)}
    return list(table.get(prefix, (0.5, 0.25, 0.25)))


def _worth_waiting(src, prefix):
    """EOS now: 0.55, normalised log 0.55 / 1 = -0.60. A, A, EOS: 0.45 * 0.95 * 0.99, raw
    -0.86 but normalised -0.86 / (8/6)^2 = -0.48 with length_penalty=2."""
    table = {(): (0.55, 0.45, 0.0), (A,): (0.05, 0.95, 0.0), (A, A): (0.99, 0.01, 0.0)}
    return list(table.get(prefix, (1.0, 0.0, 0.0)))


def _per_source(src, prefix):
    """Sentence [7] is the greedy trap; sentence [8] wants A, A, A and stops."""
    if src[0] == 7:
        return _greedy_trap(src, prefix)
    return _three_way(0.9, 0.05, 0.05) if len(prefix) >= 3 else _three_way(0.05, 0.9, 0.05)


# ---------------------------------------------------------------- caches


def test_kv_cache_appends_and_reorders():
    cache = KVCache()
    assert len(cache) == 0 and cache.nbytes == 0
    keys, values = cache.update(torch.zeros(3, 2, 1, 4), torch.ones(3, 2, 1, 4))
    assert keys.shape == (3, 2, 1, 4)
    keys, values = cache.update(torch.arange(3.0)[:, None, None, None].expand(3, 2, 2, 4),
                                torch.ones(3, 2, 2, 4))
    assert len(cache) == 3 and keys.shape == (3, 2, 3, 4) and values.shape == (3, 2, 3, 4)
    assert cache.nbytes == 2 * 3 * 2 * 3 * 4 * 4
    cache.reorder(torch.tensor([2, 2, 0]))
    assert torch.equal(cache.keys[:, 0, -1, 0], torch.tensor([2.0, 2.0, 0.0]))


def test_decoder_cache_length_and_reorder():
    cache = DecoderCache(2)
    assert len(cache) == 0 and len(cache.layers) == 2
    for self_cache, cross_cache in cache.layers:
        assert not self_cache.static and cross_cache.static
        self_cache.update(torch.zeros(2, 1, 3, 4), torch.zeros(2, 1, 3, 4))
        cross_cache.update(torch.arange(2.0)[:, None, None, None].expand(2, 1, 5, 4),
                           torch.zeros(2, 1, 5, 4))
    assert len(cache) == 3
    cache.reorder(torch.tensor([1, 1]))
    assert torch.all(cache.layers[1][1].keys == 1)
    assert cache.nbytes == 2 * (2 * 2 * 3 * 4 + 2 * 2 * 5 * 4) * 4


def test_kv_cache_bytes_per_token_for_mha_gqa_mqa():
    mha = kv_cache_bytes_per_token(6, 8, 64)
    assert mha == 2 * 6 * 8 * 64 * 4
    assert kv_cache_bytes_per_token(6, 2, 64) == mha // 4
    assert kv_cache_bytes_per_token(6, 1, 64) == mha // 8
    assert kv_cache_bytes_per_token(6, 8, 64, torch.bfloat16) == mha // 2
    with pytest.raises(ValueError, match="num_kv_heads"):
        kv_cache_bytes_per_token(6, 0, 64)


def test_cache_bytes_match_a_real_cache():
    torch.manual_seed(0)
    model = Transformer(11, 13, 32, 8, 2, 32, num_kv_heads=2).eval()
    src = torch.tensor([[4, 5, 6, 2]])
    memory, _ = model.encode(src)
    cache = model.new_cache()
    model.decode(torch.tensor([[1, 5, 6]]), memory, src, cache=cache)
    self_bytes = sum(layer[0].nbytes for layer in cache.layers)
    assert self_bytes == 3 * kv_cache_bytes_per_token(2, 2, 4)


# ---------------------------------------------------------------- sampling


def test_top_k_keeps_the_k_largest():
    logits = torch.tensor([[1.0, 3.0, 2.0, 0.5], [0.0, -1.0, 4.0, 5.0]])
    kept = filter_logits(logits, top_k=2)
    assert torch.equal(torch.isfinite(kept), torch.tensor([[0, 1, 1, 0], [0, 0, 1, 1]]).bool())
    torch.testing.assert_close(kept[torch.isfinite(kept)], torch.tensor([3.0, 2.0, 4.0, 5.0]))
    assert torch.equal(filter_logits(logits, top_k=10), logits)


@pytest.mark.parametrize("top_p, kept", [(0.5, 1), (0.79, 2), (0.8, 2), (0.81, 3), (0.96, 4),
                                         (1.0, 4)])
def test_top_p_keeps_the_smallest_nucleus(top_p, kept):
    probs = torch.tensor([0.15, 0.5, 0.05, 0.3])  # sorted: 0.5, 0.3, 0.15, 0.05
    filtered = filter_logits(probs.log(), top_p=top_p)
    order = [1, 3, 0, 2]
    assert torch.isfinite(filtered[order[:kept]]).all()
    assert not torch.isfinite(filtered[order[kept:]]).any()


def test_top_k_then_top_p():
    probs = torch.tensor([0.4, 0.3, 0.2, 0.1])
    filtered = filter_logits(probs.log(), top_k=3, top_p=0.75)  # renormalised: .44, .33, .22
    assert torch.isfinite(filtered).tolist() == [True, True, False, False]


def test_sample_next_temperature_zero_and_near_zero_is_argmax():
    logits = torch.randn(6, 9, generator=seeded(0)) * 3
    assert torch.equal(sample_next(logits, temperature=0.0), logits.argmax(-1))
    for seed in range(5):
        torch.testing.assert_close(sample_next(logits, 1e-4, generator=seeded(seed)),
                                   logits.argmax(-1))
    assert torch.equal(sample_next(logits, top_k=1, generator=seeded(1)), logits.argmax(-1))


def test_sample_next_frequencies_follow_the_filtered_softmax():
    logits = torch.tensor([2.0, 1.0, 0.0, -1.0, -5.0]).expand(20_000, 5)
    draws = sample_next(logits, temperature=2.0, top_k=3, generator=seeded(2))
    assert draws.shape == (20_000,) and draws.dtype == torch.long
    counts = torch.bincount(draws, minlength=5).float() / 20_000
    expected = torch.tensor([2.0, 1.0, 0.0]).div(2.0).softmax(-1)
    torch.testing.assert_close(counts[:3], expected, atol=0.015, rtol=0)
    assert counts[3:].sum() == 0
    nucleus = sample_next(logits, top_p=0.5, generator=seeded(3))
    assert torch.all(nucleus == 0)  # softmax: 0.64, 0.24, ...: the first alone reaches 0.5


def test_sample_next_shapes_and_errors():
    logits = torch.randn(2, 3, 7, generator=seeded(4))
    assert sample_next(logits, generator=seeded(5)).shape == (2, 3)
    with pytest.raises(ValueError, match="temperature"):
        sample_next(logits, temperature=-1.0)
    with pytest.raises(ValueError, match="top_k"):
        sample_next(logits, top_k=0)
    with pytest.raises(ValueError, match="top_p"):
        sample_next(logits, top_p=0.0)


def _model(seed: int, **kw) -> Transformer:
    torch.manual_seed(seed)
    return Transformer(11, 13, 16, 2, 2, 32, max_len=16, **kw).eval()


SOURCES = torch.tensor([[4, 5, 6, 2, 0, 0], [7, 8, 9, 10, 3, 2], [5, 2, 0, 0, 0, 0]])


def test_sample_decode():
    model = _model(1)
    greedy = model.greedy_decode(SOURCES, 1, 12)
    assert torch.equal(sample_decode(model, SOURCES, 1, 12, temperature=0.0), greedy)
    cached = sample_decode(model, SOURCES, 1, 12, generator=seeded(6))
    uncached = sample_decode(model, SOURCES, 1, 12, generator=seeded(6), use_cache=False)
    assert torch.equal(cached, uncached)
    other = sample_decode(model, SOURCES, 1, 12, generator=seeded(7))
    assert not torch.equal(cached, other)
    assert cached.shape == (3, 15)


# ---------------------------------------------------------------- beam search


def test_beam_search_escapes_the_greedy_trap():
    model = TableModel(_greedy_trap)
    src = torch.tensor([[7]])
    greedy, greedy_score = beam_search(model, src, BOS, EOS, beam_size=1)
    assert greedy.tolist() == [[A, EOS]]
    assert greedy_score.item() == pytest.approx(math.log(0.5 * 0.4), abs=1e-6)
    ids, scores = beam_search(model, src, BOS, EOS, beam_size=2)
    assert ids.tolist() == [[B, EOS]]
    assert scores.shape == (1,) and scores.item() == pytest.approx(math.log(0.36), abs=1e-6)


def test_beam_search_batch_of_different_sentences():
    model = TableModel(_per_source)
    ids, scores = beam_search(model, torch.tensor([[8], [7]]), BOS, EOS, beam_size=3)
    assert ids.tolist() == [[A, A, A, EOS], [B, EOS, PAD, PAD]]
    torch.testing.assert_close(scores, torch.tensor([math.log(0.9**4), math.log(0.36)]))


def test_length_penalty_favours_longer_hypotheses():
    model = TableModel(_long_or_short)
    src = torch.tensor([[7]])
    short, short_score = beam_search(model, src, BOS, EOS, beam_size=3)
    assert short.tolist() == [[EOS]]  # kept, finished at step 1, while the beams went on
    assert short_score.item() == pytest.approx(math.log(0.4), abs=1e-6)
    # GNMT: -0.92 / 1 for EOS, -1.31 / (8/6)^2 = -0.74 for A A EOS
    long, long_score = beam_search(model, src, BOS, EOS, beam_size=3, length_penalty=2.0)
    assert long.tolist() == [[A, A, EOS]]
    assert long_score.item() == pytest.approx(math.log(0.27), abs=1e-6)  # the raw sum
    assert length_penalty_factor(3, 2.0) == pytest.approx((8 / 6) ** 2)
    assert length_penalty_factor(7, 0.0) == 1.0


def test_search_goes_on_while_a_live_hypothesis_can_still_win():
    """With one beam, EOS finishes first; with a length penalty the live A may still win."""
    model = TableModel(_worth_waiting, max_len=4)
    src = torch.tensor([[7]])
    assert beam_search(model, src, BOS, EOS, beam_size=1)[0].tolist() == [[EOS]]
    ids, score = beam_search(model, src, BOS, EOS, beam_size=1, length_penalty=2.0)
    assert ids.tolist() == [[A, A, EOS]]
    assert score.item() == pytest.approx(math.log(0.45 * 0.95 * 0.99), abs=1e-6)


def _random_table(seed: int):
    def table(src, prefix):
        p = (torch.rand(3, generator=seeded(hash((seed, src, prefix)) % 2**31)) + 0.05).tolist()
        return [x / sum(p) for x in p]

    return table


def _exhaustive_best(table, src, max_len: int, alpha: float):
    """Every hypothesis: ends with EOS within max_len tokens, or is cut at max_len."""
    best = None
    for length in range(1, max_len + 1):
        for body in itertools.product([EOS, A, B], repeat=length):
            if EOS in body[:-1] or (body[-1] != EOS and length < max_len):
                continue
            score = sum(math.log(table(src, body[:t])[body[t] - EOS]) for t in range(length))
            key = score / length_penalty_factor(length, alpha)
            if best is None or key > best[0]:
                best = (key, score, list(body))
    return best


@PROPERTY
@given(seed=st.integers(0, 10_000), max_len=st.integers(1, 4),
       alpha=st.sampled_from([0.0, 0.6, 2.0]))
def test_a_wide_enough_beam_is_exhaustive_search(seed, max_len, alpha):
    table = _random_table(seed)
    model = TableModel(table, max_len=max_len + 1)
    src = torch.tensor([[3], [9]])
    ids, scores = beam_search(model, src, BOS, EOS, beam_size=3**max_len * 3,
                              length_penalty=alpha)
    for b in range(2):
        _, score, body = _exhaustive_best(table, tuple(src[b].tolist()), max_len, alpha)
        assert ids[b, : len(body)].tolist() == body and torch.all(ids[b, len(body):] == PAD)
        assert scores[b].item() == pytest.approx(score, abs=1e-4)


@pytest.mark.parametrize("positional", ["sinusoidal", "rope", "alibi"])
@pytest.mark.parametrize("eos", [12, None])
def test_beam_size_one_is_greedy_decoding(positional, eos):
    model = _model(2, positional=positional, num_kv_heads=1)
    if eos is None:  # the first token row 0 produces: that row stops at once
        eos = int(model.greedy_decode(SOURCES, 1, 12)[0, 0])
    greedy = model.greedy_decode(SOURCES, 1, eos)
    ids, scores = beam_search(model, SOURCES, 1, eos, beam_size=1)
    assert torch.equal(ids, greedy)
    logits = model(SOURCES, torch.cat([torch.ones(3, 1, dtype=torch.long), greedy[:, :-1]], 1))
    log_probs = logits.log_softmax(-1).gather(-1, greedy[..., None])[..., 0]
    ended = (greedy == eos).long()
    after_eos = ended.cumsum(-1) - ended > 0
    expected = log_probs.masked_fill(after_eos, 0.0).sum(-1)
    torch.testing.assert_close(scores, expected, rtol=1e-4, atol=1e-4)


def test_beam_search_errors():
    with pytest.raises(ValueError, match="beam_size"):
        beam_search(TableModel(_greedy_trap), torch.tensor([[7]]), BOS, EOS, beam_size=0)


@pytest.mark.gpu
@pytest.mark.parametrize("positional", ["rope", "alibi"])
def test_decoding_on_cuda(positional):
    model = _model(8, positional=positional, num_kv_heads=1).cuda()
    src = SOURCES.cuda()
    cached = model.greedy_decode(src, 1, 12)
    assert cached.device.type == "cuda"
    assert torch.equal(cached, model.greedy_decode(src, 1, 12, use_cache=False))
    assert torch.equal(beam_search(model, src, 1, 12, beam_size=1)[0], cached)
    generator = torch.Generator("cuda").manual_seed(0)
    assert sample_decode(model, src, 1, 12, top_p=0.9, generator=generator).is_cuda


def test_kv_heads_experiment_trains_and_translates():
    from attention_course.data.translation import make_translation_corpus
    from attention_course.experiments.decoding import (
        KVHeadsSetup,
        kv_heads_experiment,
        translate,
    )

    corpus = make_translation_corpus(n_train=64, n_val=8, n_test=6)
    setup = KVHeadsSetup(d_model=16, num_heads=4, steps=4, eval_every=2,
                         batch_size=16)
    runs = kv_heads_experiment(corpus, setup, kv_heads=(4, 1), seeds=(0, 1),
                               device="cpu")
    assert sorted(runs) == [1, 4]
    for heads, per_seed in runs.items():
        assert [run.seed for run in per_seed] == [0, 1]
        for run in per_seed:
            assert run.num_kv_heads == heads
            assert run.curves["step"] == [0, 2, 4]
            assert len(run.curves["val_loss"]) == 3
            assert all(0 <= a <= 1 for a in run.curves["val_token_accuracy"])
            attention = run.model.decoder.layers[0].self_attn
            assert attention.num_kv_heads == heads
    # different seeds, different weights
    first, second = (run.model.output.weight for run in runs[4])
    assert not torch.equal(first, second)
    model = runs[4][0].model
    greedy, greedy_lp = translate(model, corpus, corpus.test, max_len=5)
    beam, beam_lp = translate(model, corpus, corpus.test, beam_size=3,
                              max_len=5)
    assert len(greedy) == len(beam) == len(corpus.test)
    assert all(isinstance(word, str) for row in greedy + beam for word in row)
    assert greedy_lp.shape == beam_lp.shape == (len(corpus.test),)
    assert (greedy_lp <= 0).all() and (beam_lp <= 0).all()
    # a batch size that splits the pairs gives the same translations
    split, split_lp = translate(model, corpus, corpus.test, max_len=5,
                                batch_size=4)
    assert split == greedy
    torch.testing.assert_close(split_lp, greedy_lp, rtol=1e-4, atol=1e-4)
