"""The stage timer behind the ``time/...`` metrics."""

import time

from cory.timing import StageTimer


def test_stages_add_up_under_their_names_and_inside_the_elapsed_time():
    timer = StageTimer()
    with timer.stage("score"):
        time.sleep(0.02)
    with timer.stage("score"):
        time.sleep(0.02)
    try:
        with timer.stage("update"):
            raise ValueError("a failing stage still counts")
    except ValueError:
        pass
    metrics = timer.metrics()
    assert set(metrics) == {"time/score", "time/update"}
    assert metrics["time/score"] >= 0.04
    assert timer.elapsed() >= metrics["time/score"] + metrics["time/update"]
