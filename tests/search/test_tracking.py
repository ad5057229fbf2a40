import json
import math
import pickle

import pytest
from mlflow.tracking import MlflowClient

from analysis.load import frame_from_mlflow, frame_from_tune
from search.tracking import MlflowTrialCallback, ParentRun, ablation_run_name, trial_run_name
from tests.fakes import FakeTrial, schema_result


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> str:
    """One store for the module: creating MLflow's tables costs about a second."""
    return f"sqlite:///{tmp_path_factory.mktemp('mlflow') / 'mlflow.db'}"


@pytest.fixture
def parent(store: str, request: pytest.FixtureRequest) -> ParentRun:
    experiment = request.node.name  # one experiment per test keeps their runs apart
    return ParentRun.start(store, experiment, "search-1", {"data.seed": 0}, {"team": "t"})


def callback_for(parent: ParentRun, store: str) -> MlflowTrialCallback:
    return MlflowTrialCallback(store, parent.experiment_id, parent.run_id, {"epochs": 2})


def test_each_trial_becomes_a_child_run_nested_under_the_search(parent, store):
    callback = callback_for(parent, store)
    trial = FakeTrial("abc", {"batch_size": 32, "lr": 0.01, "data": {"seed": 0}})
    callback.on_trial_start(0, [], trial)
    run = MlflowClient(store).get_run(callback.run_id_for(trial))
    assert run.data.tags["mlflow.parentRunId"] == parent.run_id
    assert run.data.tags["trial_id"] == "abc"
    assert run.data.params == {"batch_size": "32", "lr": "0.01", "epochs": "2"}


def test_a_mapping_in_a_trials_config_is_logged_as_its_keys_once(parent, store):
    """The speed scale was logged as its four keys and once more as one string."""
    callback = MlflowTrialCallback(store, parent.experiment_id, parent.run_id,
                                   {"speed_scale.fp32_contiguous": 2000.0})  # fmt: skip
    trial = FakeTrial("abc", {"batch_size": 32, "speed_scale": {"fp32_contiguous": 2000.0}})
    callback.on_trial_start(0, [], trial)
    run = MlflowClient(store).get_run(callback.run_id_for(trial))
    assert run.data.params == {"batch_size": "32", "speed_scale.fp32_contiguous": "2000.0"}


def test_a_trial_run_is_named_by_what_it_trains_with_and_stays_unique(parent, store):
    callback = callback_for(parent, store)
    config = {"batch_size": 64, "optimizer": "adam", "lr": 0.001, "amp": True,
              "activation_checkpointing": True, "accumulation_steps": 4, "adabatch_growth": 2,
              "adabatch_interval": 3}  # fmt: skip
    first, repeat = FakeTrial("5c1e9f3a", config), FakeTrial("5c1e77b0", {**config, "seed": 1})
    for trial in (first, repeat):
        callback.on_trial_start(0, [], trial)
    client = MlflowClient(store)
    names = [client.get_run(callback.run_id_for(t)).info.run_name for t in (first, repeat)]
    assert names == ["bs64-adam-lr0.001-amp-recompute-acc4-grow2every3-5c1e9f3a",
                     "bs64-adam-lr0.001-amp-recompute-acc4-grow2every3-s1-5c1e77b0"]  # fmt: skip


def test_plain_trials_get_short_names_and_the_noise_rule_says_so():
    assert trial_run_name({"batch_size": 32, "optimizer": "sgd"}, "abcd1234") == "bs32-sgd-abcd1234"
    grown = {"batch_size": 32, "adabatch_growth": 2, "adabatch_rule": "noise_scale"}
    assert trial_run_name(grown, "abcd1234") == "bs32-grow2noise-abcd1234"
    other_model = {"model": "shufflenet_v2_x0_5", "batch_size": 32}
    assert trial_run_name(other_model, "abcd1234") == "shufflenet_v2_x0_5-bs32-abcd1234"
    assert trial_run_name({"model": "small_cnn", "batch_size": 8}, "abcd1234") == "bs8-abcd1234"


