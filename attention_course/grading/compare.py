"""Compare a learner's outputs with the reference's, in trusted code, with messages that teach.

Everything here runs in the learner's kernel (``check``) or in the grader's parent
process, never in the child that runs a submission.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable
from typing import Any

import torch

from attention_course.grading.wire import Refused
from attention_course.i18n import N_, _

MAX_DEPTH = 8
MAX_ITEMS = 100_000


# the dtypes an answer may have (what grading/wire.py carries)
PLAIN_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.complex64,
                torch.complex128, torch.uint8, torch.int8, torch.int16, torch.int32,
                torch.int64, torch.bool)


class NotPlainData(ValueError):
    """An output holds something other than tensors, numbers, strings and containers."""


def _refused(path: str, dtype: str) -> str:
    return _("{path} is a tensor of dtype {dtype}: return a floating-point, integer or "
             "boolean tensor").format(path=path, dtype=dtype)


def as_float(value: float | int) -> float:
    """``float(value)``, with an integer too large for a float as plus or minus infinity
    (a bandwidth of ``2 ** 1100`` is a wrong answer, not an error of the grader)."""
    try:
        return float(value)
    except OverflowError:
        return math.inf if value > 0 else -math.inf


def validate_plain(value: Any, path: str | None = None) -> Any:
    """Check that ``value`` is plain data and return it with plain ``torch.Tensor`` leaves.

    Accepted: strided tensors, ``bool``/``int``/``float``/``str``/``None`` and lists,
    tuples and dicts with string keys of those, at most ``MAX_DEPTH`` deep and
    ``MAX_ITEMS`` items in all (counting shared items each time they appear, so a
    pickle that reuses one list a million times cannot make a huge tree). Raises
    :class:`NotPlainData`.
    """
    return _validate(value, _("output") if path is None else path, 0, [0])


def _validate(value: Any, path: str, depth: int, count: list[int]) -> Any:
    count[0] += 1
    if count[0] > MAX_ITEMS:
        raise NotPlainData(_("the output holds more than {count} items").format(
            count=MAX_ITEMS))
    if depth > MAX_DEPTH:
        raise NotPlainData(_("{path} is nested more than {depth} levels deep").format(
            path=path, depth=MAX_DEPTH))
    if isinstance(value, torch.Tensor):
        if value.layout != torch.strided or value.is_quantized or value.device.type != "cpu":
            raise NotPlainData(_("{path} is not a plain dense CPU tensor").format(path=path))
        if value.dtype not in PLAIN_DTYPES:
            raise NotPlainData(_refused(path, str(value.dtype).removeprefix("torch.")))
        if type(value) is not torch.Tensor:  # a subclass: its plain data only
            value = value.detach().as_subclass(torch.Tensor)
        return value
    if isinstance(value, Refused):  # a tensor of another dtype, described by the wire
        raise NotPlainData(_refused(path, value.dtype))
    if value is None or type(value) in (bool, int, float, str):
        return value
    if type(value) in (list, tuple):
        items = (_validate(v, f"{path}[{i}]", depth + 1, count) for i, v in enumerate(value))
        return type(value)(items)
    if type(value) is dict:
        if not all(type(k) is str for k in value):
            raise NotPlainData(_("{path} is a dict with non-string keys").format(path=path))
        return {k: _validate(v, f"{path}[{k!r}]", depth + 1, count) for k, v in value.items()}
    raise NotPlainData(_("{path} is a {type}, not a tensor or a number").format(
        path=path, type=type(value).__name__))


def _shape(t: torch.Tensor) -> str:
    return str(tuple(t.shape))


def _at(path: str) -> str:
    """The start of a message about ``path`` ("output[0]: ")."""
    return _("{path}: ").format(path=path)


def _index(flat: int, shape: torch.Size) -> tuple[int, ...]:
    index = []
    for size in reversed(shape):
        index.append(flat % size)
        flat //= size
    return tuple(reversed(index))


def _describe(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return _("a tensor of shape {shape}").format(shape=_shape(value))
    if isinstance(value, (list, tuple)):
        return _("a {type} of length {length}").format(type=type(value).__name__,
                                                       length=len(value))
    return _("a {type}").format(type=type(value).__name__)


def _number(value: float) -> str:
    """A number as a learner wrote it: an integer exactly (if it is not huge), a float to
    six digits."""
    if isinstance(value, int) and abs(value) < 10**18:
        return str(value)
    return f"{as_float(value):.6g}"


def _off_by(expected: float, got: float) -> str:
    """How ``got`` misses ``expected``, without saying what ``expected`` is."""
    got = as_float(got)
    if math.isnan(got) or math.isinf(got):
        return _("got {value}").format(value=got)
    if expected == 0 or got == 0 or (expected > 0) != (got > 0):
        return _("got {value}, which is not the answer").format(value=_number(got))
    ratio = got / expected
    factor = max(ratio, 1 / ratio)
    if factor < 1.01:
        message = (_("got {value}, which is slightly too large (by less than 1%)") if ratio > 1
                   else _("got {value}, which is slightly too small (by less than 1%)"))
        return message.format(value=_number(got))
    message = (_("got {value}, which is {factor} times too large") if ratio > 1
               else _("got {value}, which is {factor} times too small"))
    return message.format(value=_number(got), factor=f"{factor:.3g}")


def _compare_tensors(
    expected: torch.Tensor, got: torch.Tensor, rtol: float, atol: float, path: str,
    reveal: bool = True,
) -> str | None:
    if got.shape != expected.shape:
        message = _at(path) + _("expected shape {expected}, got {got}").format(
            expected=_shape(expected), got=_shape(got))
        if sorted(got.shape) == sorted(expected.shape) and got.dim() > 1:
            message += _(" (the same sizes in another order: are two axes swapped?)")
        return message
    if expected.dtype == torch.bool and got.dtype != torch.bool:
        return _at(path) + _("expected a boolean tensor (True or False in each entry), got "
                               "dtype {dtype}").format(dtype=got.dtype)
    integer = not (expected.is_floating_point() or expected.is_complex() or
                   expected.dtype == torch.bool)
    if integer and (got.is_floating_point() or got.is_complex() or got.dtype == torch.bool):
        return _at(path) + _("expected an integer tensor, got dtype {dtype}").format(
            dtype=got.dtype)
    if expected.is_floating_point() and not (got.is_floating_point() or got.dtype == torch.bool):
        if got.is_complex() or not torch.equal(got.double(), expected.double()):
            return _at(path) + _("expected a floating-point tensor, got dtype {dtype}"
                                   ).format(dtype=got.dtype)
    if got.numel() == 0:
        return None
    e, g = expected.detach().double(), got.detach().double()
    bad_g = ~torch.isfinite(g) & torch.isfinite(e)
    if bad_g.any():
        where = _index(int(bad_g.flatten().nonzero()[0]), g.shape)
        return _at(path) + _(
            "got {value} at index {index}, where the answer is {answer} (look for a "
            "division by zero or an overflow)").format(
                value=g[where].item(), index=where, answer=f"{e[where].item():.6g}")
    close = torch.isclose(g, e, rtol=rtol, atol=atol, equal_nan=True)
    if bool(close.all()):
        return None
    diff = torch.where(close, torch.zeros_like(g), (g - e).abs().nan_to_num(math.inf))
    where = _index(int(diff.flatten().argmax()), g.shape)
    count = _("({count} of {total} entries differ)").format(count=int((~close).sum()),
                                                              total=g.numel())
    if not reveal:
        return _at(path) + _("values differ; at index {index} you {how} {count}").format(
            index=where, how=_off_by(e[where].item(), g[where].item()), count=count)
    return _at(path) + _(
        "values differ; at index {index} expected {expected}, got {got} {count}").format(
            index=where, expected=f"{e[where].item():.6g}", got=f"{g[where].item():.6g}",
            count=count)


def compare(
    expected: Any, got: Any, rtol: float = 1e-4, atol: float = 1e-6, path: str | None = None,
    reveal: bool = True,
) -> str | None:
    """``None`` when ``got`` matches ``expected`` within tolerance, else what differs.

    Tensors must have the same shape; values are compared in float64. A number may be
    answered by a one-element tensor and the other way round, and a list or tuple of
    floats by a 1-D floating-point tensor (never a list of integers: indices and counts
    are Python numbers). With ``reveal=False`` the
    message never says what the expected value is (for answers that are the point of a
    question: a derived number, a prediction), only how the answer misses it.
    """
    path = _("output") if path is None else path
    if isinstance(expected, torch.Tensor):
        if isinstance(got, numbers.Number) and expected.numel() == 1:
            got = torch.tensor(as_float(got) if isinstance(got, int) and abs(got) >= 2**63
                               else got)
            if expected.dim() != 0:
                got = got.reshape(expected.shape)
        if not isinstance(got, torch.Tensor):
            return _at(path) + _("expected a tensor of shape {shape}, got {got}").format(
                shape=_shape(expected), got=_describe(got))
        return _compare_tensors(expected, got, rtol, atol, path, reveal)
    if isinstance(expected, bool) or isinstance(expected, str) or expected is None:
        if isinstance(got, torch.Tensor) and got.numel() == 1 and isinstance(expected, bool):
            got = bool(got.item())
        if got == expected and type(got) is type(expected):
            return None
        shown = repr(got)[:200] if isinstance(got, (str, bool, int, float, type(None))) else (
            _describe(got))
        if not reveal:
            return _at(path) + _("{answer} is not the right answer").format(answer=shown)
        return (_at(path) + _("expected {expected}, got {got}").format(
            expected=repr(expected), got=shown))[:300]
    if isinstance(expected, numbers.Number):
        if isinstance(got, torch.Tensor) and got.numel() == 1 and not got.is_complex():
            got = got.item()
        if not isinstance(got, numbers.Number) or isinstance(got, (bool, complex)):
            return _at(path) + _("expected a number, got {got}").format(got=_describe(got))
        if isinstance(expected, int) and not isinstance(expected, bool):
            ok = got == expected
        else:
            ok = math.isclose(as_float(got), float(expected), rel_tol=rtol, abs_tol=atol)
        if ok:
            return None
        if not reveal:
            return _at(path) + _off_by(expected, got)
        return _at(path) + _("expected {expected}, got {got}").format(
            expected=_number(expected), got=_number(got))
    if isinstance(expected, (list, tuple)):
        if isinstance(got, torch.Tensor) and got.dim() == 1 and got.numel() == len(expected) \
                and got.is_floating_point() and all(type(e) is float for e in expected):
            got = got.tolist()  # measurements (floats) may come back as a 1-D float tensor
        if not isinstance(got, (list, tuple)) or len(got) != len(expected):
            return _at(path) + _("expected {wanted}, got {found}").format(
                wanted=_describe(expected), found=_describe(got))
        for i, (e, g) in enumerate(zip(expected, got, strict=True)):
            message = compare(e, g, rtol, atol, f"{path}[{i}]", reveal)
            if message:
                return message
        return None
    if isinstance(expected, dict):
        if not isinstance(got, dict) or set(got) != set(expected):
            return _at(path) + _("expected a dict with keys {keys}, got {got}").format(
                keys=sorted(expected), got=_describe(got))
        for key in expected:
            message = compare(expected[key], got[key], rtol, atol, f"{path}[{key!r}]",
                              reveal)
            if message:
                return message
        return None
    raise TypeError(f"the reference returned {type(expected).__name__}, which cannot be compared")


def rows_sum_to_one(
    pick: Callable[[Any], Any] = lambda out: out, what: str = N_("attention weights")
) -> Callable[[Any, Any, Any], str | None]:
    """A ``diagnose`` hook: report the first row of ``pick(got)`` that does not sum to 1.

    ``pick`` selects the weights from the output (e.g. ``lambda out: out[1]``).
    """

    def diagnose(case: Any, expected: Any, got: Any) -> str | None:
        weights = pick(got)
        if not isinstance(weights, torch.Tensor) or weights.dim() < 1 or weights.numel() == 0:
            return None
        sums = weights.detach().double().sum(dim=-1).reshape(-1)
        bad = (sums - 1).abs() > 1e-3
        if not bool(bad.any()):
            return None
        row = int(bad.nonzero()[0])
        return _("row {row} of the {what} sums to {total}; each row is a softmax over the "
                 "keys and must sum to 1").format(row=row, what=_(what),
                                                  total=f"{sums[row].item():.3g}")

    return diagnose
