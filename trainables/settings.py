"""Every key `train_classifier` reads from its config, with its default, unit and rule.

A trainable's config is a flat dict of these keys (plus a nested `data` dict); any key left
out takes the default below, and an unknown key is an error, not silently ignored.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Mapping
from typing import Any, Literal

import numpy as np
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from trainables.data.settings import DataSettings
from trainables.optimizers import OPTIMIZERS
from trainables.reference_kinds import reference_kind, scales_from

OptimizerName = Literal[tuple(OPTIMIZERS)]  # type: ignore[valid-type]  # trainables.optimizers
AmpDtype = Literal["float16", "bfloat16"]  # autocast dtype on CUDA (trainables.precision)

# Integers and booleans are strict: a quoted "64" in YAML is a mistake worth reporting.
# Floats stay lax because YAML 1.1 reads `1e-4` (no dot) as a string.
_STRICT = {"strict": True}
_MODEL_NAME = re.compile(r"[A-Za-z_][\w.]*(:[A-Za-z_][\w.]*)?")
_DEVICE_NAME = re.compile(r"auto|cpu|cuda(:\d+)?")
DEVICE_NAMES = "auto, cpu, cuda or cuda:N (N: a CUDA device index)"
# steps an epoch the gradient noise scale is measured on where nothing else is asked: split
# in two where the noise-scale rule needs them; an accumulating trial's (its steps measured
# as they train, but the meter cost an epoch measured whole 5-12%: RESULTS.md section 60)
DEFAULT_NOISE_SPLITS = 4

# Settings that were renamed, old name -> new. "checkpoint" meant both the recomputation
# of activations and Tune's saved trial state; now it is the latter only. A "probe" meant
# both a batch tried for its memory and a step split in two for the gradient noise scale;
# now it is the former only. The old names still work, with a warning, in configs, trials'
# configs and searches saved before.
RENAMED_KEYS: dict[str, str] = {
    "grad_checkpointing": "activation_checkpointing",
    "checkpoint_modules": "recomputed_modules",
    "checkpoint_segments": "recomputed_segments",
    "noise_probe_steps": "noise_split_steps",
}


def under_new_names(
    config: Mapping[str, Any],
) -> tuple[dict[str, Any], list[tuple[str, str]]]:
    """`config` (a trainable's settings, or a search's `space`) with renamed keys under
    their new names, and what was renamed, as (old, new). Both names at once: the new one
    stays and the old is left for validation to refuse."""
    renamed, moved = dict(config), []
    for old, new in RENAMED_KEYS.items():
        if old in renamed and new not in renamed:
            renamed[new] = renamed.pop(old)
            moved.append((old, new))
    return renamed, moved


class TrainSettings(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    # a name (this project's small_cnn: conv 32 3x3, max-pool, dense 128; any torchvision
    # classifier, e.g. resnet18, mobilenet_v3_small, vit_b_16) or "module:function", your
    # factory called with num_classes= and image_size= (trainables.models)
    model: str = "small_cnn"
    # torchvision's ImageNet weights with a new head, from torch's hub cache (downloaded
    # there once); inputs are then normalised with the weights' own mean and std
    pretrained: bool = Field(False, **_STRICT)
    batch_size: int = Field(32, gt=0, **_STRICT)  # images per forward pass (AdaBatch: at start)
    # sgd (with momentum), sgd_nesterov, adam (weight decay as L2), adamw (decoupled weight
    # decay): trainables.optimizers
    optimizer: OptimizerName = "sgd"
    lr: float | None = Field(None, gt=0)  # per optimizer step; None: sgd 0.01, adam(w) 0.001
    # lr is per this many images: a step's lr is lr x effective batch / this (Goyal et al.'s
    # linear scaling rule)
    lr_scaling_batch: int | None = Field(None, gt=0, **_STRICT)
    momentum: float = Field(0.9, ge=0, lt=1)  # SGD and SGD with Nesterov only
    weight_decay: float = Field(1e-4, ge=0)  # L2, coupled (torch's weight_decay)
    epochs: int = Field(5, gt=0, **_STRICT)  # passes over the training split
    seed: int = Field(0, **_STRICT)  # model init and data order
    target_acc: float = Field(0.75, gt=0, le=1)  # val_acc that stops the time_to_target_s clock
    train_eval_size: int = Field(400, gt=0, **_STRICT)  # training images scored in eval mode
    # images per eval forward pass; None: whichever of the epoch's physical batch, its half
    # and its quarter scores fastest, and in whichever layout (contiguous or channels-last),
    # timed on the trial's first evaluations (never more memory than the training step at
    # that batch); set, or deterministic: that batch, or the physical one, in the trial's
    # layout
    eval_batch_size: int | None = Field(None, gt=0, **_STRICT)
    # epochs whose report carries gen_gap and val_test_gap: the search adds its early
    # stopping's rungs to these; the last epoch always does, and between them the best
    # epoch's weights wait in host memory to be scored on the training subset and test split
    # (every epoch, `[1, 2, ..., 7]`, for bench/early_stopping_replay.py)
    gap_epochs: tuple[int, ...] = ()
    # --- large-batch techniques, each a switch of the one training loop ---
    amp: bool = Field(False, **_STRICT)  # autocast: fp16 + GradScaler on CUDA, bf16 on CPU
    amp_dtype: AmpDtype = "float16"  # on CUDA; bfloat16 needs compute capability 8.0+
    # keep each repeated block's input and recompute its activations in backward (torch's
    # non-reentrant checkpoint): ResNet's BasicBlock, MobileNet's InvertedResidual, ... found
    # by type; a model without repeated blocks (VGG, small_cnn) by its main nn.Sequential
    activation_checkpointing: bool = Field(False, **_STRICT)
    # module class names to recompute instead of the blocks found, e.g. [_DenseLayer]
    # (trainables.activation_checkpointing)
    recomputed_modules: tuple[str, ...] | None = None
    # a model recomputed as a sequence: its segments, all but the last recomputed; None:
    # about sqrt(layers), at least 2; refused for a model recomputed by blocks
    recomputed_segments: int | None = Field(None, ge=2, **_STRICT)
    accumulation_steps: int = Field(1, gt=0, **_STRICT)  # micro-batches per optimizer step
    adabatch_growth: int = Field(1, ge=1, **_STRICT)  # beta: effective batch x beta; 1 = off
    # epochs between growths; the effective batch never passes the training split (there
    # accumulation is cut to whole micro-batches and lr scaled by achieved / asked)
    adabatch_interval: int = Field(1, gt=0, **_STRICT)
    # lr/effective batch x this per growth: 1 keeps the ratio (the paper's rule), 0.25 is the
    # paper's CIFAR-100 schedule (batch x2, lr x0.5)
    adabatch_lr_decay: float = Field(1.0, gt=0, le=1)
    # interval: grow every adabatch_interval epochs (the paper); noise_scale: grow when the
    # measured gradient noise scale has reached the next batch size (checked every epoch)
    adabatch_rule: Literal["interval", "noise_scale"] = "interval"
    # steps per epoch trained as two halves to measure the gradient noise scale when there is
    # no accumulation, never the first (it trains the whole physical batch and sets
    # peak_mem_mb); with accumulation, this many accumulated steps are measured as they
    # train (4 where this is None or 0; at most half the epoch's). None: 4 where the
    # noise-scale rule needs them (adabatch_rule: noise_scale), else 0 (a split step costs
    # time). A measured step is never one of the config's timed speed blocks: its meter
    # costs time the config does not
    noise_split_steps: int | None = Field(None, ge=0, **_STRICT)
    # clip the gradients' global L2 norm to this before each update (under fp16's GradScaler,
    # the unscaled gradients); None: no clipping
    grad_clip_norm: float | None = Field(None, gt=0)
    warmup_epochs: int = Field(0, ge=0, **_STRICT)  # gradual lr warmup (Goyal et al. 2017)
    warmup_start_factor: float = Field(0.1, gt=0, le=1)  # warmup starts at lr x this
    max_batch_size: int | None = Field(None, gt=0, **_STRICT)  # physical cap; then accumulate
    cudnn_benchmark: bool = Field(False, **_STRICT)  # cuDNN autotuner: faster, more memory
    # the model and every training batch in channels-last layout: the layout tensor cores
    # take their convolutions in (on a CPU oneDNN's channels-last path); evaluation scores
    # in whichever layout it timed faster (trainables.eval_choice)
    channels_last: bool = Field(False, **_STRICT)
    # torch.compile of the model for its training steps (evaluation runs it uncompiled: no
    # compile per evaluation batch); each new batch shape is compiled before the epoch's
    # clock starts, its seconds reported as compile_s, kept out of throughput
    compile: bool = Field(False, **_STRICT)
    # Same seed, same numbers on CUDA too: deterministic kernels (ops without one warn), the
    # cuDNN autotuner off (so not with cudnn_benchmark), CUBLAS_WORKSPACE_CONFIG=:4096:8, at
    # some cost in speed. CPU runs repeat exactly either way.
    deterministic: bool = Field(False, **_STRICT)
    # random crop (padding 1/8 of the side) + horizontal flip, on the device
    augment: bool = Field(False, **_STRICT)
    # MiB per trial, like a card of that size: on CUDA the allocator is held to it, CUDA
    # context included (and always to the GPU share); on CPU a step the memory meter puts
    # above it is an out-of-memory error. A search sets it from resources.memory_budget_mb
    memory_budget_mb: float | None = Field(None, gt=0)
    # auto: the current CUDA device when torch sees one, else cpu; cuda: the current one
    # (under Ray, the one the trial was given); cuda:N the N-th torch sees
    device: str = "auto"
    num_threads: int | None = Field(None, gt=0, **_STRICT)  # torch threads; None: trial's CPU share
    # float32 matmuls: highest (true fp32), high (TF32 on CUDA cards that have it: a tuned
    # loop's default), medium; recorded with every report
    matmul_precision: Literal["highest", "high", "medium"] = "high"
    # epochs between saves of the trial's state (Tune's checkpoint: what a retried or resumed
    # trial continues from); the last epoch always saves. A save is the weights and
    # optimizer state: ~200 MB for ResNet-50, seconds of an epoch on a GPU
    checkpoint_every: int = Field(1, gt=0, **_STRICT)
    # throughput is the config's speed: its own steps timed in blocks where no other trial
    # steps on its device (trainables.speed); on a crowded device the trial holds it for a
    # short window an epoch, until the 95% interval is within this share of the speed (over
    # 3 windows), and a speed_baseline's ratio within +-this; 0: not timed, throughput is the
    # epoch's images over its wall time, and no speed_baseline is timed
    speed_precision: float = Field(0.05, ge=0, lt=1)
    # the most seconds a configuration holds a crowded device, over all its windows
    speed_window_s: float = Field(1.5, gt=0)
    # on the CPU: images per second of the speed reference (trainables/speed_reference.py, a
    # small fixed workload in the trial's arithmetic) that a trial's throughput is scaled by,
    # by kind: {fp32_contiguous: .., fp32_channels_last: .., bfloat16_contiguous: ..,
    # bfloat16_channels_last: ..} (one number: the fp32_contiguous one). A trial's timed
    # speed over its kind's reference, timed beside its blocks, times its kind's scale, so
    # that trials timed at different moments of a machine whose speed moves share one scale.
    # A search measures them as it starts; give two searches the same to compare their
    # throughputs. null, or no scale for the trial's kind: a trial's speed is its own blocks'
    # images per second, at the moments they ran
    speed_scale: dict[str, float] | None = None
    # settings this config's speed is timed against after its last epoch, e.g. {amp: false}:
    # fresh models of both train short blocks in alternation (A B A B ...), so the machine's
    # drift falls on both, until the ratio's 95% interval is within +-speed_precision or
    # speed_baseline_s has passed; reported as speed_vs_baseline. The search's ablations
    # set it to the base's value of the setting they change. null: not timed
    speed_baseline: dict[str, Any] | None = None
    # the most seconds that alternation takes: AdaBatch's several batches or AMP on a CPU
    # need about 8 for +-5 points (docs/RESULTS.md, section 22), Adam against SGD over
    # AdaBatch's batches 8-10 on the Intel Xeon (section 48); most stop well before
    speed_baseline_s: float = Field(12.0, gt=0)
    data: DataSettings = DataSettings()  # used when no prepared data is passed in

    @field_validator("model")
    @classmethod
    def _a_name_or_a_factory(cls, model: str) -> str:
        if not _MODEL_NAME.fullmatch(model):
            raise ValueError(
                "must be a model name (small_cnn, a torchvision classifier such as "
                "mobilenet_v3_small) or your factory as 'module:function'"
            )
        return model

    @model_validator(mode="before")
    @classmethod
    def _old_names(cls, data: Any) -> Any:
        if not isinstance(data, Mapping):
            return data
        renamed, moved = under_new_names(data)
        for old, new in moved:
            warnings.warn(f"the setting {old} is now {new}; the old name still works for now",
                          FutureWarning, stacklevel=2)  # fmt: skip
        return renamed

    @field_validator("speed_scale", mode="before")
    @classmethod
    def _scales_by_kind(cls, scale: Any) -> dict[str, float] | None:
        return scales_from(scale)

    @field_validator("device")
    @classmethod
    def _a_device(cls, device: str) -> str:
        if not _DEVICE_NAME.fullmatch(device):
            raise ValueError(f"must be one of {DEVICE_NAMES}")
        return device

    @field_validator("recomputed_modules")
    @classmethod
    def _some_modules(cls, modules: tuple[str, ...] | None) -> tuple[str, ...] | None:
        if modules is not None and not modules:
            raise ValueError("names no module type; leave it out to find the blocks by type")
        return modules

    @field_validator("gap_epochs")
    @classmethod
    def _epochs_from_one(cls, epochs: tuple[int, ...]) -> tuple[int, ...]:
        if any(epoch < 1 for epoch in epochs):
            raise ValueError(f"are epochs, counted from 1; got {list(epochs)}")
        return tuple(sorted(set(epochs)))

    @model_validator(mode="after")
    def _nesterov_needs_momentum(self) -> TrainSettings:
        if self.optimizer == "sgd_nesterov" and self.momentum == 0:
            raise ValueError("optimizer sgd_nesterov needs momentum > 0")
        return self

    @model_validator(mode="after")
    def _autotuner_is_not_deterministic(self) -> TrainSettings:
        if self.deterministic and self.cudnn_benchmark:
            raise ValueError(
                "cudnn_benchmark: true picks kernels by timing them, so deterministic: true "
                "cannot hold; turn one of the two off"
            )
        return self

    @field_validator("speed_baseline")
    @classmethod
    def _baseline_of_settings(cls, baseline: dict[str, Any] | None) -> dict[str, Any] | None:
        if baseline is None:
            return None
        if not baseline:
            raise ValueError("names no setting to time against; leave it out (null) instead")
        unknown = sorted(set(baseline) - TIMED_AGAINST)
        if unknown:
            raise ValueError(
                f"can change only the settings of a training step, not {', '.join(unknown)}"
            )
        return {key: _plain(value) for key, value in baseline.items()}

    @model_validator(mode="after")
    def _baseline_is_valid(self) -> TrainSettings:
        if self.speed_baseline is None:
            return self
        try:
            self.baseline()  # its own rules (e.g. sgd_nesterov's momentum) hold too
        except ValidationError as error:
            problems = "; ".join(problem["msg"].removeprefix("Value error, ")
                                 for problem in error.errors())  # fmt: skip
            raise ValueError(f"speed_baseline {self.speed_baseline}: {problems}") from None
        return self

    def baseline(self) -> TrainSettings:
        """The settings `speed_baseline` names, over these (and not timed against anything)."""
        changes = {**(self.speed_baseline or {}), "speed_baseline": None}
        return TrainSettings.model_validate(self.model_dump() | changes)

    @property
    def reference_kind(self) -> str:
        """The speed reference a CPU trial of these settings times (its arithmetic)."""
        return reference_kind(self.amp, self.channels_last)

    @property
    def own_speed_scale(self) -> float | None:
        """Its kind's scale in `speed_scale`; None: no scale for it (timed at its moments)."""
        return (self.speed_scale or {}).get(self.reference_kind)

    @property
    def noise_splits(self) -> int:
        """Steps per epoch split in two for the gradient noise scale (see `noise_split_steps`)."""
        if self.noise_split_steps is not None:
            return self.noise_split_steps
        return DEFAULT_NOISE_SPLITS if self.adabatch_rule == "noise_scale" else 0

    @property
    def base_lr(self) -> float:
        """The learning rate of the first epoch's steps, before warmup.

        Without `lr`, each optimizer's customary default (Keras' and the seed study's).
        With `lr_scaling_batch`, Goyal et al.'s linear scaling rule: lr is given for that
        many images and scales with the effective batch.
        """
        lr = self.lr if self.lr is not None else OPTIMIZERS[self.optimizer].default_lr
        if self.lr_scaling_batch is not None:
            lr *= self.batch_size * self.accumulation_steps / self.lr_scaling_batch
        return lr

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> TrainSettings:
        """Validate a Tune config; numpy scalars (from some searchers) become Python ones."""
        return cls.model_validate({key: _plain(value) for key, value in config.items()})


