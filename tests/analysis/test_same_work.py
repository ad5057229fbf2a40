import math

import numpy as np
import pandas as pd
import pytest

from analysis.pareto import mark_front
from analysis.report import build_report, ranked
from analysis.same_work import (
    SAME_WORK_TRIALS,
    TRIAL_THROUGHPUT,
    own_values,
    pool_same_work,
    pooled_note,
    work_columns,
)

OBJECTIVES = {"throughput": "max", "best_val_acc": "max"}


def trials(**columns: list) -> pd.DataFrame:
    count = len(next(iter(columns.values())))
    base = {
        "trial_id": [f"t{i}" for i in range(count)],
        "config.batch_size": [32] * count,
        "config.optimizer": ["adam"] * count,
        "config.lr": [0.001 * (i + 1) for i in range(count)],
        "status": ["ok"] * count,
        "epoch": [8] * count,
    }
    return pd.DataFrame({**base, **columns})


def test_the_learning_rate_warmup_and_seed_are_not_part_of_a_steps_work():
    frame = trials(throughput=[1.0], **{"config.warmup_epochs": [2], "config.seed": [0]})
    assert work_columns(frame) == ["config.batch_size", "config.optimizer"]


def test_configs_that_differ_only_in_learning_rate_share_the_geometric_mean_of_their_speeds():
    pooled = pool_same_work(trials(throughput=[1000.0, 1440.0]))
    assert pooled["throughput"].tolist() == pytest.approx([1200.0, 1200.0])
    assert pooled[TRIAL_THROUGHPUT].tolist() == [1000.0, 1440.0]
    assert pooled[SAME_WORK_TRIALS].tolist() == [2, 2]


def test_configs_of_other_work_keep_their_own_speed():
    frame = trials(throughput=[1000.0, 1440.0, 700.0], **{"config.batch_size": [32, 32, 16]})
    pooled = pool_same_work(frame)
    assert pooled["throughput"].tolist() == pytest.approx([1200.0, 1200.0, 700.0])
    assert pooled[SAME_WORK_TRIALS].tolist() == [2, 2, 1]


def test_without_two_trials_of_one_work_the_frame_is_unchanged():
    frame = trials(throughput=[1000.0, 700.0], **{"config.batch_size": [32, 16]})
    assert pool_same_work(frame) is frame


def test_the_pooled_interval_holds_every_members_interval_and_figure():
    frame = trials(
        throughput=[1000.0, 1440.0], throughput_low=[980.0, 1400.0],
        throughput_high=[1020.0, 1470.0],
    )  # fmt: skip
    pooled = pool_same_work(frame)
    assert pooled["throughput_low"].tolist() == [980.0, 980.0]
    assert pooled["throughput_high"].tolist() == [1470.0, 1470.0]
    one_block = pool_same_work(frame.assign(throughput_low=np.nan, throughput_high=np.nan))
    assert one_block["throughput_low"].tolist() == [1000.0, 1000.0]
    assert one_block["throughput_high"].tolist() == [1440.0, 1440.0]


def test_a_trial_stopped_early_pools_but_one_that_failed_or_diverged_does_not():
    frame = trials(
        throughput=[1000.0, 1440.0, 50.0, np.nan],
        status=["ok", "stopped_early", "diverged", "oom"],
    )  # fmt: skip
    pooled = pool_same_work(frame)
    assert pooled["throughput"].iloc[:2].tolist() == pytest.approx([1200.0, 1200.0])
    assert pooled["throughput"].iloc[2] == 50.0 and math.isnan(pooled["throughput"].iloc[3])


def test_a_growing_batch_pools_only_with_trials_that_trained_as_many_epochs():
    frame = trials(
        throughput=[1000.0, 1440.0, 2000.0, 1800.0], epoch=[8, 8, 2, 3],
        **{"config.adabatch_growth": [2, 2, 2, 1]},
    )  # fmt: skip
    pooled = pool_same_work(frame)
    assert pooled["throughput"].tolist() == pytest.approx([1200.0, 1200.0, 2000.0, 1800.0])


def test_the_time_to_target_follows_the_pooled_speed_where_all_of_it_was_timed():
    frame = trials(
        throughput=[1000.0, 1440.0, 1000.0, 1440.0], time_to_target_s=[12.0, 10.0, 12.0, np.inf],
        compile_s=[0.0, 0.0, 3.0, 0.0], **{"config.batch_size": [32, 32, 16, 16]},
    )  # fmt: skip
    pooled = pool_same_work(frame)
    assert pooled["time_to_target_s"].iloc[:2].tolist() == pytest.approx([10.0, 12.0])
    assert pooled["time_to_target_s"].iloc[2] == 12.0  # compiled: not all of it timed
    assert pooled["time_to_target_s"].iloc[3] == math.inf


def test_a_config_faster_only_by_its_moment_no_longer_stands_on_the_front():
    # Same work, timed at two moments: the less accurate one measured faster.
    frame = trials(throughput=[1600.0, 1400.0], best_val_acc=[0.80, 0.86])
    before = mark_front_of(frame, pooled=False)
    assert before == {"t0", "t1"}
    assert mark_front_of(frame, pooled=True) == {"t1"}


