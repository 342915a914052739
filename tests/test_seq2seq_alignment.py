"""Chapter 4's batched translation with weights, the alignment lexicon, where
attention rows peak, and the word edit distance."""

from __future__ import annotations

import pytest
import torch

from attention_course import metrics
from attention_course import seq2seq as s2s
from attention_course.data.translation import make_translation_corpus
from attention_course.experiments import seq2seq as experiment


@pytest.fixture(scope="module")
def corpus():
    return make_translation_corpus(n_train=200, n_val=20, n_test=40, seed=0)


def _model(corpus, attention):
    torch.manual_seed(0)
    return s2s.make_seq2seq(len(corpus.src_vocab), len(corpus.tgt_vocab),
                            attention=attention, embed_dim=8,
                            hidden_dim=12).eval()


@pytest.mark.parametrize("attention", ["bahdanau", "luong"])
def test_translate_pairs_with_weights_matches_one_by_one(corpus, attention):
    model = _model(corpus, attention)
    pairs = corpus.test[:13]
    batched = experiment.translate_pairs_with_weights(
        model, pairs, corpus.src_vocab, corpus.tgt_vocab, batch_size=5,
        max_len=8)
    plain = experiment.translate_pairs(model, pairs, corpus.src_vocab,
                                corpus.tgt_vocab, batch_size=5, max_len=8)
    assert [t.tokens for t in batched] == plain
    for (src, _), out in zip(pairs, batched, strict=True):
        alone = experiment.translate(model, src, corpus.src_vocab, corpus.tgt_vocab,
                              max_len=8)
        assert out.tokens == alone.tokens
        assert out.weights.shape == alone.weights.shape
        assert out.weights.shape[1] == len(src) + 1
        torch.testing.assert_close(out.weights, alone.weights)


def test_translate_pairs_with_weights_fixed_context_has_none(corpus):
    model = _model(corpus, "none")
    out = experiment.translate_pairs_with_weights(model, corpus.test[:3],
                                           corpus.src_vocab, corpus.tgt_vocab)
    assert len(out) == 3 and all(t.weights is None for t in out)


def test_alignment_lexicon():
    lexicon = experiment.alignment_lexicon()
    assert lexicon["追"] == {"chase", "chases", "chased"}
    assert lexicon["汤姆"] == {"Tom"}
    assert lexicon["昨天"] == {"yesterday"}
    assert lexicon["厨房"] == {"kitchen"}
    assert lexicon["大"] == {"big"}
    for word in ("了", "在", "会", "和", "一起", "上", "周", "客厅", "每天"):
        assert word not in lexicon


def test_peak_offsets():
    src = "Tom chased Jerry yesterday".split()
    tokens = "汤姆 昨天 追 了 杰瑞".split()
    weights = torch.zeros(len(tokens) + 1, len(src) + 1)
    for row, column in enumerate([0, 3, 2, 2, 2, 4]):
        weights[row, column] = 1.0
    found = experiment.peak_offsets(experiment.Translation(tokens, weights), src,
                             experiment.alignment_lexicon())
    assert found == [("汤姆", 0, 0), ("昨天", 3, 0), ("追", 1, 1),
                     ("杰瑞", 2, 0)]
    # a word twice in the source is left out
    src = "the big cat chased the big dog".split()
    tokens = "大 猫 追 了 大 狗".split()
    weights = torch.eye(len(tokens) + 1, len(src) + 1)
    found = experiment.peak_offsets(experiment.Translation(tokens, weights), src,
                             experiment.alignment_lexicon())
    assert [w for w, _, _ in found] == ["猫", "追", "狗"]
    with pytest.raises(ValueError, match="no attention weights"):
        experiment.peak_offsets(experiment.Translation(tokens, None), src,
                         experiment.alignment_lexicon())


def test_edit_distance():
    assert metrics.edit_distance([], []) == 0
    assert metrics.edit_distance("a b c".split(), "a b c".split()) == 0
    assert metrics.edit_distance("a b c".split(), "a c".split()) == 1
    assert metrics.edit_distance("a b c".split(), "a x c".split()) == 1
    assert metrics.edit_distance([], "a b".split()) == 2
    assert metrics.edit_distance("a b c d".split(), "b a c".split()) == 3
