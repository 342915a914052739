"""Tests for attention_course.multihead: equal to torch.nn.MultiheadAttention, two paths agree."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from module_helpers import copy_attention, seeded
from torch import nn

from attention_course.decoding import KVCache
from attention_course.masking import causal_mask, padding_mask
from attention_course.multihead import MultiHeadAttention, merge_heads, split_heads
from attention_course.positions import ALiBi, Rotary

PROPERTY = settings(max_examples=30, deadline=None)


def _pair(embed_dim: int, num_heads: int, kdim=None, vdim=None, bias=True, seed=0):
    """Our module and torch's, with the same weights (torch's copied from ours)."""
    torch.manual_seed(seed)
    ours = MultiHeadAttention(embed_dim, num_heads, bias=bias, kdim=kdim, vdim=vdim)
    ref = nn.MultiheadAttention(embed_dim, num_heads, bias=bias, kdim=kdim, vdim=vdim,
                                batch_first=True)
    copy_attention(ours, ref)
    return ours, ref


@pytest.mark.parametrize("need_weights", [False, True])
@pytest.mark.parametrize("bias", [True, False])
def test_self_attention_equals_torch(need_weights, bias):
    ours, ref = _pair(32, 4, bias=bias)
    x = torch.randn(3, 7, 32, generator=seeded(0))
    out, weights = ours(x, x, x, need_weights=need_weights)
    ref_out, ref_weights = ref(x, x, x, need_weights=True, average_attn_weights=False)
    torch.testing.assert_close(out, ref_out, rtol=1e-5, atol=1e-5)
    if need_weights:
        assert weights.shape == (3, 4, 7, 7)
        torch.testing.assert_close(weights, ref_weights, rtol=1e-5, atol=1e-6)
    else:
        assert weights is None


@pytest.mark.parametrize("need_weights", [False, True])
def test_padding_mask_equals_torch_key_padding_mask(need_weights):
    ours, ref = _pair(24, 3)
    x = torch.randn(3, 6, 24, generator=seeded(1))
    real = padding_mask(torch.tensor([6, 2, 4]), 6)  # True on real tokens (our convention)
    out, weights = ours(x, x, x, attn_mask=real[:, None, None, :], need_weights=need_weights)
    # torch's key_padding_mask is True where a key is IGNORED: the opposite meaning.
    ref_out, ref_weights = ref(x, x, x, key_padding_mask=~real, average_attn_weights=False)
    torch.testing.assert_close(out, ref_out, rtol=1e-5, atol=1e-5)
    if need_weights:
        torch.testing.assert_close(weights, ref_weights, rtol=1e-5, atol=1e-6)
        assert torch.all(weights[1, :, :, 2:] == 0)


@pytest.mark.parametrize("need_weights", [False, True])
@pytest.mark.parametrize("as_mask", [False, True])
def test_causal_equals_torch(need_weights, as_mask):
    ours, ref = _pair(16, 2)
    x = torch.randn(2, 5, 16, generator=seeded(2))
    if as_mask:
        out, weights = ours(x, x, x, attn_mask=causal_mask(5), need_weights=need_weights)
    else:
        out, weights = ours(x, x, x, is_causal=True, need_weights=need_weights)
    # torch's bool attn_mask is True where attention is NOT allowed.
    ref_out, ref_weights = ref(x, x, x, attn_mask=~causal_mask(5), average_attn_weights=False)
    torch.testing.assert_close(out, ref_out, rtol=1e-5, atol=1e-5)
    if need_weights:
        torch.testing.assert_close(weights, ref_weights, rtol=1e-5, atol=1e-6)
        assert torch.all(weights.triu(1) == 0)


def test_causal_and_padding_together_equal_torch():
    ours, ref = _pair(16, 4)
    x = torch.randn(2, 5, 16, generator=seeded(3))
    real = padding_mask(torch.tensor([5, 3]), 5)
    out, weights = ours(x, x, x, attn_mask=real[:, None, None, :], is_causal=True,
                        need_weights=True)
    fused, _ = ours(x, x, x, attn_mask=real[:, None, None, :], is_causal=True)
    ref_out, _ = ref(x, x, x, attn_mask=~causal_mask(5), key_padding_mask=~real)
    torch.testing.assert_close(out, ref_out, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(fused, ref_out, rtol=1e-5, atol=1e-5)
    assert torch.all(weights.triu(1) == 0) and torch.all(weights[1, :, :, 3:] == 0)


def test_float_mask_equals_torch():
    ours, ref = _pair(16, 2)
    x = torch.randn(2, 4, 16, generator=seeded(4))
    bias = torch.randn(4, 4, generator=seeded(5))
    for need in (False, True):
        out, _ = ours(x, x, x, attn_mask=bias, need_weights=need)
        torch.testing.assert_close(out, ref(x, x, x, attn_mask=bias)[0], rtol=1e-5, atol=1e-5)


def test_per_head_mask_broadcasts_over_batch():
    ours, _ = _pair(16, 2)
    x = torch.randn(3, 4, 16, generator=seeded(6))
    per_head = torch.stack([causal_mask(4), torch.ones(4, 4, dtype=torch.bool)])[None]
    _, weights = ours(x, x, x, attn_mask=per_head, need_weights=True)
    assert torch.all(weights[:, 0].triu(1) == 0) and torch.all(weights[:, 1] > 0)


@pytest.mark.parametrize("need_weights", [False, True])
def test_cross_attention_with_other_dims_equals_torch(need_weights):
    ours, ref = _pair(24, 4, kdim=10, vdim=7)
    query = torch.randn(2, 3, 24, generator=seeded(7))
    key = torch.randn(2, 5, 10, generator=seeded(8))
    value = torch.randn(2, 5, 7, generator=seeded(9))
    out, weights = ours(query, key, value, need_weights=need_weights)
    ref_out, ref_weights = ref(query, key, value, average_attn_weights=False)
    assert out.shape == (2, 3, 24)
    torch.testing.assert_close(out, ref_out, rtol=1e-5, atol=1e-5)
    if need_weights:
        assert weights.shape == (2, 4, 3, 5)
        torch.testing.assert_close(weights, ref_weights, rtol=1e-5, atol=1e-6)


def test_gradients_equal_torch():
    ours, ref = _pair(16, 4)
    x1 = torch.randn(2, 6, 16, generator=seeded(10), requires_grad=True)
    x2 = x1.detach().clone().requires_grad_(True)
    real = padding_mask(torch.tensor([6, 4]), 6)
    ours(x1, x1, x1, attn_mask=real[:, None, None, :])[0].square().sum().backward()
    ref(x2, x2, x2, key_padding_mask=~real, need_weights=False)[0].square().sum().backward()
    torch.testing.assert_close(x1.grad, x2.grad, rtol=1e-4, atol=1e-5)
    q_grad = ref.in_proj_weight.grad[:16]
    torch.testing.assert_close(ours.q_proj.weight.grad, q_grad, rtol=1e-4, atol=1e-5)


@PROPERTY
@given(batch=st.integers(1, 3), nq=st.integers(1, 6), nk=st.integers(1, 6),
       heads=st.sampled_from([1, 2, 4]), head_dim=st.integers(1, 5), causal=st.booleans(),
       masked=st.booleans(), self_attention=st.booleans(), seed=st.integers(0, 1000))
def test_explicit_and_fused_paths_agree(batch, nq, nk, heads, head_dim, causal, masked,
                                        self_attention, seed):
    if self_attention:
        nk = nq
    embed = heads * head_dim
    torch.manual_seed(seed)
    module = MultiHeadAttention(embed, heads)
    query = torch.randn(batch, nq, embed)
    key = query if self_attention else torch.randn(batch, nk, embed)
    mask = None
    if masked:  # every query keeps key 0, so no row is fully masked
        lens = torch.randint(1, nk + 1, (batch,))
        mask = padding_mask(lens, nk)[:, None, None, :]
    explicit, weights = module(query, key, key, attn_mask=mask, is_causal=causal,
                               need_weights=True)
    fused, _ = module(query, key, key, attn_mask=mask, is_causal=causal)
    torch.testing.assert_close(explicit, fused, rtol=1e-5, atol=1e-5)
    assert weights.shape == (batch, heads, nq, nk)
    torch.testing.assert_close(weights.sum(-1), torch.ones(batch, heads, nq))


def test_unbatched_input():
    module, _ = _pair(8, 2)
    x = torch.randn(5, 8, generator=seeded(11))
    out, weights = module(x, x, x, need_weights=True)
    assert out.shape == (5, 8) and weights.shape == (2, 5, 5)
    torch.testing.assert_close(out, module(x[None], x[None], x[None])[0][0])


def test_split_and_merge_heads_are_inverse():
    x = torch.randn(2, 5, 12, generator=seeded(12))
    heads = split_heads(x, 3)
    assert heads.shape == (2, 3, 5, 4)
    torch.testing.assert_close(heads[:, 1], x[..., 4:8])  # head 1 holds features 4..7
    torch.testing.assert_close(merge_heads(heads), x)


def test_heads_are_independent_slices():
    """Each head's output depends only on its own slice of the projected values."""
    module, _ = _pair(8, 2)
    x = torch.randn(1, 4, 8, generator=seeded(13))
    with torch.no_grad():
        module.out_proj.weight.copy_(torch.eye(8))
        module.out_proj.bias.zero_()
        _, weights = module(x, x, x, need_weights=True)
        out, _ = module(x, x, x)
        values = module.v_proj(x)
    torch.testing.assert_close(out[..., :4], weights[:, 0] @ values[..., :4])
    torch.testing.assert_close(out[..., 4:], weights[:, 1] @ values[..., 4:])


