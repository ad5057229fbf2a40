"""The speed that belongs to a config: its own training steps timed where nobody else
steps on its device, with an interval.

A trial's epoch runs beside its neighbours (other trials on the node's cores, or on the
same card), so its images over its wall time say as much about the schedule as about the
config. Here the trial's own steps are timed in blocks (each lasting `MIN_BLOCK_SECONDS`
or more, the device synchronised only at a block's edges), and only blocks of whole steps
(not the epoch's partial last one) that ran alone count:

- where the device is not crowded (on the CPU: the live trials' threads fit its cores,
  `trainables.device_gate.DeviceGate.crowded`), every block of every epoch, at no cost to
  anyone: the median over the whole trial evens out the machine's drift from one moment
  to the next;
- where it is (a card shared by trials, or more threads than cores), a window of
  `WINDOW_BLOCKS` blocks in each epoch inside the device's gate, its neighbours holding at
  their next step: windows spread over the trial's epochs, at most `max_seconds` of them
  per configuration, and none once the speed is known to `precision` over `MIN_WINDOWS`
  windows. A configuration timed in `MIN_BLOCKS` blocks or more of held windows takes its
  speed from those alone: a block timed free in the same trial (before a starting
  neighbour registered its threads, or after the crowd thinned) ran beside neighbours
  (docs/RESULTS.md, section 30).

On the CPU, with a scale (`TrainSettings.speed_scale`: the search times it as it starts),
a block of a fixed reference (`trainables.speed_reference`) is timed after each
`REFERENCE_SEGMENT_SECONDS` of blocks (a segment), after each block of a held window, and at
an epoch's end (an end shorter than half a segment is read over the epoch's last reference
block instead, `SHORT_TAIL_SHARE`): the host's speed moves between moments (1.4-1.9x
within two minutes on the 2-core machine), and the config's speed over the reference's,
timed together, moved 1.05-1.16x (docs/RESULTS.md, section 44). A configuration timed so
is read as the median of its segments' ratios (a segment's blocks' median over its
reference block) times the scale, with the median's interval (`estimate`'s, for fewer than
`MIN_BLOCKS` segments): every trial of a search on one scale, whatever moment it ran at.

Otherwise the speed is the median of those blocks' images per second, its interval the
distribution-free interval of a median (order statistics); a configuration timed in fewer
blocks than that needs (`MIN_BLOCKS`: a batch AdaBatch grew to two or three whole steps an
epoch) takes Student's t on the mean of its blocks' logarithms instead, wide but known. A
configuration is a physical
batch and accumulation (AdaBatch changes them); its blocks are kept over epochs, and in the
trial's saved state.

A speed effect (a config against another, `TrainSettings.speed_baseline`) is timed in
alternation instead: a block of each side's steps, then again in the other order (A B, B A,
...), each round giving one ratio of the two sides' seconds per image, so that the machine's
drift between moments falls on both sides of each ratio (`time_in_alternation`). A side
with several configurations (AdaBatch's batches) is timed configuration by configuration
next to the other side's, and a configuration both sides train alike once a round: each
drift is then a fraction of a round long. The ratio is the rounds' median, its interval the
distribution-free interval of a median (`paired_ratio`): a ratio, never below zero. Not their
mean: a machine whose speed jumps between levels (the host's other work) now and then
switches inside a round, and that round's ratio lies far out (the rounds' kurtosis reached
about 20 on this project's 2-core machine, docs/RESULTS.md section 44), which a mean and its
standard error take in whole; a round's order, reversed every other round, puts such a
jump on either side alike, so the rounds' middle is the ratio. Before the nine rounds whose
median's interval leaves out their lowest and highest (`MEDIAN_ROUNDS`), the interval is
Student's t on the rounds' logarithms, which such a round widens past any precision: an
alternation stops at `MIN_ROUNDS` only where its rounds agree.

The pure part (`estimate`, `ConfigSpeed`, `own_time`, `paired_ratio`) is tested alone;
`SpeedWindow` is what the training loop drives, step by step.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import statistics
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
from scipy import stats

CONFIDENCE = 0.95
MIN_BLOCKS = 6  # the fewest with a 95% interval of a median (2 x 0.5^6 < 0.05)
MIN_BLOCK_SECONDS = 0.02  # a block's steps take at least this: the clock and a sync are noise
# Inside a held window, before its first block, where the configuration is new to the
# process (its first epoch: allocations, the autotuner, compiled shapes); a configuration
# that trained in an earlier epoch is timed from its epoch's first step, with no warm-up, so
# that one of two or three whole steps an epoch (a large batch on a card) is timed at all.
WARMUP_STEPS = 2
WINDOW_BLOCKS = 6  # blocks of one held window (an epoch's share of a crowded device)
MIN_WINDOWS = 3  # held windows, in as many epochs, before a precise speed stops them
# a side's blocks in a round of an alternation, together. A round's two blocks differ by
# the machine's jumps between them whatever their length (from 5 ms to 0.4 s alike on the
# 2-core machine: docs/RESULTS.md section 44), so short blocks, many rounds: most of a step
# or one. A side of several configurations (AdaBatch's batches) gives each its share of it
# (`paired_block_steps`), so its round lasts about one block where its steps are short (a
# configuration whose one step is longer than its share takes that step)
PAIRED_BLOCK_SECONDS = 0.03
# seconds of a configuration's timed blocks between two blocks of the reference
# (`trainables.speed_reference`) where nobody crowds the device: a segment, read as one ratio.
# A held window times the reference after each block (its blocks are few, its neighbours
# wait), and every epoch's last segment ends with one (or, short, with the epoch's last:
# `SHORT_TAIL_SHARE`). The reference's block is one step of about 10 ms after an untimed
# one, on this project's 2-core machines (docs/RESULTS.md, sections 46, 55 and 57)
REFERENCE_SEGMENT_SECONDS = 0.25
# an epoch's last segment shorter than this share of a segment, in an epoch that timed the
# reference already, is read over that block, a fraction of a second old, not one of its own:
# a default-search epoch is about a segment and a half of blocks, and its end's block was
# half of the reference's calls, a tenth of a trial's training seconds with what it leaves
# in the caches (docs/RESULTS.md, section 57)
SHORT_TAIL_SHARE = 0.5
# rounds of an alternation before it may stop: the fewest whose interval (Student's t on
# the rounds' log ratios, `paired_ratio`) meets the default precision (+-5 points) where a
# round's ratio spreads by 3% or less (at a ratio near 1). A round of a side of AdaBatch's
# batches is a step of each, however long: at such a knee six rounds, a median's fewest,
# took its seven timed ablations 13.5-17.2 s, four 9.9-11.0 s, at about the same half
# widths (+-2.8 and +-3.1 points, the medians: docs/RESULTS.md, section 61)
MIN_ROUNDS = 4
# rounds from which an alternation's interval is its median's: the fewest whose 95%
# interval leaves out the lowest and the highest round (2 x P(Binomial(9, 1/2) <= 1) < 0.05).
# From six to eight rounds a median's interval is their whole range, which holds a round
# the machine jumped in whole, where Student's t takes it in shrunk by the rounds' number:
# in simulated alternations (3-5% spread, one block in ten 30% off or none) t until nine
# took as few rounds or fewer on average, 0.4-1.7 fewer where the spread was 4-5%, at the
# same coverage (`bench/alternation_rules.py`, docs/RESULTS.md section 62)
MEDIAN_ROUNDS = 9


@dataclass(frozen=True)
class SpeedEstimate:
    """Images per second, the `CONFIDENCE` interval, from `blocks` timed blocks."""

    images_per_s: float
    low: float
    high: float
    blocks: int

    @property
    def relative_half_width(self) -> float:
        if not self.images_per_s or math.isnan(self.low):
            return math.inf
        return (self.high - self.low) / (2 * self.images_per_s)


def median_interval(values: Sequence[float], confidence: float = CONFIDENCE) -> tuple[float, float]:
    """The distribution-free interval of the median of `values`: between the order
    statistics the binomial distribution puts the median between with `confidence`
    (NaN where there are too few values for it)."""
    ordered = sorted(values)
    count = len(ordered)
    # the largest k with P(Binomial(count, 1/2) < k) <= (1 - confidence) / 2
    k = int(stats.binom.ppf((1 - confidence) / 2, count, 0.5))
    while k > 0 and stats.binom.cdf(k - 1, count, 0.5) > (1 - confidence) / 2:
        k -= 1
    if k < 1:
        return math.nan, math.nan
    return ordered[k - 1], ordered[count - k]


def geometric_interval(
    values: Sequence[float], confidence: float = CONFIDENCE
) -> tuple[float, float, float]:
    """(geometric mean, low, high) of positive `values`: Student's t on the mean of their
    logarithms, so a rate's or a ratio's interval is never below zero; NaN bounds with fewer
    than two values, NaN throughout with none."""
    logs = np.log(np.asarray(values, dtype=float))
    count = len(logs)
    if not count:
        return math.nan, math.nan, math.nan
    mean = float(logs.mean())
    if count < 2:
        return math.exp(mean), math.nan, math.nan
    # by hand: scipy's t.interval is NaN for a spread of 0 (every value the same), which is
    # a value known exactly, not an unknown one
    half = float(stats.t.ppf(0.5 + confidence / 2, count - 1)) * float(logs.std(ddof=1))
    half /= math.sqrt(count)
    return math.exp(mean), math.exp(mean - half), math.exp(mean + half)


def estimate(rates: Sequence[float]) -> SpeedEstimate | None:
    """The speed of blocks that ran at `rates` images per second, with the median's
    interval, or with fewer than `MIN_BLOCKS` blocks the interval of their geometric mean
    (`geometric_interval`, widened to hold the median where it falls outside); None
    without any."""
    if not rates:
        return None
    median = statistics.median(rates)
    if len(rates) >= MIN_BLOCKS:
        low, high = median_interval(rates)
    else:
        _, low, high = geometric_interval(rates)
        if not math.isnan(low):
            low, high = min(low, median), max(high, median)
    return SpeedEstimate(median, low, high, len(rates))


@dataclass
class ConfigSpeed:
    """The timed blocks of each of a trial's configurations (a key per physical batch and
    accumulation), and the held windows spent on it, as plain numbers for the trial's
    saved state."""

    blocks: dict[str, list[float]] = field(default_factory=dict)  # key -> block images/s
    held_blocks: dict[str, list[float]] = field(default_factory=dict)  # those of held windows
    held_seconds: dict[str, float] = field(default_factory=dict)  # key -> in held windows
    windows: dict[str, int] = field(default_factory=dict)  # key -> held windows taken
    # key -> the most processes outside the search seen on the card as a window began:
    # programs the gate cannot hold, whose use of the card is in the timed blocks
    outsiders: dict[str, int] = field(default_factory=dict)
    # key -> its speed over the reference's (`trainables.speed_reference`), a value per
    # segment: the median of the segment's blocks over the reference block timed after them
    ratios: dict[str, list[float]] = field(default_factory=dict)
    held_ratios: dict[str, list[float]] = field(default_factory=dict)  # those of held windows
    # the reference's images per second the search measured (`TrainSettings.speed_scale`):
    # a configuration with `MIN_BLOCKS` ratios or more is read as its ratio times this.
    # Not saved: a resumed trial takes it from its settings again
    scale: float | None = None

    @staticmethod
    def key(batch_size: int, accumulation_steps: int) -> str:
        return f"{batch_size}x{accumulation_steps}"

    @staticmethod
    def parts(key: str) -> tuple[int, int]:
        """(physical batch, accumulation steps) of a `key`."""
        batch_size, _, accumulation_steps = key.partition("x")
        return int(batch_size), int(accumulation_steps)

    def of(self, key: str) -> SpeedEstimate | None:
        """The configuration's speed: on the search's scale where it has one and the
        configuration `MIN_BLOCKS` ratios to the reference or more (`over_reference`), else
        from its held windows' blocks where they are `MIN_BLOCKS` or more (the device was
        its own), else from all its blocks."""
        scaled = self.over_reference(key)
        if scaled is not None and self.scale:
            return SpeedEstimate(scaled.images_per_s * self.scale, scaled.low * self.scale,
                                 scaled.high * self.scale, scaled.blocks)  # fmt: skip
        return estimate(self.values(key))

    def values(self, key: str) -> list[float]:
        """What `of` reads the configuration's speed from: its segments' ratios to the
        reference where it is read on the search's scale, else its blocks' images per
        second (those of held windows where they are `MIN_BLOCKS` or more)."""
        ratios = self._segment_ratios(key)
        if ratios and self.scale:
            return ratios
        return held_or_all(self.held_blocks.get(key, []), self.blocks.get(key, []))

    def _segment_ratios(self, key: str) -> list[float]:
        """The configuration's segments' ratios to the reference: those of held windows
        where they are `MIN_BLOCKS` or more, else all."""
        return held_or_all(self.held_ratios.get(key, []), self.ratios.get(key, []))

    def over_reference(self, key: str) -> SpeedEstimate | None:
        """The configuration's speed over the reference's, in reference speeds: the
        median of its segments' ratios (those of held windows where they are `MIN_BLOCKS`
        or more) with the median's interval, or with fewer the interval of a few
        (`estimate`); None without any. A few segments, not the blocks' own images per
        second: a trial stopped early is on its search's scale too."""
        return estimate(self._segment_ratios(key))

    def wants_window(self, key: str, precision: float, max_seconds: float) -> bool:
        """Whether a crowded device should be held for this configuration once more: time
        is left, and its speed is not yet known to `precision` over `MIN_WINDOWS` windows
        and `MIN_BLOCKS` blocks (a few blocks' interval reports what is known, but does not
        end the timing)."""
        if precision <= 0 or self.held_seconds.get(key, 0.0) >= max_seconds:
            return False
        known = self.of(key)
        precise = (
            known is not None
            and known.blocks >= MIN_BLOCKS
            and known.relative_half_width <= precision
        )
        return not (precise and self.windows.get(key, 0) >= MIN_WINDOWS)

    def add(
        self,
        key: str,
        rates: Sequence[float],
        held_seconds: float = 0.0,
        ratios: Sequence[float] = (),
    ) -> None:
        """Blocks timed, and `ratios` to the reference; `held_seconds` > 0: in a held
        window of that length."""
        self.blocks[key] = [*self.blocks.get(key, []), *rates]
        self.ratios[key] = [*self.ratios.get(key, []), *ratios]
        if held_seconds:
            self.held_blocks[key] = [*self.held_blocks.get(key, []), *rates]
            self.held_ratios[key] = [*self.held_ratios.get(key, []), *ratios]
            self.held_seconds[key] = self.held_seconds.get(key, 0.0) + held_seconds
            self.windows[key] = self.windows.get(key, 0) + 1

    def saw_outsiders(self, key: str, count: int) -> None:
        self.outsiders[key] = max(count, self.outsiders.get(key, 0))

    @property
    def most_outsiders(self) -> float:
        """The most processes outside the search seen while timing; NaN where not known."""
        return float(max(self.outsiders.values())) if self.outsiders else math.nan

    def to_dict(self) -> dict[str, dict]:
        return {"blocks": dict(self.blocks), "held_blocks": dict(self.held_blocks),
                "held_seconds": dict(self.held_seconds), "windows": dict(self.windows),
                "outsiders": dict(self.outsiders), "ratios": dict(self.ratios),
                "held_ratios": dict(self.held_ratios)}  # fmt: skip

    @classmethod
    def from_dict(cls, values: dict[str, dict] | None, scale: float | None = None) -> ConfigSpeed:
        """A saved state's, on `scale` (`ConfigSpeed.scale`). One saved before held blocks
        were kept apart counts all the blocks of a configuration it held windows for as
        held: it goes on from the speed it had, all its blocks, not from the next window
        alone."""
        values = values or {}
        blocks = dict(values.get("blocks", {}))
        held = values.get("held_blocks")
        if held is None:
            held = {key: rates for key, rates in blocks.items()
                    if values.get("windows", {}).get(key)}  # fmt: skip
        return cls(blocks, dict(held),
                   dict(values.get("held_seconds", {})), dict(values.get("windows", {})),
                   dict(values.get("outsiders", {})), dict(values.get("ratios", {})),
                   dict(values.get("held_ratios", {})), scale)  # fmt: skip


