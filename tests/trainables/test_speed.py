"""The config's speed: blocks of its own steps, the median's distribution-free interval, a
window that stops at its precision, and configurations kept apart."""

import math

import numpy as np
import pytest
from scipy import stats

from trainables.speed import (
    MEDIAN_ROUNDS,
    MIN_BLOCKS,
    MIN_ROUNDS,
    MIN_WINDOWS,
    PAIRED_BLOCK_SECONDS,
    REFERENCE_SEGMENT_SECONDS,
    SHORT_TAIL_SHARE,
    WARMUP_STEPS,
    WINDOW_BLOCKS,
    ConfigSpeed,
    SpeedWindow,
    estimate,
    median_interval,
    paired_block_steps,
    paired_ratio,
    time_in_alternation,
)


def test_the_median_interval_is_between_order_statistics_and_needs_six_values():
    assert all(math.isnan(bound) for bound in median_interval([1.0, 2.0, 3.0, 4.0, 5.0]))
    assert median_interval([6.0, 1.0, 5.0, 2.0, 4.0, 3.0]) == (1.0, 6.0)  # min and max of six
    low, high = median_interval([float(v) for v in range(1, 101)])
    assert (low, high) == (40.0, 61.0)  # ranks 40 and 61 of 100 hold the median with 95%


def test_a_speed_timed_in_fewer_than_six_blocks_gets_a_t_interval_on_its_logarithms():
    from trainables.speed import geometric_interval

    rates = [3000.0, 3300.0, 3150.0, 2900.0]  # a grown batch: two whole steps, two epochs
    speed = estimate(rates)
    assert speed.blocks == 4 and speed.images_per_s == 3075.0
    assert 0 < speed.low < min(rates) and speed.high > max(rates)  # few blocks: wide
    assert (speed.low, speed.high) == pytest.approx(geometric_interval(rates)[1:])
    same = estimate([5000.0, 5000.0])
    assert same.low == pytest.approx(5000.0) and same.high == pytest.approx(5000.0)
    assert all(math.isnan(bound) for bound in geometric_interval([4000.0])[1:])
    skewed = estimate([100.0, 100.0, 100.0, 100.0, 2000.0])  # the median stays inside
    assert skewed.low <= skewed.images_per_s == 100.0 <= skewed.high


def test_the_t_interval_of_few_blocks_holds_the_true_speed_about_as_often_as_it_claims():
    import numpy as np

    from trainables.speed import geometric_interval

    rng = np.random.default_rng(1)
    samples = (np.exp(rng.normal(np.log(3000), 0.05, size=4)) for _ in range(1000))
    held = sum(low <= 3000 <= high for _, low, high in map(geometric_interval, samples))
    assert 0.93 <= held / 1000 <= 0.97


def test_the_interval_holds_the_true_median_about_as_often_as_it_claims():
    import numpy as np

    rng = np.random.default_rng(0)
    held = sum(
        low <= 1000 <= high
        for low, high in (median_interval(list(rng.normal(1000, 80, size=20))) for _ in range(800))
    )
    assert 0.94 <= held / 800 <= 0.995  # order statistics are conservative by construction


def test_an_estimate_is_the_median_rate_with_its_interval():
    rates = [100.0, 102.0, 98.0, 101.0, 99.0, 250.0, 100.5]  # one block a neighbour never touched
    speed = estimate(rates)
    assert speed.images_per_s == 100.5 and speed.blocks == 7
    assert speed.low <= 100.5 <= speed.high
    assert estimate([]) is None


def test_configurations_are_kept_apart_and_held_for_until_known_or_out_of_time():
    speeds = ConfigSpeed()
    key = ConfigSpeed.key(32, 2)
    assert key == "32x2" and speeds.wants_window(key, precision=0.05, max_seconds=1.0)
    for _ in range(MIN_WINDOWS):
        speeds.add(key, [100.0] * MIN_BLOCKS, held_seconds=0.1)
    assert not speeds.wants_window(key, precision=0.05, max_seconds=1.0)  # known, 3 windows
    spread = ConfigSpeed()
    spread.add(key, [50.0, 150.0] * MIN_BLOCKS, held_seconds=0.5)
    assert spread.wants_window(key, precision=0.05, max_seconds=1.0)  # wide: more windows
    assert not spread.wants_window(key, precision=0.05, max_seconds=0.5)  # no time left
    assert not speeds.wants_window(ConfigSpeed.key(64, 1), precision=0, max_seconds=1.0)
    few = ConfigSpeed()  # a few identical blocks: an exact interval, yet too few to stop on
    for _ in range(MIN_WINDOWS):
        few.add(key, [100.0], held_seconds=0.1)
    assert few.of(key).relative_half_width == pytest.approx(0.0, abs=1e-12)
    assert few.wants_window(key, precision=0.05, max_seconds=1.0)
    assert ConfigSpeed.from_dict(speeds.to_dict()) == speeds  # saved with the trial's state
    assert ConfigSpeed.from_dict({"blocks": {"8x1": [1.0]}}).windows == {}  # older states


