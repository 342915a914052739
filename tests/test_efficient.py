"""Tests for chapter 10: exact blockwise attention and sliding windows
(attention_course.efficient), linear attention (attention_course.linear_attention) and the
measuring helpers (attention_course.experiments.efficient)."""

from __future__ import annotations

import math
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from module_helpers import seeded

from attention_course import efficient
from attention_course.efficient import (
    block_schedule,
    flash_attention,
    log_sum_exp,
    online_softmax_update,
    recompute_probabilities,
    sliding_window_mask,
    softmax_backward,
)
from attention_course.experiments.efficient import (
    StepMemory,
    attention_bytes,
    attention_flops,
    peak_memory,
    time_round_robin,
)
from attention_course.linear_attention import elu_feature_map, linear_attention
from attention_course.masking import causal_mask, scaled_dot_product_attention
from attention_course.multihead import split_heads

PROPERTY = settings(max_examples=30, deadline=None)
ROOT = Path(__file__).resolve().parents[1]
LINUX_PROC = pytest.mark.skipif(not Path("/proc/self/clear_refs").exists(),
                                reason="needs Linux's /proc/self/clear_refs")
TOLERANCE = {torch.float32: {"rtol": 1e-5, "atol": 1e-5},
             torch.float64: {"rtol": 1e-10, "atol": 1e-10}}


def _qkv(nq: int, nk: int, d: int = 8, dv: int | None = None, batch: int = 2, heads: int = 3,
         dtype: torch.dtype = torch.float32, seed: int = 0) -> tuple[torch.Tensor, ...]:
    g = seeded(seed)
    shapes = [(batch, heads, nq, d), (batch, heads, nk, d), (batch, heads, nk, dv or d)]
    return tuple(torch.randn(s, generator=g, dtype=dtype).requires_grad_() for s in shapes)


def _output_and_grads(fn, query, key, value, **kwargs):
    """``fn``'s output and the gradients of a fixed random function of it w.r.t. q, k, v."""
    out = fn(query, key, value, **kwargs)
    upstream = torch.randn(out.shape, generator=seeded(99)).to(out)
    return (out, *torch.autograd.grad(out, (query, key, value), upstream))


def _assert_matches_sdpa(query, key, value, tolerance, **kwargs):
    ours = _output_and_grads(flash_attention, query, key, value, **kwargs)
    kwargs.pop("block_size", None)
    ref = _output_and_grads(F.scaled_dot_product_attention, query, key, value, **kwargs)
    for name, a, b in zip(("output", "grad query", "grad key", "grad value"), ours, ref,
                          strict=True):
        torch.testing.assert_close(a, b, **tolerance, msg=lambda m, name=name: f"{name}: {m}")


# ---------------------------------------------------------------- flash attention


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("is_causal", [False, True])
@pytest.mark.parametrize("nq, nk", [(37, 37), (20, 45), (45, 20)])
@pytest.mark.parametrize("block_size", [1, 7, 128, 1000])
def test_flash_attention_equals_sdpa(dtype, is_causal, nq, nk, block_size):
    """Square and rectangular, N not a multiple of the block, blocks larger than N."""
    query, key, value = _qkv(nq, nk, dtype=dtype)
    _assert_matches_sdpa(query, key, value, TOLERANCE[dtype], is_causal=is_causal,
                         block_size=block_size)


@PROPERTY
@given(batch=st.integers(1, 2), heads=st.integers(1, 3), nq=st.integers(1, 40),
       nk=st.integers(1, 40), d=st.integers(1, 9), dv=st.integers(1, 9),
       block_size=st.integers(1, 50), is_causal=st.booleans(),
       scale=st.one_of(st.none(), st.floats(0.05, 2.0)), seed=st.integers(0, 1000))
def test_flash_attention_equals_sdpa_property(batch, heads, nq, nk, d, dv, block_size,
                                              is_causal, scale, seed):
    query, key, value = _qkv(nq, nk, d, dv, batch, heads, torch.float64, seed)
    _assert_matches_sdpa(query, key, value, TOLERANCE[torch.float64], is_causal=is_causal,
                         block_size=block_size, scale=scale)


