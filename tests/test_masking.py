"""Tests for attention_course.masking: masked softmax, masks, scaled dot-product attention."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from module_helpers import seeded

from attention_course.masking import (
    OneLayerLM,
    causal_mask,
    combine_masks,
    masked_softmax,
    padding_mask,
    scaled_dot_product_attention,
)

PROPERTY = settings(max_examples=40, deadline=None)


# ---------------------------------------------------------------- masked_softmax


def test_masked_softmax_without_lengths_is_softmax():
    scores = torch.randn(2, 3, 5, generator=seeded(0))
    torch.testing.assert_close(masked_softmax(scores), torch.softmax(scores, dim=-1))


def test_masked_softmax_per_sequence_lengths():
    scores = torch.randn(2, 3, 5, generator=seeded(1))
    weights = masked_softmax(scores, torch.tensor([2, 4]))
    assert torch.all(weights[0, :, 2:] == 0) and torch.all(weights[1, :, 4:] == 0)
    torch.testing.assert_close(weights[0, :, :2], torch.softmax(scores[0, :, :2], dim=-1))
    torch.testing.assert_close(weights[1, :, :4], torch.softmax(scores[1, :, :4], dim=-1))


def test_masked_softmax_per_query_lengths():
    scores = torch.randn(2, 2, 4, generator=seeded(2))
    lens = torch.tensor([[1, 3], [4, 2]])
    weights = masked_softmax(scores, lens)
    for b in range(2):
        for i in range(2):
            n = int(lens[b, i])
            assert torch.all(weights[b, i, n:] == 0)
            expected = torch.softmax(scores[b, i, :n], dim=-1)
            torch.testing.assert_close(weights[b, i, :n], expected)


def test_masked_softmax_zero_length_row_is_zeros_with_zero_gradient():
    scores = torch.randn(2, 3, 4, generator=seeded(3), requires_grad=True)
    weights = masked_softmax(scores, torch.tensor([0, 2]))
    assert torch.all(weights[0] == 0)
    assert not torch.isnan(weights).any()
    (weights * torch.randn(2, 3, 4, generator=seeded(4))).sum().backward()
    assert torch.isfinite(scores.grad).all()
    assert torch.all(scores.grad[0] == 0)


def test_masked_softmax_accepts_lists_and_whole_floats_and_head_dims():
    scores = torch.randn(2, 4, 3, 5, generator=seeded(5))  # (B, heads, Nq, Nk)
    w_list = masked_softmax(scores, [2, 5])
    w_float = masked_softmax(scores, torch.tensor([2.0, 5.0]))
    torch.testing.assert_close(w_list, w_float)
    assert torch.all(w_list[0, ..., 2:] == 0)
    per_query = masked_softmax(scores, torch.tensor([[1, 2, 3], [5, 5, 0]]))
    assert torch.all(per_query[0, :, 0, 1:] == 0) and torch.all(per_query[1, :, 2] == 0)


def test_masked_softmax_length_above_nk_keeps_everything():
    scores = torch.randn(1, 2, 3, generator=seeded(6))
    torch.testing.assert_close(masked_softmax(scores, [7]), torch.softmax(scores, -1))


@pytest.mark.parametrize(
    "lens",
    [torch.tensor([1, 2, 3]), torch.tensor([[1, 2]]), torch.ones(2, 3, 1, dtype=torch.long)],
)
def test_masked_softmax_wrong_lens_shape_names_shapes(lens):
    scores = torch.randn(2, 3, 4)
    with pytest.raises(ValueError, match=r"\(2, 3, 4\)") as info:
        masked_softmax(scores, lens)
    assert str(tuple(lens.shape)) in str(info.value)


@pytest.mark.parametrize(
    "lens", [torch.tensor([1.5, 2.0]), torch.tensor([-1, 2]), torch.tensor([True, False])]
)
def test_masked_softmax_rejects_bad_length_values(lens):
    with pytest.raises(ValueError, match="valid_lens"):
        masked_softmax(torch.randn(2, 3, 4), lens)


def test_masked_softmax_rejects_scores_without_batch():
    with pytest.raises(ValueError, match=r"\(3, 4\)"):
        masked_softmax(torch.randn(3, 4), torch.tensor([2]))


@st.composite
def scores_and_lengths(draw):
    b, nq, nk = draw(st.integers(1, 3)), draw(st.integers(1, 4)), draw(st.integers(1, 6))
    per_query = draw(st.booleans())
    shape = (b, nq) if per_query else (b,)
    lens = torch.tensor(
        draw(st.lists(st.integers(0, nk), min_size=math.prod(shape), max_size=math.prod(shape)))
    ).reshape(shape)
    scale = draw(st.sampled_from([1.0, 10.0, 1e3]))
    scores = torch.randn(b, nq, nk, generator=seeded(draw(st.integers(0, 10_000)))) * scale
    return scores, lens


@PROPERTY
@given(scores_and_lengths())
def test_property_masked_softmax_sums_to_one_and_masked_are_exact_zero(data):
    scores, lens = data
    weights = masked_softmax(scores, lens)
    full = lens[:, None].expand(scores.shape[:2]) if lens.dim() == 1 else lens
    keep = torch.arange(scores.shape[-1]) < full[..., None]
    assert torch.all(weights[~keep] == 0)
    assert torch.all(weights >= 0)
    sums = weights.sum(-1)
    torch.testing.assert_close(sums[full > 0], torch.ones_like(sums[full > 0]))
    assert torch.all(sums[full == 0] == 0)


# ---------------------------------------------------------------- masks


def test_padding_mask_values():
    mask = padding_mask(torch.tensor([0, 2, 4]), 3)
    expected = torch.tensor([[False] * 3, [True, True, False], [True] * 3])
    assert mask.dtype == torch.bool and torch.equal(mask, expected)


@pytest.mark.parametrize("bad", [(torch.tensor([[1, 2]]), 3), (torch.tensor([1]), -1)])
def test_padding_mask_rejects_bad_input(bad):
    with pytest.raises(ValueError):
        padding_mask(*bad)


def test_causal_mask_is_lower_triangular():
    mask = causal_mask(4)
    assert mask.shape == (4, 4) and mask.dtype == torch.bool
    for i in range(4):
        for j in range(4):
            assert bool(mask[i, j]) == (j <= i)
    assert torch.equal(causal_mask(2, 3), torch.tensor([[True, False, False], [True, True, False]]))


@pytest.mark.parametrize("n,num_keys", [(1, 5), (3, 5), (4, 4), (5, 3), (0, 2)])
def test_causal_mask_bottom_right_alignment(n, num_keys):
    mask = causal_mask(n, num_keys, align="bottom_right")
    assert mask.shape == (n, num_keys) and mask.dtype == torch.bool
    for i in range(n):
        for j in range(num_keys):
            assert bool(mask[i, j]) == (j <= i + num_keys - n)
    if n:
        assert mask[-1].all()  # the newest query sees every key, as with a KV cache
    assert torch.equal(causal_mask(n, num_keys, align="top_left"), causal_mask(n, num_keys))


@pytest.mark.parametrize("n,num_keys", [(1, 5), (3, 5), (4, 4)])
def test_causal_mask_alignments_equal_pytorch_causal_biases(n, num_keys):
    bias = pytest.importorskip("torch.nn.attention.bias")
    q, k, v = _qkv(2, 3, nq=n, nk=num_keys, seed=19)
    for align, theirs in [("bottom_right", bias.causal_lower_right(n, num_keys)),
                          ("top_left", bias.causal_upper_left(n, num_keys))]:
        ours = causal_mask(n, num_keys, align=align)
        torch.testing.assert_close(F.scaled_dot_product_attention(q, k, v, attn_mask=ours),
                                   F.scaled_dot_product_attention(q, k, v, attn_mask=theirs),
                                   atol=1e-6, rtol=0)


def test_causal_mask_rejects_bad_arguments():
    with pytest.raises(ValueError, match="align must be one of"):
        causal_mask(3, 4, align="bottom-right")
    with pytest.raises(ValueError, match="num_keys"):
        causal_mask(3, -1)
    with pytest.raises(ValueError, match="n must"):
        causal_mask(2.0)


def test_combine_masks_broadcasts_with_and():
    pad = padding_mask(torch.tensor([2, 3]), 3)[:, None, :]
    combined = combine_masks(pad, causal_mask(3), None)
    assert combined.shape == (2, 3, 3)
    assert torch.equal(combined[0], torch.tensor([[1, 0, 0], [1, 1, 0], [1, 1, 0]]).bool())
    assert torch.equal(combined[1], causal_mask(3))
    assert combine_masks(None) is None
    with pytest.raises(ValueError, match=r"\(2, 3\)"):
        combine_masks(torch.ones(2, 3, dtype=torch.bool), torch.ones(4, dtype=torch.bool))
    with pytest.raises(ValueError, match="bool"):
        combine_masks(torch.ones(2, 3))


# ---------------------------------------------------------------- SDPA vs PyTorch


def _qkv(*lead, nq=4, nk=5, d=8, dv=6, seed=0, dtype=torch.float32):
    g = seeded(seed)
    q = torch.randn(*lead, nq, d, generator=g).to(dtype)
    k = torch.randn(*lead, nk, d, generator=g).to(dtype)
    v = torch.randn(*lead, nk, dv, generator=g).to(dtype)
    return q, k, v


def _allowing_mask(shape, seed, p=0.4):
    mask = torch.rand(shape, generator=seeded(seed)) > p
    mask[..., 0] = True  # no fully masked row: PyTorch's answer there depends on its version
    return mask


@pytest.mark.parametrize("lead", [(), (3,), (2, 4)])
def test_sdpa_matches_pytorch_without_mask(lead):
    q, k, v = _qkv(*lead, seed=1)
    out, weights = scaled_dot_product_attention(q, k, v)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v), atol=1e-5, rtol=0)
    assert weights.shape == (*lead, 4, 5)
    torch.testing.assert_close(weights.sum(-1), torch.ones(*lead, 4))


@pytest.mark.parametrize("mask_shape", [(2, 3, 4, 5), (2, 1, 4, 5), (2, 1, 1, 5), (4, 5)])
def test_sdpa_matches_pytorch_with_bool_mask(mask_shape):
    q, k, v = _qkv(2, 3, seed=2)
    mask = _allowing_mask(mask_shape, seed=3)
    out, weights = scaled_dot_product_attention(q, k, v, attn_mask=mask)
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=0)
    assert torch.all(weights[~mask.expand(2, 3, 4, 5)] == 0)


def test_sdpa_matches_pytorch_with_float_mask():
    q, k, v = _qkv(2, 3, seed=4)
    bias = torch.randn(2, 1, 4, 5, generator=seeded(5))
    bias = bias.masked_fill(~_allowing_mask((2, 1, 4, 5), seed=6), float("-inf"))
    out, weights = scaled_dot_product_attention(q, k, v, attn_mask=bias)
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=bias)
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=0)
    assert torch.all(weights[torch.isinf(bias).expand(2, 3, 4, 5)] == 0)


@pytest.mark.parametrize("nq,nk", [(5, 5), (3, 6), (6, 6)])
def test_sdpa_matches_pytorch_causal(nq, nk):
    q, k, v = _qkv(2, 2, nq=nq, nk=nk, seed=7)
    out, weights = scaled_dot_product_attention(q, k, v, is_causal=True)
    expected = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=0)
    assert torch.all(weights[..., ~causal_mask(nq, nk)] == 0)


def test_sdpa_matches_pytorch_with_custom_scale_and_3d_batch():
    q, k, v = _qkv(3, seed=8)
    out, _ = scaled_dot_product_attention(q, k, v, scale=0.3)
    expected = F.scaled_dot_product_attention(q, k, v, scale=0.3)
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=0)


def test_sdpa_causal_combines_with_padding_mask():
    q, k, v = _qkv(2, nq=4, nk=4, seed=9)
    pad = padding_mask(torch.tensor([4, 2]), 4)[:, None, :]
    _, weights = scaled_dot_product_attention(q, k, v, attn_mask=pad, is_causal=True)
    explicit = combine_masks(pad, causal_mask(4))
    _, expected = scaled_dot_product_attention(q, k, v, attn_mask=explicit)
    torch.testing.assert_close(weights, expected)
    assert torch.all(weights[1, :, 2:] == 0) and torch.all(weights[:, 0, 1:] == 0)


def test_sdpa_fully_masked_row_gives_zeros_and_finite_gradients():
    q, k, v = _qkv(2, seed=10)
    q.requires_grad_()
    mask = torch.ones(2, 4, 5, dtype=torch.bool)
    mask[0, 1] = False
    out, weights = scaled_dot_product_attention(q, k, v, attn_mask=mask)
    assert torch.all(weights[0, 1] == 0) and torch.all(out[0, 1] == 0)
    out.sum().backward()
    assert torch.isfinite(q.grad).all()
    bias = torch.zeros(2, 4, 5).masked_fill(~mask, float("-inf"))
    out_f, weights_f = scaled_dot_product_attention(q, k, v, attn_mask=bias)
    assert torch.all(weights_f[0, 1] == 0) and torch.isfinite(out_f).all()


def test_sdpa_dropout_weights_are_the_ones_used():
    q, k, v = _qkv(2, nq=30, nk=30, seed=11)
    torch.manual_seed(0)
    out, weights = scaled_dot_product_attention(q, k, v, dropout_p=0.5)
    torch.testing.assert_close(out, weights @ v)
    assert (weights == 0).float().mean() > 0.3  # about half the weights dropped
    with pytest.raises(ValueError, match="dropout_p"):
        scaled_dot_product_attention(q, k, v, dropout_p=1.0)


# ---------------------------------------------------------------- properties


@st.composite
def attention_case(draw):
    b, nq, nk = draw(st.integers(1, 3)), draw(st.integers(1, 5)), draw(st.integers(1, 6))
    heads = draw(st.sampled_from([(), (2,)]))
    lens = torch.tensor(draw(st.lists(st.integers(1, nk), min_size=b, max_size=b)))
    seed = draw(st.integers(0, 10_000))
    causal = draw(st.booleans()) and nq <= nk
    return b, heads, nq, nk, lens, seed, causal


@PROPERTY
@given(attention_case())
def test_property_sdpa_ignores_masked_values_and_normalises(case):
    b, heads, nq, nk, lens, seed, causal = case
    q, k, v = _qkv(b, *heads, nq=nq, nk=nk, d=4, dv=3, seed=seed)
    pad = padding_mask(lens, nk).reshape(b, *[1] * len(heads), 1, nk)
    out, weights = scaled_dot_product_attention(q, k, v, attn_mask=pad, is_causal=causal)
    allowed = combine_masks(pad, causal_mask(nq, nk) if causal else None)
    allowed = allowed.expand(weights.shape)
    assert torch.all(weights[~allowed] == 0)
    has_any = allowed.any(-1)
    sums = weights.sum(-1)
    torch.testing.assert_close(sums[has_any], torch.ones_like(sums[has_any]))
    # Change every value at a padded key: the output must not move at all.
    noisy_v = torch.where(pad.transpose(-2, -1), v, torch.full_like(v, 1e4))
    noisy_out, _ = scaled_dot_product_attention(q, k, noisy_v, attn_mask=pad, is_causal=causal)
    assert torch.equal(out, noisy_out)
    if has_any.all():
        expected = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed)
        torch.testing.assert_close(out, expected, atol=1e-5, rtol=0)


# ---------------------------------------------------------------- low precision


@pytest.mark.parametrize("dtype,big", [(torch.float16, 3e4), (torch.bfloat16, 1e30)])
def test_masked_softmax_low_precision_large_scores(dtype, big):
    scores = torch.tensor([[[big, -big, 0.0, big / 2], [big, big, big, big]]], dtype=dtype)
    weights = masked_softmax(scores, torch.tensor([[3, 0]]))
    assert weights.dtype == dtype and torch.isfinite(weights).all()
    assert weights[0, 0, 0] == 1 and torch.all(weights[0, 1] == 0)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_sdpa_low_precision_large_inputs_and_fully_masked_rows(dtype):
    q, k, v = _qkv(2, 2, seed=12)
    q, k, v = (q * 300).to(dtype), (k * 300).to(dtype), v.to(dtype)  # q.k overflows fp16
    mask = _allowing_mask((2, 1, 4, 5), seed=13)
    mask[0, 0, 2] = False
    out, weights = scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=True)
    assert out.dtype == dtype and weights.dtype == dtype
    assert torch.isfinite(out).all() and torch.isfinite(weights).all()
    assert torch.all(weights[0, :, 2] == 0)


# ---------------------------------------------------------------- bad input


@pytest.mark.parametrize("shape", [(4, 6), (2, 4, 5), (2, 3, 4, 1, 5)])
def test_sdpa_wrong_mask_shape_names_shapes(shape):
    q, k, v = _qkv(2, 3, seed=14)
    with pytest.raises(ValueError, match="attn_mask") as info:
        scaled_dot_product_attention(q, k, v, attn_mask=torch.ones(shape, dtype=torch.bool))
    assert str(shape) in str(info.value) and "(2, 3, 4, 5)" in str(info.value)


@pytest.mark.parametrize("dtype", [torch.int64, torch.uint8, torch.int32])
def test_sdpa_integer_mask_dtype_is_rejected(dtype):
    q, k, v = _qkv(2, seed=15)
    with pytest.raises(ValueError, match=r"attn_mask.*dtype.*\(4, 5\)"):
        scaled_dot_product_attention(q, k, v, attn_mask=torch.ones(4, 5, dtype=dtype))


def test_sdpa_mismatched_qkv_shapes_are_rejected():
    q, k, v = _qkv(2, seed=16)
    with pytest.raises(ValueError, match=r"query \(2, 4, 8\), key \(2, 5, 7\)"):
        scaled_dot_product_attention(q, k[..., :7], v)
    with pytest.raises(ValueError, match="value"):
        scaled_dot_product_attention(q, k, v[:, :3])
    with pytest.raises(ValueError, match="leading"):
        scaled_dot_product_attention(q, k[None].expand(3, 2, 5, 8).reshape(6, 5, 8), v)


# ---------------------------------------------------------------- OneLayerLM


def _ids(batch, length, vocab, seed):
    return torch.randint(0, vocab, (batch, length), generator=seeded(seed))


def test_one_layer_lm_shapes_and_padded_keys():
    torch.manual_seed(0)
    model = OneLayerLM(11, d_model=8, max_len=6)
    ids, lens = _ids(3, 5, 11, seed=30), torch.tensor([5, 2, 0])
    for is_causal in (True, False):
        logits, weights = model(ids, lens, is_causal=is_causal)
        assert logits.shape == (3, 5, 11) and weights.shape == (3, 5, 5)
        assert torch.all(weights[1, :, 2:] == 0) and torch.all(weights[2] == 0)
        assert torch.isfinite(logits).all()
    assert torch.all(model(ids, lens)[1][0].triu(1) == 0)  # causal by default


def test_one_layer_lm_causal_output_ignores_the_future():
    torch.manual_seed(1)
    model = OneLayerLM(7, d_model=8, max_len=8)
    ids, lens = _ids(2, 6, 7, seed=31), torch.tensor([6, 6])
    changed = ids.clone()
    changed[:, 4:] = (changed[:, 4:] + 1) % 7  # only tokens 4 and 5 differ
    for is_causal, same in ((True, True), (False, False)):
        before = model(ids, lens, is_causal)[0][:, :4]
        after = model(changed, lens, is_causal)[0][:, :4]
        assert torch.allclose(before, after, atol=1e-6) == same
    # with the mask, position t sees what a run on the prefix up to t sees
    full = model(ids, lens, is_causal=True)[0]
    for t in range(6):
        prefix = model(ids[:, : t + 1], torch.tensor([t + 1, t + 1]), False)[0]
        torch.testing.assert_close(full[:, t], prefix[:, t], atol=1e-6, rtol=0)


def test_one_layer_lm_without_the_mask_learns_to_copy_the_answer():
    """On random tokens the next one cannot be predicted: a causal model stays
    near chance (loss log V), a model that sees the future reads it off."""
    vocab, length = 8, 6
    loss = torch.nn.functional.cross_entropy
    finals = {}
    for is_causal in (True, False):
        torch.manual_seed(2)
        model = OneLayerLM(vocab, d_model=16, max_len=length)
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
        g = seeded(32)
        for _ in range(150):
            ids = torch.randint(0, vocab, (32, length + 1), generator=g)
            lens = torch.full((32,), length)
            logits = model(ids[:, :-1], lens, is_causal)[0]
            # the target at t is token t + 1, which is also input t + 1
            # (the last position has nothing to read it from)
            step = loss(logits[:, :-1].flatten(0, 1), ids[:, 1:-1].flatten())
            optimizer.zero_grad()
            step.backward()
            optimizer.step()
        finals[is_causal] = step.item()
    assert finals[True] > 0.8 * math.log(vocab)
    assert finals[False] < 0.2


def test_one_layer_lm_rejects_bad_input():
    with pytest.raises(ValueError, match="vocab_size"):
        OneLayerLM(0)
    model = OneLayerLM(5, d_model=4, max_len=3)
    with pytest.raises(ValueError, match="max_len"):
        model(torch.zeros(1, 4, dtype=torch.long), torch.tensor([4]))
    with pytest.raises(ValueError, match=r"\(B, T\)"):
        model(torch.zeros(4, dtype=torch.long), torch.tensor([4]))
    with pytest.raises(ValueError, match=r"valid_lens must have shape \(B,\)"):
        model(torch.zeros(2, 3, dtype=torch.long), torch.tensor([3]))


# ---------------------------------------------------------------- GPU


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_sdpa_on_cuda_matches_pytorch(dtype):
    q, k, v = (t.cuda().to(dtype) for t in _qkv(2, 4, nq=16, nk=16, d=32, dv=32, seed=17))
    mask = _allowing_mask((2, 1, 16, 16), seed=18).cuda()
    out, weights = scaled_dot_product_attention(q, k, v, attn_mask=mask)
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    assert out.device.type == "cuda" and out.dtype == dtype
    tol = 1e-5 if dtype == torch.float32 else 2e-2
    torch.testing.assert_close(out, expected, atol=tol, rtol=tol)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_masked_softmax_on_cuda_fp16_fully_masked():
    scores = torch.full((2, 3, 4), 6e4, dtype=torch.float16, device="cuda")
    weights = masked_softmax(scores, torch.tensor([0, 2], device="cuda"))
    assert torch.isfinite(weights).all() and torch.all(weights[0] == 0)
    torch.testing.assert_close(weights[1, :, :2].float(), torch.full((3, 2), 0.5, device="cuda"))
