"""``{quiz}``: a self-check question that works in the rendered page without a kernel.

Written in MyST, so that its text is part of the page (typeset by the page's MathJax,
translated with the rest of the book):

````markdown
```{quiz} You make the bandwidth $h$ huge. What do the predictions become?
:answer: 2

- The value of the nearest training point.

  That is the other limit: a very narrow kernel, $h \\to 0$.
- The mean of all training targets, for every query.

  Right: every weight tends to $1/n$, which is average pooling.
```
````

The directive's argument is the question; each item of its one bullet list is a choice:
its first paragraph the answer, the rest the feedback shown once it is picked.
``:answer:`` numbers the right choice (from 1; several for a question with more than one
right answer, e.g. ``1 3``). Rendered as a group of buttons; a pick shows its feedback in
a live region (screen readers announce it) and marks it right or wrong, in words as well
as colour.
"""

from __future__ import annotations

import html

from docutils import nodes
from docutils.parsers.rst import directives
from sphinx.application import Sphinx
from sphinx.util.docutils import SphinxDirective


class quiz_node(nodes.General, nodes.Element):  # noqa: N801 - docutils' naming
    """The whole question: a paragraph, then one ``choice_node`` per answer."""


class choice_node(nodes.General, nodes.Element):  # noqa: N801
    """One answer: its text, then its feedback (attribute ``correct``)."""


class feedback_node(nodes.General, nodes.Element):  # noqa: N801
    """What a learner reads after picking the answer."""


class Quiz(SphinxDirective):
    required_arguments = 1
    final_argument_whitespace = True
    has_content = True
    option_spec = {"answer": directives.positive_int_list}

    def run(self) -> list[nodes.Node]:
        question = nodes.paragraph(self.arguments[0], classes=["quiz-question"])
        question.source, question.line = self.get_source_info()  # so it can be translated
        text_nodes, messages = self.state.inline_text(self.arguments[0], self.lineno)
        question += text_nodes
        body = nodes.container()
        self.state.nested_parse(self.content, self.content_offset, body)
        lists = [n for n in body.children if isinstance(n, nodes.bullet_list)]
        if len(lists) != 1 or len(body.children) != 1:
            raise self.error("a quiz holds exactly one bullet list: one item per choice")
        items = list(lists[0].children)
        answers = set(self.options.get("answer", []))
        if not answers or not answers <= set(range(1, len(items) + 1)):
            raise self.error(f":answer: must number choices 1..{len(items)}, got {answers}")
        node = quiz_node(classes=["quiz"])
        node += question
        for number, item in enumerate(items, start=1):
            parts = list(item.children)
            if not parts or not isinstance(parts[0], nodes.paragraph) or len(parts) < 2:
                raise self.error(f"choice {number}: write the answer, a blank line, then the "
                                 f"feedback")
            choice = choice_node(correct=number in answers)
            choice += parts[0].deepcopy()
            feedback = feedback_node()
            feedback += [p.deepcopy() for p in parts[1:]]
            choice += feedback
            node += choice
        return [node, *messages]


VERDICTS = {"en": ("Right.", "Not quite."), "zh_CN": ("答对了。", "不太对。")}


def visit_quiz(self, node: quiz_node) -> None:
    right, wrong = VERDICTS.get(self.builder.config.language or "en", VERDICTS["en"])
    self.body.append(f'<div class="quiz" role="group" data-right="{right}" '
                     f'data-wrong="{wrong}">')


def depart_quiz(self, node: quiz_node) -> None:
    self.body.append('<div class="quiz-feedback" aria-live="polite"></div></div>')


def visit_choice(self, node: choice_node) -> None:
    right = "true" if node["correct"] else "false"
    # a choice that is only maths has no text a screen reader can name the button by
    # (MathJax's rendering is not read out): name it by its source, TeX included
    label = ""
    answer = node.children[0] if node.children else None
    if answer is not None and answer.next_node(nodes.math) is not None and not any(
            isinstance(n, nodes.Text) and n.astext().strip()
            and not isinstance(n.parent, nodes.math)
            for n in answer.findall(nodes.Text)):
        label = f' aria-label="{html.escape(answer.astext(), quote=True)}"'
    self.body.append(f'<div class="quiz-choice" data-correct="{right}">'
                     f'<button type="button" class="quiz-button" aria-pressed="false"'
                     f'{label}>')


def depart_choice(self, node: choice_node) -> None:
    self.body.append("</div>")


def visit_feedback(self, node: feedback_node) -> None:
    self.body.append('</button><div class="quiz-choice-feedback" hidden>')


def depart_feedback(self, node: feedback_node) -> None:
    self.body.append("</div>")


def _skip(self, node: nodes.Node) -> None:
    raise nodes.SkipNode


def setup(app: Sphinx) -> dict:
    app.add_node(quiz_node, html=(visit_quiz, depart_quiz), latex=(_skip, None),
                 text=(_skip, None))
    app.add_node(choice_node, html=(visit_choice, depart_choice), latex=(_skip, None),
                 text=(_skip, None))
    app.add_node(feedback_node, html=(visit_feedback, depart_feedback), latex=(_skip, None),
                 text=(_skip, None))
    app.add_directive("quiz", Quiz)
    app.add_js_file("quiz.js", defer="defer")
    app.add_css_file("quiz.css")
    return {"parallel_read_safe": True, "parallel_write_safe": True}
