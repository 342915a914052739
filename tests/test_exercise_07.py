"""Exercise 7's typical mistakes, applied to the reference solution: each loses points with
a message that names it. Most answers are written here the way a learner would write them
(not taken from the spec's list); the last group are mistakes the spec does not list, whose
feedback must still say what to look at.
"""

from __future__ import annotations

import functools
import json

import pytest
import torch
import torch.nn.functional as F
from grading_helpers import (
    assert_named as named,
)
from grading_helpers import (
    choice,
    graded_record,
    judge,
    listed_mistake_test,
    replace_in_solution,
    solution_namespace,
    solution_path,
)
from torch import nn

from attention_course.grading import run_checks
from attention_course.grading.checking import prepare
from attention_course.grading.exercises import ex07_channel_spatial_attention as spec
from attention_course.grading.make_learner import strip_solutions

EX = "07_channel_spatial_attention"


feedback = functools.partial(judge, EX)
# a mistake costs every point of its question unless ``points`` says what is left
assert_named = functools.partial(named, points=0)
test_every_listed_mistake_loses_points_with_its_message = listed_mistake_test(EX)


# --------------------------------------------------------------------------- Q1 squeeze
@pytest.mark.parametrize("answer, words", [
    (lambda x: x.max(dim=3).values.max(dim=2).values, "largest value"),
    (lambda x: x.sum(dim=(2, 3)), "divide by the number of positions"),
    (lambda x: x.mean(dim=1), "averaged over the channels"),
    (lambda x: x.mean(dim=(1, 2)), "averaged over the channel and height axes"),
    (lambda x: x.mean(dim=-1), "averaged over the width axis"),
    (lambda x: x.mean(dim=(0, 2, 3)), "averaged over the batch, height and width axes"),
    (lambda x: x.mean(), "averaged over the batch, channel, height and width axes"),
    (lambda x: F.adaptive_avg_pool2d(x, 1), "(B, C, 1, 1)"),
])
def test_squeeze_mistakes(answer, words):
    assert_named(feedback("q1_squeeze", answer), words)


def test_squeeze_must_keep_gradients():
    def numbers(x):
        return torch.tensor(x.mean(dim=(2, 3)).tolist())

    def detached(x):
        return x.detach().mean(dim=(2, 3))

    for answer in (numbers, detached):
        result = feedback("q1_squeeze", answer)
        assert result.points == 0 and "does not carry gradients" in result.message