def held_or_all(held: list[float], every: list[float]) -> list[float]:
    """A configuration's held windows' values where they are `MIN_BLOCKS` or more (timed
    with the device its own), else all of them."""
    return held if len(held) >= MIN_BLOCKS else every


def pooled_log_sd(groups: Sequence[Sequence[float]]) -> tuple[float, int]:
    """The standard deviation of positive values' logarithms about their own group's mean,
    pooled over the groups, and its degrees of freedom (the values less the groups); NaN
    and 0 where no group has two values. A trial's configurations (AdaBatch's batches)
    each have a few segments, whose spread is the machine's and the reference's, not the
    configuration's: pooled, their spread is known from all of them."""
    squares, freedom = 0.0, 0
    for group in groups:
        if len(group) >= 2:
            logs = np.log(np.asarray(group, dtype=float))
            squares += float(((logs - logs.mean()) ** 2).sum())
            freedom += len(group) - 1
    return (math.sqrt(squares / freedom), freedom) if freedom else (math.nan, 0)


def own_time(
    images_by_config: dict[str, int], seconds_by_config: dict[str, float], speeds: ConfigSpeed
) -> tuple[float, float, float]:
    """The seconds the images would take alone, by their configurations' timed speeds:
    (at the speed, at the interval's low end, at its high end). A configuration not timed
    counts at the wall time it took, and leaves the interval unknown (NaN).

    One configuration: its speed's interval. Several (AdaBatch's batches, two epochs and a
    few segments each): Student's t on the time's logarithm, whose variance is each
    configuration's share of the time squared times the pooled variance of a segment
    (`pooled_log_sd`) over its segments. Adding the ends of each configuration's own
    interval (until 2026-12-07) assumed every configuration at its worst at once, each
    from t on two or three segments: an AdaBatch knee's floor runs read [1273, 4804] and
    [921, 4012] images/s (docs/RESULTS.md, sections 61 and 62)."""
    seconds, untimed = 0.0, False
    timed: list[tuple[float, SpeedEstimate, str]] = []  # (seconds at its speed, speed, key)
    for config, images in images_by_config.items():
        speed = speeds.of(config)
        if speed is None or not speed.images_per_s > 0:
            seconds += seconds_by_config.get(config, math.nan)
            untimed = True
            continue
        seconds += images / speed.images_per_s
        timed.append((images / speed.images_per_s, speed, config))
    if untimed or not timed:
        return seconds, math.nan, math.nan
    if len(timed) == 1:
        speed = timed[0][1]
        slow = seconds * speed.images_per_s / speed.low if speed.low > 0 else math.nan
        fast = seconds * speed.images_per_s / speed.high if speed.high > 0 else math.nan
        return seconds, slow, fast
    sd, freedom = pooled_log_sd([speeds.values(key) for _, _, key in timed])
    if not freedom:
        return seconds, math.nan, math.nan
    variance = sum((part / seconds) ** 2 / speed.blocks for part, speed, _ in timed) * sd**2
    half = float(stats.t.ppf(0.5 + CONFIDENCE / 2, freedom)) * math.sqrt(variance)
    return seconds, seconds * math.exp(half), seconds * math.exp(-half)


