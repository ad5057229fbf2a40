import warnings

import numpy as np
import pandas as pd
import pytest

from analysis.charts import front_staircase
from analysis.pareto import (
    balanced_front,
    declared_bounds,
    dominators,
    hypervolume,
    knee_point,
    lower_is_better_signs,
    mark_front,
    normalised,
    objective_matrix,
    pareto_ranks,
    told_apart,
)

OBJECTIVES = {"throughput": "max", "best_val_acc": "max", "gen_gap": "min"}


def brute_force_ranks(points: np.ndarray) -> np.ndarray:
    """Peel fronts off one by one with the definition of dominance (lower is better)."""
    remaining = set(range(len(points)))
    ranks = np.full(len(points), -1)
    rank = 0
    while remaining:
        front = {
            i
            for i in remaining
            if not any(
                np.all(points[j] <= points[i]) and np.any(points[j] < points[i]) for j in remaining
            )
        }
        for i in front:
            ranks[i] = rank
        remaining -= front
        rank += 1
    return ranks


def frame_of(points: np.ndarray, status=None) -> pd.DataFrame:
    frame = pd.DataFrame(points, columns=list(OBJECTIVES))
    frame["status"] = status if status is not None else "ok"
    return frame


@pytest.mark.parametrize("seed", range(8))
def test_ranks_match_brute_force_on_random_points_with_ties_and_duplicates(seed):
    rng = np.random.default_rng(seed)
    points = rng.integers(0, 5, size=(40, 3)).astype(float)  # small range: many ties
    points[5] = points[6]  # an exact duplicate
    frame = frame_of(points)
    ranks = pareto_ranks(frame, OBJECTIVES).to_numpy()
    assert np.array_equal(ranks, brute_force_ranks(objective_matrix(frame, OBJECTIVES)))
    assert ranks[5] == ranks[6]


def test_with_one_objective_constant_the_front_is_decided_by_the_others():
    points = np.array([[1.0, 0.5, 0.1], [2.0, 0.4, 0.1], [0.5, 0.3, 0.1]])
    ranks = pareto_ranks(frame_of(points), OBJECTIVES).tolist()
    assert ranks == [0, 0, 1]


def test_directions_are_respected_max_is_better_for_throughput_and_min_for_gen_gap():
    points = np.array([[100.0, 0.8, 0.05], [50.0, 0.8, 0.05], [100.0, 0.8, 0.20]])
    assert pareto_ranks(frame_of(points), OBJECTIVES).tolist() == [0, 1, 1]


def test_infeasible_trials_never_sit_on_the_front_even_with_the_best_values():
    points = np.array([[1e9, 1.0, 0.0], [10.0, 0.6, 0.1], [np.nan, 0.9, 0.1]])
    frame = frame_of(points, status=["oom", "ok", "ok"])
    marked = mark_front(frame, OBJECTIVES)
    assert marked.iloc[0]["throughput"] == 10.0 and bool(marked.iloc[0]["is_pareto"])
    assert marked["is_pareto"].sum() == 1
    assert marked["pareto_rank"].isna().sum() == 2


def test_the_staircase_between_two_front_points_passes_their_worse_corner():
    lower_is_better = front_staircase(np.array([[2.0, 1.0], [1.0, 3.0]]))
    assert lower_is_better.tolist() == [[1.0, 3.0], [2.0, 3.0], [2.0, 1.0]]
    # two maximised objectives, signed once, drawn back: the corner is the lower one
    signs = lower_is_better_signs({"throughput": "max", "best_val_acc": "max"})
    both_max = front_staircase(np.array([[1.0, 3.0], [2.0, 1.0]]) * signs) * signs
    assert both_max.tolist() == [[2.0, 1.0], [1.0, 1.0], [1.0, 3.0]]


