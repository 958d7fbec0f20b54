"""Running a whole training job in a test."""

from cory.trainer import Trainer


def run_trainer(config) -> Trainer:
    """Train ``config`` to the end and close its agents; the trainer keeps its rows."""
    trainer = Trainer(config)
    try:
        trainer.final = trainer.train()
    finally:
        trainer.close()
    return trainer
