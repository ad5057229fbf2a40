"""The one metric schema (DESIGN.md) and the pure functions that define its values.

Every name here is used verbatim by `tune.report`, MLflow, the analysis DataFrame and the
charts. `direction` says which way is better for metrics that can be objectives. The
statuses, the default objectives and the minimum accuracy live here too: `trainables`,
`search` and `analysis` all import them from this module, which needs neither torch nor Ray.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal

Direction = Literal["max", "min"]


@dataclass(frozen=True)
class MetricSpec:
    description: str
    direction: Direction | None = None  # None: not meaningful as an objective


METRICS: dict[str, MetricSpec] = {
    "epoch": MetricSpec("1-based epoch just finished"),
    "train_loss": MetricSpec("mean loss over the epoch's training batches"),
    "train_acc": MetricSpec("accuracy over the epoch's training batches (train mode)"),
    "train_eval_acc": MetricSpec(
        "accuracy on a fixed training subset in eval mode; scored at the last epoch and at a "
        "best-val epoch that is a gap epoch (gap_epochs), NaN in others",
        "max",
    ),
    "val_acc": MetricSpec("validation accuracy, eval mode", "max"),
    "val_loss": MetricSpec("validation loss, eval mode", "min"),
    "test_acc": MetricSpec(
        "test accuracy, eval mode; scored at the last epoch and at a best-val epoch that is a "
        "gap epoch (gap_epochs), NaN in others",
        "max",
    ),
    "best_val_acc": MetricSpec("best val_acc so far", "max"),
    "best_epoch": MetricSpec("epoch at which best_val_acc came"),
    "gen_gap": MetricSpec(
        "max(0, train_eval_acc - test_acc) at the best-val epoch: how much better the model "
        "does on training images than on test images; an underfit model scores 0, not less. "
        "Known at the last epoch and at gap epochs; NaN between them while the best epoch's "
        "weights wait to be scored",
        "min",
    ),
    "val_test_gap": MetricSpec(
        "abs(val_acc - test_acc) at the best-val epoch; known when gen_gap is", "min"
    ),
    "throughput": MetricSpec(
        "the config's speed: training images per second of its own steps, timed after "
        "warm-up while no other trial of the node steps on its device (trainables.speed), "
        "over the epochs so far; eval and compile excluded. On a CPU with train.speed_scale "
        "(a search times it): its speed over a reference of its arithmetic timed beside its "
        "steps times that reference's scale, so trials timed at different moments compare",
        "max",
    ),
    "throughput_low": MetricSpec(
        "the low end of throughput's 95% interval (a trial of several configurations, "
        "AdaBatch's batches: Student's t, its blocks' spread pooled over them; NaN: not "
        "timed, or one block)"
    ),
    "throughput_high": MetricSpec(
        "the high end of throughput's 95% interval (NaN: not timed, or one block)"
    ),
    "speed_outsiders": MetricSpec(
        "the most processes outside the search (programs the device's gate cannot hold) seen "
        "on the trial's card as its timing windows began: above 0, its throughput holds "
        "their use of the card too; NaN on a CPU, or where NVML lists no processes"
    ),
    "speed_vs_baseline": MetricSpec(
        "the config's speed over that of the settings speed_baseline names (a ratio: 1.2 is "
        "20% faster), timed after the last epoch by fresh models of both in alternation, "
        "configuration by configuration, so that the machine's drift falls on both "
        "(trainables.speed.time_in_alternation; the rounds' median, its 95% interval in "
        "speed_vs_baseline_low / _high: a median's from nine rounds, Student's t on the "
        "rounds' logarithms before; one model where they differ only in the "
        "configurations trained); "
        "NaN without a baseline, before the last epoch, or where the two ran out of memory"
    ),
    "speed_vs_baseline_low": MetricSpec("the low end of speed_vs_baseline's 95% interval"),
    "speed_vs_baseline_high": MetricSpec("the high end of speed_vs_baseline's 95% interval"),
    "shared_throughput": MetricSpec(
        "training images per second the trial got over the epoch's wall time, its "
        "neighbours on the device included (utilisation; not the config's speed)"
    ),
    "epoch_time_s": MetricSpec("wall seconds of the epoch's training part", "min"),
    "train_time_s": MetricSpec(
        "training seconds of all epochs so far, eval excluded, compile_s included", "min"
    ),
    "time_to_target_s": MetricSpec(
        "the config's seconds until val_acc >= target_acc: the images until then at its "
        "throughput, plus compile_s (the wall time where it was not timed); inf if never",
        "min",
    ),
    "compile_s": MetricSpec(
        "seconds torch.compile took so far (each new batch shape is compiled before its "
        "epoch's clock starts): in train_time_s and time_to_target_s, never in throughput; 0 "
        "without compile"
    ),
    "train_steps": MetricSpec("optimizer steps of all epochs so far"),
    "steps_to_target": MetricSpec(
        "optimizer steps until val_acc >= target_acc; inf if never", "min"
    ),
    "noise_scale": MetricSpec(
        "the gradient noise scale B_simple = tr(Σ)/|G|² measured over the epoch (McCandlish "
        "et al. 2018): about the largest batch that still pays off in steps; NaN where not "
        "measured (without accumulation, only the steps noise_split_steps splits are: by "
        "default 4 where adabatch_rule is noise_scale, else none; with accumulation, "
        "noise_split_steps of its steps, 4 by default; an epoch's first step never is), inf "
        "where the gradient's signal is lost in its noise"
    ),
    "physical_batch_size": MetricSpec(
        "images per forward pass on the device in the epoch (the param batch_size is where "
        "it started; AdaBatch grows it, capacity caps it)"
    ),
    "accumulation_steps": MetricSpec("micro-batches per optimizer step"),
    "effective_batch_size": MetricSpec(
        "physical_batch_size * accumulation_steps: images per update"
    ),
    "scheduled_batch_size": MetricSpec(
        "the effective batch the schedule asked for; above effective_batch_size where the "
        "training split capped it (lr then follows the batch used)"
    ),
    "lr": MetricSpec("learning rate in effect at the end of the epoch"),
    "peak_mem_mb": MetricSpec(
        "peak memory of the epoch's first training step, which always runs at the full "
        "physical batch (MiB): model, gradients, optimizer state, the batch and its "
        "activations; the CUDA allocator's peak of live tensors, or the CPU meter's",
        "min",
    ),
    "peak_reserved_mb": MetricSpec(
        "what the CUDA allocator had reserved at that step's peak (MiB): what its limit "
        "(memory_limit_mb) is checked against, so what decides an out-of-memory error. In "
        "the trial's first epoch the step starts from an empty cache (what the memory model "
        "learns from); later epochs also hold the blocks evaluation left cached. On CPU the "
        "meter's peak_mem_mb"
    ),
    "memory_limit_mb": MetricSpec(
        "what the trial's steps may reserve (MiB): on CUDA its GPU share or budget less what "
        "its process holds outside the allocator (context, libraries); on CPU its budget; "
        "NaN without a limit"
    ),
    "card_mb": MetricSpec("the memory of the trial's card (MiB); NaN on CPU"),
    "card_context_mb": MetricSpec(
        "what the trial's process holds on its card outside the allocator (MiB): the CUDA "
        "context and libraries, with the reserve kept for what they grow by as the model's "
        "kernels load; its share less this is memory_limit_mb. NaN on CPU"
    ),
    "data_mb": MetricSpec(
        "the image splits the trial reads (MiB), in host memory shared by the node's trials; "
        "never in the device's share"
    ),
    "skipped_steps": MetricSpec("optimizer steps of the epoch the fp16 GradScaler skipped"),
    "status": MetricSpec(
        "ok; oom (pruned: out of memory); oom_predicted (never started: a trial that needed "
        "no more memory ran out, or its predicted peak passed its budget); diverged "
        "(non-finite loss); stopped_early (dominated by the trials at an early-stopping rung, "
        "behind them on search.early_stopping.ahead_on); "
        "compile_failed (torch.compile could not compile the model)"
    ),
    "status_detail": MetricSpec("why a trial was pruned: the error, or the trial it follows"),
    "oom_cause": MetricSpec(
        "with status oom: share (the trial needed more than its share or budget) or card "
        "(the card was full while the trial was inside its share: not the config's fault)"
    ),
    "node": MetricSpec("the Ray node that ran the epoch (set by the Tune trainable)"),
    "device_name": MetricSpec("the card (name and memory) or the CPU the trial trained on"),
    "driver_version": MetricSpec("the NVIDIA driver's version (NVML); none on CPU"),
    "torch_version": MetricSpec("PyTorch's version"),
    "cuda_version": MetricSpec("the CUDA version PyTorch was built with"),
    "cudnn_version": MetricSpec("cuDNN's version as PyTorch loads it; none on CPU"),
    "precision": MetricSpec(
        "the float type the steps ran in: fp32, float16 (with a GradScaler) or bfloat16 (asked "
        "for on a card without it, float16 runs instead)"
    ),
    "memory_format": MetricSpec(
        "the model's and its training batches' layout: contiguous or channels_last"
    ),
    "compile_mode": MetricSpec("how the training steps ran: eager, or compiled (torch.compile)"),
    "matmul_precision": MetricSpec(
        "torch's float32 matmul precision in the trial: highest, high (TF32 on CUDA), medium"
    ),
}

# What every report says of the device a trial ran on (trainables.cuda.describe_device).
DEVICE_RECORD = ("device_name", "driver_version", "torch_version", "cuda_version",
                 "cudnn_version")  # fmt: skip
# What every report says of the kernels it trained with (trainables.trial.describe_trial).
RUN_RECORD = ("precision", "memory_format", "compile_mode", "matmul_precision")
TEXT_METRICS = frozenset(
    {"status", "status_detail", "oom_cause", "node", *DEVICE_RECORD, *RUN_RECORD}
)
# Measurements of the machine rather than of the training: they vary between runs of the
# same seed, everything else repeats exactly (on the same device and thread count).
MACHINE_METRICS = frozenset(
    {
        "throughput",
        "throughput_low",
        "throughput_high",
        "speed_outsiders",
        "speed_vs_baseline",
        "speed_vs_baseline_low",
        "speed_vs_baseline_high",
        "shared_throughput",
        "epoch_time_s",
        "train_time_s",
        "time_to_target_s",
        "peak_mem_mb",
        "peak_reserved_mb",
        "memory_limit_mb",
        "card_mb",
        "card_context_mb",
        "compile_s",
        "node",
        *DEVICE_RECORD,
        *RUN_RECORD,
    }
)
NUMERIC_METRICS: tuple[str, ...] = tuple(name for name in METRICS if name not in TEXT_METRICS)
# The MLflow tag of a trial's run naming the numeric metrics its last report left unmeasured
# (NaN): MLflow's history leaves them out, so its latest values would be an earlier
# epoch's; read back, they are NaN, as in Tune's folder (`analysis.load`).
UNMEASURED_TAG = "unmeasured"
OBJECTIVE_METRICS: tuple[str, ...] = tuple(
    name for name, spec in METRICS.items() if spec.direction is not None
)

STATUS_OK = "ok"
STATUS_OOM = "oom"
STATUS_OOM_PREDICTED = "oom_predicted"
STATUS_DIVERGED = "diverged"
STATUS_STOPPED_EARLY = "stopped_early"  # trailing the trials at an early-stopping rung
STATUS_COMPILE_FAILED = "compile_failed"  # torch.compile could not compile the model
STATUS_ERROR = "error"  # the trial raised: a bug or a crash, not a pruned trial
PRUNED_STATUSES = frozenset(
    {STATUS_OOM, STATUS_OOM_PREDICTED, STATUS_DIVERGED, STATUS_STOPPED_EARLY,
     STATUS_COMPILE_FAILED}
)  # fmt: skip
# Worst first: a config whose seeds ended differently takes its worst status.
STATUS_ORDER = (
    STATUS_ERROR,
    STATUS_COMPILE_FAILED,
    STATUS_DIVERGED,
    STATUS_OOM,
    STATUS_OOM_PREDICTED,
    STATUS_STOPPED_EARLY,
    STATUS_OK,
)


def is_last_report(metrics: Mapping[str, Any], epochs: int) -> bool:
    """Whether a trial reports nothing after `metrics`: pruned (its status says why) or at
    its last epoch (a trial the early-stopping rule stops is stopped after its report)."""
    return metrics.get("status", STATUS_OK) != STATUS_OK or metrics.get("epoch") == epochs


DEFAULT_OBJECTIVES: dict[str, Direction] = {
    "throughput": "max",
    "best_val_acc": "max",
    "gen_gap": "min",
}


def min_accuracy_for(num_classes: int) -> float:
    """The best_val_acc below which a model learned nothing, whatever its gap: chance
    (1 / classes) + 5 points. Such trials are kept off the front."""
    return 1 / num_classes + 0.05


# Notes a search adds to a trial's config: no settings of the trainable (it is given the
# config without them), so kept out of what makes two trials the same config.
PREDICTED_FROM = "oom_predicted_from"  # why the searcher knows this config will not fit
REPEAT_OF = "repeat_of"  # the first trial of a config that is run with several seeds
PREDICTED_PEAK = "predicted_peak_mb"  # the memory model's figure for the trial's step
ABLATION_OF = "ablation_of"  # the trial an ablation trial re-runs with one change
ABLATION = "ablation"  # that change, as `setting=value`, or NOISE_FLOOR
NOISE_FLOOR = "noise floor"  # an ablation that changes only the seed
# the settings an ablation trial's speed is timed against (the trainable's speed_baseline),
# as JSON text: Tune's generator cannot take a dict that differs from point to point
TIMED_AGAINST_NOTE = "speed_baseline_json"
# the trial's place among the search's suggestions (0, 1, ...): with `search.lag` it was
# suggested, and is judged at its rungs, knowing the trials at least that many places before;
# an ablation trial's, among the ablations' (the order the report reads them in)
ASKED = "asked"
SEARCH_NOTES = frozenset(
    {PREDICTED_FROM, REPEAT_OF, PREDICTED_PEAK, ABLATION_OF, ABLATION, TIMED_AGAINST_NOTE, ASKED}
)


def unit_of(metric: str) -> str:
    """The unit of a schema metric, read off its name's convention."""
    if metric.endswith("throughput") or metric.startswith("throughput_"):
        return "images/s"
    if metric.endswith("_s"):
        return "s"
    if metric.endswith("_mb"):
        return "MiB"
    if "steps" in metric:
        return "steps"
    if metric.endswith(("_acc", "_gap")):
        return "fraction"
    if "batch_size" in metric:
        return "images"
    return ""


