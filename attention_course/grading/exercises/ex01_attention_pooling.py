"""Exercise 1: attention pooling by kernel regression (chapter 1).

Six questions, four kinds: the Gaussian weights and the Nadaraya-Watson prediction
(implement), a learnable-bandwidth module that does not learn (debug), leave-one-out
bandwidth choice (implement), what a narrow bandwidth does to the training and held-out
errors (predict), and a Gaussian kernel with one bandwidth per feature rewritten as a
dot product plus a per-key bias, an extension of the chapter's bridge to chapter 2 (derive).

The references are the package's own chapter-1 code (``attention_course.kernel_regression``)
or a line of algebra. Every known mistake below is a wrong variant of the reference: the
grader computes what it outputs and, when a learner's answer matches it, says so.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from attention_course import kernel_regression as kr
from attention_course.grading.compare import rows_sum_to_one
from attention_course.grading.spec import Case, Exercise, Mistake, Question
from attention_course.grading.tables import drawn_cases, mistake_table, prediction
from attention_course.i18n import _

NW_SECTION = "1.3 Nadaraya-Watson: let the query choose the weights"
BANDWIDTH_SECTION = "1.4 The bandwidth trades bias for variance"
LEARNED_SECTION = "1.6 Attention pooling with a learned bandwidth"
DOT_SECTION = "1.8 From distances to dot products: the bridge to chapter 2"


def _points(g: torch.Generator, n: int) -> torch.Tensor:
    return torch.sort(torch.rand(n, generator=g) * 5).values


def _data(g: torch.Generator, n: int, noise: float = 0.3) -> tuple[torch.Tensor, torch.Tensor]:
    x = _points(g, n)
    return x, 2 * torch.sin(x) + x**0.8 + noise * torch.randn(n, generator=g)


def _squared_differences(queries: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
    return (queries[:, None] - keys[None, :]) ** 2


# --------------------------------------------------------------------------- question 1
def _weight_case(g: torch.Generator, n_queries: int, n_keys: int, h: float) -> Case:
    q, k = _points(g, n_queries), _points(g, n_keys)
    return Case(args=(q, k, h), label=f"{n_queries} queries, {n_keys} keys, h = {h}")


# no bandwidth of 1 or 2 (where 2h = 2h^2 or h^2 = 2h), so each mistake shows
weight_cases = drawn_cases(101, _weight_case, visible=[(3, 5, 0.8), (4, 7, 0.45), (1, 4, 1.3)],
                           hidden=[(6, 6, 0.6)])


def _scored(scale=lambda h: 2 * h**2, distance: str = "squared", sign: float = -1.0,
            dim: int = -1):
    """Weights ``softmax(sign * distance / scale(h))`` over ``dim``: the Gaussian weights
    with one thing changed."""

    def weights(queries, keys, bandwidth):
        d = _squared_differences(queries, keys)
        if distance == "absolute":
            d = d.sqrt()
        return torch.softmax(sign * d / scale(bandwidth), dim=dim)

    return weights


def _kernel_values(queries, keys, bandwidth):
    return torch.exp(-_squared_differences(queries, keys) / (2 * bandwidth**2))


WEIGHT_MISTAKES = (
    *mistake_table(_scored, [
        ("bandwidth_not_squared", {"scale": lambda h: 2 * h},
         "your scores are divided by 2h, not by 2h squared: the bandwidth is squared, "
         "like the distance it scales"),
        ("half_missing", {"scale": lambda h: h**2},
         "your scores are twice the right size: the Gaussian kernel divides the squared "
         "distance by 2h squared, and your factor 2 is missing"),
        ("divided_by_h", {"scale": lambda h: h},
         "you divide the squared distance by h: both the square of the bandwidth and the "
         "factor 2 are missing (the score is minus the squared distance over 2h squared)"),
        ("two_h_squared", {"scale": lambda h: (2 * h) ** 2},
         "you divide by 2h, all squared, which is 4h squared: only the bandwidth is "
         "squared, the 2 is not"),
        ("bandwidth_multiplied", {"scale": lambda h: 2 / h**2},
         "you multiply by the squared bandwidth instead of dividing by it, so a wider "
         "bandwidth gives a narrower kernel"),
        ("softmax_over_queries", {"dim": 0},
         "your weights are normalised over the queries (each column sums to 1); each "
         "query's weights must sum to 1 over the keys, one row per query"),
        ("sign_dropped", {"sign": 1.0},
         "your weights grow with the distance, so the farthest key gets the most weight: "
         "the score is minus the squared distance"),
        ("absolute_distance", {"distance": "absolute"},
         "you score with the distance itself; the Gaussian kernel uses the squared "
         "distance"),
    ]),
    Mistake("not_normalised", _kernel_values,
            "these are the kernel values before normalisation: each row must be divided by "
            "its sum, which a softmax over the keys does for you"),
    Mistake("log_softmax", lambda q, k, h: torch.log_softmax(
                -_squared_differences(q, k) / (2 * h**2), dim=-1),
            "your weights are negative: they are the logarithms of the weights (a "
            "log-softmax); the question asks for the weights themselves, between 0 and 1"),
    Mistake("scores_only", lambda q, k, h: -_squared_differences(q, k) / (2 * h**2),
            "these are the scores, before the softmax: the weights are the softmax of the "
            "scores over the keys"),
    Mistake("difference_of_squares", lambda q, k, h: torch.softmax(
                -(q[:, None] ** 2 - k[None, :] ** 2) / (2 * h**2), dim=-1),
            "you subtract the squares of the query and the key; the kernel squares their "
            "difference, the squared distance between them"),
    Mistake("difference_not_squared", lambda q, k, h: torch.softmax(
                -(q[:, None] - k[None, :]) / (2 * h**2), dim=-1),
            "you score with the signed difference between query and key, not squared: a key "
            "on one side then beats a key at the same distance on the other side"),
)


# --------------------------------------------------------------------------- question 2
def _predict_case(g: torch.Generator, n_queries: int, n_keys: int, h: float,
                  dv: int | None) -> Case:
    keys, values = _data(g, n_keys)
    if dv is not None:
        values = torch.stack([values * (j + 1) - j for j in range(dv)], dim=1)
    queries = _points(g, n_queries)
    shape = f"values ({n_keys}, {dv})" if dv else f"{n_keys} scalar values"
    return Case(args=(queries, keys, values, h),
                label=f"{n_queries} queries, {n_keys} keys, {shape}, h = {h}")


predict_cases = drawn_cases(102, _predict_case,
                            visible=[(5, 10, 0.7, None), (8, 20, 0.4, None), (3, 6, 1.5, 2)],
                            hidden=[(7, 9, 0.9, None), (4, 12, 0.3, 3)])


def _predict(queries, keys, values, bandwidth):
    return kr.nadaraya_watson(queries, keys, values, bandwidth)[0]


def _average_pooling(queries, keys, values, bandwidth):
    return kr.average_pooling(queries, values)


def _nearest_key(queries, keys, values, bandwidth):
    return values[kr.attention_weights(queries, keys, bandwidth).argmax(dim=-1)]


def _unnormalised_average(queries, keys, values, bandwidth):
    return _kernel_values(queries, keys, bandwidth) @ values


def _over_queries(queries, keys, values, bandwidth):
    return _scored(dim=0)(queries, keys, bandwidth) @ values


def _mean_of_weighted(queries, keys, values, bandwidth):
    return _predict(queries, keys, values, bandwidth) / len(keys)


PREDICT_MISTAKES = (
    Mistake("average_pooling", _average_pooling,
            "every query gets the same prediction, the plain mean of the values: that is "
            "average pooling. Weight each value by the query's attention weight on its key"),
    Mistake("nearest_key", _nearest_key,
            "you answer with the value of the one key that has the largest weight (hard "
            "attention); Nadaraya-Watson averages all the values, each with its weight"),
    Mistake("not_normalised", _unnormalised_average,
            "your weights do not sum to 1, so the prediction is not an average of the "
            "values: normalise each query's kernel values over the keys first"),
    Mistake("divided_by_number_of_keys", _mean_of_weighted,
            "your predictions are as many times too small as there are keys: the weights "
            "already sum to 1, so the weighted sum is the average (no division by the "
            "number of keys)"),
    Mistake("weights_over_queries", _over_queries,
            "your weights are normalised over the queries instead of over the keys: each "
            "query's weights on the keys must sum to 1"),
    Mistake("averages_keys", lambda q, k, v, h: kr.attention_weights(q, k, h) @ k,
            "you average the keys, not the values: the keys only decide the weights, and "
            "the prediction is the weighted average of the values"),
    Mistake("keys_and_values_swapped", lambda q, k, v, h: kr.attention_weights(q, v, h) @ k,
            "keys and values are swapped: the weights must come from comparing the query "
            "with the keys, and then average the values"),
)


# --------------------------------------------------------------------------- question 3
FIT_STEPS, FIT_LR = 30, 1.0


def fit_bandwidth(module: nn.Module, x, y, queries, steps: int = FIT_STEPS, lr: float = FIT_LR):
    """The notebook's given ``fit`` (the same code): plain gradient descent on the
    leave-one-out error; the bandwidth before training and after every step, and the
    predictions at ``queries`` after training.

    The step is written out rather than taken by ``torch.optim.SGD``: creating the first
    optimiser of a process imports half of torch (seconds), more than a question may take.
    """
    bandwidths = [module.log_bandwidth.exp().detach()]
    for _step in range(steps):
        loss = torch.mean((module(x, x, y, exclude_self=True) - y) ** 2)
        loss.backward()
        with torch.no_grad():
            for parameter in module.parameters():
                parameter -= lr * parameter.grad
                parameter.grad = None
        bandwidths.append(module.log_bandwidth.exp().detach())
    with torch.no_grad():
        predictions = module(queries, x, y)
    return {"bandwidths": torch.stack(bandwidths), "predictions": predictions}


class Pooling(kr.NWKernelRegression):
    """The chapter's module with the notebook's given ``fit``: the reference of question 3."""

    def fit(self, x, y, queries, steps: int = FIT_STEPS, lr: float = FIT_LR):
        return fit_bandwidth(self, x, y, queries, steps, lr)


def _variant(bandwidth_of=torch.exp, init_log: bool = True, leave_out: str = "mask",
             scale=lambda h: 2 * h**2, dim: int = -1):
    """A broken ``Pooling``: how the bandwidth is stored and read, how a point is left out,
    what divides the squared distance, which axis the softmax normalises."""

    class Broken(Pooling):
        def __init__(self, init_bandwidth: float = 1.0) -> None:
            super().__init__(init_bandwidth)
            if not init_log:  # the parameter holds h itself
                with torch.no_grad():
                    self.log_bandwidth.fill_(init_bandwidth)

        def forward(self, queries, keys, values, exclude_self=False):
            h = bandwidth_of(self.log_bandwidth)
            scores = -_squared_differences(queries, keys) / scale(h)
            itself = torch.eye(len(queries), dtype=torch.bool)
            if exclude_self and leave_out == "mask":
                scores = scores.masked_fill(itself, -math.inf)
            weights = torch.softmax(scores, dim=dim)
            if exclude_self and leave_out in ("zero", "zero_columns"):
                weights = weights.masked_fill(itself, 0.0)
            if exclude_self and leave_out == "zero_columns":  # renormalised over a column
                weights = weights / weights.sum(dim=0, keepdim=True)
            return weights @ values

    return Broken


def _module_case(g: torch.Generator, n: int, n_queries: int, init: float,
                 h: float | None) -> Case:
    x, y = _data(g, n)
    queries = _points(g, n_queries)
    params = {} if h is None else {"log_bandwidth": torch.tensor(h).log()}
    start = f"log_bandwidth set to log({h})" if h else f"init_bandwidth = {init}"
    return Case(init_args=(init,), params=params, args=(x, y, queries),
                label=f"fit on {n} points, {start}, {n_queries} queries")


# the first case sets log_bandwidth; the others start from init_bandwidth alone
module_cases = drawn_cases(103, _module_case, visible=[(15, 4, 1.0, 0.7), (20, 5, 0.5, None)],
                           hidden=[(16, 6, 2.0, None), (12, 3, 1.5, 0.4)])


MODULE_MISTAKES = mistake_table(_variant, [
    ("log_used_as_bandwidth", {"bandwidth_of": lambda p: p},
     "your forward uses log_bandwidth itself as the bandwidth: the parameter holds "
     "the logarithm of h and the bandwidth is its exponential, which stays positive "
     "whatever step the optimiser takes (a step on h itself can take it to 0 or below)"),
    ("stores_bandwidth", {"init_log": False},
     "the module starts from the wrong bandwidth: __init__ stores init_bandwidth "
     "itself in log_bandwidth, which must hold its logarithm"),
    ("left_out_not_renormalised", {"leave_out": "zero"},
     "with exclude_self your weights no longer sum to 1: a point's own weight is "
     "set to zero but the other weights are not renormalised (give its score minus "
     "infinity before the softmax, or divide the remaining weights by their sum)"),
    ("renormalised_over_queries", {"leave_out": "zero_columns"},
     "with exclude_self you zero a point's own weight and then divide by the sums "
     "over the queries (the columns); each query's row must be divided by its own "
     "sum, over the keys"),
    ("self_not_left_out", {"leave_out": "none"},
     "exclude_self changes nothing in your forward: each training point still "
     "weighs itself, so the training shrinks the bandwidth towards 0"),
    # the weights themselves wrong (question 1's mistakes, written into forward)
    ("weights_over_queries", {"dim": 0},
     "the weights of your forward are normalised over the queries; each query's "
     "weights must sum to 1 over the keys"),
    ("bandwidth_not_squared", {"scale": lambda h: 2 * h},
     "your forward divides the squared distance by 2h, not by 2h squared"),
    ("half_missing", {"scale": lambda h: h**2},
     "your forward divides the squared distance by h squared: the factor 2 of 2h "
     "squared is missing"),
])


def starting_bandwidth(case: Case, expected, got) -> str | None:
    """A ``diagnose`` hook for question 3: name a module that starts from the wrong
    bandwidth (what ``__init__`` stores), whatever the wrong line is."""
    try:
        want, mine = float(expected["bandwidths"][0]), float(got["bandwidths"][0])
    except (TypeError, KeyError, IndexError, ValueError):
        return None
    if case.params or math.isclose(want, mine, rel_tol=1e-4):
        return None  # where the grader sets log_bandwidth, the start is not the module's
    return _("before training your module's bandwidth is {mine}, where init_bandwidth "
             "is {want}: __init__ must store the logarithm of init_bandwidth").format(
                 mine=f"{mine:.4g}", want=f"{want:.4g}")


# --------------------------------------------------------------------------- question 4
CANDIDATES = [0.05, 0.1, 0.2, 0.3, 0.5, 0.8, 1.2, 2.5, 4.0]


def _bandwidth_case(g: torch.Generator, n: int, noise: float) -> Case:
    x, y = _data(g, n, noise)
    return Case(args=(x, y, list(CANDIDATES)),
                label=f"{n} points, noise {noise}, {len(CANDIDATES)} candidates")


bandwidth_cases = drawn_cases(104, _bandwidth_case, visible=[(40, 0.1), (60, 1.0)],
                              hidden=[(30, 0.4), (45, 0.6)])


def _loo_errors(x, y, candidates, leave_out: str = "mask", squared_mean: bool = False,
                scale=lambda h: 2 * h**2, signed: bool = False):
    errors = []
    for h in candidates:
        scores = -_squared_differences(x, x) / scale(h)
        itself = torch.eye(len(x), dtype=torch.bool)
        if leave_out == "mask":
            scores = scores.masked_fill(itself, -math.inf)
        weights = torch.softmax(scores, dim=-1)
        if leave_out == "zero":
            weights = weights.masked_fill(itself, 0.0)
        residual = weights @ y - y
        if signed:
            errors.append(float(residual.mean()))
        else:
            errors.append(float(residual.mean() ** 2 if squared_mean else
                                (residual**2).mean()))
    return errors


def _argmin(errors):
    return min(range(len(errors)), key=errors.__getitem__)


def _pick(**how):
    def choose(x, y, candidates):
        return float(candidates[_argmin(_loo_errors(x, y, candidates, **how))])

    return choose


def _largest_error(x, y, candidates):
    errors = _loo_errors(x, y, candidates)
    return float(candidates[max(range(len(errors)), key=errors.__getitem__)])


def _best_index(x, y, candidates):
    return _argmin(_loo_errors(x, y, candidates))


def _best_error(x, y, candidates):
    return min(_loo_errors(x, y, candidates))


# A choice among a few candidates cannot prove a cause, so these messages say what the
# answer matches and ask about the likely cause.
BANDWIDTH_MISTAKES = (
    *mistake_table(_pick, [
        ("self_included", {"leave_out": "none"},
         "your choice is the one that fits the training points with each point included "
         "in its own prediction, which rewards the narrowest kernel: did you leave each "
         "point out of its own prediction?"),
        ("left_out_not_renormalised", {"leave_out": "zero"},
         "your choice matches leave-one-out weights that do not sum to 1: did you set a "
         "point's own weight to zero without renormalising the others?"),
        ("bandwidth_not_squared", {"scale": lambda h: 2 * h},
         "your choice matches scores that divide the squared distance by 2h instead of "
         "2h squared: is the bandwidth squared in your scores?"),
        ("squared_mean", {"squared_mean": True},
         "your choice matches the square of the mean error, where positive and negative "
         "errors cancel: did you average the squared errors?"),
        ("signed_mean", {"signed": True},
         "your choice matches the smallest mean of the signed errors, which rewards "
         "predictions that fall below their targets: did you square each error before "
         "averaging?"),
    ]),
    Mistake("largest_error", _largest_error,
            "your choice is the candidate with the largest leave-one-out error; keep the "
            "smallest"),
    Mistake("index", _best_index,
            "you answered with the position of the best candidate in the list, not with "
            "its bandwidth"),
    Mistake("error_value", _best_error,
            "you answered with the smallest leave-one-out error itself; the question asks "
            "for the bandwidth that achieves it"),
)


# --------------------------------------------------------------------------- question 5
ERROR_TRENDS = ("training down, held-out down", "training down, held-out up",
                "training up, held-out down", "training up, held-out up")

# answers that are no choice at all
NOT_A_CHOICE = (
    Mistake("no_answer", lambda: None,
            "your function gives back nothing (None): end it by giving back one of the "
            "four choices, as a string"),
    # a number or a truth value is no choice; naming them here keeps the message from
    # quoting the answer
    *(Mistake(f"truth_{value}", lambda value=value: value,
              f"you answered {value}: give back the words of your choice instead, exactly "
              f"as written in the question")
      for value in (True, False)),
    *(Mistake(f"number_{i}", lambda i=i: i,
              f"you answered with the number {i}: give back the words of your choice "
              f"instead, exactly as written in the question")
      for i in range(5)),
)

WRONG_TRENDS = [
    ("both_down", ERROR_TRENDS[0],
     "the training error does fall, but a kernel narrower than the spacing of the "
     "keys answers a new query with the value of its nearest key, noise included: "
     "the held-out error rises (high variance)"),
    ("training_up", ERROR_TRENDS[2],
     "a training point is one of the keys, at distance 0 from itself: as the "
     "bandwidth shrinks its own weight tends to 1, so it predicts itself and the "
     "training error falls towards 0. The held-out error does the opposite"),
    ("both_up", ERROR_TRENDS[3],
     "the held-out error does rise, but the training error falls: each training "
     "point is one of the keys and, with a narrow kernel, it predicts itself"),
]


# --------------------------------------------------------------------------- question 6
def _dot_case(g: torch.Generator, n_keys: int, d: int) -> Case:
    keys = torch.randn(n_keys, d, generator=g) * 1.5
    bandwidths = 0.35 + 2.15 * torch.rand(d, generator=g)
    shown = ", ".join(f"{h:.2f}" for h in bandwidths.tolist())
    return Case(args=(keys, bandwidths),
                label=f"{n_keys} keys in {d} dimensions, bandwidths ({shown})")


# keys (Nk, d) and one bandwidth per feature, drawn in [0.35, 2.5]; Nk != d in every
# case, so that a bias summed over the wrong axis has the wrong shape
dot_cases = drawn_cases(106, _dot_case, visible=[(4, 3), (5, 2)], hidden=[(6, 4), (3, 5)])


def gaussian_as_dot_product(keys: torch.Tensor, bandwidths: torch.Tensor) -> dict:
    """-sum_f (q_f - k_f)^2 / (2 h_f^2) = sum_f (1/h_f^2) q_f k_f - sum_f k_f^2 / (2 h_f^2)
    - sum_f q_f^2 / (2 h_f^2): one scale per feature and one bias per key."""
    return {"scale": 1 / bandwidths**2, "bias": -(keys**2 / (2 * bandwidths**2)).sum(dim=-1)}


def _form(scale=None, bias=None):
    def form(keys, bandwidths):
        right = gaussian_as_dot_product(keys, bandwidths)
        return {"scale": right["scale"] if scale is None else scale(bandwidths),
                "bias": right["bias"] if bias is None else bias(keys, bandwidths)}

    return form


DOT_MISTAKES = mistake_table(_form, [
    ("scale_half", {"scale": lambda h: 1 / (2 * h**2)},
     "your scale is half the right one: expanding each feature's square gives its "
     "cross term twice (minus 2 q_f k_f), and the 2 does not go away"),
    ("scale_not_squared", {"scale": lambda h: 1 / h},
     "your scale is 1 over each bandwidth; the bandwidth enters the score squared, "
     "like the distance it scales"),
    ("scale_negative", {"scale": lambda h: -1 / h**2},
     "your scale has the wrong sign: minus (minus 2 q_f k_f) over 2 h_f squared is "
     "positive, so a query prefers keys on its own side along every feature"),
    ("scale_inverted", {"scale": lambda h: h**2},
     "your scale grows with the bandwidth, which divides the score: a wider bandwidth "
     "makes a feature count less, not more"),
    ("scale_matrix", {"scale": lambda h: torch.diag(1 / h**2)},
     "your scale is the whole diagonal matrix (d by d); the question asks for its "
     "diagonal only, one scale per feature, a tensor of shape (d,)"),
    ("bias_positive", {"bias": lambda k, h: (k**2 / (2 * h**2)).sum(-1)},
     "your bias has the wrong sign: a key's own terms are minus its squared "
     "features over 2 h_f squared, which lowers the score of keys far from 0"),
    ("bias_without_half", {"bias": lambda k, h: -(k**2 / h**2).sum(-1)},
     "your bias is twice the right size: the factor 2 of the kernel's denominator is "
     "missing from it"),
    ("bias_not_squared", {"bias": lambda k, h: -(k**2 / (2 * h)).sum(-1)},
     "your bias divides each squared feature by 2 h_f: the bandwidth is not squared "
     "there, as it is in every term of the expanded score"),
    ("bias_key_not_squared", {"bias": lambda k, h: -(k / (2 * h**2)).sum(-1)},
     "your bias sums the key's features themselves; the key's own terms of the "
     "expanded squares hold its squared features"),
    ("bias_without_bandwidth", {"bias": lambda k, h: -(k**2).sum(-1) / 2},
     "your bias is minus half the squared norm of the key, with no bandwidth: each "
     "feature's term is scaled by that feature's own bandwidth too"),
    ("bias_summed_bandwidths", {"bias": lambda k, h: -(k**2).sum(-1) / (2 * (h**2).sum())},
     "your bias divides the key's squared norm by one sum of the squared "
     "bandwidths; each squared feature is divided by its own bandwidth squared, "
     "and only then are the features added up"),
    ("bias_mean_bandwidth", {"bias": lambda k, h: -(k**2).sum(-1) / (2 * (h**2).mean())},
     "your bias divides the key's squared norm by one average squared bandwidth, as "
     "if every feature had the same; each squared feature is divided by its own "
     "bandwidth squared"),
    ("bias_two_h_squared", {"bias": lambda k, h: -(k**2 / (2 * h) ** 2).sum(-1)},
     "your bias divides each squared feature by 2 h_f, all squared, which is 4 h_f "
     "squared: only the bandwidth is squared, the 2 is not"),
    ("bias_averaged", {"bias": lambda k, h: -(k**2 / (2 * h**2)).mean(-1)},
     "your bias averages the features' terms; the expanded score adds them up, so "
     "a key's bias is their sum"),
    ("bias_not_summed", {"bias": lambda k, h: -(k**2 / (2 * h**2))},
     "your bias has one entry per key and feature: a key's bias is one number, the "
     "sum of its features' terms, so the bias has shape (Nk,)"),
    ("bias_summed_over_keys", {"bias": lambda k, h: -(k**2 / (2 * h**2)).sum(0)},
     "your bias is summed over the keys, one entry per feature; each key has its "
     "own bias, the sum over its features, so the bias has shape (Nk,)"),
])


EXERCISE = Exercise(
    id="01_attention_pooling",
    title="Attention pooling by kernel regression",
    forbidden_imports=("attention_course.kernel_regression",),
    questions=(
        Question(
            id="q1_weights",
            symbol="gaussian_weights",
            title="Gaussian kernel attention weights",
            kind="implement",
            points=2,
            reference=kr.attention_weights,
            cases=weight_cases,
            mistakes=WEIGHT_MISTAKES,
            diagnose=rows_sum_to_one(),
            hint="One row per query, one column per key: score each key by minus its "
                 "squared distance to the query over twice the squared bandwidth, then "
                 "normalise each row over the keys.",
            section=NW_SECTION,
        ),
        Question(
            id="q2_predict",
            symbol="nadaraya_watson_predict",
            title="The Nadaraya-Watson prediction",
            kind="implement",
            points=2,
            reference=_predict,
            cases=predict_cases,
            mistakes=PREDICT_MISTAKES,
            builds_on=("q1_weights",),
            hint="A query's prediction is the average of all the values, each weighted by "
                 "that query's attention weight on its key. Vector values are averaged "
                 "entry by entry with the same weights.",
            section=NW_SECTION,
        ),
        Question(
            id="q3_module",
            symbol="LearnableBandwidthPooling",
            title="Debug: a learnable bandwidth that does not learn",
            kind="debug",
            call="module",
            method="fit",
            points=2,
            reference=Pooling,
            cases=module_cases,
            rtol=1e-3,
            atol=1e-5,
            mistakes=MODULE_MISTAKES,
            diagnose=starting_bandwidth,
            builds_on=("q1_weights",),
            hint="Ask of each line: does the optimiser see this tensor as a parameter, "
                 "does the gradient pass through this operation, does the bandwidth stay "
                 "positive whatever the step, and do the weights of each row still sum to "
                 "1 once a point is left out?",
            section=LEARNED_SECTION,
        ),
        Question(
            id="q4_bandwidth",
            symbol="choose_bandwidth",
            title="Choosing the bandwidth by leave-one-out",
            kind="implement",
            points=1,
            reference=kr.choose_bandwidth,
            cases=bandwidth_cases,
            mistakes=BANDWIDTH_MISTAKES,
            builds_on=("q3_module",),
            hint="Score each candidate by how well it predicts every training target from "
                 "the other points only (the mean of the squared errors), and keep the "
                 "candidate with the smallest score.",
            section=BANDWIDTH_SECTION,
        ),
        prediction(
            id="q5_narrow",
            symbol="narrow_bandwidth_errors",
            title="Predict: the errors of a narrow kernel",
            points=1,
            answer=ERROR_TRENDS[1],
            choices=ERROR_TRENDS,
            mistakes=NOT_A_CHOICE,
            wrong=WRONG_TRENDS,
            hint="Where is a training point among the keys, and what is its own weight "
                 "when the kernel is much narrower than the gaps between keys? And a new "
                 "query?",
            section=BANDWIDTH_SECTION,
        ),
        Question(
            id="q6_dot_product",
            symbol="gaussian_as_dot_product",
            title="Derive: one bandwidth per feature, as a dot product plus a bias",
            kind="derive",
            points=2,
            reference=gaussian_as_dot_product,
            cases=dot_cases,
            parts={"scale": 1, "bias": 1},
            mistakes=DOT_MISTAKES,
            hint="Expand each feature's square and sort the terms: those with the query "
                 "only, those with both, those with the key only. Or divide every feature "
                 "of the query and the key by its bandwidth: you are back to one bandwidth "
                 "of 1, the case the chapter expands.",
            section=DOT_SECTION,
        ),
    ),
)
