"""Held-out checks of the *Public API contract* in docs/ARCHITECTURE.md, written from
the outside.

Every name is called with exactly the signature the contract writes down (positional and
keyword), and every stated shape, dtype, meaning and equivalence is checked against an
independent, hand-written formula or against PyTorch's own implementation. Modules that
are not there yet are skipped; a module that is there must meet the contract in full.
"""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from module_helpers import copy_attention
from torch import nn

ROOT = Path(__file__).resolve().parents[1]
ATOL = 1e-5


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def randn(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(*shape, generator=gen(seed))


# --------------------------------------------------------------------------------------
# kernel_regression.nadaraya_watson
# --------------------------------------------------------------------------------------


def _nw_by_hand(queries, keys, values, bandwidth):
    """Gaussian-kernel Nadaraya-Watson: K(u) = exp(-u^2 / 2), u = (x - x_i) / h."""
    n_q, n_k = len(queries), len(keys)
    weights = torch.empty(n_q, n_k, dtype=torch.float64)
    for i in range(n_q):
        kernel = [math.exp(-0.5 * ((float(queries[i]) - float(keys[j])) / bandwidth) ** 2)
                  for j in range(n_k)]
        total = sum(kernel)
        for j in range(n_k):
            weights[i, j] = kernel[j] / total
    return weights @ values.double(), weights


@pytest.mark.parametrize("bandwidth", [1.0, 0.5, 2.0])
def test_nadaraya_watson_is_gaussian_kernel_regression(bandwidth):
    kr = pytest.importorskip("attention_course.kernel_regression")
    queries = torch.linspace(-2.0, 3.0, 7)
    keys = torch.sort(torch.rand(11, generator=gen(1)) * 5 - 2).values
    values = torch.sin(keys) + 0.1 * randn(11, seed=2)

    if bandwidth == 1.0:
        predictions, weights = kr.nadaraya_watson(queries, keys, values)  # default bandwidth
    else:
        predictions, weights = kr.nadaraya_watson(queries, keys, values, bandwidth=bandwidth)
    expected_pred, expected_w = _nw_by_hand(queries, keys, values, bandwidth)

    assert weights.shape == (7, 11)
    assert predictions.shape == (7,)
    torch.testing.assert_close(weights.sum(dim=1), torch.ones(7), atol=ATOL, rtol=0)
    torch.testing.assert_close(weights.double(), expected_w, atol=ATOL, rtol=0)
    torch.testing.assert_close(predictions.double(), expected_pred, atol=ATOL, rtol=0)


def test_nadaraya_watson_positional_bandwidth_and_prediction_is_weighted_mean():
    kr = pytest.importorskip("attention_course.kernel_regression")
    queries, keys, values = randn(5, seed=3), randn(8, seed=4), randn(8, seed=5)
    predictions, weights = kr.nadaraya_watson(queries, keys, values, 0.7)
    assert weights.shape == (5, 8)
    assert bool((weights >= 0).all())
    torch.testing.assert_close(predictions, weights @ values, atol=ATOL, rtol=0)
    _, expected_w = _nw_by_hand(queries, keys, values, 0.7)
    torch.testing.assert_close(weights.double(), expected_w, atol=ATOL, rtol=0)


# --------------------------------------------------------------------------------------
# scoring
# --------------------------------------------------------------------------------------


def test_dot_scaled_cosine_scores():
    scoring = pytest.importorskip("attention_course.scoring")
    q, k = randn(2, 3, 6, seed=10), randn(2, 5, 6, seed=11)
    dot = torch.einsum("bqd,bkd->bqk", q, k)
    for name, expected in [
        ("dot_score", dot),
        ("scaled_dot_score", dot / math.sqrt(6)),
        ("cosine_score", dot / (q.norm(dim=-1)[:, :, None] * k.norm(dim=-1)[:, None, :])),
    ]:
        fn = getattr(scoring, name)
        out = fn(q, k)
        assert out.shape == (2, 3, 5), name
        assert out.dtype == torch.float32, name
        torch.testing.assert_close(out, expected, atol=ATOL, rtol=1e-5, msg=name)
        torch.testing.assert_close(fn(q=q, k=k), expected, atol=ATOL, rtol=1e-5, msg=name)


def _linears(module: nn.Module) -> list[nn.Linear]:
    return [m for m in module.modules() if isinstance(m, nn.Linear)]


def _affine(x: torch.Tensor, p: torch.Tensor, in_dim: int) -> torch.Tensor:
    """``x @ W^T`` for a weight stored either as (out, in) or as (in, out)."""
    if p.dim() == 1:
        return x @ p
    return x @ p.T if p.shape[-1] == in_dim else x @ p


def _find_map(module: nn.Module, in_dim: int, out_dim: int):
    """The map in_dim -> out_dim inside ``module``, whatever it is called: a function."""
    for lin in _linears(module):
        if lin.in_features == in_dim and lin.out_features == out_dim:
            return lambda x, lin=lin: F.linear(x, lin.weight, lin.bias)
    owned = {id(p) for lin in _linears(module) for p in lin.parameters()}
    for _, p in module.named_parameters():
        if id(p) in owned:
            continue
        if out_dim == 1 and p.dim() == 1 and p.numel() == in_dim:
            return lambda x, p=p: (x @ p).unsqueeze(-1)
        if p.dim() == 2 and tuple(p.shape) in {(out_dim, in_dim), (in_dim, out_dim)}:
            if out_dim == 1 and p.shape == (in_dim, 1):
                return lambda x, p=p: x @ p
            return lambda x, p=p: _affine(x, p, in_dim)
    raise AssertionError(f"no parameter mapping {in_dim} -> {out_dim} in {module}")


def test_additive_score_is_wv_tanh_wq_q_plus_wk_k():
    scoring = pytest.importorskip("attention_course.scoring")
    torch.manual_seed(0)
    query_dim, key_dim, hidden_dim = 3, 5, 7
    module = scoring.AdditiveScore(query_dim, key_dim, hidden_dim)
    assert isinstance(module, nn.Module)
    module_kw = scoring.AdditiveScore(query_dim=query_dim, key_dim=key_dim, hidden_dim=hidden_dim)
    assert isinstance(module_kw, nn.Module)
    q, k = randn(2, 4, query_dim, seed=12), randn(2, 6, key_dim, seed=13)
    out = module(q, k)
    assert out.shape == (2, 4, 6)

    w_q = _find_map(module, query_dim, hidden_dim)
    w_k = _find_map(module, key_dim, hidden_dim)
    w_v = _find_map(module, hidden_dim, 1)
    expected = torch.empty(2, 4, 6)
    with torch.no_grad():
        for b in range(2):
            for i in range(4):
                for j in range(6):
                    expected[b, i, j] = w_v(torch.tanh(w_q(q[b, i]) + w_k(k[b, j])))[0]
    torch.testing.assert_close(out.detach(), expected, atol=ATOL, rtol=1e-5)
    out.sum().backward()
    assert all(p.grad is not None for p in module.parameters())


def test_bilinear_score_is_q_W_k():
    scoring = pytest.importorskip("attention_course.scoring")
    torch.manual_seed(0)
    query_dim, key_dim = 3, 5
    module = scoring.BilinearScore(query_dim, key_dim)
    assert isinstance(module, nn.Module)
    assert isinstance(scoring.BilinearScore(query_dim=query_dim, key_dim=key_dim), nn.Module)
    q, k = randn(2, 4, query_dim, seed=14), randn(2, 6, key_dim, seed=15)
    out = module(q, k)
    assert out.shape == (2, 4, 6)
    # a map key_dim -> query_dim (W k) or query_dim -> key_dim (W^T q), whatever it's called
    mats = [p for p in module.parameters() if p.dim() == 2]
    assert len(mats) == 1, "expected one weight matrix W"
    W = mats[0].detach()
    if W.shape == (query_dim, key_dim):
        expected = torch.einsum("bqd,de,bke->bqk", q, W, k)
    else:
        assert W.shape == (key_dim, query_dim)
        expected = torch.einsum("bqd,ed,bke->bqk", q, W, k)
    extra = [p for p in module.parameters() if p.dim() != 2]
    assert not extra, "a bilinear score q^T W k has no other parameters"
    torch.testing.assert_close(out.detach(), expected, atol=ATOL, rtol=1e-5)


def test_score_modules_share_call_and_output_with_functions():
    scoring = pytest.importorskip("attention_course.scoring")
    q, k = randn(3, 2, 4, seed=16), randn(3, 5, 4, seed=17)
    shapes = {
        scoring.dot_score(q, k).shape,
        scoring.scaled_dot_score(q, k).shape,
        scoring.cosine_score(q, k).shape,
        scoring.AdditiveScore(4, 4, 8)(q, k).shape,
        scoring.BilinearScore(4, 4)(q, k).shape,
        scoring.AdditiveScore(4, 4, 8)(q=q, k=k).shape,
        scoring.BilinearScore(4, 4)(q=q, k=k).shape,
    }
    assert shapes == {torch.Size([3, 2, 5])}


# --------------------------------------------------------------------------------------
# masking
# --------------------------------------------------------------------------------------


def test_masked_softmax_without_valid_lens_is_softmax():
    masking = pytest.importorskip("attention_course.masking")
    scores = randn(2, 3, 5, seed=20)
    torch.testing.assert_close(masking.masked_softmax(scores), scores.softmax(-1))
    torch.testing.assert_close(masking.masked_softmax(scores, None), scores.softmax(-1))
    torch.testing.assert_close(masking.masked_softmax(scores, valid_lens=None),
                               scores.softmax(-1))


def _softmax_prefix(row: torch.Tensor, n: int) -> torch.Tensor:
    out = torch.zeros_like(row)
    if n > 0:
        out[:n] = row[:n].softmax(-1)
    return out


def test_masked_softmax_valid_lens_per_batch():
    masking = pytest.importorskip("attention_course.masking")
    scores = randn(3, 4, 6, seed=21)
    valid_lens = torch.tensor([2, 6, 0])
    weights = masking.masked_softmax(scores, valid_lens)
    assert weights.shape == scores.shape
    assert not torch.isnan(weights).any()
    for b in range(3):
        n = int(valid_lens[b])
        assert bool((weights[b, :, n:] == 0).all()), "positions >= valid length not exactly 0"
        for i in range(4):
            torch.testing.assert_close(weights[b, i], _softmax_prefix(scores[b, i], n))
    assert bool((weights[2] == 0).all()), "valid length 0 must give an all-zero row"
    kw = masking.masked_softmax(scores=scores, valid_lens=valid_lens)
    torch.testing.assert_close(kw, weights)


def test_masked_softmax_valid_lens_per_query():
    masking = pytest.importorskip("attention_course.masking")
    scores = randn(2, 3, 5, seed=22)
    valid_lens = torch.tensor([[1, 3, 5], [0, 2, 4]])
    weights = masking.masked_softmax(scores, valid_lens)
    assert weights.shape == scores.shape
    assert not torch.isnan(weights).any()
    for b in range(2):
        for i in range(3):
            n = int(valid_lens[b, i])
            assert bool((weights[b, i, n:] == 0).all())
            torch.testing.assert_close(weights[b, i], _softmax_prefix(scores[b, i], n))
    assert bool((weights[1, 0] == 0).all())


def test_masked_softmax_zero_length_with_extreme_scores_is_not_nan():
    masking = pytest.importorskip("attention_course.masking")
    scores = torch.full((1, 2, 3), -1e30)
    scores[0, 1] = torch.tensor([float("-inf"), 0.0, 1e30])
    weights = masking.masked_softmax(scores, torch.tensor([0]))
    assert not torch.isnan(weights).any()
    assert bool((weights == 0).all())


def test_masked_softmax_gradient_is_finite_with_empty_row():
    masking = pytest.importorskip("attention_course.masking")
    scores = randn(2, 2, 4, seed=23).requires_grad_()
    weights = masking.masked_softmax(scores, torch.tensor([0, 3]))
    (weights * randn(2, 2, 4, seed=24)).sum().backward()
    assert torch.isfinite(scores.grad).all()


def test_padding_mask():
    masking = pytest.importorskip("attention_course.masking")
    valid_lens = torch.tensor([0, 2, 5, 3])
    mask = masking.padding_mask(valid_lens, 5)
    assert mask.dtype == torch.bool
    assert mask.shape == (4, 5)
    expected = torch.tensor([[j < n for j in range(5)] for n in [0, 2, 5, 3]])
    assert torch.equal(mask, expected)
    assert torch.equal(masking.padding_mask(valid_lens=valid_lens, max_len=5), expected)


def test_causal_mask():
    masking = pytest.importorskip("attention_course.masking")
    for n in [1, 4]:
        mask = masking.causal_mask(n)
        assert mask.dtype == torch.bool
        assert mask.shape == (n, n)
        expected = torch.tensor([[j <= i for j in range(n)] for i in range(n)])
        assert torch.equal(mask, expected)
    assert torch.equal(masking.causal_mask(n=3), torch.ones(3, 3, dtype=torch.bool).tril())


def _check_sdpa(masking, q, k, v, **kwargs):
    expected = F.scaled_dot_product_attention(q, k, v, **kwargs)
    output, weights = masking.scaled_dot_product_attention(q, k, v, **kwargs)
    assert output.shape == expected.shape
    assert weights.shape == (*q.shape[:-1], k.shape[-2])
    torch.testing.assert_close(output, expected, atol=ATOL, rtol=0)
    # the weights are the attention weights that produced the output
    torch.testing.assert_close(weights @ v, output, atol=ATOL, rtol=0)
    torch.testing.assert_close(weights.sum(-1), torch.ones(weights.shape[:-1]),
                               atol=ATOL, rtol=0)
    return weights


def test_sdpa_matches_torch_unmasked_with_nq_ne_nk():
    masking = pytest.importorskip("attention_course.masking")
    q, k, v = randn(2, 3, 8, seed=30), randn(2, 5, 8, seed=31), randn(2, 5, 4, seed=32)
    weights = _check_sdpa(masking, q, k, v)
    expected_w = (q @ k.transpose(-2, -1) / math.sqrt(8)).softmax(-1)
    torch.testing.assert_close(weights, expected_w, atol=ATOL, rtol=0)


def test_sdpa_matches_torch_with_bool_masks():
    masking = pytest.importorskip("attention_course.masking")
    q, k, v = randn(2, 3, 8, seed=33), randn(2, 5, 8, seed=34), randn(2, 5, 6, seed=35)
    mask = torch.rand(2, 3, 5, generator=gen(36)) > 0.4
    mask[..., 0] = True  # no fully masked row (undefined in torch)
    weights = _check_sdpa(masking, q, k, v, attn_mask=mask)
    assert bool((weights[~mask] == 0).all()), "disallowed positions (False) must get weight 0"
    # broadcast (Nq, Nk) mask
    mask2 = torch.tensor([[True, False, True, True, False]] * 3)
    _check_sdpa(masking, q, k, v, attn_mask=mask2)
    # key-padding style (B, 1, Nk)
    mask3 = masking.padding_mask(torch.tensor([2, 4]), 5)[:, None, :]
    weights3 = _check_sdpa(masking, q, k, v, attn_mask=mask3)
    assert bool((weights3[0, :, 2:] == 0).all()) and bool((weights3[1, :, 4:] == 0).all())


def test_sdpa_float_mask_is_added():
    masking = pytest.importorskip("attention_course.masking")
    q, k, v = randn(2, 3, 8, seed=37), randn(2, 5, 8, seed=38), randn(2, 5, 8, seed=39)
    bias = randn(2, 3, 5, seed=40)
    weights = _check_sdpa(masking, q, k, v, attn_mask=bias)
    expected_w = (q @ k.transpose(-2, -1) / math.sqrt(8) + bias).softmax(-1)
    torch.testing.assert_close(weights, expected_w, atol=ATOL, rtol=0)
    bias_inf = torch.zeros(3, 5)
    bias_inf[:, 3:] = float("-inf")
    _check_sdpa(masking, q, k, v, attn_mask=bias_inf)


def test_sdpa_is_causal():
    masking = pytest.importorskip("attention_course.masking")
    q, k, v = randn(2, 4, 8, seed=41), randn(2, 4, 8, seed=42), randn(2, 4, 8, seed=43)
    weights = _check_sdpa(masking, q, k, v, is_causal=True)
    upper = ~torch.ones(4, 4, dtype=torch.bool).tril()
    assert bool((weights[:, upper] == 0).all())
    _check_sdpa(masking, q, k, v, attn_mask=masking.causal_mask(4))


def test_sdpa_is_causal_with_nq_ne_nk_matches_torch():
    masking = pytest.importorskip("attention_course.masking")
    q, k, v = randn(2, 3, 8, seed=44), randn(2, 5, 8, seed=45), randn(2, 5, 8, seed=46)
    _check_sdpa(masking, q, k, v, is_causal=True)


def test_sdpa_extra_batch_and_head_dims():
    masking = pytest.importorskip("attention_course.masking")
    q, k, v = randn(2, 3, 4, 8, seed=47), randn(2, 3, 6, 8, seed=48), randn(2, 3, 6, 5, seed=49)
    _check_sdpa(masking, q, k, v)
    mask = torch.rand(2, 1, 4, 6, generator=gen(50)) > 0.3
    mask[..., 0] = True
    _check_sdpa(masking, q, k, v, attn_mask=mask)
    _check_sdpa(masking, q, k, v, attn_mask=randn(3, 4, 6, seed=51))
    q4, k4, v4 = randn(2, 3, 5, 8, seed=52), randn(2, 3, 5, 8, seed=53), randn(2, 3, 5, 8, seed=54)
    _check_sdpa(masking, q4, k4, v4, is_causal=True)


def test_sdpa_keyword_signature_and_dropout_zero():
    masking = pytest.importorskip("attention_course.masking")
    q, k, v = randn(1, 2, 4, seed=55), randn(1, 3, 4, seed=56), randn(1, 3, 4, seed=57)
    mask = torch.tensor([[True, True, False], [True, False, True]])
    output, weights = masking.scaled_dot_product_attention(
        query=q, key=k, value=v, attn_mask=mask, is_causal=False, dropout_p=0.0
    )
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    torch.testing.assert_close(output, expected, atol=ATOL, rtol=0)
    assert weights.shape == (1, 2, 3)


# --------------------------------------------------------------------------------------
# multihead.MultiHeadAttention vs torch.nn.MultiheadAttention
# --------------------------------------------------------------------------------------


def _make_pair(multihead, embed_dim=8, num_heads=2, bias=True, kdim=None, vdim=None, seed=0,
               dropout=0.0):
    torch.manual_seed(seed)
    ours = multihead.MultiHeadAttention(embed_dim, num_heads, dropout, bias, kdim, vdim).eval()
    for name in ["q_proj", "k_proj", "v_proj", "out_proj"]:
        assert isinstance(getattr(ours, name), nn.Linear), name
    ref = nn.MultiheadAttention(embed_dim, num_heads, dropout=dropout, bias=bias, kdim=kdim,
                                vdim=vdim, batch_first=True).eval()
    # give our module random, distinct parameters (biases too) and copy them into torch's
    with torch.no_grad():
        for p in ours.parameters():
            p.copy_(torch.randn(p.shape) * 0.5)
    if not bias:
        assert ours.q_proj.bias is None and ours.out_proj.bias is None
        assert ours.k_proj.bias is None and ours.v_proj.bias is None
    copy_attention(ours, ref)
    return ours, ref


def _compare_mha(ours, ref, query, key, value, our_mask=None, ref_kwargs=None, is_causal=False):
    ref_kwargs = ref_kwargs or {}
    with torch.no_grad():
        expected, expected_w = ref(query, key, value, need_weights=True,
                                   average_attn_weights=False, **ref_kwargs)
        fused, none = ours(query, key, value, attn_mask=our_mask, is_causal=is_causal,
                           need_weights=False)
        explicit, weights = ours(query, key, value, attn_mask=our_mask, is_causal=is_causal,
                                 need_weights=True)
    assert none is None
    B, Nq, Nk = query.shape[0], query.shape[1], key.shape[1]
    assert fused.shape == (B, Nq, ours.q_proj.in_features)
    assert weights.shape == (B, ref.num_heads, Nq, Nk)
    torch.testing.assert_close(fused, expected, atol=ATOL, rtol=0, msg="fused vs nn.MHA")
    torch.testing.assert_close(explicit, expected, atol=ATOL, rtol=0, msg="explicit vs nn.MHA")
    torch.testing.assert_close(fused, explicit, atol=ATOL, rtol=0, msg="fused vs explicit")
    torch.testing.assert_close(weights, expected_w, atol=ATOL, rtol=0, msg="weights")
    return weights


def test_mha_constructor_signature_and_defaults():
    multihead = pytest.importorskip("attention_course.multihead")
    m = multihead.MultiHeadAttention(embed_dim=8, num_heads=2, dropout=0.0, bias=True,
                                     kdim=None, vdim=None)
    assert m.k_proj.in_features == 8 and m.v_proj.in_features == 8
    m2 = multihead.MultiHeadAttention(8, 2, kdim=5, vdim=3)
    assert (m2.q_proj.in_features, m2.k_proj.in_features, m2.v_proj.in_features) == (8, 5, 3)
    assert m2.out_proj.out_features == 8
    m3 = multihead.MultiHeadAttention(8, 2, bias=False)
    assert all(getattr(m3, n).bias is None for n in ["q_proj", "k_proj", "v_proj", "out_proj"])
    x = randn(2, 3, 8, seed=60)
    out = m.eval()(x, x, x)
    assert isinstance(out, tuple) and len(out) == 2
    assert out[0].shape == (2, 3, 8) and out[1] is None  # need_weights defaults to False


@pytest.mark.parametrize("bias", [True, False])
def test_mha_matches_torch_self_attention(bias):
    multihead = pytest.importorskip("attention_course.multihead")
    ours, ref = _make_pair(multihead, bias=bias, seed=1)
    x = randn(2, 4, 8, seed=61)
    weights = _compare_mha(ours, ref, x, x, x)
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, 2, 4), atol=ATOL, rtol=0)