class Gate:
    """Records what the window asked of the device's gate."""

    def __init__(self, events):
        self.events = events

    def step(self):
        import contextlib

        return contextlib.nullcontext()

    def exclusive(self):
        import contextlib

        @contextlib.contextmanager
        def held():
            self.events.append("exclusive")
            yield
            self.events.append("released")

        return held()


class Clock:
    """Steps take `step_seconds` each; reading the clock takes no time."""

    def __init__(self, step_seconds: float):
        self.now, self.step_seconds = 0.0, step_seconds

    def __call__(self) -> float:
        return self.now


def run_steps(window: SpeedWindow, clock: Clock, steps: int, images: int = 32) -> None:
    for _ in range(steps):
        with window.step():
            clock.now += clock.step_seconds
        window.after(images)
    window.close()


def window(
    events, clock, speeds, crowded, precision=0.05, max_seconds=10.0, warm=False
) -> SpeedWindow:
    return SpeedWindow(Gate(events), lambda: None, speeds, "32x1", precision=precision,
                       max_seconds=max_seconds, crowded=crowded, clock=clock,
                       warm=warm)  # fmt: skip


def test_on_a_device_nobody_crowds_every_block_of_the_epoch_is_timed_and_nobody_held():
    events, clock, speeds = [], Clock(0.01), ConfigSpeed()
    run_steps(window(events, clock, speeds, crowded=lambda: False), clock, steps=101)
    assert events == []
    rates = speeds.blocks["32x1"]
    # from the second step to the last: a block of 1 step, then blocks of 20 ms or more
    assert 30 <= len(rates) <= 50 and all(rate == pytest.approx(3200.0) for rate in rates)
    assert speeds.windows == {}


def epoch_with_a_tail(window: SpeedWindow, clock: Clock, whole_steps: int) -> None:
    """`whole_steps` steps of 32 images at 25 ms (a block each), then the epoch's partial
    last step: 8 images in 12.5 ms (a smaller batch, slower per image)."""
    for images, seconds in [(32, 0.025)] * whole_steps + [(8, 0.0125)]:
        with window.step():
            clock.now += seconds
        window.after(images)
    window.close()


def test_the_epochs_partial_last_step_is_not_the_configurations_speed():
    clock, speeds = Clock(0.025), ConfigSpeed()
    epoch_with_a_tail(window([], clock, speeds, crowded=lambda: False), clock, 9)
    epoch_with_a_tail(window([], clock, speeds, crowded=lambda: True), clock, 7)  # held to its end
    rates = speeds.blocks["32x1"]
    assert len(rates) == 8 + 4 and rates == pytest.approx([1280.0] * len(rates))
    two_steps = ConfigSpeed()  # a large batch: one whole step after the first, and the tail
    for _ in range(3):
        epoch_with_a_tail(window([], clock, two_steps, crowded=lambda: False), clock, 2)
    assert two_steps.blocks["32x1"] == pytest.approx([1280.0] * 3)
    one_step = ConfigSpeed()  # larger still: the first step is its only whole one
    for _ in range(3):
        epoch_with_a_tail(window([], clock, one_step, crowded=lambda: False), clock, 1)
    assert one_step.of("32x1") is None  # untimed: it counts at its wall time (own_time)


def test_a_step_the_noise_scale_was_measured_on_is_left_out_of_the_configurations_speed():
    """Its meter's hooks are the project's work, not the config's: every fifth step here
    took twice as long, and no block that held one counts."""
    clock, speeds = Clock(0.025), ConfigSpeed()
    timing = window([], clock, speeds, crowded=lambda: False)
    for step in range(21):
        measured = step % 5 == 3
        with timing.step():
            clock.now += 0.05 if measured else 0.025
        timing.after(32, timed=not measured)
    timing.close()
    rates = speeds.blocks["32x1"]
    assert len(rates) == 16 and rates == pytest.approx([1280.0] * 16)  # 20 timed steps less 4