def test_causal_is_aligned_top_left():
    """With Nq < Nk, query i sees keys 0..i: later keys change nothing."""
    query, key, value = _qkv(5, 12)
    out = flash_attention(query, key, value, is_causal=True, block_size=4)
    changed = value.detach().clone()
    changed[:, :, 5:] += 100.0
    torch.testing.assert_close(flash_attention(query, key, changed, is_causal=True), out)
    unmasked = flash_attention(query, key, value)
    assert not torch.allclose(flash_attention(query, key, changed), unmasked)  # they matter there


def test_non_contiguous_inputs_and_no_grad():
    x = torch.randn(2, 10, 12, generator=seeded(1))
    heads = split_heads(x, 3)  # (2, 3, 10, 4), a transposed view
    assert not heads.is_contiguous()
    with torch.no_grad():
        out = flash_attention(heads, heads, heads, block_size=3)
    assert not out.requires_grad
    torch.testing.assert_close(out, F.scaled_dot_product_attention(heads, heads, heads))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_is_computed_in_float32(dtype):
    query, key, value = (t.detach().to(dtype).requires_grad_() for t in _qkv(50, 50, 16))
    ours = _output_and_grads(flash_attention, query, key, value, is_causal=True, block_size=16)
    assert all(t.dtype == dtype for t in ours)
    wide = [t.detach().float().requires_grad_() for t in (query, key, value)]
    ref = _output_and_grads(F.scaled_dot_product_attention, *wide, is_causal=True)
    for a, b in zip(ours, ref, strict=True):  # only the final rounding to dtype differs
        torch.testing.assert_close(a.float(), b, rtol=2e-2, atol=2e-2)


def test_large_scores_do_not_overflow():
    """Scores in the thousands overflow exp() unless the running maximum is subtracted.

    The two kernels compute the same scores in another order, so each may differ by
    float32's rounding of a score, about ``eps * |s|`` (2.4e-4 near 3,600, where the
    spacing of float32 is that large). A weight ``exp(s - max)`` then differs by that much
    relatively, and the output, a weighted mean of the values, by up to that times the
    largest value: the tolerance follows the scores' size, with a factor of 8 for the
    few roundings on the way (scale, subtract, exp, sum), not a fixed 1e-5.
    """
    query, key, value = (t.detach() for t in _qkv(30, 30, 4))
    query, key = query * 60, key * 60
    out = flash_attention(query, key, value, block_size=8)
    assert torch.isfinite(out).all()
    scores = query @ key.transpose(-2, -1) / query.size(-1) ** 0.5
    assert scores.abs().max() > 1000  # the case this test is about
    tolerance = 8 * torch.finfo(torch.float32).eps * scores.abs().max() * value.abs().max()
    torch.testing.assert_close(out, F.scaled_dot_product_attention(query, key, value),
                               rtol=0, atol=tolerance.item())


# ---------------------------------------------------------------- memory: nothing N x N kept


def _saved_numels(fn, *args, **kwargs) -> list[int]:
    """Sizes of all tensors the autograd graph saves while ``fn`` runs forward."""
    sizes = []

    def pack(t):
        sizes.append(t.numel())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn(*args, **kwargs)
    return sizes


def test_backward_keeps_no_quadratic_tensor():
    n, d = 256, 8
    query, key, value = _qkv(n, n, d, batch=1, heads=2)
    linear_size = 2 * n * d  # (B, H, N, d)
    saved = _saved_numels(flash_attention, query, key, value, is_causal=True, block_size=32)
    assert saved and max(saved) <= linear_size
    assert sum(saved) <= 4 * linear_size + 2 * n  # q, k, v, output and the log-sum-exp
    # The hook does see a quadratic tensor where there is one: the explicit path's weights.
    explicit = _saved_numels(scaled_dot_product_attention, query, key, value, is_causal=True)
    assert max(explicit) >= 2 * n * n