def own_speed(
    images_by_config: dict[str, int], seconds_by_config: dict[str, float], speeds: ConfigSpeed
) -> tuple[float, float, float]:
    """(images per second, low, high) of the images so far at their configurations' timed
    speeds (`own_time`); NaN where nothing was trained, or an end is not known."""
    images = sum(images_by_config.values())
    seconds, slow, fast = own_time(images_by_config, seconds_by_config, speeds)
    rate, low, high = (images / t if t > 0 else math.nan for t in (seconds, slow, fast))
    return rate, low, high


@dataclass(frozen=True)
class SpeedRatio:
    """A config's speed over its baseline's, timed in alternation: the ratio, its
    `CONFIDENCE` interval (NaN with one round), from `rounds` rounds."""

    ratio: float
    low: float
    high: float
    rounds: int

    @property
    def half_width(self) -> float:
        """Half the interval, in the ratio's units (0.05: +-5 points of speed)."""
        return math.inf if math.isnan(self.low) else (self.high - self.low) / 2


def paired_ratio(
    base_seconds: Sequence[float],
    changed_seconds: Sequence[float],
    confidence: float = CONFIDENCE,
    median_from: int = MEDIAN_ROUNDS,
) -> SpeedRatio:
    """The changed side's speed over the base's from rounds of alternation: round i took
    `base_seconds[i]` and `changed_seconds[i]` per image. Each round's ratio is base over
    changed (a speed ratio); the estimate is their median (of an even count, the geometric
    mean of the middle two), its interval the distribution-free one of a median from
    `median_from` rounds, with fewer Student's t on the mean of their logarithms widened
    to hold the median (`geometric_interval`; NaN with one round). A round the machine
    jumped in lies far out and widens the t interval, so an alternation goes on until the
    median's holds it out."""
    ratios = np.asarray(base_seconds, dtype=float) / np.asarray(changed_seconds, dtype=float)
    middle = math.exp(float(np.median(np.log(ratios)))) if len(ratios) else math.nan
    if len(ratios) >= median_from:
        low, high = median_interval(ratios.tolist(), confidence)
    else:
        _, low, high = geometric_interval(ratios.tolist(), confidence)
        if not math.isnan(low):
            low, high = min(low, middle), max(high, middle)
    return SpeedRatio(middle, low, high, len(ratios))


