"""Find every exercise spec in ``attention_course.grading.exercises`` by itself."""

from __future__ import annotations

import functools
import importlib
import pkgutil
import re

from attention_course.grading import exercises as _exercises_pkg
from attention_course.grading.spec import Exercise
from attention_course.i18n import _


@functools.cache
def all_exercises() -> dict[str, Exercise]:
    """Every registered exercise, by id, from the modules ``exercises/ex*.py``."""
    found: dict[str, Exercise] = {}
    for info in sorted(pkgutil.iter_modules(_exercises_pkg.__path__), key=lambda m: m.name):
        if not info.name.startswith("ex"):
            continue
        module = importlib.import_module(f"{_exercises_pkg.__name__}.{info.name}")
        exercise = getattr(module, "EXERCISE", None)
        if not isinstance(exercise, Exercise):
            raise TypeError(f"{module.__name__} must define EXERCISE = Exercise(...)")
        if exercise.id in found:
            raise ValueError(f"two spec modules define the exercise {exercise.id!r}")
        found[exercise.id] = exercise
    return found


@functools.cache
def get_exercise(exercise_id: str) -> Exercise:
    """The exercise with this id (e.g. ``"01_attention_pooling"``).

    Imports only ``exercises/ex<id>.py`` when it exists, so a broken spec of another
    chapter cannot break this exercise's checks; otherwise searches every spec.
    """
    name = f"{_exercises_pkg.__name__}.ex{exercise_id}"
    if re.fullmatch(r"[0-9]{2}_[a-z0-9_]+", exercise_id):
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as error:
            if error.name != name:
                raise
        else:
            exercise = getattr(module, "EXERCISE", None)
            if isinstance(exercise, Exercise) and exercise.id == exercise_id:
                return exercise
    exercises = all_exercises()
    if exercise_id not in exercises:
        known = ", ".join(sorted(exercises)) or "none"
        raise KeyError(_("unknown exercise {id}; known exercises: {known}").format(
            id=repr(exercise_id), known=known))
    return exercises[exercise_id]