def test_mha_matches_torch_cross_attention_with_kdim_vdim():
    multihead = pytest.importorskip("attention_course.multihead")
    ours, ref = _make_pair(multihead, embed_dim=8, num_heads=4, kdim=5, vdim=3, seed=2)
    query, key, value = randn(2, 3, 8, seed=62), randn(2, 6, 5, seed=63), randn(2, 6, 3, seed=64)
    _compare_mha(ours, ref, query, key, value)


def test_mha_kdim_vdim_without_bias():
    multihead = pytest.importorskip("attention_course.multihead")
    ours, ref = _make_pair(multihead, embed_dim=6, num_heads=3, bias=False, kdim=4, vdim=7,
                           seed=3)
    query, key, value = randn(2, 2, 6, seed=65), randn(2, 5, 4, seed=66), randn(2, 5, 7, seed=67)
    _compare_mha(ours, ref, query, key, value)


def _mask(shape, seed):
    mask = torch.rand(*shape, generator=gen(seed)) > 0.4
    mask[..., 0] = True  # every query may attend somewhere
    return mask


def test_mha_mask_shapes_match_torch():
    multihead = pytest.importorskip("attention_course.multihead")
    B, H, Nq, Nk, E = 2, 2, 3, 5, 8
    ours, ref = _make_pair(multihead, embed_dim=E, num_heads=H, kdim=6, vdim=6, seed=4)
    query, key, value = randn(B, Nq, E, seed=68), randn(B, Nk, 6, seed=69), randn(B, Nk, 6, seed=70)

    # (Nq, Nk): torch's bool attn_mask is True where NOT allowed
    m = _mask((Nq, Nk), 71)
    w = _compare_mha(ours, ref, query, key, value, m, {"attn_mask": ~m})
    assert bool((w[:, :, ~m] == 0).all())

    # (B, num_heads, Nq, Nk) -> torch's (B * num_heads, Nq, Nk)
    m = _mask((B, H, Nq, Nk), 72)
    _compare_mha(ours, ref, query, key, value, m, {"attn_mask": ~m.reshape(B * H, Nq, Nk)})

    # (B, 1, Nq, Nk), the same for every head
    m = _mask((B, 1, Nq, Nk), 73)
    _compare_mha(ours, ref, query, key, value, m,
                 {"attn_mask": ~m.expand(B, H, Nq, Nk).reshape(B * H, Nq, Nk)})

    # key padding (B, 1, 1, Nk) <-> torch's key_padding_mask (B, Nk), True where ignored
    lens = torch.tensor([2, 5])
    keep = torch.arange(Nk)[None, :] < lens[:, None]
    w = _compare_mha(ours, ref, query, key, value, keep[:, None, None, :],
                     {"key_padding_mask": ~keep})
    assert bool((w[0, :, :, 2:] == 0).all())