def test_normalising_puts_the_best_value_of_either_direction_at_zero():
    frame = pd.DataFrame({"throughput": [0.0, 1000.0, np.inf], "gen_gap": [0.0, 0.5, np.nan]})
    objectives = {"throughput": "max", "gen_gap": "min"}
    bounds = {"throughput": (0.0, 1000.0), "gen_gap": (0.0, 1.0)}
    assert normalised(frame, objectives, bounds).tolist() == [[1.0, 0.0], [0.0, 0.5], [0.0, 1.0]]


def test_trials_at_chance_are_kept_off_the_front_when_asked():
    points = np.array([[2000.0, 0.50, -0.02], [1000.0, 0.80, 0.10]])
    frame = frame_of(points)
    assert pareto_ranks(frame, OBJECTIVES).tolist() == [0, 0]
    assert pareto_ranks(frame, OBJECTIVES, min_accuracy=0.55).tolist()[1] == 0
    assert np.isnan(pareto_ranks(frame, OBJECTIVES, min_accuracy=0.55).tolist()[0])


TWO = {"best_val_acc": "max", "gen_gap": "min"}


def test_hypervolume_of_known_fronts_in_the_normalised_box():
    bounds = {"best_val_acc": (0.0, 1.0), "gen_gap": (0.0, 1.0)}
    one = pd.DataFrame({"best_val_acc": [0.5], "gen_gap": [0.5], "status": "ok"})
    assert hypervolume(one, TWO, bounds) == pytest.approx(0.25)
    two = pd.DataFrame({"best_val_acc": [0.5, 0.75], "gen_gap": [0.25, 0.5], "status": "ok"})
    # union of [0.5,1]x[0,0.75]... in normalised (1 - acc, gap) space: 0.5*0.75 + 0.25*0.5
    assert hypervolume(two, TWO, bounds) == pytest.approx(0.5 * 0.75 + 0.25 * 0.5)
    ideal = pd.DataFrame({"best_val_acc": [1.0], "gen_gap": [0.0], "status": "ok"})
    assert hypervolume(ideal, TWO, bounds) == pytest.approx(1.0)
    nothing = one.assign(status="oom")
    assert hypervolume(nothing, TWO, bounds) == 0.0


def test_hypervolume_grows_when_a_dominating_trial_is_added():
    bounds = {"best_val_acc": (0.0, 1.0), "gen_gap": (0.0, 1.0)}
    rng = np.random.default_rng(0)
    frame = pd.DataFrame(
        {"best_val_acc": rng.uniform(0.5, 0.8, 20), "gen_gap": rng.uniform(0, 0.3, 20)}
    ).assign(status="ok")
    better = pd.concat(
        [frame, pd.DataFrame([{"best_val_acc": 0.9, "gen_gap": 0.0, "status": "ok"}])]
    )
    assert hypervolume(better, TWO, bounds) > hypervolume(frame, TWO, bounds)


def test_bounds_are_natural_for_accuracies_and_gaps_and_a_power_of_ten_for_throughput():
    frame = pd.DataFrame({"throughput": [120.0, 3400.0], "best_val_acc": [0.5, 0.9],
                          "gen_gap": [0.1, 0.2]})  # fmt: skip
    bounds = declared_bounds(frame, OBJECTIVES)
    assert bounds == {"throughput": (0.0, 10000.0), "best_val_acc": (0.0, 1.0),
                      "gen_gap": (0.0, 1.0)}  # fmt: skip
    assert declared_bounds(frame, OBJECTIVES, {"throughput": (0, 5000)})["throughput"] == (0, 5000)


def test_normalising_maps_best_to_zero_worst_to_one_and_infinite_times_to_worst():
    objectives = {"time_to_target_s": "min", "best_val_acc": "max"}
    frame = pd.DataFrame({"time_to_target_s": [0.0, 50.0, np.inf], "best_val_acc": [1.0, 0.5, 0.0]})
    scaled = normalised(frame, objectives, {"time_to_target_s": (0, 100), "best_val_acc": (0, 1)})
    assert scaled.tolist() == [[0.0, 0.0], [0.5, 0.5], [1.0, 1.0]]


