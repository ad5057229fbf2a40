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
    batch_points,
    batch_size_chart,
    batch_size_figure,
    effect_figure,
    front_3d_chart,
    interactive_effect_figure,
    interactive_figures,
    noise_scale_chart,
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
        "front of this pair",  # the PNG's step line, on the page too
    ]
    at_chance = pair.data[2]
    assert list(at_chance.x) == [1500.0] and to_hex(at_chance.marker.color) == AT_CHANCE
    front = next(t for t in pair.data if t.name == "Pareto front")
    line = pair.data[3]
    assert set(line.x) == set(front.x) and line.mode == "lines"  # through the pair's front


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


def grown_search() -> tuple[pd.DataFrame, pd.DataFrame]:
    """Trial g starts at batch 16 and AdaBatch grows it to 32 and 64 (its memory with it);
    trial p stays at 64 with AMP; trial o (AMP + checkpointing) ran out of memory at 128 in
    its first epoch."""
    frame = pd.DataFrame({
        "trial_id": ["g", "p", "o"],
        "config.batch_size": [16, 64, 64],
        "config.amp": [False, True, True],
        "config.activation_checkpointing": [False, False, True],
        "physical_batch_size": [64, 64, 128],  # the last report's: where o failed
        "peak_mem_mb": [40.0, 25.0, 90.0],
        "throughput": [900.0, 1200.0, np.nan],
        "status": ["ok", "ok", "oom"],
    })  # fmt: skip
    histories = pd.DataFrame({
        "trial_id": ["g"] * 4 + ["p"] * 2,
        "epoch": [1, 2, 3, 4, 1, 2],
        "physical_batch_size": [16, 32, 32, 64, 64, 64],
        "peak_mem_mb": [10.0, 20.0, 21.0, 40.0, 25.0, 26.0],
        "throughput": [500.0, 700.0, 710.0, 900.0, 1200.0, 1180.0],
    })  # fmt: skip
    return frame, histories


def test_memory_is_drawn_against_the_batch_it_was_measured_at_a_point_per_grown_batch():
    frame, histories = grown_search()
    points = batch_points(frame, histories).set_index(["trial_id", "batch"])
    assert points.loc[("g", 16.0), "peak_mem_mb"] == 10.0
    assert points.loc[("g", 32.0), "peak_mem_mb"] == 20.0  # the batch's first epoch
    assert points.loc[("g", 32.0), "throughput"] == pytest.approx(705.0)  # its epochs' mean
    assert points.loc[("g", 64.0), "peak_mem_mb"] == 40.0
    assert points.loc[("p", 64.0), "technique"] == "AMP"
    assert len(points) == 4  # a point per trial and batch
    last_only = batch_points(frame).set_index("trial_id")  # without histories: last epochs
    assert last_only.loc["g", "batch"] == 64 and last_only.loc["g", "peak_mem_mb"] == 40.0


def test_the_batch_size_chart_plots_the_points_and_a_legend_of_only_what_it_drew():
    frame, histories = grown_search()
    figure = batch_size_figure(frame, on_gpu=False, histories=histories)
    memory, _speed = figure.axes
    drawn = {c.get_label(): c.get_offsets().tolist() for c in memory.collections}
    assert drawn["plain"] == [[16.0, 10.0], [32.0, 20.0], [64.0, 40.0]]
    assert drawn["out of memory (what the step needed)"] == [[128.0, 90.0]]  # where it failed
    (legend,) = figure.legends  # below the panels, over none of their points
    labels = [text.get_text() for text in legend.get_texts()]
    assert labels == list(drawn) == ["AMP", "plain", "out of memory (what the step needed)"]
    assert memory.get_legend() is None
    assert "physical batch" in memory.get_xlabel()
    plt.close(figure)


