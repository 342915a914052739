"""The records a grading child sends: plain data in, plain data out, nothing else.

The parent decodes what an untrusted child wrote, so every record below is one a hostile
submission could write: pickles, TorchScript archives, headers that lie about sizes,
booleans that are not 0 or 1, numbers with thousands of digits, trees too deep or too big.
"""

from __future__ import annotations

import io
import json
import math
import struct
import warnings

import pytest
import torch

from attention_course.grading import wire
from attention_course.grading.sandbox import Limits, _Session


def _roundtrip(value):
    return wire.decode(wire.encode(value))


@pytest.mark.parametrize("dtype", list(wire.DTYPES.values()))
def test_every_allowed_dtype_round_trips(dtype):
    x = (torch.arange(12).reshape(3, 4) % 2).to(dtype)
    y = _roundtrip(x)
    assert type(y) is torch.Tensor and y.dtype == dtype and torch.equal(y, x)
    empty = _roundtrip(torch.empty(0, 3, dtype=dtype))
    assert empty.shape == (0, 3) and empty.dtype == dtype
    scalar = _roundtrip(torch.tensor(1, dtype=dtype))
    assert scalar.shape == () and scalar.dtype == dtype


def test_containers_and_numbers_round_trip():
    value = {"a": (1, 2.5, None, True, "text \u4e2d"), "b": [float("nan"), math.inf, -math.inf],
             "t": torch.tensor([[1.0, 2.0]]).t(), "n": 2**70}
    got = _roundtrip(value)
    assert got["a"] == value["a"] and type(got["a"]) is tuple
    assert math.isnan(got["b"][0]) and got["b"][1:] == [math.inf, -math.inf]
    assert torch.equal(got["t"], value["t"]) and got["n"] == 2**70


def test_a_tensor_of_another_dtype_arrives_as_its_description():
    odd = getattr(torch, "float8_e4m3fn", None)
    if odd is None:
        pytest.skip("this torch has no float8")
    got = _roundtrip([torch.zeros(2, 3).to(odd)])
    assert isinstance(got[0], wire.Refused) and got[0].shape == (2, 3)
    assert "float8_e4m3fn" in repr(got[0])


def test_the_encoder_refuses_what_it_cannot_send():
    with pytest.raises(wire.WireError, match="cannot send a object"):
        wire.encode([object()])
    shared = [0.0] * 1000
    with pytest.raises(wire.WireError, match="more than 100000 items"):
        wire.encode([[shared] * 1000] * 10)


def _raw(header: str, blob: bytes = b"") -> bytes:
    data = header.encode()
    return wire.MAGIC + wire.LENGTH.pack(len(data)) + data + blob


def _record(value, tensors=(), blob=b""):
    return _raw(json.dumps({"value": value, "tensors": list(tensors)}), blob)


def _pickle_records():
    buffer = io.BytesIO()
    torch.save({"nonce": "x", "event": "q_result", "outputs": [torch.ones(2)]}, buffer)
    script = io.BytesIO()
    with warnings.catch_warnings():  # torch.jit is deprecated: still what an attack sends
        warnings.simplefilter("ignore")
        torch.jit.save(torch.jit.script(torch.nn.Linear(2, 2)), script)
    import pickle

    return [buffer.getvalue(), script.getvalue(), pickle.dumps({"a": 1}),
            b"\x80\x05" + b"(" * 100_000]


@pytest.mark.parametrize("record", _pickle_records(), ids=["torch.save", "torchscript",
                                                           "pickle", "pickle-opcodes"])
def test_pickles_and_archives_are_never_loaded(record):
    with pytest.raises(wire.WireError, match="not a record"):
        wire.decode(record)