def test_a_configuration_warm_from_an_earlier_epoch_is_timed_from_its_epochs_first_step():
    """A large batch on a card: one or three whole steps an epoch. Its first epoch warms it
    (untimed); each later one times its whole steps, with no warm-up in a held window."""
    clock = Clock(0.025)
    one_step = ConfigSpeed()
    epoch_with_a_tail(window([], clock, one_step, crowded=lambda: True), clock, 1)
    assert one_step.of("32x1") is None
    for _ in range(6):
        epoch_with_a_tail(window([], clock, one_step, crowded=lambda: True, warm=True), clock, 1)
    assert one_step.blocks["32x1"] == pytest.approx([1280.0] * 6)
    assert one_step.of("32x1") is not None  # six blocks: a speed with its interval
    events, three_steps = [], ConfigSpeed()
    epoch_with_a_tail(window(events, clock, three_steps, crowded=lambda: True, warm=True),
                      clock, 3)  # fmt: skip
    assert events == ["exclusive", "released"]
    assert three_steps.blocks["32x1"] == pytest.approx([1280.0] * 3)


def test_on_a_crowded_device_a_short_window_is_held_after_warm_up():
    events, clock, speeds = [], Clock(0.01), ConfigSpeed()
    run_steps(window(events, clock, speeds, crowded=lambda: True), clock, steps=200)
    assert events == ["exclusive", "released"]  # held once this epoch, let go
    assert len(speeds.blocks["32x1"]) == WINDOW_BLOCKS and speeds.windows == {"32x1": 1}
    # the warm-up, a block of one step, five of 20 ms or a step more
    held = speeds.held_seconds["32x1"]
    assert (WARMUP_STEPS + 11) * 0.01 <= held + 1e-9 <= (WARMUP_STEPS + 16) * 0.01


def test_a_neighbour_arriving_drops_the_block_it_shared_and_the_rest_is_held_for():
    events, clock, speeds = [], Clock(0.01), ConfigSpeed()
    arrivals = iter([False] * 10 + [True] * 1000)  # crowded from the tenth block's end
    run_steps(window(events, clock, speeds, crowded=lambda: next(arrivals)), clock, steps=200)
    assert events == ["exclusive", "released"]
    assert len(speeds.blocks["32x1"]) == 9 + WINDOW_BLOCKS  # the shared block left out


def test_a_configuration_timed_in_held_windows_takes_its_speed_from_them_alone():
    """The crowded CPU's case: a trial's first blocks ran free while a starting neighbour
    had not registered its threads yet (its start-up in them: half the speed), then the
    device was crowded and held for it."""
    speeds = ConfigSpeed()
    speeds.add("32x1", [3000.0, 3300.0, 6300.0])  # free, beside a neighbour starting up
    assert speeds.of("32x1").images_per_s == 3300.0  # nothing held yet: all the blocks
    speeds.add("32x1", [6400.0, 6500.0, 6450.0] * 2, held_seconds=0.3)
    assert speeds.of("32x1").images_per_s == 6450.0 and speeds.of("32x1").blocks == 6
    assert len(speeds.blocks["32x1"]) == 9  # every block is kept, for the record
    assert ConfigSpeed.from_dict(speeds.to_dict()) == speeds
    older = ConfigSpeed.from_dict(
        {
            "blocks": {"32x1": [3000.0, 6400.0, 6500.0]},
            "held_seconds": {"32x1": 0.3},
            "windows": {"32x1": 1},
        }
    )
    assert older.of("32x1").images_per_s == 6400.0  # saved before: all its blocks, as then
    older.add("32x1", [6600.0] * MIN_BLOCKS, held_seconds=0.2)  # resumed: one window more
    assert older.of("32x1").blocks == 3 + MIN_BLOCKS  # on from its speed, not that window's
    few_held = ConfigSpeed()
    few_held.add("32x1", [3000.0] * 20)
    few_held.add("32x1", [6000.0, 6100.0], held_seconds=0.05)  # too few for a median's interval
    assert few_held.of("32x1").blocks == 22


