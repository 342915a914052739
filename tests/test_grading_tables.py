"""The helpers that let a spec state its mistakes, predictions and cases as tables."""

from __future__ import annotations

import pytest
import torch

from attention_course.grading.spec import Case
from attention_course.grading.tables import (
    changed,
    drawn_cases,
    mistake_table,
    prediction,
    wrong_choices,
)


def _scaled(x, factor: float = 1.0, shift: float = 0.0):
    return x * factor + shift


def test_a_mistake_table_row_is_the_variant_with_its_settings():
    rows = [("doubled", {"factor": 2.0}, "twice"), ("shifted", {"shift": 1.0}, "moved")]
    doubled, shifted = mistake_table(changed(_scaled), rows)
    assert (doubled.name, doubled.message) == ("doubled", "twice")
    assert doubled.wrong(3.0) == 6.0 and shifted.wrong(3.0) == 4.0


def test_wrong_choices_change_one_part_or_the_one_answer():
    (one,) = wrong_choices("up", [("down", "down", "it falls")])
    assert one.wrong() == "down"
    (part,) = wrong_choices({"a": "up", "b": "down"}, [("b_up", "b", "up", "b rises")])
    assert part.wrong() == {"a": "up", "b": "up"}


def test_a_prediction_gets_a_point_per_part_and_refuses_a_wrong_choice_that_is_none():
    question = prediction(id="q1", symbol="guess", title="Guess", points=2,
                          answer={"a": "up", "b": "down"}, choices=("up", "down"),
                          wrong=[("a_down", "a", "down", "a falls")])
    assert question.kind == "predict" and dict(question.parts) == {"a": 1, "b": 1}
    assert question.reference() == {"a": "up", "b": "down"}
    assert [c.to_plain() for c in question.cases()] == [Case().to_plain()]
    for wrong in (("a_sideways", "a", "sideways", "no such choice"),
                  ("a_up", "a", "up", "the right answer")):
        with pytest.raises(ValueError, match="must make a wrong choice"):
            prediction(id="q1", symbol="guess", title="Guess", points=2,
                       answer={"a": "up", "b": "down"}, choices=("up", "down"),
                       wrong=[wrong])


def test_drawn_cases_draw_visible_then_held_back_rows_from_one_seed():
    def draw(g, n):
        return Case(args=(torch.rand(n, generator=g),), label=f"{n} numbers")

    cases = drawn_cases(7, draw, visible=[(2,)], hidden=[(3,)])()
    g = torch.Generator().manual_seed(7)
    first, second = torch.rand(2, generator=g), torch.rand(3, generator=g)
    assert [c.hidden for c in cases] == [False, True]
    assert cases[0].label == "2 numbers"
    torch.testing.assert_close(cases[0].args[0], first)
    torch.testing.assert_close(cases[1].args[0], second)
