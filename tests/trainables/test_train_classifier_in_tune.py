"""`train_classifier` as other people's searches use it: inside Tune, with Tune's own searchers."""

import pytest
import torch
from ray import tune
from ray.tune.schedulers import ASHAScheduler

from trainables import METRICS, train_classifier
from trainables.data import PreparedData
from trainables.settings import TrainSettings

pytestmark = pytest.mark.ray

SMALL_DATA = {"image_size": 16, "train_per_class": 16, "val_per_class": 8, "test_per_class": 8}


def run_config(tmp_path, name: str) -> tune.RunConfig:
    return tune.RunConfig(storage_path=str(tmp_path), name=name, verbose=0)


def test_prepared_data_goes_in_with_parameters_and_every_epoch_reports_the_schema(
    ray_instance, tiny_data: PreparedData, tmp_path
):
    tuner = tune.Tuner(
        tune.with_resources(tune.with_parameters(train_classifier, data=tiny_data), {"cpu": 1}),
        param_space={"epochs": 2, "train_eval_size": 16, "batch_size": tune.grid_search([8, 16])},
        tune_config=tune.TuneConfig(reuse_actors=True),
        run_config=run_config(tmp_path, "with_parameters"),
    )
    grid = tuner.fit()
    assert grid.num_errors == 0 and len(grid) == 2
    for result in grid:
        history = result.metrics_dataframe
        assert history["epoch"].tolist() == [1, 2]
        assert set(METRICS) <= set(history.columns)
        assert result.checkpoint is not None


def test_a_config_dict_alone_is_enough_the_trial_prepares_its_own_data(ray_instance, tmp_path):
    tuner = tune.Tuner(
        tune.with_resources(train_classifier, {"cpu": 1}),
        param_space={"epochs": 1, "train_eval_size": 8, "data": SMALL_DATA},
        run_config=run_config(tmp_path, "config_only"),
    )
    (result,) = tuner.fit()
    assert result.error is None and result.metrics["status"] == "ok"


def test_another_searcher_and_a_scheduler_can_drive_the_trainable(
    ray_instance, tiny_data: PreparedData, tmp_path
):
    # Tune's random search with ASHA early stopping, on val_acc only.
    tuner = tune.Tuner(
        tune.with_resources(tune.with_parameters(train_classifier, data=tiny_data), {"cpu": 1}),
        param_space={
            "epochs": 3,
            "train_eval_size": 16,
            "optimizer": tune.choice(["sgd", "adam"]),
            "lr": tune.loguniform(1e-3, 1e-1),
        },
        tune_config=tune.TuneConfig(
            metric="val_acc",
            mode="max",
            num_samples=3,
            scheduler=ASHAScheduler(max_t=3, grace_period=1, time_attr="epoch"),
            reuse_actors=True,
        ),
        run_config=run_config(tmp_path, "asha"),
    )
    grid = tuner.fit()
    assert grid.num_errors == 0 and len(grid) == 3
    assert 0.0 <= grid.get_best_result().metrics["val_acc"] <= 1.0


def test_a_trial_uses_as_many_torch_threads_as_cpus_it_was_given(
    ray_instance, tiny_data: PreparedData, tmp_path
):
    def train_then_count_threads(config, data):
        train_classifier(config, data)
        tune.report({"threads": torch.get_num_threads()})

    tuner = tune.Tuner(
        tune.with_resources(
            tune.with_parameters(train_then_count_threads, data=tiny_data), {"cpu": 2}
        ),
        param_space={"epochs": 1, "train_eval_size": 8},
        run_config=run_config(tmp_path, "threads"),
    )
    (result,) = tuner.fit()
    assert result.metrics["threads"] == 2


def test_every_trainable_key_has_a_default():
    assert all(not field.is_required() for field in TrainSettings.model_fields.values())


def test_a_trial_given_no_gpu_trains_on_the_cpu_and_leaves_a_visible_card_untouched(
    fake_cuda, tiny_data: PreparedData
):
    """Ray leaves the cards visible to a trial that asked for none: `auto` must not take one."""
    from trainables.classifier import fit_classifier, settings_for_trial

    settings = settings_for_trial({"epochs": 1, "train_eval_size": 8}, gpu_share=0.0)
    assert settings.device == "cpu"
    fake_cuda.calls.clear()
    last = fit_classifier(settings, tiny_data, lambda metrics, _: None, gpu_share=0.0)
    assert last["status"] == "ok" and last["device_name"] != "Fake H100"
    touched = [call for call in fake_cuda.calls if call != "is_available"]
    assert touched == [], touched
    card = fake_cuda.cards[0]
    assert card.reserved == 0 and card.kernels_loaded == 0


def test_a_trial_given_a_gpu_share_keeps_auto_and_an_explicit_device_is_kept():
    from trainables.classifier import settings_for_trial

    assert settings_for_trial({}, gpu_share=0.25).device == "auto"
    assert settings_for_trial({"device": "cuda:0"}, gpu_share=0.0).device == "cuda:0"
