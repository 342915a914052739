"""Tests for attention_course.data.regression (chapter 1's data)."""

from __future__ import annotations

import math

import pytest
import torch

from attention_course.data import make_regression_data, true_function


def test_shapes_ranges_and_order():
    data = make_regression_data(n_train=40, n_test=30)
    assert data.x_train.shape == data.y_train.shape == (40,)
    assert data.x_test.shape == data.y_test.shape == data.truth_test.shape == (30,)
    for x in (data.x_train, data.x_test):
        assert torch.all(x >= 0) and torch.all(x < 5)
        assert torch.all(x[1:] >= x[:-1])


def test_deterministic_per_seed():
    a, b, c = (make_regression_data(seed=s) for s in (7, 7, 8))
    torch.testing.assert_close(a.y_train, b.y_train)
    assert not torch.equal(a.y_train, c.y_train)


def test_truth_is_the_curve_and_noise_has_the_asked_size():
    data = make_regression_data(n_train=2000, n_test=2000, noise=0.5, seed=1)
    torch.testing.assert_close(data.truth_test, true_function(data.x_test))
    residual = data.y_train - true_function(data.x_train)
    assert abs(residual.std().item() - 0.5) < 0.05
    noiseless = make_regression_data(noise=0.0)
    torch.testing.assert_close(noiseless.y_train, true_function(noiseless.x_train))


def test_true_function_formula():
    x = torch.tensor([0.0, 1.0, 4.0])
    expected = torch.tensor([2 * math.sin(v) + v**0.8 for v in (0.0, 1.0, 4.0)])
    torch.testing.assert_close(true_function(x), expected)


@pytest.mark.parametrize("kwargs", [{"n_train": 1}, {"n_test": 0}, {"noise": -0.1}])
def test_bad_arguments_raise(kwargs):
    with pytest.raises(ValueError):
        make_regression_data(**kwargs)
