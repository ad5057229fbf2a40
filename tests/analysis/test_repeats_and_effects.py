import math

import numpy as np
import pandas as pd
import pytest

from analysis.effects import switch_column, technique_effects
from analysis.pareto import feasible_mask, mark_front
from analysis.repeats import aggregate_repeats

OBJECTIVES = {"throughput": "max", "best_val_acc": "max"}


def test_seeds_of_one_config_become_one_row_with_mean_and_spread():
    frame = pd.DataFrame({
        "trial_id": ["a", "b", "c"],
        "config.batch_size": [32, 32, 64],
        "config.seed": [0, 1, 0],
        "throughput": [100.0, 140.0, 300.0],
        "best_val_acc": [0.7, 0.8, 0.6],
        "status": ["ok", "ok", "ok"],
    })  # fmt: skip
    grouped = aggregate_repeats(frame, OBJECTIVES).set_index("config.batch_size")
    assert grouped.loc[32, "throughput"] == 120.0 and grouped.loc[32, "seeds"] == 2
    assert grouped.loc[32, "best_val_acc_std"] == pytest.approx(np.std([0.7, 0.8], ddof=1))
    assert grouped.loc[32, "trial_id"] == "a+b" and grouped.loc[64, "seeds"] == 1


def test_settings_that_are_lists_group_seeds_like_any_other_setting():
    frame = pd.DataFrame({
        "trial_id": ["a", "b", "c"],
        "config.gap_epochs": [[2, 4], [2, 4], [2, 4]],
        "config.recomputed_modules": [["BasicBlock"], ["BasicBlock"], None],
        "config.seed": [0, 1, 0],
        "throughput": [100.0, 140.0, 300.0],
        "best_val_acc": [0.7, 0.8, 0.6],
        "status": ["ok", "ok", "ok"],
    })  # fmt: skip
    grouped = aggregate_repeats(frame, OBJECTIVES)
    assert grouped["trial_id"].tolist() == ["a+b", "c"]
    assert grouped["throughput"].tolist() == [120.0, 300.0]


def test_a_config_with_one_failed_seed_is_not_feasible():
    frame = pd.DataFrame({
        "trial_id": ["a", "b"], "config.batch_size": [32, 32], "config.seed": [0, 1],
        "throughput": [100.0, np.nan], "best_val_acc": [0.7, np.nan], "status": ["ok", "oom"],
    })  # fmt: skip
    assert aggregate_repeats(frame, OBJECTIVES)["status"].tolist() == ["oom"]


def test_without_repeats_the_frame_is_unchanged():
    frame = pd.DataFrame({
        "trial_id": ["a", "b"], "config.batch_size": [32, 64],
        "throughput": [1.0, 2.0], "best_val_acc": [0.5, 0.6], "status": "ok",
    })  # fmt: skip
    assert aggregate_repeats(frame, OBJECTIVES) is frame


def trials() -> pd.DataFrame:
    return pd.DataFrame({
        "trial_id": list("abcdef"),
        "config.amp": [True, True, True, False, False, False],
        "config.accumulation_steps": [1, 1, 1, 1, 1, 1],  # not varied
        "config.optimizer": ["adam", "sgd", "adam", "sgd", "sgd", "adam"],
        "throughput": [300.0, 280.0, 310.0, 100.0, 90.0, 110.0],
        "best_val_acc": [0.70, 0.72, 0.71, 0.60, 0.62, 0.61],
        "status": ["ok", "ok", "oom", "ok", "ok", "ok"],
    })  # fmt: skip


def test_only_switches_the_search_varied_are_described():
    frame = trials()
    assert switch_column(frame, "amp").tolist() == [True, True, True, False, False, False]
    assert switch_column(frame, "accumulation") is None
    assert switch_column(frame, "adabatch") is None  # not in the config at all


def test_warmup_counts_as_on_for_any_warmup_epochs():
    frame = pd.DataFrame({"config.warmup_epochs": [0, 1, 2, 0]})
    assert switch_column(frame, "warmup").tolist() == [False, True, True, False]


def test_effects_come_from_matched_pairs_where_the_search_has_them():
    marked = mark_front(trials(), OBJECTIVES)
    effects = technique_effects(marked, OBJECTIVES, feasible_mask(marked, OBJECTIVES))
    amp = effects.set_index("technique").loc["amp"]
    assert amp["trials_on"] == 3 and amp["trials_off"] == 3
    # adam: 300 on, 110 off; sgd: 280 on, 100 and 90 off (their geometric mean); the oom
    # trial left out; speeds compared as ratios, the pairs' logarithms averaged
    pairs = [math.log(300 / 110), math.log(280) - (math.log(100) + math.log(90)) / 2]
    assert amp["effect on throughput"] == pytest.approx(100 * math.expm1(np.mean(pairs)))
    assert amp["estimated from"] == "2 matched pairs"
    low, high = (float(x) for x in amp["throughput 95% interval"].strip("[]").split(","))
    assert low < amp["effect on throughput"] < high
    # accuracies in points: adam 0.70 against 0.61, sgd 0.72 against 0.61
    assert amp["effect on best_val_acc"] == pytest.approx(10.0)
    assert amp["share_of_front"] == 1.0
    assert amp["share_of_feasible"] == pytest.approx(2 / 5)
    assert set(effects["technique"]) == {"amp", "optimizer adam"}


