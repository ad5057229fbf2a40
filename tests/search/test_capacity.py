import csv
import math
import re

import pytest
import torch

from search.capacity import (
    CapacityRow,
    Prober,
    largest_fitting,
    largest_near,
    main,
    measure_row,
    render,
)
from tests.conftest import CONFIGS
from tests.fake_cuda import MIB, CardLoad
from tests.trainables.stages import insert_stage
from trainables.memory import step_peak_bytes
from trainables.settings import TrainSettings


@pytest.mark.parametrize("threshold", [1, 2, 3, 7, 64, 100, 1000, 4095])
def test_doubling_then_bisection_finds_the_largest_fitting_batch_in_few_probes(threshold):
    probes = []

    def fits(batch: int) -> bool:
        probes.append(batch)
        return batch <= threshold

    assert largest_fitting(fits) == threshold
    assert len(probes) <= 2 * threshold.bit_length() + 2


def test_nothing_fits_gives_zero_and_everything_fits_stops_at_the_limit():
    assert largest_fitting(lambda b: False) == 0
    assert largest_fitting(lambda b: True, limit=300) == 300


@pytest.mark.parametrize("threshold", [1, 5, 64, 100, 240, 1000, 4095])
@pytest.mark.parametrize("off_by", [1.0, 0.9, 1.1, 0.5, 2.0])
def test_from_a_guess_the_search_finds_the_exact_largest_batch(threshold, off_by):
    probes = []

    def fits(batch: int) -> bool:
        probes.append(batch)
        return batch <= threshold

    assert largest_near(fits, round(threshold * off_by)) == threshold
    if off_by == 1.0:  # a right guess: one probe either side of it, then a short bisection
        assert len(probes) <= 2 + (threshold // 32).bit_length()


def test_from_a_guess_nothing_fitting_gives_zero_and_everything_stops_at_the_limit():
    assert largest_near(lambda b: False, 100) == 0
    assert largest_near(lambda b: True, 100, limit=300) == 300


def with_card_load(monkeypatch, card, per_image: int, fixed: int) -> None:
    """Every model built for a trial takes `fixed + per_image x batch` on the fake card."""
    insert_stage(monkeypatch, CardLoad(card, per_image=per_image, fixed=fixed), at=0)


def test_on_the_fake_card_two_probes_predict_the_largest_batch_and_a_few_more_verify_it(
    monkeypatch, fake_cuda
):
    from trainables.cuda import TorchCudaCard

    card = fake_cuda.cards[0]
    with_card_load(monkeypatch, card, per_image=10 * MIB, fixed=100 * MIB)
    lines = []
    row = measure_row("baseline", TrainSettings(device="cpu"), image_size=16, budget_mb=3000,
                      steps=1, host_limit_mb=1024, card=TorchCudaCard(torch.device("cuda")),
                      say=lines.append)  # fmt: skip
    # 3000 MiB less the 500 MiB context and 32 for its growth: 100 + 10 x 236 <= 2468 MiB
    assert row.max_batch_size == 236 and row.predicted_batch_size == 236
    assert row.probes <= 6  # two to predict, then the verification
    assert len(lines) == row.probes  # a line per probe, as it goes
    assert [line.split(":")[0].strip() for line in lines[:2]] == ["batch 16", "batch 64"]
    assert any("does not fit" in line for line in lines)
    assert fake_cuda.calls.count("load_kernels") == 1


class RepeatedStepsTakeMore(CardLoad):
    """A step right after one of the same batch takes 3% more per image: what a real card
    did under an 11 GB share (activation checkpointing, batch 296 fit as a probe, and its
    timed steps after ran out of memory: the cache the probes had cut up)."""

    previous = 0
    more = 1.03

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.training and torch.is_grad_enabled():
            repeated = len(x) == self.previous
            self.previous = len(x)
            per_image = round(self.per_image * self.more) if repeated else self.per_image
            self.card.hold(self.fixed + per_image * len(x))
            return x
        return super().forward(x)


def test_a_batch_whose_timed_steps_run_out_steps_down_to_one_that_trains(monkeypatch, fake_cuda):
    from trainables.cuda import TorchCudaCard

    card = fake_cuda.cards[0]
    insert_stage(monkeypatch, RepeatedStepsTakeMore(card, per_image=10 * MIB, fixed=100 * MIB),
                 at=0)  # fmt: skip
    lines = []
    row = measure_row("baseline", TrainSettings(device="cpu"), image_size=16, budget_mb=3000,
                      steps=2, host_limit_mb=1024, card=TorchCudaCard(torch.device("cuda")),
                      say=lines.append)  # fmt: skip
    # One probe holds 236 (100 + 10 x 236 <= 2468 MiB); repeated steps hold 229 at most.
    assert any("batch 236: its timed steps ran out of memory" in line for line in lines)
    assert 220 <= row.max_batch_size <= 229 and row.timed_batch_size == row.max_batch_size
    assert row.step_time_s > 0 and row.peak_mem_mb > 0


def test_steps_down_double_each_time_so_a_probe_far_above_what_trains_is_found(
    monkeypatch, fake_cuda
):
    """On an H200 (2026-11-27) activation checkpointing's probe held 291 images under an
    11 GB share and no batch down to 263, 2% at a time, trained three steps."""
    from trainables.cuda import TorchCudaCard

    card = fake_cuda.cards[0]
    repeated_take_more = RepeatedStepsTakeMore(card, per_image=10 * MIB, fixed=100 * MIB)
    repeated_take_more.more = 1.15  # repeated steps hold (2468 - 100) / 11.5: 205 at most
    insert_stage(monkeypatch, repeated_take_more, at=0)
    lines = []
    row = measure_row("baseline", TrainSettings(device="cpu"), image_size=16, budget_mb=3000,
                      steps=2, host_limit_mb=1024, card=TorchCudaCard(torch.device("cuda")),
                      say=lines.append)  # fmt: skip
    down = [line for line in lines if "its timed steps ran out of memory" in line]
    assert [line.split()[-2] for line in down] == ["231", "222", "204"]
    # what the allocator held, to tell a cut-up cache from a batch too large for the share
    assert re.search(r"\(tensors peaked at \d+ MiB, \d+ of \d+ MiB reserved\)", down[0])
    assert row.max_batch_size == 204 and row.step_time_s > 0


def test_a_row_where_no_batch_trains_says_so_and_the_table_goes_on(monkeypatch, fake_cuda):
    from trainables.cuda import TorchCudaCard

    card = fake_cuda.cards[0]
    repeated_take_more = RepeatedStepsTakeMore(card, per_image=10 * MIB, fixed=100 * MIB)
    repeated_take_more.more = 100.0  # no repeated step of 2 images or more fits
    insert_stage(monkeypatch, repeated_take_more, at=0)
    lines = []
    row = measure_row("baseline", TrainSettings(device="cpu"), image_size=16, budget_mb=3000,
                      steps=2, host_limit_mb=1024, card=TorchCudaCard(torch.device("cuda")),
                      say=lines.append)  # fmt: skip
    assert row.max_batch_size == 0 and math.isnan(row.step_time_s)
    assert "the row has none" in lines[-1]


def test_on_a_cpu_only_the_first_probe_says_how_long_it_stepped():
    lines = []
    prober = Prober(TrainSettings(device="cpu"), image_size=16, budget_mb=100, say=lines.append)
    prober.peak(16), prober.peak(64)
    assert lines[0].endswith(" s)") and lines[1].endswith("(from the meter's two steps)")


def test_the_cpu_probe_solves_the_meter_exactly_because_it_is_affine_in_the_batch():
    settings = TrainSettings(
        model="resnet18", optimizer="adam", amp=True, activation_checkpointing=True, device="cpu"
    )  # cpu: on a machine with a card, "auto" would pick the card
    prober = Prober(settings, image_size=32, budget_mb=100)
    trial = prober.trial
    assert not prober.on_card
    measured = step_peak_bytes(trial.model, trial.optimizer, *prober.batch(13), trial.precision)
    assert prober.peak_bytes(13) == pytest.approx(measured, rel=1e-6)


@pytest.mark.skipif(torch.cuda.is_available(), reason="measures with the CPU meter")
def test_the_capacity_table_ranks_the_techniques_like_the_seed_article(tmp_path, capsys):
    out = tmp_path / "capacity.csv"
    code = main(
        ["--config", str(CONFIGS / "memory_budget.yaml"), "--out", str(out), "--steps", "1"]
    )
    assert code == 0
    rows = {row["technique"]: row for row in csv.DictReader(out.open())}
    batch = {name: int(row["max_batch_size"]) for name, row in rows.items()}
    assert batch["AMP"] > batch["baseline"]
    together = "AMP + activation checkpointing + channels-last"
    assert batch[together] >= batch["AMP"]
    accumulated = rows[f"{together} + accumulation x2"]
    assert int(accumulated["effective_batch_size"]) == 2 * batch[together]
    # derived from the row above, not probed: no zeros that read as measured
    assert accumulated["probes"] == accumulated["seconds"] == ""
    assert int(rows[together]["probes"]) > 0
    for row in rows.values():
        assert 0 < float(row["peak_mem_mb"]) <= 40.0  # the config's budget
    printed = capsys.readouterr().out
    assert "largest batch" in printed
    (derived,) = [line for line in printed.splitlines() if "accumulation x2 " in line]
    assert derived.split()[-1] == "-"  # its probes
    # on a CPU the autotuner's row trains as the baseline does: its time is no cost
    assert (
        "cuDNN autotuner off: it does nothing on the CPUs these trials ran on; its row trains "
        "as the baseline does, and their step times differ by the timing's noise"
    ) in printed


@pytest.mark.skipif(torch.cuda.is_available(), reason="measures with the CPU meter")
def test_the_capacity_table_measures_a_torchvision_model_and_its_checkpointed_blocks(tmp_path):
    out = tmp_path / "capacity.csv"
    config = str(CONFIGS / "shufflenet.yaml")
    budget = "resources.memory_budget_mb=60"
    assert main(["--config", config, "--out", str(out), "--steps", "1", budget]) == 0
    batch = {row["technique"]: int(row["max_batch_size"]) for row in csv.DictReader(out.open())}
    assert batch["activation checkpointing"] > 1.3 * batch["baseline"]  # 16 InvertedResidual blocks
    together = "AMP + activation checkpointing + channels-last"
    assert batch[together] > batch["activation checkpointing"]


@pytest.mark.skipif(torch.cuda.is_available(), reason="measures with the CPU meter")
@pytest.mark.parametrize(
    ("amp_speed", "probe_off"), [(0.12, False), (0.12, True), (1.2, False)],
    ids=["emulated", "emulated-probe-off", "fast-bf16"],
)  # fmt: skip
def test_on_a_cpu_that_emulates_bf16_the_amp_rows_keep_their_batches_but_go_untimed(
    tmp_path, capsys, monkeypatch, amp_speed, probe_off
):
    import trainables.amp_probe

    probed = []
    monkeypatch.setattr(
        trainables.amp_probe, "cpu_amp_speed", lambda *a, **k: probed.append(a) or amp_speed
    )
    out = tmp_path / "capacity.csv"
    args = ["--config", str(CONFIGS / "memory_budget.yaml"), "--out", str(out), "--steps", "1"]
    assert main([*args, *(["search.amp_probe=false"] if probe_off else [])]) == 0
    rows = list(csv.DictReader(out.open()))
    printed = capsys.readouterr().out
    untimed = {row["technique"] for row in rows if math.isnan(float(row["step_time_s"]))}
    if probe_off or amp_speed > 1:  # timed anyway, or timed where bf16 is fast
        assert not untimed and "untimed" not in printed
        assert len(probed) == (0 if probe_off else 1)
        return
    amp_rows = {row["technique"] for row in rows if "AMP" in row["technique"]}
    assert untimed == amp_rows and len(amp_rows) >= 2  # the last row is AMP's, accumulated
    assert all(int(row["max_batch_size"]) > 0 for row in rows)
    assert "untimed" in printed and "search.amp_probe=false times them anyway" in printed


def test_without_a_budget_on_a_cpu_machine_the_command_says_which_key_to_set(tmp_path, capsys):
    if torch.cuda.is_available():
        pytest.skip("a GPU supplies the budget")
    code = main(["--config", str(CONFIGS / "smoke.yaml"), "--out", str(tmp_path / "x.csv")])
    assert code == 2
    assert "resources.memory_budget_mb" in capsys.readouterr().err


class AutotunerSpy(CardLoad):
    """Records, for each training step, whether the cuDNN autotuner was on."""

    autotuned: list[bool]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.training and torch.is_grad_enabled():
            self.autotuned = [*getattr(self, "autotuned", []), torch.backends.cudnn.benchmark]
        return super().forward(x)


def test_the_autotuners_row_searches_without_it_and_verifies_with_it_in_two_probes(
    monkeypatch, fake_cuda
):
    """It tunes every new batch shape again (7 s a probe for ResNet-50 on an H100)."""
    from trainables.cuda import TorchCudaCard

    spy = AutotunerSpy(fake_cuda.cards[0], per_image=10 * MIB, fixed=100 * MIB)
    insert_stage(monkeypatch, spy, at=0)
    settings = TrainSettings(device="cpu", cudnn_benchmark=True)
    row = measure_row("baseline", settings, image_size=16, budget_mb=3000, steps=1,
                      host_limit_mb=1024, card=TorchCudaCard(torch.device("cuda")))  # fmt: skip
    assert row.max_batch_size == 236  # as without the autotuner (the fake's memory is the same)
    steps = list(zip(spy.batches, spy.autotuned, strict=True))[1:]  # the optimizer's first
    # The search without it; two probes with it (236 fits, 237 does not), then the timed steps.
    assert [step for step in steps if step[1]] == [(236, True), (237, True), (236, True),
                                                   (236, True)]  # fmt: skip
    assert torch.backends.cudnn.benchmark  # as the row's settings left it


@pytest.mark.parametrize(
    ("arguments", "said"),
    [
        (
            ["--accumulation-steps", "-3"],
            "argument --accumulation-steps: -3 is not a whole number of 1 or more",
        ),
        (["--steps", "0"], "argument --steps: 0 is not a whole number of 1 or more"),
        (["--host-limit-mb", "-5"], "argument --host-limit-mb: -5 is not a number above 0"),
        (["--out", "{tmp}/afile/x.csv"], "afile is a file, not a folder"),
        (["--out", "{tmp}"], "is a folder; give the CSV file's path"),
    ],
)
def test_a_mistaken_option_is_one_message_before_anything_is_measured(
    arguments, said, tmp_path, capsys, monkeypatch
):
    (tmp_path / "afile").write_text("mine")
    measured = []
    monkeypatch.setattr("search.capacity.capacity_table", lambda *a, **k: measured.append(a))
    args = [argument.format(tmp=tmp_path) for argument in arguments]
    try:
        code = main(["--config", str(CONFIGS / "smoke.yaml"), *args,
                     "resources.memory_budget_mb=500"])  # fmt: skip
    except SystemExit as exit_:  # argparse's own refusal
        code = exit_.code
    assert code == 2 and said in capsys.readouterr().err and not measured


def test_a_step_time_scaled_from_a_smaller_batch_is_marked_and_the_mark_said_under_the_table():
    scaled = CapacityRow("baseline", 130, 1, 130, 45.6, 10920.3, timed_batch_size=9)
    whole = CapacityRow("AMP", 252, 1, 252, 1.2, 10975.0, timed_batch_size=252)
    table = render([scaled, whole]).splitlines()
    assert "~45.600" in table[2] and "~" not in table[3]
    assert table[-1] == "~: timed at a smaller batch that fits --host-limit-mb, scaled to the batch"
    assert "~:" not in render([whole])
