"""Tests for attention_course.channel_spatial and the chapter 7 image data."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from attention_course.channel_spatial import (
    CBAM,
    ChannelAttention,
    SmallCNN,
    SpatialAttention,
    SqueezeExcitation,
    mass_in_boxes,
    squeeze,
)
from attention_course.data.images import OBJECT_SIZE, load_digits_images, make_object_images

PROPERTY = settings(max_examples=25, deadline=None)


def _x(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def _randomize(module: torch.nn.Module, seed: int) -> torch.nn.Module:
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=g))
    return module


BLOCKS = {
    "se": lambda c: SqueezeExcitation(c, reduction=4),
    "channel": lambda c: ChannelAttention(c, reduction=4),
    "spatial": lambda c: SpatialAttention(kernel_size=3),
    "cbam": lambda c: CBAM(c, reduction=4, kernel_size=5),
}


# ---------------------------------------------------------------- output = input x weights


@pytest.mark.parametrize("name", BLOCKS)
@PROPERTY
@given(
    b=st.integers(1, 3), c=st.integers(1, 9), h=st.integers(1, 7), w=st.integers(1, 7),
    seed=st.integers(0, 10_000),
)
def test_output_is_input_times_weights(name, b, c, h, w, seed):
    block = _randomize(BLOCKS[name](c), seed)
    x = _x(b, c, h, w, seed=seed)
    out, weights = block(x, return_weights=True)
    assert out.shape == x.shape
    torch.testing.assert_close(out, x * weights)
    torch.testing.assert_close(block(x), out)
    torch.testing.assert_close(block.last_weights, weights.detach())
    assert not block.last_weights.requires_grad


@pytest.mark.parametrize("name", ["se", "channel"])
def test_channel_weights_in_open_unit_interval_and_constant_over_space(name):
    block = BLOCKS[name](8)
    x = _x(3, 8, 5, 6, seed=1)
    _, weights = block(x, return_weights=True)
    assert weights.shape == (3, 8, 1, 1)
    assert torch.all((weights > 0) & (weights < 1))
    broadcast = (x * weights) / x
    torch.testing.assert_close(broadcast, broadcast[:, :, :1, :1].expand_as(x))


def test_se_weights_do_not_depend_on_where_things_are():
    """The squeeze averages over H and W, so shuffling positions leaves the weights alone."""
    block = _randomize(SqueezeExcitation(6, reduction=2), 2)
    x = _x(2, 6, 4, 5, seed=3)
    perm = torch.randperm(20, generator=torch.Generator().manual_seed(4))
    shuffled = x.flatten(2)[:, :, perm].reshape_as(x)
    _, w1 = block(x, return_weights=True)
    _, w2 = block(shuffled, return_weights=True)
    torch.testing.assert_close(w1, w2)


def test_spatial_weights_are_one_map_shared_by_all_channels():
    block = SpatialAttention()
    x = _x(2, 5, 9, 8, seed=6)
    _, weights = block(x, return_weights=True)
    assert weights.shape == (2, 1, 9, 8)
    assert torch.all((weights > 0) & (weights < 1))
    ratio = block(x) / x
    torch.testing.assert_close(ratio, ratio[:, :1].expand_as(x))


def test_cbam_weights_are_channel_times_spatial():
    block = _randomize(CBAM(6, reduction=2, kernel_size=3), 7)
    x = _x(2, 6, 5, 5, seed=8)
    out, weights = block(x, return_weights=True)
    channel = block.channel_attention.last_weights
    spatial = block.spatial_attention.last_weights
    assert channel.shape == (2, 6, 1, 1) and spatial.shape == (2, 1, 5, 5)
    torch.testing.assert_close(weights, channel * spatial)
    torch.testing.assert_close(spatial, block.spatial_attention(x * channel, True)[1])


# ---------------------------------------------------------------- the papers' formulas


def test_squeeze_is_global_average_pooling():
    x = _x(2, 3, 4, 5, seed=9)
    torch.testing.assert_close(squeeze(x), F.adaptive_avg_pool2d(x, 1).flatten(1))


def test_squeeze_excitation_matches_hand_written_formula():
    block = _randomize(SqueezeExcitation(12, reduction=3), 10)
    x = _x(2, 12, 4, 4, seed=11)
    w1, w2 = block.fc1.weight, block.fc2.weight
    assert w1.shape == (4, 12) and w2.shape == (12, 4)
    z = x.mean(dim=(2, 3))
    s = torch.sigmoid(torch.relu(z @ w1.T) @ w2.T)
    torch.testing.assert_close(block(x), x * s[:, :, None, None])


def test_channel_attention_matches_hand_written_formula():
    block = _randomize(ChannelAttention(8, reduction=2), 12)
    x = _x(3, 8, 5, 4, seed=13)
    w0, w1 = block.mlp[0].weight, block.mlp[2].weight

    def mlp(v: torch.Tensor) -> torch.Tensor:
        return torch.relu(v @ w0.T) @ w1.T

    m_c = torch.sigmoid(mlp(x.mean(dim=(2, 3))) + mlp(x.amax(dim=(2, 3))))
    torch.testing.assert_close(block(x), x * m_c[:, :, None, None])


def test_spatial_attention_matches_hand_written_formula():
    block = _randomize(SpatialAttention(kernel_size=5), 14)
    x = _x(2, 4, 6, 7, seed=15)
    stacked = torch.stack([x.mean(dim=1), x.amax(dim=1)], dim=1)
    m_s = torch.sigmoid(F.conv2d(stacked, block.conv.weight, block.conv.bias, padding=2))
    torch.testing.assert_close(block(x), x * m_s)


def test_cbam_matches_channel_then_spatial():
    block = _randomize(CBAM(8, reduction=4, kernel_size=3), 16)
    x = _x(2, 8, 5, 6, seed=17)
    refined = block.channel_attention(x)
    torch.testing.assert_close(block(x), block.spatial_attention(refined))


@pytest.mark.parametrize("block_cls", [SqueezeExcitation, ChannelAttention])
@pytest.mark.parametrize("channels", [1, 2, 15])
def test_small_channel_counts_keep_a_hidden_unit(block_cls, channels):
    block = block_cls(channels)  # reduction 16 > channels
    linears = [m for m in block.modules() if isinstance(m, torch.nn.Linear)]
    assert [tuple(m.weight.shape) for m in linears] == [(1, channels), (channels, 1)]
    assert block(_x(2, channels, 3, 3)).shape == (2, channels, 3, 3)


# ---------------------------------------------------------------- gradients


@pytest.mark.parametrize("name", BLOCKS)
def test_gradients_reach_every_parameter_and_the_input(name):
    block = _randomize(BLOCKS[name](8), 18)
    x = _x(2, 8, 6, 6, seed=19).requires_grad_()
    (block(x) * _x(2, 8, 6, 6, seed=20)).sum().backward()
    for pname, p in block.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, f"no gradient reaches {pname}"
    assert x.grad is not None and x.grad.abs().sum() > 0


@pytest.mark.parametrize("attention", ["none", "se", "cbam"])
@pytest.mark.parametrize("attend", ["input", "features"])
def test_small_cnn_trains_end_to_end(attention, attend):
    model = SmallCNN(3, 4, attention, attend=attend, width=8, reduction=2)
    x = _x(5, 3, 8, 8, seed=21)
    logits = model(x)
    assert logits.shape == (5, 4)
    F.cross_entropy(logits, torch.tensor([0, 1, 2, 3, 0])).backward()
    assert all(p.grad is not None for p in model.parameters())


# ---------------------------------------------------------------- bad input


@pytest.mark.parametrize("name", BLOCKS)
@pytest.mark.parametrize("shape", [(8,), (2, 8), (2, 8, 5), (1, 2, 8, 4, 4)])
def test_non_4d_input_raises_naming_the_shape(name, shape):
    with pytest.raises(ValueError, match=r"\(B, C, H, W\).*" + ", ".join(map(str, shape))):
        BLOCKS[name](8)(torch.zeros(shape))


@pytest.mark.parametrize("name", ["se", "channel", "cbam"])
def test_wrong_channel_count_raises_naming_both(name):
    with pytest.raises(ValueError, match=r"C=8.*\(2, 5, 4, 4\)"):
        BLOCKS[name](8)(torch.zeros(2, 5, 4, 4))


@pytest.mark.parametrize(
    "make",
    [
        lambda: SqueezeExcitation(0),
        lambda: SqueezeExcitation(8, reduction=0),
        lambda: ChannelAttention(-1),
        lambda: SpatialAttention(kernel_size=4),
        lambda: SpatialAttention(kernel_size=0),
        lambda: CBAM(8, kernel_size=6),
        lambda: SmallCNN(3, 2, attention="softmax"),
        lambda: SmallCNN(3, 2, attend="output"),
    ],
)
def test_bad_construction_arguments_raise(make):
    with pytest.raises(ValueError):
        make()


# ---------------------------------------------------------------- localisation measure


def test_mass_in_boxes():
    maps = torch.zeros(3, 6, 6)
    maps[0, 1:3, 2:4] = 1.0  # all mass inside the box
    maps[1] = 1.0  # uniform: the box's share of the area
    maps[2, 0, 0] = 1.0  # all mass outside
    boxes = torch.tensor([[1, 2, 3, 4]] * 3)
    torch.testing.assert_close(mass_in_boxes(maps, boxes), torch.tensor([1.0, 4 / 36, 0.0]))
    torch.testing.assert_close(mass_in_boxes(maps[:, None], boxes), mass_in_boxes(maps, boxes))
    with pytest.raises(ValueError, match="boxes"):
        mass_in_boxes(maps, boxes[:2])


# ---------------------------------------------------------------- data


def test_object_images_ground_truth():
    data = make_object_images(40, channels=5, informative=(1, 3), size=16, seed=3)
    assert data.images.shape == (40, 5, 16, 16)
    assert data.informative == (1, 3)
    assert set(data.labels.tolist()) <= {0, 1}
    again = make_object_images(40, channels=5, informative=(1, 3), size=16, seed=3)
    assert torch.equal(data.images, again.images)
    clean = make_object_images(40, channels=5, informative=(1, 3), size=16, noise=0.0, seed=3)
    for i in range(40):
        top, left, bottom, right = clean.boxes[i].tolist()
        assert (bottom - top, right - left) == (OBJECT_SIZE, OBJECT_SIZE)
        colour = clean.informative[clean.labels[i]]
        patch = clean.images[i, :, top:bottom, left:right]
        assert torch.all(patch[colour] == 1)
        for c in (0, 2, 4):  # no decoy square touches the object in the other channels
            assert patch[c].sum() < OBJECT_SIZE**2


def test_object_images_bad_arguments():
    with pytest.raises(ValueError, match="informative"):
        make_object_images(4, channels=3, informative=(1, 5))
    with pytest.raises(ValueError, match="size"):
        make_object_images(4, size=8)


def test_digits_split():
    x_train, y_train, x_test, y_test = load_digits_images(test_fraction=0.25, seed=0)
    assert x_train.shape[1:] == (1, 8, 8) and x_test.shape[1:] == (1, 8, 8)
    assert len(x_train) + len(x_test) == 1797 and len(x_test) == 449
    assert 0 <= float(x_train.min()) and float(x_train.max()) <= 1
    assert set(y_test.tolist()) == set(range(10))


# ---------------------------------------------------------------- GPU


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_cbam_on_cuda_in_half_precision(dtype):
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    block = _randomize(CBAM(16, reduction=4), 22)
    x = _x(2, 16, 12, 12, seed=23)
    expected = block(x)
    out, weights = block.to("cuda", dtype)(x.to("cuda", dtype), return_weights=True)
    assert out.dtype == dtype and out.device.type == "cuda" and weights.device.type == "cuda"
    torch.testing.assert_close(out.float().cpu(), expected, atol=5e-2, rtol=5e-2)