def test_windows_stop_once_the_speed_is_known_over_enough_of_them_or_time_runs_out():
    clock, speeds = Clock(0.01), ConfigSpeed()
    for _ in range(6):
        run_steps(window([], clock, speeds, crowded=lambda: True), clock, steps=50)
    assert speeds.windows["32x1"] == MIN_WINDOWS  # steady: precise after three windows
    short = ConfigSpeed()
    for _ in range(10):
        run_steps(window([], clock, short, crowded=lambda: True, precision=1e-6,
                         max_seconds=0.3), clock, steps=50)  # fmt: skip
    assert short.held_seconds["32x1"] <= 0.3 + 0.05  # a block over at most


def test_untimed_nothing_is_held_or_timed():
    events, clock, speeds = [], Clock(0.01), ConfigSpeed()
    run_steps(window(events, clock, speeds, crowded=lambda: True, precision=0), clock, 50)
    assert events == [] and speeds.blocks == {}


def test_the_configs_own_time_adds_each_configurations_images_at_its_own_speed():
    """AdaBatch: 640 images at batch 32 (timed at 3200/s), then 640 at batch 64 (6400/s)."""
    from trainables.speed import own_speed, own_time

    speeds = ConfigSpeed()
    speeds.add("32x1", [3000.0, 3200.0, 3400.0] * 2 + [3200.0], 0.5)
    speeds.add("64x1", [6400.0] * MIN_BLOCKS, 0.5)
    images = {"32x1": 640, "64x1": 640}
    walls = {"32x1": 1.0, "64x1": 1.0}  # shared with neighbours: slower than alone
    seconds, slow, fast = own_time(images, walls, speeds)
    assert seconds == pytest.approx(0.2 + 0.1)
    # its interval: t on the time's logarithm, the configurations' shares of the time (2/3
    # and 1/3) over their blocks (7 and 6) times the blocks' spread pooled (11 freedoms)
    logs = np.log([3000.0, 3200.0, 3400.0] * 2 + [3200.0])
    pooled = ((logs - logs.mean()) ** 2).sum() / (6 + 5)
    half = stats.t.ppf(0.975, 11) * math.sqrt(pooled * ((2 / 3) ** 2 / 7 + (1 / 3) ** 2 / 6))
    assert slow == pytest.approx(0.3 * math.exp(half))
    assert fast == pytest.approx(0.3 * math.exp(-half))
    rate, low, high = own_speed(images, walls, speeds)
    assert rate == pytest.approx(1280 / 0.3) and low < rate < high


def test_one_configurations_time_keeps_its_own_speeds_interval():
    from trainables.speed import own_time

    speeds = ConfigSpeed()
    speeds.add("32x1", [3000.0, 3200.0, 3400.0] * 2 + [3200.0], 0.5)
    timed = speeds.of("32x1")
    _, slow, fast = own_time({"32x1": 640}, {}, speeds)
    assert (slow, fast) == pytest.approx((640 / timed.low, 640 / timed.high))


def adabatch_trial(
    generator: np.random.Generator, spread: float, jumps: float = 0.0
) -> tuple[ConfigSpeed, dict[str, int], float]:
    """AdaBatch's four batches, two epochs of 1200 images each, each timed in two or three
    segments (over the reference, on a scale of 1) whose logarithms spread by `spread`
    about its true speed, a share `jumps` of them 30% off besides (the machine jumped); and
    the true speed of the whole."""
    speeds, images, seconds = ConfigSpeed(scale=1.0), {}, 0.0
    for batch, true in ((32, 2.6), (64, 2.9), (128, 3.1), (256, 3.3)):
        key, count = ConfigSpeed.key(batch, 1), int(generator.integers(2, 4))
        noise = generator.normal(0, spread, count)
        jumped = np.where(generator.random(count) < jumps, math.log(1.3), 0.0)
        signs = np.where(generator.random(count) < 0.5, 1.0, -1.0)
        speeds.add(key, [], ratios=list(true * np.exp(noise + signs * jumped)))
        images[key] = 2400
        seconds += 2400 / true
    return speeds, images, 9600 / seconds