def mark_front_of(frame: pd.DataFrame, pooled: bool) -> set[str]:
    marked = ranked(frame, OBJECTIVES, None)[0] if pooled else mark_front(frame, OBJECTIVES)
    return set(marked.loc[marked["is_pareto"] == True, "trial_id"])  # noqa: E712


def test_results_without_a_status_pool_as_trials_that_trained():
    frame = trials(throughput=[1000.0, 1440.0]).drop(columns="status")
    assert pool_same_work(frame)["throughput"].tolist() == pytest.approx([1200.0, 1200.0])


def test_repeats_of_a_pooled_config_keep_the_spread_of_their_own_speeds():
    frame = trials(throughput=[1000.0, 1440.0], best_val_acc=[0.8, 0.82],
                   **{"config.lr": [0.001, 0.001], "config.seed": [0, 1]})  # fmt: skip
    (row,) = ranked(frame, OBJECTIVES, None)[0].itertuples()
    assert row.seeds == 2 and row.throughput == pytest.approx(1200.0)
    assert row.throughput_std == pytest.approx(np.std([1000.0, 1440.0], ddof=1))
    assert row.trial_throughput == pytest.approx(1220.0)


def test_trials_without_a_growing_batch_pool_whatever_epoch_they_stopped_at():
    frame = trials(throughput=[1000.0, 1440.0], epoch=[8, 2], status=["ok", "stopped_early"])
    assert pool_same_work(frame)["throughput"].tolist() == pytest.approx([1200.0, 1200.0])


def test_a_batch_grown_by_its_measured_noise_scale_pools_with_none():
    """Its learning rate sets when the batch grows, so the same epochs are another mix."""
    frame = trials(
        throughput=[1000.0, 1440.0], **{"config.adabatch_growth": [2, 2],
                                         "config.adabatch_rule": ["noise_scale"] * 2},
    )  # fmt: skip
    assert pool_same_work(frame) is frame


def test_whole_numbers_repeated_labels_and_missing_compile_times_are_pooled_as_they_should():
    frame = trials(
        throughput=[1000, 1440, 700], time_to_target_s=[12, 10, 5],
        **{"config.batch_size": [32, 32, 16], "config.compile": [True, True, False]},
    )  # fmt: skip
    frame.index = [0, 1, 1]  # labels as a concatenation leaves them
    pooled = pool_same_work(frame)
    assert pooled["throughput"].tolist() == pytest.approx([1200.0, 1200.0, 700.0])
    # compile on and no compile_s (a run logged before it): not all of the time was timed
    assert pooled["time_to_target_s"].tolist() == [12.0, 10.0, 5.0]


def test_own_values_give_each_trial_back_what_it_measured():
    frame = trials(throughput=[1000.0, 1440.0], throughput_low=[990.0, 1430.0],
                   throughput_high=[1010.0, 1450.0])  # fmt: skip
    restored = own_values(pool_same_work(frame))
    for column in ("throughput", "throughput_low", "throughput_high"):
        assert restored[column].tolist() == frame[column].tolist()
    assert own_values(frame) is frame


def test_a_config_pooled_only_with_its_own_seeds_is_not_said_to_share_a_speed():
    frame = trials(throughput=[1000.0, 1440.0], best_val_acc=[0.8, 0.82],
                   **{"config.lr": [0.001, 0.001], "config.seed": [0, 1]})  # fmt: skip
    assert pooled_note(ranked(frame, OBJECTIVES, None)[0]) == ""
    other_lr = trials(throughput=[1210.0], best_val_acc=[0.7],
                      **{"config.lr": [0.005], "config.seed": [0]})  # fmt: skip
    other = pd.concat([frame, other_lr.assign(trial_id="t2")], ignore_index=True)
    assert pooled_note(ranked(other, OBJECTIVES, None)[0]).startswith("2 of 2 configs share")


def test_the_shared_speed_note_counts_only_trials_that_have_a_speed():
    """A suggestion never started (predicted out of memory) was counted: "12 of 17 trials"
    where 16 had a speed (2026-12-07)."""
    frame = trials(throughput=[1000.0, 1440.0, np.nan], best_val_acc=[0.8, 0.82, np.nan],
                   status=["ok", "ok", "oom_predicted"])  # fmt: skip
    assert pooled_note(ranked(frame, OBJECTIVES, None)[0]).startswith("2 of 2 trials share")


def test_the_report_ranks_on_the_shared_speed_and_says_so(tmp_path):
    frame = trials(throughput=[1600.0, 1400.0, 900.0], best_val_acc=[0.80, 0.86, 0.90],
                   **{"config.batch_size": [32, 32, 16]})  # fmt: skip
    report = build_report(frame, OBJECTIVES, tmp_path, min_accuracy=None)
    front = set(report.frame.loc[report.frame["is_pareto"] == True, "trial_id"])  # noqa: E712
    assert front == {"t1", "t2"}  # t0 was faster only by its moment
    assert "Speed: 2 of 3 trials share a speed" in (tmp_path / "report.md").read_text()
    written = pd.read_csv(tmp_path / "trials.csv").set_index("trial_id")
    assert written.loc["t0", TRIAL_THROUGHPUT] == 1600.0
