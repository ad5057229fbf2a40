"""How much each setting explains of an objective: Optuna's fANOVA over the trials."""

import numpy as np
import pandas as pd
import pytest

from analysis.ablations import inert_settings
from analysis.importance import distribution_of, inert_reasons, setting_importances


def trials(n: int, seed: int = 0) -> pd.DataFrame:
    """AMP decides throughput, the batch decides accuracy, the learning rate nothing."""
    rng = np.random.default_rng(seed)
    frame = pd.DataFrame({
        "config.amp": rng.choice([True, False], n),
        "config.batch_size": rng.choice([16, 32, 64], n),
        "config.lr": 10 ** rng.uniform(-4, -2, n),
    })  # fmt: skip
    frame["throughput"] = 1000 + 500 * frame["config.amp"] + rng.normal(0, 20, n)
    frame["best_val_acc"] = 0.7 - 0.1 * (frame["config.batch_size"] == 64) + rng.normal(0, 0.01, n)
    return frame


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_setting_that_decides_an_objective_explains_most_of_it_on_a_small_search(seed):
    frame = trials(16, seed)
    table, basis = setting_importances(
        frame, {"throughput": "max", "best_val_acc": "max"}, np.ones(16, dtype=bool)
    )
    most = table.set_index("setting").idxmax()
    assert most["throughput"] == "amp" and most["best_val_acc"] == "batch_size"
    assert table[["throughput", "best_val_acc"]].sum().to_numpy() == pytest.approx([1.0, 1.0])
    assert basis == "fANOVA (Optuna) over 16 feasible trials"


def test_too_few_trials_say_so_instead_of_ranking():
    table, basis = setting_importances(trials(4), {"throughput": "max"}, np.ones(4, dtype=bool))
    assert table.empty and basis.startswith("not estimated: 4 usable trials")


def test_a_real_number_is_a_range_and_a_list_of_values_a_category():
    frame = trials(16)
    assert distribution_of(frame["config.lr"]).log  # spans two decades
    assert distribution_of(frame["config.batch_size"]).choices == (16, 32, 64)


def test_a_setting_that_cannot_act_on_an_objective_is_no_feature_of_it_and_says_why():
    """On a CPU search the forest gave the cuDNN autotuner 0.22-0.29 of throughput and the
    learning rate 0.31 (2026-12-07): noise split by settings that cannot move it."""
    frame = trials(16).assign(**{"config.cudnn_benchmark": [True, False] * 8,
                                 "config.channels_last": True})  # fmt: skip
    objectives = {"throughput": "max", "best_val_acc": "max"}

    def cannot_act(objective):
        return inert_settings(objective, on_gpu=False)

    table, basis = setting_importances(frame, objectives, np.ones(16, dtype=bool), cannot_act)
    by_setting = table.set_index("setting")
    assert np.isnan(by_setting.loc["cudnn_benchmark"]).all()  # a GPU-only switch on CPUs
    assert np.isnan(by_setting.loc["lr", "throughput"])  # the same work per image
    assert by_setting.loc["lr", "best_val_acc"] >= 0  # an accuracy it can move
    assert by_setting[["throughput", "best_val_acc"]].sum().to_numpy() == pytest.approx([1, 1])
    assert basis.endswith("over 16 feasible trials")  # channels_last never varied at all
    assert inert_reasons(table, cannot_act) == [
        "cudnn_benchmark on every objective, it does nothing on the CPUs these trials ran on",
        "lr on throughput, none by construction (the same work per image)",
    ]


def test_a_setting_sampled_but_the_same_in_every_usable_trial_is_named():
    frame = trials(16).assign(**{"config.channels_last": [True] * 15 + [False]})
    usable = np.array([True] * 15 + [False])
    _, basis = setting_importances(frame, {"throughput": "max"}, usable)
    assert basis == (
        "fANOVA (Optuna) over 15 feasible trials; channels_last the same in all of them"
    )


def test_an_objective_the_same_in_every_usable_trial_is_named_not_ranked():
    """fANOVA raised "zero total variance" on it, and the report with it (2026-12-07)."""
    frame = trials(16).assign(gen_gap=0.1)
    table, basis = setting_importances(
        frame, {"throughput": "max", "gen_gap": "min"}, np.ones(16, dtype=bool)
    )
    assert list(table.columns) == ["setting", "throughput"]
    assert basis.endswith("; gen_gap the same in all of them, nothing to explain")