def test_mha_float_mask_is_added_like_torch():
    multihead = pytest.importorskip("attention_course.multihead")
    ours, ref = _make_pair(multihead, embed_dim=8, num_heads=2, seed=5)
    x, y = randn(2, 3, 8, seed=74), randn(2, 4, 8, seed=75)
    bias = randn(3, 4, seed=76)
    _compare_mha(ours, ref, x, y, y, bias, {"attn_mask": bias})


def test_mha_is_causal_matches_torch_with_causal_mask():
    multihead = pytest.importorskip("attention_course.multihead")
    ours, ref = _make_pair(multihead, embed_dim=8, num_heads=2, seed=6)
    x = randn(2, 5, 8, seed=77)
    future = ~torch.ones(5, 5, dtype=torch.bool).tril()
    w = _compare_mha(ours, ref, x, x, x, None, {"attn_mask": future}, is_causal=True)
    assert bool((w[:, :, future] == 0).all())


def test_mha_need_weights_false_takes_the_fused_kernel():
    multihead = pytest.importorskip("attention_course.multihead")
    from torch.profiler import ProfilerActivity, profile

    m = multihead.MultiHeadAttention(8, 2).eval()
    x = randn(2, 5, 8, seed=81)
    with torch.no_grad(), profile(activities=[ProfilerActivity.CPU]) as prof:
        m(x, x, x, need_weights=False)
    ops = {event.name for event in prof.events()}
    assert "aten::scaled_dot_product_attention" in ops, sorted(ops)