def test_the_knee_is_the_balanced_front_point_not_an_extreme():
    frame = pd.DataFrame({
        "best_val_acc": [0.60, 0.78, 0.80],
        "gen_gap": [0.00, 0.02, 0.30],
        "status": "ok",
    })  # fmt: skip
    marked = mark_front(frame, TWO)
    assert marked.loc[knee_point(marked, TWO), "best_val_acc"] == 0.78


SPLITS = {"val": 400, "test": 400, "train_eval": 400}


def test_a_gap_the_fronts_trials_cannot_tell_apart_does_not_decide_the_knee():
    # The fastest trial is nearest the ideal only by its gap, 0.04 below the others': less
    # than a gap's noise on 400 images a split (1.96 standard errors of a difference, 0.098)
    frame = pd.DataFrame({
        "throughput": [6000.0, 4500.0, 3000.0],
        "throughput_low": [5700.0, 4275.0, 2850.0],
        "throughput_high": [6300.0, 4725.0, 3150.0],
        "best_val_acc": [0.78, 0.84, 0.845],
        "gen_gap": [0.08, 0.12, 0.11],
        "status": "ok",
    })  # fmt: skip
    marked = mark_front(frame, OBJECTIVES)
    assert marked["is_pareto"].all()
    assert marked.loc[knee_point(marked, OBJECTIVES), "throughput"] == 6000.0  # by range
    knee = knee_point(marked, OBJECTIVES, SPLITS)  # by range, or by noise where that is wider
    assert marked.loc[knee, "throughput"] == 4500.0


def test_a_front_trial_that_never_reached_its_target_is_that_objectives_worst_in_the_knee():
    """One trial with time_to_target_s = inf (fastest, so on the front) must not take the
    objective out of the knee: B, as fast as A, reaches the target in a ninth of A's time."""
    objectives = {"throughput": "max", "time_to_target_s": "min"}
    frame = mark_front(pd.DataFrame({
        "status": "ok", "throughput": [1000.0, 990.0, 500.0, 2000.0],
        "time_to_target_s": [900.0, 100.0, 95.0, np.inf],
    }, index=["A", "B", "C", "D"]), objectives)  # fmt: skip
    assert frame["is_pareto"].all()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no division by an infinite range
        order = balanced_front(frame, objectives)
    assert order[0] == "B" and order[-1] == "A"  # A: 900 s to the target


def test_what_the_evidence_tells_apart_is_two_standard_errors_of_a_difference():
    frame = pd.DataFrame({
        "throughput": [1000.0], "throughput_low": [950.0], "throughput_high": [1050.0],
        "best_val_acc": [0.8], "gen_gap": [0.1], "peak_mem_mb": [30.0],
    })  # fmt: skip
    told = told_apart(frame, {**OBJECTIVES, "peak_mem_mb": "min"}, SPLITS)
    z = 1.959964 * np.sqrt(2)
    plus_four = (0.8 * 400 + 2) / 404  # two right and two wrong added (Agresti and Coull)
    assert told["best_val_acc"] == pytest.approx(z * np.sqrt(plus_four * (1 - plus_four) / 404))
    assert told["best_val_acc"] == pytest.approx(z * np.sqrt(0.8 * 0.2 / 400), rel=1e-3)
    assert told["gen_gap"] == pytest.approx(z * np.sqrt(0.25 / 400 + 0.25 / 400))
    assert told["throughput"] == pytest.approx(z * 50 / 1.959964)
    assert told["peak_mem_mb"] == 0.0  # the meter is exact


def test_dominators_lists_for_each_point_the_points_better_in_one_and_no_worse_in_any():
    points = np.array([[1.0, 1.0], [2.0, 2.0], [1.0, 3.0], [0.5, 4.0], [2.0, 2.0]])
    assert dominators(points) == [[], [0], [0], [], [0]]  # equal points do not dominate


