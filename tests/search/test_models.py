"""A model the search cannot train is one config error naming the key, before anything
starts: checked on the meta device for every model the config can draw."""

from pathlib import Path

import pytest
import yaml

from search.run import main
from tests.conftest import CONFIGS

SMOKE = str(CONFIGS / "smoke.yaml")
USER = "tests.trainables.user_models"


def run(capsys, *overrides: str) -> tuple[int, str]:
    code = main(["--config", SMOKE, *overrides])
    return code, capsys.readouterr().err


@pytest.mark.parametrize(
    ("overrides", "key", "message"),
    [
        (["train.model=resnet_18"], "train.model", "unknown model 'resnet_18'"),
        (["train.model=inception_v3"], "train.model", "cannot take 32 px images (RuntimeError"),
        ([f"train.model={USER}:not_a_module"], "train.model", "returned a dict"),
        (["train.model=no_such_module:build"], "train.model", "cannot import module"),
        (["train.model=not a name"], "train.model", "module:function"),
        (["train.model=small_cnn", "train.pretrained=true"], "train.pretrained",
         "'small_cnn' has no torchvision weights"),
        (["train.model=resnet18", "train.activation_checkpointing=true",
          "train.recomputed_segments=3"], "train.recomputed_segments", "BasicBlock x8"),
        (["train.model=resnet18", "train.activation_checkpointing=true",
          "train.recomputed_modules=[Fire]"], "train.recomputed_modules",
         "no module of type Fire"),
        (["train.optimizer=sgd_nesterov", "train.momentum=0"], "train", "needs momentum > 0"),
        (["train.model=vit_b_16", "train.pretrained=true"], "train.pretrained",
         "are for 224 px images, not 32"),
    ],
)  # fmt: skip
def test_a_model_that_cannot_train_is_one_message_naming_the_key(
    overrides, key, message, nothing_runs, capsys
):
    code, err = run(capsys, *overrides)
    assert code == 2 and not nothing_runs
    assert key in err and message in err, err
    assert "(set on the command line)" in err and "Traceback" not in err


def test_every_sampled_model_is_checked(nothing_runs, capsys, tmp_path):
    raw = yaml.safe_load(Path(SMOKE).read_text())
    del raw["train"]["model"]
    raw["space"]["model"] = {"choice": ["mobilenet_v3_small", "vgg_11"]}
    config = tmp_path / "two_models.yaml"
    config.write_text(yaml.safe_dump(raw))
    code = main(["--config", str(config)])
    err = capsys.readouterr().err
    assert code == 2 and "space.model" in err and "'vgg_11'" in err
    assert "mobilenet_v3_small" not in err.split("space.model", 1)[1].split("\n")[0]


@pytest.mark.parametrize(
    "overrides",
    [
        ["train.model=mobilenet_v3_small", "train.activation_checkpointing=true"],
        [f"train.model={USER}:tiny", "space.activation_checkpointing={choice: [true, false]}"],
        ["train.model=vit_b_16", "train.recomputed_modules=[EncoderBlock]",
         "train.activation_checkpointing=true"],
    ],
)  # fmt: skip
def test_a_model_that_can_train_as_configured_starts_the_search(overrides, nothing_runs, capsys):
    code, err = run(capsys, *overrides)
    assert code == 0 and len(nothing_runs) == 1, err


def test_pretrained_weights_that_cannot_be_fetched_are_a_config_error_before_any_trial(
    nothing_runs, capsys, tmp_path, monkeypatch
):
    import torch

    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "torch"))
    monkeypatch.setattr(torch.hub, "download_url_to_file", _no_network)
    code, err = run(capsys, "train.model=squeezenet1_1", "train.pretrained=true")
    assert code == 2 and not nothing_runs
    assert "train.pretrained" in err and "not in torch's cache" in err


def test_pretrained_weights_in_torchs_cache_let_the_search_start(
    nothing_runs, capsys, tmp_path, monkeypatch
):
    import torch

    from trainables.models import build_model, weights_file

    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "torch"))
    monkeypatch.setattr(torch.hub, "download_url_to_file", _no_network)
    weights_file("squeezenet1_1").parent.mkdir(parents=True)
    imagenet = build_model("squeezenet1_1", num_classes=1000, image_size=32)
    torch.save(imagenet.state_dict(), weights_file("squeezenet1_1"))
    code, err = run(capsys, "train.model=squeezenet1_1", "train.pretrained=true")
    assert code == 0 and len(nothing_runs) == 1, err


def _no_network(url, *args, **kwargs):
    raise OSError(f"no network here: {url}")
