import json
import math

import pytest
from mlflow.tracking import MlflowClient

from analysis.load import (
    find_parent_run,
    flatten,
    frame_from_mlflow,
    frame_from_tune,
    histories_from_mlflow,
    histories_from_tune,
    settings_key,
    trial_seconds,
    trial_spans,
    typed_param,
)

METRICS = ("epoch", "val_acc", "throughput", "status", "status_detail")


def test_flatten_joins_nested_keys_with_dots():
    assert flatten("", {"a": {"b": 1, "c": {"d": 2}}, "e": 3}) == {"a.b": 1, "a.c.d": 2, "e": 3}


def test_rows_equal_in_every_setting_share_a_key_lists_compared_by_value():
    import pandas as pd

    frame = pd.DataFrame({
        "config.batch_size": [32, 32, 32, 64],
        "config.gap_epochs": [[3, 4], [3, 4], [4], [3, 4]],
        "config.seed": [0, 1, 2, 3],
    })  # fmt: skip
    keys = settings_key(frame, ["config.batch_size", "config.gap_epochs"])
    assert keys[0] == keys[1] and len(set(keys)) == 3


def write_trial(folder, name, config, results, error=None):
    trial = folder / name
    trial.mkdir(parents=True)
    (trial / "params.json").write_text(json.dumps(config))
    (trial / "result.json").write_text("\n".join(json.dumps(r) for r in results) + "\n")
    if error:
        (trial / "error.txt").write_text(f"Traceback...\n{error}\n")


def test_each_trial_spans_from_its_start_to_its_last_report_and_ran_that_long(tmp_path):
    write_trial(
        tmp_path,
        "trial_a",
        {},
        [
            {"trial_id": "a", "timestamp": 100, "time_total_s": 1.5},
            {"trial_id": "a", "timestamp": 103, "time_total_s": 4.5},
        ],
    )
    write_trial(tmp_path, "trial_b", {}, [{"trial_id": "b", "timestamp": 110, "time_total_s": 2.0}])
    assert trial_spans(tmp_path) == {"a": (98.5, 103.0), "b": (108.0, 110.0)}
    assert trial_seconds(tmp_path) == {"a": 4.5, "b": 2.0}


def test_a_tune_folder_becomes_one_row_per_trial_with_its_last_result(tmp_path):
    write_trial(tmp_path, "trial_a", {"batch_size": 32, "data": {"seed": 0}}, [
        {"trial_id": "a", "epoch": 1, "val_acc": 0.6, "status": "ok"},
        {"trial_id": "a", "epoch": 2, "val_acc": 0.7, "status": "ok", "time_total_s": 3},
    ])  # fmt: skip
    write_trial(tmp_path, "trial_b", {"batch_size": 256}, [], error="RuntimeError: boom")
    frame = frame_from_tune(tmp_path, METRICS).set_index("trial_id")
    assert frame.loc["a", "val_acc"] == 0.7 and frame.loc["a", "epoch"] == 2
    assert frame.loc["a", "config.data.seed"] == 0 and frame.loc["a", "status"] == "ok"
    assert "time_total_s" not in frame.columns  # Tune's bookkeeping stays out
    assert frame.loc["b", "status"] == "error"
    assert frame.loc["b", "status_detail"] == "RuntimeError: boom"


def test_a_trial_restarted_after_an_error_that_went_on_is_not_an_error_row(tmp_path):
    """Tune keeps error.txt after a trial it restarted from its checkpoint (it writes the
    folder's files again at the end, so their times say nothing); the dates of its results
    and its failures say how it ended."""
    killed = "Failure # 1 (occurred at 2026-12-06_07-38-34)\nActorDiedError: killed"
    before, after = "2026-12-06_07-38-34", "2026-12-06_07-38-40"
    write_trial(tmp_path, "trial_a", {}, [
        {"trial_id": "a", "epoch": 2, "status": "ok", "date": before},
        {"trial_id": "a", "epoch": 4, "status": "ok", "date": after},
    ], error=killed)  # fmt: skip
    write_trial(tmp_path, "trial_b", {}, [{"trial_id": "b", "epoch": 2, "date": before}],
                error=killed)  # fmt: skip
    frame = frame_from_tune(tmp_path, METRICS).set_index("trial_id")
    assert frame.loc["a", "status"] == "ok" and frame.loc["a", "epoch"] == 4
    assert frame.loc["b", "status"] == "error"  # failed in the second of its last result
    assert frame.loc["b", "status_detail"] == "ActorDiedError: killed"


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    uri = f"sqlite:///{tmp_path_factory.mktemp('mlflow') / 'mlflow.db'}"
    client = MlflowClient(uri)
    experiment = client.create_experiment("search")
    for name in ("older", "newer"):
        parent = client.create_run(experiment, run_name=name)
        for trial_id, batch, status in (("t1", 32, "ok"), ("t2", 256, "oom")):
            child = client.create_run(experiment, tags={
                "mlflow.parentRunId": parent.info.run_id, "trial_id": trial_id, "status": status,
            })  # fmt: skip
            client.log_param(child.info.run_id, "batch_size", str(batch))
            client.log_param(child.info.run_id, "amp", "True")
            client.log_param(child.info.run_id, "optimizer", "sgd")
            for epoch in (1, 2):
                client.log_metric(child.info.run_id, "val_acc", 0.5 + epoch / 10, step=epoch)
                client.log_metric(child.info.run_id, "noise_scale", 10.0 * epoch, step=epoch)
                client.log_metric(child.info.run_id, "effective_batch_size", batch, step=epoch)
            client.log_metric(child.info.run_id, "time_to_target_s", math.inf)
    client.create_run(experiment, run_name="stopped-before-any-trial")
    return client