def test_the_effect_chart_draws_each_effect_with_its_interval_and_says_how_a_trial_ended():
    effects = pd.DataFrame({
        "base": "k", "change": ["amp: false -> true", "batch_size: 32 -> 64"] * 2,
        "status": ["ok", "oom"] * 2,
        "metric": ["throughput", "throughput", "best_val_acc", "best_val_acc"],
        "unit": ["%", "%", "points", "points"], "effect": [40.0, np.nan, -1.0, np.nan],
        "low": [10.0, np.nan, -5.0, np.nan], "high": [70.0, np.nan, 3.0, np.nan],
        "verdict": ["raises", "runs out of memory", "not told from noise", "runs out of memory"],
        "base_runs": 3,
    })  # fmt: skip
    figure = effect_figure(effects)
    speed, accuracy = figure.axes
    (bar,) = speed.containers
    assert bar.lines[0].get_xdata().tolist() == [40.0]
    (interval,) = bar.lines[2]
    assert interval.get_segments()[0][:, 0].tolist() == [10.0, 70.0]
    assert [t.get_text() for t in speed.texts] == ["runs out of memory"]
    assert [label.get_text() for label in speed.get_yticklabels()] == [
        "amp: false -> true", "batch_size: 32 -> 64"]  # fmt: skip
    assert "points" in accuracy.get_xlabel() and "%" in speed.get_xlabel()
    plt.close(figure)
    assert effect_figure(effects.iloc[0:0]) is None


def test_the_effect_charts_legend_names_its_kinds_and_rows_without_a_point_say_why_in_both():
    """The legend read "True" / "False" (its dict's keys), and the page's chart left rows
    without a point blank where the PNG said why (2026-12-07)."""
    effects = pd.DataFrame({
        "base": "k",
        "change": ["lr: 0.01 -> 0.005", "optimizer: sgd -> adam", "accumulation_steps: 1 -> 2",
                   "amp: false -> true", "amp: false -> true", "amp: false -> true"],
        "status": "ok", "metric": ["throughput", "time_to_target_s", "peak_mem_mb"] * 2,
        "unit": "%", "effect": [np.nan, np.nan, 0.0, 30.0, -20.0, -10.0],
        "low": [np.nan, np.nan, 0.0, 20.0, -40.0, -10.0],
        "high": [np.nan, np.nan, 0.0, 40.0, 10.0, -10.0],
        "verdict": ["none by construction (the same work per image)",
                    "never reached with the change", "no change", "raises",
                    "not told from noise", "lowers"],
        "base_runs": 3,
    })  # fmt: skip
    figure = effect_figure(effects)
    panels = {axis.get_xlabel().split()[0]: axis for axis in figure.axes}
    speed, target, memory = (panels[m] for m in ("throughput", "time_to_target_s", "peak_mem_mb"))
    (legend,) = figure.legends
    assert [t.get_text() for t in legend.get_texts()] == [
        "told from noise", "within the noise", "unchanged in every run"]  # fmt: skip
    assert [t.get_text() for t in speed.texts] == ["none by construction"]
    assert [t.get_text() for t in target.texts] == ["never reached with the change"]
    # written in the middle of its panel (axes' x), whatever the panel's range of values
    assert speed.texts[0].get_transform() == speed.get_yaxis_transform()
    assert [line.get_marker() for line in memory.lines].count("D") == 1  # the exact zero
    plt.close(figure)
    words = {a.text for a in interactive_effect_figure(effects).layout.annotations}
    assert {"none by construction", "never reached with the change"} <= words


def test_the_effect_chart_says_a_change_learned_nothing_where_it_has_no_accuracy_to_draw():
    effects = pd.DataFrame({
        "base": "k", "change": ["amp: false -> true", "optimizer: sgd -> adam"],
        "status": "ok", "metric": "best_val_acc", "unit": "points",
        "effect": [-1.0, np.nan], "low": [-5.0, np.nan], "high": [3.0, np.nan],
        "verdict": ["not told from noise", "learned nothing (best_val_acc 0.5, below 0.55)"],
        "base_runs": 3,
    })  # fmt: skip
    figure = effect_figure(effects)
    (accuracy,) = figure.axes
    assert [t.get_text() for t in accuracy.texts] == ["learned nothing"]
    plt.close(figure)


def test_a_chart_with_long_legend_labels_is_saved_whole_nothing_touches_the_image_edge(tmp_path):
    label = ", ".join(f"setting_{i}=value_{i}" for i in range(14))  # a config's long label
    histories = pd.DataFrame({
        "trial_id": ["a"] * 3, "epoch": [1, 2, 3], "effective_batch_size": [16, 32, 64],
        "noise_scale": [50.0, 80.0, 120.0],
    })  # fmt: skip
    path = noise_scale_chart(histories, {"a": label}, tmp_path / "noise.png")
    with Image.open(path) as image:
        pixels = np.asarray(image.convert("L"))
    edges = np.concatenate([pixels[0], pixels[-1], pixels[:, 0], pixels[:, -1]])
    assert (edges == 255).all()  # a cut-off legend would run into the border
