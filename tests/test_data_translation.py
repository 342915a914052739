"""The English -> Chinese corpus: determinism, disjoint splits, grammar, vocabulary, batches."""

from __future__ import annotations

import re

import pytest
import torch

from attention_course.data import grammar as gr
from attention_course.data import translation as tr
from attention_course.data.grammar import Clause, NounPhrase
from attention_course.data.translation import (
    Vocab,
    collate,
    make_loader,
    make_translation_corpus,
)


@pytest.fixture(scope="module")
def corpus() -> tr.TranslationCorpus:
    return make_translation_corpus(n_train=2000, n_val=300, n_test=500, seed=3)


# --- an independent reading of the grammar: parse the English, rebuild the Chinese ---------


def _alt(words) -> str:
    return "|".join(re.escape(w) for w in sorted(words, key=len, reverse=True))


_NP = rf"(?:{_alt(gr.NAMES)}|the(?: (?:{_alt(gr.ADJECTIVES)})){{0,2}} (?:{_alt(gr.NOUNS)}))"
_PRESENT = {forms[0]: base for base, forms in gr.VERBS.items()}
_PAST = {forms[1]: base for base, forms in gr.VERBS.items()}
_PLACES = {" ".join(k): v for k, v in gr.PLACES.items()}
_TIMES = {" ".join(k): (tense, v) for tense, d in gr.TIMES.items() for k, v in d.items()}
_SENTENCE = re.compile(
    rf"^(?P<subj>{_NP}) "
    rf"(?:(?P<aux>does|did|will) (?P<neg>not )?(?P<base>{_alt(gr.VERBS)})"
    rf"|(?P<finite>{_alt(list(_PRESENT) + list(_PAST))})) "
    rf"(?P<obj>{_NP})"
    rf"(?: with (?P<comp>{_NP}))?"
    rf"(?: in the(?: (?P<padj>big|little))? (?P<place>{_alt(_PLACES)}))?"
    rf"(?: (?P<time>{_alt(_TIMES)}))?$"
)


def _np_chinese(np_text: str) -> list[str]:
    words = np_text.split()
    if words[0] in gr.NAMES:
        return [gr.NAMES[words[0]]]
    assert words[0] == "the"
    adjectives = words[1:-1]
    order = list(gr.ADJECTIVES)
    assert adjectives == sorted(adjectives, key=order.index), "adjectives out of order"
    groups = [i for a in adjectives for i, g in enumerate(gr.ADJECTIVE_GROUPS) if a in g]
    assert len(set(groups)) == len(groups), f"two adjectives of one group: {np_text}"
    return [gr.ADJECTIVES[a] for a in adjectives] + [gr.NOUNS[words[-1]]]


def expected_chinese(english: list[str]) -> list[str]:
    """What the grammar says the translation of ``english`` is (asserts it parses)."""
    m = _SENTENCE.match(" ".join(english))
    assert m is not None, f"not in the grammar: {' '.join(english)}"
    negated = m["neg"] is not None
    if m["finite"]:
        tense = "present" if m["finite"] in _PRESENT else "past"
        verb = _PRESENT.get(m["finite"]) or _PAST[m["finite"]]
    else:
        tense = {"does": "present", "did": "past", "will": "future"}[m["aux"]]
        verb = m["base"]
        assert negated or tense == "future", "'does'/'did' without 'not'"
    heads = [m[g].split()[-1] for g in ("subj", "obj", "comp") if m[g]]
    assert len(set(heads)) == len(heads), "subject, object and companion must differ"
    zh = _np_chinese(m["subj"])
    if m["time"]:
        time_tense, time_zh = _TIMES[m["time"]]
        assert time_tense == tense, f"time {m['time']!r} with a {tense} verb"
        zh += time_zh
    zh += {
        ("present", False): [],
        ("present", True): ["不"],
        ("past", False): [],
        ("past", True): ["没有"],
        ("future", False): ["会"],
        ("future", True): ["不", "会"],
    }[tense, negated]
    if m["comp"]:
        zh += ["和", *_np_chinese(m["comp"]), "一起"]
    if m["place"]:
        zh += ["在"] + ([gr.ADJECTIVES[m["padj"]]] if m["padj"] else []) + [_PLACES[m["place"]]]
    zh.append(gr.VERBS[verb][2])
    if tense == "past" and not negated:
        zh.append("了")
    return zh + _np_chinese(m["obj"])