DEFAULT_MIN_ACCURACY = min_accuracy_for(2)  # 0.55: the seed study's cats vs dogs
# Inf while their target is not reached; MLflow is given nothing for them then.
UNTIL_TARGET_METRICS = ("time_to_target_s", "steps_to_target")
OOM_CAUSE_SHARE = "share"
OOM_CAUSE_CARD = "card"


# How much an untimed speed (no throughput interval) moves between runs of one config: one
# config's wall-clock throughput over six trials spread 1.18-1.34x (max/min) on the 2-core
# machine (docs/RESULTS.md section 10), about a 10% standard deviation.
UNTIMED_SPEED_NOISE = 0.10
Z_95 = 1.959964  # a 95% interval's half-width in standard errors


def from_speed(metric: str) -> bool:
    """Whether `metric` is known as well as the throughput is: the speed itself, or a time
    computed from it."""
    return metric == "throughput" or metric.endswith("_time_s") or metric == "time_to_target_s"


def standard_error(metric: str, result: Mapping[str, Any], split_sizes: Mapping[str, int]) -> float:
    """The standard error of a result's `metric` from how it was measured: an accuracy of n
    images by the binomial, with two right and two wrong added (Agresti and Coull's plus
    four: sqrt(q(1-q)/(n+4)), q = (pn+2)/(n+4), so that 1.0 or 0.0 on a few images is not
    read as exact; within 0.1% of sqrt(p(1-p)/n) at 0.8 on 400 images); a gap between two
    accuracies, sqrt(1/4n1 + 1/4n2) (its accuracies are not in the result: the widest the
    binomial allows); the throughput from its 95% interval, else `UNTIMED_SPEED_NOISE` of
    it; a time, as its speed. `split_sizes`: images of "val", "train_eval" and "test".
    0: exact (memory, steps), or not known."""
    value = float(result.get(metric, math.nan))
    accuracy_of = {"best_val_acc": "val", "val_acc": "val", "test_acc": "test",
                   "train_eval_acc": "train_eval"}  # fmt: skip
    gaps = {"gen_gap": ("train_eval", "test"), "val_test_gap": ("val", "test")}
    if metric in accuracy_of:
        n = split_sizes.get(accuracy_of[metric], 0)
        if not n or not math.isfinite(value):
            return 0.0
        q = (min(max(value, 0.0), 1.0) * n + 2) / (n + 4)
        return math.sqrt(q * (1 - q) / (n + 4))
    if metric in gaps:
        sizes = [split_sizes.get(split, 0) for split in gaps[metric]]
        return math.sqrt(sum(0.25 / n for n in sizes)) if all(sizes) else 0.0
    if from_speed(metric):
        low, high = (float(result.get(f"throughput_{end}", math.nan)) for end in ("low", "high"))
        speed = float(result.get("throughput", math.nan))
        relative = UNTIMED_SPEED_NOISE
        if math.isfinite(low) and math.isfinite(high) and speed > 0:
            relative = (high - low) / (2 * Z_95 * speed)
        return relative * abs(value) if math.isfinite(value) else 0.0
    return 0.0


