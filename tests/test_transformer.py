"""Tests for attention_course.transformer: PE, layers equal to PyTorch's, masks, decoding."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from module_helpers import copy_attention, seeded
from torch import nn

import attention_course.decoding  # noqa: F401  (registers chapter 9's KV cache)
import attention_course.positions  # noqa: F401  (registers learned, rope, alibi)
from attention_course.masking import padding_mask
from attention_course.transformer import (
    DecoderLayer,
    Encoder,
    EncoderLayer,
    PositionalEncoding,
    Transformer,
    sinusoidal_positional_encoding,
    translation_loss,
)

PROPERTY = settings(max_examples=20, deadline=None)


def _twins(ours_class: type[EncoderLayer | DecoderLayer], torch_class: type[nn.Module],
           d_model: int, num_heads: int, d_ff: int, norm_first: bool
           ) -> tuple[nn.Module, nn.Module]:
    """Our layer and PyTorch's of the same sizes, PyTorch's with our weights; our
    LayerNorms first get weights that a mix-up would reveal (they start as the identity)."""
    ours = ours_class(d_model, num_heads, d_ff, norm_first=norm_first)
    ref = torch_class(d_model, num_heads, d_ff, dropout=0.0, batch_first=True,
                      norm_first=norm_first)
    with torch.no_grad():
        for m in ours.modules():
            if isinstance(m, nn.LayerNorm):
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.5, 0.5)
    copy_attention(ours.self_attn, ref.self_attn)
    if isinstance(ours, DecoderLayer):
        copy_attention(ours.cross_attn, ref.multihead_attn)
    ref.linear1.load_state_dict(ours.ffn.linear1.state_dict())
    ref.linear2.load_state_dict(ours.ffn.linear2.state_dict())
    for i in (1, 2, 3):
        if hasattr(ref, f"norm{i}"):
            add_norm = getattr(ours, f"add_norm{i}")
            getattr(ref, f"norm{i}").load_state_dict(add_norm.norm.state_dict())
    return ours, ref


def _copy_batch(src: torch.Tensor) -> SimpleNamespace:
    """A copy task: the target is the source (``<bos>`` = 1 in front of the decoder input)."""
    tgt_in = torch.cat([torch.ones(len(src), 1, dtype=torch.long), src[:, :-1]], 1)
    return SimpleNamespace(src=src, tgt_in=tgt_in, tgt_out=src)


def _model(seed: int = 0, **kw) -> Transformer:
    torch.manual_seed(seed)
    args = dict(src_vocab_size=11, tgt_vocab_size=13, d_model=16, num_heads=2, num_layers=2,
                d_ff=32, max_len=24)
    return Transformer(**{**args, **kw}).eval()


# ---------------------------------------------------------------- positional encoding


def test_positional_encoding_matches_formula():
    pe = sinusoidal_positional_encoding(50, 16)
    assert pe.shape == (50, 16) and pe.dtype == torch.float32
    for p in (0, 1, 7, 49):
        for i in range(8):
            angle = p / 10000 ** (2 * i / 16)
            assert pe[p, 2 * i].item() == pytest.approx(math.sin(angle), abs=1e-6)
            assert pe[p, 2 * i + 1].item() == pytest.approx(math.cos(angle), abs=1e-6)


def test_positional_encoding_base_and_odd_width():
    pe = sinusoidal_positional_encoding(10, 5, base=1000.0)
    assert pe.shape == (10, 5)
    assert pe[3, 2].item() == pytest.approx(math.sin(3 / 1000 ** (2 / 5)), abs=1e-6)
    assert pe[3, 3].item() == pytest.approx(math.cos(3 / 1000 ** (2 / 5)), abs=1e-6)
    assert pe[3, 4].item() == pytest.approx(math.sin(3 / 1000 ** (4 / 5)), abs=1e-6)


def test_positional_encoding_module_adds_along_positions_of_batch_first_input():
    module = PositionalEncoding(8, max_len=20)
    x = torch.randn(3, 6, 8, generator=seeded(0))
    added = module(x) - x
    table = sinusoidal_positional_encoding(6, 8)
    for b in range(3):  # the same table for every sequence of the batch ...
        torch.testing.assert_close(added[b], table)
    for p in range(1, 6):  # ... and a different vector at every position
        assert not torch.allclose(added[:, p], added[:, 0])
    assert not any(n == "pe" for n, _ in module.named_parameters())  # a fixed buffer


def test_positional_encoding_rejects_bad_input():
    module = PositionalEncoding(8, max_len=5)
    with pytest.raises(ValueError, match="max_len=5"):
        module(torch.zeros(1, 6, 8))
    with pytest.raises(ValueError, match="d_model=8"):
        module(torch.zeros(1, 4, 7))
    with pytest.raises(ValueError, match="d_model"):
        sinusoidal_positional_encoding(4, 0)


# ---------------------------------------------------------------- layers vs PyTorch


@pytest.mark.parametrize("norm_first", [False, True])
def test_encoder_layer_equals_torch(norm_first):
    torch.manual_seed(0)
    ours, ref = _twins(EncoderLayer, nn.TransformerEncoderLayer, 16, 4, 32, norm_first)
    x = torch.randn(3, 7, 16, generator=seeded(1))
    real = padding_mask(torch.tensor([7, 3, 5]), 7)
    out, weights = ours(x, real[:, None, None, :], need_weights=True)
    expected = ref(x, src_key_padding_mask=~real)  # torch: True = padding (ignored)
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(ours(x, real[:, None, None, :])[0], expected, rtol=1e-5,
                               atol=1e-5)
    assert weights.shape == (3, 4, 7, 7) and torch.all(weights[1, :, :, 3:] == 0)


@pytest.mark.parametrize("norm_first", [False, True])
def test_decoder_layer_equals_torch(norm_first):
    torch.manual_seed(1)
    ours, ref = _twins(DecoderLayer, nn.TransformerDecoderLayer, 16, 2, 24, norm_first)
    y = torch.randn(2, 5, 16, generator=seeded(2))
    memory = torch.randn(2, 6, 16, generator=seeded(3))
    real = padding_mask(torch.tensor([6, 2]), 6)
    out, self_w, cross_w = ours(y, memory, real[:, None, None, :], need_weights=True)
    causal_blocked = torch.ones(5, 5, dtype=torch.bool).triu(1)
    expected = ref(y, memory, tgt_mask=causal_blocked, memory_key_padding_mask=~real)
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5)
    assert torch.all(self_w.triu(1) == 0) and torch.all(cross_w[1, :, :, 2:] == 0)


# ---------------------------------------------------------------- properties


@PROPERTY
@given(seed=st.integers(0, 10_000), length=st.integers(2, 8), norm_first=st.booleans())
def test_encoder_without_positions_is_permutation_equivariant(seed, length, norm_first):
    torch.manual_seed(seed)
    encoder = Encoder(2, 8, 2, 16, norm_first=norm_first).eval()
    x = torch.randn(2, length, 8)
    perm = torch.randperm(length)
    out, _ = encoder(x)
    out_perm, _ = encoder(x[:, perm])
    torch.testing.assert_close(out_perm, out[:, perm], rtol=1e-5, atol=1e-5)


def test_positional_encoding_breaks_the_symmetry():
    """Same words, different order: without PE the per-word outputs are merely permuted."""
    model = _model(1)
    src = torch.tensor([[4, 5, 6, 7]])
    swapped = torch.tensor([[6, 5, 4, 7]])
    memory, _ = model.encode(src)
    memory_swapped, _ = model.encode(swapped)
    assert not torch.allclose(memory_swapped[:, [2, 1, 0, 3]], memory, atol=1e-3)


@PROPERTY
@given(seed=st.integers(0, 10_000), t=st.integers(0, 5), norm_first=st.booleans())
def test_decoder_is_causal(seed, t, norm_first):
    model = _model(seed, norm_first=norm_first)
    g = seeded(seed)
    src = torch.randint(1, 11, (2, 5), generator=g)
    tgt = torch.randint(1, 13, (2, 6), generator=g)
    changed = tgt.clone()
    changed[:, t:] = torch.randint(1, 13, (2, 6 - t), generator=g)
    logits, logits_changed = model(src, tgt), model(src, changed)
    torch.testing.assert_close(logits[:, :t], logits_changed[:, :t], rtol=1e-5, atol=1e-5)


@PROPERTY
@given(seed=st.integers(0, 10_000), extra=st.integers(1, 4), norm_first=st.booleans())
def test_padding_in_the_source_changes_nothing(seed, extra, norm_first):
    model = _model(seed, norm_first=norm_first)
    g = seeded(seed)
    src = torch.randint(1, 11, (1, 5), generator=g)
    tgt = torch.randint(1, 13, (1, 4), generator=g)
    padded = torch.cat([src, torch.zeros(1, extra, dtype=torch.long)], dim=1)
    alone = model(src, tgt)
    torch.testing.assert_close(model(padded, tgt), alone, rtol=1e-5, atol=1e-5)
    with torch.no_grad():  # whatever vector the padding token carries
        model.src_embedding.weight[0].normal_(generator=g)
    torch.testing.assert_close(model(padded, tgt), alone, rtol=1e-5, atol=1e-5)
    # in a batch with a longer sentence, the short one's padded row gives the same logits
    other = torch.randint(1, 11, (1, 5 + extra), generator=g)
    batch = model(torch.cat([padded, other]), torch.cat([tgt, tgt]))
    torch.testing.assert_close(batch[:1], alone, rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------- the model


def test_forward_shapes_tying_and_scaling():
    model = _model()
    logits = model(torch.randint(1, 11, (3, 5)), torch.randint(1, 13, (3, 4)))
    assert logits.shape == (3, 4, 13)
    assert model.output.weight is model.tgt_embedding.weight
    ids = torch.tensor([[1, 2, 3]])
    expected = model.tgt_embedding(ids) * 4.0 + sinusoidal_positional_encoding(3, 16)
    torch.testing.assert_close(model.embed(ids, model.tgt_embedding), expected)
    assert isinstance(_model(norm_first=True).encoder.final_norm, nn.LayerNorm)
    assert isinstance(model.encoder.final_norm, nn.Identity)


def test_attention_weights_shapes():
    model = _model(num_layers=3)
    src = torch.tensor([[4, 5, 6, 0, 0], [4, 5, 6, 7, 8]])
    weights = model.attention_weights(src, torch.randint(1, 13, (2, 4)))
    assert weights["encoder_self"].shape == (3, 2, 2, 5, 5)
    assert weights["decoder_self"].shape == (3, 2, 2, 4, 4)
    assert weights["cross"].shape == (3, 2, 2, 4, 5)
    assert torch.all(weights["cross"][:, 0, :, :, 3:] == 0)
    assert torch.all(weights["decoder_self"].triu(1) == 0)


def test_greedy_decode_matches_teacher_forced_argmax():
    model = _model(3)
    src = torch.tensor([[4, 5, 6, 2, 0], [7, 8, 9, 10, 2]])
    out = model.greedy_decode(src, bos_id=1, eos_id=2, max_len=8)
    assert out.shape[0] == 2 and out.shape[1] <= 8
    tgt_in = torch.cat([torch.ones(2, 1, dtype=torch.long), out[:, :-1]], dim=1)
    predicted = model(src, tgt_in).argmax(-1)
    for row, pred in zip(out, predicted, strict=True):
        n = int((row == 2).nonzero()[0]) + 1 if (row == 2).any() else len(row)
        assert torch.equal(row[:n], pred[:n])
        assert torch.all(row[n:] == 0)


def _trained_copy_model(src: torch.Tensor, **kw) -> Transformer:
    """A small model trained for 150 steps to copy ``src`` (the target is the source)."""
    torch.manual_seed(0)
    model = Transformer(8, 8, 32, 2, 1, 64, max_len=10, **kw)
    batch = _copy_batch(src)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    model.train()
    for _ in range(150):
        optimizer.zero_grad()
        translation_loss(model, batch).backward()
        optimizer.step()
    return model.eval()


def test_training_learns_a_tiny_copy_task():
    src = torch.tensor([[4, 5, 6, 2], [7, 6, 5, 2], [5, 7, 4, 2], [6, 4, 7, 2]])
    model = _trained_copy_model(src)
    assert torch.equal(model.greedy_decode(src, 1, 2, max_len=6)[:, :4], src)


def test_loss_ignores_padding():
    model = _model()

    class Batch:
        src = torch.tensor([[4, 5, 2]])
        tgt_in = torch.tensor([[1, 6, 7]])
        tgt_out = torch.tensor([[6, 7, 2]])

    padded = Batch()
    padded.src, padded.tgt_in = Batch.src, torch.tensor([[1, 6, 7, 0, 0]])
    padded.tgt_out = torch.tensor([[6, 7, 2, 0, 0]])
    torch.testing.assert_close(translation_loss(model, padded), translation_loss(model, Batch))


def test_bad_inputs_raise():
    with pytest.raises(ValueError, match="not divisible"):
        _model(d_model=10, num_heads=3)
    model = _model()
    with pytest.raises(ValueError, match="same batch size"):
        model(torch.ones(2, 3, dtype=torch.long), torch.ones(3, 3, dtype=torch.long))
    with pytest.raises(ValueError, match="integer token ids"):
        model(torch.ones(2, 3), torch.ones(2, 3, dtype=torch.long))
    with pytest.raises(ValueError, match="src_ids"):
        model(torch.ones(3, dtype=torch.long), torch.ones(1, 3, dtype=torch.long))
    with pytest.raises(ValueError, match="max_len=24"):
        model(torch.ones(1, 30, dtype=torch.long), torch.ones(1, 3, dtype=torch.long))


@pytest.mark.gpu
def test_transformer_on_cuda_matches_cpu():
    model = _model(5)
    src, tgt = torch.randint(1, 11, (2, 6)), torch.randint(1, 13, (2, 5))
    expected = model(src, tgt)
    model.cuda()
    logits = model(src.cuda(), tgt.cuda())
    torch.testing.assert_close(logits.cpu(), expected, rtol=1e-3, atol=1e-3)
    out = model.greedy_decode(src.cuda(), 1, 2, max_len=5)
    assert out.device.type == "cuda"


# ---------------------------------------------------------------- decoding with a KV cache

SCHEMES = ["sinusoidal", "learned", "rope", "alibi", "none"]


@pytest.mark.parametrize("positional", SCHEMES)
@pytest.mark.parametrize("norm_first", [False, True])
def test_cached_decode_steps_equal_full_decode(positional, norm_first):
    """Token by token through the cache, each position gets the logits of a full pass: the
    new token's position is the cache length (absolute tables, RoPE and ALiBi alike)."""
    model = _model(4, positional=positional, norm_first=norm_first, num_kv_heads=1)
    if positional == "learned":  # rows that differ visibly from position to position
        torch.nn.init.normal_(model.positional_encoding.table.weight)
    src = torch.tensor([[4, 5, 6, 2, 0], [7, 8, 9, 10, 2]])
    tgt = torch.tensor([[1, 5, 7, 3, 9, 2], [1, 4, 4, 8, 0, 0]])
    memory, _ = model.encode(src)
    expected, expected_self, expected_cross = model.decode(tgt, memory, src, need_weights=True)
    cache = model.new_cache()
    steps = []
    for t in range(6):
        logits, self_w, cross_w = model.decode(tgt[:, t:t + 1], memory, src, need_weights=True,
                                               cache=cache)
        steps.append(logits)
        assert len(cache) == t + 1
        torch.testing.assert_close(self_w[0][..., 0, :], expected_self[0][..., t, : t + 1],
                                   rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(cross_w[1][..., 0, :], expected_cross[1][..., t, :],
                                   rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(torch.cat(steps, dim=1), expected, rtol=1e-4, atol=1e-5)


def _greedy_both_ways(model, src, bos=1, eos=2, max_len=None):
    cached = model.greedy_decode(src, bos, eos, max_len=max_len)
    uncached = model.greedy_decode(src, bos, eos, max_len=max_len, use_cache=False)
    assert torch.equal(cached, uncached)
    return cached


@pytest.mark.parametrize("positional", SCHEMES)
@pytest.mark.parametrize("num_kv_heads", [None, 1])
def test_greedy_decode_is_the_same_with_and_without_the_cache(positional, num_kv_heads):
    model = _model(5, positional=positional, num_kv_heads=num_kv_heads)
    src = torch.tensor([[4, 5, 6, 2, 0, 0], [7, 8, 9, 10, 3, 2], [5, 2, 0, 0, 0, 0]])
    out = _greedy_both_ways(model, src, eos=12)  # 12 is rarely produced: long outputs
    # early EOS: end at the token row 0 produces first; the other rows go on, padded
    first = int(out[0, 0])
    early = _greedy_both_ways(model, src, eos=first)
    assert early[0, 0] == first and torch.all(early[0, 1:] == 0)
    for row in early:  # after EOS, padding only
        ends = (row == first).nonzero()
        if len(ends):
            assert torch.all(row[int(ends[0]) + 1:] == 0)


def test_greedy_decode_with_cache_on_a_trained_model():
    src = torch.tensor([[4, 5, 6, 2], [7, 6, 5, 2], [5, 7, 2, 0], [6, 2, 0, 0]])
    model = _trained_copy_model(src, positional="rope")
    out = _greedy_both_ways(model, src, max_len=6)
    assert torch.equal(out[:, :4], src)


def test_cached_decoding_projects_the_memory_once_per_decode():
    model = _model(6)
    calls = {"cross": 0, "self": 0}
    for layer in model.decoder.layers:
        layer.cross_attn.k_proj.register_forward_hook(
            lambda *_: calls.__setitem__("cross", calls["cross"] + 1))
        layer.self_attn.q_proj.register_forward_hook(
            lambda *_: calls.__setitem__("self", calls["self"] + 1))
    src = torch.tensor([[4, 5, 6, 2, 0], [7, 8, 9, 10, 2]])
    out = model.greedy_decode(src, 1, 12, max_len=7)
    assert out.shape == (2, 7)
    assert calls["cross"] == len(model.decoder.layers)  # once per layer, not once per step
    calls["cross"] = 0
    model.greedy_decode(src, 1, 12, max_len=7, use_cache=False)
    assert calls["cross"] == 7 * len(model.decoder.layers)


def test_decode_with_cache_checks_max_len():
    model = _model(7, positional="learned", max_len=4)
    src = torch.tensor([[4, 5]])
    memory, _ = model.encode(src)
    cache = model.new_cache()
    model.decode(torch.tensor([[1, 5, 6]]), memory, src, cache=cache)
    with pytest.raises(ValueError, match="length 2 after 3 cached positions, more than max_len=4"):
        model.decode(torch.tensor([[7, 8]]), memory, src, cache=cache)
    assert model.greedy_decode(src, 1, 12).shape == (1, 3)  # max_len - 1 new tokens at most


def test_without_chapter_9_greedy_decoding_recomputes_and_gives_the_same_ids():
    """Chapter 6 imports no later chapter: until attention_course.decoding registers its
    KV cache, new_cache() says what to import and generate() recomputes every step."""
    import subprocess
    import sys

    script = (
        "import sys, torch\n"
        "from attention_course.transformer import Transformer\n"
        "assert 'attention_course.decoding' not in sys.modules\n"
        "torch.manual_seed(0)\n"
        "model = Transformer(9, 9, 16, 2, 1, 32, max_len=8).eval()\n"
        "src = torch.randint(3, 9, (2, 5))\n"
        "try:\n"
        "    model.new_cache()\n"
        "except RuntimeError as error:\n"
        "    assert 'import attention_course.decoding' in str(error), error\n"
        "else:\n"
        "    raise AssertionError('new_cache() without chapter 9')\n"
        "alone = model.greedy_decode(src, 1, 2)\n"
        "import attention_course.decoding\n"
        "assert type(model.new_cache()).__name__ == 'DecoderCache'\n"
        "assert torch.equal(alone, model.greedy_decode(src, 1, 2))\n"
        "assert torch.equal(alone, model.greedy_decode(src, 1, 2, use_cache=False))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