def test_dropout_only_in_training():
    module = MultiHeadAttention(8, 2, dropout=0.5)
    x = torch.randn(2, 6, 8, generator=seeded(14))
    module.eval()
    a, b = module(x, x, x)[0], module(x, x, x)[0]
    torch.testing.assert_close(a, b)
    module.train()
    torch.manual_seed(0)
    c = module(x, x, x)[0]
    assert not torch.allclose(a, c)


def test_submodules_are_linear_layers():
    module = MultiHeadAttention(12, 3, kdim=5, vdim=7, bias=False)
    for name, shape in [("q_proj", (12, 12)), ("k_proj", (12, 5)), ("v_proj", (12, 7)),
                        ("out_proj", (12, 12))]:
        layer = getattr(module, name)
        assert isinstance(layer, nn.Linear) and layer.weight.shape == shape and layer.bias is None


# ---------------------------------------------------------------- errors


def test_embed_dim_not_divisible_by_heads():
    with pytest.raises(ValueError, match="embed_dim=10 is not divisible by num_heads=3"):
        MultiHeadAttention(10, 3)


@pytest.mark.parametrize("shapes, match", [
    (((2, 4, 7), (2, 4, 8), (2, 4, 8)), "query's last dimension"),
    (((2, 4, 8), (2, 4, 5), (2, 4, 8)), "kdim"),
    (((2, 4, 8), (2, 4, 8), (2, 3, 8)), "same batch size and length"),
    (((2, 4, 8), (3, 4, 8), (3, 4, 8)), "same batch size"),
    (((2, 4, 8), (2, 4, 8), (4, 8)), r"\(B, N, dim\)"),
])
def test_mismatched_shapes_raise(shapes, match):
    module = MultiHeadAttention(8, 2)
    q, k, v = (torch.zeros(s) for s in shapes)
    with pytest.raises(ValueError, match=match):
        module(q, k, v)


