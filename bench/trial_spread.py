"""Where the spread of a CPU trial's speed comes from: one config trained as a search trains
its trials (`trainables.classifier.fit_classifier`, one thread, the trials' allocator and
environment: its blocks timed, the reference after each segment of them,
`trainables.speed.SpeedWindow`), in `--processes` fresh processes one after another, each
beside a neighbour training on the other core as the ablation phase's second trial does
(`--no-neighbour`: alone), all on one speed scale timed here first.

Printed per process: the trial's throughput with its 95% interval and its segments. At the
end, within a trial (medians over the processes): the standard deviation of the logarithm of
its segments' ratios, of its reference blocks and of its segments' medians, and the
correlation of a segment's median with the reference block timed after it (what pairing
them at a segment's length takes away). Across processes, the trial's speed read two ways:
as a trial reads it (the median of its segments' ratios) and as its segments' median over
its reference blocks' median; for each, the standard deviation of the logarithm across
processes and the share of threes of processes within 3% of each other, as the knee and its
two noise-floor runs would have to be. Then the trial's reading taken apart: the part its own
segments explain (half the spread across processes of its odd segments' reading less its
even segments': each half has half the segments, so its noise is sqrt(2) times the whole's,
and the difference of two halves sqrt(2) times a half's) and what is left, the process's
part (the square root of the difference of their squares) (docs/RESULTS.md, section 58).
Last, the trials' 95% intervals as the checkout this runs from reads them: their median
half width and how many hold the median of the processes' speeds. `--from` reads the trials
of an earlier `--save` instead of training them (two checkouts' intervals on one set:
`PYTHONPATH=CHECKOUT python bench/trial_spread.py --from FILE`). `--env KEY=VALUE`: every
other process (the second, the fourth, ...) runs with it, and each half is read apart, with
the ratio of their median speeds.

    python bench/trial_spread.py [--config configs/cats_dogs.yaml] [--processes 16]
        [--no-neighbour] [--save segments.json] [--from segments.json] [--env KEY=VALUE]
        [setting=value ...]
        (the trial's settings over the default search's knee on the Intel Xeon, Adam at
        batch 128 with AMP and channels-last; a dotted key sets inside a section:
        data.train_per_class=100)
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
from alternation_cost import beside_a_neighbour, settings_from  # bench/, first on the path
from process_spread import log_sd, threes_within

from trainables.host_memory import WORKER_ENV
from trainables.speed import ConfigSpeed, own_speed

REPO = Path(__file__).resolve().parents[1]
# the default command's most frequent knee on the Intel Xeon, 2026-12-07 (RESULTS.md, 56-57)
KNEE = {"batch_size": 128, "optimizer": "adam", "lr": 0.0009898, "amp": True,
        "channels_last": True, "warmup_epochs": 2, "accumulation_steps": 1,
        "adabatch_growth": 1, "activation_checkpointing": False,
        "cudnn_benchmark": False}  # fmt: skip


def child(config: dict) -> dict:
    """In a fresh process: the trial trained, each segment's median block and the reference
    block read after it (`reused`: the epoch's last, read again for a short end)."""
    import torch

    import trainables.classifier as classifier
    import trainables.speed as speed
    from trainables.data import prepare_data
    from trainables.host_memory import hold_host_allocator

    hold_host_allocator()
    torch.set_num_threads(1)
    segments: list[dict] = []
    windows: list[speed.SpeedWindow] = []  # one an epoch, kept so that no two share an id
    read = speed.SpeedWindow._time_reference

    def recorded(window: speed.SpeedWindow, at_end: bool = False) -> None:
        blocks, before, ratios = list(window._segment), window._last_reference, len(window._ratios)
        read(window, at_end)
        if len(window._ratios) > ratios:  # a ratio was read: over this reference block
            # the epoch's last block read again (a short end) is the same object, not a new one
            reference = window._last_reference
            if not any(seen is window for seen in windows):
                windows.append(window)
            epoch = next(number for number, seen in enumerate(windows) if seen is window)
            segments.append({"median": statistics.median(blocks), "reference": reference,
                             "reused": at_end and reference is before, "key": window._key,
                             "epoch": epoch})  # fmt: skip

    speed.SpeedWindow._time_reference = recorded
    settings = classifier.settings_for_trial({**config, "num_threads": 1}, 0.0)
    last = classifier.fit_classifier(settings, prepare_data(settings.data), lambda *_: None)
    return {"throughput": last["throughput"], "low": last["throughput_low"],
            "high": last["throughput_high"], "segments": segments}  # fmt: skip


def by_configuration(segments: list[dict], ratios: list[float]) -> float:
    """A trial's speed from its segments' `ratios` as a trial reads them: each
    configuration's median ratio (`ConfigSpeed.over_reference`), the configurations
    (AdaBatch's batches) put together over the images each trained, here its epochs (each
    the whole split: `trainables.speed.own_speed`), on a scale of 1."""
    return with_interval(segments, ratios)[0]


def with_interval(segments: list[dict], ratios: list[float]) -> tuple[float, float, float]:
    """`by_configuration`'s speed with its 95% interval, (speed, low, high)."""
    speeds = ConfigSpeed(scale=1.0)
    epochs: dict[str, set] = {}
    for segment, ratio in zip(segments, ratios, strict=True):
        key = segment.get("key", "")
        speeds.add(key, [], ratios=[ratio])
        epochs.setdefault(key, set()).add(segment.get("epoch"))
    return own_speed({key: len(seen) for key, seen in epochs.items()}, {}, speeds)


def intervals(trials: list[list[dict]]) -> tuple[float, int]:
    """The trials' 95% intervals as a trial reads them (`with_interval`, the code of the
    checkout this runs from): their median half width (a share of the speed), and how
    many hold the median of the trials' speeds."""
    read = [with_interval(segments, [s["median"] / s["reference"] for s in segments])
            for segments in trials]  # fmt: skip
    middle = statistics.median(speed for speed, _, _ in read)
    half = statistics.median((high - low) / (2 * speed) for speed, low, high in read)
    return half, sum(low <= middle <= high for _, low, high in read)


def as_a_trial_reads(segments: list[dict]) -> float:
    """Each segment's median over the reference block timed after it, read as a trial
    reads them (`by_configuration`)."""
    return by_configuration(segments, [s["median"] / s["reference"] for s in segments])


def medians_over(segments: list[dict]) -> float:
    """The segments' median over the median of the reference blocks timed (each once), each
    configuration apart (`by_configuration`)."""
    reference = float(np.median([s["reference"] for s in segments if not s["reused"]]))
    return by_configuration(segments, [s["median"] / reference for s in segments])


def over_nearest_references(segments: list[dict], before: int = 1, after: int = 1) -> float:
    """Each segment's median over the median of the reference blocks timed from `before`
    segments before it to `after` after it, whatever configuration those trained
    (`by_configuration`): a drift slower than a few segments stays in each ratio, one
    reference block's own noise (a stall of a few ms in a block of one step) is outvoted."""
    references = [s["reference"] for s in segments]
    ratios = [s["median"] / statistics.median(references[max(0, i - before) : i + after + 1])
              for i, s in enumerate(segments)]  # fmt: skip
    return by_configuration(segments, ratios)


def over_last_references(segments: list[dict]) -> float:
    """`over_nearest_references` over the segment's own and the two timed before it."""
    return over_nearest_references(segments, before=2, after=0)


READINGS = {"as a trial reads it (median segment ratio by configuration)": as_a_trial_reads,
            "segments' median over the references' median": medians_over,
            "each segment over its three nearest reference blocks' median":
                over_nearest_references,
            "each segment over its own and the two last reference blocks' median":
                over_last_references}  # fmt: skip


def own_part(trials: list[list[dict]]) -> float:
    """The standard deviation of the logarithm of a trial's reading (`as_a_trial_reads`)
    that its own segments explain: half the spread across trials of the reading of its odd
    segments less that of its even ones."""
    halves = [math.log(as_a_trial_reads(segments[0::2]) / as_a_trial_reads(segments[1::2]))
              for segments in trials if len(segments) >= 2]  # fmt: skip
    return statistics.stdev(halves) / 2 if len(halves) >= 2 else math.nan


WITHIN = ("segment ratios", "reference blocks", "segment medians", "correlation")


def within_a_trial(segments: list[dict]) -> dict[str, float]:
    """Standard deviations of the logarithm of the segments' ratios, reference blocks and
    medians, and the correlation of a segment's median with its reference block (`WITHIN`;
    NaN with fewer than three segments timing their own reference block)."""
    own = [s for s in segments if not s["reused"]]
    if len(own) < 3:  # a spread needs two, a correlation three
        return dict.fromkeys(WITHIN, math.nan)
    medians = np.log([s["median"] for s in own])
    references = np.log([s["reference"] for s in own])
    values = (
        np.std(medians - references, ddof=1),
        np.std(references, ddof=1),
        np.std(medians, ddof=1),
        np.corrcoef(medians, references)[0, 1],
    )
    return {name: float(value) for name, value in zip(WITHIN, values, strict=True)}


def trial_config(config_path: str, given: dict[str, object], scales: dict[str, float]) -> dict:
    """The trial's config: the search config's fixed train settings and data, the knee's
    settings, `given` over them (dotted keys inside a section), and the scale."""
    from search.config import load_config

    config = {**load_config(config_path).train_config(), **KNEE, "speed_scale": scales}
    for key, value in given.items():
        *sections, last = key.split(".")
        inner = config
        for section in sections:
            inner = inner.setdefault(section, {})
        inner[last] = value
    return config


def train_trials(
    config_path: str,
    given: dict[str, object],
    processes: int,
    neighbour: bool,
    extra_env: dict[str, str] | None = None,
) -> list[dict]:
    """The config trained in `processes` fresh processes one after another, each beside a
    neighbour (`neighbour`), on one speed scale timed here first: each trial's figures
    (`env`: whether it ran with `extra_env`, every other process from the second)."""
    from trainables.host_memory import hold_host_allocator
    from trainables.speed_reference import measure_scales

    hold_host_allocator()  # the scale timed as a search's scale task times it
    scales = measure_scales(threads=1)
    print("speed scale, images/s: " + ", ".join(f"{k} {v:.0f}" for k, v in scales.items()))
    config = json.dumps(trial_config(config_path, given, scales))
    env = {**os.environ, **WORKER_ENV}
    trials = []
    with tempfile.TemporaryDirectory(prefix="trial-spread-") as folder:  # the data's cache
        for number in range(processes):
            with_env = bool(extra_env) and number % 2 == 1
            with beside_a_neighbour(neighbour):
                done = subprocess.run([sys.executable, __file__, "--child", config],
                                      env={**env, **(extra_env if with_env else {})},
                                      cwd=folder, capture_output=True, text=True)  # fmt: skip
            if done.returncode != 0:
                raise SystemExit(f"process {number + 1} failed:\n{done.stderr[-3000:]}")
            trial = json.loads(done.stdout.strip().splitlines()[-1]) | {"env": with_env}
            trials.append(trial)
            print(f"process {number + 1}{' (--env)' if with_env else ''}: "
                  f"{trial['throughput']:.0f} images/s "
                  f"[{trial['low']:.0f}, {trial['high']:.0f}], "
                  f"{len(trial['segments'])} segments", flush=True)  # fmt: skip
    return trials


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default=str(REPO / "configs" / "cats_dogs.yaml"))
    parser.add_argument("--processes", type=int, default=16)
    parser.add_argument("--no-neighbour", action="store_true")
    parser.add_argument("--save", type=Path, help="the trials' segments written to this JSON file")
    parser.add_argument("--from", dest="saved", type=Path,
                        help="the trials of an earlier --save, read, not trained")  # fmt: skip
    parser.add_argument("--env", action="append", default=[], metavar="KEY=VALUE",
                        help="every other process runs with it, read apart")  # fmt: skip
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("settings", nargs="*", help="setting=value over the knee's")
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(json.loads(args.child))), flush=True)
        return 0
    if args.saved:
        trials = json.loads(args.saved.read_text())
    else:
        if args.processes < 3:
            parser.error("--processes is at least 3 (threes of processes are compared)")
        if args.env and args.processes < 6:
            parser.error("with --env, --processes is at least 6 (three in each half)")
        extra_env = dict(word.partition("=")[::2] for word in args.env)
        trials = train_trials(args.config, settings_from(parser, args.settings),
                              args.processes, not args.no_neighbour, extra_env)  # fmt: skip
    if args.save:
        args.save.write_text(json.dumps(trials))
    groups = {"": trials}
    if any(trial.get("env") for trial in trials):
        groups = {"without --env: ": [t for t in trials if not t.get("env")],
                  "with --env: ": [t for t in trials if t.get("env")]}  # fmt: skip
        speeds = {name: statistics.median(as_a_trial_reads(t["segments"]) for t in group)
                  for name, group in groups.items()}  # fmt: skip
        without, with_env = speeds.values()
        print(f"with --env over without, the processes' median speeds: {with_env / without:.3f}x")
    for label, group in groups.items():
        spread_readings(label, group)
    return 0