_PEAK_CODE = """
import sys, torch
from attention_course.efficient import flash_attention
from attention_course.experiments.efficient import peak_memory
from attention_course.masking import scaled_dot_product_attention
n, path = int(sys.argv[1]), sys.argv[2]
def qkv(m):
    g = torch.Generator().manual_seed(0)
    return [torch.randn(1, 2, m, 32, generator=g, requires_grad=True)
            for _ in range(3)]
attend = {"flash": lambda q, k, v: flash_attention(q, k, v),
          "explicit": lambda q, k, v: scaled_dot_product_attention(q, k, v)[0]}[path]
q, k, v = qkv(256)
attend(q, k, v).sum().backward()  # loads kernels: not part of the reading
q, k, v = qkv(n)
print(peak_memory(lambda: attend(q, k, v).sum().backward()))
"""


def _peak_in_a_fresh_process(n: int, path: str) -> float:
    """Peak memory (MiB) of one forward and backward pass, read in a process of its
    own: in a process that has run other tests, freed blocks are reused and a small
    step can read as nearly free."""
    env = {k: v for k, v in os.environ.items() if k != "MALLOC_MMAP_THRESHOLD_"}
    env["PYTHONPATH"] = str(ROOT)
    out = subprocess.run([sys.executable, "-c", _PEAK_CODE, str(n), path], cwd=ROOT,
                         env=env, capture_output=True, text=True, check=True).stdout
    return float(out.split()[-1])


@LINUX_PROC
def test_peak_memory_of_forward_and_backward_grows_linearly():
    small = _peak_in_a_fresh_process(1024, "flash")
    large = _peak_in_a_fresh_process(4096, "flash")
    assert large < 6 * small  # linear: x4; keeping the weights would be x16
    explicit = _peak_in_a_fresh_process(2048, "explicit")
    assert explicit > 5 * large  # at half the length: (1, 2, 2048, 2048) weights, 32 MiB each


@LINUX_PROC
def test_peak_memory_sees_a_temporary():
    size_mib = 48
    reading = peak_memory(lambda: torch.ones(size_mib * 2**18))  # float32: 4 bytes each
    assert size_mib - 1 <= reading <= size_mib + 8


@LINUX_PROC
def test_peak_memory_is_honest_when_freed_blocks_are_reused():
    """Once glibc has raised its mmap threshold, freed 4 MiB blocks stay resident and are
    reused, and a second identical step would read as nearly free. Needs a fresh process."""
    code = (
        "import torch\n"
        "from attention_course.experiments.efficient import peak_memory\n"
        "def step():\n"
        "    kept = [torch.ones(2**20) for _ in range(8)]  # 8 blocks of 4 MiB\n"
        "step()\n"
        "print(peak_memory(step), peak_memory(step))\n")
    env = {k: v for k, v in os.environ.items() if k != "MALLOC_MMAP_THRESHOLD_"}
    env["PYTHONPATH"] = str(ROOT)
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True,
                         text=True, check=True).stdout
    for reading in map(float, out.split()):
        assert 31 <= reading <= 40


@LINUX_PROC
def test_step_memory_is_measured_in_a_process_of_its_own():
    """Linear for the blockwise path, quadratic for the explicit one, as in a fresh
    process."""
    with StepMemory(heads=2, head_dim=32) as memory:
        small, large = memory("blockwise", 1024), memory("blockwise", 4096)
        explicit = memory("explicit", 2048)
        assert memory._child is not None and memory._child.poll() is None
        with pytest.raises(ValueError, match="path must be one of"):
            memory("sparse", 64)
        with pytest.raises(RuntimeError, match="block_size must be a positive int"):
            memory("blockwise", 64, block_size=0)
        child = memory._child
    assert child.poll() is not None  # closed with the context
    assert 2.5 * small < large < 6 * small  # linear: x4; keeping the weights would be x16
    assert explicit > 5 * large  # at half the length: (1, 2, 2048, 2048) weights, 32 MiB each
    assert memory("fused", 1024) > 0  # a closed StepMemory starts a new process
    memory.close()


# ---------------------------------------------------------------- the pieces


