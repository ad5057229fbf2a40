import pytest
import torch

from trainables.data import PreparedData
from trainables.eval_batch import EvalBatch
from trainables.models import build_model
from trainables.training import HostSplit, Normaliser, evaluate


class SlowAbove:
    """A scoring whose seconds per image the test sets by batch size, on a fake clock."""

    def __init__(self, seconds_per_image: dict[int, float]) -> None:
        self.seconds_per_image = seconds_per_image
        self.now = 0.0
        self.batches: list[int] = []

    def clock(self) -> float:
        return self.now

    def scoring(self, images: int):
        def run(batch_size: int) -> tuple[float, float]:
            self.batches.append(batch_size)
            self.now += self.seconds_per_image[batch_size] * images
            return 0.5, 0.7

        return run


def test_a_trial_tries_its_physical_batch_its_half_and_its_quarter_then_keeps_the_fastest():
    fake = SlowAbove({64: 3e-3, 32: 1e-3, 16: 2e-3})
    chooser = EvalBatch(clock=fake.clock)
    for _ in range(6):
        assert chooser.score(64, 400, fake.scoring(400)) == (0.5, 0.7)
    assert fake.batches == [64, 32, 16, 32, 32, 32]


def test_a_grown_physical_batch_times_only_its_candidates_not_timed_yet():
    fake = SlowAbove({64: 3e-3, 32: 1e-3, 16: 2e-3, 128: 1e-4})
    chooser = EvalBatch(clock=fake.clock)
    for physical in (64, 64, 64, 128, 128, 128):
        chooser.score(physical, 400, fake.scoring(400))
    assert fake.batches == [64, 32, 16, 128, 128, 128]


def test_the_choice_stays_among_the_candidates_of_the_physical_batch():
    fake = SlowAbove({64: 3e-3, 32: 1e-3, 16: 2e-3, 8: 1e-5})
    chooser = EvalBatch(clock=fake.clock)
    for physical in (32, 32, 32, 64, 64, 64):  # 8 is fastest but below 64's quarter
        chooser.score(physical, 400, fake.scoring(400))
    assert fake.batches == [32, 16, 8, 64, 32, 32]


def test_a_set_eval_batch_or_a_deterministic_trial_is_never_timed():
    fake = SlowAbove({64: 3e-3, 32: 1e-3, 48: 1.0})
    fixed, deterministic = EvalBatch(48, clock=fake.clock), EvalBatch(timed=False)
    for _ in range(3):
        fixed.score(64, 400, fake.scoring(400))
        deterministic.score(64, 400, fake.scoring(400))
    assert fake.batches == [48, 64] * 3
    assert fixed.seconds_per_image == deterministic.seconds_per_image == {}


@pytest.mark.parametrize(("physical", "candidates"), [(64, [64, 32, 16]), (16, [16, 8]), (4, [4])])
def test_no_candidate_is_larger_than_the_physical_batch_or_smaller_than_eight(physical, candidates):
    assert EvalBatch.candidates(physical) == candidates


def test_the_scores_do_not_depend_on_the_eval_batch(tiny_data: PreparedData):
    torch.manual_seed(3)
    model = build_model("small_cnn", tiny_data.num_classes, tiny_data.image_size)
    split = HostSplit(
        torch.from_numpy(tiny_data.val.images), torch.from_numpy(tiny_data.val.labels)
    )
    normalise = Normaliser.from_stats(tiny_data.mean, tiny_data.std, torch.device("cpu"))
    with torch.inference_mode():
        predicted = model.eval()(normalise(split.images)).argmax(dim=1)
    assert len(set(predicted.tolist())) > 1, "one class for every image: accuracy shows nothing"
    scores = [evaluate(model, split, normalise, batch_size=size) for size in (16, 8, 3)]
    accuracies, losses = zip(*scores, strict=True)
    assert len(set(accuracies)) == 1
    assert losses == pytest.approx([losses[0]] * 3, rel=1e-6)


def test_a_resumed_trial_scores_at_the_batch_its_timings_chose_without_timing_again():
    fake = SlowAbove({64: 3e-3, 32: 1e-3, 16: 2e-3})
    chooser = EvalBatch(seconds_per_image={64: 3e-3, 32: 1e-3, 16: 2e-3}, clock=fake.clock)
    chooser.score(64, 400, fake.scoring(400))
    assert fake.batches == [32]
