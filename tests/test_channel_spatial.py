"""Tests for attention_course.channel_spatial, its experiment and the chapter 7 image data."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from attention_course.channel_spatial import (
    ATTENTION_BLOCKS,
    CBAM,
    ChannelAttention,
    SmallCNN,
    SpatialAttention,
    SqueezeExcitation,
    center_surround_saliency,
    convolution_as_attention,
    mass_in_boxes,
    max_pool_as_attention,
    peak_in_boxes,
    squeeze,
)
from attention_course.data.images import OBJECT_SIZE, load_digits_images, make_object_images
from attention_course.experiments.channel_spatial import accuracy, train_variants

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


@pytest.mark.parametrize("attention", ATTENTION_BLOCKS)
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


def test_small_cnn_blocks_are_the_named_modules():
    kinds = {name: type(SmallCNN(6, 3, name, attend="input", reduction=2).attention)
             for name in ATTENTION_BLOCKS}
    assert kinds == {"none": torch.nn.Identity, "se": SqueezeExcitation,
                     "spatial": SpatialAttention, "cbam": CBAM}
    with pytest.raises(ValueError, match="attention must be one of"):
        SmallCNN(6, 3, "channel")


# ---------------------------------------------------------------- saliency, max pooling


def test_saliency_marks_an_isolated_square_and_ignores_flat_regions():
    images = torch.zeros(2, 3, 20, 20)                   # dark, flat channels
    images[0, 1, 4:9, 10:15] = 1.0                       # a square in channel 1
    images[1, 2, 12:17, 2:7] = 1.0
    sal = center_surround_saliency(images)
    assert sal.shape == (2, 20, 20)
    assert torch.all(sal >= 0) and torch.all(sal <= 1)
    boxes = torch.tensor([[4, 10, 9, 15], [12, 2, 17, 7]])
    assert peak_in_boxes(sal, boxes).all()
    # A channel that is flat everywhere contributes nothing (no division by zero).
    assert torch.isfinite(sal).all()
    assert sal[0, 15:, :5].abs().max() == 0


def test_saliency_is_the_mean_of_itti_normalised_contrast():
    images = _x(2, 4, 12, 12, seed=30)
    local = [F.avg_pool2d(images, k, stride=1, padding=k // 2) for k in (3, 7)]
    contrast = (local[0] - local[1]).abs()
    expected = torch.zeros(2, 12, 12)
    for b in range(2):
        for c in range(4):
            m = contrast[b, c] / contrast[b, c].max()
            peaks = [m[i, j].item() for i in range(12) for j in range(12)
                     if m[i, j] > 0.05
                     and m[i, j] == m[max(i - 2, 0):i + 3, max(j - 2, 0):j + 3].max()]
            others = sorted(peaks)[:-1]
            mean_other = sum(others) / len(others) if others else 0.0
            expected[b] += m * (1 - mean_other) ** 2 / 4
    torch.testing.assert_close(center_surround_saliency(images, 3, 7), expected)


def test_saliency_damps_a_cluttered_channel_against_a_single_square():
    images = torch.zeros(1, 2, 20, 20)
    images[0, 0, 8:13, 8:13] = 1.0                       # one square
    images[0, 1, ::4, ::4] = 1.0                         # a grid of equal dots
    sal = center_surround_saliency(images)
    assert sal[0, 10, 10] > 3 * sal[0, 0, 0]


@pytest.mark.parametrize("center, surround", [(2, 7), (5, 5), (7, 5), (3, 8)])
def test_saliency_rejects_bad_windows(center, surround):
    with pytest.raises(ValueError, match="center.*surround"):
        center_surround_saliency(torch.zeros(1, 1, 9, 9), center, surround)


@PROPERTY
@given(k=st.sampled_from([1, 2, 3]), rows=st.integers(1, 3), cols=st.integers(1, 3),
       seed=st.integers(0, 10_000))
def test_max_pool_is_one_hot_attention_over_each_window(k, rows, cols, seed):
    x = _x(2, 3, k * rows, k * cols, seed=seed).requires_grad_()
    pooled, weights = max_pool_as_attention(x, k)
    torch.testing.assert_close(pooled, F.max_pool2d(x, k))
    assert weights.shape == (2, 3, rows, cols, k * k)
    assert torch.all((weights == 0) | (weights == 1))
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, 3, rows, cols))
    pooled.sum().backward()
    reference = x.detach().requires_grad_()
    F.max_pool2d(reference, k).sum().backward()
    torch.testing.assert_close(x.grad, reference.grad)


def test_max_pool_weights_follow_the_window_in_row_major_order():
    x = torch.tensor([[1.0, 3.0], [2.0, 0.0]])[None, None]
    _, weights = max_pool_as_attention(x, 2)
    assert weights[0, 0, 0, 0].tolist() == [0, 1, 0, 0]


def test_max_pool_rejects_a_kernel_that_does_not_divide():
    with pytest.raises(ValueError, match=r"divide H and W.*\(1, 1, 4, 6\)"):
        max_pool_as_attention(torch.zeros(1, 1, 4, 6), 4)


# ---------------------------------------------------------------- measuring maps


def test_peak_in_boxes():
    maps = torch.zeros(3, 1, 6, 6)
    maps[0, 0, 2, 3] = 1.0                               # inside its box
    maps[1, 0, 5, 5] = 1.0                               # outside
    maps[2, 0, 4, 1] = 1.0                               # on the excluded bottom edge
    boxes = torch.tensor([[1, 2, 4, 5], [0, 0, 3, 3], [1, 0, 4, 3]])
    assert peak_in_boxes(maps, boxes).tolist() == [True, False, False]
    with pytest.raises(ValueError, match="boxes"):
        peak_in_boxes(maps, boxes[:2])


def test_mass_in_boxes_of_an_even_map_is_the_area_share():
    maps = torch.ones(2, 8, 8)
    boxes = torch.tensor([[0, 0, 4, 4], [2, 2, 3, 5]])
    torch.testing.assert_close(mass_in_boxes(maps, boxes), torch.tensor([16 / 64, 3 / 64]))


# ---------------------------------------------------------------- convolution as attention


@pytest.mark.parametrize("k", [1, 3, 5])
def test_sharp_attention_heads_compute_the_convolution(k):
    x = _x(2, 3, 7, 6, seed=31)
    weight, bias = _x(4, 3, k, k, seed=32), _x(4, seed=33)
    out, weights = convolution_as_attention(x, weight, bias, sharpness=50.0)
    torch.testing.assert_close(out, F.conv2d(x, weight, bias, padding=k // 2),
                               atol=1e-4, rtol=1e-4)
    assert weights.shape == (k * k, 7 * 6, (7 + k - 1) * (6 + k - 1))
    torch.testing.assert_close(weights.sum(-1), torch.ones(k * k, 42))


def test_soft_heads_blur_the_convolution_and_sharpen_with_alpha():
    x = _x(1, 2, 6, 6, seed=34)
    weight = _x(3, 2, 3, 3, seed=35)
    reference = F.conv2d(x, weight, padding=1)
    errors = [(convolution_as_attention(x, weight, sharpness=s)[0] - reference).abs().max()
              for s in (0.3, 1.0, 3.0, 10.0)]
    assert all(a > b for a, b in zip(errors, errors[1:], strict=False))
    assert errors[0] > 0.1


def test_each_head_peaks_at_its_own_offset_and_ignores_content():
    x1, x2 = _x(1, 1, 5, 5, seed=36), _x(1, 1, 5, 5, seed=37)
    weight = torch.ones(1, 1, 3, 3)
    _, w1 = convolution_as_attention(x1, weight, sharpness=2.0)
    _, w2 = convolution_as_attention(x2, weight, sharpness=2.0)
    torch.testing.assert_close(w1, w2)
    query = 2 * 5 + 2                                     # the centre pixel
    peaks = w1[:, query].argmax(dim=-1)                   # keys on the padded 7x7 grid
    expected = [(3 + dr) * 7 + (3 + dc) for dr in (-1, 0, 1) for dc in (-1, 0, 1)]
    assert peaks.tolist() == expected


def test_convolution_as_attention_rejects_bad_kernels():
    x = torch.zeros(1, 3, 5, 5)
    for weight in (torch.zeros(2, 3, 2, 2), torch.zeros(2, 4, 3, 3), torch.zeros(2, 3, 3)):
        with pytest.raises(ValueError, match="weight must be"):
            convolution_as_attention(x, weight)


# ---------------------------------------------------------------- training helper


def test_train_variants_learns_the_object_task_and_records_every_epoch():
    data = make_object_images(240, seed=3, clutter=0.05)
    test = make_object_images(60, seed=4, clutter=0.05)
    runs = train_variants(["none", "cbam"], [0, 1], (data.images, data.labels),
                          (test.images, test.labels), epochs=2, lr=1e-2, batch_size=32,
                          attend="input", reduction=1, progress=False, device="cpu")
    assert [(r.attention, r.seed) for r in runs] == [
        ("none", 0), ("none", 1), ("cbam", 0), ("cbam", 1)]
    for run in runs:
        assert len(run.test_accuracy) == 2 and len(run.losses) == 2 * 8
        assert run.test_accuracy[-1] == accuracy(run.model, test.images, test.labels)
        assert not run.model.training
    assert runs[0].losses != runs[1].losses                # the seed matters


def test_train_variants_is_reproducible_for_a_seed():
    data = make_object_images(64, seed=5)
    args = (["se"], [7], (data.images, data.labels), (data.images, data.labels))
    first = train_variants(*args, epochs=1, lr=1e-2, progress=False, device="cpu",
                           attend="input")
    second = train_variants(*args, epochs=1, lr=1e-2, progress=False, device="cpu",
                            attend="input")
    assert first[0].losses == second[0].losses


def test_train_variants_uses_its_seeds_as_given(monkeypatch):
    # the seeds come from course_seeds, already shifted by the seed base: the
    # seed base must not shift them a second time
    data = make_object_images(64, seed=5)
    args = (["none"], [7], (data.images, data.labels), (data.images, data.labels))
    options = dict(epochs=1, lr=1e-2, progress=False, device="cpu", attend="input")
    monkeypatch.delenv("ATTENTION_COURSE_SEED_BASE", raising=False)
    unshifted = train_variants(*args, **options)
    monkeypatch.setenv("ATTENTION_COURSE_SEED_BASE", "100")
    with_base = train_variants(*args, **options)
    assert with_base[0].seed == 7
    assert with_base[0].losses == unshifted[0].losses


def test_train_variants_rejects_mismatched_data():
    x, y = torch.zeros(4, 3, 8, 8), torch.zeros(5, dtype=torch.long)
    with pytest.raises(ValueError, match=r"\(4, 3, 8, 8\) and \(5,\)"):
        train_variants(["none"], [0], (x, y), (x, y[:4]), epochs=1, lr=1e-2)