def test_bad_masks_raise():
    module = MultiHeadAttention(8, 2)
    x = torch.zeros(2, 4, 8)
    with pytest.raises(ValueError, match="not broadcastable"):
        module(x, x, x, attn_mask=torch.ones(3, 4, dtype=torch.bool))
    with pytest.raises(ValueError, match="not broadcastable"):
        module(x, x, x, attn_mask=torch.ones(1, 1, 1, 4, 4, dtype=torch.bool))
    with pytest.raises(ValueError, match="bool"):
        module(x, x, x, attn_mask=torch.ones(4, 4, dtype=torch.long))


# ---------------------------------------------------------------- GPU


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_cuda_low_precision_paths_agree(dtype):
    torch.manual_seed(0)
    module = MultiHeadAttention(64, 4).cuda().to(dtype)
    x = torch.randn(2, 33, 64, device="cuda", dtype=dtype)
    real = padding_mask(torch.tensor([33, 20]), 33).cuda()[:, None, None, :]
    fused, _ = module(x, x, x, attn_mask=real, is_causal=True)
    explicit, weights = module(x, x, x, attn_mask=real, is_causal=True, need_weights=True)
    assert fused.dtype == dtype and weights.device.type == "cuda"
    torch.testing.assert_close(fused.float(), explicit.float(), rtol=2e-2, atol=2e-2)
    cpu = module.float().cpu()
    torch.testing.assert_close(fused.float().cpu(),
                               cpu(x.float().cpu(), x.float().cpu(), x.float().cpu(),
                                   attn_mask=real.cpu(), is_causal=True)[0],
                               rtol=5e-2, atol=5e-2)


