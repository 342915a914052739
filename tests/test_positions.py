"""Tests for attention_course.positions: RoPE, ALiBi, learned tables, and their use in
MultiHeadAttention and the Transformer."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from module_helpers import seeded

from attention_course.experiments.positions import (
    IGNORE,
    CausalTransformer,
    ExtrapolationSetup,
    accuracy_by_position,
    label_loss,
    latest_value_task,
    length_extrapolation,
    train_scheme,
)
from attention_course.masking import causal_mask, padding_mask
from attention_course.multihead import MultiHeadAttention
from attention_course.positions import (
    ALiBi,
    LearnedPositionalEmbedding,
    RelativePositionBias,
    Rotary,
    alibi_bias,
    alibi_slopes,
    relative_distances,
    relative_position_bucket,
    rotary_embedding,
)
from attention_course.transformer import Transformer, translation_loss

IN_ATTENTION = {"rope": Rotary(), "alibi": ALiBi()}

PROPERTY = settings(max_examples=30, deadline=None)


def _rotate_by_hand(x: torch.Tensor, p: float, base: float = 10000.0) -> torch.Tensor:
    """One vector ``x (d,)`` at position ``p``, pair by pair, in float64."""
    d = x.numel()
    out = torch.empty(d, dtype=torch.float64)
    for i in range(d // 2):
        angle = p * base ** (-2 * i / d)
        a, b = float(x[2 * i]), float(x[2 * i + 1])
        out[2 * i] = a * math.cos(angle) - b * math.sin(angle)
        out[2 * i + 1] = a * math.sin(angle) + b * math.cos(angle)
    return out


# ---------------------------------------------------------------- rotary embedding


def test_rotary_matches_the_formula_pair_by_pair():
    x = torch.randn(2, 5, 8, generator=seeded(0))
    out = rotary_embedding(x)
    assert out.shape == x.shape and out.dtype == x.dtype
    for b in range(2):
        for p in range(5):
            torch.testing.assert_close(out[b, p].double(), _rotate_by_hand(x[b, p], p),
                                       atol=1e-5, rtol=0)
    out_base = rotary_embedding(x, base=100.0)
    torch.testing.assert_close(out_base[1, 3].double(), _rotate_by_hand(x[1, 3], 3, 100.0),
                               atol=1e-5, rtol=0)


def test_rotary_equals_the_complex_number_view():
    """Pair i is the complex number x[2i] + 1j x[2i+1], multiplied by exp(1j p theta_i)."""
    x = torch.randn(3, 7, 10, generator=seeded(1), dtype=torch.float64)
    positions = torch.tensor([0, 3, 1, 9, 100, 2, 7])
    theta = 10000.0 ** (-torch.arange(0, 10, 2, dtype=torch.float64) / 10)
    z = torch.view_as_complex(x.reshape(3, 7, 5, 2).contiguous())
    turned = z * torch.polar(torch.ones(7, 5, dtype=torch.float64), positions[:, None] * theta)
    expected = torch.view_as_real(turned).reshape(3, 7, 10)
    torch.testing.assert_close(rotary_embedding(x, positions), expected)


@PROPERTY
@given(seed=st.integers(0, 10_000), d=st.sampled_from([2, 4, 8, 64]), n=st.integers(1, 6))
def test_rotary_keeps_norms_and_position_zero_is_identity(seed, d, n):
    x = torch.randn(2, n, d, generator=seeded(seed))
    positions = torch.randint(0, 5000, (n,), generator=seeded(seed + 1))
    out = rotary_embedding(x, positions)
    torch.testing.assert_close(out.norm(dim=-1), x.norm(dim=-1), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(rotary_embedding(x, torch.zeros(n, dtype=torch.long)), x)
    torch.testing.assert_close(rotary_embedding(x)[:, 0], x[:, 0])


@PROPERTY
@given(seed=st.integers(0, 10_000), p=st.integers(0, 2000), s=st.integers(0, 2000),
       shift=st.integers(-2000, 2000), d=st.sampled_from([2, 8, 32]))
def test_rotary_scores_depend_only_on_the_offset(seed, p, s, shift, d):
    """<R_p q, R_s k> = <R_(p + shift) q, R_(s + shift) k> = <q, R_(s - p) k>."""
    q, k = torch.randn(2, d, generator=seeded(seed), dtype=torch.float64)

    def score(pq: int, pk: int) -> torch.Tensor:
        rq = rotary_embedding(q[None], torch.tensor([pq]))[0]
        rk = rotary_embedding(k[None], torch.tensor([pk]))[0]
        return rq @ rk

    expected = score(p, s)
    torch.testing.assert_close(score(p + shift, s + shift), expected, atol=1e-9, rtol=1e-9)
    torch.testing.assert_close(score(0, s - p), expected, atol=1e-9, rtol=1e-9)


def test_rotary_positions_per_sequence_and_fractional():
    x = torch.randn(2, 3, 4, 6, generator=seeded(2))  # (B, H, N, d)
    positions = torch.tensor([[0, 1, 2, 3], [10, 11, 12, 13]])[:, None, :]  # (B, 1, N)
    out = rotary_embedding(x, positions)
    torch.testing.assert_close(out[0], rotary_embedding(x[0]))
    torch.testing.assert_close(out[1], rotary_embedding(x[1], torch.arange(10, 14)))
    half = rotary_embedding(x, torch.full((4,), 0.5))
    torch.testing.assert_close(rotary_embedding(half, torch.full((4,), 0.5)),
                               rotary_embedding(x, torch.ones(4)), atol=1e-6, rtol=0)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_rotary_low_precision_keeps_the_dtype(dtype):
    x = torch.randn(2, 5, 8, generator=seeded(3))
    out = rotary_embedding(x.to(dtype))
    assert out.dtype == dtype
    torch.testing.assert_close(out.float(), rotary_embedding(x), atol=2e-2, rtol=2e-2)


def test_rotary_rejects_bad_input():
    with pytest.raises(ValueError, match=r"even d.*\(2, 3, 5\)"):
        rotary_embedding(torch.zeros(2, 3, 5))
    with pytest.raises(ValueError, match=r"positions of shape \(4,\).*\(2, 3\)"):
        rotary_embedding(torch.zeros(2, 3, 4), torch.arange(4))


# ---------------------------------------------------------------- ALiBi


def test_alibi_slopes():
    torch.testing.assert_close(alibi_slopes(8), torch.tensor([2.0**-h for h in range(1, 9)]))
    torch.testing.assert_close(alibi_slopes(4), torch.tensor([1 / 4, 1 / 16, 1 / 64, 1 / 256]))
    thirds = torch.tensor([2 ** (-8 * h / 3) for h in (1, 2, 3)])
    torch.testing.assert_close(alibi_slopes(3), thirds)
    with pytest.raises(ValueError, match="num_heads"):
        alibi_slopes(0)


@pytest.mark.parametrize("causal", [True, False])
def test_alibi_bias_values(causal):
    bias = alibi_bias(4, 5, causal=causal)
    assert bias.shape == (4, 5, 5) and bias.dtype == torch.float32
    slopes = [1 / 4, 1 / 16, 1 / 64, 1 / 256]
    for h in range(4):
        for i in range(5):
            for j in range(5):
                if j <= i:
                    assert bias[h, i, j].item() == pytest.approx(-slopes[h] * (i - j))
                elif causal:
                    assert bias[h, i, j].item() == float("-inf")
                else:
                    assert bias[h, i, j].item() == pytest.approx(-slopes[h] * (j - i))


@pytest.mark.parametrize("align", ["top_left", "bottom_right"])
def test_alibi_bias_with_more_keys_than_queries(align):
    bias = alibi_bias(2, 3, 7, align=align)
    assert bias.shape == (2, 3, 7)
    start = 4 if align == "bottom_right" else 0  # query i sits at position i + start
    slopes = alibi_slopes(2)
    for i in range(3):
        for j in range(7):
            if j <= i + start:
                assert bias[1, i, j].item() == pytest.approx(-slopes[1].item() * (i + start - j))
            else:
                assert bias[1, i, j].item() == float("-inf")
    assert torch.equal(torch.isfinite(bias[0]), causal_mask(3, 7, align=align))


def test_alibi_bias_rejects_bad_arguments():
    with pytest.raises(ValueError, match="align"):
        alibi_bias(2, 3, align="left")
    with pytest.raises(ValueError, match="num_keys"):
        alibi_bias(2, 3, -1)


# ---------------------------------------------------------------- T5 buckets


def test_relative_distances():
    assert relative_distances(2, 4).tolist() == [[0, -1, -2, -3], [1, 0, -1, -2]]
    assert relative_distances(2, 4, align="bottom_right").tolist() == [[2, 1, 0, -1],
                                                                       [3, 2, 1, 0]]


def test_t5_buckets_by_hand():
    """32 buckets, max_distance 128, as in T5: exact below 8, log-spaced to 128, then 15;
    keys ahead of the query (negative distance) in buckets 16..31."""
    distance = torch.tensor([0, 1, 7, 8, 16, 32, 64, 127, 128, 1000, -1, -7, -16, -500])
    expected = [0, 1, 7, 8, 10, 12, 14, 15, 15, 15, 17, 23, 26, 31]
    assert relative_position_bucket(distance).tolist() == expected
    causal = relative_position_bucket(torch.tensor([-3, 0, 5, 15, 16, 40, 127, 500]),
                                      bidirectional=False)
    # one direction: 32 buckets, exact below 16, then 16 + log(d / 16) / log(8) * 16
    assert causal.tolist() == [0, 0, 5, 15, 16, 23, 31, 31]


def test_relative_position_bias_module():
    torch.manual_seed(0)
    module = RelativePositionBias(3, num_buckets=8, max_distance=16)
    assert torch.all(module(4) == 0)  # no preference at the start
    torch.nn.init.normal_(module.table.weight)
    bias = module(4, 6, align="bottom_right")
    assert bias.shape == (3, 4, 6)
    buckets = relative_position_bucket(relative_distances(4, 6, "bottom_right"), 8, 16)
    for h in range(3):
        torch.testing.assert_close(bias[h], module.table.weight[buckets, h])
    # as a float mask, in attention: equal distances get equal bias
    torch.testing.assert_close(bias[:, 1, 1], bias[:, 3, 3])
    x = torch.randn(2, 4, 12, generator=seeded(9))
    out, _ = MultiHeadAttention(12, 3)(x, x, x, attn_mask=module(4), is_causal=True)
    out.sum().backward()
    assert module.table.weight.grad.abs().sum() > 0


# ---------------------------------------------------------------- learned table


def test_learned_positional_embedding_adds_trainable_rows():
    torch.manual_seed(0)
    module = LearnedPositionalEmbedding(6, 4)
    x = torch.randn(2, 3, 4, generator=seeded(4))
    out = module(x)
    torch.testing.assert_close(out - x, module.table.weight[:3].expand(2, 3, 4))
    torch.testing.assert_close(module(x, offset=2) - x, module.table.weight[2:5].expand(2, 3, 4))
    out.sum().backward()
    assert module.table.weight.grad[:3].abs().sum() > 0
    assert torch.all(module.table.weight.grad[3:] == 0)
    assert module.table.weight.std().item() == pytest.approx(0.02, rel=0.5)


def test_learned_positional_embedding_cannot_go_beyond_max_len():
    module = LearnedPositionalEmbedding(6, 4)
    module(torch.zeros(1, 6, 4))
    with pytest.raises(ValueError, match=r"positions 0\.\.5 only \(max_len=6\).*0\.\.6"):
        module(torch.zeros(1, 7, 4))
    with pytest.raises(ValueError, match=r"positions 4\.\.6"):
        module(torch.zeros(1, 3, 4), offset=4)
    with pytest.raises(ValueError, match="d_model=4"):
        module(torch.zeros(1, 3, 5))


# ---------------------------------------------------------------- in MultiHeadAttention


def _rope_by_hand(module: MultiHeadAttention, query, key, value, mask, causal):
    """Project, split, rotate q and k, then the course's explicit attention."""
    from attention_course.masking import scaled_dot_product_attention
    from attention_course.multihead import merge_heads, split_heads

    q = rotary_embedding(split_heads(module.q_proj(query), module.num_heads))
    k = rotary_embedding(split_heads(module.k_proj(key), module.num_heads))
    v = split_heads(module.v_proj(value), module.num_heads)
    out, _ = scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal)
    return module.out_proj(merge_heads(out))


