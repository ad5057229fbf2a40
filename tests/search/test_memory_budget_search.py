"""A whole search in which memory decides what is possible (issue: OOM pruning)."""

import os

import optuna
import pandas as pd
import pytest
from mlflow.tracking import MlflowClient

from search.run import main
from tests.conftest import CONFIGS, UNSCALED

pytestmark = [pytest.mark.ray, pytest.mark.slow]


@pytest.fixture(scope="module")
def finished_search(tmp_path_factory):
    """One search for every test here (it takes tens of seconds)."""
    workdir = tmp_path_factory.mktemp("budget")
    saved = dict(os.environ)  # main sets Ray's variables for its process
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(workdir)
        code = main(
            [
                "--config", str(CONFIGS / "memory_budget.yaml"), "--name", "budget",
                "--num-samples", "12",
                "search.sampler=random", "search.max_concurrent_trials=1",
                # every batch size with each optimizer, the largest first; then sampled. After
                # (256, sgd) runs out of memory, (256, adam) needs more and is never trained.
                "space.batch_size={grid: [256, 128, 64, 32, 16]}",
                "space.optimizer={grid: [sgd, adam]}",
                "space.amp=null",
                "train.epochs=1", "train.train_eval_size=20", "search.ablation=null", UNSCALED,
                # 256 training images: a batch of 256 is a real batch of 256
                "data.train_per_class=128", "data.val_per_class=10", "data.test_per_class=10",
            ]
        )  # fmt: skip
    os.environ.clear()
    os.environ.update(saved)
    assert code == 0
    return workdir


def over_budget(row: pd.Series) -> bool:
    """From the meter at 32 px: 256 images never fit 40 MiB, 128 only with AMP."""
    batch = row["config.batch_size"]
    return batch == 256 or (batch == 128 and not row.get("config.amp", False))


def trials_table(finished_search) -> pd.DataFrame:
    return pd.read_csv(finished_search / "ray_results" / "budget" / "report" / "trials.csv")


def test_over_budget_configs_are_never_started_and_the_others_finish(finished_search):
    trials = trials_table(finished_search)
    started = trials[~trials["trial_id"].str.startswith("skipped-")]
    assert len(started) == 12
    assert set(trials["status"]) <= {"ok", "oom", "oom_predicted"}  # no error, no crash
    pruned = trials["status"].isin(["oom", "oom_predicted"])
    assert (pruned == trials.apply(over_budget, axis=1)).all()
    # On CPU the driver runs the trials' own meter: every over-budget config is known
    # before it starts, and the started trials all fit.
    assert (started["status"] == "ok").all()
    assert (trials["status"] == "oom_predicted").any(), "nothing was over budget"
    assert not trials.loc[pruned, "is_pareto"].any()


def test_optuna_holds_no_pruned_trial_as_complete(finished_search):
    storage = f"sqlite:///{finished_search / 'ray_results' / 'budget' / 'optuna.db'}"
    study = optuna.load_study(study_name="budget", storage=storage)
    assert len(study.trials) == len(trials_table(finished_search))
    for trial in study.trials:
        if trial.user_attrs.get("status", "ok") == "ok":
            assert trial.state == optuna.trial.TrialState.COMPLETE
        else:
            assert trial.state == optuna.trial.TrialState.PRUNED and trial.values is None
    assert all(t.user_attrs.get("status", "ok") == "ok" for t in study.best_trials)


def test_mlflow_holds_no_running_run_and_tags_each_pruned_trial(finished_search):
    client = MlflowClient(f"sqlite:///{finished_search / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("memory_budget")
    runs = client.search_runs([experiment.experiment_id])
    assert len(runs) == 1 + len(trials_table(finished_search))  # the search and every trial
    assert {run.info.status for run in runs} == {"FINISHED"}
    predicted = [run for run in runs if run.data.tags.get("status") == "oom_predicted"]
    assert predicted
    for run in predicted:
        assert run.data.tags["started"] == "false"
        assert "predicted to need" in run.data.tags["status_detail"]
        assert run.info.run_name.startswith("[oom_predicted] ")
        assert int(run.data.params["batch_size"]) >= 128
