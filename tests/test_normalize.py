"""Running moments and TRL-style score scaling / normalisation / clipping."""

import math

import pytest
import torch

from cory.algorithms.normalize import RunningMoments, transform_scores


def test_running_moments_merge_batches_exactly():
    moments = RunningMoments()
    moments.update(torch.tensor([1.0, 2.0, 3.0]))
    assert moments.mean == pytest.approx(2.0)
    assert moments.std == pytest.approx(1.0)
    moments.update(torch.tensor([4.0, 5.0]))
    assert moments.count == 5
    assert moments.mean == pytest.approx(3.0)
    assert moments.var == pytest.approx(2.0)  # population variance of 1..5
    assert moments.std == pytest.approx(math.sqrt(2.5))


def test_score_scaling_divides_by_running_std():
    moments = RunningMoments()
    scores = transform_scores(torch.tensor([2.0, 4.0, 6.0]), moments, True, False, None)
    assert scores.tolist() == pytest.approx([1.0, 2.0, 3.0], rel=1e-6)


def test_score_normalisation_centres_and_scales():
    moments = RunningMoments()
    scores = transform_scores(torch.tensor([2.0, 4.0, 6.0]), moments, True, True, None)
    assert scores.tolist() == pytest.approx([-1.0, 0.0, 1.0], abs=1e-6)


def test_score_clip_alone_and_off():
    moments = RunningMoments()
    clipped = transform_scores(torch.tensor([-5.0, 0.5, 5.0]), moments, False, False, 1.0)
    assert clipped.tolist() == [-1.0, 0.5, 1.0]
    assert moments.count == 0
    untouched = transform_scores(torch.tensor([3.0]), moments, False, False, None)
    assert untouched.tolist() == [3.0]