@PROPERTY
@given(rows=st.integers(1, 5), sizes=st.lists(st.integers(1, 6), min_size=1, max_size=5),
       dv=st.integers(1, 4), masked=st.floats(0.0, 0.6), seed=st.integers(0, 1000))
def test_online_softmax_equals_softmax_over_the_concatenation(rows, sizes, dv, masked, seed):
    g = seeded(seed)
    total = sum(sizes)
    scores = 5 * torch.randn(2, rows, total, generator=g, dtype=torch.float64)
    scores = scores.masked_fill(torch.rand(scores.shape, generator=g) < masked, float("-inf"))
    scores[:, :, -1] = 0.0  # every row keeps at least one key (in the last block)
    value = torch.randn(2, total, dv, generator=g, dtype=torch.float64)
    row_max = torch.full((2, rows), float("-inf"), dtype=torch.float64)
    row_sum = torch.zeros(2, rows, dtype=torch.float64)
    acc = torch.zeros(2, rows, dv, dtype=torch.float64)
    start = 0
    for size in sizes:
        block = slice(start, start + size)
        online_softmax_update(row_max, row_sum, acc, scores[:, :, block].clone(), value[:, block])
        start += size
    torch.testing.assert_close(row_max, scores.amax(dim=-1))
    torch.testing.assert_close(acc / row_sum[..., None], torch.softmax(scores, -1) @ value)
    torch.testing.assert_close(log_sum_exp(row_max, row_sum), torch.logsumexp(scores, -1))


def test_online_softmax_rescales_when_the_maximum_grows():
    """By hand: scores [0] then [ln 3]: the sum 1 is rescaled to 1/3, then 1 is added."""
    row_max, row_sum, acc = torch.tensor([[-math.inf]]), torch.zeros(1, 1), torch.zeros(1, 1, 1)
    online_softmax_update(row_max, row_sum, acc, torch.tensor([[[0.0]]]), torch.tensor([[[6.0]]]))
    assert (row_max.item(), row_sum.item(), acc.item()) == (0.0, 1.0, 6.0)
    online_softmax_update(row_max, row_sum, acc, torch.tensor([[[math.log(3)]]]),
                          torch.tensor([[[9.0]]]))
    assert row_max.item() == pytest.approx(math.log(3))
    assert row_sum.item() == pytest.approx(1 / 3 + 1)
    assert acc.item() == pytest.approx(6 / 3 + 9)  # output (2 + 9) / (4/3) = 6 * 1/4 + 9 * 3/4


def test_online_softmax_row_with_nothing_seen_stays_empty():
    row_max, row_sum, acc = torch.full((1, 2), -math.inf), torch.zeros(1, 2), torch.zeros(1, 2, 3)
    scores = torch.tensor([[[-math.inf, -math.inf], [1.0, -math.inf]]])
    online_softmax_update(row_max, row_sum, acc, scores, torch.ones(1, 2, 3))
    assert row_max[0, 0] == -math.inf and row_sum[0, 0] == 0 and torch.all(acc[0, 0] == 0)
    assert row_sum[0, 1] == 1 and log_sum_exp(row_max, row_sum)[0, 0] == -math.inf


def test_recompute_probabilities_gives_the_softmax():
    scores = torch.randn(3, 4, 10, generator=seeded(2), dtype=torch.float64)
    scores[0, 0, 3:] = -math.inf
    lse = torch.logsumexp(scores, dim=-1)
    block = scores[..., 4:7].clone()
    torch.testing.assert_close(recompute_probabilities(block, lse),
                               torch.softmax(scores, dim=-1)[..., 4:7])
    empty = torch.full((1, 2), -math.inf)
    assert torch.all(recompute_probabilities(empty.clone(), torch.tensor([-math.inf])) == 0)