# --- hand-written examples ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("clause", "english", "chinese"),
    [
        (
            Clause(NounPhrase("Tom"), "chase", NounPhrase("Jerry")),
            "Tom chases Jerry",
            "汤姆 追 杰瑞",
        ),
        (
            Clause(
                NounPhrase("Tom"),
                "chase",
                NounPhrase("Jerry"),
                tense="past",
                place=("kitchen",),
                time=("yesterday",),
            ),
            "Tom chased Jerry in the kitchen yesterday",
            "汤姆 昨天 在 厨房 追 了 杰瑞",
        ),
        (
            Clause(
                NounPhrase("cat", ("big", "black")),
                "help",
                NounPhrase("Spike"),
                tense="future",
                negated=True,
                companion=NounPhrase("Lily"),
                place=("living", "room"),
                place_adjective="little",
                time=("tomorrow",),
            ),
            "the big black cat will not help Spike with Lily in the little living room tomorrow",
            "大 黑 猫 明天 不 会 和 莉莉 一起 在 小 客厅 帮助 斯派克",
        ),
        (
            Clause(
                NounPhrase("dog"), "bite", NounPhrase("mouse", ("fat",)), tense="past", negated=True
            ),
            "the dog did not bite the fat mouse",
            "狗 没有 咬 胖 老鼠",
        ),
    ],
)
def test_hand_written_examples(clause, english, chinese):
    assert " ".join(clause.english()) == english
    assert " ".join(clause.chinese()) == chinese
    assert expected_chinese(clause.english()) == clause.chinese()


def test_bad_clauses_raise():
    with pytest.raises(ValueError, match="unknown verb"):
        Clause(NounPhrase("Tom"), "eat", NounPhrase("Jerry"))
    with pytest.raises(ValueError, match="does not agree"):
        Clause(NounPhrase("Tom"), "chase", NounPhrase("Jerry"), tense="past", time=("tomorrow",))
    with pytest.raises(ValueError, match="no adjectives"):
        NounPhrase("Tom", ("big",))
    with pytest.raises(ValueError, match="at most one of"):
        NounPhrase("cat", ("big", "little"))
    with pytest.raises(ValueError, match="unknown noun"):
        NounPhrase("elephant")


# --- the generated corpus -------------------------------------------------------------------


def test_deterministic_from_seed(corpus):
    again = make_translation_corpus(n_train=2000, n_val=300, n_test=500, seed=3)
    assert again.train == corpus.train and again.val == corpus.val and again.test == corpus.test
    assert again.src_vocab.itos == corpus.src_vocab.itos
    other = make_translation_corpus(n_train=2000, n_val=300, n_test=500, seed=4)
    assert other.train != corpus.train


def test_sizes_and_disjoint_splits(corpus):
    assert (len(corpus.train), len(corpus.val), len(corpus.test)) == (2000, 300, 500)
    splits = [{tuple(s) for s, _ in part} for part in (corpus.train, corpus.val, corpus.test)]
    assert [len(s) for s in splits] == [2000, 300, 500], "a sentence repeats inside a split"
    assert not splits[0] & splits[1] and not splits[0] & splits[2] and not splits[1] & splits[2]


def test_every_pair_follows_the_grammar(corpus):
    for src, tgt in corpus.train + corpus.val + corpus.test:
        assert tgt == expected_chinese(src), " ".join(src)


def test_lengths_span_short_to_long(corpus):
    pairs = corpus.train + corpus.val + corpus.test
    src_lens = [len(s) for s, _ in pairs]
    tgt_lens = [len(t) for _, t in pairs]
    assert min(src_lens) == 3 and max(src_lens) == 20
    assert min(tgt_lens) >= 3 and max(tgt_lens) <= 20
    assert sum(n >= 15 for n in src_lens) > 0.1 * len(pairs), "too few long sentences"


