"""What an exercise is: questions, the cases each is called on, and how to call it.

An exercise spec module (one per exercise, in ``attention_course/grading/exercises/``)
builds one :class:`Exercise` and names it ``EXERCISE``. The grader finds it by itself.
Specs are imported only by trusted code: the learner's ``check(...)`` and the grader's
parent process, never by the child process that runs a submission.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from attention_course.i18n import _

Call = Literal["function", "module"]
Kind = Literal["implement", "derive", "predict", "debug", "experiment"]
KINDS = ("implement", "derive", "predict", "debug", "experiment")
Diagnose = Callable[["Case", Any, Any], "str | None"]

_ID = re.compile(r"^[A-Za-z0-9_]+$")


@dataclass(frozen=True)
class Case:
    """One call of the learner's code, on inputs the grader chooses.

    Every value must be plain data: tensors, numbers, strings, booleans, ``None`` and
    lists, tuples or dicts (string keys) of those; they travel to the child process.

    For a ``"function"`` question the call is ``fn(*args, **kwargs)``. For a ``"module"``
    question it is ``obj = Class(*init_args, **init_kwargs)``; then every tensor in
    ``params`` is copied into the parameter or buffer of that dotted name
    (``obj.get_parameter(name)``); then ``obj(*args, **kwargs)`` (or
    ``getattr(obj, method)(...)`` when the question names another method).
    ``label`` says in feedback which case failed ("3 queries, 5 keys, h = 0.5").
    A ``hidden`` case is held back: the learner's ``check`` runs it too (so its points
    are the grader's) but never shows its inputs; an answer fitted to the cases the
    learner can see fails it.
    """

    args: tuple = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    init_args: tuple = ()
    init_kwargs: Mapping[str, Any] = field(default_factory=dict)
    params: Mapping[str, Any] = field(default_factory=dict)
    label: str = ""
    hidden: bool = False

    def to_plain(self) -> dict[str, Any]:
        """The case as the dict sent to the child process."""
        return {
            "args": list(self.args),
            "kwargs": dict(self.kwargs),
            "init_args": list(self.init_args),
            "init_kwargs": dict(self.init_kwargs),
            "params": dict(self.params),
        }


@dataclass(frozen=True)
class Mistake:
    """A wrong answer learners actually give, and what to tell them when they give it.

    ``wrong`` is called exactly like the question's reference (same ``call``, ``method``
    and cases) and returns what that mistake produces; when the learner's output matches
    it on a failing case, ``message`` is the feedback: words a learner can act on, never
    code ("your scores are sqrt(d) times too large: did you forget to divide by sqrt(d)?").
    """

    name: str
    wrong: Callable[..., Any]
    message: str


@dataclass(frozen=True)
class Question:
    """One graded question: the learner defines ``symbol``; the grader calls it.

    - ``id``: short and unique within the exercise, e.g. ``"q1_weights"`` (a gradebook column).
    - ``symbol``: the name the learner's notebook must define (a function or a class).
    - ``points``: awarded when every case matches the reference, else 0 (see ``parts``).
    - ``reference``: the trusted implementation, called exactly like the learner's code
      (the same ``call``, ``method`` and cases); usually a function or class of the package.
    - ``cases``: a zero-argument function returning the list of :class:`Case`; make it
      deterministic (seed a ``torch.Generator``).
    - ``kind``: what the question asks of the learner: ``"implement"`` (write what the
      chapter shows), ``"derive"`` (a number or formula, checked numerically),
      ``"predict"`` (commit to an outcome, then run it), ``"debug"`` (fix a given broken
      function) or ``"experiment"`` (run, measure, answer from the measurement).
    - ``call``: ``"function"`` or ``"module"`` (a class to instantiate, see :class:`Case`).
    - ``rtol``/``atol``: tolerance of the comparison (in float64) with the reference.
    - ``hint``: one or two sentences shown when the answer is wrong: the idea, never code.
    - ``section``: the heading of the chapter's section to reread (shown with the hint;
      a test checks that the chapter has it).
    - ``mistakes``: the typical wrong answers, recognised by their outputs (:class:`Mistake`).
    - ``diagnose``: optional teaching checks ``diagnose(case, expected, got) -> str | None``
      run when an output has the right shape but wrong values and no known mistake
      matches (see :func:`attention_course.grading.compare.rows_sum_to_one`).
    - ``parts``: for an answer with independent parts, a dict returned by the learner's
      code: each key earns its points when it matches on every case (partial credit);
      then ``points`` is their sum. ``part_tolerance`` overrides ``(rtol, atol)`` per key.
    - ``choices``: the allowed answers of a multiple-choice question (strings); any other
      string is refused with the list of choices.
    - ``grad``: the output must carry gradients back to the floating-point inputs; the
      grader compares those gradients too (an ``.item()``, ``.detach()`` or a tensor
      rebuilt from Python numbers breaks them).
    - ``builds_on``: ids of earlier questions whose code this one calls; when one of them
      failed, the feedback says that this is what to fix first.
    - ``time_limit``: seconds the grader allows for all cases of this question.
    """

    id: str
    symbol: str
    points: int
    reference: Callable[..., Any]
    cases: Callable[[], Sequence[Case]]
    title: str = ""
    kind: Kind = "implement"
    call: Call = "function"
    method: str = "forward"
    rtol: float = 1e-4
    atol: float = 1e-6
    hint: str = ""
    section: str = ""
    mistakes: tuple[Mistake, ...] = ()
    diagnose: Diagnose | None = None
    parts: Mapping[str, int] | None = None
    part_tolerance: Mapping[str, tuple[float, float]] = field(default_factory=dict)
    choices: tuple[str, ...] = ()
    grad: bool = False
    builds_on: tuple[str, ...] = ()
    time_limit: float = 10.0

    def __post_init__(self) -> None:
        if not _ID.match(self.id):
            raise ValueError(f"question id must match [A-Za-z0-9_]+, got {self.id!r}")
        if not self.symbol.isidentifier():
            raise ValueError(f"symbol must be a Python identifier, got {self.symbol!r}")
        if self.kind not in KINDS:
            raise ValueError(f"kind must be one of {', '.join(KINDS)}, got {self.kind!r}")
        if self.call not in ("function", "module"):
            raise ValueError(f"call must be 'function' or 'module', got {self.call!r}")
        if self.points <= 0:
            raise ValueError(f"points must be positive, got {self.points}")
        if self.parts is not None:
            if not self.parts or any(p <= 0 for p in self.parts.values()):
                raise ValueError(f"{self.id}: parts must map keys to positive points")
            if sum(self.parts.values()) != self.points:
                raise ValueError(f"{self.id}: points={self.points} must be the sum of the "
                                 f"parts' points {dict(self.parts)}")
        unknown = set(self.part_tolerance) - set(self.parts or ())
        if unknown:
            raise ValueError(f"{self.id}: part_tolerance names no part: {sorted(unknown)}")
        names = [m.name for m in self.mistakes]
        if len(set(names)) != len(names):
            raise ValueError(f"{self.id}: mistake names must be unique, got {names}")


@dataclass(frozen=True)
class Exercise:
    """A graded exercise notebook: its id (the notebook's name), title and questions.

    ``forbidden_imports`` lists modules a submission may not import while it is graded
    (the package module that holds the chapter's own solution, for example); the grader
    blocks them in the child process. It is a nudge, not a wall (see ``book/grading.md``).
    """

    id: str
    title: str
    questions: tuple[Question, ...]
    forbidden_imports: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not re.match(r"^[0-9]{2}_[a-z0-9_]+$", self.id):
            raise ValueError(f"exercise id must look like '01_attention_pooling', got {self.id!r}")
        ids = [q.id for q in self.questions]
        if len(set(ids)) != len(ids):
            raise ValueError(f"question ids must be unique in {self.id}, got {ids}")
        if not self.questions:
            raise ValueError(f"exercise {self.id} has no questions")
        for position, q in enumerate(self.questions):
            later = set(q.builds_on) - set(ids[:position])
            if later:
                raise ValueError(f"{q.id} builds on {sorted(later)}, which are not earlier "
                                 f"questions of {self.id}")

    @property
    def max_score(self) -> int:
        return sum(q.points for q in self.questions)

    def question(self, key: str) -> Question:
        """The question with this id or symbol."""
        for q in self.questions:
            if key in (q.id, q.symbol):
                return q
        known = ", ".join(f"{q.id} ({q.symbol})" for q in self.questions)
        raise KeyError(_("{exercise} has no question {key}; its questions are {known}").format(
            exercise=self.id, key=repr(key), known=known))

    def share_beyond(self, kind: str = "implement") -> float:
        """The share of the points that asks for more than ``kind`` (0..1)."""
        return sum(q.points for q in self.questions if q.kind != kind) / self.max_score
