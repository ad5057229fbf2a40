"""Fakes shared by tests: stand-ins for what Ray hands to callbacks."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class FakeTrial:
    """The parts of a Tune `Trial` that callbacks read."""

    trial_id: str
    config: dict[str, Any] = field(default_factory=dict)

    def __str__(self) -> str:
        return f"train_classifier_{self.trial_id}"


def schema_result(epoch: int, status: str = "ok", **values: Any) -> dict[str, Any]:
    """A result as the trainable reports it, plus Tune's bookkeeping keys."""
    return {
        "epoch": epoch,
        "val_acc": 0.5 + epoch / 10,
        "best_val_acc": 0.5 + epoch / 10,
        "throughput": 1000.0,
        "gen_gap": 0.05,
        "time_to_target_s": float("inf"),
        "status": status,
        # Tune adds these; they are not metrics of the schema
        "training_iteration": epoch,
        "time_total_s": 1.0 * epoch,
        "pid": 1234,
        "done": False,
        **values,
    }