# A side of an alternation: its configurations, each (share of its images, a block of its
# steps that returns the seconds it took per image).
Side = Sequence[tuple[float, Callable[[], float]]]


def paired_block_steps(seconds_per_step: float, share: float) -> int:
    """Steps of a configuration's block in an alternation: its `share` of its side's images
    of `PAIRED_BLOCK_SECONDS`, at least one step. Each configuration's block weighs in its
    side's seconds per image by its share, and a block's noise falls with the square root
    of its length: blocks in proportion to their shares give a round of several
    configurations the precision of one configuration's block as long as all of them."""
    return max(1, math.ceil(PAIRED_BLOCK_SECONDS * share / max(seconds_per_step, 1e-6)))


def seconds_per_image(side: Side, seconds: Mapping[int, float]) -> float:
    """`side`'s seconds per image from a round's `seconds` (by block, `id`): each
    configuration's block weighed by its share of the images."""
    total = sum(share for share, _ in side)
    return sum(share * seconds[id(block)] for share, block in side) / total


def round_order(base: Side, changed: Side) -> list[Callable[[], float]]:
    """The blocks of a round: each side's configurations in turn (the first of each, then
    the second of each, ...), so that a configuration is timed next to its counterpart and
    the drift between them is short; a block both sides hold (a configuration both train
    alike) once."""
    order: list[Callable[[], float]] = []
    for pair in itertools.zip_longest(base, changed):
        for entry in pair:
            if entry is not None and all(entry[1] is not block for block in order):
                order.append(entry[1])
    return order