def test_an_ablation_run_name_leads_with_its_change_which_a_narrow_column_still_shows():
    name = ablation_run_name("bs16-sgd-1d0d7_00002", "batch_size=16", "a7f75574")
    assert name == "[batch_size=16, ablation of a7f75574] bs16-sgd-1d0d7_00002"


def test_a_pruned_trial_s_run_says_so_in_its_name_and_its_description(parent, store):
    callback = callback_for(parent, store)
    trial = FakeTrial("abcd1234", {"batch_size": 128})
    callback.on_trial_start(0, [], trial)
    callback.on_trial_result(0, [], trial, schema_result(1))
    detail = "a training step of 128 images needs 42 MiB, over the budget of 40 MiB"
    callback.on_trial_result(0, [], trial, schema_result(2, "oom", status_detail=detail))
    callback.on_trial_result(0, [], trial, schema_result(2, "oom", status_detail=detail))
    run = MlflowClient(store).get_run(callback.run_id_for(trial))
    assert run.info.run_name == "[oom] bs128-abcd1234"  # once, however often it is told
    assert run.data.tags["mlflow.note.content"] == f"oom: {detail}"


def test_a_target_never_reached_reads_back_as_infinite_though_nothing_was_logged(parent, store):
    callback = callback_for(parent, store)
    trial = FakeTrial("abc")
    callback.on_trial_start(0, [], trial)
    callback.on_trial_result(0, [], trial, schema_result(1))
    row = frame_from_mlflow(MlflowClient(store), MlflowClient(store).get_run(parent.run_id)).iloc[0]
    assert row["time_to_target_s"] == float("inf") and row["steps_to_target"] == float("inf")


def test_a_metric_the_last_report_left_unmeasured_reads_back_as_in_tune_s_folder(
    parent, store, tmp_path
):
    """A stopped trial scores its test split at epoch 1, not at its last report (2): MLflow
    keeps epoch 1's value as the latest, Tune's folder the last report's NaN."""
    callback = callback_for(parent, store)
    trial = FakeTrial("abc", {"batch_size": 32})
    unmeasured = {"test_acc": math.nan, "noise_scale": math.nan}
    results = [schema_result(1, test_acc=0.61, noise_scale=120.0),
               schema_result(2, "stopped_early", **unmeasured)]  # fmt: skip
    callback.on_trial_start(0, [], trial)
    folder = tmp_path / "search" / "trial_abc"
    folder.mkdir(parents=True)
    (folder / "params.json").write_text(json.dumps({**trial.config, "epochs": 2}))
    for result in results:
        callback.on_trial_result(0, [], trial, result)
        with open(folder / "result.json", "a") as lines:
            lines.write(json.dumps({**result, "trial_id": "abc"}) + "\n")
    client = MlflowClient(store)
    from_mlflow = frame_from_mlflow(client, client.get_run(parent.run_id)).iloc[0]
    from_tune = frame_from_tune(tmp_path / "search", tuple(from_mlflow.index)).iloc[0]
    assert math.isnan(from_mlflow["test_acc"]) and math.isnan(from_mlflow["noise_scale"])
    shared = ["epoch", "val_acc", "best_val_acc", "throughput", "gen_gap", "test_acc",
              "noise_scale", "status"]  # fmt: skip
    assert from_mlflow[shared].to_dict() == pytest.approx(from_tune[shared].to_dict(), nan_ok=True)


def test_the_experiment_is_marked_as_model_training_for_mlflow_3(parent, store):
    experiment = MlflowClient(store).get_experiment(parent.experiment_id)
    assert experiment.tags["mlflow.experimentKind"] == "custom_model_development"


