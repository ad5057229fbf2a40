import torch

from trainables.classifier import build_optimizer
from trainables.memory import MIB
from trainables.models import build_model
from trainables.settings import TrainSettings
from trainables.training import DeviceSplit, Normaliser, batch_slices, evaluate, train_epoch


def split_of(images: int = 64, size: int = 16) -> DeviceSplit:
    generator = torch.Generator().manual_seed(0)
    labels = torch.randint(0, 2, (images,), generator=generator)
    # Brightness tells the classes apart, so a few steps must learn it.
    noise = torch.randint(0, 100, (images, 3, size, size), generator=generator)
    pixels = noise + 120 * labels.view(-1, 1, 1, 1)
    return DeviceSplit(pixels.to(torch.uint8), labels)


NORMALISE = Normaliser.from_stats((0.5, 0.5, 0.5), (0.25, 0.25, 0.25), torch.device("cpu"))


def test_batches_cover_every_item_once_and_keep_a_partial_last_batch():
    slices = batch_slices(10, 4)
    assert [(s.start, s.stop) for s in slices] == [(0, 4), (4, 8), (8, 10)]


def test_a_last_batch_of_one_image_is_left_out_because_batchnorm_cannot_train_on_it():
    assert [(s.start, s.stop) for s in batch_slices(9, 4)] == [(0, 4), (4, 8)]
    assert [(s.start, s.stop) for s in batch_slices(1, 4)] == [(0, 1)]


def test_normalising_maps_uint8_to_zero_mean_unit_std_by_the_given_stats():
    pixels = torch.tensor([0, 127.5, 255]).view(1, 3, 1, 1).round().to(torch.uint8)
    normalised = NORMALISE(pixels).flatten()
    assert torch.allclose(normalised, torch.tensor([-2.0, 0.0, 2.0]), atol=0.01)


def test_an_epoch_of_training_learns_an_easy_task_and_reports_what_it_saw():
    torch.manual_seed(0)
    split = split_of()
    model = build_model("small_cnn", num_classes=2, image_size=16)
    optimizer = build_optimizer(TrainSettings(optimizer="adam", lr=1e-3), model.parameters())
    _, loss_before = evaluate(model, split, NORMALISE, batch_size=32)
    for epoch in range(3):
        result = train_epoch(
            model, optimizer, split, NORMALISE, batch_size=16,
            generator=torch.Generator().manual_seed(epoch),
        )  # fmt: skip
    after, loss = evaluate(model, split, NORMALISE, batch_size=32)
    assert result.images == 64 and result.seconds > 0
    assert after >= 0.9
    assert loss < loss_before / 2


def test_the_cpu_meter_grows_with_batch_size_and_counts_parameters_and_optimizer_state():
    split = split_of(images=256)
    peaks = {}
    for batch_size in (8, 128):
        torch.manual_seed(0)
        model = build_model("small_cnn", num_classes=2, image_size=16)
        optimizer = build_optimizer(TrainSettings(optimizer="adam"), model.parameters())
        result = train_epoch(
            model, optimizer, split, NORMALISE, batch_size=batch_size,
            generator=torch.Generator().manual_seed(0),
        )  # fmt: skip
        peaks[batch_size] = result.peak_mem_bytes
        params = sum(p.numel() * 4 for p in model.parameters())
        # parameters + gradients + Adam's two moments, before any activation
        assert result.peak_mem_bytes > 4 * params
    assert peaks[128] > peaks[8]
    assert peaks[128] - peaks[8] > 0.5 * MIB  # activations of 120 more 16 px images
