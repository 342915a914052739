"""Specs written as tables: known mistakes, prediction questions and cases, one row each.

An exercise spec states its questions, their cases and their known mistakes. Three shapes
repeat in every spec, and each has a helper here:

- a family of mistakes that are all the reference with one setting changed:
  :func:`mistake_table` (one row per mistake: its name, the settings, the message), and
  :func:`changed` where the settings are keyword arguments of one function;
- a multiple-choice (``"predict"``) question, whose wrong-choice mistakes follow from its
  choices: :func:`prediction` and :func:`wrong_choices`;
- cases drawn from one seeded generator, visible ones then held-back ones:
  :func:`drawn_cases`.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

import torch

from attention_course.grading.spec import Case, Mistake, Question

Answer = str | Mapping[str, str]


def mistake_table(variant: Callable[..., Callable[..., Any]],
                  rows: Iterable[tuple[str, Mapping[str, Any], str]]) -> tuple[Mistake, ...]:
    """One :class:`Mistake` per row ``(name, settings, message)``, in order; its wrong
    answer is ``variant(**settings)``: the reference with those settings changed."""
    return tuple(Mistake(name, variant(**settings), message) for name, settings, message in rows)


def changed(function: Callable[..., Any]) -> Callable[..., Callable[..., Any]]:
    """The variant function of :func:`mistake_table` for a ``function`` whose keyword
    arguments name what is done wrong: ``changed(f)(**settings)`` calls ``f`` with those
    settings."""
    return lambda **settings: functools.partial(function, **settings)


def constant(value: Any) -> Callable[[], Any]:
    """A function of no arguments that gives back a (shallow) copy of ``value``: a
    prediction's answer, fresh at every call."""
    return lambda: copy.copy(value)


def wrong_choices(answer: Answer, rows: Iterable[tuple]) -> tuple[Mistake, ...]:
    """The mistakes of a prediction: each row is one wrong choice and what to say of it.

    For an answer that is one choice a row is ``(name, choice, message)``: the mistake
    answers ``choice``. For an answer with parts (a dict of choices) a row is
    ``(name, part, choice, message)``: the mistake is the right answer with ``choice``
    in ``part``.
    """
    if isinstance(answer, str):
        return tuple(Mistake(name, constant(choice), message) for name, choice, message in rows)
    return tuple(Mistake(name, constant({**answer, part: choice}), message)
                 for name, part, choice, message in rows)


def _chosen(mistake: Mistake, answer: Answer) -> list[Any]:
    """The choices a wrong-choice mistake makes where it differs from ``answer``."""
    given = mistake.wrong()
    if isinstance(answer, str):
        return [given]
    return [given[part] for part in answer if given[part] != answer[part]]


def prediction(*, answer: Answer, choices: Sequence[str], wrong: Iterable[tuple],
               mistakes: Sequence[Mistake] = (), **fields: Any) -> Question:
    """A ``"predict"`` question: the learner's function takes nothing and gives back one of
    ``choices``, or a dict of them (then each part earns one point unless ``parts`` says
    otherwise).

    Its mistakes are ``mistakes`` (answers that are no choice at all, say) followed by
    :func:`wrong_choices` of ``wrong``; every wrong choice must be one of ``choices``
    and differ from the answer. The other ``fields`` are the :class:`Question`'s.
    """
    if not isinstance(answer, str):
        fields.setdefault("parts", dict.fromkeys(answer, 1))
    by_choice = wrong_choices(answer, wrong)
    for mistake in by_choice:
        chosen = _chosen(mistake, answer)
        if not chosen or any(c not in choices for c in chosen):
            raise ValueError(f"{fields.get('id')}: mistake {mistake.name} must make a wrong "
                             f"choice among {choices}, got {chosen}")
    return Question(kind="predict", reference=constant(answer), cases=constant([Case()]),
                    choices=tuple(choices), mistakes=(*mistakes, *by_choice), **fields)


def drawn_cases(seed: int, draw: Callable[..., Case], visible: Sequence[tuple],
                hidden: Sequence[tuple] = ()) -> Callable[[], list[Case]]:
    """The ``cases`` of a question: ``draw(g, *row)`` for every visible row, then every
    held-back row, all from one ``torch.Generator`` seeded with ``seed``.

    ``draw`` labels the case it makes; a held-back case is marked ``hidden``: the
    learner's check runs it too, but never shows its label or its inputs.
    """

    def cases() -> list[Case]:
        g = torch.Generator().manual_seed(seed)
        shown = [draw(g, *row) for row in visible]
        return shown + [replace(draw(g, *row), hidden=True) for row in hidden]

    return cases