def test_a_point_meeting_a_constraint_dominates_every_point_that_does_not():
    points = np.array([[1.0, 1.0], [2.0, 2.0], [0.0, 0.0], [0.5, 0.5], [0.7, 0.7]])
    feasible = np.array([True, True, False, False, False])
    # the best objectives cannot save a point that misses the constraint; among those
    # that miss it, the objectives decide as they do among those that meet it
    assert dominators(points, feasible) == [[], [0], [0, 1], [0, 1, 2], [0, 1, 2, 3]]


def test_when_every_point_meets_the_constraint_the_objectives_alone_decide():
    points = np.array([[1.0, 1.0], [0.0, 2.0], [2.0, 2.0]])
    assert dominators(points, np.ones(3, dtype=bool)) == dominators(points) == [[], [], [0, 1]]


def test_a_constraint_mask_of_another_length_than_the_points_is_refused():
    with pytest.raises(ValueError, match="one entry per row"):
        dominators(np.zeros((3, 2)), np.ones(1, dtype=bool))


def test_on_evidence_a_point_dominates_only_where_it_is_better_beyond_the_noise():
    from analysis.pareto import dominators

    # lower is better; standard errors of 1 in every column
    points = np.array([[0.0, 0.0], [1.0, 1.0], [10.0, 0.5]])
    errors = np.ones_like(points)
    assert dominators(points) == [[], [0], [0]]
    # 1 behind in both columns is within 1.96 x sqrt(2): nobody dominates it; 10 behind is
    assert dominators(points, errors=errors) == [[], [], [0, 1]]
    # across a constraint, only by the constrained column beyond the noise
    feasible = np.array([True, False, False])
    assert dominators(points, feasible, errors, constraint_column=1) == [[], [], [1]]
    assert dominators(points, feasible, errors, constraint_column=0) == [[], [], [0, 1]]


def test_on_evidence_with_each_sides_error_only_the_sides_facing_each_other_count():
    from analysis.pareto import dominators

    # lower is better: 0 is 3 above 1 in the first column and 3 below it in the second
    points = np.array([[3.0, 0.0], [0.0, 3.0]])
    symmetric = np.full((2, 2), 1.0)
    sides = np.stack([symmetric, symmetric], axis=2)
    assert dominators(points, errors=sides) == dominators(points, errors=symmetric) == [[], []]
    # 1's first column known to lie no higher than a hair above it, 0's no lower than a hair
    # below: 0 is behind beyond the noise there, whatever their far sides
    sides[1, 0] = (5.0, 0.01)  # (below, above)
    sides[0, 0] = (0.01, 5.0)
    assert dominators(points, errors=sides, decisive=[1]) == [[], []]
    # the far sides facing each other instead: 3 behind is within their noise, and 0,
    # ahead in the second column beyond it, dominates 1
    sides[1, 0] = (0.01, 5.0)
    sides[0, 0] = (5.0, 0.01)
    sides[:, 1] = 0.1
    assert dominators(points, errors=sides, decisive=[1]) == [[], [0]]


def test_with_decisive_columns_a_point_dominates_only_where_it_is_ahead_on_one_of_them():
    # lower is better: 0 is ahead of 1 on the first column alone, of 2 on the second
    points = np.array([[0.0, 1.0], [5.0, 1.0], [0.0, 3.0]])
    assert dominators(points) == [[], [0], [0]]
    assert dominators(points, decisive=[1]) == [[], [], [0]]
    errors = np.full_like(points, 0.1)
    assert dominators(points, errors=errors, decisive=[1]) == [[], [], [0]]
    assert dominators(points, errors=errors, decisive=[0, 1]) == [[], [0], [0]]
    # across a constraint on none of the columns, too: only ahead on a decisive one
    feasible = np.array([True, False, False])
    assert dominators(points, feasible, errors, decisive=[1]) == [[], [], [0]]
    assert dominators(points, feasible, errors) == [[], [0], [0]]
