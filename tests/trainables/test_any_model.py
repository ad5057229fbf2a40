"""Every technique works unchanged on models that are not this project's: a torchvision
model by name and a user's factory train, meter, resume and grow their batch like ResNet."""

import pytest

from tests.trainables.test_classifier import Reports, settings
from trainables.classifier import fit_classifier
from trainables.data import PreparedData
from trainables.metrics import MACHINE_METRICS, METRICS, STATUS_OK, STATUS_OOM

MODELS = ["shufflenet_v2_x0_5", "tests.trainables.user_models:tiny"]
EVERYTHING = {
    "amp": True,
    "activation_checkpointing": True,
    "accumulation_steps": 2,
    "adabatch_growth": 2,
    "warmup_epochs": 1,
    "augment": True,
    "optimizer": "adamw",
    "lr": 1e-3,
}


@pytest.mark.parametrize("model", MODELS)
def test_every_technique_at_once_trains_the_model_and_resumes_exactly(
    tiny_data: PreparedData, model: str
):
    config = settings(model=model, **EVERYTHING)
    straight = Reports()
    fit_classifier(config, tiny_data, straight)
    assert [m["status"] for m in straight.metrics] == [STATUS_OK] * 3
    # grown x2 each epoch; 64 is cut to whole micro-batches of 32 within the 48-image split
    assert [m["effective_batch_size"] for m in straight.metrics] == [16, 32, 32]

    stopped = Reports()
    fit_classifier(settings(model=model, **{**EVERYTHING, "epochs": 1}), tiny_data, stopped)
    resumed = Reports()
    fit_classifier(config, tiny_data, resumed, resume_state=stopped.states[-1])
    for name in set(METRICS) - MACHINE_METRICS:
        assert resumed.metrics[-1][name] == pytest.approx(
            straight.metrics[-1][name], nan_ok=True
        ), name


@pytest.mark.parametrize("model", MODELS)
def test_checkpointing_lowers_the_reported_peak_of_the_same_step(tiny_data, model):
    peaks = {}
    for on in (False, True):
        reports = Reports()
        fit_classifier(
            settings(model=model, epochs=1, activation_checkpointing=on), tiny_data, reports
        )
        peaks[on] = reports.metrics[-1]["peak_mem_mb"]
    assert peaks[True] < peaks[False]


def test_a_budget_below_the_step_prunes_a_torchvision_model_as_out_of_memory(tiny_data):
    reports = Reports()
    fit_classifier(
        settings(model="shufflenet_v2_x0_5", memory_budget_mb=1.0), tiny_data, Pruned(reports)
    )
    (last,) = reports.metrics
    assert last["status"] == STATUS_OOM and "training" in last["status_detail"]
    assert last["peak_mem_mb"] > 1.0  # what the step needed, from the meter


class Pruned:
    """A pruned trial's one report comes without a checkpoint."""

    def __init__(self, reports: Reports) -> None:
        self.reports = reports

    def __call__(self, metrics, checkpoint_dir) -> None:
        assert checkpoint_dir is None
        self.reports.metrics.append(metrics)


def test_a_pretrained_model_trains_on_inputs_normalised_as_its_weights_expect(
    tiny_data: PreparedData, tmp_path, monkeypatch
):
    import torch

    from trainables.models import build_model, weights_file
    from trainables.trial import TrialData

    monkeypatch.setenv("TORCH_HOME", str(tmp_path))
    weights_file("shufflenet_v2_x0_5").parent.mkdir(parents=True)
    imagenet = build_model("shufflenet_v2_x0_5", num_classes=1000, image_size=16)
    torch.save(imagenet.state_dict(), weights_file("shufflenet_v2_x0_5"))
    pretrained = settings(model="shufflenet_v2_x0_5", pretrained=True, epochs=1)

    splits = TrialData.of(tiny_data, torch.device("cpu"), pretrained)
    imagenet_mean = torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1)
    imagenet_std = torch.tensor([0.229, 0.224, 0.225]).view(1, 3, 1, 1)
    assert torch.allclose(splits.normalise.shift, -imagenet_mean / imagenet_std)
    own = TrialData.of(tiny_data, torch.device("cpu"), settings(model="shufflenet_v2_x0_5"))
    assert not torch.allclose(own.normalise.shift, splits.normalise.shift)

    reports = Reports()
    fit_classifier(pretrained, tiny_data, reports)
    assert reports.metrics[-1]["status"] == STATUS_OK