def error_sides(
    metric: str, result: Mapping[str, Any], split_sizes: Mapping[str, int]
) -> tuple[float, float]:
    """The standard errors below and above a result's `metric`: where its interval is not
    symmetric, each side's own. A throughput is the median of a few timed segments, whose
    interval runs from one order statistic to another: one slow reference block gives a
    segment's ratio far out, and the interval's far side with it ([2981, 8130] around
    3437 images/s in one trial's fourth epoch, docs/RESULTS.md section 56), while its near
    side stays where the other segments are. Whether a trial is slower than another
    beyond the noise is a question for its lower side and the other's upper one: a
    symmetric error from the whole width let the far side hide a trial 1.6x the faster.
    A time (images over the speed) takes its speed's sides, turned over. Every other
    metric: `standard_error` on both sides."""
    error = standard_error(metric, result, split_sizes)
    if not from_speed(metric):
        return error, error
    bounds = ("throughput_low", "throughput_high", "throughput")
    low, high, speed = (float(result.get(name, math.nan)) for name in bounds)
    value = float(result.get(metric, math.nan))
    if not (math.isfinite(low) and math.isfinite(high) and math.isfinite(value) and low > 0
            and low <= speed <= high):  # fmt: skip
        return error, error  # untimed: `UNTIMED_SPEED_NOISE` either way
    if metric == "throughput":
        return (speed - low) / Z_95, (high - speed) / Z_95
    # a time's bounds are the speed's turned over: its lower one from the faster speed
    return abs(value) * (1 - speed / high) / Z_95, abs(value) * (speed / low - 1) / Z_95