@pytest.mark.parametrize("record,match", [
    (wire.MAGIC + wire.LENGTH.pack(100) + b"{}", "does not fit"),
    (_raw("{x}"), "not plain JSON"),
    (_raw('{"value": null, "other": []}'), r"not \{value, tensors\}"),
    (_record({"tensor": 0}, [["float32", [2], 0, 8]], b"\0" * 4), "outside the record"),
    (_record({"tensor": 0}, [["float32", [3], 0, 8]], b"\0" * 8), "needs 12 bytes"),
    (_record({"tensor": 0}, [["bool", [2], 0, 2]], b"\x00\x07"), "other than 0 and 1"),
    (_record({"tensor": 0}, [["float32", [1] * 9, 0, 4]], b"\0" * 4), "at most 8 sizes"),
    (_record({"tensor": 0}, [["float32", [-1], 0, 0]]), "at most 8 sizes"),
    (_record({"tensor": 0}, [["float4_e2m1fn_x2", [2], 0, 2]], b"\0\0"), "carries bytes"),
    (_record({"tensor": 3}, []), "unknown tag"),
    (_record({"object": "os.system"}), "unknown tag"),
    (_record({"tuple": [], "dict": {}}), "other than plain data"),
    (_raw('{"value": ' + "9" * 5000 + ', "tensors": []}'), "not plain JSON"),  # 5,000 digits
    (_raw('{"value": NaN, "tensors": []}'), "not plain JSON"),
])
def test_malformed_records_are_refused(record, match):
    with pytest.raises(wire.WireError, match=match):
        wire.decode(record)


def test_deep_and_huge_trees_are_refused():
    deep = "[" * 200_000 + "]" * 200_000
    with pytest.raises(wire.WireError, match="not plain JSON"):  # too deep for the parser
        wire.decode(_raw('{"tensors": [], "value": ' + deep + "}"))
    nested = "[" * 100 + "]" * 100  # parsed, but deeper than any answer
    with pytest.raises(wire.WireError, match="nested too deeply"):
        wire.decode(_raw('{"tensors": [], "value": ' + nested + "}"))
    wide = _record([[0] * 400 for _ in range(500)])
    with pytest.raises(wire.WireError, match="more than 100000 items"):
        wire.decode(wide)
    assert wire.peek(wide) == {}  # no nonce: nothing claimed
    too_big = wire.MAGIC + wire.LENGTH.pack(wire.MAX_HEADER + 1) + b" " * (wire.MAX_HEADER + 1)
    with pytest.raises(wire.WireError, match="does not fit"):
        wire.decode(too_big)


def _session() -> _Session:
    questions = [{"id": "q1"}, {"id": "q2"}]
    session = _Session("NONCE", questions, Limits(), 60.0, {"q1": 5.0, "q2": 5.0}, "/w")
    session.handle(wire.encode({"nonce": "NONCE", "event": "ready", "isolation": {}}))
    assert session.attempt.ready
    return session


def _framed(record: bytes) -> bytes:
    return struct.pack("!I", len(record)) + record


def test_the_parent_ignores_forged_records_and_names_refused_answers():
    session = _session()
    for record in _pickle_records():
        assert session.feed(_framed(record))
    wrong_nonce = wire.encode({"nonce": "guess", "event": "q_result", "id": "q1",
                               "outputs": [1.0]})
    assert session.feed(_framed(wrong_nonce))
    assert session.attempt.answers == {}
    huge = _record({"dict": {"nonce": "NONCE", "event": "q_result", "id": "q1",
                             "outputs": [[0] * 400 for _ in range(500)]}})
    assert session.feed(_framed(huge))
    status = session.attempt.answers["q1"]
    assert status[:2] == ("error", "error") and "more than 100000 items" in status[2]
    odd = wire.encode({"nonce": "NONCE", "event": "q_result", "id": "q2",
                       "outputs": [[1.0, 2.0]]})
    assert session.feed(_framed(odd))
    assert session.attempt.answers["q2"][0] == "result"


def test_an_oversized_frame_is_a_violation():
    session = _session()
    assert not session.feed(struct.pack("!I", (64 << 20) + 1))
