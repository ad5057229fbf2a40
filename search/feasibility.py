"""Monotone feasibility: once a config runs out of memory, a config that needs at least as
much memory will too, so it is pruned before it trains.

"At least as much" is judged only where the answer is certain from the settings alone:
the same model and image size, a physical batch (training and evaluation) at least as
large, an optimizer with at least as much state, no memory-saving switch that the failed
trial lacked (AMP, the same checkpointing, the cuDNN autotuner off) and no larger budget.
Anything else is left to be tried.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from trainables.schedules import epoch_plan
from trainables.settings import TrainSettings


@dataclass(frozen=True)
class MemoryFootprint:
    """The settings that decide how much memory a trial's steps need."""

    model: str
    image_size: int
    batch_size: int  # physical batch of the first epoch (AdaBatch growth past what fits
    # turns into accumulation, so growth alone never runs a trial out of memory)
    eval_batch_size: int
    optimizer_buffers: int  # per-parameter state: SGD 0 or 1 (momentum), Adam 2
    amp: bool
    checkpoint_segments: int | None  # None: no activation checkpointing
    cudnn_benchmark: bool
    memory_budget_mb: float

    @classmethod
    def of(cls, settings: TrainSettings, batch_size: int | None = None) -> MemoryFootprint:
        """`batch_size`: the physical batch a trial actually ran out of memory with."""
        first = epoch_plan(
            1,
            batch_size=settings.batch_size,
            accumulation_steps=settings.accumulation_steps,
            lr=settings.base_lr,
            capacity=settings.max_batch_size,
        )
        buffers = {"adam": 2, "sgd": 1 if settings.momentum > 0 else 0}[settings.optimizer]
        segments = None
        if settings.grad_checkpointing:
            segments = settings.checkpoint_segments or 0  # 0: one per stage
        return cls(
            model=settings.model,
            image_size=settings.data.image_size,
            batch_size=batch_size if batch_size is not None else first.batch_size,
            eval_batch_size=settings.eval_batch_size,
            optimizer_buffers=buffers,
            amp=settings.amp,
            checkpoint_segments=segments,
            cudnn_benchmark=settings.cudnn_benchmark,
            memory_budget_mb=settings.memory_budget_mb or math.inf,
        )


def needs_at_least(candidate: MemoryFootprint, failed: MemoryFootprint) -> bool:
    """Whether `candidate` certainly needs at least the memory `failed` ran out of."""
    return (
        candidate.model == failed.model
        and candidate.image_size == failed.image_size
        and candidate.batch_size >= failed.batch_size
        and candidate.eval_batch_size >= failed.eval_batch_size
        and candidate.optimizer_buffers >= failed.optimizer_buffers
        and (failed.amp or not candidate.amp)
        and (
            candidate.checkpoint_segments is None
            or candidate.checkpoint_segments == failed.checkpoint_segments
        )
        and (candidate.cudnn_benchmark or not failed.cudnn_benchmark)
        and candidate.memory_budget_mb <= failed.memory_budget_mb
    )


def predicted_oom(
    candidate: MemoryFootprint, failures: Mapping[str, MemoryFootprint]
) -> str | None:
    """The id of a trial that ran out of memory needing no more than `candidate`, if any."""
    for trial_id, failed in failures.items():
        if needs_at_least(candidate, failed):
            return trial_id
    return None
