"""The grammar of chapters 4-6's English -> Chinese corpus: a lexicon and
the rules that write a sentence in both languages.

Nothing is downloaded: a tiny grammar writes English sentences and their Chinese
translations, word by word, for example::

    Tom chases Jerry
        ->  汤姆 追 杰瑞
    Tom chased Jerry in the kitchen yesterday
        ->  汤姆 昨天 在 厨房 追 了 杰瑞
    the big cat will not help Spike with Lily
        ->  大 猫 不 会 和 莉莉 一起 帮助 斯派克

Chinese puts time words, negation, the future marker, "with X" (和 X 一起) and
the place (在 ...) *before* the verb, where English puts them after the object,
so the alignment between the two sentences is not just a diagonal. English
articles (``the``) and auxiliaries (``does``) have no Chinese counterpart, and
"living room" becomes one word, 客厅. Every English sentence has exactly one
translation.

Tokens are words (no punctuation); English is lower case except names.

:class:`NounPhrase` and :class:`Clause` are a sentence's parts, with its
``english()`` and ``chinese()`` words; :func:`sample_clause` draws one at
random; the lexicon dictionaries (``NAMES``, ``NOUNS``, ``ADJECTIVES``,
``VERBS``, ``PLACES``, ``TIMES``) hold the words. A chapter can build a chosen
sentence, e.g.
``Clause(NounPhrase("Tom"), "chase", NounPhrase("Jerry")).english()``.
The corpus, its vocabularies and its batches are in
:mod:`attention_course.data.translation`.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

# ------------------------------------------------------------------------------
# Lexicon
# ------------------------------------------------------------------------------

NAMES: dict[str, str] = {
    "Tom": "汤姆",
    "Jerry": "杰瑞",
    "Spike": "斯派克",
    "Lily": "莉莉",
    "Anna": "安娜",
    "Max": "马克斯",
}
NOUNS: dict[str, str] = {
    "cat": "猫",
    "dog": "狗",
    "mouse": "老鼠",
    "bird": "鸟",
    "teacher": "老师",
    "boy": "男孩",
    "girl": "女孩",
}
# In the order English stacks them: "the lazy little fat black cat"
ADJECTIVES: dict[str, str] = {
    "lazy": "懒",
    "big": "大",
    "little": "小",
    "fat": "胖",
    "black": "黑",
    "white": "白",
}
# A noun takes at most one adjective of each group
# (no "big little" or "black white" cat)
ADJECTIVE_GROUPS: tuple[tuple[str, ...], ...] = (
    ("lazy",),
    ("big", "little"),
    ("fat",),
    ("black", "white"),
)
# English verb: (third person singular present, past, Chinese)
VERBS: dict[str, tuple[str, str, str]] = {
    "chase": ("chases", "chased", "追"),
    "watch": ("watches", "watched", "看"),
    "help": ("helps", "helped", "帮助"),
    "bite": ("bites", "bit", "咬"),
    "feed": ("feeds", "fed", "喂"),
    "follow": ("follows", "followed", "跟踪"),
    "push": ("pushes", "pushed", "推"),
}
# English place words (after "in the") -> Chinese
PLACES: dict[tuple[str, ...], str] = {
    ("kitchen",): "厨房",
    ("garden",): "花园",
    ("park",): "公园",
    ("bedroom",): "卧室",
    ("living", "room"): "客厅",
}
PLACE_ADJECTIVES: tuple[str, ...] = ("big", "little")
TENSES: tuple[str, ...] = ("present", "past", "future")
# Time phrases that agree with each tense: English words -> Chinese words
TIMES: dict[str, dict[tuple[str, ...], tuple[str, ...]]] = {
    "present": {
        ("every", "day"): ("每天",),
        ("every", "morning"): ("每天", "早上"),
        ("every", "evening"): ("每天", "晚上"),
    },
    "past": {
        ("yesterday",): ("昨天",),
        ("last", "night"): ("昨晚",),
        ("last", "week"): ("上", "周"),
    },
    "future": {
        ("tomorrow",): ("明天",),
        ("tonight",): ("今晚",),
        ("next", "week"): ("下", "周"),
    },
}

# ------------------------------------------------------------------------------
# Grammar
# ------------------------------------------------------------------------------


@dataclass(frozen=True)
class NounPhrase:
    """A name (``Tom``) or ``the`` + adjectives + a noun
    (``the big black cat``).

    Chinese drops the article and keeps the adjectives before the noun: 大 黑
    猫.
    """

    head: str
    adjectives: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.head not in NAMES and self.head not in NOUNS:
            raise ValueError(f"unknown noun or name {self.head!r}")
        if self.head in NAMES and self.adjectives:
            raise ValueError(
                f"a name takes no adjectives, got {self.adjectives} "
                f"on {self.head}"
            )
        for adjective in self.adjectives:
            if adjective not in ADJECTIVES:
                raise ValueError(f"unknown adjective {adjective!r}")
        for group in ADJECTIVE_GROUPS:
            if len(set(group) & set(self.adjectives)) > 1:
                raise ValueError(
                    f"at most one of {group} per noun, got {self.adjectives}"
                )

    def english(self) -> list[str]:
        if self.head in NAMES:
            return [self.head]
        return ["the", *self.adjectives, self.head]

    def chinese(self) -> list[str]:
        if self.head in NAMES:
            return [NAMES[self.head]]
        return [ADJECTIVES[a] for a in self.adjectives] + [NOUNS[self.head]]


@dataclass(frozen=True)
class Clause:
    """One sentence: subject, verb (tense, negation), object and optional
    adjuncts.

    English order: subject, [does/did/will] [not], verb, object, [with X], [in
    the place], [time]. Chinese order: subject, [time], [不/没有/会/不 会], [和
    X 一起], [在 place], verb, [了 in the affirmative past], object.
    """

    subject: NounPhrase
    verb: str
    obj: NounPhrase
    tense: str = "present"
    negated: bool = False
    companion: NounPhrase | None = None
    place: tuple[str, ...] | None = None
    place_adjective: str | None = None
    time: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        if self.verb not in VERBS:
            raise ValueError(f"unknown verb {self.verb!r}")
        if self.tense not in TENSES:
            raise ValueError(
                f"tense must be one of {TENSES}, got {self.tense!r}"
            )
        if self.place is None and self.place_adjective is not None:
            raise ValueError("place_adjective given without a place")
        if self.place is not None and self.place not in PLACES:
            raise ValueError(f"unknown place {self.place!r}")
        if (
            self.place_adjective is not None
            and self.place_adjective not in PLACE_ADJECTIVES
        ):
            raise ValueError(
                f"unknown place adjective {self.place_adjective!r}"
            )
        if self.time is not None and self.time not in TIMES[self.tense]:
            raise ValueError(
                f"time {self.time!r} does not agree with tense {self.tense!r}"
            )

    def english(self) -> list[str]:
        present, past, _ = VERBS[self.verb]
        if self.tense == "future":
            verb = (["will", "not", self.verb] if self.negated
                    else ["will", self.verb])
        elif self.negated:
            verb = ["does" if self.tense == "present" else "did", "not",
                    self.verb]
        else:
            verb = [present if self.tense == "present" else past]
        words = [*self.subject.english(), *verb, *self.obj.english()]
        if self.companion is not None:
            words += ["with", *self.companion.english()]
        if self.place is not None:
            adjective = [self.place_adjective] if self.place_adjective else []
            words += ["in", "the", *adjective, *self.place]
        if self.time is not None:
            words += list(self.time)
        return words

    def chinese(self) -> list[str]:
        words = list(self.subject.chinese())
        if self.time is not None:
            words += TIMES[self.tense][self.time]
        words += _chinese_polarity(self.tense, self.negated)
        if self.companion is not None:
            words += ["和", *self.companion.chinese(), "一起"]
        if self.place is not None:
            adjective = ([ADJECTIVES[self.place_adjective]]
                         if self.place_adjective else [])
            words += ["在", *adjective, PLACES[self.place]]
        words.append(VERBS[self.verb][2])
        if self.tense == "past" and not self.negated:
            words.append("了")
        return words + self.obj.chinese()


def _chinese_polarity(tense: str, negated: bool) -> list[str]:
    if tense == "future":
        return ["不", "会"] if negated else ["会"]
    if not negated:
        return []
    return ["不"] if tense == "present" else ["没有"]


def _sample_noun_phrase(
    rng: random.Random, richness: float, exclude: Sequence[NounPhrase]
) -> NounPhrase:
    heads = {p.head for p in exclude}
    while True:
        if rng.random() < 0.6 - 0.3 * richness:
            phrase = NounPhrase(rng.choice(sorted(NAMES)))
        else:
            n_adjectives = sum(rng.random() < richness for _ in range(2))
            groups = sorted(
                rng.sample(range(len(ADJECTIVE_GROUPS)), n_adjectives)
            )
            adjectives = tuple(rng.choice(ADJECTIVE_GROUPS[g]) for g in groups)
            phrase = NounPhrase(rng.choice(sorted(NOUNS)), adjectives)
        if phrase.head not in heads:
            return phrase


def sample_clause(rng: random.Random) -> Clause:
    """Draw one sentence from the grammar; subject, object and companion differ.

    A "richness" drawn uniformly from [0, 1) sets how likely each optional part
    is, so that short and long sentences are both common.
    """
    richness = rng.random()
    subject = _sample_noun_phrase(rng, richness, ())
    obj = _sample_noun_phrase(rng, richness, (subject,))
    tense = rng.choice(TENSES)
    companion = None
    if rng.random() < 0.7 * richness:
        companion = _sample_noun_phrase(rng, richness, (subject, obj))
    place = rng.choice(sorted(PLACES)) if rng.random() < richness else None
    place_adjective = None
    if place is not None and rng.random() < 0.5 * richness:
        place_adjective = rng.choice(PLACE_ADJECTIVES)
    time = rng.choice(sorted(TIMES[tense])) if rng.random() < richness else None
    return Clause(
        subject=subject,
        verb=rng.choice(sorted(VERBS)),
        obj=obj,
        tense=tense,
        negated=rng.random() < 0.3,
        companion=companion,
        place=place,
        place_adjective=place_adjective,
        time=time,
    )