def test_the_newest_search_run_with_trials_is_found_unless_one_is_named(store):
    assert find_parent_run(store, "search").info.run_name == "newer"
    assert find_parent_run(store, "search", "older").info.run_name == "older"
    with pytest.raises(LookupError, match="no MLflow experiment"):
        find_parent_run(store, "nope")


def test_mlflow_child_runs_become_rows_with_typed_params_and_latest_metrics(store):
    frame = frame_from_mlflow(store, find_parent_run(store, "search")).set_index("trial_id")
    assert sorted(frame.index) == ["t1", "t2"]
    assert frame.loc["t1", "config.batch_size"] == 32
    assert frame.loc["t1", "config.amp"] is True or frame.loc["t1", "config.amp"] == True  # noqa: E712
    assert frame.loc["t1", "config.optimizer"] == "sgd"
    assert frame.loc["t1", "val_acc"] == pytest.approx(0.7)
    assert frame.loc["t2", "status"] == "oom"


def test_a_metric_that_never_reached_its_target_reads_back_as_infinite_not_as_the_largest_float(
    store,
):
    frame = frame_from_mlflow(store, find_parent_run(store, "search"))
    assert (frame["time_to_target_s"] == math.inf).all()


def test_every_trained_epoch_of_a_tune_folder_is_a_history_row_an_oom_report_is_not(tmp_path):
    write_trial(tmp_path, "trial_a", {"batch_size": 32}, [
        {"trial_id": "a", "epoch": 1, "effective_batch_size": 32, "noise_scale": 40.0,
         "status": "ok"},
        {"trial_id": "a", "epoch": 2, "effective_batch_size": 64, "noise_scale": 90.0,
         "status": "ok"},
        {"trial_id": "a", "epoch": 3, "effective_batch_size": 128, "noise_scale": 90.0,
         "status": "oom"},  # the pruned report repeats the last good epoch's values
    ])  # fmt: skip
    write_trial(tmp_path, "trial_b", {"batch_size": 16}, [
        {"trial_id": "b", "epoch": 1, "effective_batch_size": 16, "noise_scale": 30.0,
         "status": "stopped_early"},  # the rung's epoch, where the scheduler stopped it
    ])  # fmt: skip
    history = histories_from_tune(tmp_path)
    drawn = ["trial_id", "epoch", "effective_batch_size", "noise_scale"]
    assert history[drawn].to_dict("records") == [
        {"trial_id": "a", "epoch": 1, "effective_batch_size": 32, "noise_scale": 40.0},
        {"trial_id": "a", "epoch": 2, "effective_batch_size": 64, "noise_scale": 90.0},
        {"trial_id": "b", "epoch": 1, "effective_batch_size": 16, "noise_scale": 30.0},
    ]


def test_mlflow_histories_give_each_trial_s_metrics_by_epoch(store):
    history = histories_from_mlflow(store, find_parent_run(store, "search"))
    drawn = ["trial_id", "epoch", "effective_batch_size", "noise_scale"]
    rows = history.sort_values(["trial_id", "epoch"])[drawn].to_dict("records")
    assert rows == [
        {"trial_id": "t1", "epoch": 1, "effective_batch_size": 32.0, "noise_scale": 10.0},
        {"trial_id": "t1", "epoch": 2, "effective_batch_size": 32.0, "noise_scale": 20.0},
        {"trial_id": "t2", "epoch": 1, "effective_batch_size": 256.0, "noise_scale": 10.0},
        {"trial_id": "t2", "epoch": 2, "effective_batch_size": 256.0, "noise_scale": 20.0},
    ]


def test_a_float_python_wrote_without_a_dot_reads_back_as_a_number():
    assert typed_param("1e-05") == 1e-05 and typed_param("0.0001") == 0.0001
    assert typed_param("small_cnn") == "small_cnn" and typed_param("nan") == "nan"


def test_a_trial_id_of_eight_digits_in_the_notes_reads_back_as_the_id_it_is(tmp_path):
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    experiment = client.create_experiment("search")
    parent = client.create_run(experiment, run_name="search")
    ablation = {"ablation_of": "12345678", "ablation": "amp=true"}
    for trial_id, params in (("12345678", {}), ("ab12cd34", ablation)):
        child = client.create_run(experiment, tags={
            "mlflow.parentRunId": parent.info.run_id, "trial_id": trial_id, "status": "ok",
        })  # fmt: skip
        for key, value in {"weight_decay": "1e-05", **params}.items():
            client.log_param(child.info.run_id, key, value)
    frame = frame_from_mlflow(client, parent).set_index("trial_id")
    assert frame.loc["ab12cd34", "config.ablation_of"] == "12345678"
    assert (frame["config.weight_decay"] == 1e-05).all()