@PROPERTY
@given(seed=st.integers(0, 10_000), positional=st.sampled_from(["rope", "alibi"]),
       n=st.integers(1, 6), heads=st.sampled_from([1, 2, 4]), causal=st.booleans(),
       mask_kind=st.sampled_from([None, "padding", "float", "per_head"]),
       kv_heads=st.sampled_from([None, 1]))
def test_positional_attention_fused_and_explicit_paths_agree(seed, positional, n, heads, causal,
                                                             mask_kind, kv_heads):
    torch.manual_seed(seed)
    module = MultiHeadAttention(heads * 4, heads, positions=IN_ATTENTION[positional],
                                num_kv_heads=kv_heads)
    x = torch.randn(2, n, heads * 4)
    mask = None
    if mask_kind == "padding":  # key 0 stays, so no row is fully masked
        mask = padding_mask(torch.randint(1, n + 1, (2,)), n)[:, None, None, :]
    elif mask_kind == "float":
        mask = torch.randn(n, n)
    elif mask_kind == "per_head":
        mask = torch.rand(2, heads, n, n) > 0.3
        mask[..., 0] = True
    fused, _ = module(x, x, x, attn_mask=mask, is_causal=causal)
    explicit, weights = module(x, x, x, attn_mask=mask, is_causal=causal, need_weights=True)
    torch.testing.assert_close(fused, explicit, rtol=1e-5, atol=1e-5)
    assert weights.shape == (2, heads, n, n)
    if causal:
        assert torch.all(weights.triu(1) == 0)


