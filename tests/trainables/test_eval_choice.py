import pytest
import torch

from trainables.data import PreparedData
from trainables.eval_choice import EvalChoice
from trainables.models import build_model
from trainables.training import HostSplit, Normaliser, evaluate

C, N = "contiguous", "channels_last"


class SlowIn:
    """A scoring whose seconds per image the test sets by (batch, layout), on a fake clock;
    a batch alone is its time in either layout."""

    def __init__(self, seconds_per_image: dict) -> None:
        self.seconds_per_image = seconds_per_image
        self.now = 0.0
        self.ways: list[tuple[int, str]] = []

    def clock(self) -> float:
        return self.now

    def scoring(self, images: int):
        def run(batch_size: int, layout: str) -> tuple[float, float]:
            self.ways.append((batch_size, layout))
            seconds = self.seconds_per_image.get((batch_size, layout))
            if seconds is None:
                seconds = self.seconds_per_image[batch_size]
            self.now += seconds * images
            return 0.5, 0.7

        return run


def test_a_trial_tries_both_layouts_at_its_physical_batch_then_halves_it_in_the_faster():
    fake = SlowIn({(64, C): 3e-3, (64, N): 1e-3, (32, N): 2e-3, (16, N): 5e-4})
    chooser = EvalChoice(clock=fake.clock)
    for _ in range(6):
        assert chooser.score(64, 400, fake.scoring(400)) == (0.5, 0.7)
    assert fake.ways == [(64, C), (64, N), (32, N), (16, N), (16, N), (16, N)]


def test_a_trial_that_trains_channels_last_tries_its_own_layout_first():
    fake = SlowIn({(64, N): 3e-3, (64, C): 4e-3, (32, N): 1e-3, (16, N): 2e-3})
    chooser = EvalChoice(own_layout=N, clock=fake.clock)
    for _ in range(5):
        chooser.score(64, 400, fake.scoring(400))
    assert fake.ways == [(64, N), (64, C), (32, N), (16, N), (32, N)]


def test_a_grown_physical_batch_times_only_its_ways_not_timed_yet():
    fake = SlowIn({64: 3e-3, 32: 1e-3, 16: 2e-3, 128: 1e-4})
    chooser = EvalChoice(clock=fake.clock)
    for physical in (64, 64, 64, 64, 128, 128, 128, 128):
        chooser.score(physical, 400, fake.scoring(400))
    # equal in both layouts: the trial's own is kept (min takes the first)
    assert fake.ways == [(64, C), (64, N), (32, C), (16, C), (128, C), (128, N), (128, C),
                         (128, C)]  # fmt: skip


def test_the_choice_stays_among_the_candidates_of_the_physical_batch():
    fake = SlowIn({64: 3e-3, 32: 1e-3, 16: 2e-3, 8: 1e-5})
    chooser = EvalChoice(clock=fake.clock)
    for physical in (32, 32, 32, 32, 64, 64, 64, 64):  # 8 is fastest but below 64's quarter
        chooser.score(physical, 400, fake.scoring(400))
    assert [batch for batch, _ in fake.ways] == [32, 32, 16, 8, 64, 64, 32, 32]


def test_a_set_eval_batch_or_a_deterministic_trial_is_never_timed():
    fake = SlowIn({64: 3e-3, 32: 1e-3, 48: 1.0})
    fixed, deterministic = EvalChoice(48, clock=fake.clock), EvalChoice(timed=False, own_layout=N)
    for _ in range(3):
        fixed.score(64, 400, fake.scoring(400))
        deterministic.score(64, 400, fake.scoring(400))
    assert fake.ways == [(48, C), (64, N)] * 3
    assert fixed.seconds_per_image == deterministic.seconds_per_image == {}


@pytest.mark.parametrize(
    ("physical", "candidates"),
    [(64, [(64, C), (64, N), (32, C), (16, C)]), (16, [(16, C), (16, N), (8, C)]),
     (4, [(4, C), (4, N)])],
)  # fmt: skip
def test_no_candidate_is_larger_than_the_physical_batch_or_smaller_than_eight(physical, candidates):
    assert EvalChoice().candidates(physical) == candidates


def test_a_layout_that_is_not_one_of_the_two_is_refused():
    with pytest.raises(ValueError, match="own_layout must be one of"):
        EvalChoice(own_layout="channels_first")


@pytest.fixture
def scored(tiny_data: PreparedData):
    torch.manual_seed(3)
    model = build_model("small_cnn", tiny_data.num_classes, tiny_data.image_size)
    split = HostSplit(
        torch.from_numpy(tiny_data.val.images), torch.from_numpy(tiny_data.val.labels)
    )
    normalise = Normaliser.from_stats(tiny_data.mean, tiny_data.std, torch.device("cpu"))
    with torch.inference_mode():
        predicted = model.eval()(normalise(split.images)).argmax(dim=1)
    assert len(set(predicted.tolist())) > 1, "one class for every image: accuracy shows nothing"
    return model, split, normalise


def test_the_scores_do_not_depend_on_the_eval_batch(scored):
    model, split, normalise = scored
    scores = [evaluate(model, split, normalise, batch_size=size) for size in (16, 8, 3)]
    accuracies, losses = zip(*scores, strict=True)
    assert len(set(accuracies)) == 1
    assert losses == pytest.approx([losses[0]] * 3, rel=1e-6)


def test_the_scores_do_not_depend_on_the_layout_the_batches_come_in(scored):
    model, split, normalise = scored
    channels_last = normalise.laid_out(torch.channels_last)
    assert channels_last(split.images[:4]).is_contiguous(memory_format=torch.channels_last)
    assert not normalise(split.images[:4]).is_contiguous(memory_format=torch.channels_last)
    contiguous_scores = evaluate(model, split, normalise, batch_size=8)
    channels_last_scores = evaluate(model, split, channels_last, batch_size=8)
    assert channels_last_scores[0] == contiguous_scores[0]
    assert channels_last_scores[1] == pytest.approx(contiguous_scores[1], rel=1e-5)
    assert normalise.laid_out(torch.contiguous_format) is normalise


def test_a_resumed_trial_scores_in_the_way_its_timings_chose_without_timing_again():
    fake = SlowIn({64: 3e-3, 32: 1e-3, 16: 2e-3})
    timed = {(64, C): 3e-3, (64, N): 2e-3, (32, N): 1e-3, (16, N): 2e-3}
    chooser = EvalChoice(seconds_per_image=timed, clock=fake.clock)
    chooser.score(64, 400, fake.scoring(400))
    assert fake.ways == [(32, N)]


def test_a_trial_saved_before_layouts_were_timed_keeps_its_batches_as_its_own_layouts():
    fake = SlowIn({64: 3e-3, 32: 1e-3, 16: 2e-3})
    chooser = EvalChoice(seconds_per_image={64: 3e-3, 32: 1e-3, 16: 2e-3}, clock=fake.clock)
    assert chooser.seconds_per_image == {(64, C): 3e-3, (32, C): 1e-3, (16, C): 2e-3}
    for _ in range(3):
        chooser.score(64, 400, fake.scoring(400))
    assert fake.ways == [(64, N), (32, C), (32, C)]  # the other layout, then the fastest