def generalization_gap(scores: EvalScores) -> float:
    """Only a positive gap counts against a trial: a model that scores lower on training
    images than on test images is not generalizing better, it is undertrained, and a
    signed gap would reward it on the front. NaN where either was not scored."""
    gap = accuracy_gap(scores.train_eval_acc, scores.test_acc)
    return gap if math.isnan(gap) else max(0.0, gap)


# Places a gap between two accuracies is rounded to: exact for any split under a million
# images, and no float noise (0.645 - 0.47 is 0.17500000000000004) in what MLflow shows.
GAP_PLACES = 12


def accuracy_gap(first: float, second: float) -> float:
    """first - second, two accuracies' difference as their fractions make it."""
    gap = first - second
    return gap if math.isnan(gap) else round(gap, GAP_PLACES)


def throughput(images: int, seconds: float) -> float:
    """Images per second; 0 for an epoch that took no measurable time."""
    return images / seconds if seconds > 0 else 0.0


@dataclass(frozen=True)
class EvalScores:
    """Eval-mode accuracies of one epoch."""

    train_eval_acc: float
    val_acc: float
    test_acc: float


@dataclass(frozen=True)
class Progress:
    """What a trial has achieved so far; updated once per epoch by `advance`.

    Kept as plain numbers so it goes into the checkpoint and a resumed trial reports the
    same best/gap/time-to-target values as one that never stopped. The gaps of a best epoch
    whose training subset and test split were not scored then stay NaN until
    `with_best_scored` fills them in from its weights, scored later.
    """

    best_val_acc: float = -math.inf
    best_epoch: int = 0
    gen_gap: float = math.nan
    val_test_gap: float = math.nan
    train_seconds: float = 0.0  # training time so far, eval excluded (wall, compile in)
    time_to_target_s: float = math.inf
    train_steps: int = 0  # optimizer steps so far
    steps_to_target: float = math.inf  # a whole number once reached
    # Where the images went, by configuration (physical batch x accumulation: AdaBatch
    # changes it), with the wall seconds they took: the config's own speed and time are
    # computed from them and its timed speeds (`trainables.speed.own_time`).
    images_by_config: dict[str, int] = field(default_factory=dict)
    seconds_by_config: dict[str, float] = field(default_factory=dict)
    images_to_target: dict[str, int] | None = None  # the same, up to the target's epoch
    # (None in a checkpoint from before it was kept: the seconds of all epochs stand in)
    seconds_to_target: dict[str, float] | None = None
    compile_to_target_s: float = 0.0  # compiling up to then

    @property
    def gap_pending(self) -> bool:
        """Whether the best epoch's training subset and test split are still to be scored."""
        return self.best_epoch > 0 and math.isnan(self.val_test_gap)

    def with_best_scored(self, train_eval_acc: float, test_acc: float) -> Progress:
        """The gaps of the best epoch, from its weights' scores on the training subset and
        the test split (its validation score is `best_val_acc`)."""
        scores = EvalScores(train_eval_acc, self.best_val_acc, test_acc)
        return replace(
            self,
            gen_gap=generalization_gap(scores),
            val_test_gap=abs(accuracy_gap(self.best_val_acc, test_acc)),
        )

    def improved_by(self, val_acc: float) -> bool:
        """Whether an epoch scoring `val_acc` becomes the best-val epoch (strict: a tie
        keeps the earlier epoch)."""
        return val_acc > self.best_val_acc

    def advance(
        self,
        epoch: int,
        scores: EvalScores,
        epoch_seconds: float,
        target_acc: float,
        *,
        steps: int = 0,
        config: str = "",
        images: int = 0,
        train_seconds: float | None = None,
        compile_seconds: float = 0.0,
    ) -> Progress:
        """After `epoch`, which took `epoch_seconds` (wall, compile in) and `steps`
        optimizer steps: `images` of them in configuration `config`, in `train_seconds`
        (compile out); `compile_seconds` of compiling so far."""
        train_seconds_total = self.train_seconds + epoch_seconds
        train_steps = self.train_steps + steps
        images_by_config = dict(self.images_by_config)
        seconds_by_config = dict(self.seconds_by_config)
        if images:
            images_by_config[config] = images_by_config.get(config, 0) + images
            seconds_by_config[config] = seconds_by_config.get(config, 0.0) + (
                epoch_seconds if train_seconds is None else train_seconds
            )
        reached_now = math.isinf(self.time_to_target_s) and scores.val_acc >= target_acc
        progress = replace(
            self,
            train_seconds=train_seconds_total,
            time_to_target_s=train_seconds_total if reached_now else self.time_to_target_s,
            train_steps=train_steps,
            steps_to_target=train_steps if reached_now else self.steps_to_target,
            images_by_config=images_by_config,
            seconds_by_config=seconds_by_config,
            images_to_target=dict(images_by_config) if reached_now else self.images_to_target,
            seconds_to_target=dict(seconds_by_config) if reached_now else self.seconds_to_target,
            compile_to_target_s=compile_seconds if reached_now else self.compile_to_target_s,
        )
        if self.improved_by(scores.val_acc):
            best = replace(progress, best_val_acc=scores.val_acc, best_epoch=epoch)
            progress = best.with_best_scored(scores.train_eval_acc, scores.test_acc)
        return progress


def pruned_metrics(
    status: str, detail: str, known: dict[str, Any] | None = None, **values: Any
) -> dict[str, Any]:
    """The one report of a pruned trial. Every numeric metric is present (a searcher aborts
    the whole search on a missing objective): the last good epoch's value, or NaN."""
    metrics: dict[str, Any] = {name: math.nan for name in NUMERIC_METRICS}
    metrics["oom_cause"] = ""
    metrics.update(known or {})
    metrics.update(values)
    metrics.update(status=status, status_detail=detail)
    return metrics
