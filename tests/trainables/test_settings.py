import pytest
from pydantic import ValidationError

from trainables.settings import TrainSettings


def test_an_empty_config_takes_every_default():
    settings = TrainSettings.from_config({})
    assert settings.model == "small_cnn" and settings.batch_size == 32 and settings.epochs == 5


def test_an_unknown_key_is_an_error_not_ignored():
    with pytest.raises(ValidationError, match="batch_sise"):
        TrainSettings.from_config({"batch_sise": 64})


def test_a_quoted_batch_size_is_refused_but_a_yaml_style_float_string_is_read():
    with pytest.raises(ValidationError, match="batch_size"):
        TrainSettings.from_config({"batch_size": "64"})
    assert TrainSettings.from_config({"lr": "1e-4"}).lr == 1e-4


def test_numpy_scalars_from_a_searcher_are_accepted():
    np = pytest.importorskip("numpy")
    settings = TrainSettings.from_config({"batch_size": np.int64(16), "lr": np.float64(0.1)})
    assert settings.batch_size == 16 and isinstance(settings.batch_size, int)


def test_without_lr_each_optimizer_takes_its_customary_default():
    assert TrainSettings(optimizer="sgd").base_lr == 0.01
    assert TrainSettings(optimizer="adam").base_lr == 0.001
    assert TrainSettings(optimizer="adam", lr=0.05).base_lr == 0.05


def test_lr_per_reference_batch_scales_linearly_with_the_effective_batch():
    settings = TrainSettings(lr=0.1, lr_scaling_batch=256, batch_size=64, accumulation_steps=8)
    assert settings.base_lr == pytest.approx(0.1 * 512 / 256)