def confounded_search(seed: int = 0) -> pd.DataFrame:
    """AMP makes a step 22% faster (e^0.2), but the search tried it mostly at small batches,
    which are slow: on minus off says AMP costs speed. No two configs differ in AMP alone."""
    rng = np.random.default_rng(seed)
    batch = np.array([16, 16, 16, 32, 32, 256, 256, 256, 128, 128, 64, 64])
    amp = np.array([1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 1, 0], dtype=bool)
    throughput = (100 + 300 * np.log10(batch)) * np.exp(0.2 * amp + rng.normal(0, 0.02, 12))
    return pd.DataFrame({
        "trial_id": [f"t{i}" for i in range(len(batch))],
        "config.batch_size": batch,
        "config.amp": amp,
        "config.lr": rng.uniform(1e-3, 1e-2, len(batch)),  # every config unique: no pairs
        "throughput": throughput,
        "best_val_acc": rng.uniform(0.6, 0.9, len(batch)),
        "status": "ok",
    })  # fmt: skip


def test_without_pairs_a_regression_on_the_other_settings_finds_the_effect_a_median_hides():
    frame = confounded_search()
    on = frame["config.amp"]
    naive = frame.loc[on, "throughput"].median() - frame.loc[~on, "throughput"].median()
    assert naive < 0  # what on-minus-off medians reported
    marked = mark_front(frame, OBJECTIVES)
    effects = technique_effects(marked, OBJECTIVES, feasible_mask(marked, OBJECTIVES))
    amp = effects.set_index("technique").loc["amp"]
    assert amp["effect on throughput"] == pytest.approx(22.1, abs=5)  # percent
    low, high = (float(x) for x in amp["throughput 95% interval"].strip("[]").split(","))
    assert low < 22.1 < high and high - low < 20
    assert amp["estimated from"].startswith("regression on 12 trials, controlling for")


def unmeasurable_search() -> pd.DataFrame:
    """Four CPU trials where AMP always moves with Adam and the autotuner does nothing."""
    return pd.DataFrame({
        "trial_id": list("abcd"),
        "config.amp": [True, True, False, False],
        "config.optimizer": ["adam", "adam", "sgd", "sgd"],  # always together with amp
        "config.cudnn_benchmark": [True, False, True, False],
        "config.lr": [0.1, 0.2, 0.3, 0.4],
        "throughput": [300.0, 280.0, 100.0, 90.0],
        "best_val_acc": [0.7, 0.72, 0.6, 0.62],
        "gen_gap": 0.1,
        "status": "ok",
    })  # fmt: skip


def test_an_effect_that_cannot_be_measured_says_so_and_why():
    frame = unmeasurable_search()
    marked = mark_front(frame, OBJECTIVES)
    feasible = feasible_mask(marked, OBJECTIVES)
    effects = technique_effects(marked, OBJECTIVES, feasible, on_gpu=False).set_index("technique")
    assert np.isnan(effects.loc["amp", "effect on throughput"])
    assert "always moved with another setting" in effects.loc["amp", "estimated from"]
    assert effects.loc["cudnn_benchmark", "estimated from"] == (
        "not measurable here: it does nothing on the CPUs these trials ran on"
    )
    assert effects.loc["cudnn_benchmark", "throughput 95% interval"] == "-"


def test_a_speed_effect_is_a_ratio_whose_interval_never_falls_below_minus_100_percent():
    """Three pairs that disagree (x2, /2, x1): on minus off in images/s would be 0 +- 248,
    its low end far below all of the 150 images/s the switch could take away; a ratio's
    interval, taken on the logarithms, stays above -100%."""
    frame = pd.DataFrame({
        "trial_id": list("abcdef"),
        "config.amp": [True, False] * 3,
        "config.batch_size": [16, 16, 64, 64, 256, 256],
        "throughput": [200.0, 100.0, 100.0, 200.0, 150.0, 150.0],
        "best_val_acc": 0.7,
        "status": "ok",
    })  # fmt: skip
    amp = amp_effects(frame)
    assert amp["effect on throughput"] == pytest.approx(0.0, abs=1e-9)
    low, high = (float(x) for x in amp["throughput 95% interval"].strip("[]").split(","))
    assert -90 < low < -75 and 300 < high < 600  # x0.18 to x5.6: a halving and a doubling alike