def test_results_are_logged_as_schema_metrics_by_epoch_without_tune_bookkeeping(parent, store):
    callback = callback_for(parent, store)
    trial = FakeTrial("abc")
    callback.on_trial_start(0, [], trial)
    for epoch in (1, 2):
        callback.on_trial_result(0, [], trial, schema_result(epoch))
    client = MlflowClient(store)
    run = client.get_run(callback.run_id_for(trial))
    # time_to_target_s is inf (not reached): nothing is logged rather than a sentinel
    assert set(run.data.metrics) == {"epoch", "val_acc", "best_val_acc", "throughput", "gen_gap"}
    history = client.get_metric_history(run.info.run_id, "val_acc")
    assert [(m.step, round(m.value, 3)) for m in history] == [(1, 0.6), (2, 0.7)]
    assert run.data.tags["status"] == "ok"


def test_runs_end_finished_on_completion_and_failed_on_error(parent, store):
    callback = callback_for(parent, store)
    done, broken = FakeTrial("done"), FakeTrial("broken")
    for trial in (done, broken):
        callback.on_trial_start(0, [], trial)
    callback.on_trial_complete(0, [], done)
    callback.on_trial_error(0, [], broken)
    client = MlflowClient(store)
    assert client.get_run(callback.run_id_for(done)).info.status == "FINISHED"
    failed = client.get_run(callback.run_id_for(broken))
    assert failed.info.status == "FAILED" and failed.data.tags["status"] == "error"


def test_a_restarted_search_continues_the_same_child_run_instead_of_a_new_one(parent, store):
    first = callback_for(parent, store)
    trial = FakeTrial("abc")
    first.on_trial_start(0, [], trial)
    first.on_trial_result(0, [], trial, schema_result(1))
    # Tune pickles callbacks with the experiment and unpickles them on restore.
    restored = pickle.loads(pickle.dumps(first))
    restored._runs.clear()  # a callback restored from construction time knows no runs yet
    restored.on_trial_start(0, [], trial)
    restored.on_trial_result(0, [], trial, schema_result(2))
    assert restored.run_id_for(trial) == first.run_id_for(trial)
    client = MlflowClient(store)
    children = client.search_runs([parent.experiment_id], "tags.trial_id = 'abc'")
    assert len(children) == 1
    assert len(client.get_metric_history(children[0].info.run_id, "epoch")) == 2


def test_an_epoch_reported_again_after_a_trial_resumes_keeps_one_value_in_the_history(
    parent, store
):
    # Tune logs a result before it registers the epoch's checkpoint: a trial killed in
    # between resumes from the epoch before and reports the same epoch again.
    callback = callback_for(parent, store)
    trial = FakeTrial("abc")
    callback.on_trial_start(0, [], trial)
    for epoch in (1, 2, 2, 3):
        callback.on_trial_result(0, [], trial, schema_result(epoch))
    # A driver restored from a save taken after epoch 1 knows only its own past.
    restored = pickle.loads(pickle.dumps(callback))
    for epoch in (3, 4):
        restored.on_trial_result(0, [], trial, schema_result(epoch))
    history = MlflowClient(store).get_metric_history(callback.run_id_for(trial), "epoch")
    assert sorted(m.step for m in history) == [1, 2, 3, 4]


def test_the_parent_run_carries_the_config_as_params_and_ends_when_told(parent, store):
    client = MlflowClient(store)
    run = client.get_run(parent.run_id)
    assert run.data.params == {"data.seed": "0"} and run.data.tags["team"] == "t"
    parent.finish("FINISHED")
    assert client.get_run(parent.run_id).info.status == "FINISHED"


class _InterruptedWhileWritten:
    def __str__(self) -> str:
        raise KeyboardInterrupt


def test_a_ctrl_c_while_the_parent_runs_params_are_logged_leaves_it_failed_not_running(store):
    client = MlflowClient(store)
    with pytest.raises(KeyboardInterrupt):
        ParentRun.start(store, "interrupted", "search-1", {"x": _InterruptedWhileWritten()}, {})
    (run,) = client.search_runs([client.get_experiment_by_name("interrupted").experiment_id])
    assert run.info.status == "FAILED"
