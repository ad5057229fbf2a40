"""Ablations of a real search: run on a finished search with `--resume`, as trials of
their own (Tune, MLflow), never told to the sampler, kept off the front, and read by the
report; a second `--resume` finds them done."""

import json

import numpy as np
import optuna
import pandas as pd
import pytest
from mlflow.tracking import MlflowClient

from search.capacity import Prober
from tests.conftest import CONFIGS, UNSCALED
from tests.processes import cli_env, run_cli
from trainables.metrics import SEARCH_NOTES
from trainables.settings import TrainSettings

pytestmark = [pytest.mark.ray, pytest.mark.slow]

SMOKE = str(CONFIGS / "smoke.yaml")
NAME = "ablated"
SEARCH = ["--config", SMOKE, "--name", NAME]
# The smoke space (batch_size, optimizer, lr) with AMP, activation checkpointing and
# gradient clipping (a setting unset, null, or a norm): one noise-floor seed and one change
# of each. AMP is sampled whatever this CPU does with bf16 (where it emulates it, the
# search's probe would leave AMP out: tests/search/test_devices.py); 16 px images keep its
# emulated steps short.
IMAGE_SIZE = 16
SPACE = [
    f"data.image_size={IMAGE_SIZE}",
    "search.amp_probe=false",
    "space.amp={choice: [false, true]}",
    "space.activation_checkpointing={choice: [false, true]}",
    "space.grad_clip_norm={choice: [null, 1.0]}",
    UNSCALED,  # its speed effects are ratios timed in alternation, on no scale
]
PLANNED = 1 + 6


def search_once(workdir, *extra: str) -> tuple[int, str]:
    """`python -m search.run` with `extra` (flags first, then overrides), as a user runs it
    (a process of its own), and what it printed."""
    done = run_cli([*SEARCH, *extra, *SPACE], workdir, cli_env(), timeout=400)
    return done.returncode, done.stdout + done.stderr


@pytest.fixture(scope="module")
def ablated(tmp_path_factory):
    """A smoke search without ablations, then resumed with them, then resumed again."""
    workdir = tmp_path_factory.mktemp("ablated")
    first = search_once(workdir)
    second = search_once(workdir, "--resume", "search.ablation={seeds: 1}")
    third = search_once(workdir, "--resume", "search.ablation={seeds: 1}")
    return workdir, first, second, third


def runs(workdir) -> list:
    client = MlflowClient(f"sqlite:///{workdir / 'mlflow.db'}")
    (experiment,) = [e for e in client.search_experiments() if e.name == "smoke"]
    return client, client.search_runs([experiment.experiment_id], max_results=1000)


def test_a_finished_search_resumed_with_ablations_runs_them_once(ablated):
    workdir, first, second, third = ablated
    assert [first[0], second[0], third[0]] == [0, 0, 0]
    assert "ablations:  none (search.ablation: null)" in first[1]
    assert f"Ablations: {PLANNED} ablation trials around trial " in second[1]
    assert f"ablations:  up to {PLANNED} more trials after the search" in second[1]
    assert f"Ablations: resuming {PLANNED} ablation trials around trial " in third[1]
    folder = workdir / "ray_results" / NAME / "ablations"
    assert len(list(folder.glob("trial_*/result.json"))) == PLANNED
    plan = json.loads((folder / "plan.json").read_text())
    assert plan["screened"] and plan["candidates"][0][0]["ablation"] == "noise floor"


def test_ablation_trials_are_mlflow_children_found_from_the_trial_they_ablate(ablated):
    workdir = ablated[0]
    client, all_runs = runs(workdir)
    ablation_runs = [run for run in all_runs if run.data.tags.get("ablation_of")]
    assert len(ablation_runs) == PLANNED
    (base,) = {run.data.tags["ablation_of"] for run in ablation_runs}
    (knee,) = [run for run in all_runs if run.data.tags.get("trial_id") == base]
    assert knee.data.tags["ablations"] == f"{PLANNED} runs, filter: tags.ablation_of = '{base}'"
    found = client.search_runs(
        [knee.info.experiment_id], filter_string=f"tags.ablation_of = '{base}'"
    )
    assert len(found) == PLANNED
    assert all(run.info.run_name.startswith(f"[{run.data.tags['ablation']}, ablation of {base}] ")
               for run in ablation_runs)  # fmt: skip
    assert all(run.info.status == "FINISHED" for run in ablation_runs)
    assert all(run.data.tags["is_pareto"] == "false" for run in ablation_runs)  # off the front


