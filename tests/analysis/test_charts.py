import numpy as np
import pandas as pd
from matplotlib.colors import to_hex

from analysis.charts import (
    AT_CHANCE,
    INFEASIBLE,
    front_3d_chart,
    interactive_figures,
    off_front_groups,
)
from analysis.pareto import feasible_mask, mark_front

OBJECTIVES = {"throughput": "max", "best_val_acc": "max"}


def searched() -> pd.DataFrame:
    frame = pd.DataFrame(
        {
            "trial_id": ["fast", "accurate", "oom", "dead", "never"],
            "config.batch_size": [256, 16, 512, 64, 1024],
            "throughput": [2000.0, 800.0, np.nan, 1500.0, np.nan],
            "best_val_acc": [0.70, 0.85, np.nan, 0.50, np.nan],
            "status": ["ok", "ok", "oom", "ok", "oom_predicted"],
        }
    )
    return mark_front(frame, OBJECTIVES, min_accuracy=0.55)


def test_pruned_trials_and_trials_that_learned_nothing_are_told_apart():
    frame = searched()
    feasible = feasible_mask(frame, OBJECTIVES, min_accuracy=0.55)
    groups = {label: set(frame.loc[mask, "trial_id"])
              for mask, _, label in off_front_groups(frame, feasible)}  # fmt: skip
    pruned, at_chance = groups.values()
    assert pruned == {"oom", "never"} and at_chance == {"dead"}
    assert [color for _, color, _ in off_front_groups(frame, feasible)] == [INFEASIBLE, AT_CHANCE]


def test_the_interactive_charts_name_each_kind_of_trial_and_leave_out_empty_ones():
    frame = searched()
    feasible = feasible_mask(frame, OBJECTIVES, min_accuracy=0.55)
    pair = interactive_figures(frame, OBJECTIVES, feasible)[0]
    names = [trace.name for trace in pair.data]
    assert names == ["Pareto front", "pruned (oom, diverged)", "finished, kept off (at chance)"]
    at_chance = pair.data[2]
    assert list(at_chance.x) == [1500.0] and to_hex(at_chance.marker.color) == AT_CHANCE


def test_every_trial_is_in_exactly_one_group_when_all_finished_well():
    frame = searched().query("status == 'ok' and best_val_acc > 0.55")
    feasible = feasible_mask(frame, OBJECTIVES, min_accuracy=0.55)
    assert all(not mask.any() for mask, _, _ in off_front_groups(frame, feasible))


def test_a_3d_chart_without_any_finite_point_says_so_instead_of_drawing_an_empty_legend(
    tmp_path, recwarn
):
    objectives = {**OBJECTIVES, "time_to_target_s": "min"}
    frame = searched().assign(time_to_target_s=np.inf)
    feasible = feasible_mask(frame, objectives, min_accuracy=0.55)
    assert front_3d_chart(frame, objectives, feasible, tmp_path / "3d.png").stat().st_size > 0
    assert not [w for w in recwarn if "legend" in str(w.message)]
