import numpy as np
import pandas as pd
import pytest

from analysis.charts import front_staircase
from analysis.pareto import mark_front, objective_matrix, pareto_ranks

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
    both_max = front_staircase(np.array([[1.0, 3.0], [2.0, 1.0]]), ("max", "max"))
    assert both_max.tolist() == [[1.0, 3.0], [1.0, 1.0], [2.0, 1.0]]
    both_min = front_staircase(np.array([[2.0, 1.0], [1.0, 3.0]]), ("min", "min"))
    assert both_min.tolist() == [[1.0, 3.0], [2.0, 3.0], [2.0, 1.0]]
