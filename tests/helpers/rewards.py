"""User reward functions for tests, loaded by dotted path (reward.name=python)."""

import math


def nan_reward(queries, responses):
    return [math.nan] * len(responses)


def fails_on_x(queries, responses):
    for response in responses:
        if "x" in response:
            raise ValueError("cannot score an x")
    return [0.0] * len(responses)


def length_reward(queries, responses):
    return [len(r) / 10.0 for r in responses]
