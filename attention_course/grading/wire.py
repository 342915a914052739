"""The records a grading child sends its parent: a JSON header and raw tensor bytes.

A record is ``MAGIC``, the length of a JSON header, the header, then the bytes of every
tensor back to back. The header is ``{"value": TREE, "tensors": [[dtype, shape, offset,
nbytes], ...]}``, where the tree is plain JSON for ``None``, ``bool``, ``int``, ``float``,
``str`` and lists, and tagged objects for the rest: ``{"tuple": [...]}``,
``{"dict": {...}}``, ``{"tensor": INDEX}``, ``{"float": "nan" | "inf" | "-inf"}``.

Decoding is plain data all the way: no pickle, no ``torch.load``, nothing that can run
code or reach an object of the child's choosing, whatever torch is installed. Its cost
and memory are linear in the record's size (each tensor's bytes are copied once), and
every field is checked: an unknown dtype, a shape that does not match the bytes, a
tensor outside the record, a header that is not JSON or too deep, an integer with
thousands of digits: each is a :class:`WireError`.
"""

from __future__ import annotations

import json
import math
import struct
from typing import Any

import torch

MAGIC = b"ACW1"
LENGTH = struct.Struct("!I")
MAX_HEADER = 2 << 20  # a million tiny items at most: plain data, not a tree bomb
MAX_ITEMS = 100_000
MAX_DIMS = 8
MAX_TENSORS = 10_000

# the dtypes an answer may have; anything else (float8, float4, quantized, ...) is refused
DTYPES = {
    "float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32,
    "float64": torch.float64, "complex64": torch.complex64, "complex128": torch.complex128,
    "uint8": torch.uint8, "int8": torch.int8, "int16": torch.int16, "int32": torch.int32,
    "int64": torch.int64, "bool": torch.bool,
}
_NAMES = {dtype: name for name, dtype in DTYPES.items()}


class WireError(ValueError):
    """A record that is not a well-formed record of plain data."""


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


# --------------------------------------------------------------------------- encoding
def encode(value: Any, max_items: int = MAX_ITEMS) -> bytes:
    """``value`` (plain data: tensors, numbers, strings, ``None``, lists, tuples and dicts
    with string keys) as a record. A tensor of a dtype outside :data:`DTYPES` is encoded
    with its dtype's name and no bytes, so that the receiver can say what it was. More
    than ``max_items`` items (a list shared a million times counts a million times) is a
    :class:`WireError`, as for the receiver."""
    tensors: list[list] = []
    blobs: list[bytes] = []
    offset = [0]
    count = [0]

    def tree(v: Any, depth: int) -> Any:
        count[0] += 1
        if count[0] > max_items:
            raise WireError(f"the output holds more than {max_items} items")
        if depth > 64:
            raise WireError("nested too deeply to send")
        if isinstance(v, torch.Tensor):
            v = v.detach().to("cpu")
            name = _NAMES.get(v.dtype)
            if name is None:  # sent as a description only
                tensors.append([dtype_name(v.dtype), list(v.shape), offset[0], 0])
                return {"tensor": len(tensors) - 1}
            data = v.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes() if (
                v.numel()) else b""
            tensors.append([name, list(v.shape), offset[0], len(data)])
            blobs.append(data)
            offset[0] += len(data)
            return {"tensor": len(tensors) - 1}
        if v is None or type(v) in (bool, int, str):
            return v
        if type(v) is float:
            if math.isfinite(v):
                return v
            return {"float": "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf")}
        if type(v) is list:
            return [tree(x, depth + 1) for x in v]
        if type(v) is tuple:
            return {"tuple": [tree(x, depth + 1) for x in v]}
        if type(v) is dict:
            return {"dict": {str(k): tree(x, depth + 1) for k, x in v.items()}}
        raise WireError(f"cannot send a {type(v).__name__}")

    header = json.dumps({"value": tree(value, 0), "tensors": tensors},
                        ensure_ascii=True, allow_nan=False).encode()
    return MAGIC + LENGTH.pack(len(header)) + header + b"".join(blobs)


# --------------------------------------------------------------------------- decoding
def decode(record: bytes | bytearray | memoryview, max_items: int = MAX_ITEMS) -> Any:
    """The plain data of one record; :class:`WireError` for anything else."""
    header, blob = _header(record)
    tensors = _tensors(header["tensors"], blob)
    count = [0]
    try:
        return _tree(header["value"], tensors, 0, count, max_items)
    except RecursionError:
        raise WireError("the value is nested too deeply") from None


def peek(record: bytes | bytearray | memoryview) -> dict[str, str]:
    """The string fields at the top of a record's value (``nonce``, ``event``, ``id``),
    read from its header alone: who a record that cannot be decoded claims to be, so that
    a question can be told why its answer was refused. Empty if even that is unclear."""
    try:
        header, _blob = _header(record)
    except WireError:
        return {}
    value = header["value"]
    fields = value.get("dict") if type(value) is dict else None
    if type(fields) is not dict:
        return {}
    return {k: fields[k] for k in ("nonce", "event", "id") if type(fields.get(k)) is str}


