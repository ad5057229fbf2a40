"""What the terminal shows: the plan before a search, the ranked table of trials after."""

import pandas as pd

from search.config import load_config
from search.console import LEGEND_WIDTH, ablation_plan, lag_plan, stopping_plan, summary_table
from tests.conftest import CONFIGS


def trials_of(space: list[str]) -> pd.DataFrame:
    """Three trials of the main config's space, as the report's frame holds them."""
    values = {"batch_size": 32, "optimizer": "adam", "lr": 0.0018383, "amp": False,
              "activation_checkpointing": True, "accumulation_steps": 4, "adabatch_growth": 1,
              "warmup_epochs": 2, "cudnn_benchmark": False, "augment": False}  # fmt: skip
    rows = []
    for rank, trial in ((0.0, "4cb5f9f4"), (1.0, "ab19b303"), (float("nan"), "8b0884ed")):
        rows.append({"pareto_rank": rank, "trial_id": trial, "status": "ok",
                     **{f"config.{key}": values.get(key, 1) for key in space},
                     "throughput": 2530.4, "best_val_acc": 0.7625, "gen_gap": 0.0725,
                     "peak_mem_mb": 23.41})  # fmt: skip
    return pd.DataFrame(rows)


def test_the_ranked_table_shows_settings_under_short_headers_and_says_what_they_stand_for():
    config = load_config(CONFIGS / "cats_dogs.yaml", [])
    space = list(config.space)
    lines = summary_table(trials_of(space), space, list(config.objectives)).splitlines()
    header = lines[0].split()
    assert header[:4] == ["rank", "trial_id", "status", "batch"]
    assert "recompute" in header and "activation_checkpointing" not in header
    assert ["front", "4cb5f9f4"] == lines[1].split()[:2] and lines[3].split()[0] == "-"
    legend = " ".join(lines[4:])
    assert legend.startswith("Short headers: batch = batch_size, recompute = activation_")
    # A terminal's width, near enough: the full names took about 210 columns.
    assert max(len(line) for line in lines[:4]) <= 150
    assert all(len(line) <= LEGEND_WIDTH for line in lines[4:])


def test_a_setting_without_a_short_header_keeps_its_name_and_no_legend_is_written():
    lines = summary_table(trials_of(["lr"]), ["lr"], ["throughput"]).splitlines()
    assert "lr" in lines[0].split() and len(lines) == 4


def test_the_ranked_table_says_which_trials_share_a_speed():
    frame = trials_of(["lr"]).assign(
        same_work_trials=[2, 2, 1], trial_throughput=[2400.0, 2668.0, 2530.4]
    )
    text = " ".join(summary_table(frame, ["lr"], ["throughput"]).split())
    assert "throughput: 2 of 3 trials share a speed with others of the same work per image" in text
    assert "throughput:" not in " ".join(summary_table(trials_of(["lr"]), ["lr"], []).split())


def test_the_plan_says_the_lag_the_search_runs_with_and_nothing_without():
    main = CONFIGS / "cats_dogs.yaml"
    assert lag_plan(load_config(main)) == (  # auto: two trials at once
        ", each trial suggested knowing the trials 3 or more before it (search.lag)"
    )
    assert lag_plan(load_config(main, ["search.lag=4"])).startswith(
        ", each trial suggested knowing the trials 4"
    )
    assert lag_plan(load_config(main, ["search.lag=null"])) == ""


def test_the_plan_says_how_early_stopping_decides_before_the_search_starts():
    main = CONFIGS / "cats_dogs.yaml"
    assert stopping_plan(load_config(main)) == (
        "at epochs 1, 2, 4 (at full learning rate), a trial stops where a peer is ahead of it "
        "on best_val_acc beyond the noise and behind on nothing, unless it ranks in the best "
        "50% there"
    )
    anyone = stopping_plan(load_config(main, ["search.early_stopping.ahead_on=null"]))
    assert "ahead of it on an objective beyond the noise" in anyone
    off = stopping_plan(load_config(main, ["search.early_stopping=null"]))
    assert off == "none, every trial trains all its epochs (search.early_stopping: null)"


def test_the_ablation_plan_says_the_knees_floor_runs_first_and_what_a_failure_costs():
    config = load_config(CONFIGS / "cats_dogs.yaml", []).with_cards(0)
    assert ablation_plan(config) == (
        "up to 11 more trials after the search, around the knee trial (2 of them on other "
        "seeds for the noise floor); its floor first: where its config learns on some seeds "
        "only, the next front trial's floor, up to 4 more trials "
        "(search.ablation.skip_seed_fragile)"
    )
    unscreened = load_config(
        CONFIGS / "cats_dogs.yaml", ["search.ablation.skip_seed_fragile=false"]
    ).with_cards(0)
    assert ablation_plan(unscreened).endswith("(2 of them on other seeds for the noise floor)")