def test_the_sampler_never_hears_of_the_ablations(ablated):
    workdir = ablated[0]
    storage = f"sqlite:///{workdir / 'ray_results' / NAME / 'optuna.db'}"
    study = optuna.load_study(study_name=NAME, storage=storage)
    assert len(study.trials) == 4  # the smoke search's num_samples


def test_the_search_run_carries_the_effects_and_the_report_answers_from_them(ablated):
    workdir = ablated[0]
    client, all_runs = runs(workdir)
    (parent,) = [run for run in all_runs if run.info.run_name == NAME]
    artifacts = {a.path for a in client.list_artifacts(parent.info.run_id, "report")}
    assert {"report/effects.png", "report/effects.csv", "report/ablations.csv"} <= artifacts
    report = workdir / "ray_results" / NAME / "report"
    trials = pd.read_csv(report / "trials.csv")
    assert len(trials) == 4  # the search's trials only
    effects = pd.read_csv(report / "effects.csv")
    changed = set(effects["change"].str.partition(":")[0])
    assert changed == {"batch_size", "optimizer", "lr", "amp", "activation_checkpointing",
                       "grad_clip_norm"}  # fmt: skip
    markdown = (report / "report.md").read_text()
    clipping = effects.loc[effects["setting"] == "grad_clip_norm", "change"].iloc[0]
    assert clipping in ("grad_clip_norm: null -> 1", "grad_clip_norm: 1 -> null")
    assert clipping in markdown
    assert markdown.index("## What each setting does here") < markdown.index("## The front")
    # the report's knee is the ablations' base, both chosen on evidence (the splits' sizes)
    (knee_line,) = [line for line in markdown.splitlines() if line.startswith("- Knee point")]
    assert "each objective weighed no finer than its noise: " in knee_line
    assert f"): {effects['base'].iloc[0]}: " in knee_line
    # The CPU meter is exact: a larger batch needs more memory, a smaller one less.
    batch = effects[(effects["setting"] == "batch_size") & (effects["metric"] == "peak_mem_mb")]
    (row,) = batch.itertuples()
    larger = int(row.change.rpartition("-> ")[2]) > int(row.change.split(": ")[1].split(" ")[0])
    assert (row.effect > 0) == larger and row.verdict in ("raises", "lowers")
    # Speed effects: timed against the base in alternation, or none by construction (lr).
    speed = effects[effects["metric"] == "throughput"].set_index("setting")
    assert set(speed["measured"]) == {"alternation", "construction"}
    assert speed.loc["lr", "measured"] == "construction" and np.isnan(speed.loc["lr", "effect"])
    timed = speed.drop(index="lr")
    assert (timed["measured"] == "alternation").all() and (timed["low"] > -100).all()
    assert (timed["low"] <= timed["effect"]).all() and (timed["effect"] <= timed["high"]).all()


@pytest.mark.parametrize("setting", ["amp", "activation_checkpointing"])
def test_the_memory_effects_of_amp_and_checkpointing_agree_with_the_capacity_probe(
    ablated, setting
):
    """What the ablation measured against what the capacity table's prober measures for
    the same two configs at the batch the ablation's peak was measured at."""
    workdir = ablated[0]
    folder = workdir / "ray_results" / NAME
    report = folder / "report"
    effects = pd.read_csv(report / "effects.csv")
    (row,) = effects[
        (effects["setting"] == setting) & (effects["metric"] == "peak_mem_mb")
    ].itertuples()
    ablations = pd.read_csv(report / "ablations.csv")
    (trial,) = ablations[ablations["config.ablation"].str.startswith(f"{setting}=")].itertuples()
    base = json.loads((folder / f"trial_{row.base}" / "params.json").read_text())
    base = {key: value for key, value in base.items() if key not in SEARCH_NOTES and key != "data"}
    batch = int(trial.physical_batch_size)
    changed = {**base, setting: not base[setting]}
    probed = [
        Prober(TrainSettings.from_config(config), IMAGE_SIZE, None).peak_bytes(batch)
        for config in (base, changed)
    ]
    assert np.sign(row.effect) == np.sign(probed[1] - probed[0]) != 0
