"""Adding a technique is one entry in `trainables.techniques.TECHNIQUES` (plus the code that
applies it): everything that lists techniques then shows it, across the packages."""

import pandas as pd
import pytest

import trainables.techniques as techniques
from analysis.charts import technique_labels
from analysis.effects import switches, technique_effects
from analysis.load import CONFIG_PREFIX
from search.feasibility import MemoryFootprint, memory_group
from search.tracking import trial_run_name
from trainables.settings import TrainSettings
from trainables.techniques import Technique, capacity_rows


@pytest.fixture
def pretrained_weights(monkeypatch):
    """A technique the table does not have: starting from pretrained weights, said (for
    this test) to save memory. Its setting exists; only the table entry is new."""
    technique = Technique(
        "pretrained_weights", "pretrained", lambda value: value is True, "saves",
        lambda config: "pre", label="pretrained",
    )  # fmt: skip
    monkeypatch.setitem(techniques.TECHNIQUES, technique.name, technique)
    return technique


def test_it_is_in_the_trials_run_names(pretrained_weights):
    name = trial_run_name({"batch_size": 64, "pretrained": True, "amp": True}, "abcd1234")
    assert name == "bs64-amp-pre-abcd1234"
    assert "pre" not in trial_run_name({"batch_size": 64, "pretrained": False}, "abcd1234")


def test_it_groups_the_memory_chart_and_is_a_switch_of_the_reports_effects(pretrained_weights):
    frame = pd.DataFrame(
        {
            f"{CONFIG_PREFIX}pretrained": [True, False, True, False],
            f"{CONFIG_PREFIX}amp": [True, True, False, False],
            "throughput": [4.0, 3.0, 2.0, 1.0],
            "is_pareto": [True, False, False, False],
        }
    )
    assert list(technique_labels(frame)) == ["AMP + pretrained", "AMP", "pretrained", "plain"]
    assert "pretrained_weights" in switches()
    effects = technique_effects(frame, {"throughput": "max"}, [True] * 4)
    assert "pretrained_weights" in set(effects["technique"])


def test_where_it_changes_memory_it_is_a_capacity_row_and_splits_the_memory_models_groups(
    pretrained_weights,
):
    rows = dict(capacity_rows())
    assert rows["pretrained"]["pretrained"] is True
    assert "AMP + activation checkpointing + channels-last + pretrained" in rows
    on, off = TrainSettings(pretrained=True), TrainSettings(pretrained=False)
    assert MemoryFootprint.of(on).savers == {"pretrained_weights"}
    assert memory_group(MemoryFootprint.of(on)) != memory_group(MemoryFootprint.of(off))