# ---------------------------------------------------------------- grouped-query attention


def _repeated_kv(gqa: MultiHeadAttention) -> MultiHeadAttention:
    """An ordinary MHA whose key/value weights are the GQA ones repeated for each group."""
    bias = gqa.q_proj.bias is not None
    mha = MultiHeadAttention(gqa.embed_dim, gqa.num_heads, bias=bias, kdim=gqa.kdim,
                             vdim=gqa.vdim)
    group = gqa.num_heads // gqa.num_kv_heads
    state = dict(gqa.state_dict())
    for name in ["k_proj.weight", "v_proj.weight"] + (["k_proj.bias", "v_proj.bias"] * bias):
        per_head = state[name].unflatten(0, (gqa.num_kv_heads, gqa.head_dim))
        state[name] = per_head.repeat_interleave(group, dim=0).flatten(0, 1)
    mha.load_state_dict(state)
    return mha


def test_gqa_with_as_many_kv_heads_is_ordinary_mha():
    torch.manual_seed(0)
    gqa = MultiHeadAttention(16, 4, num_kv_heads=4)
    mha = MultiHeadAttention(16, 4)
    mha.load_state_dict(gqa.state_dict())
    x = torch.randn(2, 5, 16, generator=seeded(20))
    for need in (False, True):
        out, weights = gqa(x, x, x, is_causal=True, need_weights=need)
        expected, expected_w = mha(x, x, x, is_causal=True, need_weights=need)
        torch.testing.assert_close(out, expected)
        if need:
            torch.testing.assert_close(weights, expected_w)


@PROPERTY
@given(seed=st.integers(0, 1000), kv_heads=st.sampled_from([1, 2, 4]), causal=st.booleans(),
       masked=st.booleans(), self_attention=st.booleans(), nq=st.integers(1, 5),
       nk=st.integers(1, 5))