def test_an_accuracy_effects_interval_stays_within_minus_and_plus_100_points():
    """Two pairs that disagree by 90 points: a t interval on one degree of freedom reaches
    about -570 to +570 points; a difference of two accuracies is between -100 and +100."""
    frame = pd.DataFrame({
        "trial_id": list("abcd"),
        "config.amp": [True, False] * 2,
        "config.batch_size": [16, 16, 64, 64],
        "throughput": 100.0,
        "best_val_acc": [0.95, 0.5, 0.5, 0.95],
        "status": "ok",
    })  # fmt: skip
    amp = amp_effects(frame)
    assert amp["effect on best_val_acc"] == pytest.approx(0.0, abs=1e-9)
    assert amp["best_val_acc 95% interval"] == "[-100.0, +100.0]"


def amp_effects(frame: pd.DataFrame) -> pd.Series:
    """The technique table's row for AMP over a search of `frame`'s trials."""
    marked = mark_front(frame, OBJECTIVES)
    effects = technique_effects(marked, OBJECTIVES, feasible_mask(marked, OBJECTIVES))
    return effects.set_index("technique").loc["amp"]


def test_a_suggestion_never_started_is_counted_among_no_switchs_trials():
    frame = pd.concat([trials(), pd.DataFrame({
        "trial_id": ["skipped-1"], "config.amp": [True], "config.accumulation_steps": [1],
        "config.optimizer": ["sgd"], "status": ["oom_predicted"],
    })], ignore_index=True)  # fmt: skip
    marked = mark_front(frame, OBJECTIVES)
    effects = technique_effects(marked, OBJECTIVES, feasible_mask(marked, OBJECTIVES))
    amp = effects.set_index("technique").loc["amp"]
    assert amp["trials_on"] == 3 and amp["trials_off"] == 3


def test_a_trend_table_gives_the_mean_and_seed_spread_by_two_settings():
    from analysis.tables import trend_table

    frame = pd.DataFrame({
        "config.batch_size": [16, 16, 256, 256, 256],
        "config.optimizer": ["sgd", "sgd", "sgd", "adam", "adam"],
        "best_val_acc": [0.80, 0.84, 0.60, 0.70, np.nan],
        "status": ["ok", "ok", "ok", "ok", "oom"],
    })  # fmt: skip
    table = trend_table(frame, "best_val_acc", "batch_size", "optimizer")
    assert table.loc[16, "sgd"] == "0.820 ± 0.028 (n=2)"
    assert table.loc[256, "adam"] == "0.700 (n=1; 1 of 2 oom)" and table.loc[16, "adam"] == "-"
    with pytest.raises(KeyError, match="augment"):
        trend_table(frame, "best_val_acc", "augment")


def test_a_trend_of_a_time_some_seeds_never_reached_counts_them_without_a_nan_spread(recwarn):
    from analysis.tables import trend_table

    frame = pd.DataFrame({
        "config.batch_size": [32, 32, 32, 256, 256],
        "time_to_target_s": [4.0, 5.0, np.inf, np.inf, np.inf],
        "status": "ok",
    })  # fmt: skip
    table = trend_table(frame, "time_to_target_s", "batch_size")
    assert table.loc[32, "time_to_target_s"] == "inf (n=3: 1 inf, the rest 4.500)"
    assert table.loc[256, "time_to_target_s"] == "inf (n=2: 2 inf)"
    assert not [w for w in recwarn if issubclass(w.category, RuntimeWarning)]


def test_a_trend_cell_says_how_many_seeds_ended_pruned_or_diverged():
    from analysis.tables import trend_table

    frame = pd.DataFrame({
        "config.batch_size": [256, 256, 256, 32],
        "best_val_acc": [0.64, np.nan, np.nan, 0.8],
        "status": ["ok", "diverged", "diverged", "oom"],
    })  # fmt: skip
    table = trend_table(frame, "best_val_acc", "batch_size")
    assert table.loc[256, "best_val_acc"] == "0.640 (n=1; 2 of 3 diverged)"
    assert table.loc[32, "best_val_acc"] == "- (1 of 1 oom)"


def test_trials_are_selected_by_settings_read_as_yaml():
    from analysis.tables import select

    frame = pd.DataFrame(
        {"config.augment": [True, False, False], "config.batch_size": [16, 16, 32]}
    )
    assert len(select(frame, ["augment=false"])) == 2
    assert len(select(frame, ["augment=false", "batch_size=32"])) == 1
    with pytest.raises(KeyError, match="momentum"):
        select(frame, ["momentum=0.9"])