@pytest.mark.parametrize("jumps", [0.0, 0.1])
def test_several_configurations_interval_holds_the_true_speed_at_its_confidence(jumps):
    """Simulated AdaBatch trials of two or three segments a batch: their t intervals
    pooled over the batches hold the true speed about 95% of the time (93% and 96% here:
    a median's point with t's interval), a sixth to a quarter as wide as the ends of each
    batch's own interval added (an AdaBatch knee's floors read [1273, 4804] and [921,
    4012] images/s that way: docs/RESULTS.md, section 61)."""
    from trainables.speed import own_speed

    generator = np.random.default_rng(3)
    held, widths, added = 0, [], []
    for _ in range(2000):
        speeds, images, true = adabatch_trial(generator, spread=0.04, jumps=jumps)
        _, low, high = own_speed(images, {}, speeds)
        held += low <= true <= high
        widths.append(math.log(high / low))
        ends = [speeds.of(key) for key in images]
        added.append(math.log(sum(2400 / e.low for e in ends) / sum(2400 / e.high for e in ends)))
    assert 0.92 <= held / 2000 <= 0.97
    assert np.median(widths) < 0.3 * np.median(added)


def test_a_configuration_never_timed_counts_at_its_wall_time_and_leaves_no_interval():
    from trainables.speed import own_speed

    rate, low, high = own_speed({"32x1": 640}, {"32x1": 0.5}, ConfigSpeed())
    assert rate == pytest.approx(1280.0) and math.isnan(low) and math.isnan(high)
    assert all(math.isnan(value) for value in own_speed({}, {}, ConfigSpeed()))


def test_a_paired_ratio_is_the_rounds_median_with_a_medians_interval():
    base = [0.010, 0.012, 0.009, 0.011, 0.010, 0.013, 0.012, 0.010, 0.009]  # drifting
    changed = [2 * seconds for seconds in base]  # twice as slow in every round
    ratio = paired_ratio(base, changed)
    assert ratio.ratio == pytest.approx(0.5) and ratio.rounds == MEDIAN_ROUNDS
    assert ratio.low == pytest.approx(0.5) and ratio.high == pytest.approx(0.5)  # drift: gone
    one = paired_ratio(base[:1], changed[:1])  # one round: no interval
    assert one.ratio == pytest.approx(0.5) and math.isnan(one.low) and one.half_width == math.inf


def test_fewer_rounds_than_a_median_needs_take_students_t_holding_the_median():
    from trainables.speed import geometric_interval

    ratios = [0.50, 0.52, 0.49, 0.55]
    ratio = paired_ratio([r * 0.02 for r in ratios], [0.02] * 4)
    _, low, high = geometric_interval(ratios)
    assert ratio.rounds == MIN_ROUNDS == 4 and ratio.ratio == pytest.approx(math.sqrt(0.50 * 0.52))
    assert (ratio.low, ratio.high) == (pytest.approx(low), pytest.approx(high))
    assert ratio.half_width < 0.05
    # a round the machine jumped in: its interval is wide, and the alternation goes on
    jumped = paired_ratio([0.01] * 4, [0.02, 0.02, 0.02, 0.06])
    assert jumped.half_width > 0.05 and jumped.low <= jumped.ratio <= jumped.high
    # where the t interval leaves out the median (a low confidence), it is widened to it
    skewed = paired_ratio([1.0, 1.0, 1.0, 1.3], [1.0] * 4, confidence=0.5)
    assert skewed.ratio == pytest.approx(1.0) and skewed.low == pytest.approx(1.0)
    assert skewed.high == pytest.approx(geometric_interval([1.0, 1.0, 1.0, 1.3], 0.5)[2])


def test_until_nine_rounds_a_jumped_round_widens_t_less_than_a_medians_range():
    """Six to eight rounds: a median's interval is their whole range, and holds a jump
    whole; t takes it in shrunk. From nine, the median's leaves it out."""
    from trainables.speed import geometric_interval, median_interval

    ratios = [1.0, 1.01, 0.99, 1.02, 0.98, 1.0, 1.3]  # the last round jumped
    ratio = paired_ratio([r * 0.01 for r in ratios], [0.01] * 7)
    assert (ratio.low, ratio.high) == pytest.approx(geometric_interval(ratios)[1:])
    assert median_interval(ratios) == (0.98, 1.3)  # a median's: the whole range
    assert ratio.half_width < (1.3 - 0.98) / 2
    nine = [*ratios, 1.01, 0.99]
    at_nine = paired_ratio([r * 0.01 for r in nine], [0.01] * 9)
    assert at_nine.high < 1.3
    assert (at_nine.low, at_nine.high) == pytest.approx(median_interval(nine))