def test_max_len_is_respected():
    small = make_translation_corpus(n_train=300, n_val=0, n_test=0, seed=0, max_len=8)
    assert max(max(len(s), len(t)) for s, t in small.train) <= 8


def test_bad_arguments_raise():
    with pytest.raises(ValueError, match="n_train"):
        make_translation_corpus(n_train=0)
    with pytest.raises(ValueError, match="max_len"):
        make_translation_corpus(max_len=2)
    with pytest.raises(ValueError, match="distinct"):
        make_translation_corpus(n_train=5000, n_val=0, n_test=0, max_len=3)


def test_the_default_split_is_drawn_in_order():
    """Without train_max_len the splits are consecutive draws: a bigger training split
    starts with the same sentences, and passing None changes nothing."""
    base = make_translation_corpus(n_train=200, n_val=50, n_test=50, seed=5)
    same = make_translation_corpus(200, 50, 50, seed=5, train_max_len=None)
    assert (same.train, same.val, same.test) == (base.train, base.val, base.test)
    bigger = make_translation_corpus(n_train=250, n_val=0, n_test=50, seed=5)
    assert bigger.train == base.train + base.val
    assert bigger.test == base.test


@pytest.fixture(scope="module")
def length_split() -> tr.TranslationCorpus:
    return make_translation_corpus(n_train=1500, n_val=300, n_test=600, seed=2, train_max_len=8)


def test_length_split_trains_short_and_holds_out_every_length(length_split):
    c = length_split
    assert (len(c.train), len(c.val), len(c.test)) == (1500, 300, 600)
    assert max(len(s) for s, _ in c.train) == 8
    for held_out in (c.val, c.test):
        lengths = [len(s) for s, _ in held_out]
        assert min(lengths) <= 8 < max(lengths) and max(lengths) <= 20
        longer = sum(n > 8 for n in lengths) / len(lengths)
        assert 0.4 < longer < 0.8, longer  # the grammar makes many long sentences
    splits = [{tuple(s) for s, _ in part} for part in (c.train, c.val, c.test)]
    assert sum(map(len, splits)) == len(set.union(*splits)) == 2400
    # every held-out word was seen in training
    for src, tgt in c.val + c.test:
        assert all(w in c.src_vocab for w in src) and all(w in c.tgt_vocab for w in tgt)
    again = make_translation_corpus(1500, 300, 600, seed=2, train_max_len=8)
    assert (again.train, again.val, again.test) == (c.train, c.val, c.test)


def test_length_split_bad_arguments_raise():
    for bad in (2, 20, 25):
        with pytest.raises(ValueError, match="train_max_len"):
            make_translation_corpus(train_max_len=bad)


def test_random_batch_has_no_padding_and_shifted_targets():
    batch = tr.random_batch(3, 7, 5, src_vocab_size=10, tgt_vocab_size=9, seed=1)
    assert batch.src.shape == (3, 7) and batch.tgt_in.shape == batch.tgt_out.shape == (3, 5)
    assert batch.src_valid_lens.tolist() == [7] * 3 and batch.tgt_valid_lens.tolist() == [5] * 3
    assert (batch.src[:, -1] == Vocab.eos_id).all() and (batch.src[:, :-1] >= 4).all()
    assert (batch.src < 10).all() and (batch.tgt_out < 9).all()
    assert (batch.tgt_in[:, 0] == Vocab.bos_id).all()
    assert (batch.tgt_out[:, -1] == Vocab.eos_id).all()
    assert torch.equal(batch.tgt_in[:, 1:], batch.tgt_out[:, :-1])
    assert torch.equal(tr.random_batch(3, 7, 5, 10, 9, seed=1).src, batch.src)
    with pytest.raises(ValueError, match="at least 1"):
        tr.random_batch(0, 7, 5, 10, 9)
    with pytest.raises(ValueError, match="special tokens"):
        tr.random_batch(2, 7, 5, 4, 9)


# --- vocabulary -----------------------------------------------------------------------------


