"""``{check-sample}``: what ``check(...)`` prints for given answers, in the edition's language.

A page that shows the learner's feedback shows the real thing, printed by the course's
own ``check`` when the page is built, in the language of the edition (the Chinese one
prints its Chinese feedback) rather than a copy that could drift from it:

````markdown
```{check-sample} 01_attention_pooling
q1_weights: bandwidth_not_squared
q3_module: pass
q4_bandwidth: not implemented
```
````

Each line names a question of the exercise and the answer checked for it: ``pass`` (the
reference), ``not implemented`` (an answer that still raises ``NotImplementedError``) or
the name of one of the question's known mistakes. The lines ``check`` prints for them, in
that order, become a literal block.
"""

from __future__ import annotations

from typing import Any

from docutils import nodes
from sphinx.application import Sphinx
from sphinx.util.docutils import SphinxDirective


def _not_implemented(*args: Any, **kwargs: Any) -> Any:
    raise NotImplementedError("replace this line with your code")


def sample(exercise_id: str, answers: list[tuple[str, str]], language: str) -> str:
    """What ``check`` prints, in ``language``, for the answers ``(question id, answer)``."""
    from attention_course.grading import get_exercise
    from attention_course.grading.checking import run_checks
    from attention_course.i18n import using

    exercise = get_exercise(exercise_id)
    namespace: dict[str, Any] = {}
    for question_id, answer in answers:
        question = exercise.question(question_id)
        if answer == "pass":
            namespace[question.symbol] = question.reference
        elif answer == "not implemented":
            namespace[question.symbol] = _not_implemented
        else:
            (mistake,) = [m for m in question.mistakes if m.name == answer]
            namespace[question.symbol] = mistake.wrong
    with using(language):
        results = run_checks(exercise_id, *(q for q, _a in answers), namespace=namespace)
        return "\n".join(r.line() for r in results)


class CheckSample(SphinxDirective):
    required_arguments = 1
    has_content = True

    def run(self) -> list[nodes.Node]:
        answers = []
        for line in self.content:
            if line.strip():
                question, _colon, answer = line.partition(":")
                answers.append((question.strip(), answer.strip()))
        try:
            text = sample(self.arguments[0], answers, self.config.language or "en")
        except (KeyError, LookupError, ValueError) as error:
            raise self.error(f"check-sample: {error}") from None
        block = nodes.literal_block(text, text, language="text")
        block["classes"] += ["check-sample"]
        return [block]


def setup(app: Sphinx) -> dict:
    app.add_directive("check-sample", CheckSample)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