def _header(record: bytes | bytearray | memoryview) -> tuple[dict, memoryview]:
    record = memoryview(record)
    if len(record) < len(MAGIC) + LENGTH.size or bytes(record[:len(MAGIC)]) != MAGIC:
        raise WireError("not a record (no header)")
    (size,) = LENGTH.unpack_from(record, len(MAGIC))
    start = len(MAGIC) + LENGTH.size
    if size > MAX_HEADER or start + size > len(record):
        raise WireError("the header's length does not fit the record")
    try:
        header = json.loads(bytes(record[start:start + size]).decode("utf-8"),
                            parse_constant=_no_constant)
    except (ValueError, RecursionError) as error:  # bad JSON, 5,000-digit ints, depth
        raise WireError(f"the header is not plain JSON: {str(error)[:100]}") from None
    if type(header) is not dict or set(header) != {"value", "tensors"}:
        raise WireError("the header is not {value, tensors}")
    return header, record[start + size:]


def _no_constant(name: str) -> None:
    raise ValueError(f"{name} is not JSON")


class Refused:
    """A tensor the record describes but does not carry (a dtype outside :data:`DTYPES`):
    decoded as this, so that the answer can be judged wrong with its description."""

    def __init__(self, dtype: str, shape: tuple[int, ...]) -> None:
        self.dtype, self.shape = dtype, shape

    def __repr__(self) -> str:
        return f"a tensor of dtype {self.dtype} and shape {self.shape}"


def _tensors(specs: Any, blob: memoryview) -> list[torch.Tensor | Refused]:
    if type(specs) is not list or len(specs) > MAX_TENSORS:
        raise WireError("the tensor table is not a list of at most "
                        f"{MAX_TENSORS} entries")
    out: list[torch.Tensor | Refused] = []
    for spec in specs:
        if type(spec) is not list or len(spec) != 4:
            raise WireError("a tensor entry is not [dtype, shape, offset, nbytes]")
        name, shape, offset, nbytes = spec
        if type(name) is not str or len(name) > 40:
            raise WireError("a tensor's dtype is not a short name")
        if (type(shape) is not list or len(shape) > MAX_DIMS
                or any(type(n) is not int or not 0 <= n < 1 << 40 for n in shape)):
            raise WireError(f"a tensor's shape is not a list of at most {MAX_DIMS} sizes")
        if type(offset) is not int or type(nbytes) is not int or offset < 0 or nbytes < 0 or (
                offset + nbytes > len(blob)):
            raise WireError("a tensor's bytes lie outside the record")
        dtype = DTYPES.get(name)
        if dtype is None:
            if nbytes:
                raise WireError("a refused tensor carries bytes")
            out.append(Refused(name, tuple(shape)))
            continue
        numel = math.prod(shape)
        itemsize = torch.empty((), dtype=dtype).element_size()
        if numel * itemsize != nbytes:
            raise WireError(f"a tensor of shape {tuple(shape)} and dtype {name} needs "
                            f"{numel * itemsize} bytes, the record gives {nbytes}")
        data = bytearray(blob[offset:offset + nbytes])
        if dtype is torch.bool and data.translate(None, b"\x00\x01"):
            raise WireError("a boolean tensor holds bytes other than 0 and 1")
        flat = (torch.frombuffer(data, dtype=dtype) if nbytes
                else torch.empty(0, dtype=dtype))
        out.append(flat.reshape(shape))
    return out


def _tree(v: Any, tensors: list, depth: int, count: list[int], max_items: int) -> Any:
    count[0] += 1
    if count[0] > max_items:
        raise WireError(f"the value holds more than {max_items} items")
    if depth > 64:
        raise WireError("the value is nested too deeply")
    if v is None or type(v) in (bool, int, float, str):
        return v
    if type(v) is list:
        return [_tree(x, tensors, depth + 1, count, max_items) for x in v]
    if type(v) is not dict or len(v) != 1:
        raise WireError("the value holds something other than plain data")
    ((tag, inner),) = v.items()
    if tag == "tuple" and type(inner) is list:
        return tuple(_tree(x, tensors, depth + 1, count, max_items) for x in inner)
    if tag == "dict" and type(inner) is dict:
        return {k: _tree(x, tensors, depth + 1, count, max_items) for k, x in inner.items()}
    if tag == "tensor" and type(inner) is int and 0 <= inner < len(tensors):
        return tensors[inner]
    if tag == "float" and inner in ("nan", "inf", "-inf"):
        return float(inner)
    raise WireError(f"unknown tag {tag!r:.40}")
