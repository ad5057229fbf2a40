"""`resources.gpu: auto`: the trials get a quarter of a card where Ray counts cards, and
the CPU elsewhere; the device checks wait for that count, then say the same as for a
config that names its share."""

import pytest
import ray

from search import devices
from search.cli import RunOptions
from search.config import AUTO_GPU_SHARE, ConfigError, SearchConfig, load_config
from search.console import plan
from search.experiment import SearchState
from search.run import main
from tests.conftest import CONFIGS

MAIN = str(CONFIGS / "cats_dogs.yaml")
LOCAL = RunOptions(run_name=None, address=None, resume=False)


def test_the_main_config_asks_for_auto_and_keeps_it_as_written():
    config = load_config(MAIN, [])
    assert config.resources.gpu == "auto"
    assert config.with_cards(1).as_yaml_dict()["resources"]["gpu"] == "auto"
    with pytest.raises(RuntimeError, match="not resolved"):
        _ = config.resources.gpu_share  # nothing may use a share nobody decided


def ray_counts(monkeypatch, gpus: float) -> None:
    """Ray's count of the cluster, as `resolve_gpu` reads it once Ray is up (the machine's
    own count would make these tests say what the machine has: a lent card counts 1)."""
    counted = {"CPU": 16.0, **({"GPU": gpus} if gpus else {})}
    monkeypatch.setattr(ray, "cluster_resources", lambda: counted)


def test_where_ray_counts_no_card_the_trials_ask_for_none_and_the_plan_says_why(monkeypatch):
    ray_counts(monkeypatch, 0)
    resolved = devices.resolve_gpu(load_config(MAIN, []), LOCAL)
    assert resolved.resources.gpu_share == 0
    assert resolved.resources.describe_gpu() == "no GPU (resources.gpu auto: no card here)"


def test_where_ray_counts_cards_each_trial_gets_a_quarter_of_one(monkeypatch):
    ray_counts(monkeypatch, 2)
    monkeypatch.setattr(devices, "_torch_sees_cuda", lambda: True)
    resolved = devices.resolve_gpu(load_config(MAIN, []), LOCAL)
    assert resolved.resources.gpu_share == AUTO_GPU_SHARE == 0.25
    assert resolved.resources.describe_gpu() == "0.25 GPU (resources.gpu auto: 2 cards here)"


def test_a_config_that_names_its_share_is_left_as_it_is():
    config = load_config(MAIN, ["resources.gpu=0.5"])
    assert devices.resolve_gpu(config, LOCAL) is config


def test_a_cuda_trial_device_with_auto_and_no_card_is_refused_once_ray_has_counted(
    monkeypatch,
):
    ray_counts(monkeypatch, 0)
    config = load_config(MAIN, ["train.device=cuda"])
    with pytest.raises(ConfigError) as refused:
        devices.resolve_gpu(config, LOCAL)
    (problem,) = refused.value.problems
    assert problem.path == "train.device"
    assert "each trial gets no GPU (resources.gpu auto: no card here)" in problem.message


@pytest.mark.parametrize("value", ["half", "-1", "1.5", "true"])
def test_a_share_that_is_neither_a_number_nor_auto_is_one_message(value, nothing_runs, capsys):
    assert main(["--config", MAIN, f"resources.gpu={value}"]) == 2
    err = capsys.readouterr().err
    (line,) = [line for line in err.splitlines() if "resources.gpu" in line]  # one problem
    assert line.startswith("  resources.gpu: ") and "Traceback" not in err and not nothing_runs


SLOW_BF16 = "train.model=tests.trainables.user_models:slow_under_autocast"
FAST_BF16 = "train.model=tests.trainables.user_models:slow_without_autocast"


def on_cpu(*overrides: str) -> SearchConfig:
    return load_config(MAIN, list(overrides)).with_cards(0)


def test_on_cpu_trials_an_amp_that_trains_slower_is_left_out_and_the_plan_says_why(tmp_path):
    config = devices.leave_out_slow_amp(on_cpu(SLOW_BF16), LOCAL)
    assert "amp" not in config.space
    assert "float32's speed on this CPU" in config.left_out["amp"]
    assert "search.amp_probe=false samples it anyway" in config.left_out["amp"]
    assert config.as_yaml_dict()["space"]["amp"] == {"choice": [False, True]}  # as written
    said = plan(config, tmp_path / "cats_dogs-1", resume=False)
    assert "amp" not in said.split("sampling:")[1].splitlines()[0].strip().split(", ")
    assert "  left out:   amp: bf16 autocast trained at 0." in said


def test_an_amp_that_trains_as_fast_or_faster_stays_sampled(tmp_path):
    config = on_cpu(FAST_BF16)
    assert devices.leave_out_slow_amp(config, LOCAL) is config
    assert "left out" not in plan(config, tmp_path / "cats_dogs-1", resume=False)


@pytest.mark.parametrize(
    "overrides, options",
    [
        (["search.amp_probe=false"], LOCAL),
        (["space.amp=null", "train.amp=true"], LOCAL),  # fixed: the user asked for it
        (["space.amp={choice: [false]}"], LOCAL),
        (["space.amp={choice: [true]}"], LOCAL),  # always on: the user asked for it
        ([], RunOptions(run_name=None, address="10.0.0.1:6379", resume=False)),
    ],
    ids=["probe off", "amp fixed", "amp never on", "amp always on", "a cluster's nodes"],
)
def test_no_probe_runs_where_it_could_not_or_need_not_decide(overrides, options, monkeypatch):
    import trainables.amp_probe

    def must_not_run(*args, **kwargs):
        raise AssertionError("probed")

    monkeypatch.setattr(trainables.amp_probe, "cpu_amp_speed", must_not_run)
    config = on_cpu(SLOW_BF16, *overrides)
    assert devices.leave_out_slow_amp(config, options) is config


def test_trials_on_cards_are_not_probed(monkeypatch):
    import trainables.amp_probe

    monkeypatch.setattr(trainables.amp_probe, "cpu_amp_speed", lambda *a, **k: 0.0)
    config = load_config(MAIN, [SLOW_BF16]).with_cards(1)
    assert devices.leave_out_slow_amp(config, LOCAL) is config


def test_a_resumed_search_leaves_out_what_it_started_without_and_probes_nothing(
    tmp_path, monkeypatch
):
    import trainables.amp_probe

    monkeypatch.setattr(trainables.amp_probe, "cpu_amp_speed", lambda *a, **k: 0.0)
    started = devices.machine_space(on_cpu(SLOW_BF16), LOCAL, tmp_path)
    SearchState("run", "uri", "exp", started.as_yaml_dict(), started.left_out).save(tmp_path)
    resuming = RunOptions(run_name=None, address=None, resume=True)

    def must_not_run(*args, **kwargs):
        raise AssertionError("probed")

    monkeypatch.setattr(trainables.amp_probe, "cpu_amp_speed", must_not_run)
    resumed = devices.machine_space(on_cpu(SLOW_BF16), resuming, tmp_path)
    assert "amp" not in resumed.space and resumed.left_out == started.left_out
    # a search saved before the probe sampled AMP, and goes on sampling it
    SearchState("run", "uri", "exp", started.as_yaml_dict()).save(tmp_path)
    assert "amp" in devices.machine_space(on_cpu(SLOW_BF16), resuming, tmp_path).space
