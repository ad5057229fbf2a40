"""The table printed while a search runs (search.progress): how far it is, and a row per
trial that fits a terminal."""

from search.config import load_config
from search.progress import ProgressTable, TrialRow, progress_heading, rows_to_show
from search.tuner import progress_columns
from tests.conftest import CONFIGS

SETTINGS = {"batch_size": 32, "optimizer": "adam", "lr": 0.0018383838, "amp": False,
            "activation_checkpointing": True, "accumulation_steps": 4, "adabatch_growth": 2,
            "warmup_epochs": 2, "cudnn_benchmark": False, "augment": True}  # fmt: skip
RESULT = {"epoch": 8, "throughput": 2530.123456, "best_val_acc": 0.7625,
          "gen_gap": 0.0725, "status": "stopped_early"}  # fmt: skip


def row(trial_id: str, status: str, result=RESULT) -> TrialRow:
    return TrialRow(trial_id, status, SETTINGS, result)


def main_config_table(lines: list[str]) -> ProgressTable:
    settings, metrics = progress_columns(load_config(CONFIGS / "cats_dogs.yaml"))
    return ProgressTable(settings, metrics, say=lines.append)


def test_a_row_per_trial_under_short_headers_fits_a_terminal_and_has_no_address_column():
    lines: list[str] = []
    table = main_config_table(lines)
    table.setup(total_samples=24)
    rows = [row("4cb5f9f4", "TERMINATED"), row("ab19b303", "RUNNING", {"epoch": 1}),
            row("8b0884ed", "PENDING", {})]  # fmt: skip
    text = table.render(rows, done=False).splitlines()
    assert text[0].endswith(": 1 of 24 trials ended; 1 RUNNING, 1 PENDING, 1 TERMINATED ==")
    header = text[1].split()
    assert header[:3] == ["trial", "status", "batch"] and "loc" not in header
    assert header[-5:] == ["epoch", "img/s", "best_acc", "gap", "outcome"]
    assert text[2].split()[-4:] == ["2530", "0.7625", "0.0725", "stopped_early"]
    assert "0.001838" in text[2]  # four significant digits, as the ranked table
    assert text[3].split()[-4:] == ["-", "-", "-", "-"]  # nothing reported yet
    assert max(len(line) for line in text) <= 140  # Tune's own took 213 for this config


def test_while_trials_run_the_unfinished_and_the_latest_to_end_are_shown_in_tunes_order():
    rows = [row(f"t{n}", "TERMINATED") for n in range(5)] + [row("r", "RUNNING")]
    shown = rows_to_show(rows, 3)
    assert [r.trial_id for r in shown] == ["t3", "t4", "r"]


def test_the_last_table_has_every_trial_and_earlier_ones_say_how_many_are_left_out():
    lines: list[str] = []
    table = main_config_table(lines)
    rows = [row(f"{n:08d}", "TERMINATED") for n in range(25)] + [row("running0", "RUNNING")]
    running = table.render(rows, done=False)
    assert "running0" in running and "00000000" not in running
    assert running.rstrip().endswith("... and 6 more trials, ended")
    assert all(r.trial_id in table.render(rows, done=True) for r in rows)


def test_a_table_is_printed_every_few_seconds_and_once_more_at_the_end(monkeypatch):
    clock = [100.0]
    monkeypatch.setattr("search.progress.time.monotonic", lambda: clock[0])
    lines: list[str] = []
    table = main_config_table(lines)
    assert table.should_report([])
    table.report([], done=False)
    clock[0] += table.every_s / 2
    assert not table.should_report([]) and table.should_report([], done=True)
    clock[0] += table.every_s
    assert table.should_report([])
    assert lines == [lines[0]] and lines[0].startswith("== ")


def test_the_resources_in_use_tune_passes_are_said_under_the_heading():
    lines: list[str] = []
    table = main_config_table(lines)
    table.report([], False, "Using FIFO scheduling algorithm.",
                 "Logical resource usage: 2.0/16 CPUs, 0.5/1 GPUs")  # fmt: skip
    heading, used = lines[0].splitlines()[:2]
    assert heading.startswith("== ") and used == "Logical resource usage: 2.0/16 CPUs, 0.5/1 GPUs"
    assert "FIFO" not in lines[0]


def test_the_heading_counts_minutes_once_a_search_has_run_one():
    heading = progress_heading([row("a", "ERROR")], total=None, elapsed_s=65.4)
    assert heading == "== 1 min 05 s: 1 trials ended; 1 ERROR =="


def test_the_table_tune_is_given_pickles_as_tune_pickles_the_searchs_state(monkeypatch):
    """Even where `print` was replaced after import (in the suite, by another test): a
    function kept by the reporter would be pickled by reference, and fail."""
    import builtins

    from ray import cloudpickle

    from search.tuner import progress_table

    table = progress_table(load_config(CONFIGS / "cats_dogs.yaml"))
    monkeypatch.setattr(builtins, "print", lambda *args, **kwargs: None)
    assert cloudpickle.loads(cloudpickle.dumps(table)).settings == table.settings