def test_gqa_equals_mha_with_repeated_kv_weights(seed, kv_heads, causal, masked, self_attention,
                                                 nq, nk):
    torch.manual_seed(seed)
    gqa = MultiHeadAttention(16, 8, num_kv_heads=kv_heads, kdim=None if self_attention else 6,
                             vdim=None if self_attention else 5)
    mha = _repeated_kv(gqa)
    query = torch.randn(2, nq, 16)
    key, value = (query, query) if self_attention else (torch.randn(2, nk, 6),
                                                        torch.randn(2, nk, 5))
    nk = key.size(1)
    mask = padding_mask(torch.randint(1, nk + 1, (2,)), nk)[:, None, None, :] if masked else None
    expected, expected_w = mha(query, key, value, attn_mask=mask, is_causal=causal,
                               need_weights=True)
    fused, _ = gqa(query, key, value, attn_mask=mask, is_causal=causal)
    explicit, weights = gqa(query, key, value, attn_mask=mask, is_causal=causal,
                            need_weights=True)
    torch.testing.assert_close(fused, expected, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(explicit, expected, rtol=1e-5, atol=1e-5)
    assert weights.shape == (2, 8, nq, nk)  # per query head
    torch.testing.assert_close(weights, expected_w, rtol=1e-5, atol=1e-6)


def test_gqa_query_heads_share_kv_heads_in_groups():
    torch.manual_seed(1)
    module = MultiHeadAttention(16, 4, num_kv_heads=2)  # heads 0, 1 -> kv 0; heads 2, 3 -> kv 1
    assert module.k_proj.weight.shape == (8, 16) and module.v_proj.weight.shape == (8, 16)
    with torch.no_grad():
        module.q_proj.weight.copy_(torch.eye(16))
        module.q_proj.bias.zero_()
    x = torch.randn(1, 3, 16, generator=seeded(21))
    _, weights = module(x, x, x, need_weights=True)
    keys = module.k_proj(x).view(1, 3, 2, 4).transpose(1, 2)  # (1, kv heads, 3, 4)
    queries = x.view(1, 3, 4, 4).transpose(1, 2)
    for h, kv in [(0, 0), (1, 0), (2, 1), (3, 1)]:
        expected = (queries[:, h] @ keys[:, kv].transpose(-2, -1) / 2).softmax(-1)
        torch.testing.assert_close(weights[:, h], expected)


def test_multi_query_attention_has_one_kv_head():
    module = MultiHeadAttention(32, 8, num_kv_heads=1, bias=False)
    assert module.k_proj.weight.shape == (4, 32) and module.v_proj.weight.shape == (4, 32)
    x = torch.randn(2, 5, 32, generator=seeded(22))
    torch.testing.assert_close(module(x, x, x)[0], _repeated_kv(module)(x, x, x)[0],
                               rtol=1e-5, atol=1e-5)


def test_gqa_without_the_kernels_enable_gqa(monkeypatch):
    """Older PyTorch (< 2.5) has no enable_gqa: the heads are then repeated by hand."""
    import attention_course.multihead as multihead

    torch.manual_seed(2)
    module = MultiHeadAttention(16, 4, num_kv_heads=2)
    x = torch.randn(2, 5, 16, generator=seeded(23))
    expected = module(x, x, x, is_causal=True)[0]
    monkeypatch.setattr(multihead, "_SDPA_GQA", False)
    torch.testing.assert_close(module(x, x, x, is_causal=True)[0], expected)


def test_gqa_takes_the_fused_kernel():
    from torch.profiler import ProfilerActivity, profile

    module = MultiHeadAttention(16, 4, num_kv_heads=2).eval()
    x = torch.randn(2, 5, 16, generator=seeded(24))
    with torch.no_grad(), profile(activities=[ProfilerActivity.CPU]) as prof:
        module(x, x, x)
    assert "aten::scaled_dot_product_attention" in {event.name for event in prof.events()}


@pytest.mark.parametrize("kv_heads", [0, 3, -2])
def test_bad_num_kv_heads_raise(kv_heads):
    with pytest.raises(ValueError, match=rf"divide num_heads=4.*num_kv_heads={kv_heads}"):
        MultiHeadAttention(16, 4, num_kv_heads=kv_heads)


# ---------------------------------------------------------------- KV cache


@pytest.mark.parametrize("positional", [None, "rope", "alibi"])
@pytest.mark.parametrize("kv_heads", [None, 1])
@pytest.mark.parametrize("need_weights", [False, True])
def test_cached_steps_equal_full_causal_attention(positional, kv_heads, need_weights):
    """Feeding 3 tokens, then 1, then 2, through a cache gives the full causal result."""
    torch.manual_seed(3)
    positions = {None: None, "rope": Rotary(), "alibi": ALiBi()}[positional]
    module = MultiHeadAttention(16, 4, num_kv_heads=kv_heads, positions=positions)
    x = torch.randn(2, 6, 16, generator=seeded(25))
    expected, expected_w = module(x, x, x, is_causal=True, need_weights=True)
    cache = KVCache()
    outputs, start = [], 0
    for stop in (3, 4, 6):
        chunk = x[:, start:stop]
        out, weights = module(chunk, chunk, chunk, is_causal=True, need_weights=need_weights,
                              cache=cache)
        outputs.append(out)
        assert len(cache) == stop
        assert cache.keys.shape == (2, kv_heads or 4, stop, 4)
        if need_weights:  # the new queries against every cached key, bottom-right aligned
            torch.testing.assert_close(weights, expected_w[:, :, start:stop, :stop],
                                       rtol=1e-5, atol=1e-6)
        start = stop
    torch.testing.assert_close(torch.cat(outputs, dim=1), expected, rtol=1e-5, atol=1e-5)


def test_cache_with_a_padding_mask_over_every_key():
    torch.manual_seed(4)
    module = MultiHeadAttention(8, 2)
    x = torch.randn(2, 4, 8, generator=seeded(26))
    real = padding_mask(torch.tensor([4, 2]), 4)[:, None, None, :]
    expected, _ = module(x, x, x, attn_mask=real, is_causal=True)
    cache = KVCache()
    steps = [module(x[:, t:t + 1], x[:, t:t + 1], x[:, t:t + 1], attn_mask=real[..., :t + 1],
                    is_causal=True, cache=cache)[0] for t in range(4)]
    torch.testing.assert_close(torch.cat(steps, dim=1), expected, rtol=1e-5, atol=1e-5)


def test_static_cache_projects_the_memory_once():
    torch.manual_seed(5)
    module = MultiHeadAttention(8, 2, kdim=6, vdim=6)
    memory = torch.randn(2, 5, 6, generator=seeded(27))
    y = torch.randn(2, 3, 8, generator=seeded(28))
    expected, _ = module(y, memory, memory)
    cache = KVCache(static=True)
    first, _ = module(y[:, :1], memory, memory, cache=cache)
    with torch.no_grad():  # the memory's keys and values now come from the cache
        module.k_proj.weight.zero_()
        module.v_proj.weight.zero_()
    rest, weights = module(y[:, 1:], memory, memory, cache=cache, need_weights=True)
    torch.testing.assert_close(torch.cat([first, rest], dim=1), expected)
    assert len(cache) == 5 and weights.shape == (2, 2, 2, 5)


def test_cache_errors():
    module = MultiHeadAttention(8, 2)
    x = torch.randn(1, 2, 8)
    with pytest.raises(ValueError, match="static cache"):
        module(x, x, x, is_causal=True, cache=KVCache(static=True))
    cache = KVCache()
    module(x, x, x, cache=cache)
    with pytest.raises(ValueError, match=r"do not continue the cached.*\(1, 2, 2, 4\)"):
        module(torch.randn(3, 1, 8), torch.randn(3, 1, 8), torch.randn(3, 1, 8), cache=cache)
    static = KVCache(static=True)
    static.update(torch.zeros(1, 2, 3, 4), torch.zeros(1, 2, 3, 4))
    with pytest.raises(ValueError, match="filled once"):
        static.update(torch.zeros(1, 2, 3, 4), torch.zeros(1, 2, 3, 4))


# --- the previous-and-partner task of section 5.4 ------------------------------


def test_lookup_batch_pairs_every_colour_and_sets_the_targets():
    from attention_course.experiments.multihead import IGNORE, lookup_batch

    batch = lookup_batch(50, length=10, num_values=5, generator=seeded(0))
    assert all(t.shape == (50, 10) for t in batch)
    counts = torch.stack([torch.bincount(row, minlength=5) for row in batch.colours])
    assert (counts == 2).all()  # five colours, each exactly twice
    rows = torch.arange(50)[:, None]
    positions = torch.arange(10)
    assert (batch.partner != positions).all()
    assert (batch.colours[rows, batch.partner] == batch.colours).all()
    assert (batch.partner_value == batch.values[rows, batch.partner]).all()
    assert (batch.previous[:, 0] == IGNORE).all()
    assert (batch.previous[:, 1:] == batch.values[:, :-1]).all()
    assert batch.values.max() < 5
    again = lookup_batch(50, length=10, num_values=5, generator=seeded(0))
    assert all(torch.equal(a, b) for a, b in zip(batch, again, strict=True))


def test_lookup_batch_rejects_bad_sizes():
    from attention_course.experiments.multihead import lookup_batch

    with pytest.raises(ValueError, match="even length"):
        lookup_batch(4, length=7)
    with pytest.raises(ValueError, match="num_values"):
        lookup_batch(4, num_values=1)


def test_lookup_model_shapes_and_input_check():
    from attention_course.experiments.multihead import LookupModel, lookup_batch, lookup_loss

    torch.manual_seed(0)
    model = LookupModel(num_heads=4, embed_dim=16, length=8, num_values=6)
    batch = lookup_batch(3, length=8, num_values=6, generator=seeded(1))
    previous, partner, weights = model(batch.colours, batch.values, need_weights=True)
    assert previous.shape == partner.shape == (3, 8, 6)
    assert weights.shape == (3, 4, 8, 8)
    assert model(batch.colours, batch.values)[2] is None
    loss = lookup_loss(model, batch)
    loss.backward()
    assert loss.item() > 0 and model.position.grad is not None
    with pytest.raises(ValueError, match=r"\(B, 8\)"):
        model(batch.colours[:, :6], batch.values[:, :6])


def test_head_diversity_is_zero_for_equal_heads_and_one_for_disjoint_ones():
    from attention_course.experiments.multihead import head_diversity

    same = torch.rand(2, 1, 5, 5).softmax(-1).expand(2, 3, 5, 5)
    assert head_diversity(same).item() == pytest.approx(0.0, abs=1e-7)
    eye = torch.eye(5)
    disjoint = torch.stack([eye, eye.roll(1, 1), eye.roll(2, 1)])[None]
    assert head_diversity(disjoint).item() == pytest.approx(1.0)
    uniform = torch.full((5, 5), 0.2)
    # one-hot against uniform: 0.5 * (0.8 + 4 * 0.2) = 0.8 for that pair only
    mixed = torch.stack([eye, uniform])[None]
    assert head_diversity(mixed).item() == pytest.approx(0.8)
    with pytest.raises(ValueError, match="h >= 2"):
        head_diversity(torch.rand(1, 1, 4, 4))


def test_head_roles_measure_weight_on_the_previous_token_and_the_partner():
    from attention_course.experiments.multihead import head_roles, lookup_batch

    batch = lookup_batch(4, length=6, generator=seeded(2))
    n = 6
    previous_map = torch.eye(n).roll(-1, 1).expand(4, n, n)   # row i -> key i - 1
    partner_map = F.one_hot(batch.partner, n).float()
    weights = torch.stack([previous_map, partner_map], 1)      # (4, 2, 6, 6)
    roles = head_roles(weights, batch.partner)
    assert roles.shape == (2, 2)
    assert roles[0, 0].item() == pytest.approx(1.0)
    assert roles[1, 1].item() == pytest.approx(1.0)
    with pytest.raises(ValueError, match="partner"):
        head_roles(weights, batch.partner[:, :5])


def test_train_lookup_learns_and_records_validation():
    from attention_course.experiments.multihead import head_count_experiment, lookup_batch

    validation = lookup_batch(64, length=6, num_values=4, generator=seeded(3))
    threads = torch.get_num_threads()
    runs = head_count_experiment([2], [0], validation, steps=120, eval_every=40,
                                 embed_dim=16, num_values=4, progress=False,
                                 device="cpu")
    (run,) = runs
    assert torch.get_num_threads() == threads  # restored after training
    assert run.num_heads == 2 and run.seed == 0 and len(run.losses) == 120
    assert run.steps == [0, 40, 80, 120] and run.accuracy.shape == (4, 2)
    assert run.accuracy[-1].min() > run.accuracy[0].max()
    assert sum(run.losses[-10:]) < sum(run.losses[:10])
    changed = [not torch.equal(a, b) for a, b in
               zip(run.untrained.parameters(), run.trained.parameters(),
                   strict=True)]
    assert all(changed)
    with pytest.raises(ValueError, match="num_values"):
        head_count_experiment([2], [0], validation, steps=1, num_values=3,
                              progress=False)
