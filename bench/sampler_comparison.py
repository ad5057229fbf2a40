"""What the sampler and early stopping cost the answer: the main search with each sampler
(and TPE without early stopping, or with its lr per 32 images), on several seeds, side by
side on one machine (`python -m search.run` as users run it, each in a fresh folder, without
ablations; for each seed the cases run in turn, the order rotated from seed to seed).

Columns: wall seconds; trials; the front's best `best_val_acc`; the front's hypervolume (the
config's fixed bounds). Printed last, per case: the median and the range over the seeds of
the best accuracy and of the hypervolume, the median wall time and its ratio to the first
case's (issue 37's aims: a best accuracy of 0.80 or more in every run, within 0.03 of each
other). `tpe-16-trials` and `tpe-keep-0.4` are the main config with 16 trials (its count
before 2026-11-27) and with early stopping's keep at 0.4; `tpe-augment` samples
augmentation, as it did until docs/RESULTS.md section 25; `tpe-contiguous` does not sample
the layout (all trials contiguous), as until section 28; `tpe-rungs-2-4` stops trials at
epochs 2 and 4 only; `tpe-amp-unprobed` samples AMP without timing bf16 first, as until
section 31 (on a CPU that emulates bf16 the default leaves AMP out);
`tpe-slow-starts-spared` lets a trial still at chance at its first rung go on (section
33); `tpe-keep-0.6` keeps 0.6 of the trials at each rung, `tpe-keep-0.6-slow-starts-spared`
does both, `tpe-rungs-2-4-keep-0.6-slow-starts-spared` too at epochs 2 and 4 only.

    python bench/sampler_comparison.py [--config configs/cats_dogs.yaml] [--seeds 0 1 2]
        [--cases tpe random nsga2 tpe-no-stopping tpe-lr-per-32-images tpe-16-trials
         tpe-keep-0.4 tpe-augment tpe-contiguous tpe-rungs-2-4 tpe-amp-unprobed
         tpe-slow-starts-spared tpe-keep-0.6 tpe-keep-0.6-slow-starts-spared
         tpe-rungs-2-4-keep-0.6-slow-starts-spared]
        [key.path=value ...]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import pandas as pd
from ablation_cost import OFF, one_search  # bench/, first on a script's path

REPO = Path(__file__).resolve().parents[1]
CASES: dict[str, list[str]] = {
    "tpe": ["search.sampler=tpe"],
    "random": ["search.sampler=random"],
    "nsga2": ["search.sampler=nsga2"],
    "tpe-no-stopping": ["search.sampler=tpe", "search.early_stopping=null"],
    # the sampled lr per 32 images, scaled with the effective batch (Goyal et al.)
    "tpe-lr-per-32-images": ["search.sampler=tpe", "train.lr_scaling_batch=32"],
    # the main config's trial count before 2026-11-27, and a harder stopping rule
    "tpe-16-trials": ["search.sampler=tpe", "search.num_samples=16"],
    "tpe-keep-0.4": ["search.sampler=tpe", "search.early_stopping.keep=0.4"],
    "tpe-keep-0.6": ["search.sampler=tpe", "search.early_stopping.keep=0.6"],
    # augmentation sampled, as the main config did before 2026-11-27's section 25
    "tpe-augment": ["search.sampler=tpe", "space.augment={choice: [false, true]}"],
    # early stopping at epochs 2 and 4 only (no rung at the first epoch at full rate)
    "tpe-rungs-2-4": ["search.sampler=tpe", "search.early_stopping.rungs=[2, 4]"],
    # the layout not sampled (contiguous), as the main config did before section 28
    "tpe-contiguous": ["search.sampler=tpe", "space.channels_last=null"],
    # AMP sampled whatever this CPU does with bf16, as before section 31's probe
    "tpe-amp-unprobed": ["search.sampler=tpe", "search.amp_probe=false"],
    # a trial still at chance at its first rung goes on (section 33)
    "tpe-slow-starts-spared": ["search.sampler=tpe", "search.early_stopping.slow_start_rungs=1"],
    "tpe-keep-0.6-slow-starts-spared": [
        "search.sampler=tpe",
        "search.early_stopping.keep=0.6",
        "search.early_stopping.slow_start_rungs=1",
    ],
    # rungs at epochs 2 and 4, 0.6 of the trials kept at each
    "tpe-rungs-2-4-keep-0.6-slow-starts-spared": [
        "search.sampler=tpe",
        "search.early_stopping.rungs=[2, 4]",
        "search.early_stopping.keep=0.6",
        "search.early_stopping.slow_start_rungs=1",
    ],
}
DEFAULT_CASES = ["tpe", "random", "nsga2", "tpe-no-stopping", "tpe-lr-per-32-images"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default=str(REPO / "configs" / "cats_dogs.yaml"))
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--cases", nargs="+", choices=list(CASES), default=DEFAULT_CASES)
    parser.add_argument("overrides", nargs="*", help="key.path=value for every search")
    args = parser.parse_args(argv)
    rows = []
    for turn, seed in enumerate(args.seeds):
        order = args.cases[turn % len(args.cases) :] + args.cases[: turn % len(args.cases)]
        for case in order:
            extra = [OFF, f"search.seed={seed}", *CASES[case], *args.overrides]
            with tempfile.TemporaryDirectory(prefix="bench-sampler-") as folder:
                row = one_search(args.config, extra, Path(folder))
            rows.append({"case": case, "seed": seed, **row})
            print(f"{case}, seed {seed}: {row['wall_s']:.1f} s, front best accuracy "
                  f"{row['front best_val_acc']:.4f}, hypervolume {row['hypervolume']:.4f}",
                  flush=True)  # fmt: skip
    table = pd.DataFrame(rows)
    print(table.drop(columns=["ablation_trials"]).round(4).to_markdown(index=False))
    summary = table.groupby("case", sort=False).agg(
        best_acc_median=("front best_val_acc", "median"),
        best_acc_min=("front best_val_acc", "min"),
        best_acc_max=("front best_val_acc", "max"),
        hypervolume_median=("hypervolume", "median"),
        hypervolume_min=("hypervolume", "min"),
        hypervolume_max=("hypervolume", "max"),
        wall_s_median=("wall_s", "median"),
    )
    first = args.cases[0]
    summary["wall_s / " + first] = summary["wall_s_median"] / summary.loc[first, "wall_s_median"]
    print(summary.round(4).to_markdown())
    return 0


if __name__ == "__main__":
    sys.exit(main())