def test_mha_dropout_is_off_in_eval_mode():
    multihead = pytest.importorskip("attention_course.multihead")
    ours, ref = _make_pair(multihead, embed_dim=8, num_heads=2, seed=7, dropout=0.5)
    x, y = randn(2, 3, 8, seed=79), randn(2, 4, 8, seed=80)
    _compare_mha(ours, ref, x, y, y)


def test_mha_forward_keywords():
    multihead = pytest.importorskip("attention_course.multihead")
    m = multihead.MultiHeadAttention(8, 2).eval()
    x = randn(1, 3, 8, seed=78)
    with torch.no_grad():
        out, w = m(query=x, key=x, value=x, attn_mask=None, is_causal=False, need_weights=True)
    assert out.shape == (1, 3, 8) and w.shape == (1, 2, 3, 3)


# --------------------------------------------------------------------------------------
# transformer
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("num_positions,d_model", [(7, 8), (1, 2), (50, 16)])
def test_sinusoidal_positional_encoding_formula(num_positions, d_model):
    tr = pytest.importorskip("attention_course.transformer")
    pe = tr.sinusoidal_positional_encoding(num_positions, d_model)
    assert pe.shape == (num_positions, d_model)
    assert pe.is_floating_point()
    expected = torch.empty(num_positions, d_model, dtype=torch.float64)
    for p in range(num_positions):
        for i in range(d_model // 2):
            angle = p / 10000 ** (2 * i / d_model)
            expected[p, 2 * i] = math.sin(angle)
            expected[p, 2 * i + 1] = math.cos(angle)
    torch.testing.assert_close(pe.double(), expected, atol=ATOL, rtol=0)
    kw = tr.sinusoidal_positional_encoding(num_positions=num_positions, d_model=d_model)
    torch.testing.assert_close(kw, pe)


def test_positional_encoding_module_adds_pe_batch_first():
    tr = pytest.importorskip("attention_course.transformer")
    module = tr.PositionalEncoding(8, 20).eval()
    assert isinstance(module, nn.Module)
    module_kw = tr.PositionalEncoding(d_model=8, max_len=20, dropout=0.0).eval()
    x = randn(3, 6, 8, seed=80)
    pe = tr.sinusoidal_positional_encoding(6, 8)
    with torch.no_grad():
        out = module(x)
        out_kw = module_kw(x)
    assert out.shape == (3, 6, 8)
    torch.testing.assert_close(out, x + pe[None], atol=ATOL, rtol=0)
    torch.testing.assert_close(out_kw, out)
    dropped = tr.PositionalEncoding(8, 20, dropout=0.5).eval()
    with torch.no_grad():
        torch.testing.assert_close(dropped(x), x + pe[None], atol=ATOL, rtol=0)
    # a zero input shows the offsets: the same for every batch element, different per position
    with torch.no_grad():
        offsets = module(torch.zeros(2, 20, 8))
    torch.testing.assert_close(offsets[0], offsets[1])
    assert len({tuple(row.tolist()) for row in offsets[0]}) == 20


def _transformer(tr, pad_id=0, seed=0):
    torch.manual_seed(seed)
    model = tr.Transformer(13, 11, 16, 2, 2, 32, 0.0, pad_id).eval()
    return model


def test_transformer_signature_and_logits_shape():
    tr = pytest.importorskip("attention_course.transformer")
    torch.manual_seed(0)
    model = tr.Transformer(src_vocab_size=13, tgt_vocab_size=11, d_model=16, num_heads=2,
                           num_layers=2, d_ff=32, dropout=0.0, pad_id=0).eval()
    src = torch.randint(1, 13, (3, 5), generator=gen(90))
    tgt = torch.randint(1, 11, (3, 4), generator=gen(91))
    with torch.no_grad():
        logits = model(src, tgt)
        logits_kw = model(src_ids=src, tgt_ids=tgt)
    assert logits.shape == (3, 4, 11)
    assert logits.is_floating_point()
    torch.testing.assert_close(logits_kw, logits)
    positional = _transformer(tr)
    with torch.no_grad():
        assert positional(src, tgt).shape == (3, 4, 11)


@pytest.mark.parametrize("pad_id", [0, 3])
def test_transformer_ignores_source_padding(pad_id):
    tr = pytest.importorskip("attention_course.transformer")
    model = _transformer(tr, pad_id=pad_id, seed=1)
    real = [t for t in range(13) if t != pad_id]
    src_short = torch.tensor([[real[4], real[1], real[7]]])
    src_padded = torch.tensor([[real[4], real[1], real[7], pad_id, pad_id, pad_id]])
    tgt = torch.tensor([[1, 5, 2, 7]])
    with torch.no_grad():
        torch.testing.assert_close(model(src_padded, tgt), model(src_short, tgt),
                                   atol=ATOL, rtol=1e-4)
        # in a batch: each row's padding is its own
        src_batch = torch.tensor([[real[4], real[1], real[7], pad_id, pad_id, pad_id],
                                  [real[2], real[3], real[5], real[6], real[8], pad_id]])
        tgt_batch = torch.tensor([[1, 5, 2, 7], [4, 4, 9, 1]])
        batch = model(src_batch, tgt_batch)
        torch.testing.assert_close(batch[0], model(src_batch[:1, :3], tgt_batch[:1])[0],
                                   atol=ATOL, rtol=1e-4)
        torch.testing.assert_close(batch[1], model(src_batch[1:, :5], tgt_batch[1:])[0],
                                   atol=ATOL, rtol=1e-4)


def test_transformer_padding_comes_from_pad_id_not_zero():
    tr = pytest.importorskip("attention_course.transformer")
    model = _transformer(tr, pad_id=3, seed=2)
    src_short = torch.tensor([[5, 1, 7]])
    src_zeros = torch.tensor([[5, 1, 7, 0, 0]])  # 0 is a real token when pad_id=3
    tgt = torch.tensor([[1, 5, 2]])
    with torch.no_grad():
        assert not torch.allclose(model(src_zeros, tgt), model(src_short, tgt), atol=1e-4)


def test_transformer_decoder_is_causal():
    tr = pytest.importorskip("attention_course.transformer")
    model = _transformer(tr, seed=3)
    src = torch.tensor([[4, 2, 9, 1, 6], [3, 3, 8, 0, 0]])
    tgt = torch.tensor([[1, 5, 2, 7, 4, 6], [2, 8, 8, 1, 3, 9]])
    with torch.no_grad():
        base = model(src, tgt)
        for t in range(1, 6):
            changed = tgt.clone()
            changed[:, t] = (changed[:, t] % 10) + 1
            out = model(src, changed)
            torch.testing.assert_close(out[:, :t], base[:, :t], atol=ATOL, rtol=1e-4)
            assert not torch.allclose(out[:, t], base[:, t], atol=1e-4), \
                "a target token should affect its own position's logits"


# --------------------------------------------------------------------------------------
# Part II: bottom-right causal masks, grouped-query attention, positions, decoding
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("n,num_keys", [(1, 6), (3, 6), (4, 4), (5, 2)])
def test_causal_mask_alignments(n, num_keys):
    masking = pytest.importorskip("attention_course.masking")
    bottom_right = masking.causal_mask(n, num_keys, None, "bottom_right")
    expected = torch.tensor([[j <= i + num_keys - n for j in range(num_keys)] for i in range(n)])
    assert bottom_right.dtype == torch.bool and torch.equal(bottom_right, expected)
    top_left = torch.tensor([[j <= i for j in range(num_keys)] for i in range(n)])
    assert torch.equal(masking.causal_mask(n, num_keys), top_left)
    assert torch.equal(masking.causal_mask(n=n, num_keys=num_keys, device=None,
                                           align="top_left"), top_left)
    with pytest.raises(ValueError):
        masking.causal_mask(n, num_keys, align="diagonal")


@pytest.mark.parametrize("num_heads,num_kv_heads", [(4, 2), (4, 1), (6, 3), (4, 4)])
def test_grouped_query_attention_by_hand(num_heads, num_kv_heads):
    multihead = pytest.importorskip("attention_course.multihead")
    torch.manual_seed(0)
    embed_dim, head_dim = 4 * num_heads, 4
    m = multihead.MultiHeadAttention(embed_dim, num_heads, num_kv_heads=num_kv_heads).eval()
    for name in ["k_proj", "v_proj"]:
        layer = getattr(m, name)
        assert isinstance(layer, nn.Linear) and layer.out_features == num_kv_heads * head_dim
    with torch.no_grad():
        for p in m.parameters():
            p.copy_(torch.randn(p.shape) * 0.5)
    x, mem = randn(2, 3, embed_dim, seed=120), randn(2, 5, embed_dim, seed=121)
    with torch.no_grad():
        q = F.linear(x, m.q_proj.weight, m.q_proj.bias)
        k = F.linear(mem, m.k_proj.weight, m.k_proj.bias)
        v = F.linear(mem, m.v_proj.weight, m.v_proj.bias)
        group = num_heads // num_kv_heads
        heads, maps = [], []
        for h in range(num_heads):
            kv = h // group
            qh = q[..., h * head_dim:(h + 1) * head_dim]
            kh = k[..., kv * head_dim:(kv + 1) * head_dim]
            vh = v[..., kv * head_dim:(kv + 1) * head_dim]
            w = (qh @ kh.transpose(-2, -1) / math.sqrt(head_dim)).softmax(-1)
            heads.append(w @ vh)
            maps.append(w)
        expected = F.linear(torch.cat(heads, -1), m.out_proj.weight, m.out_proj.bias)
        fused, _ = m(x, mem, mem)
        explicit, weights = m(x, mem, mem, need_weights=True)
    torch.testing.assert_close(fused, expected, atol=ATOL, rtol=1e-5)
    torch.testing.assert_close(explicit, expected, atol=ATOL, rtol=1e-5)
    assert weights.shape == (2, num_heads, 3, 5)
    torch.testing.assert_close(weights, torch.stack(maps, 1), atol=ATOL, rtol=1e-5)


def test_rotary_embedding_properties():
    positions = pytest.importorskip("attention_course.positions")
    x = randn(2, 6, 8, seed=122).double()
    out = positions.rotary_embedding(x)
    assert out.shape == x.shape
    torch.testing.assert_close(out[:, 0], x[:, 0])  # position 0: identity
    torch.testing.assert_close(out.norm(dim=-1), x.norm(dim=-1))
    torch.testing.assert_close(positions.rotary_embedding(x, torch.arange(6)), out)
    q, k = randn(8, seed=123).double(), randn(8, seed=124).double()

    def score(p, s, base=10000.0):
        rq = positions.rotary_embedding(q[None], torch.tensor([p]), base)[0]
        rk = positions.rotary_embedding(k[None], positions=torch.tensor([s]), base=base)[0]
        return float(rq @ rk)

    for p, s, shift in [(3, 1, 5), (0, 7, 11), (100, 40, 1000)]:
        assert score(p, s) == pytest.approx(score(p + shift, s + shift), abs=1e-9)
        assert score(p, s, 50.0) == pytest.approx(score(p + shift, s + shift, 50.0), abs=1e-9)
    assert score(3, 1) != pytest.approx(score(1, 3), abs=1e-3)  # the sign of p - s matters
    # every feature pair turns by p * base^(-2i/d): cos of the angle between x and R_p x
    # is the average of cos(p theta_i) over the pairs when all pairs have equal norm
    ones = torch.ones(1, 8, dtype=torch.float64)
    turned = positions.rotary_embedding(ones, torch.tensor([2.0]))[0]
    thetas = [2.0 * 10000 ** (-2 * i / 8) for i in range(4)]
    assert float(turned @ ones[0]) == pytest.approx(2 * sum(math.cos(t) for t in thetas))
    with pytest.raises(ValueError):
        positions.rotary_embedding(randn(2, 3, 5, seed=125))


@pytest.mark.parametrize("num_heads,n,num_keys", [(8, 5, None), (4, 3, 3), (2, 4, 4)])
def test_alibi_bias(num_heads, n, num_keys):
    positions = pytest.importorskip("attention_course.positions")
    bias = (positions.alibi_bias(num_heads, n) if num_keys is None
            else positions.alibi_bias(num_heads, n, num_keys))
    assert bias.shape == (num_heads, n, n) and bias.is_floating_point()
    for h in range(num_heads):
        slope = 2 ** (-8 * (h + 1) / num_heads)
        for i in range(n):
            for j in range(i + 1):
                assert bias[h, i, j].item() == pytest.approx(-slope * (i - j), abs=1e-6)
    if num_heads == 8:
        torch.testing.assert_close(-bias[:, 1, 0], torch.tensor([2.0**-h for h in range(1, 9)]))


def _decode_model(seed: int):
    tr = pytest.importorskip("attention_course.transformer")
    torch.manual_seed(seed)
    return tr.Transformer(13, 11, 16, 2, 2, 32, 0.0, 0, max_len=12).eval()


def test_greedy_decode_same_ids_with_and_without_cache():
    model = _decode_model(4)
    src = torch.tensor([[4, 2, 9, 1, 6], [3, 3, 8, 0, 0]])
    with torch.no_grad():
        cached = model.greedy_decode(src, 1, 10)
        uncached = model.greedy_decode(src_ids=src, bos_id=1, eos_id=10, max_len=None,
                                       use_cache=False)
        assert torch.equal(cached, uncached)
        first = int(cached[1, 0])  # a row that ends at once, the other goes on
        early = model.greedy_decode(src, 1, first, max_len=6, use_cache=True)
        assert torch.equal(early, model.greedy_decode(src, 1, first, 6, False))
    assert early[1, 0] == first and early.shape[1] <= 6


def test_beam_search_signature_greedy_and_scores():
    decoding = pytest.importorskip("attention_course.decoding")
    model = _decode_model(5)
    src = torch.tensor([[4, 2, 9, 1, 6], [3, 3, 8, 0, 0]])
    with torch.no_grad():
        greedy = model.greedy_decode(src, 1, 10, max_len=7)
        ids, scores = decoding.beam_search(model, src, 1, 10, beam_size=1, max_len=7)
        assert torch.equal(ids, greedy)
        ids4, scores4 = decoding.beam_search(model=model, src_ids=src, bos_id=1, eos_id=10,
                                             beam_size=4, max_len=7, length_penalty=0.0)
        assert ids4.dim() == 2 and ids4.size(0) == 2 and scores4.shape == (2,)
        for out, score in [(ids, scores), (ids4, scores4)]:
            tgt_in = torch.cat([torch.ones(2, 1, dtype=torch.long), out[:, :-1]], dim=1)
            log_probs = model(src, tgt_in).log_softmax(-1)
            for b in range(2):
                row = out[b].tolist()
                n = row.index(10) + 1 if 10 in row else len(row)
                total = sum(float(log_probs[b, t, row[t]]) for t in range(n))
                assert float(score[b]) == pytest.approx(total, abs=1e-4)


# --------------------------------------------------------------------------------------
# channel_spatial
# --------------------------------------------------------------------------------------


def _maps(module: nn.Module, channels: int):
    """The two layers C -> hidden -> C of a channel MLP, whatever they are called."""
    layers = [m for m in module.modules()
              if isinstance(m, nn.Linear) or (isinstance(m, nn.Conv2d) and m.kernel_size == (1, 1))]

    def dims(m):
        if isinstance(m, nn.Linear):
            return m.in_features, m.out_features
        return m.in_channels, m.out_channels

    def as_fn(m):
        w = m.weight.reshape(m.weight.shape[0], -1)
        return lambda z: F.linear(z, w, m.bias)

    first = [m for m in layers if dims(m)[0] == channels]
    assert len(first) == 1, f"expected one layer C={channels} -> hidden, got {first}"
    hidden = dims(first[0])[1]
    second = [m for m in layers if dims(m) == (hidden, channels) and m is not first[0]]
    assert len(second) == 1, f"expected one layer hidden={hidden} -> C={channels}"
    return as_fn(first[0]), as_fn(second[0]), hidden


def _spatial_conv(module: nn.Module, kernel_size: int) -> nn.Conv2d:
    convs = [m for m in module.modules()
             if isinstance(m, nn.Conv2d) and m.in_channels == 2 and m.out_channels == 1]
    assert len(convs) == 1, "expected one conv from [mean; max] (2 channels) to 1 map"
    assert convs[0].kernel_size == (kernel_size, kernel_size)
    return convs[0]


def _randomize(module: nn.Module, seed: int) -> None:
    g = gen(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.5)


def _channel_weights_by_hand(module, channels, x):
    w1, w2, _ = _maps(module, channels)
    mlp = lambda z: w2(torch.relu(w1(z)))  # noqa: E731
    return torch.sigmoid(mlp(x.mean(dim=(2, 3))) + mlp(x.amax(dim=(2, 3))))[:, :, None, None]


def _spatial_weights_by_hand(module, kernel_size, x):
    conv = _spatial_conv(module, kernel_size)
    stacked = torch.cat([x.mean(dim=1, keepdim=True), x.amax(dim=1, keepdim=True)], dim=1)
    return torch.sigmoid(F.conv2d(stacked, conv.weight, conv.bias, padding=kernel_size // 2))


def _forward(module, x):
    with torch.no_grad():
        out = module(x)
    assert isinstance(out, torch.Tensor), "the call returns the re-weighted feature map"
    assert out.shape == x.shape
    return out


@pytest.mark.parametrize("channels,reduction", [(32, 4), (4, 16), (16, 16)])
def test_squeeze_excitation(channels, reduction):
    cs = pytest.importorskip("attention_course.channel_spatial")
    if reduction == 16:
        module = cs.SqueezeExcitation(channels)
    else:
        module = cs.SqueezeExcitation(channels, reduction)
    module.eval()
    _randomize(module, 100)
    x = randn(2, channels, 5, 6, seed=101)
    out = _forward(module, x)
    w1, w2, _ = _maps(module, channels)
    with torch.no_grad():
        s = torch.sigmoid(w2(torch.relu(w1(x.mean(dim=(2, 3))))))[:, :, None, None]
    torch.testing.assert_close(out, x * s, atol=ATOL, rtol=1e-5)
    _forward(cs.SqueezeExcitation(channels=channels, reduction=reduction), x)


@pytest.mark.parametrize("channels,reduction", [(32, 4), (4, 16)])
def test_channel_attention(channels, reduction):
    cs = pytest.importorskip("attention_course.channel_spatial")
    module = cs.ChannelAttention(channels, reduction).eval()
    _randomize(module, 102)
    x = randn(2, channels, 4, 5, seed=103)
    out = _forward(module, x)
    with torch.no_grad():
        expected = x * _channel_weights_by_hand(module, channels, x)
    torch.testing.assert_close(out, expected, atol=ATOL, rtol=1e-5)
    _forward(cs.ChannelAttention(channels=channels, reduction=reduction), x)
    _forward(cs.ChannelAttention(channels), x)


@pytest.mark.parametrize("kernel_size", [7, 3])
def test_spatial_attention(kernel_size):
    cs = pytest.importorskip("attention_course.channel_spatial")
    module = (cs.SpatialAttention() if kernel_size == 7 else cs.SpatialAttention(kernel_size))
    module.eval()
    _randomize(module, 104)
    x = randn(2, 3, 9, 8, seed=105)
    out = _forward(module, x)
    with torch.no_grad():
        expected = x * _spatial_weights_by_hand(module, kernel_size, x)
    torch.testing.assert_close(out, expected, atol=ATOL, rtol=1e-5)
    _forward(cs.SpatialAttention(kernel_size=kernel_size), x)


@pytest.mark.parametrize("channels,reduction,kernel_size", [(16, 4, 7), (4, 16, 3)])
def test_cbam_is_channel_then_spatial(channels, reduction, kernel_size):
    cs = pytest.importorskip("attention_course.channel_spatial")
    module = cs.CBAM(channels, reduction, kernel_size).eval()
    _randomize(module, 106)
    x = randn(2, channels, 7, 6, seed=107)
    out = _forward(module, x)
    with torch.no_grad():
        refined = x * _channel_weights_by_hand(module, channels, x)
        expected = refined * _spatial_weights_by_hand(module, kernel_size, refined)
    torch.testing.assert_close(out, expected, atol=ATOL, rtol=1e-5)
    _forward(cs.CBAM(channels=channels, reduction=reduction, kernel_size=kernel_size), x)


def test_cbam_defaults_with_few_channels():
    cs = pytest.importorskip("attention_course.channel_spatial")
    module = cs.CBAM(4).eval()
    _randomize(module, 108)
    x = randn(1, 4, 10, 10, seed=109)
    out = _forward(module, x)
    _spatial_conv(module, 7)  # default kernel_size=7
    with torch.no_grad():
        refined = x * _channel_weights_by_hand(module, 4, x)
        expected = refined * _spatial_weights_by_hand(module, 7, refined)
    torch.testing.assert_close(out, expected, atol=ATOL, rtol=1e-5)


# --------------------------------------------------------------------------------------
# gpt: GPTConfig, GPT, BPETokenizer
# --------------------------------------------------------------------------------------


def test_gpt_config_and_forward_shape():
    gpt = pytest.importorskip("attention_course.gpt")
    config = gpt.GPTConfig(37, 32, 4, 2, 2, 16)  # positional, in the contract's order
    assert (config.vocab_size, config.d_model, config.num_heads, config.num_kv_heads,
            config.num_layers, config.max_len) == (37, 32, 4, 2, 2, 16)
    torch.manual_seed(0)
    model = gpt.GPT(config).eval()
    ids = torch.randint(0, 37, (3, 9), generator=gen(1))
    with torch.no_grad():
        logits = model(ids)
    assert logits.shape == (3, 9, 37) and logits.dtype == torch.float32
    changed = ids.clone()
    changed[:, 6:] = (changed[:, 6:] + 5) % 37
    with torch.no_grad():
        assert torch.allclose(model(changed)[:, :6], logits[:, :6], atol=ATOL)


@pytest.mark.parametrize("num_kv_heads", [1, 2, 4])
def test_gpt_generate_same_ids_with_and_without_cache(num_kv_heads):
    gpt = pytest.importorskip("attention_course.gpt")
    torch.manual_seed(num_kv_heads)
    model = gpt.GPT(gpt.GPTConfig(vocab_size=29, d_model=32, num_heads=4,
                                  num_kv_heads=num_kv_heads, num_layers=2, max_len=40))
    ids = torch.randint(0, 29, (2, 4), generator=gen(2))
    cached = model.generate(ids, 15)
    uncached = model.generate(ids, max_new_tokens=15, temperature=0.0, use_cache=False)
    assert torch.equal(cached, uncached)
    assert cached.shape == (2, 19) and torch.equal(cached[:, :4], ids)
    with torch.no_grad():
        greedy = model(cached[:, :-1]).argmax(-1)[:, 3:]
    assert torch.equal(greedy, cached[:, 4:])


def test_bpe_tokenizer_round_trips_any_string():
    gpt = pytest.importorskip("attention_course.gpt")
    text = "def f(x):\n    return x * 2  # double\n" * 20 + "naïve café 注意力"
    tok = gpt.BPETokenizer.train(text, 300)
    for s in [text, "", " ", "unseen: Ωμέγα 🙂\r\n\t", "\x00\x7f", "\ud83d"]:
        ids = tok.encode(s)
        assert isinstance(ids, list) and all(isinstance(i, int) for i in ids)
        assert tok.decode(ids) == s
    assert len(tok.encode(text)) < len(text.encode())  # merges were learnt


# --------------------------------------------------------------------------------------
# grader CLI
# --------------------------------------------------------------------------------------


def _cli() -> list[str]:
    exe = Path(sys.executable).with_name("attention-course")
    if exe.exists():
        return [str(exe)]
    found = shutil.which("attention-course")
    if found is None:
        pytest.skip("the attention-course console script is not installed")
    return [found]


def _committed(pattern: str) -> list[Path]:
    """Committed files matching ``pattern`` (all present ones outside a git checkout)."""
    try:
        listed = subprocess.run(["git", "ls-files", "--", pattern], cwd=ROOT, check=True,
                                capture_output=True, text=True).stdout.split()
    except (OSError, subprocess.CalledProcessError):
        return sorted(ROOT.glob(pattern))
    folder = (ROOT / pattern).parent  # git's `*` also matches `/`: keep this folder only
    return sorted(ROOT / name for name in listed
                  if (ROOT / name).exists() and (ROOT / name).parent == folder)


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    pytest.importorskip("attention_course.grading")
    tmp = tmp_path_factory.mktemp("grade")
    # submissions arrive under arbitrary file names: give every copy a distinct one
    solutions, learners = [], []
    for source in _committed("exercises/solutions/*.ipynb"):
        solutions.append(tmp / f"solution_{source.name}")
        shutil.copyfile(source, solutions[-1])
    for source in _committed("exercises/*.ipynb"):
        learners.append(tmp / f"learner_{source.name}")
        shutil.copyfile(source, learners[-1])
    if not solutions:
        pytest.skip("no exercise solutions yet")
    broken = tmp / "corrupted.ipynb"
    broken.write_text('{"cells": [ {"cell_type": "code", "source": "print(1)"', encoding="utf-8")
    not_json = tmp / "garbage.ipynb"
    not_json.write_bytes(b"\x00\xff this is not a notebook \x00")
    # hostile: a full solution whose first cell kills the kernel before anything is defined
    hostile = tmp / "exits_early.ipynb"
    notebook = json.loads(solutions[0].read_text(encoding="utf-8"))
    notebook["cells"].insert(0, {"cell_type": "code", "execution_count": None, "id": "exit0",
                                 "metadata": {}, "outputs": [],
                                 "source": "import os\nos._exit(0)"})
    hostile.write_text(json.dumps(notebook), encoding="utf-8")
    paths = [broken, *solutions, not_json, hostile, *learners]
    out_dir = tmp / "out"
    cmd = [*_cli(), "grade", *map(str, paths), "--json", "--out", str(out_dir),
           "--timeout", "300", "--jobs", "2", "--student-from", "file"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1200, cwd=tmp)
    return {"proc": proc, "paths": paths, "solutions": solutions, "learners": learners,
            "broken": [broken, not_json, hostile], "out": out_dir}


def _records(graded):
    proc = graded["proc"]
    try:
        data = json.loads(proc.stdout)
    except json.JSONDecodeError as error:
        raise AssertionError(f"--json stdout is not JSON: {error}\nstdout: {proc.stdout[-2000:]}"
                             f"\nstderr: {proc.stderr[-2000:]}") from error
    assert isinstance(data, list)
    return data


def _record_for(records, path):
    matches = [r for r in records if r["file"] == str(path)]
    if len(matches) != 1:
        raise AssertionError(f"no record for {path} in {[r['file'] for r in records]}")
    return matches[0]


def test_cli_grade_json_lists_every_submission_and_exits_three(graded):
    """Exit status 3: graded, with some submissions refused (the corrupted file and the
    one that is not JSON); 0 would mean every file was a notebook, 1 a grader failure."""
    proc = graded["proc"]
    assert proc.returncode == 3, proc.stderr[-3000:]
    assert "2 submission(s) could not be graded" in proc.stderr, proc.stderr[-3000:]
    records = _records(graded)
    assert len(records) == len(graded["paths"])
    for path in graded["paths"]:  # one object per submission (in any order)
        record = _record_for(records, path)
        for key in ["student", "submission", "file", "exercise", "score", "max_score",
                    "questions"]:
            assert key in record, (key, record)
        assert isinstance(record["questions"], list)
        for q in record["questions"]:
            for key in ["id", "kind", "points", "max_points", "status", "message", "hint"]:
                assert key in q, (key, q)
            assert q["kind"] in {"implement", "derive", "predict", "debug", "experiment"}


def test_cli_grade_solutions_get_full_marks(graded):
    records = _records(graded)
    for path in graded["solutions"]:
        record = _record_for(records, path)
        assert record["max_score"] > 0
        assert record["score"] == record["max_score"], record
        assert record["questions"], record
        assert sum(q["points"] for q in record["questions"]) == record["score"]
        assert sum(q["max_points"] for q in record["questions"]) == record["max_score"]


def test_cli_grade_learner_versions_get_zero(graded):
    if not graded["learners"]:
        pytest.skip("no learner notebooks yet")
    records = _records(graded)
    for path in graded["learners"]:
        record = _record_for(records, path)
        assert record["score"] == 0, record
        assert record["max_score"] > 0
        assert all(q["points"] == 0 for q in record["questions"])


def test_cli_grade_broken_submission_scores_zero_with_reason(graded):
    records = _records(graded)
    for path in graded["broken"]:
        record = _record_for(records, path)
        assert record["score"] == 0, record
        text = json.dumps(record).lower()
        reasons = [str(v) for k, v in record.items()
                   if k not in {"student", "submission", "file", "exercise", "score",
                                "max_score", "questions"} and isinstance(v, str) and v.strip()]
        reasons += [q["message"] for q in record["questions"] if q.get("message")]
        assert reasons, f"no reason given for {path.name}: {record}"
        assert record["max_score"] >= 0, text


def test_cli_grade_out_dir_written(graded):
    out = graded["out"]
    assert out.is_dir()
    assert (out / "gradebook.csv").is_file() and (out / "totals.csv").is_file()
    assert len(list(out.glob("*/*.json"))) >= len(graded["paths"]), "one JSON per submission"
