"""Effects from ablations: each change against the noise floor of its base config's runs."""

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from analysis.ablations import (
    BY_CONSTRUCTION,
    ablation_effects,
    answer,
    at_a_glance,
    base_runs,
    effect_metrics,
    effect_table,
    one_effect,
    passed_over,
    points_within,
    same_updates,
    split_ablations,
)

METRICS = ["throughput", "best_val_acc", "peak_mem_mb"]


def search_and_ablations(
    floor: list[dict], changed: list[dict], base: dict | None = None
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """A search whose trial `knee` (amp off, batch 32) was ablated: `floor` are its
    noise-floor runs' metrics, `changed` (with `ablation`) the ablations'."""
    knee = {"trial_id": "knee", "config.amp": False, "config.batch_size": 32, "config.seed": 0,
            "status": "ok", "throughput": 1000.0, "best_val_acc": 0.70, "peak_mem_mb": 100.0,
            **(base or {})}  # fmt: skip
    other = {**knee, "trial_id": "other", "config.batch_size": 64, "throughput": 5000.0}
    search = pd.DataFrame([knee, other])
    rows = []
    for i, metrics in enumerate(floor):
        floor_run = {"trial_id": f"f{i}", "config.seed": 1000 + i, "config.ablation": "noise floor"}
        rows.append({**knee, **floor_run, "config.ablation_of": "knee", **metrics})
    for i, metrics in enumerate(changed):
        rows.append({**knee, "trial_id": f"c{i}", "config.ablation_of": "knee", **metrics})
    return search, pd.DataFrame(rows)


def test_a_table_of_search_and_ablation_trials_splits_into_the_two():
    search, ablations = search_and_ablations([{}], [{"config.ablation": "amp=true"}])
    both = pd.concat([search, ablations], ignore_index=True)
    apart, ablated = split_ablations(both)
    assert apart["trial_id"].tolist() == ["knee", "other"]
    assert ablated["trial_id"].tolist() == ["c0", "f0"]  # in Tune's order, its trial ids
    assert "config.ablation_of" not in apart  # the search's own trials have no such setting


def test_ablations_with_their_place_in_the_order_are_read_in_it_whatever_their_trial_ids():
    """Tune's trial ids from a searcher are random: the answer listed changes out of order."""
    search, ablations = search_and_ablations(
        [{"config.asked": 0}],
        [{"config.ablation": "amp=true", "config.asked": 2},
         {"config.ablation": "batch_size=64", "config.asked": 1}],
    )  # fmt: skip
    _, ablated = split_ablations(pd.concat([search, ablations], ignore_index=True))
    assert ablated["config.ablation"].tolist() == ["noise floor", "batch_size=64", "amp=true"]


def test_the_noise_floor_is_the_base_trial_its_repeats_and_its_other_seeds_that_ended_ok():
    search, ablations = search_and_ablations(
        [{}, {}, {"status": "oom"}], [{"config.ablation": "amp=true"}]
    )
    repeat = {**search.iloc[0].to_dict(), "trial_id": "knee2", "config.seed": 1}
    search = pd.concat([search, pd.DataFrame([repeat])], ignore_index=True)
    assert sorted(base_runs(search, ablations, "knee")["trial_id"]) == ["f0", "f1", "knee", "knee2"]


def test_an_effect_is_the_change_against_the_base_mean_with_a_prediction_interval():
    base = np.array([0.70, 0.72, 0.74])
    effect, low, high, verdict = one_effect(0.80, base, points=True)
    half = stats.t.ppf(0.975, 2) * 0.02 * math.sqrt(1 + 1 / 3) * 100
    assert effect == pytest.approx(8.0) and (low, high) == pytest.approx((8 - half, 8 + half))
    assert verdict == "not told from noise"  # 8 points against a spread of 2 over 3 runs
    assert one_effect(0.95, base, points=True)[3] == "raises"
    relative = one_effect(110.0, np.array([100.0, 100.0, 100.0]), points=False)
    assert relative == (pytest.approx(10.0), pytest.approx(10.0), pytest.approx(10.0), "raises")


def test_a_ratio_is_taken_on_the_logarithms_so_no_interval_falls_below_minus_100_percent():
    """The issue's case: a throughput spread of 1322-1910 images/s over three runs once gave
    "-29.9% [-123.6, +63.7]" for a change to 1300: a speed cannot lose more than all of it."""
    base = np.array([1910.0, 1322.0, 1523.0])
    effect, low, high, verdict = one_effect(1300.0, base, points=False)
    geometric = math.exp(np.log(base).mean())
    assert effect == pytest.approx((1300 / geometric - 1) * 100)
    assert -100 < low < effect < high and verdict == "not told from noise"
    # halving and doubling are the same distance from the base, either way
    down = one_effect(50.0, np.array([100.0, 100.1, 99.9]), points=False)
    up = one_effect(200.0, np.array([100.0, 100.1, 99.9]), points=False)
    assert down[0] == pytest.approx(-50.0, abs=0.01) and up[0] == pytest.approx(100.0, abs=0.02)
    assert math.log1p(up[0] / 100) == pytest.approx(-math.log1p(down[0] / 100), abs=1e-3)
    for amounts in (np.array([1.0, 30.0, 2.0]), np.array([5.0, 5000.0])):
        assert one_effect(0.5, amounts, points=False)[1] >= -100  # -100 itself: a float's limit


def test_an_accuracy_effects_interval_ends_where_an_accuracy_would_leave_0_to_1():
    """Three runs of which one learned nothing (the knee of 2026-12-07, section 63): the
    prediction interval around their mean of 0.75 ran to +104.5 points, an accuracy of
    1.795; from a mean of 0.75 a change can add 25 points at most and take 75."""
    base = np.array([0.8725, 0.84, 0.5375])
    effect, low, high, verdict = one_effect(0.8775, base, points=True)
    mean = base.mean()
    half = stats.t.ppf(0.975, 2) * base.std(ddof=1) * math.sqrt(1 + 1 / 3) * 100
    assert 100 * (1 - mean) < effect + half  # the t interval alone would pass 1
    assert effect == pytest.approx(100 * (0.8775 - mean))
    assert (low, high) == pytest.approx((-100 * mean, 100 * (1 - mean)))
    assert verdict == "not told from noise"  # the verdict is the t interval's, unchanged
    # an interval inside what an accuracy allows is left as it is
    half = stats.t.ppf(0.975, 2) * 0.02 * math.sqrt(1 + 1 / 3) * 100
    narrow = one_effect(0.80, np.array([0.70, 0.72, 0.74]), points=True)
    assert narrow[1:3] == pytest.approx((8 - half, 8 + half))


def test_an_interval_in_points_is_cut_to_what_fractions_allow_and_nan_stays_nan():
    assert points_within(-79.0, 104.5, 0.75) == (-75.0, 25.0)
    assert points_within(-10.0, 5.0, 0.75) == (-10.0, 5.0)
    assert points_within(-130.0, 120.0) == (-100.0, 100.0)  # a difference of two fractions
    low, high = points_within(math.nan, math.nan, 0.5)
    assert math.isnan(low) and math.isnan(high)


def test_an_amount_that_is_not_positive_has_no_ratio():
    assert (
        one_effect(0.0, np.array([10.0, 11.0]), points=False)[3]
        == "not a positive amount: no ratio"
    )


def test_a_known_effect_is_recovered_within_its_interval_as_often_as_it_claims():
    """Searches where amp adds exactly 5 points of accuracy, on seeds' noise of 2 points:
    the 95% interval holds the true effect in about 95% of them."""
    rng = np.random.default_rng(0)
    held = 0
    for _ in range(400):
        noise = rng.normal(0, 0.02, size=4)
        search, ablations = search_and_ablations(
            [{"best_val_acc": 0.70 + noise[1]}, {"best_val_acc": 0.70 + noise[2]}],
            [{"config.ablation": "amp=true", "best_val_acc": 0.75 + noise[3]}],
            base={"best_val_acc": 0.70 + noise[0]},
        )
        effects = ablation_effects(search, ablations, ["best_val_acc"])
        (row,) = effects.itertuples()
        held += row.low <= 5.0 <= row.high
    assert 0.92 <= held / 400 <= 0.98


def test_a_change_that_runs_out_of_memory_says_so_for_every_metric():
    search, ablations = search_and_ablations(
        [{}, {}], [{"config.ablation": "batch_size=64", "status": "oom"}]
    )
    effects = ablation_effects(search, ablations, METRICS)
    assert set(effects["verdict"]) == {"runs out of memory"} and effects["effect"].isna().all()
    assert answer(effects)[1] == "batch_size: 32 -> 64: runs out of memory."


def test_the_answer_says_what_a_change_did_with_its_interval_and_what_stayed_in_the_noise():
    search, ablations = search_and_ablations(
        [{"throughput": 1010.0, "best_val_acc": 0.71}, {"throughput": 990.0, "best_val_acc": 0.69}],
        [{"config.ablation": "amp=true", "throughput": 1500.0, "best_val_acc": 0.705,
          "peak_mem_mb": 60.0}],
    )  # fmt: skip
    effects = ablation_effects(search, ablations, METRICS)
    lines = answer(effects, {"cudnn_benchmark": "it does nothing on the CPUs"})
    assert lines[0].startswith(
        "Around trial knee (3 runs of its config give the noise floor, best_val_acc "
        "0.7 / 0.71 / 0.69, throughput 1000 / 1010 / 990 images/s;"
    )
    assert lines[1].startswith("amp: false -> true: raised throughput by 50.0% (+")
    # the meter counts the same tensors on every seed: no interval that only repeats it
    assert "cut peak_mem_mb by 40.0% (the same in every run)" in lines[1]
    assert lines[1].endswith("left best_val_acc within the noise.")
    assert lines[2] == "cudnn_benchmark: not ablated, it does nothing on the CPUs."
    table = effect_table(effects)
    assert list(table.columns) == ["base", "change", "throughput (%)", "best_val_acc (points)",
                                   "peak_mem_mb (%)"]  # fmt: skip
    assert table.loc[0, "peak_mem_mb (%)"] == "-40.0% (the same in every run)"
    assert table.loc[0, "throughput (%)"].startswith("+50.0% [+")


def test_a_change_the_meter_measures_as_none_in_every_run_is_said_unchanged_not_noise():
    """The CPU's meter counts the same tensors on every seed: an accumulation that leaves a
    step's tensors alone is exactly 0% with a zero interval, which read "within the noise"
    (2026-12-07)."""
    search, ablations = search_and_ablations(
        [{"best_val_acc": 0.71}, {"best_val_acc": 0.69}],
        [{"config.ablation": "amp=true", "best_val_acc": 0.70}],
    )
    effects = ablation_effects(search, ablations, ["best_val_acc", "peak_mem_mb"])
    assert effects.set_index("metric").loc["peak_mem_mb", "verdict"] == "no change"
    assert answer(effects)[1] == (
        "amp: false -> true: left best_val_acc within the noise; left peak_mem_mb unchanged "
        "(the same in every run)."
    )


def test_a_change_that_learned_nothing_says_so_instead_of_reading_within_the_noise():
    """Adam at SGD's learning rate ended at chance beside a floor of 0.755 / 0.7975 / 0.6925:
    three runs' spread leaves even that inside a 95% prediction interval, so the answer
    read "within the noise" (README's answer, 2026-12-01)."""
    search, ablations = search_and_ablations(
        [{"best_val_acc": 0.7975, "gen_gap": 0.10}, {"best_val_acc": 0.6925, "gen_gap": 0.08}],
        [{"config.ablation": "amp=true", "throughput": 1500.0, "best_val_acc": 0.5,
          "gen_gap": 0.0}],
        base={"best_val_acc": 0.755, "gen_gap": 0.09},
    )  # fmt: skip
    metrics = ["throughput", "best_val_acc", "gen_gap"]
    (accuracy,) = ablation_effects(search, ablations, ["best_val_acc"]).itertuples()
    assert accuracy.low < -25.0 < 0.0 < accuracy.high  # what the seeds' interval says alone
    effects = ablation_effects(search, ablations, metrics, min_accuracy=0.55)
    by_metric = effects.set_index("metric")
    assert by_metric.loc["throughput", "verdict"] == "raises"  # its speed is still its speed
    for metric in ("best_val_acc", "gen_gap"):
        assert math.isnan(by_metric.loc[metric, "effect"])
        assert by_metric.loc[metric, "verdict"] == "learned nothing (best_val_acc 0.5, below 0.55)"
    line = answer(effects)[1]
    assert line.startswith(
        "amp: false -> true: learned nothing (best_val_acc 0.5, below 0.55) on its seed: "
        "best_val_acc, gen_gap not compared; raised throughput by 50.0%"
    )
    assert "within the noise" not in line
    # its gap of 0 at chance is no improvement to point to
    assert at_a_glance(effects, {"gen_gap": "min"}) == [
        "gen_gap: no change lowered it beyond the noise."
    ]
    assert effect_table(effects).loc[0, "best_val_acc (points)"].startswith("learned nothing")


def test_a_change_that_learned_nothing_names_where_the_search_learned_with_that_value():
    """Adam at SGD's rate ended at chance in three of four default runs on 2026-12-06
    (docs/RESULTS.md, section 48) while the search's own Adam trials reached 0.84: the
    value did not fail, the rate it was given did."""
    knee = {"config.optimizer": "sgd", "config.lr": 0.008086}
    search, ablations = search_and_ablations(
        [{}, {}], [{"config.ablation": "optimizer=adam", "best_val_acc": 0.52}], base=knee
    )
    adam = {**search.iloc[0].to_dict(), "config.optimizer": "adam"}
    tried = [
        {**adam, "trial_id": "2657fcb4", "config.lr": 0.0005805, "best_val_acc": 0.8425},
        {**adam, "trial_id": "c0b6b014", "config.lr": 0.008088, "best_val_acc": 0.5},
        {**adam, "trial_id": "stopped", "status": "stopped_early", "best_val_acc": 0.9},
    ]
    search = pd.concat([search, pd.DataFrame(tried)], ignore_index=True)  # fmt: skip
    effects = ablation_effects(search, ablations, ["best_val_acc"], min_accuracy=0.55)
    assert effects.loc[0, "verdict"] == (
        "learned nothing (best_val_acc 0.52, below 0.55; the search's most accurate trial with "
        "optimizer=adam, 2657fcb4, reached 0.8425 at lr 0.0005805)"
    )
    assert answer(effects)[1].startswith("optimizer: sgd -> adam: learned nothing (")
    nowhere = search[search["trial_id"] != "2657fcb4"]  # its other Adam trials: at chance, or cut
    (row,) = ablation_effects(nowhere, ablations, ["best_val_acc"], min_accuracy=0.55).itertuples()
    assert row.verdict == "learned nothing (best_val_acc 0.52, below 0.55)"


def test_a_speed_timed_in_alternation_is_the_throughput_effect_with_its_own_interval():
    search, ablations = search_and_ablations(
        [{"throughput": 1400.0}, {"throughput": 700.0}],  # seeds that moved with the machine
        [{"config.ablation": "amp=true", "throughput": 1500.0, "speed_vs_baseline": 0.8,
          "speed_vs_baseline_low": 0.78, "speed_vs_baseline_high": 0.82}],
    )  # fmt: skip
    (row,) = ablation_effects(search, ablations, ["throughput"]).itertuples()
    assert (row.effect, row.low, row.high) == pytest.approx((-20.0, -22.0, -18.0))
    assert row.verdict == "lowers" and row.measured == "alternation"
    lines = answer(ablation_effects(search, ablations, ["throughput"]))
    assert "speeds timed against it in alternation" in lines[0]
    assert lines[1] == "amp: false -> true: cut throughput by 20.0% (-22.0% to -18.0%)."


def test_a_change_of_the_learning_rate_has_no_speed_or_memory_effect_by_construction():
    search, ablations = search_and_ablations(
        [{"throughput": 1400.0}, {"throughput": 700.0}],
        [{"config.ablation": "lr=0.02", "throughput": 2000.0, "best_val_acc": 0.80,
          "peak_mem_mb": 100.0}],
        base={"config.lr": 0.01},
    )  # fmt: skip
    effects = ablation_effects(search, ablations, METRICS).set_index("metric")
    assert effects.loc["throughput", "verdict"] == BY_CONSTRUCTION
    assert effects.loc["peak_mem_mb", "verdict"] == BY_CONSTRUCTION
    assert math.isnan(effects.loc["throughput", "effect"])
    assert effects.loc["best_val_acc", "measured"] == "seeds"  # accuracy is measured
    (line,) = answer(effects.reset_index())[1:]
    assert line.endswith("throughput, peak_mem_mb: none by construction (the same work per image).")


def test_the_answer_opens_with_what_did_most_for_each_objective_or_that_nothing_did():
    search, ablations = search_and_ablations(
        [{"throughput": 1010.0, "best_val_acc": 0.71}, {"throughput": 990.0, "best_val_acc": 0.69}],
        [{"config.ablation": "amp=true", "throughput": 1500.0, "best_val_acc": 0.705},
         {"config.ablation": "batch_size=64", "throughput": 1200.0, "best_val_acc": 0.69}],
    )  # fmt: skip
    effects = ablation_effects(search, ablations, ["throughput", "best_val_acc"])
    lines = at_a_glance(effects, {"throughput": "max", "best_val_acc": "max"})
    assert lines[0].startswith("throughput: best raised by amp: false -> true, +50.0% [+")
    assert lines[1] == "best_val_acc: no change raised it beyond the noise."


def test_where_no_change_helps_an_objective_the_glance_names_the_one_that_harmed_it_most():
    """The default command's answer on 2026-12-08: Adam at SGD's rate cost 19.8 points, and
    the glance said only that nothing raised the accuracy (docs/RESULTS.md, section 66)."""
    search, ablations = search_and_ablations(
        [{"best_val_acc": 0.8575}, {"best_val_acc": 0.7975}],
        [{"config.ablation": "amp=true", "best_val_acc": 0.60},
         {"config.ablation": "batch_size=64", "best_val_acc": 0.78}],
        base={"best_val_acc": 0.7975},
    )  # fmt: skip
    effects = ablation_effects(search, ablations, ["best_val_acc"])
    (line,) = at_a_glance(effects, {"best_val_acc": "max"})
    assert line.startswith(
        "best_val_acc: no change raised it beyond the noise; amp: false -> true lowered it "
        "most, -21.8 points ["
    )


def test_two_changes_that_train_the_same_updates_are_said_to_do_so():
    knee = {"config.batch_size": 32, "config.accumulation_steps": 4}
    _, ablations = search_and_ablations(
        [{}],
        [{"config.ablation": "batch_size=16", "config.batch_size": 16,
          "config.accumulation_steps": 4},
         {"config.ablation": "accumulation_steps=2", "config.accumulation_steps": 2},
         {"config.ablation": "amp=true", "config.amp": True}],
        base=knee,
    )  # fmt: skip
    (note,) = same_updates(ablations)
    assert note.startswith("batch_size=16 and accumulation_steps=2 (around trial knee) both "
                           "train 64 images an update")  # fmt: skip
    assert same_updates(ablations[ablations["config.ablation"] != "batch_size=16"]) == []


def test_a_metric_the_base_never_reaches_has_no_effect_but_says_why():
    search, ablations = search_and_ablations(
        [{"time_to_target_s": math.inf}, {"time_to_target_s": 12.0}],
        [{"config.ablation": "amp=true", "time_to_target_s": 9.0}],
        base={"time_to_target_s": 10.0},
    )
    (row,) = ablation_effects(search, ablations, ["time_to_target_s"]).itertuples()
    assert math.isnan(row.effect) and row.verdict == "not always reached"
    search, ablations = search_and_ablations(
        [{"time_to_target_s": 11.0}, {"time_to_target_s": 12.0}],
        [{"config.ablation": "amp=true", "time_to_target_s": math.inf}],
        base={"time_to_target_s": 10.0},
    )
    (row,) = ablation_effects(search, ablations, ["time_to_target_s"]).itertuples()
    assert math.isnan(row.effect) and row.verdict == "never reached with the change"


def test_the_effects_cover_the_objectives_then_memory_and_time_to_target():
    assert effect_metrics(["throughput", "peak_mem_mb"]) == [
        "throughput", "peak_mem_mb", "time_to_target_s"
    ]  # fmt: skip


def test_the_search_keeps_every_column_of_its_own_even_one_never_measured():
    search, ablations = search_and_ablations([{}], [{"config.ablation": "amp=true"}])
    search = search.drop(columns="config.seed").assign(noise_scale=float("nan"))
    apart, _ = split_ablations(pd.concat([search, ablations], ignore_index=True))
    assert "noise_scale" in apart  # NaN in every trial, as in a search that measures no noise scale
    assert "config.seed" not in apart and "config.ablation" not in apart  # the ablations'


def test_the_answer_shows_each_base_runs_accuracy_so_a_config_that_learns_on_one_seed_shows():
    search, ablations = search_and_ablations(
        [{"best_val_acc": 0.5}, {"best_val_acc": 0.5}],
        [{"config.ablation": "amp=true", "best_val_acc": 0.79}],
        base={"best_val_acc": 0.81},
    )
    effects = ablation_effects(search, ablations, METRICS)
    assert set(effects["base_accuracies"]) == {"0.81 / 0.5 / 0.5"}
    assert "noise floor, best_val_acc 0.81 / 0.5 / 0.5, throughput" in answer(effects)[0]
    unmeasured = ["best_val_acc", "throughput"]
    without = ablation_effects(search.drop(columns=unmeasured),
                               ablations.drop(columns=unmeasured), ["peak_mem_mb"])  # fmt: skip
    assert answer(without)[0].startswith("Around trial knee (3 runs of its config give the "
                                         "noise floor; 95% intervals)")  # fmt: skip


def test_the_answer_says_plainly_when_the_base_config_learned_nothing_on_some_of_its_runs():
    search, ablations = search_and_ablations(
        [{"best_val_acc": 0.84}, {"best_val_acc": 0.5375}],
        [{"config.ablation": "amp=true", "best_val_acc": 0.86}],
        base={"best_val_acc": 0.8725},
    )
    effects = ablation_effects(search, ablations, METRICS, min_accuracy=0.55)
    assert set(effects["base_at_chance"]) == {1}
    header, warning, *_ = answer(effects)
    assert "best_val_acc 0.8725 / 0.84 / 0.5375" in header
    assert warning.startswith(
        "Its config learned nothing on 1 of its 3 runs: it learns on some seeds only, and "
        "every accuracy effect below is read against runs that include that failure"
    )
    assert "search.ablation.around=front" in warning


def test_a_base_config_that_learned_on_every_run_or_an_unknown_min_accuracy_warns_of_nothing():
    search, ablations = search_and_ablations(
        [{"best_val_acc": 0.84}, {"best_val_acc": 0.56}],
        [{"config.ablation": "amp=true", "best_val_acc": 0.86}],
    )
    learned = ablation_effects(search, ablations, METRICS, min_accuracy=0.55)
    assert set(learned["base_at_chance"]) == {0}
    assert answer(learned)[1].startswith("amp: false -> true:")
    unknown = ablation_effects(search, ablations, METRICS)  # no min accuracy: none judged
    assert set(unknown["base_at_chance"]) == {0}
    assert not any(line.startswith("Its config") for line in answer(unknown))


def test_the_answer_shows_each_base_runs_own_speed_so_runs_of_one_config_that_read_apart_show():
    search, ablations = search_and_ablations(
        [
            {"throughput": 4401.2, "trial_throughput": math.nan},
            {"throughput": 4097.0, "trial_throughput": math.nan},
        ],
        [{"config.ablation": "amp=true", "throughput": 3000.0}],
        base={"throughput": 4300.0, "trial_throughput": 4443.0},  # pooled with its same-work kin
    )
    effects = ablation_effects(search, ablations, METRICS)
    assert set(effects["base_throughputs"]) == {"4443 / 4401 / 4097"}
    assert (
        "best_val_acc 0.7 / 0.7 / 0.7, throughput 4443 / 4401 / 4097 images/s;"
        in (answer(effects)[0])
    )
    without = ablation_effects(search.drop(columns=["throughput", "trial_throughput"]),
                               ablations.drop(columns="throughput"), ["best_val_acc"])  # fmt: skip
    assert "images/s" not in answer(without)[0]


def test_each_base_runs_speed_shows_its_own_interval_where_it_has_one():
    """Runs of one config a few percent apart: their intervals say whether each measured
    that far (a pooled run's own, `trial_throughput_low`, not its kin's)."""
    pooled = {"throughput": 4300.0, "throughput_low": 3990.0, "throughput_high": 4600.0,
              "trial_throughput": 4443.0, "trial_throughput_low": 4310.0,
              "trial_throughput_high": 4580.0}  # fmt: skip
    unpooled = dict.fromkeys(["trial_throughput", "trial_throughput_low",
                              "trial_throughput_high"], math.nan)  # fmt: skip
    apart = {"throughput": 4401.2, "throughput_low": 4300.4, "throughput_high": 4490.0}
    bare = {"throughput": 4097.0, "throughput_low": math.nan, "throughput_high": math.nan}
    search, ablations = search_and_ablations(
        [{**apart, **unpooled}, {**bare, **unpooled}],
        [{"config.ablation": "amp=true", "throughput": 3000.0}],
        base=pooled,
    )
    effects = ablation_effects(search, ablations, METRICS)
    assert "throughput 4443 [4310, 4580] / 4401 [4300, 4490] / 4097 images/s;" in answer(effects)[0]


def test_a_front_trial_whose_floor_failed_and_that_was_not_ablated_is_said_to_be_passed_over():
    """The default command's knee at `9ec1b5c` (Adam at batch 16) learned nothing on one of
    its floor seeds (0.5225) and the next front trial was ablated (docs/RESULTS.md, 66)."""
    search, ablations = search_and_ablations([{"best_val_acc": 0.5225}, {"best_val_acc": 0.7625}],
                                             [], base={"best_val_acc": 0.815})  # fmt: skip
    steady = {**ablations.iloc[0].to_dict(), "config.ablation_of": "other", "best_val_acc": 0.8}
    ablated = pd.DataFrame([
        {**steady, "trial_id": "g0"}, {**steady, "trial_id": "g1"},
        {**steady, "trial_id": "g2", "config.ablation": "amp=true"},
    ])  # fmt: skip
    ablations = pd.concat([ablations, ablated], ignore_index=True)
    assert passed_over(search, ablations, min_accuracy=0.55) == [
        "Trial knee, a front trial, was not ablated: its config learned nothing on 1 of its 3 "
        "runs (best_val_acc 0.815 / 0.5225 / 0.7625), it learns on some seeds only "
        "(search.ablation.skip_seed_fragile)."
    ]  # "other", whose floor learned and which was ablated, is not named
    assert passed_over(search, ablations.iloc[0:0], min_accuracy=0.55) == []