def time_in_alternation(
    base: Side,
    changed: Side,
    *,
    precision: float,
    max_seconds: float,
    clock: Callable[[], float] = time.perf_counter,
    median_from: int = MEDIAN_ROUNDS,
) -> SpeedRatio:
    """Rounds of both sides' blocks (`round_order`), the order reversed every other round
    (so a drift within a round is no side's), until `MIN_ROUNDS` are done and the ratio is
    known to `precision` (its interval's half width: 0.05 is +-5 points of speed) or
    `max_seconds` have passed (`median_from`: `paired_ratio`'s)."""
    started = clock()
    base_seconds: list[float] = []
    changed_seconds: list[float] = []
    order = round_order(base, changed)
    while True:
        blocks = order if len(base_seconds) % 2 == 0 else order[::-1]
        seconds = {id(block): block() for block in blocks}
        base_seconds.append(seconds_per_image(base, seconds))
        changed_seconds.append(seconds_per_image(changed, seconds))
        ratio = paired_ratio(base_seconds, changed_seconds, median_from=median_from)
        if ratio.rounds >= MIN_ROUNDS and (
            ratio.half_width <= precision or clock() - started >= max_seconds
        ):
            return ratio


class Gate(Protocol):
    """What the window needs of a device's gate (`trainables.device_gate.DeviceGate`)."""

    def step(self) -> contextlib.AbstractContextManager[None]: ...

    def exclusive(self) -> contextlib.AbstractContextManager[None]: ...