def test_softmax_backward_equals_autograd():
    scores = torch.randn(2, 5, 7, generator=seeded(3), dtype=torch.float64, requires_grad=True)
    probs = torch.softmax(scores, dim=-1)
    grad_probs = torch.randn(2, 5, 7, generator=seeded(4), dtype=torch.float64)
    (expected,) = torch.autograd.grad(probs, scores, grad_probs)
    delta = (probs * grad_probs).sum(-1)  # = rowsum(dO * O) when dP = dO V^T and O = P V
    torch.testing.assert_close(softmax_backward(probs.detach(), grad_probs.clone(), delta),
                               expected)


# ---------------------------------------------------------------- skipped blocks


def _scores_seen(monkeypatch, **kwargs) -> tuple[int, int]:
    """(entries of all score blocks computed, finite ones among them) in one forward."""
    seen = [0, 0]
    update = efficient.online_softmax_update

    def spy(row_max, row_sum, acc, scores, value):
        seen[0] += scores.numel()
        seen[1] += int(torch.isfinite(scores).sum())
        return update(row_max, row_sum, acc, scores, value)

    monkeypatch.setattr(efficient, "online_softmax_update", spy)
    query, key, value = (t.detach() for t in _qkv(64, 64, 4, batch=1, heads=1))
    flash_attention(query, key, value, block_size=16, **kwargs)
    return seen[0], seen[1]


def test_causal_skips_blocks_above_the_diagonal(monkeypatch):
    computed, allowed = _scores_seen(monkeypatch, is_causal=True)
    assert allowed == int(causal_mask(64).sum()) == 64 * 65 // 2
    assert computed == 16 * (64 + 48 + 32 + 16)  # key block j: only the rows i >= 16 j
    assert _scores_seen(monkeypatch) == (64 * 64, 64 * 64)


def test_window_work_grows_linearly(monkeypatch):
    computed, allowed = _scores_seen(monkeypatch, is_causal=True, window=4)
    assert allowed == int(sliding_window_mask(64, 4).sum())
    assert computed <= 4 * 16 * (16 + 3)  # 4 key blocks, each seen by at most 19 rows


# ---------------------------------------------------------------- sliding windows


def test_sliding_window_mask_by_definition():
    mask = sliding_window_mask(6, 3)
    assert mask.dtype == torch.bool and mask.shape == (6, 6)
    for i in range(6):
        for j in range(6):
            assert mask[i, j] == (i - 3 < j <= i)
    assert torch.equal(sliding_window_mask(5, 1), torch.eye(5, dtype=torch.bool))
    assert torch.equal(sliding_window_mask(5, 5), causal_mask(5))
    assert torch.equal(sliding_window_mask(5, 50), causal_mask(5))
    assert torch.equal(sliding_window_mask(3, 2, num_keys=5), sliding_window_mask(5, 2)[:3])


@pytest.mark.parametrize("args, match", [
    ((5, 0), "window must be a positive int, got 0"),
    ((5, 2.0), "window must be a positive int"),
    ((5, True), "window must be a positive int"),
    ((-1, 2), "n must be a non-negative int, got -1"),
    ((4, 2, -3), "num_keys must be a non-negative int"),
])
def test_sliding_window_mask_bad_arguments(args, match):
    with pytest.raises(ValueError, match=match):
        sliding_window_mask(*args)


@pytest.mark.parametrize("nq, nk, window, block_size", [
    (37, 37, 5, 8), (20, 50, 9, 4), (40, 40, 1, 7), (30, 30, 100, 8), (40, 12, 3, 5)])
def test_flash_attention_with_window_equals_masked_attention(nq, nk, window, block_size):
    """Against the explicit path with the mask; with Nq >= Nk + window some queries see
    no key at all, and get output 0 and no gradient (as in masking's reference)."""
    query, key, value = _qkv(nq, nk, dtype=torch.float64)
    ours = _output_and_grads(flash_attention, query, key, value, is_causal=True,
                             block_size=block_size, window=window)
    mask = sliding_window_mask(nq, window, num_keys=nk)
    ref = _output_and_grads(lambda *qkv: scaled_dot_product_attention(*qkv, attn_mask=mask)[0],
                            query, key, value)
    for a, b in zip(ours, ref, strict=True):
        torch.testing.assert_close(a, b, **TOLERANCE[torch.float64])
    if nq >= nk + window:
        assert torch.all(ours[0][:, :, nk + window - 1:] == 0)