@pytest.mark.parametrize("causal", [False, True])
def test_rope_attention_equals_rotating_by_hand(causal):
    torch.manual_seed(0)
    module = MultiHeadAttention(16, 2, positions=Rotary())
    x, y = torch.randn(2, 5, 16, generator=seeded(5)), torch.randn(2, 5, 16, generator=seeded(6))
    mask = padding_mask(torch.tensor([5, 3]), 5)[:, None, None, :]
    expected = _rope_by_hand(module, x, y, y, mask, causal)
    torch.testing.assert_close(module(x, y, y, attn_mask=mask, is_causal=causal)[0], expected,
                               rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(module(x, x, x, is_causal=causal)[0],
                               _rope_by_hand(module, x, x, x, None, causal), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("bool_mask", [False, True])
def test_alibi_attention_equals_the_bias_as_a_float_mask(causal, bool_mask):
    torch.manual_seed(2)
    module = MultiHeadAttention(16, 4, positions=ALiBi())
    plain = MultiHeadAttention(16, 4)
    plain.load_state_dict(module.state_dict())
    x = torch.randn(2, 6, 16, generator=seeded(8))
    real = padding_mask(torch.tensor([6, 4]), 6)[:, None, None, :]
    mask = real if bool_mask else torch.zeros(2, 1, 1, 6).masked_fill(~real, float("-inf"))
    bias = alibi_bias(4, 6, causal=causal).masked_fill(~real, float("-inf"))  # (2, 4, 6, 6)
    expected, expected_w = plain(x, x, x, attn_mask=bias, need_weights=True)
    for need in (False, True):
        out, weights = module(x, x, x, attn_mask=mask, is_causal=causal, need_weights=need)
        torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(weights, expected_w)
    assert torch.all(weights[1, ..., 4:] == 0)


def test_positions_option_errors():
    with pytest.raises(ValueError, match="positions must be None or an AttentionPositions"):
        MultiHeadAttention(8, 2, positions="rope")
    x = torch.randn(1, 4, 6)
    with pytest.raises(ValueError, match=r"even d; got shape \(1, 2, 4, 3\)"):
        MultiHeadAttention(6, 2, positions=Rotary())(x, x, x)


# ---------------------------------------------------------------- in the Transformer


@pytest.mark.parametrize("positional", ["sinusoidal", "learned", "rope", "alibi", "none"])
def test_transformer_trains_with_every_scheme(positional):
    torch.manual_seed(0)
    model = Transformer(8, 8, 16, 2, 1, 32, max_len=10, positional=positional)
    src = torch.tensor([[4, 5, 6, 2], [7, 6, 5, 2], [5, 7, 4, 2], [6, 4, 7, 2]])
    batch = SimpleNamespace(src=src, tgt_out=src, tgt_in=torch.cat([torch.ones_like(src[:, :1]),
                                                                    src[:, :-1]], 1))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    losses = []
    for _ in range(15):
        optimizer.zero_grad()
        loss = translation_loss(model, batch)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < 0.7 * losses[0], losses


def test_transformer_position_tables():
    def make(positional):
        torch.manual_seed(0)
        return Transformer(11, 13, 16, 2, 1, 32, max_len=12, positional=positional)

    assert make("sinusoidal").positional_encoding.pe.shape == (12, 16)
    learned = make("learned")
    assert learned.positional_encoding.table.weight.shape == (12, 16)
    assert "positional_encoding.table.weight" in dict(learned.named_parameters())
    for positional in ("rope", "alibi", "none"):
        model = make(positional)
        assert model.positional_encoding is None
        ids = torch.tensor([[1, 2, 3]])
        torch.testing.assert_close(model.embed(ids, model.tgt_embedding),
                                   model.tgt_embedding(ids) * 4.0)
    rope = make("rope")
    assert isinstance(rope.encoder.layers[0].self_attn.positions, Rotary)
    assert isinstance(rope.decoder.layers[0].self_attn.positions, Rotary)
    assert rope.decoder.layers[0].cross_attn.positions is None
    assert isinstance(make("alibi").encoder.layers[0].self_attn.positions, ALiBi)
    with pytest.raises(ValueError, match="positional must be one of"):
        make("relative")


def test_transformer_default_is_unchanged_sinusoidal():
    torch.manual_seed(0)
    default = Transformer(11, 13, 16, 2, 1, 32, max_len=12, dropout=0.1)
    torch.manual_seed(0)
    sinusoidal = Transformer(11, 13, 16, 2, 1, 32, max_len=12, dropout=0.1,
                             positional="sinusoidal")
    for (name, a), (_, b) in zip(default.state_dict().items(), sinusoidal.state_dict().items(),
                                 strict=True):
        torch.testing.assert_close(a, b, msg=name)
    assert default.positional == "sinusoidal"


def test_without_positions_the_encoder_cannot_tell_order():
    torch.manual_seed(3)
    model = Transformer(11, 13, 16, 2, 2, 32, max_len=12, positional="none").eval()
    src, swapped = torch.tensor([[4, 5, 6, 7]]), torch.tensor([[6, 5, 4, 7]])
    memory, _ = model.encode(src)
    memory_swapped, _ = model.encode(swapped)
    torch.testing.assert_close(memory_swapped[:, [2, 1, 0, 3]], memory, rtol=1e-5, atol=1e-5)
    for positional in ("learned", "rope", "alibi"):
        torch.manual_seed(3)
        model = Transformer(11, 13, 16, 2, 2, 32, max_len=12, positional=positional).eval()
        if positional == "learned":
            torch.nn.init.normal_(model.positional_encoding.table.weight)
        memory, _ = model.encode(src)
        memory_swapped, _ = model.encode(swapped)
        assert not torch.allclose(memory_swapped[:, [2, 1, 0, 3]], memory, atol=1e-3), positional


def test_learned_transformer_rejects_too_long_inputs():
    model = Transformer(11, 13, 16, 2, 1, 32, max_len=6, positional="learned")
    with pytest.raises(ValueError, match="max_len=6"):
        model(torch.ones(1, 7, dtype=torch.long), torch.ones(1, 3, dtype=torch.long))
    with pytest.raises(ValueError, match="max_len=6"):
        model.positional_encoding(torch.zeros(1, 7, 16))


# ---------------------------------------------------------------- the experiment


def _latest_by_hand(ids: list[int], num_values: int) -> list[int]:
    """The targets of one sequence (without <bos>), register by register."""
    held: dict[int, int] = {}
    out = []
    for token in ids:
        register, value = divmod(token, num_values)
        out.append(held.get(register, num_values))
        held[register] = value
    return out


@PROPERTY
@given(seed=st.integers(0, 10_000), length=st.integers(1, 30), registers=st.integers(1, 5),
       values=st.integers(1, 6))
def test_latest_value_task_targets_by_hand(seed, length, registers, values):
    ids, targets = latest_value_task(3, length, registers, values, seeded(seed))
    assert ids.shape == targets.shape == (3, length + 1)
    assert ids.dtype == targets.dtype == torch.long
    assert torch.all(ids[:, 0] == registers * values) and torch.all(targets[:, 0] == IGNORE)
    assert ids[:, 1:].min() >= 0 and ids[:, 1:].max() < registers * values
    for row in range(3):
        assert targets[row, 1:].tolist() == _latest_by_hand(ids[row, 1:].tolist(), values)


def test_latest_value_task_is_seeded_and_checks_sizes():
    a = latest_value_task(4, 9, generator=seeded(5))
    b = latest_value_task(4, 9, generator=seeded(5))
    assert all(torch.equal(x, y) for x, y in zip(a, b, strict=True))
    with pytest.raises(ValueError, match="must be positive"):
        latest_value_task(4, 0)


SCHEMES = ["sinusoidal", "learned", "rope", "alibi", "none"]


def test_causal_transformer_schemes_share_their_start():
    """At one seed every scheme starts from the same weights, apart from the table."""
    setup = ExtrapolationSetup(test_length=20, num_layers=2)
    states = {scheme: setup.model(scheme, seed=3).state_dict() for scheme in SCHEMES}
    reference = states["none"]
    for scheme, state in states.items():
        extra = set(state) - set(reference)
        assert extra == ({"table.table.weight"} if scheme == "learned" else set()), scheme
        for name, value in reference.items():
            torch.testing.assert_close(state[name], value, msg=f"{scheme} {name}")
    learned = setup.model("learned", 3)
    assert learned.table.table.weight.shape == (21, setup.d_model)
    assert isinstance(setup.model("rope", 3).layers.layers[0].self_attn.positions, Rotary)
    assert setup.model("sinusoidal", 3).layers.layers[0].self_attn.positions is None
    with pytest.raises(ValueError, match="positional must be one of"):
        setup.model("t5", 0)


@pytest.mark.parametrize("positional", SCHEMES)
def test_causal_transformer_is_causal(positional):
    """The output at position t depends on positions 0..t only, so a longer sequence
    leaves the outputs of its first positions unchanged."""
    torch.manual_seed(0)
    model = CausalTransformer(10, 5, 16, 2, 2, 32, max_len=12, positional=positional).eval()
    if positional == "learned":
        torch.nn.init.normal_(model.table.table.weight)
    ids = torch.randint(0, 10, (2, 12), generator=seeded(1))
    with torch.no_grad():
        full, weights = model(ids, need_weights=True)
        short, _ = model(ids[:, :7])
    assert full.shape == (2, 12, 5) and len(weights) == 2 and weights[0].shape == (2, 2, 12, 12)
    torch.testing.assert_close(short, full[:, :7], rtol=1e-5, atol=1e-5)
    assert torch.all(weights[1].triu(1) == 0)
    changed = ids.clone()
    changed[:, 9] = (changed[:, 9] + 1) % 10
    with torch.no_grad():
        after, _ = model(changed)
    torch.testing.assert_close(after[:, :9], full[:, :9], rtol=1e-5, atol=1e-5)
    assert not torch.allclose(after[:, 9:], full[:, 9:])


def test_causal_transformer_errors():
    model = CausalTransformer(10, 5, 16, 2, 1, 32, max_len=6, positional="learned")
    with pytest.raises(ValueError, match=r"max_len=6"):
        model(torch.zeros(1, 7, dtype=torch.long))
    with pytest.raises(ValueError, match=r"\(B, N\) token ids"):
        model(torch.zeros(7, dtype=torch.long))


def test_label_loss_and_accuracy_skip_ignored_targets():
    torch.manual_seed(0)
    model = CausalTransformer(6, 3, 8, 2, 1, 16, max_len=5, positional="rope").eval()
    ids = torch.randint(0, 6, (4, 5), generator=seeded(2))
    targets = torch.randint(0, 3, (4, 5), generator=seeded(3))
    targets[:, 0] = IGNORE
    targets[1, 3] = IGNORE
    with torch.no_grad():
        scores, _ = model(ids)
    keep = targets != IGNORE
    expected = torch.nn.functional.cross_entropy(scores[keep], targets[keep])
    torch.testing.assert_close(label_loss(model, (ids, targets)), expected)
    accuracy = accuracy_by_position(model, ids, targets)
    assert accuracy.shape == (5,) and torch.isnan(accuracy[0])
    right = scores.argmax(-1) == targets
    assert accuracy[3].item() == pytest.approx(right[[0, 2, 3], 3].float().mean().item())


def test_train_scheme_learns_the_task_and_records_curves():
    """A short run of the chapter's experiment: the loss falls, the accuracy curves have
    one row per evaluation, and the same seed gives the same run."""
    setup = ExtrapolationSetup(train_length=8, test_length=16, steps=120, eval_every=40,
                               eval_sequences=64)
    run = train_scheme(setup, "alibi", seed=0, device="cpu")
    assert run.steps == [40, 80, 120] and len(run.losses) == 120
    assert run.accuracy.shape == (3, 16)
    assert sum(run.losses[-10:]) / 10 < 0.8 * sum(run.losses[:10]) / 10
    assert run.accuracy[-1, :8].mean() > 0.5  # chance is 1/9
    again = train_scheme(setup, "alibi", seed=0, device="cpu")
    assert again.losses == run.losses


def test_learned_rows_beyond_the_training_length_stay_untrained():
    setup = ExtrapolationSetup(train_length=6, test_length=12, steps=20, eval_every=20,
                               eval_sequences=8)
    start = setup.model("learned", 1).table.table.weight.detach().clone()
    run = train_scheme(setup, "learned", seed=1, device="cpu")
    table = run.model.table.table.weight.detach()
    assert not torch.allclose(table[:7], start[:7])  # <bos> and 6 writes were trained
    torch.testing.assert_close(table[7:], start[7:], rtol=0, atol=0)


def test_length_extrapolation_runs_every_scheme_and_seed():
    setup = ExtrapolationSetup(train_length=4, test_length=8, steps=6, eval_every=3,
                               eval_sequences=8)
    runs = length_extrapolation(setup, ["rope", "none"], [0, 1], device="cpu")
    assert list(runs) == ["rope", "none"]
    assert [(r.positional, r.seed) for r in runs["none"]] == [("none", 0), ("none", 1)]
    assert runs["rope"][0].accuracy.shape == (2, 8)


def test_plot_mean_std_draws_a_band_and_labels_each_curve():
    import matplotlib.pyplot as plt

    from attention_course.plotting import plot_mean_std

    curves = {"a": torch.rand(3, 5), "b": torch.rand(1, 5)}
    fig = plot_mean_std(curves, x=[2, 4, 6, 8, 10], mark=6, mark_label="trained up to here")
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["a (3 runs)", "b"]
    means = [line for line in ax.get_lines() if line.get_label().startswith("a (")]
    assert means[0].get_xdata().tolist() == [2, 4, 6, 8, 10]
    torch.testing.assert_close(torch.tensor(means[0].get_ydata()), curves["a"].mean(0),
                               check_dtype=False)
    plt.close(fig)
    with pytest.raises(ValueError, match=r"x has 2 points"):
        plot_mean_std(curves, x=[1, 2])
