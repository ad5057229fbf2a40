import base64
import contextlib
import re
import shutil
import subprocess
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from mlflow.tracking import MlflowClient
from PIL import Image

from analysis.report import (
    _summary_lines,
    bounds_from_parent,
    build_report,
    left_out_from_parent,
    main,
    memory_prediction_error,
    min_accuracy_from_parent,
    objectives_from_parent,
    parse_objectives,
    split_size_tags,
    split_sizes_from_parent,
    trend_tables,
)
from tests.analysis.test_repeats_and_effects import unmeasurable_search

OBJECTIVES = {"throughput": "max", "best_val_acc": "max", "gen_gap": "min"}


def trials(n: int = 12) -> pd.DataFrame:
    rng = np.random.default_rng(0)
    frame = pd.DataFrame(
        {
            "trial_id": [f"t{i}" for i in range(n)],
            "config.batch_size": rng.choice([16, 64, 256], n),
            "config.amp": rng.choice([True, False], n),
            "config.lr": rng.uniform(1e-4, 1e-1, n),
            "config.gap_epochs": [[2, 4]] * n,  # settings may be lists
            "config.recomputed_modules": [["BasicBlock"], None] * (n // 2) + [None] * (n % 2),
            "throughput": rng.uniform(100, 2000, n),
            "best_val_acc": rng.uniform(0.6, 0.9, n),
            "gen_gap": rng.uniform(0.0, 0.3, n),
            "status": "ok",
            "status_detail": "",
        }
    )
    frame.loc[0, ["status", "status_detail"]] = ["oom", "out of memory in training"]
    frame.loc[1, "status"] = "oom_predicted"
    frame.loc[1, list(OBJECTIVES)] = np.nan  # never trained: no values at all
    return frame


def non_empty_png(path) -> bool:
    with Image.open(path) as image:
        return image.size[0] > 300 and len(set(image.convert("L").getdata())) > 20


def test_a_search_with_oom_trials_gets_every_chart_and_both_report_pages(tmp_path):
    report = build_report(trials(), OBJECTIVES, tmp_path, title="test")
    names = {path.name for path in report.files}
    assert names == {"trials.csv", "pareto_front.png", "pareto_3d.png", "parallel.png",
                     "report.md", "report.html"}  # fmt: skip
    for name in ("pareto_front.png", "pareto_3d.png", "parallel.png"):
        assert non_empty_png(tmp_path / name), name
    written = pd.read_csv(tmp_path / "trials.csv")
    assert written["is_pareto"].iloc[0]
    assert not written.loc[written["status"] != "ok", "is_pareto"].any()
    markdown = (tmp_path / "report.md").read_text()
    assert "## The front" in markdown and "Hypervolume" in markdown and "oom_predicted" in markdown
    page = (tmp_path / "report.html").read_text()
    assert "batch_size = " in page  # a trial's config is on hover
    assert "gap_epochs = [2, 4]" in page and "recomputed_modules = ['BasicBlock']" in page
    assert page.count("plotly") > 10  # plotly's script is in the page
    assert "parcoords" in page.lower()  # and the parallel coordinates chart


def test_the_report_tables_round_as_the_console_and_wrap_a_long_detail(tmp_path):
    frame = trials()
    frame.loc[0, "status_detail"] = "out of memory in training: " + "the step needed more " * 8
    build_report(frame, OBJECTIVES, tmp_path)
    markdown = (tmp_path / "report.md").read_text()
    front = [line.split("|") for line in markdown.split("## The front")[1].split("##")[0]
             .splitlines() if line.startswith("|")]  # fmt: skip
    at = [cell.strip() for cell in front[0]].index("throughput")
    assert at == 2  # the objectives first, after the trial: on a narrow page they show
    speeds = [float(row[at]) for row in front[2:]]
    assert speeds and all(len(f"{speed:g}".replace(".", "")) <= 4 for speed in speeds)
    kept_off = markdown.split("## Kept off the front")[1].split("##")[0]
    detail_line = next(line for line in kept_off.splitlines() if "out of memory" in line)
    assert "<br>" in detail_line and all(
        len(part) <= 62 for part in detail_line.split("|")[3].split("<br>")
    )
    page = (tmp_path / "report.html").read_text()  # why, in a row across the table
    assert '<table class="why">' in page
    assert '<tr class="detail"><td colspan="' in page and "the step needed more" in page


def test_the_report_says_which_speeds_were_timed_beside_programs_outside_the_search(tmp_path):
    frame = trials().assign(speed_outsiders=0.0)
    frame.loc[[2, 3], "speed_outsiders"] = [1.0, 2.0]
    build_report(frame, OBJECTIVES, tmp_path)
    markdown = (tmp_path / "report.md").read_text()
    assert "Speed: 2 trials were timed beside programs outside the search" in markdown
    build_report(trials(), OBJECTIVES, tmp_path / "alone")
    assert "programs outside the search" not in (tmp_path / "alone" / "report.md").read_text()


def test_a_search_without_any_status_detail_and_nothing_infeasible_still_reports(tmp_path):
    frame = trials().drop(columns="status_detail").assign(status="ok", best_val_acc=0.8)
    frame = frame.fillna({"throughput": 1.0, "gen_gap": 0.1})
    report = build_report(frame, OBJECTIVES, tmp_path)
    assert "## Kept off the front" not in (tmp_path / "report.md").read_text()
    assert report.frame["pareto_rank"].notna().all()


def test_a_search_whose_trials_all_failed_before_reporting_still_gets_a_report_saying_so(tmp_path):
    """Every trial's actor died before it started (a cluster that lost its workers): no
    trial folder holds a result, so the frame has no rows and no columns."""
    report = build_report(pd.DataFrame(), OBJECTIVES, tmp_path, "lost")
    assert "Trials: 0 (none reported a result)" in (tmp_path / "report.md").read_text()
    assert report.knee is None and (tmp_path / "report.html").exists()


def test_objectives_come_from_the_search_or_the_command_line():
    params = {"search.objectives.throughput": "max", "search.objectives.gen_gap": "min", "x": "1"}
    assert objectives_from_parent(params) == {"throughput": "max", "gen_gap": "min"}
    assert parse_objectives("val_test_gap:min,time_to_target_s:min") == {
        "val_test_gap": "min", "time_to_target_s": "min",
    }  # fmt: skip
    with pytest.raises(ValueError, match="name:max"):
        parse_objectives("throughput")


@pytest.fixture
def search_in_mlflow(tmp_path):
    """A search as MLflow holds it: a parent with the objectives and trial children."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(uri)
    # artifacts beside the store, not in the working folder (MLflow's default: ./mlruns)
    experiment = client.create_experiment(
        "cats", artifact_location=(tmp_path / "artifacts").as_uri()
    )
    parent = client.create_run(experiment, run_name="cats-1")
    for name, direction in OBJECTIVES.items():
        client.log_param(parent.info.run_id, f"search.objectives.{name}", direction)
    for _, row in trials().iterrows():
        child = client.create_run(experiment, tags={
            "mlflow.parentRunId": parent.info.run_id, "trial_id": row["trial_id"],
            "status": row["status"],
        })  # fmt: skip
        for key in ("batch_size", "amp", "lr"):
            client.log_param(child.info.run_id, key, str(row[f"config.{key}"]))
        for name in OBJECTIVES:
            if not np.isnan(row[name]):
                client.log_metric(child.info.run_id, name, row[name], step=1)
    return uri, client, parent


def test_without_out_the_report_goes_beside_the_search_it_reports(
    search_in_mlflow, tmp_path, monkeypatch
):
    uri, client, parent = search_in_mlflow
    monkeypatch.chdir(tmp_path)
    assert main(["--experiment", "cats", "--tracking-uri", uri]) == 0  # no such folder here
    assert (tmp_path / "reports" / "cats-1" / "report.html").exists()
    results = tmp_path / "ray_results" / "cats-1"
    results.mkdir(parents=True)
    client.set_tag(parent.info.run_id, "results_dir", str(results))
    assert main(["--experiment", "cats", "--tracking-uri", uri]) == 0
    assert (results / "report" / "report.html").exists()


def test_the_command_writes_the_report_attaches_it_and_tags_every_trial(search_in_mlflow, tmp_path):
    uri, client, parent = search_in_mlflow
    out = tmp_path / "out"
    assert main(["--experiment", "cats", "--tracking-uri", uri, "--out", str(out)]) == 0
    assert (out / "report.html").exists()
    artifacts = {a.path for a in client.list_artifacts(parent.info.run_id, "report")}
    assert "report/report.md" in artifacts and "report/pareto_front.png" in artifacts
    front = client.search_runs([parent.info.experiment_id], "tags.is_pareto = 'true'")
    assert front and all(run.data.tags["status"] == "ok" for run in front)
    tagged = client.search_runs([parent.info.experiment_id], "tags.pareto_rank != ''")
    assert len(tagged) == 12
    assert client.get_run(parent.info.run_id).data.metrics["hypervolume"] > 0


def test_the_command_weighs_the_knee_on_the_splits_sizes_the_search_run_says(
    search_in_mlflow, tmp_path, capsys
):
    uri, client, parent = search_in_mlflow
    args = ["--experiment", "cats", "--tracking-uri", uri, "--out", str(tmp_path / "out")]
    assert main(args) == 0  # a search from before the tags: the knee by the front's range
    assert "Knee point (most balanced front trial): " in capsys.readouterr().out
    for key, value in split_size_tags({"val": 400, "test": 400, "train_eval": 400}).items():
        client.set_tag(parent.info.run_id, key, value)
    assert main(args) == 0
    assert "weighed no finer than its noise: " in capsys.readouterr().out
    assert "gen_gap 0.098" in (tmp_path / "out" / "report.md").read_text()


def test_the_importance_table_says_what_it_measures_and_where_a_setting_cannot_act(tmp_path):
    build_report(trials(), OBJECTIVES, tmp_path, title="test", on_gpu=False)
    page = (tmp_path / "report.md").read_text()
    table = page[page.index("## How much each setting explains") :]
    (lr,) = [line for line in table.splitlines() if line.startswith("| lr ")]
    assert lr.split("|")[2].strip() == "-"  # throughput: the same work per image
    assert "it measures no effect (the ablations do)" in table
    assert '"-" where a setting cannot act on the objective: lr on throughput, none by ' in table
    assert "measures no effect" in (tmp_path / "report.html").read_text()


def test_a_technique_effect_not_measurable_names_the_techniques_each_reason_holds_for(tmp_path):
    """Three reasons in one line without the techniques they held for (2026-12-07)."""
    build_report(unmeasurable_search(), OBJECTIVES, tmp_path, on_gpu=False)
    (line,) = [ln for ln in (tmp_path / "report.md").read_text().splitlines()
               if ln.startswith("Not measurable over")]  # fmt: skip
    assert "cudnn_benchmark: it does nothing on the CPUs these trials ran on" in line
    assert "amp, optimizer adam: the switch always moved with another setting" in line


def test_the_technique_table_gives_each_effect_its_unit_and_a_dash_where_it_has_none(tmp_path):
    """Its cells read "108.536" (images/s, unsaid) and "nan" where a switch was not
    measurable (2026-12-07)."""
    frame = pd.DataFrame({
        "trial_id": [f"t{i}" for i in range(8)],
        "config.amp": [True, False] * 4,  # four pairs that differ in it alone
        "config.batch_size": [16, 16, 64, 64, 128, 128, 256, 256],
        "config.cudnn_benchmark": [True, True, False, False] * 2,  # nothing on CPUs
        "throughput": np.repeat([100.0, 200.0, 300.0, 400.0], 2) * np.tile([1.2, 1.0], 4),
        "best_val_acc": np.repeat([0.6, 0.65, 0.7, 0.75], 2) + np.tile([0.1, 0.0], 4),
        "gen_gap": 0.1,
        "status": "ok",
    })  # fmt: skip
    build_report(frame, OBJECTIVES, tmp_path, on_gpu=False)
    for page in ("report.md", "report.html"):
        text = (tmp_path / page).read_text()
        table = text[text.index("What each technique does") :]
        table = re.split(r"\n## |<h2>", table)[0]
        assert "nan" not in table.lower()
        assert "+20.0%" in table  # amp's throughput, in percent
        assert re.search(r"\+10\.0 points", table)  # amp's accuracy, in points
        assert "from their logarithms: never below -100%" in table


def test_the_command_prints_trend_tables_over_selected_trials(search_in_mlflow, tmp_path, capsys):
    uri, _, _ = search_in_mlflow
    args = ["--experiment", "cats", "--tracking-uri", uri, "--out", str(tmp_path / "o")]
    assert main([*args, "--trend", "batch_size,amp", "--where", "amp=true"]) == 0
    out = capsys.readouterr().out
    assert "best_val_acc by batch_size and amp where amp=true" in out
    assert "| False" not in out  # only the selected trials
    assert main([*args, "--trend", "momentum"]) == 2
    assert "no setting 'momentum'" in capsys.readouterr().err


def test_trend_tables_count_the_searchs_trials_not_its_ablations():
    """The knee's noise-floor runs and its changed copies counted as trials of the space
    (2026-12-07: a --trend by batch size held the knee's batch-16 ablation)."""
    ((_, alone),) = trend_tables(trials(), ["batch_size"], "best_val_acc", [])
    ((_, ablated),) = trend_tables(with_ablations(trials()), ["batch_size"], "best_val_acc", [])
    assert ablated.equals(alone)
    assert "1 of 3 oom_predicted" in ablated.loc[64, "best_val_acc"] and 128 not in ablated.index


@pytest.mark.parametrize(
    ("extra", "said"),
    [
        (["--objectives", "foo:max"], "--objectives: 'foo' is no metric of the search's trials"),
        (["--where", "batch_size"], "--where 'batch_size' must look like SETTING=VALUE"),
        (["--where", "batch_size=999"], "--where batch_size=999: no trial of the search matches"),
        (["--trend", "batch_size,amp,lr"], "--trend 'batch_size,amp,lr': one or two settings"),
        (["--trend", "nope"], "--trend 'nope': no setting 'nope' among the trials"),
        (["--trend", "amp", "--trend-value", "nope"], "--trend-value 'nope' is no metric"),
        (["--min-accuracy", "2"], "2 is not an accuracy from 0 to 1"),
    ],
)  # fmt: skip
def test_a_mistaken_option_is_one_message_and_nothing_is_written_or_attached(
    search_in_mlflow, tmp_path, capsys, extra, said
):
    uri, client, parent = search_in_mlflow
    out = tmp_path / "out"
    with contextlib.suppress(SystemExit):  # argparse's own refusal exits 2 itself
        assert main(["--experiment", "cats", "--tracking-uri", uri, "--out", str(out),
                     *extra]) == 2  # fmt: skip
    assert said in capsys.readouterr().err
    assert not out.exists() and not client.list_artifacts(parent.info.run_id)


def test_out_naming_a_file_is_one_message(search_in_mlflow, tmp_path, capsys):
    uri, _, _ = search_in_mlflow
    (tmp_path / "afile").write_text("mine")
    assert main(["--experiment", "cats", "--tracking-uri", uri,
                 "--out", str(tmp_path / "afile")]) == 2  # fmt: skip
    assert "is a file; the report needs a folder" in capsys.readouterr().err


def test_an_unreachable_server_is_one_message_within_seconds(capsys):
    assert main(["--experiment", "cats", "--tracking-uri", "http://127.0.0.1:9"]) == 2
    assert "cannot reach the MLflow server at http://127.0.0.1:9" in capsys.readouterr().err


def test_the_command_names_a_missing_experiment(tmp_path, capsys):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    MlflowClient(uri).search_experiments()  # the store, with no such experiment
    assert main(["--experiment", "nope", "--tracking-uri", uri]) == 2
    assert "no MLflow experiment named 'nope'" in capsys.readouterr().err


def test_the_command_names_a_missing_store_and_makes_none(tmp_path, capsys):
    database = tmp_path / "mlflow.db"
    assert main(["--experiment", "cats", "--tracking-uri", f"sqlite:///{database}"]) == 2
    assert f"no MLflow store at {database}" in capsys.readouterr().err
    assert not database.exists()


@pytest.mark.parametrize(
    ("uri", "why"),
    [
        ("mlflwo://127.0.0.1:5000", "unsupported URI"),
        ("sqlite:///{tmp}/notes.db", "not a database"),
    ],
)
def test_a_store_that_cannot_be_read_is_one_message_naming_it(uri, why, tmp_path, capsys):
    (tmp_path / "notes.db").write_text("not a database")
    uri = uri.format(tmp=tmp_path)
    assert main(["--experiment", "cats", "--tracking-uri", uri]) == 2
    err = capsys.readouterr().err
    assert f"cannot read the MLflow store at {uri}" in err and why in err
    assert "Traceback" not in err


def test_declared_hypervolume_bounds_are_read_back_from_the_search_and_used(tmp_path):
    params = {"search.hypervolume_bounds.throughput": "[0.0, 5000.0]", "search.seed": "0"}
    bounds = bounds_from_parent(params)
    assert bounds == {"throughput": (0.0, 5000.0)}
    declared = build_report(trials(), OBJECTIVES, tmp_path / "a", bounds=bounds)
    derived = build_report(trials(), OBJECTIVES, tmp_path / "b")
    assert declared.bounds["throughput"] == (0.0, 5000.0)
    assert derived.bounds["throughput"] == (0.0, 10000.0)  # the next power of ten
    assert declared.hypervolume > derived.hypervolume
    assert "throughput [0, 5000]" in (tmp_path / "a" / "report.md").read_text()


def test_epoch_histories_add_the_chart_of_the_batch_used_against_the_noise_scale(tmp_path):
    frame = trials()
    histories = pd.DataFrame(
        [
            {"trial_id": trial_id, "epoch": epoch, "effective_batch_size": 16 * 2 ** (epoch // 2),
             "noise_scale": 20.0 * epoch}
            for trial_id in frame["trial_id"][2:]
            for epoch in range(1, 6)
        ]
    )  # fmt: skip
    report = build_report(frame, OBJECTIVES, tmp_path, histories=histories)
    assert tmp_path / "noise_scale.png" in report.files
    assert non_empty_png(tmp_path / "noise_scale.png")
    assert "![noise_scale.png](noise_scale.png)" in (tmp_path / "report.md").read_text()
    page = (tmp_path / "report.html").read_text()
    # inside the page: MLflow's sandboxed preview loads no file beside it
    encoded = base64.b64encode((tmp_path / "noise_scale.png").read_bytes()).decode("ascii")
    assert f'<img src="data:image/png;base64,{encoded}" alt="noise_scale.png">' in page


def test_the_noise_chart_draws_the_best_ranked_trials_that_measured_a_noise_scale(tmp_path):
    """Of the eight best-ranked configs none had measured it in a default search, and the
    chart was left out though others had (2026-12-07)."""
    frame = trials()
    report = build_report(frame, OBJECTIVES, tmp_path / "ranked")
    worst = report.frame.sort_values("pareto_rank").iloc[-1]["trial_id"]
    histories = pd.DataFrame(
        {"trial_id": frame["trial_id"], "epoch": 1, "effective_batch_size": 16,
         "noise_scale": np.where(frame["trial_id"] == worst, 40.0, np.nan)}
    )  # fmt: skip
    report = build_report(frame, OBJECTIVES, tmp_path, histories=histories)
    assert tmp_path / "noise_scale.png" in report.files


def test_no_noise_scale_chart_where_none_was_measured(tmp_path):
    frame = trials()
    histories = pd.DataFrame(
        {"trial_id": frame["trial_id"], "epoch": 1, "effective_batch_size": 16,
         "noise_scale": np.nan}
    )  # fmt: skip
    report = build_report(frame, OBJECTIVES, tmp_path, histories=histories)
    assert not (tmp_path / "noise_scale.png").exists()
    assert {path.name for path in report.files} == {"trials.csv", "pareto_front.png",
                                                     "pareto_3d.png", "parallel.png",
                                                     "report.md", "report.html"}  # fmt: skip


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def rendered_in_chromium(page: Path) -> tuple[str, str]:
    """(the DOM after the page's scripts ran, the browser's log) from headless Chromium."""
    shown = subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--enable-logging=stderr",
         "--v=0", "--virtual-time-budget=10000", "--dump-dom", page.resolve().as_uri()],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    return shown.stdout, shown.stderr


NO_BROWSER = "Debian's chromium is not installed (apt-get install chromium): no page is opened"


@pytest.mark.skipif(CHROMIUM is None, reason=NO_BROWSER)
def test_the_report_page_renders_its_charts_in_a_real_browser_without_script_errors(tmp_path):
    build_report(trials(), OBJECTIVES, tmp_path, title="test")
    dom, log = rendered_in_chromium(tmp_path / "report.html")
    assert "Uncaught" not in log, log[-3000:]
    assert dom.count('class="main-svg"') >= 3  # plotly drew the charts: the scripts ran
    assert "The front" in dom


@pytest.mark.skipif(CHROMIUM is None, reason=NO_BROWSER)
def test_the_browser_check_sees_a_script_error(tmp_path):
    broken = tmp_path / "broken.html"
    broken.write_text("<html><body><script>undefinedFunction();</script></body></html>")
    _, log = rendered_in_chromium(broken)
    assert "Uncaught ReferenceError" in log


def main_search_trials() -> pd.DataFrame:
    """Trials that sampled every setting the main search samples."""
    frame = trials()
    rng = np.random.default_rng(1)
    for key, values in {"optimizer": ["sgd", "adam"], "activation_checkpointing": [True, False],
                        "accumulation_steps": [1, 2, 4], "adabatch_growth": [1, 2],
                        "warmup_epochs": [0, 2], "cudnn_benchmark": [True, False],
                        "augment": [True, False]}.items():  # fmt: skip
        frame[f"config.{key}"] = rng.choice(values, len(frame))
    return frame


def test_the_report_tables_give_settings_the_consoles_short_headers_and_say_what_they_are(
    tmp_path,
):
    build_report(main_search_trials(), OBJECTIVES, tmp_path)
    markdown = (tmp_path / "report.md").read_text()
    front = markdown.split("## The front")[1].split("##")[0]
    header = [cell.strip() for cell in front.splitlines()[2].split("|")]
    assert {"recompute", "accum", "grow", "warmup", "aug"} <= set(header)
    assert "activation_checkpointing" not in header
    assert "recompute = activation_checkpointing" in front and "accum = accumulation_steps" in front
    kept_off = markdown.split("## Kept off the front")[1].split("##")[0]
    assert "recompute" in [cell.strip() for cell in kept_off.splitlines()[2].split("|")]
    assert "recompute = activation_checkpointing" in kept_off
    page = (tmp_path / "report.html").read_text()
    # a row of why under each kept-off trial that has one (the oom, not the oom_predicted)
    assert page.count('<tr class="detail">') == 1 and "out of memory in training" in page


@pytest.mark.skipif(CHROMIUM is None, reason=NO_BROWSER)
def test_the_front_and_the_kept_off_trials_of_the_main_search_fit_a_page(tmp_path):
    build_report(main_search_trials(), OBJECTIVES, tmp_path)
    page = tmp_path / "report.html"
    measure = (
        "<script>const front = [...document.querySelectorAll('h2')]"
        ".find(h => h.textContent === 'The front').nextElementSibling;"
        "document.body.setAttribute('data-front-width', front.scrollWidth);"
        "document.body.setAttribute('data-kept-off-width',"
        " document.querySelector('table.why').scrollWidth);</script></body>"
    )
    page.write_text(page.read_text().replace("</body>", measure))
    shown = subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--window-size=1400,2000",
         "--virtual-time-budget=5000", "--dump-dom", page.resolve().as_uri()],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    width = int(re.search(r'data-front-width="(\d+)"', shown.stdout).group(1))
    assert 0 < width <= 1400 - 2 * 32  # inside the page's margins
    kept_off = int(re.search(r'data-kept-off-width="(\d+)"', shown.stdout).group(1))
    assert 0 < kept_off <= 1400 - 2 * 32


def test_the_memory_models_error_is_the_median_relative_gap_over_trials_it_predicted():
    frame = pd.DataFrame({
        "config.predicted_peak_mb": [110.0, 90.0, 50.0, None],
        "peak_mem_mb": [100.0, 100.0, 40.0, 30.0],
    })  # fmt: skip
    count, error = memory_prediction_error(frame)
    assert count == 3 and error == pytest.approx(0.1)  # 10%, 10%, 25%
    assert memory_prediction_error(frame.drop(columns="config.predicted_peak_mb")) is None
    grown = frame.assign(**{"config.batch_size": [16, 16, 16, 16],
                            "physical_batch_size": [16, 32, 16, 16]})  # fmt: skip
    assert memory_prediction_error(grown) == (2, pytest.approx(0.175))  # the grown one is out


def test_on_a_card_the_memory_models_error_is_against_what_the_allocator_reserved():
    frame = pd.DataFrame({
        "config.predicted_peak_mb": [1000.0, 2000.0],
        "peak_mem_mb": [800.0, 1600.0],  # the tensors' peak, below what was reserved
        "peak_reserved_mb": [1000.0, None],  # the second: a trial that reported none
    })  # fmt: skip
    count, error = memory_prediction_error(frame)
    assert count == 2 and error == pytest.approx((0.0 + 0.25) / 2)


def test_the_min_accuracy_is_chance_plus_five_points_for_the_searchs_classes():
    assert min_accuracy_from_parent({"num_classes": "10"}) == pytest.approx(0.15)
    assert min_accuracy_from_parent({"num_classes": "2"}) == pytest.approx(0.55)
    assert min_accuracy_from_parent({}) == pytest.approx(0.55)  # a search from before the tag


def test_the_splits_sizes_are_read_back_from_the_search_runs_tags_for_its_knee():
    sizes = {"val": 400, "test": 300, "train_eval": 250}
    tags = {"num_classes": "2", **split_size_tags(sizes)}
    assert split_sizes_from_parent(tags) == sizes
    assert split_sizes_from_parent({"num_classes": "2"}) is None  # a search from before them
    partial = {key: value for key, value in tags.items() if not key.endswith("test")}
    assert split_sizes_from_parent(partial) is None


def with_ablations(frame: pd.DataFrame, base: str = "t2") -> pd.DataFrame:
    """`frame` and the ablations of its trial `base`: two noise-floor runs, amp switched
    (twice as fast), and the batch doubled (out of memory)."""
    knee = frame[frame["trial_id"] == base].iloc[0].to_dict()
    rows = [
        {**knee, "trial_id": "a0", "config.seed": 1000, "config.ablation": "noise floor",
         "throughput": knee["throughput"] * 1.02},
        {**knee, "trial_id": "a1", "config.seed": 1001, "config.ablation": "noise floor",
         "throughput": knee["throughput"] * 0.98},
        {**knee, "trial_id": "a2", "config.amp": not knee["config.amp"],
         "config.ablation": f"amp={str(not knee['config.amp']).lower()}",
         "throughput": knee["throughput"] * 2},
        {**knee, "trial_id": "a3", "config.batch_size": knee["config.batch_size"] * 2,
         "config.ablation": f"batch_size={knee['config.batch_size'] * 2}", "status": "oom",
         "status_detail": "out of memory in training"},
    ]  # fmt: skip
    ablations = pd.DataFrame(rows).assign(**{"config.ablation_of": base})
    return pd.concat([frame, ablations], ignore_index=True)


def test_ablations_lead_the_report_with_what_each_change_did_and_stay_off_the_front(tmp_path):
    report = build_report(with_ablations(trials()), OBJECTIVES, tmp_path, title="test")
    names = {path.name for path in report.files}
    assert {"effects.png", "effects.csv", "ablations.csv"} <= names
    assert len(report.frame) == 12 and not report.frame["trial_id"].str.startswith("a").any()
    assert set(pd.read_csv(tmp_path / "trials.csv")["trial_id"]) == set(trials()["trial_id"])
    markdown = (tmp_path / "report.md").read_text()
    assert markdown.index("## What each setting does here") < markdown.index("## The front")
    assert "- Ablations: 4 trials around trial t2 (3 ok, 1 oom)" in markdown
    assert "raised throughput by 100.0%" in markdown
    assert "batch_size: " in markdown and "runs out of memory." in markdown
    effects = pd.read_csv(tmp_path / "effects.csv")
    assert set(effects["change"].str.partition(":")[0]) == {"amp", "batch_size"}


def test_a_setting_the_search_left_out_on_its_machine_is_said_not_ablated_and_why(tmp_path):
    why = "bf16 autocast trained at 0.12x float32's speed on this CPU"
    report = build_report(with_ablations(trials()), OBJECTIVES, tmp_path, left_out={"amp": why})
    assert f"amp: not ablated, not sampled on this machine: {why}." in report.ablation_answer()
    assert f"not sampled on this machine: {why}" in (tmp_path / "report.md").read_text()
    assert left_out_from_parent({"left_out.amp": why, "space.lr": "{...}"}) == {"amp": why}


def test_building_a_report_prints_no_warning(tmp_path):
    frame = with_ablations(trials().assign(peak_mem_mb=np.linspace(10, 60, 12)))
    histories = pd.DataFrame(
        [{"trial_id": f"t{i}", "epoch": epoch, "effective_batch_size": 16 * epoch,
          "physical_batch_size": 16 * epoch, "peak_mem_mb": 10.0 * epoch,
          "throughput": 100.0 * epoch, "noise_scale": 20.0 * epoch}
         for i in range(2, 12) for epoch in (1, 2)]
    )  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        report = build_report(frame, OBJECTIVES, tmp_path, histories=histories, on_gpu=False)
    assert {"batch_size.png", "noise_scale.png", "effects.png"} <= {p.name for p in report.files}


@pytest.mark.skipif(CHROMIUM is None, reason=NO_BROWSER)
def test_the_report_page_draws_the_effect_chart_in_a_real_browser(tmp_path):
    build_report(with_ablations(trials()), OBJECTIVES, tmp_path, title="test")
    dom, log = rendered_in_chromium(tmp_path / "report.html")
    assert "Uncaught" not in log, log[-3000:]
    chart = dom[dom.index('id="effect-chart"') :]
    assert 'class="main-svg"' in chart[:200_000]  # plotly drew it: its scripts ran
    assert "Effect of each change on the ablated config" in dom
    assert dom.index("What each setting does here") < dom.index("The front")


def test_the_report_says_the_knee_weighed_each_objective_no_finer_than_its_noise(tmp_path):
    report = build_report(trials(), OBJECTIVES, tmp_path / "ranged")
    assert report.knee_noise == {}
    (line,) = [line for line in _summary_lines(report) if line.startswith("Knee point")]
    assert line.startswith("Knee point (most balanced front trial): ")

    splits = {"val": 400, "test": 400, "train_eval": 400}
    report = build_report(trials(), OBJECTIVES, tmp_path / "on_evidence", split_sizes=splits)
    assert report.knee_noise["gen_gap"] == pytest.approx(1.959964 * 0.05)  # sqrt(2) x 0.035
    (line,) = [line for line in _summary_lines(report) if line.startswith("Knee point")]
    assert "each objective weighed no finer than its noise: " in line
    assert "gen_gap 0.098" in line