# ---------------------------------------------------------------- linear attention


def _linear_by_hand(query, key, value, is_causal, feature_map=elu_feature_map, eps=1e-6):
    """The quadratic form: weights phi(q_i) . phi(k_j), masked, normalised over j."""
    weights = feature_map(query) @ feature_map(key).transpose(-2, -1)
    if is_causal:
        weights = weights * causal_mask(query.size(2), key.size(2))
    return weights @ value / (weights.sum(-1, keepdim=True) + eps)


@pytest.mark.parametrize("is_causal, nq, nk", [(False, 9, 13), (False, 13, 13), (True, 13, 13)])
@pytest.mark.parametrize("chunk_size", [1, 4, 64])
def test_linear_attention_equals_its_quadratic_form(is_causal, nq, nk, chunk_size):
    query, key, value = _qkv(nq, nk, 6, dv=5, dtype=torch.float64)
    ours = _output_and_grads(linear_attention, query, key, value, is_causal=is_causal,
                             chunk_size=chunk_size)
    ref = _output_and_grads(lambda *qkv: _linear_by_hand(*qkv, is_causal), query, key, value)
    assert ours[0].shape == (2, 3, nq, 5)
    for a, b in zip(ours, ref, strict=True):
        torch.testing.assert_close(a, b, **TOLERANCE[torch.float64])


def test_linear_attention_other_feature_map_and_causality():
    query, key, value = (t.detach() for t in _qkv(10, 10, 4, dtype=torch.float64))
    relu_map = lambda x: F.relu(x) + 0.1
    torch.testing.assert_close(linear_attention(query, key, value, feature_map=relu_map),
                               _linear_by_hand(query, key, value, False, relu_map))
    out = linear_attention(query, key, value, is_causal=True, chunk_size=3)
    changed = value.clone()
    changed[:, :, 6:] += 10.0
    torch.testing.assert_close(linear_attention(query, key, changed, is_causal=True)[:, :, :6],
                               out[:, :, :6])


def test_linear_attention_is_not_softmax_attention():
    query, key, value = (t.detach() for t in _qkv(20, 20, 8))
    gap = linear_attention(query, key, value) - F.scaled_dot_product_attention(query, key, value)
    assert gap.abs().max() > 0.05


# ---------------------------------------------------------------- flops


def test_attention_flops_counts_allowed_pairs():
    assert attention_flops(3, 5, 8, batch=2, heads=4) == 4 * 8 * 15 * 2 * 4
    assert attention_flops(4, 4, 1, is_causal=True) == 4 * (1 + 2 + 3 + 4)
    assert attention_flops(4, 4, 1, is_causal=True, window=2) == 4 * (1 + 2 + 2 + 2)
    for nq, nk, window in [(7, 3, None), (3, 7, None), (9, 6, 2), (6, 9, 4)]:
        mask = causal_mask(nq, nk) if window is None else sliding_window_mask(nq, window, nk)
        assert attention_flops(nq, nk, 1, is_causal=True, window=window) == 4 * mask.sum()


def test_attention_bytes_counts_the_explicit_and_the_tiled_traffic():
    n, d = 1024, 64
    io = 4 * n * d  # Q, K, V read and O written
    assert attention_bytes(n, n, d) == 4 * (io + 4 * n * n)
    # tiled, 8 blocks of 128 queries: Q and O once, K and V once per block
    assert attention_bytes(n, n, d, tiled=True) == 4 * (2 * n * d + 8 * 2 * n * d)
    assert attention_bytes(n, n, d, batch=2, heads=3) == 6 * attention_bytes(n, n, d)
    assert attention_bytes(n, n, d, element_size=2) == attention_bytes(n, n, d) // 2
    # a last, shorter block of queries still reads K and V once more
    assert attention_bytes(130, 50, 8, tiled=True, block_size=64) == 4 * (
        2 * 130 * 8 + 3 * 2 * 50 * 8)
    # arithmetic intensity (FLOP per byte): d / 4 for the explicit path at large N,
    # block_size / 2 for the tiled kernel (K and V read N / block_size times)
    n = 1 << 16
    explicit = attention_flops(n, n, d) / attention_bytes(n, n, d)
    tiled = attention_flops(n, n, d) / attention_bytes(n, n, d, tiled=True)
    assert explicit == pytest.approx(d / 4, rel=0.01)
    assert tiled == pytest.approx(128 / 2, rel=0.01)