def test_a_round_the_machine_jumped_in_moves_a_paired_ratio_little_where_a_mean_moves_far():
    from trainables.speed import geometric_interval

    base = [0.010] * 20
    changed = [0.020 * (1 + 0.01 * (i % 3 - 1)) for i in range(20)]  # half the speed, +-1%
    changed[7] = 0.2  # the machine slowed down in the changed side's block of round 8
    ratio = paired_ratio(base, changed)
    assert ratio.ratio == pytest.approx(0.5, rel=0.01) and ratio.half_width < 0.02
    mean, low, high = geometric_interval([b / c for b, c in zip(base, changed, strict=True)])
    assert mean < 0.45 and (high - low) / 2 > 0.05  # a mean's interval takes that round in


def test_a_paired_interval_never_claims_a_speed_below_nothing():
    ratio = paired_ratio([0.01] * 6, [0.005, 0.09, 0.01, 0.3, 0.02, 0.5])
    assert 0 < ratio.low < ratio.ratio < ratio.high


def test_an_alternation_that_stops_once_precise_holds_the_true_ratio_about_as_often_as_it_claims():
    """Stopping at the first round whose interval is precise enough (from `MIN_ROUNDS`)
    picks the alternations whose first rounds happened to agree: their intervals still hold
    the true ratio 19 times in 20 or so, with rounds whose ratios spread 3% (at a ratio of
    1, where +-5 points is 5%) and with rounds the machine now and then jumped in (one
    block in ten, 30% slower)."""
    import numpy as np

    rng = np.random.default_rng(2)

    def side(jumps: bool):
        def block() -> float:
            jumped = jumps and rng.random() < 0.1
            return 0.01 * math.exp(rng.normal(0, 0.03 / math.sqrt(2))) * (1.3 if jumped else 1)

        return [(1.0, block)]

    for jumps in (False, True):
        ratios = [time_in_alternation(side(jumps), side(jumps), precision=0.05,
                                      max_seconds=math.inf) for _ in range(400)]  # fmt: skip
        early = [ratio for ratio in ratios if ratio.rounds < MEDIAN_ROUNDS]
        assert sum(r.low <= 1.0 <= r.high for r in ratios) / len(ratios) >= 0.93
        assert sum(r.low <= 1.0 <= r.high for r in early) / len(early) >= 0.92
        # rounds that agree stop before a median's nine; a jump makes the alternation go on
        assert len(early) / len(ratios) >= (0.25 if jumps else 0.6)


class Rounds:
    """Blocks on a fake clock: each records its side and adds its seconds to the clock."""

    def __init__(self) -> None:
        self.now, self.order = 0.0, []

    def block(self, name: str, seconds_per_image: list[float]):
        values = iter(seconds_per_image)

        def run() -> float:
            self.order.append(name)
            self.now += 0.1
            return next(values)

        return run

    def clock(self) -> float:
        return self.now


