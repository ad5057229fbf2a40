import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest
from matplotlib.colors import to_hex
from PIL import Image

from analysis.charts import (
    AT_CHANCE,
    INFEASIBLE,
    _axis_values,
    axis_label,
    batch_size_chart,
    front_3d_chart,
    interactive_figures,
    off_front_groups,
    pairwise_front_chart,
    technique_labels,
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
    assert names == [
        "Pareto front",
        "pruned (oom, diverged, stopped early)",
        "finished, kept off (at chance)",
    ]
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


@pytest.mark.parametrize(
    ("metric", "label"),
    [
        ("throughput", "throughput (images/s, min)"),
        ("peak_mem_mb", "peak_mem_mb (MiB, min)"),
        ("time_to_target_s", "time_to_target_s (s, min)"),
        ("steps_to_target", "steps_to_target (steps, min)"),
        ("best_val_acc", "best_val_acc (fraction, min)"),
    ],
)
def test_every_axis_names_its_unit(metric, label):
    assert axis_label(metric, "min") == label


def test_a_numeric_axis_labels_each_value_it_takes_not_only_its_ends():
    positions, ticks = _axis_values(pd.Series([16, 64, 256, 64]))
    assert [label for _, label in ticks] == ["16", "64", "256"]
    assert positions.tolist() == pytest.approx([0.0, 0.5, 1.0, 0.5])  # log scale: 4x each


def test_the_interactive_parallel_chart_shows_values_and_colours_by_kind_of_trial():
    figures = interactive_figures(searched(), OBJECTIVES, feasible_mask(searched(), OBJECTIVES))
    (parcoords,) = [f.data[0] for f in figures if f.data and f.data[0].type == "parcoords"]
    (batch,) = parcoords.dimensions
    assert batch.label == "batch_size (log scale)"
    assert list(batch.ticktext) == ["16", "64", "256", "512", "1.02e+03"]
    assert list(parcoords.line.colorbar.ticktext) == ["kept off", "other trial", "Pareto front"]
    assert sorted(set(parcoords.line.color)) == [0, 2]  # front or kept off, nothing between


def test_the_batch_size_chart_draws_out_of_memory_trials_where_they_failed(tmp_path):
    frame = pd.DataFrame({
        "config.batch_size": [16, 32, 64, 64, 128],
        "config.amp": [False, True, False, True, False],
        "config.memory_budget_mb": 40.0,
        "peak_mem_mb": [20.0, 25.0, 38.0, np.nan, 70.0],
        "throughput": [400.0, 420.0, 500.0, np.nan, np.nan],
        "status": ["ok", "ok", "ok", "oom_predicted", "oom"],
    })  # fmt: skip
    chart = batch_size_chart(frame, tmp_path / "batch.png")
    with Image.open(chart) as image:
        assert image.size[0] > 800 and len(set(image.convert("L").getdata())) > 20
    assert batch_size_chart(frame.drop(columns="peak_mem_mb"), tmp_path / "none.png") is None


def test_a_pruned_trial_with_one_objective_known_is_drawn_on_that_axis_edge(tmp_path, monkeypatch):
    objectives = {"throughput": "max", "peak_mem_mb": "min"}
    frame = pd.DataFrame({
        "trial_id": ["a", "b", "c"],
        "throughput": [500.0, 700.0, np.nan],  # c ran out of memory in its first step
        "peak_mem_mb": [30.0, 45.0, 70.0],  # what c's step needed
        "status": ["ok", "ok", "oom"],
    })  # fmt: skip
    marked = mark_front(frame, objectives)
    drawn = []
    real = plt.Axes.scatter

    def scatter(axis, x, y, *args, **kwargs):
        drawn.append((kwargs.get("label"), list(np.asarray(x, dtype=float)),
                      list(np.asarray(y, dtype=float))))  # fmt: skip
        return real(axis, x, y, *args, **kwargs)

    monkeypatch.setattr(plt.Axes, "scatter", scatter)
    pairwise_front_chart(marked, objectives, feasible_mask(marked, objectives),
                         tmp_path / "front.png")  # fmt: skip
    (edge,) = [d for d in drawn if d[0] and "only y known" in d[0]]
    assert edge[2] == [70.0]  # at its needed memory, on the throughput axis' edge


def test_the_batch_size_chart_names_the_memory_techniques_each_trial_used():
    frame = pd.DataFrame({
        "config.batch_size": [16, 32, 64],
        "config.amp": [True, False, True],
        "config.activation_checkpointing": [True, False, False],
        "peak_mem_mb": [10.0, 20.0, 30.0],
    })  # fmt: skip
    assert technique_labels(frame).tolist() == ["AMP + activation checkpointing", "plain", "AMP"]
