import numpy as np
import pandas as pd
from PIL import Image

from analysis.report import write_report

OBJECTIVES = {"throughput": "max", "best_val_acc": "max", "gen_gap": "min"}


def trials(n: int = 12) -> pd.DataFrame:
    rng = np.random.default_rng(0)
    frame = pd.DataFrame(
        {
            "trial_id": [f"t{i}" for i in range(n)],
            "batch_size": rng.choice([16, 64, 256], n),
            "throughput": rng.uniform(100, 2000, n),
            "best_val_acc": rng.uniform(0.5, 0.9, n),
            "gen_gap": rng.uniform(0.0, 0.3, n),
            "status": "ok",
        }
    )
    frame.loc[0, "status"] = "oom"  # ran out of memory: values of its last epoch remain
    objectives = list(OBJECTIVES)
    frame.loc[1, "status"] = "oom"  # ran out of memory before its first epoch: no values
    frame.loc[1, objectives] = np.nan
    return frame


def test_the_report_writes_the_trials_table_with_pareto_flags_and_a_non_empty_chart(tmp_path):
    report = write_report(trials(), OBJECTIVES, tmp_path, title="test")
    table, chart = report.files
    written = pd.read_csv(table)
    assert len(written) == 12 and {"pareto_rank", "is_pareto"} <= set(written.columns)
    assert written["is_pareto"].iloc[0]  # the front comes first
    assert not written.loc[written["status"] == "oom", "is_pareto"].any()
    with Image.open(chart) as image:
        assert image.size[0] > 1000 and image.size[1] > 300
        assert len(set(image.convert("L").getdata())) > 20  # drawn on, not blank