def test_an_alternation_reverses_its_order_every_other_round_and_stops_once_precise():
    rounds = Rounds()
    base = [(1.0, rounds.block("a", [0.01] * 20))]
    changed = [(1.0, rounds.block("b", [0.02] * 20))]
    ratio = time_in_alternation(base, changed, precision=0.05, max_seconds=60, clock=rounds.clock)
    assert rounds.order == ["a", "b", "b", "a"] * (MIN_ROUNDS // 2)
    assert ratio.rounds == MIN_ROUNDS and ratio.ratio == pytest.approx(0.5)


def test_a_side_of_several_configurations_is_timed_next_to_the_others_configuration_by_one():
    rounds = Rounds()
    base = [(1.0, rounds.block("a1", [0.01] * 20)), (1.0, rounds.block("a2", [0.02] * 20))]
    changed = [(2.0, rounds.block("b1", [0.03] * 20))]
    ratio = time_in_alternation(base, changed, precision=0.05, max_seconds=60, clock=rounds.clock)
    assert rounds.order[:6] == ["a1", "b1", "a2", "a2", "b1", "a1"]
    assert ratio.ratio == pytest.approx(0.015 / 0.03)


def test_a_configuration_both_sides_train_alike_is_timed_once_a_round_and_counts_on_both():
    rounds = Rounds()
    both = rounds.block("both", [0.02] * 20)
    base = [(1.0, both), (1.0, rounds.block("a", [0.01] * 20))]
    changed = [(1.0, both), (1.0, rounds.block("b", [0.03] * 20))]
    ratio = time_in_alternation(base, changed, precision=0.05, max_seconds=60, clock=rounds.clock)
    assert rounds.order == ["both", "a", "b", "b", "a", "both"] * (MIN_ROUNDS // 2)
    assert ratio.ratio == pytest.approx((0.02 + 0.01) / (0.02 + 0.03))


def test_an_alternation_weighs_a_sides_configurations_by_their_images_and_stops_in_time():
    rounds = Rounds()
    noisy = [0.01 + 0.002 * (i * 7 % 11) for i in range(100)]  # 0.01-0.03, in no order
    base = [(1.0, rounds.block("a", [0.01] * 100))]
    # three quarters of the images at 0.01 s, a quarter at noisy 0.01-0.03 s per image
    changed = [(3.0, rounds.block("b1", [0.01] * 100)), (1.0, rounds.block("b2", noisy))]
    ratio = time_in_alternation(base, changed, precision=0.001, max_seconds=2, clock=rounds.clock)
    assert 2 <= rounds.now < 2 + 0.3 * 2 and ratio.rounds >= MIN_ROUNDS  # stopped at 2 s
    assert ratio.low < ratio.ratio < ratio.high
    assert 0.01 / (0.75 * 0.01 + 0.25 * 0.03) <= ratio.ratio <= 1.0


def test_a_sides_blocks_share_one_blocks_seconds_by_their_images_each_at_least_a_step():
    step = PAIRED_BLOCK_SECONDS / 40
    assert paired_block_steps(step, share=1.0) == 40  # one configuration: the whole block
    # AdaBatch's four batches, a quarter of the images each, steps twice as long each time
    steps = [paired_block_steps(step * 2**grown, share=0.25) for grown in range(4)]
    assert steps == [10, 5, 3, 2]
    assert sum(n * step * 2**grown for grown, n in enumerate(steps)) < 1.3 * PAIRED_BLOCK_SECONDS
    assert paired_block_steps(2 * PAIRED_BLOCK_SECONDS, share=0.25) == 1  # a step too long


def test_a_held_window_notes_the_programs_outside_the_search_it_began_beside():
    speeds, seen, clock = ConfigSpeed(), iter([2, 0, None]), Clock(0.01)
    for _ in range(3):
        timing = SpeedWindow(Gate([]), lambda: None, speeds, "32x1", precision=0.05,
                             max_seconds=60, crowded=lambda: True, clock=clock,
                             outsiders=lambda: next(seen))  # fmt: skip
        run_steps(timing, clock, 4)
    assert speeds.windows == {"32x1": 3}
    assert speeds.outsiders == {"32x1": 2} and speeds.most_outsiders == 2.0
    assert ConfigSpeed.from_dict(speeds.to_dict()).outsiders == {"32x1": 2}
    assert math.isnan(ConfigSpeed().most_outsiders)


class Reference:
    """The speed reference on the fake clock: a block of 10 ms at 1600 images/s on a
    machine at full speed, each call recorded; `slowdown` slows it as it slows the steps."""

    def __init__(self, clock: Clock):
        self.clock, self.calls, self.slowdown = clock, 0, 1.0

    def __call__(self) -> float:
        self.calls += 1
        self.clock.now += 0.01 * self.slowdown
        return 1600.0 / self.slowdown


def referenced_window(clock, speeds, reference, crowded=lambda: False) -> SpeedWindow:
    return SpeedWindow(Gate([]), lambda: None, speeds, "32x1", precision=0.05,
                       max_seconds=10.0, crowded=crowded, clock=clock,
                       reference=reference)  # fmt: skip


def test_a_configuration_on_a_scale_is_its_ratios_median_to_the_reference_times_the_scale():
    speeds = ConfigSpeed(scale=1000.0)
    speeds.add("32x1", [3000.0] * 20, ratios=[1.9, 2.0, 2.1, 2.0, 1.8, 2.2])
    timed = speeds.of("32x1")
    assert timed.images_per_s == pytest.approx(2000.0) and timed.blocks == MIN_BLOCKS
    assert timed.low == pytest.approx(1800.0) and timed.high == pytest.approx(2200.0)
    assert speeds.over_reference("32x1").images_per_s == pytest.approx(2.0)
    few = ConfigSpeed(scale=1000.0)  # a trial stopped early: on the scale, a wider interval
    few.add("32x1", [3000.0] * 20, ratios=[1.9, 2.1])
    assert few.of("32x1").images_per_s == pytest.approx(2000.0) and few.of("32x1").blocks == 2
    assert few.of("32x1").low < 1900.0 and few.of("32x1").high > 2100.0
    unscaled = ConfigSpeed()  # no scale: its blocks' own images per second
    unscaled.add("32x1", [3000.0] * 20, ratios=[2.0] * 10)
    assert unscaled.of("32x1").images_per_s == 3000.0
    saved = ConfigSpeed.from_dict(speeds.to_dict(), scale=500.0)
    assert saved.ratios == speeds.ratios and saved.of("32x1").images_per_s == pytest.approx(1000)


def test_a_machine_that_slows_the_steps_and_the_reference_alike_leaves_the_scaled_speed_as_it_was():
    clock, speeds = Clock(0.01), ConfigSpeed(scale=1600.0)
    reference = Reference(clock)
    run_steps(referenced_window(clock, speeds, reference), clock, steps=101)
    clock.step_seconds, reference.slowdown = 0.02, 2.0  # a slower moment of the host
    run_steps(referenced_window(clock, speeds, reference), clock, steps=101)
    own = sorted(speeds.blocks["32x1"])
    assert own[0] == pytest.approx(1600.0) and own[-1] == pytest.approx(3200.0)  # two levels
    assert speeds.over_reference("32x1").images_per_s == pytest.approx(2.0)
    timed = speeds.of("32x1")
    assert timed.images_per_s == pytest.approx(3200.0)  # 2x the reference's 1600: as alone
    assert timed.low == pytest.approx(3200.0) and timed.high == pytest.approx(3200.0)


def test_an_uncrowded_epoch_times_the_reference_after_each_segment_and_at_its_end():
    clock, speeds = Clock(0.01), ConfigSpeed(scale=1600.0)
    reference = Reference(clock)
    run_steps(referenced_window(clock, speeds, reference), clock, steps=101)
    # a second of blocks from the epoch's second step: a reference per segment and one at
    # the end for the rest; its time is no block's (every block stays at 3200 images/s)
    segments = math.floor(1.0 / REFERENCE_SEGMENT_SECONDS)
    assert segments <= reference.calls <= segments + 1
    assert len(speeds.ratios["32x1"]) == reference.calls
    assert all(rate == pytest.approx(3200.0) for rate in speeds.blocks["32x1"])


def test_an_epochs_short_end_is_read_over_its_last_reference_block_and_a_longer_one_times_its_own():
    """An epoch of a segment and a bit: its end's blocks take the segment's reference block
    (a fraction of a second old) and still give a ratio; an end of half a segment or more,
    or an epoch too short to have timed one, times a block of its own."""
    step = 0.01
    whole = round(REFERENCE_SEGMENT_SECONDS / step)  # steps of a segment's blocks
    for tail_share, calls in ((SHORT_TAIL_SHARE / 2, 1), (SHORT_TAIL_SHARE * 1.6, 2)):
        clock, speeds = Clock(step), ConfigSpeed(scale=1600.0)
        reference = Reference(clock)
        # the epoch's first step is untimed; then a segment, then the end's steps
        steps = 1 + whole + round(tail_share * whole)
        run_steps(referenced_window(clock, speeds, reference), clock, steps=steps)
        assert reference.calls == calls
        assert speeds.ratios["32x1"] == pytest.approx([2.0, 2.0])  # two ratios either way
    clock, speeds = Clock(step), ConfigSpeed(scale=1600.0)
    reference = Reference(clock)
    run_steps(referenced_window(clock, speeds, reference), clock, steps=1 + whole // 5)
    assert reference.calls == 1 and speeds.ratios["32x1"] == pytest.approx([2.0])


def test_a_held_window_times_the_reference_after_each_of_its_blocks():
    clock, speeds = Clock(0.01), ConfigSpeed(scale=1600.0)
    reference = Reference(clock)
    run_steps(referenced_window(clock, speeds, reference, crowded=lambda: True), clock, 200)
    assert reference.calls == WINDOW_BLOCKS
    assert len(speeds.held_ratios["32x1"]) == WINDOW_BLOCKS
    assert speeds.held_ratios["32x1"] == pytest.approx([2.0] * WINDOW_BLOCKS)