def spread_readings(label: str, trials: list[dict]) -> None:
    """The readings within and across `trials`' processes, each line opened by `label`."""
    parts = [within_a_trial(trial["segments"]) for trial in trials]
    typical = {name: statistics.median([p[name] for p in parts if not math.isnan(p[name])]
                                       or [math.nan]) for name in WITHIN}  # fmt: skip
    print(f"{label}within a trial (median over the processes): " + ", ".join(
        f"{name} {value:.3f}" if name == "correlation" else f"{name} sd {value:.1%}"
        for name, value in typical.items()))  # fmt: skip
    for name, reading in READINGS.items():
        values = [reading(trial["segments"]) for trial in trials]
        print(f"{label}{name}: across processes sd {log_sd(values):.1%}, threes of "
              f"processes within 3% {threes_within(values):.2f}")  # fmt: skip
    across = log_sd([as_a_trial_reads(trial["segments"]) for trial in trials])
    own = own_part([trial["segments"] for trial in trials])
    process = math.sqrt(max(across**2 - own**2, 0.0))
    print(f"{label}a trial's reading, taken apart: its own segments {own:.1%}, the "
          f"process's part {process:.1%}")  # fmt: skip
    half, holding = intervals([trial["segments"] for trial in trials])
    print(f"{label}a trial's 95% interval as it reads it: median half width {half:.1%}, "
          f"holding the processes' median in {holding} of {len(trials)}")  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