def test_vocab_specials_and_round_trip(corpus):
    for vocab in (corpus.src_vocab, corpus.tgt_vocab):
        assert vocab.itos[:4] == ["<pad>", "<bos>", "<eos>", "<unk>"]
        assert (vocab.pad_id, vocab.bos_id, vocab.eos_id, vocab.unk_id) == (0, 1, 2, 3)
        assert len(vocab) == len(set(vocab.itos))
    assert "Tom" in corpus.src_vocab and "汤姆" in corpus.tgt_vocab
    for src, tgt in corpus.test[:50]:
        assert corpus.src_vocab.decode(corpus.src_vocab.encode(src)) == src
        assert corpus.tgt_vocab.decode(corpus.tgt_vocab.encode(tgt)) == tgt


def test_vocab_unknown_and_decode_rules():
    vocab = Vocab(["b", "a", "a"])
    assert vocab.itos == ["<pad>", "<bos>", "<eos>", "<unk>", "a", "b"]
    assert vocab.encode(["a", "zebra", "b"]) == [4, 3, 5]
    assert vocab.decode([1, 4, 5, 2, 4]) == ["a", "b"]
    assert vocab.decode(torch.tensor([4, 0, 0])) == ["a"]
    with pytest.raises(ValueError, match="outside the vocabulary"):
        vocab.decode([99])


# --- batches --------------------------------------------------------------------------------


def test_collate_pads_and_shifts(corpus):
    pairs = corpus.train[:5]
    batch = collate(pairs, corpus.src_vocab, corpus.tgt_vocab)
    src_lens = [len(s) + 1 for s, _ in pairs]
    tgt_lens = [len(t) + 1 for _, t in pairs]
    assert batch.src.shape == (5, max(src_lens)) and batch.src.dtype == torch.long
    assert batch.tgt_in.shape == batch.tgt_out.shape == (5, max(tgt_lens))
    assert batch.src_valid_lens.tolist() == src_lens
    assert batch.tgt_valid_lens.tolist() == tgt_lens
    for i, (src, _) in enumerate(pairs):
        n, m = src_lens[i], tgt_lens[i]
        assert batch.src[i, : n - 1].tolist() == corpus.src_vocab.encode(src)
        assert batch.src[i, n - 1] == corpus.src_vocab.eos_id
        assert (batch.src[i, n:] == corpus.src_vocab.pad_id).all()
        assert batch.tgt_in[i, 0] == corpus.tgt_vocab.bos_id
        assert batch.tgt_in[i, 1:m].tolist() == batch.tgt_out[i, : m - 1].tolist()
        assert batch.tgt_out[i, m - 1] == corpus.tgt_vocab.eos_id
        assert (batch.tgt_in[i, m:] == 0).all() and (batch.tgt_out[i, m:] == 0).all()
    with pytest.raises(ValueError, match="at least one pair"):
        collate([], corpus.src_vocab, corpus.tgt_vocab)


def test_loader_covers_each_pair_once_and_reshuffles(corpus):
    pairs = corpus.val[:130]
    loader = make_loader(pairs, corpus.src_vocab, corpus.tgt_vocab, batch_size=32, seed=1)
    assert len(loader) == 5

    def epoch(ld):
        rows = []
        for batch in ld:
            assert batch.src.shape[0] <= 32
            rows += [tuple(corpus.src_vocab.decode(r)) for r in batch.src]
        return rows

    first, second = epoch(loader), epoch(loader)
    assert sorted(first) == sorted(second) == sorted(tuple(s) for s, _ in pairs)
    assert first != second, "the loader must reshuffle at every pass"
    twin = make_loader(pairs, corpus.src_vocab, corpus.tgt_vocab, batch_size=32, seed=1)
    assert epoch(twin) == first
    in_order = corpus.loader("val", batch_size=300, shuffle=False)
    assert [corpus.src_vocab.decode(r) for r in next(iter(in_order)).src] == [
        s for s, _ in corpus.val
    ]
    with pytest.raises(ValueError, match="batch_size"):
        make_loader(pairs, corpus.src_vocab, corpus.tgt_vocab, batch_size=0)
    with pytest.raises(ValueError, match="split"):
        corpus.loader("dev")
