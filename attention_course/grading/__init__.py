"""Graded exercises: question specs, instant feedback, and a grader no submission can fool.

- In an exercise notebook: ``from attention_course.grading import check`` and
  ``check("01_attention_pooling", gaussian_weights)`` (or ``check("01_attention_pooling")``
  for every question).
- For an instructor: ``attention-course grade SUBMISSION.ipynb... [--json] [--out DIR]``.
- For an author: one spec module per exercise in ``attention_course/grading/exercises/``
  (see ``exercises/README.md``).

The grader follows one rule: student code only produces outputs, trusted code checks
them (see :mod:`attention_course.grading.sandbox`).
"""

from attention_course.grading.checking import check, run_checks
from attention_course.grading.registry import all_exercises, get_exercise
from attention_course.grading.results import QuestionResult, SubmissionResult
from attention_course.grading.spec import Case, Exercise, Mistake, Question

__all__ = [
    "Case",
    "Exercise",
    "Mistake",
    "Question",
    "QuestionResult",
    "SubmissionResult",
    "all_exercises",
    "check",
    "get_exercise",
    "run_checks",
]