class SpeedWindow:
    """One epoch's timing of its configuration, driven by the training loop: `step()`
    around each step, `after(images)` after it, `close()` at the epoch's end.

    From the epoch's second step (the first meters and allocates), or its first where the
    configuration is `warm` (it trained in an earlier epoch), it times blocks. Where
    `crowded()` says no, every block until the epoch's end; a block in which the device
    became crowded is dropped, and the rest of the epoch is held for, as below. Where it
    says yes and `ConfigSpeed.wants_window`, the device is held (`Gate.exclusive`),
    `WARMUP_STEPS` pass (none where warm), then `WINDOW_BLOCKS` blocks are timed and the
    device is let go;
    else nothing is timed. `synchronize` waits for the device's queued work: only at a
    block's edges. `outsiders` counts the processes on the device that do not pass its gate
    (other programs on the card), as each held window begins; None: not known."""

    def __init__(
        self,
        gate: Gate,
        synchronize: Callable[[], None],
        speeds: ConfigSpeed,
        key: str,
        *,
        precision: float,
        max_seconds: float,
        crowded: Callable[[], bool],
        clock: Callable[[], float] = time.perf_counter,
        outsiders: Callable[[], int | None] | None = None,
        warm: bool = False,
        reference: Callable[[], float] | None = None,
    ) -> None:
        self._gate, self._synchronize, self._clock = gate, synchronize, clock
        self._reference = reference
        self._segment: list[float] = []  # blocks since the last reference block, images/s
        self._segment_seconds = 0.0
        self._last_reference: float | None = None  # this epoch's last reference block's
        self._ratios: list[float] = []
        # warm: the configuration trained in an earlier epoch of this process; else its
        # epoch's first step (metering, allocations) and a held window's warm-up go untimed
        self._untimed_steps, self._warmup_steps = (0, 0) if warm else (1, WARMUP_STEPS)
        self._outsiders = outsiders
        self._speeds, self._key, self._crowded = speeds, key, crowded
        self._precision, self._max_seconds = precision, max_seconds
        self._stack = contextlib.ExitStack()
        self._mode = "waiting" if precision > 0 else "done"  # free, held, done
        self._steps_seen = 0
        self._warmup_left = 0
        self._block_steps = 1
        self._in_block = self._block_images = 0
        self._block_started = self._held_at = 0.0
        self._rates: list[float] = []
        batch_size, accumulation_steps = ConfigSpeed.parts(key)
        self._whole_step_images = batch_size * accumulation_steps

    @property
    def holding(self) -> bool:
        return self._mode == "held"

    @contextlib.contextmanager
    def step(self) -> Iterator[None]:
        """Around one step: inside a held window the device is this trial's; else the
        step passes the gate as every neighbour's does."""
        if self._mode == "waiting" and self._steps_seen >= self._untimed_steps:
            self._begin()
        with self._gate.step():
            yield

    def after(self, images: int, timed: bool = True) -> None:
        """After a step of `images` images. A step with fewer images than the
        configuration's whole step (the epoch's partial last one: smaller micro-batches,
        slower per image), or one not `timed` (the gradient noise scale measured on it: its
        meter's work is not the configuration's), is not the configuration's speed: the
        block it falls in is dropped. Without this, every block of an epoch nobody crowds
        counted the tail but a held window rarely reached it, and a configuration of two
        steps an epoch was timed on its tail alone; such a configuration is now untimed
        (its one whole step is the epoch's first, never timed) and counts at its wall time
        (`own_time`)."""
        self._steps_seen += 1
        if self._mode not in ("free", "held"):
            return
        if (images < self._whole_step_images or not timed) and not self._warmup_left:
            self._start_block(self._whole_step_images)
            return
        if self._warmup_left:
            self._warmup_left -= 1
            if not self._warmup_left:
                self._start_block(images)
            return
        self._in_block += 1
        self._block_images += images
        if self._in_block < self._block_steps:
            return
        self._synchronize()
        seconds = self._clock() - self._block_started
        if seconds < MIN_BLOCK_SECONDS:  # more steps a block, from the next one on
            wanted = self._block_steps * MIN_BLOCK_SECONDS / max(seconds, 1e-6)
            self._block_steps = max(self._block_steps + 1, math.ceil(wanted))
        if self._mode == "free" and self._crowded():
            self._free_to_held()  # this block shared the device with a newcomer: dropped
            return
        if seconds > 0:
            self._rates.append(self._block_images / seconds)
            self._segment.append(self._rates[-1])
            self._segment_seconds += seconds
            if self._mode == "held" or self._segment_seconds >= REFERENCE_SEGMENT_SECONDS:
                self._time_reference()
        if self._mode == "held" and self._window_full():
            self.close()
        else:
            self._start_block(images)

    def close(self) -> None:
        """At the window's or the epoch's end: the blocks go to the configuration's (a
        block cut short by the epoch's end is left out) with a last segment's reference
        block, and a held device is let go."""
        if self._mode in ("held", "free"):
            self._time_reference(at_end=True)
        if self._mode == "held":
            self._speeds.add(self._key, self._rates, self._clock() - self._held_at,
                             self._ratios)  # fmt: skip
        elif self._mode == "free":
            self._speeds.add(self._key, self._rates, ratios=self._ratios)
        self._stack.close()
        self._mode, self._rates, self._ratios = "done", [], []

    def _time_reference(self, at_end: bool = False) -> None:
        """A block of the reference after the segment's blocks: the segment's ratio (the
        median of its blocks over the reference's block). Off the blocks' clock: the next
        block starts after it. `at_end`, a segment shorter than `SHORT_TAIL_SHARE` of one
        is read over the epoch's last reference block, where it timed one."""
        if self._reference is None or not self._segment:
            return
        short = self._segment_seconds < SHORT_TAIL_SHARE * REFERENCE_SEGMENT_SECONDS
        if at_end and short and self._last_reference is not None:
            reference = self._last_reference
        else:
            self._synchronize()
            reference = self._last_reference = self._reference()
        if reference > 0:
            self._ratios.append(statistics.median(self._segment) / reference)
        self._segment, self._segment_seconds = [], 0.0

    def _begin(self) -> None:
        if not self._crowded():
            self._mode = "free"
            self._start_block(0)
        elif self._speeds.wants_window(self._key, self._precision, self._max_seconds):
            self._hold()
        else:
            self._mode = "done"

    def _free_to_held(self) -> None:
        self._speeds.add(self._key, self._rates, ratios=self._ratios)  # timed alone before
        self._rates, self._ratios = [], []
        self._segment, self._segment_seconds = [], 0.0  # its last block shared the device
        if self._speeds.wants_window(self._key, self._precision, self._max_seconds):
            self._hold()
        else:
            self._mode = "done"

    def _hold(self) -> None:
        self._stack.enter_context(self._gate.exclusive())
        seen = self._outsiders() if self._outsiders is not None else None
        if seen is not None:
            self._speeds.saw_outsiders(self._key, seen)
        self._mode = "held"
        self._held_at = self._clock()
        self._warmup_left = self._warmup_steps
        if not self._warmup_left:
            self._start_block(self._whole_step_images)

    def _start_block(self, images_per_step: int) -> None:
        known = self._speeds.of(self._key)  # an earlier epoch's blocks size this one's
        if known is not None and images_per_step and self._block_steps == 1:
            wanted = MIN_BLOCK_SECONDS * known.images_per_s / images_per_step
            self._block_steps = max(1, math.ceil(wanted))
        self._synchronize()
        self._in_block = self._block_images = 0
        self._block_started = self._clock()

    def _window_full(self) -> bool:
        spent = self._speeds.held_seconds.get(self._key, 0.0) + self._clock() - self._held_at
        return len(self._rates) >= WINDOW_BLOCKS or spent >= self._max_seconds
