"""A search of CPU trials times the speed references once, in a trial's process, and gives
every trial their scales; a resumed search keeps the scales it started with."""

import json
from pathlib import Path

import pytest
import ray

from search import speed_scale
from search.cli import RunOptions
from search.config import load_config
from search.experiment import STATE_FILE, SearchState
from search.run import main
from tests.conftest import CONFIGS
from trainables.reference_kinds import REFERENCE_KINDS

SMOKE = str(CONFIGS / "smoke.yaml")


@pytest.mark.parametrize(
    "override",
    ["search.speed_reference=false", "train.speed_scale=1234", "train.speed_precision=0"],
)
def test_no_reference_is_timed_where_it_is_turned_off_given_or_nothing_is_timed(override):
    assert speed_scale.measures_scale(load_config(SMOKE, []))
    assert not speed_scale.measures_scale(load_config(SMOKE, [override]))


def test_trials_on_cards_time_no_reference():
    assert not speed_scale.measures_scale(load_config(SMOKE, ["resources.gpu=0.25"]))


def test_a_written_scale_is_the_trials_and_a_measured_one_is_theirs_unless_one_is_written():
    config = load_config(SMOKE, [])
    assert config.speed_scale is None and "speed_scale" not in config.train_config()
    scales = dict.fromkeys(REFERENCE_KINDS, 1500.0)
    measured = config.with_speed_scale(scales)
    assert measured.speed_scale == scales and measured.train_config()["speed_scale"] == scales
    assert "speed_scale" not in measured.as_yaml_dict()["train"]  # the config as written
    written = load_config(SMOKE, ["train.speed_scale=900"]).with_speed_scale(scales)
    assert written.speed_scale == {"fp32_contiguous": 900.0}
    assert written.train_config()["speed_scale"] == 900
    by_kind = load_config(SMOKE, ["train.speed_scale={bfloat16_channels_last: 700}"])
    assert by_kind.speed_scale == {"bfloat16_channels_last": 700.0}


def test_a_scale_for_a_kind_that_is_not_one_is_a_clear_mistake(capsys):
    bad = "train.speed_scale={bf16: 700}"
    assert main(["--config", SMOKE, bad]) == 2
    error = capsys.readouterr().err
    assert "speed_scale" in error and "bf16: not a reference kind" in error


def test_a_resumed_search_keeps_its_scale_and_times_nothing(tmp_path, monkeypatch):
    config = load_config(SMOKE, [])
    scales = dict.fromkeys(REFERENCE_KINDS, 1432.5)
    SearchState("run", "uri", "exp", config.as_yaml_dict(), {}, scales).save(tmp_path)

    def must_not_run(*args, **kwargs):
        raise AssertionError("timed again")

    monkeypatch.setattr(ray, "remote", must_not_run)
    resuming = RunOptions(resume=True)
    assert speed_scale.start(config, resuming, tmp_path)(config).speed_scale == scales
    # one number: saved before the references had kinds, the float32 one's
    SearchState("run", "uri", "exp", config.as_yaml_dict(), {}, 1432.5).save(tmp_path)
    resumed = speed_scale.start(config, resuming, tmp_path)(config)
    assert resumed.speed_scale == {"fp32_contiguous": 1432.5}
    SearchState("run", "uri", "exp", config.as_yaml_dict()).save(tmp_path)  # saved before
    assert speed_scale.start(config, resuming, tmp_path)(config).speed_scale is None


@pytest.mark.ray
def test_a_search_of_cpu_trials_gives_every_trial_the_scale_it_timed_once(
    tmp_path, monkeypatch, ray_instance
):
    monkeypatch.chdir(tmp_path)
    overrides = ["search.num_samples=2", "train.epochs=1", "search.ablation=null"]
    assert main(["--config", SMOKE, "--name", "scaled", *overrides]) == 0
    experiment = Path(load_config(SMOKE, overrides).run.storage_path) / "scaled"
    scales = json.loads((experiment / STATE_FILE).read_text())["speed_scale"]
    assert set(scales) == set(REFERENCE_KINDS) and min(scales.values()) > 0
    params = [json.loads(path.read_text()) for path in experiment.glob("*/params.json")]
    assert len(params) == 2 and all(trial["speed_scale"] == scales for trial in params)