# --------------------------------------------------------------------------- Q2 SE block
class SE(nn.Module):
    """A learner's SE block; ``variant`` switches one mistake on."""

    variant = ""

    def __init__(self, channels, reduction=16):
        super().__init__()
        hidden = max(1, channels // reduction)
        bias = self.variant == "bias"
        self.fc1 = nn.Linear(channels, hidden, bias=bias)
        self.fc2 = nn.Linear(hidden, channels, bias=bias)

    def forward(self, x):
        v = self.variant
        z = x.amax(dim=(2, 3)) if v == "max" else x.mean(dim=(2, 3))
        h = self.fc1(z) if v == "no_relu" else torch.relu(self.fc1(z))
        scores = self.fc2(h)
        if v == "softmax":
            s = torch.softmax(scores, dim=1)
        elif v == "tanh":
            s = torch.tanh(scores)
        elif v == "hardsigmoid":
            s = F.hardsigmoid(scores)
        else:
            s = torch.sigmoid(scores)
        weights = s.view(s.shape[0], s.shape[1], 1, 1)
        if v == "weights_2d":
            return x * weights, s
        if v == "output_is_weights":
            return weights, weights
        if v == "residual":
            return x + x * weights, weights
        if v == "detached":
            return x * weights.detach(), weights
        if v == "inverted":
            return x * (1 - weights), 1 - weights
        return x * weights, weights


def se_with(variant: str) -> type:
    return type("SqueezeExcitation", (SE,), {"variant": variant})


@pytest.mark.parametrize("variant, words", [
    ("softmax", "sum to 1 over the channels"),
    ("max", "describes each channel by its maximum"),
    ("no_relu", "ReLU after the first layer"),
    ("weights_2d", "(B, C, 1, 1), ready to broadcast"),
    ("output_is_weights", "your output is the weights themselves"),
    ("residual", "adds the input back"),
])
def test_se_mistakes(variant, words):
    assert feedback("q2_se_block", se_with("")).passed
    assert_named(feedback("q2_se_block", se_with(variant)), words)


@pytest.mark.filterwarnings("ignore:Initializing zero-element tensors")
def test_se_block_without_a_minimum_of_one_hidden_unit():
    class NoMinimum(SE):
        def __init__(self, channels, reduction=16):
            nn.Module.__init__(self)
            self.fc1 = nn.Linear(channels, channels // reduction, bias=False)
            self.fc2 = nn.Linear(channels // reduction, channels, bias=False)

    NoMinimum.__name__ = "SqueezeExcitation"
    assert_named(feedback("q2_se_block", NoMinimum), "parameter 'fc1.weight'", "shape (0, 3)",
                 "asks for shape (1, 3)")


def test_se_builds_on_the_squeeze():
    def broken_squeeze(x):
        return x.sum(dim=(2, 3))

    class UsesSqueeze(SE):
        def forward(self, x):
            weights = torch.sigmoid(self.fc2(torch.relu(self.fc1(broken_squeeze(x)))))
            return x * weights[:, :, None, None], weights[:, :, None, None]

    UsesSqueeze.__name__ = "SqueezeExcitation"
    namespace = {**solution_namespace(EX), "squeeze": broken_squeeze,
                 "SqueezeExcitation": UsesSqueeze}
    (_, se_result) = run_checks(EX, "q1_squeeze", "q2_se_block", namespace=namespace)
    assert se_result.message.startswith("this question calls your answer to q1_squeeze")
    assert "sum of its values" in se_result.message


# --------------------------------------------------------------------------- Q3 derive
def counts(se, channel, spatial):
    def parameter_counts(channels, reduction, kernel_size):
        c, r, k = channels, reduction, kernel_size
        return {"se": se(c, r, k), "cbam_channel": channel(c, r, k),
                "cbam_spatial": spatial(c, r, k)}

    return parameter_counts


def right_se(c, r, k):
    return 2 * c * max(1, c // r)


def right_spatial(c, r, k):
    return 2 * k * k + 1


@pytest.mark.parametrize("answer, points, words", [
    (counts(lambda c, r, k: 2 * c * c // r, lambda c, r, k: 2 * c * c // r, right_spatial), 1,
     ["'se' and 'cbam_channel' in held-back case 3", "as a fraction"]),
    (counts(lambda c, r, k: 2 * c * (c // r), lambda c, r, k: 2 * c * (c // r),
            right_spatial), 1, ["keeps at least one hidden unit"]),
    (counts(right_se, lambda c, r, k: 4 * c * max(1, c // r), right_spatial), 2,
     ["'cbam_channel' in case 1", "one shared MLP"]),
    (counts(right_se, right_se, lambda c, r, k: 2 * k * k), 2,
     ["'cbam_spatial' in case 1", "has a bias too"]),
    (counts(right_se, right_se, lambda c, r, k: 2 * c * k * k + 1), 2,
     ["grows with C"]),
    (counts(right_se, right_se, lambda c, r, k: k * k + 1), 2, ["two stacked maps"]),
    (counts(lambda c, r, k: c * max(1, c // r), right_se, right_spatial), 2,
     ["one layer of the MLP"]),
    (counts(lambda c, r, k: 2 * c * c, lambda c, r, k: 2 * c * c, right_spatial), 1,
     ["keeps all C channels in its hidden layer"]),
    (counts(right_se, right_se, lambda c, r, k: 2 * k + 1), 2,
     ["k weights for each input map"]),
])
def test_parameter_count_mistakes(answer, points, words):
    assert_named(feedback("q3_parameter_counts", answer), *words, points=points)


def test_a_count_copied_from_the_visible_cases_fails_the_held_back_ones():
    def parameter_counts(channels, reduction, kernel_size):
        return {"se": 128, "cbam_channel": 128, "cbam_spatial": 99}

    result = feedback("q3_parameter_counts", parameter_counts)
    assert result.points == 0 and "case 2" in result.message


# --------------------------------------------------------------------------- Q4 spatial map
def spatial(first="mean", padding=None, gate=torch.sigmoid, use_bias=True):
    def spatial_attention_map(x, weight, bias):
        mean, top = x.mean(dim=1, keepdim=True), x.max(dim=1, keepdim=True).values
        stacked = torch.cat([mean, top] if first == "mean" else [top, mean], dim=1)
        pad = weight.shape[-1] // 2 if padding is None else padding
        return gate(F.conv2d(stacked, weight, bias if use_bias else None, padding=pad))

    return spatial_attention_map


@pytest.mark.parametrize("answer, words", [
    (spatial(first="max"), "maximum first, then the average"),
    (spatial(gate=lambda t: t), "raw output"),
    (spatial(padding=0), "smaller than the image"),
    (spatial(padding=1), "only for a 3 x 3 kernel"),
    (spatial(padding=3), "only for a 7 x 7 kernel"),
    (spatial(use_bias=False), "ignores the convolution's bias"),
    (spatial(gate=lambda t: torch.softmax(t.flatten(1), dim=1).view_as(t)),
     "sums to 1 over the positions"),
])
def test_spatial_map_mistakes(answer, words):
    assert feedback("q4_spatial_map", spatial()).passed
    assert_named(feedback("q4_spatial_map", answer), words)


def test_spatial_map_padding_same_is_fine_and_detach_is_not():
    def same(x, weight, bias):
        stacked = torch.cat([x.mean(1, keepdim=True), x.amax(1, keepdim=True)], 1)
        return torch.sigmoid(F.conv2d(stacked, weight, bias, padding="same"))

    assert feedback("q4_spatial_map", same).passed

    def no_grad_to_weight(x, weight, bias):
        return spatial()(x, weight.detach(), bias)

    assert_named(feedback("q4_spatial_map", no_grad_to_weight),
                 "the output is right, but not its gradient", "gradient of input 2")


# --------------------------------------------------------------------------- Q5 debug
def cbam_with(batch_max=False, from_input=False, twice=False, batch_both=False):
    """The debugging question's function with some of its bugs left in."""

    def cbam(x, w0, w1, weight, bias):
        def mlp(v):
            return torch.relu(v @ w0.T) @ w1.T

        average = x.mean(dim=(0, 2, 3) if batch_both else (2, 3))
        maximum = x.amax(dim=(0, 2, 3) if batch_max or batch_both else (2, 3))
        scores = (mlp(average) + mlp(maximum)).expand(x.shape[0], -1)
        channel_weights = torch.sigmoid(scores)[:, :, None, None]
        refined = x * channel_weights
        source = x if from_input else refined
        pooled = torch.cat([source.mean(dim=1, keepdim=True),
                            source.amax(dim=1, keepdim=True)], dim=1)
        spatial_map = torch.sigmoid(F.conv2d(pooled, weight, bias,
                                             padding=weight.shape[-1] // 2))
        output = refined * channel_weights * spatial_map if twice else refined * spatial_map
        return {"channel_weights": channel_weights, "spatial_map": spatial_map,
                "output": output}

    return cbam


@pytest.mark.parametrize("bugs, points, words", [
    ({"batch_max": True, "from_input": True, "twice": True}, 0,
     ["'channel_weights' in case 1 (B=2, C=6, 8x8, k=7): still a bug "
      "here: the max-pooled channel descriptor is pooled over the whole batch",
      "'spatial_map' in case 1 (B=2, C=6, 8x8, k=7): still a bug here: "
      "the spatial map reads the input",
      "k=7): none of the three bugs is fixed yet: the output is computed from the "
      "channel weights (pooled over the batch) and the spatial map (read from the input), "
      "still wrong above: fix them first; and the output carries the channel weights twice"]),
    ({"from_input": True, "twice": True}, 1,
     ["k=7): still a bug here: the spatial map reads the input",
      "k=7): the output is computed from the spatial map (read from the input), still "
      "wrong above: fix that first; and the output carries the channel weights twice"]),
    ({"twice": True}, 2, ["'output' in case 1 (B=2", "still a bug here: the output carries "
                          "the channel weights twice"]),
    ({"batch_max": True}, 0, ["pool each image on its own",
                              "the spatial map is computed from the channel weights, which "
                              "are still wrong (pooled over the batch): fix them first"]),
    ({"from_input": True}, 1, ["CBAM applies its channel weights first"]),
])
def test_debug_names_the_bugs_left(bugs, points, words):
    assert feedback("q5_debug_cbam", cbam_with()).passed
    assert_named(feedback("q5_debug_cbam", cbam_with(**bugs)), *words, points=points)


def test_debug_half_fixes():
    def max_only_from_input(x, w0, w1, weight, bias):
        out = cbam_with()(x, w0, w1, weight, bias)
        refined = x * out["channel_weights"]
        pooled = torch.cat([refined.mean(dim=1, keepdim=True), x.amax(dim=1, keepdim=True)], 1)
        out["spatial_map"] = torch.sigmoid(F.conv2d(pooled, weight, bias,
                                                    padding=weight.shape[-1] // 2))
        out["output"] = refined * out["spatial_map"]
        return out

    assert_named(feedback("q5_debug_cbam", max_only_from_input),
                 "only the average map reads the refined input", points=1)

    result = feedback("q5_debug_cbam", cbam_with(batch_both=True))
    assert_named(result, "'channel_weights' in case 1", "both channel descriptors are pooled "
                 "over the whole batch")


def test_every_state_on_the_way_to_the_fix_is_explained():
    """Whatever is left broken (one stage, or the starter's channel bug with any spatial
    one, and any output bug), each failing part says why, and the points count the parts
    that are right."""
    for c, s in [(None, None), *spec._broken_stages()]:
        for o in [None, *spec.OUTPUT_BUGS]:
            result = feedback("q5_debug_cbam", spec._cbam_variant(c, s, o))
            right = (c is None) + (c is None and s is None) + (c is s is o is None)
            assert result.points == right, (c, s, o, result.message)
            assert "values differ" not in result.message, (c, s, o, result.message)
            failing = [part for part in spec.PARTS if f"'{part}' in case" in result.message]
            assert len(failing) == 3 - right, (c, s, o, result.message)


def test_the_starter_code_is_the_unfixed_mistake():
    """The learner's starter, run as it is but without its first line, scores 0 and names
    all three bugs."""
    learner = solution_namespace(EX)  # the reference's names, then the starter's cell
    raise_statement = ('    raise NotImplementedError('
                       '"fix the three bugs, then delete this line")\n')
    starter = _starter_source()
    assert starter.count(raise_statement) == 1
    source = starter.replace(raise_statement, "")
    exec(compile(source, "starter", "exec"), learner)
    result = feedback("q5_debug_cbam", learner["cbam"])
    assert result.points == 0 and "none of the three bugs is fixed yet" in result.message


def _starter_source() -> str:
    nb = json.loads(solution_path(EX).read_text())
    (cell,) = [c for c in nb["cells"] if "BEGIN STARTER" in "".join(c["source"])]
    return strip_solutions("".join(cell["source"]))


# --------------------------------------------------------------------------- Q6 predict
@pytest.mark.parametrize("answer, points, words", [
    ({"se_weights": "shifted"}, 2, ["'se_weights' in case 1", "no positions that could move"]),
    ({"se_weights": "different"}, 2, ["same values, only in another order"]),
    ({"cbam_channel_weights": "different"}, 2, ["does not care where the largest value"]),
    ({"cbam_spatial_map": "unchanged"}, 2, ["must move somewhere"]),
    ({"cbam_spatial_map": "different"}, 2, ["same kernel at every position"]),
    ({"se_weights": "different", "cbam_channel_weights": "shifted",
      "cbam_spatial_map": "unchanged"}, 0, ["one number per channel, with no positions"]),
    ({"cbam_spatial_map": "moves"}, 2, ["'moves' is not one of the choices"]),
])
def test_prediction_mistakes(answer, points, words):
    prediction = {**spec.PREDICTION, **answer}
    assert_named(feedback("q6_predict_shift", lambda: prediction), *words, points=points)


# --------------------------------------------------------------------------- Q7 experiment
def experiment(roll=lambda x, dy, dx: torch.roll(x, (dy, dx), dims=(2, 3)),
               peak=lambda m: divmod(int(m.argmax()), m.shape[-1]), change="channel_weights",
               cbam=None):
    def shift_experiment(x, dy, dx, w0, w1, weight, bias):
        nonlocal cbam
        cbam = cbam or solution_namespace(EX)["cbam"]
        before, after = cbam(x, w0, w1, weight, bias), cbam(roll(x, dy, dx), w0, w1, weight, bias)
        return {"channel_change": float((after[change] - before[change]).abs().max()),
                "peak_before": peak(before["spatial_map"]),
                "peak_after": peak(after["spatial_map"])}

    return shift_experiment


@pytest.mark.parametrize("answer, points, words", [
    (experiment(peak=lambda m: divmod(int(m.argmax()), m.shape[-1])[::-1]), 1,
     ["'peak_before' and 'peak_after' in case 1", "(column, row)"]),
    (experiment(roll=lambda x, dy, dx: torch.roll(x, (dx, dy), dims=(2, 3))), 2,
     ["'peak_after' in case 1", "dy moves the rows"]),
    (experiment(roll=lambda x, dy, dx: torch.roll(x, dy, dims=2)), 2, ["along the rows only"]),
    (experiment(roll=lambda x, dy, dx: torch.roll(x, (-dy, -dx), dims=(-2, -1))), 2,
     ["moved the other way"]),
    (experiment(roll=lambda x, dy, dx: torch.roll(x, (dy, dx), dims=(1, 2))), 1,
     ["rolled the channels"]),
    (experiment(change="spatial_map"), 2, ["'channel_change' in case 1", "spatial map"]),
    (experiment(peak=lambda m: m.flatten().argmax()), 1, ["positions in the flattened map"]),
    (experiment(peak=lambda m: torch.tensor(divmod(int(m.argmax()), m.shape[-1]))), 1,
     ["your peaks are right, but as tensors"]),
])
def test_experiment_mistakes(answer, points, words):
    assert feedback("q7_shift_experiment", experiment()).passed
    assert_named(feedback("q7_shift_experiment", answer), *words, points=points)


def test_experiment_builds_on_the_debugged_cbam():
    # batch-wide pooling is harmless on a batch of one image: the experiment still passes
    namespace = {**solution_namespace(EX), "cbam": cbam_with(batch_max=True),
                 "shift_experiment": experiment(cbam=cbam_with(batch_max=True))}
    debug, shift = run_checks(EX, "q5_debug_cbam", "q7_shift_experiment", namespace=namespace)
    assert not debug.passed and shift.passed
    # a spatial map read from the input sees the decoys: the experiment fails, and says why
    broken = cbam_with(from_input=True)
    namespace = {**solution_namespace(EX), "cbam": broken,
                 "shift_experiment": experiment(cbam=broken)}
    (shift,) = run_checks(EX, "q7_shift_experiment", namespace=namespace)
    assert shift.message.startswith("this question calls your answer to q5_debug_cbam")


# --------------------------------------------------------------------------- not listed
def test_mistakes_not_in_the_list_still_get_useful_feedback():
    # SE with biases in its layers: the grader loads only the weights
    result = feedback("q2_se_block", se_with("bias"))
    assert_named(result, "do your layers have biases?")
    # SE with a hard sigmoid: in (0, 1), no biases to fit, not SE's
    assert_named(feedback("q2_se_block", se_with("hardsigmoid")), "they are not SE's")
    # a spatial map whose sigmoid comes before the convolution
    assert_named(feedback("q4_spatial_map", lambda x, w, b: F.conv2d(torch.sigmoid(torch.cat(
        [x.mean(1, keepdim=True), x.amax(1, keepdim=True)], 1)), w, b,
        padding=w.shape[-1] // 2)), "outside (0, 1)")
    # SE with tanh: weights outside (0, 1)
    assert_named(feedback("q2_se_block", se_with("tanh")), "outside (0, 1)", "sigmoid")
    # SE whose weights are one minus the right ones: consistent, in (0, 1), but not SE's
    assert_named(feedback("q2_se_block", se_with("inverted")), "they are not SE's")
    # SE that detaches its weights: the output is right, its gradient is not
    assert_named(feedback("q2_se_block", se_with("detached")), "not its gradient")
    # a spatial map through a ReLU instead of a sigmoid
    assert_named(feedback("q4_spatial_map", spatial(gate=torch.relu)), "outside (0, 1)")
    # a spatial map that is one minus the right one
    assert_named(feedback("q4_spatial_map", lambda x, w, b: 1 - spatial()(x, w, b)),
                 "check the two pooled maps")
    # the squeeze as a median, or a sum divided by the height only
    assert_named(feedback("q1_squeeze", lambda x: x.flatten(2).median(dim=2).values),
                 "not each channel's average over its H x W positions")
    assert_named(feedback("q1_squeeze", lambda x: x.sum(dim=(2, 3)) / x.shape[2]),
                 "your values are 5 times the averages")
    # a CBAM debugged with a stray ReLU on the spatial map: only the map and output fail
    def relu_map(x, w0, w1, weight, bias):
        out = cbam_with()(x, w0, w1, weight, bias)
        refined = x * out["channel_weights"]
        out["spatial_map"] = torch.relu(out["spatial_map"] - 0.5)
        out["output"] = refined * out["spatial_map"]
        return out

    assert_named(feedback("q5_debug_cbam", relu_map), "'spatial_map' in case 1", points=1)
    # an experiment whose peaks are float tensors
    result = feedback("q7_shift_experiment", experiment(
        peak=lambda m: torch.tensor(divmod(int(m.argmax()), m.shape[-1])).float()))
    assert_named(result, "'peak_before'", "expected a tuple of length 2", points=1)


def test_prepare_is_cheap():
    """The references and all known mistakes on every case: well under the grader's budget."""
    import time

    prepare.cache_clear()
    start = time.perf_counter()
    prepare(EX)
    assert time.perf_counter() - start < 10


# --------------------------------------------------------------------------- real grader
def test_the_grader_names_mistakes_in_a_submitted_notebook(tmp_path, server):
    cells = replace_in_solution(
        EX, ("[x.mean(dim=1, keepdim=True), x.amax(dim=1, keepdim=True)], dim=1\n"
             "    )\n    return",
             "[x.amax(dim=1, keepdim=True), x.mean(dim=1, keepdim=True)], dim=1\n"
             "    )\n    return"),
        choice("cbam_spatial_map", "shifted", "unchanged"),
        ("maximum = x.amax(dim=(2, 3))", "maximum = x.amax(dim=(0, 2, 3))"))
    record = graded_record(EX, tmp_path, cells, server)
    by_id = {q.id: q for q in record.questions}
    assert record.error is None and record.notebook_errors == []
    assert by_id["q4_spatial_map"].points == 0
    assert "maximum first, then the average" in by_id["q4_spatial_map"].message
    assert by_id["q5_debug_cbam"].points == 0
    assert "pool each image on its own" in by_id["q5_debug_cbam"].message
    assert by_id["q6_predict_shift"].points == 2
    assert "must move somewhere" in by_id["q6_predict_shift"].message
    # the batch-wide maximum is harmless for the experiment's single image
    assert by_id["q7_shift_experiment"].passed
    assert (record.score, record.max_score) == (17 - 2 - 3 - 1, 17)