@pytest.mark.parametrize("nq, nk, block_size, is_causal, window", [
    (37, 37, 8, False, None), (37, 37, 8, True, None), (20, 45, 7, True, None),
    (45, 20, 7, True, None), (40, 40, 8, True, 5), (40, 12, 5, True, 3), (5, 5, 100, True, None)])
def test_block_schedule_covers_every_allowed_pair_once(nq, nk, block_size, is_causal, window):
    schedule = block_schedule(nq, nk, block_size, is_causal, window)
    computed = torch.zeros(nq, nk, dtype=torch.int64)
    for keys, rows in schedule:
        assert 0 < keys.stop - keys.start <= block_size and rows.start < rows.stop
        computed[rows, keys] += 1
    if window is not None:
        allowed = sliding_window_mask(nq, window, nk)
    elif is_causal:
        allowed = causal_mask(nq, nk)
    else:
        allowed = torch.ones(nq, nk, dtype=torch.bool)
    assert computed.max() <= 1 and torch.all(computed[allowed] == 1)
    starts = [keys.start for keys, _ in schedule]
    assert starts == sorted(starts) and starts[0] == 0


def test_block_schedule_skips_rows_above_the_diagonal():
    assert block_schedule(10, 10, 4) == [(slice(0, 4), slice(0, 10)), (slice(4, 8), slice(0, 10)),
                                         (slice(8, 10), slice(0, 10))]
    assert block_schedule(10, 10, 4, is_causal=True) == [
        (slice(0, 4), slice(0, 10)), (slice(4, 8), slice(4, 10)), (slice(8, 10), slice(8, 10))]
    # window 2: the block of keys 0..3 is seen by queries 0..4 only
    assert block_schedule(10, 10, 4, is_causal=True, window=2)[0] == (slice(0, 4), slice(0, 5))
    assert block_schedule(3, 10, 4, is_causal=True) == [(slice(0, 4), slice(0, 3))]
    with pytest.raises(ValueError, match="window=2 needs is_causal=True"):
        block_schedule(4, 4, 2, window=2)
    with pytest.raises(ValueError, match="block_size must be a positive int, got 0"):
        block_schedule(4, 4, 0)