def _plain(value: Any) -> Any:
    return value.item() if isinstance(value, np.generic) else value


TRAIN_KEYS: frozenset[str] = frozenset(TrainSettings.model_fields)
# Settings that leave the work of a training step as it is: they change the numbers it
# computes (the learning rate, its warmup, the seed), not what it computes or how much. A
# change of one of them has no effect on speed or memory by construction.
SAME_WORK_PER_IMAGE: frozenset[str] = frozenset({
    "lr", "lr_scaling_batch", "warmup_epochs", "warmup_start_factor", "adabatch_lr_decay",
    "seed", "target_acc",
})  # fmt: skip
# Settings that only decide which configurations (physical batch, accumulation) a run
# trains, and when: the step of one configuration is the same whatever they are. Runs that
# differ only in these (and SAME_WORK_PER_IMAGE) train a configuration they share alike.
CHOOSES_CONFIGURATIONS: frozenset[str] = frozenset({
    "batch_size", "accumulation_steps", "max_batch_size", "adabatch_growth", "adabatch_interval",
})  # fmt: skip
# What `speed_baseline` may change: the settings of a training step, not the trial's
# length, device, evaluation, saving or timing.
TIMED_AGAINST: frozenset[str] = TRAIN_KEYS - {
    "speed_baseline", "speed_baseline_s", "speed_precision", "speed_window_s", "data", "epochs",
    "device", "num_threads", "memory_budget_mb", "checkpoint_every", "gap_epochs", "target_acc",
    "train_eval_size", "eval_batch_size",
}  # fmt: skip
DEFAULT_EPOCHS: int = TrainSettings.model_fields["epochs"].default
