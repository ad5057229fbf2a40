"""How much each setting explains of an objective: Optuna's fANOVA over the trials."""

import numpy as np
import pandas as pd
import pytest

from analysis.importance import distribution_of, setting_importances


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