def test_backward_multiplies_no_expanded_tensor():
    """The gradient of ``out.sum()`` is an expanded view (stride 0). A matrix product of
    such a view takes a slow path (measured 15x slower for dO V^T at N=2048): the backward
    makes the upstream gradient contiguous once instead."""
    query, key, value = _qkv(64, 64, 8, batch=1, heads=2)
    strides = []
    products = (torch.ops.aten.bmm.default, torch.ops.aten.baddbmm_.default,
                torch.ops.aten.baddbmm.default)

    class RecordProducts(torch.utils._python_dispatch.TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func in products:
                strides.extend(a.stride() for a in args if isinstance(a, torch.Tensor))
            return func(*args, **(kwargs or {}))

    out = flash_attention(query, key, value, is_causal=True, block_size=8)
    with RecordProducts():
        out.sum().backward()
    assert strides and all(0 not in stride for stride in strides), strides


def test_time_round_robin_rotates_the_order_and_times_every_round():
    calls = []
    steps = {name: (lambda name=name: calls.append(name)) for name in "abc"}
    times = time_round_robin(steps, repeats=4, warmup=2)
    assert calls[:6] == list("abcabc")  # two untimed rounds
    assert calls[6:] == list("abc" "bca" "cab" "abc")  # each round starts one later
    assert set(times) == set("abc") and all(len(t) == 4 for t in times.values())
    assert all(s >= 0 for t in times.values() for s in t)
    slow = time_round_robin({"sleep": lambda: time.sleep(0.02)}, repeats=2, warmup=0)
    assert min(slow["sleep"]) >= 0.02
    with pytest.raises(ValueError, match="repeats must be a positive int, got 0"):
        time_round_robin(steps, repeats=0)


# ---------------------------------------------------------------- errors


@pytest.mark.parametrize("shapes, match", [
    (((2, 5, 4), (2, 5, 4), (2, 5, 4)), r"must all be \(B, H, N, d\)"),
    (((2, 3, 5, 4), (1, 3, 5, 4), (1, 3, 5, 4)), r"same \(B, H\)"),
    (((2, 3, 5, 4), (2, 3, 5, 6), (2, 3, 5, 4)), "same head dim d"),
    (((2, 3, 5, 4), (2, 3, 5, 4), (2, 3, 6, 4)), "same number of keys Nk"),
    (((2, 3, 5, 4), (2, 3, 0, 4), (2, 3, 0, 4)), "at least one key"),
])
@pytest.mark.parametrize("fn", [flash_attention, linear_attention])
def test_bad_shapes_raise(fn, shapes, match):
    with pytest.raises(ValueError, match=match) as info:
        fn(*(torch.zeros(s) for s in shapes))
    assert str(shapes[0]) in str(info.value)  # the message shows the shapes involved


def test_bad_arguments_raise():
    x = torch.zeros(1, 1, 4, 2)
    with pytest.raises(ValueError, match="one floating dtype"):
        flash_attention(x, x, x.double())
    with pytest.raises(ValueError, match="one floating dtype"):
        flash_attention(*(torch.zeros(1, 1, 4, 2, dtype=torch.long),) * 3)
    for bad in (0, -1, 2.5, True):
        with pytest.raises(ValueError, match=f"block_size must be a positive int, got {bad}"):
            flash_attention(x, x, x, block_size=bad)
    with pytest.raises(ValueError, match="window=3 needs is_causal=True"):
        flash_attention(x, x, x, window=3)
    with pytest.raises(ValueError, match="window must be a positive int, got 0"):
        flash_attention(x, x, x, is_causal=True, window=0)
    with pytest.raises(ValueError, match="Nq=3, Nk=4"):
        linear_attention(torch.zeros(1, 1, 3, 2), x, x, is_causal=True)
    with pytest.raises(ValueError, match="chunk_size must be a positive int"):
        linear_attention(x, x, x, chunk_size=0)
    with pytest.raises(ValueError, match="window=2 needs is_causal=True"):
        attention_flops(4, 4, 8, window=2)
    with pytest.raises(RuntimeError, match="got device meta"):
        peak_memory(lambda: None, "meta")


# ---------------------------------------------------------------- GPU


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("is_causal", [False, True])
def test_cuda_equals_sdpa(dtype, is_causal):
    query, key, value = (t.detach().cuda().to(dtype).requires_grad_()
                         for t in _qkv(300, 257, 64, batch=2, heads=4))
    ours = _output_and_grads(flash_attention, query, key, value, is_causal=is_causal)
    assert all(t.device.type == "cuda" and t.dtype == dtype for t in ours)
    wide = [t.detach().float().requires_grad_() for t in (query, key, value)]
    ref = _output_and_grads(F.scaled_dot_product_attention, *wide, is_causal=is_causal)
    tolerance = {"rtol": 1e-4, "atol": 1e-4} if dtype == torch.float32 else {"rtol": 3e-2,
                                                                             "atol": 3e-2}
    for a, b in zip(ours, ref, strict=True):
        torch.testing.assert_close(a.float(), b, **tolerance)


@pytest.mark.gpu
def test_cuda_peak_memory_is_linear():
    def step(n):
        query, key, value = (t.detach().cuda().requires_grad_()
                             for t in _qkv(n, n, 64, batch=1, heads=8))
        return lambda: flash_attention(query, key, value).sum().backward()

    assert peak_memory(step(16384), "cuda") < 6 * peak_memory(step(4096), "cuda")
