import pytest

from trainables.settings import TRAIN_KEYS, TrainSettings
from trainables.techniques import TECHNIQUES, capacity_rows, switched_on


@pytest.mark.parametrize("name", sorted(TECHNIQUES))
def test_every_technique_is_switched_by_a_setting_and_reads_its_on_and_off_values(name):
    technique = TECHNIQUES[name]
    assert technique.key in TRAIN_KEYS
    on = TrainSettings(**{technique.key: technique.on})
    off = TrainSettings(**{technique.key: technique.off})
    assert technique.is_on(getattr(on, technique.key))
    assert not technique.is_on(getattr(off, technique.key))


def test_the_defaults_switch_no_technique_on():
    defaults = TrainSettings()
    assert not [t for t in TECHNIQUES.values() if t.is_on(getattr(defaults, t.key))]


def test_the_memory_effects_sort_settings_for_the_feasibility_rule():
    settings = TrainSettings(amp=True, cudnn_benchmark=True, accumulation_steps=4)
    assert switched_on(settings, "saves") == {"amp"}
    assert switched_on(settings, "costs") == {"cudnn_benchmark"}


def test_the_capacity_rows_are_the_seed_articles_from_the_table():
    rows = dict(capacity_rows())
    assert list(rows) == [
        "baseline", "cuDNN autotuner off", "AMP", "checkpointing", "AMP + checkpointing"
    ]  # fmt: skip
    assert rows["baseline"] == {"cudnn_benchmark": True, "amp": False, "grad_checkpointing": False}
    assert rows["AMP + checkpointing"]["amp"] and rows["AMP + checkpointing"]["grad_checkpointing"]
