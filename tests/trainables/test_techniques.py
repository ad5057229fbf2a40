import pytest

from trainables.settings import TRAIN_KEYS, TrainSettings
from trainables.techniques import TECHNIQUES, capacity_rows, techniques_on


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
    assert techniques_on(settings, "mixed") == {"amp"}
    assert techniques_on(settings, "costs") == {"cudnn_benchmark"}
    assert techniques_on(TrainSettings(activation_checkpointing=True), "saves") == {
        "activation_checkpointing"
    }


def test_amp_is_mixed_because_it_needs_more_memory_at_small_batches_and_less_at_large():
    import torch

    from trainables.memory import step_peak_bytes
    from trainables.models import build_model
    from trainables.precision import precision_for

    def peak(amp: bool, batch: int) -> int:
        torch.manual_seed(0)
        model = build_model("resnet18", num_classes=2, image_size=32).train()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        inputs, targets = torch.randn(batch, 3, 32, 32), torch.randint(0, 2, (batch,))
        precision = precision_for(amp, "float16", torch.device("cpu"))
        return step_peak_bytes(model, optimizer, inputs, targets, precision)

    assert peak(True, 4) > peak(False, 4)  # the bf16 copies of 11 M weights dominate
    assert peak(True, 256) < peak(False, 256)  # half-size activations dominate


def test_the_capacity_rows_are_the_seed_articles_from_the_table():
    rows = dict(capacity_rows())
    assert list(rows) == [
        "baseline", "cuDNN autotuner off", "AMP", "activation checkpointing", "channels-last",
        "AMP + activation checkpointing + channels-last",
    ]  # fmt: skip
    baseline = {"cudnn_benchmark": True, "amp": False, "activation_checkpointing": False,
                "channels_last": False}  # fmt: skip
    assert rows["baseline"] == baseline
    together = rows["AMP + activation checkpointing + channels-last"]
    assert together["amp"] and together["activation_checkpointing"] and together["channels_last"]
    assert not any("compile" in row for row in rows.values())  # compile is no capacity row


def test_the_rows_that_save_memory_run_without_the_autotuner_so_no_probe_re_tunes_cudnn():
    rows = dict(capacity_rows())
    assert rows["cuDNN autotuner off"]["cudnn_benchmark"] is False  # its cost: these two rows
    for saver in ("AMP", "activation checkpointing", "channels-last"):
        assert rows[saver]["cudnn_benchmark"] is False


def test_gradient_clipping_is_a_technique_named_by_its_norm_that_leaves_memory_alone():
    from trainables.techniques import TECHNIQUES, column_of, run_tags

    clipping = TECHNIQUES["gradient_clipping"]
    assert clipping.key == "grad_clip_norm" and clipping.memory == "none"
    assert run_tags({"grad_clip_norm": 1.0}) == ["clip1.0"]
    assert run_tags({"grad_clip_norm": None}) == [] and column_of("grad_clip_norm") == "clip"
