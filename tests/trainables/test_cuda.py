"""The CUDA path: devices carry their index, every torch.cuda call goes through one module
that lists it, and the suite's fake card checks each of them."""

from pathlib import Path

import pytest
import torch

import trainables.cuda as project_cuda
from tests.conftest import REPO
from tests.fake_cuda import FakeCard, FakeCuda
from tests.source_scan import attribute_calls, imports_of
from trainables.cuda import CUDA_CALLS, NVML_CALLS, TorchCudaCard, describe_device, resolve_device
from trainables.settings import TrainSettings

PROJECT_CODE = [REPO / part for part in ("trainables", "search", "analysis", "bench")]


def project_files() -> list[Path]:
    return [path for folder in PROJECT_CODE for path in sorted(folder.rglob("*.py"))]


def test_no_module_but_trainables_cuda_calls_torch_cuda_or_nvml():
    home = REPO / "trainables" / "cuda.py"
    offenders = {
        str(path.relative_to(REPO)): sorted(
            attribute_calls(path, ("torch", "cuda")) | attribute_calls(path, ("pynvml",))
        )
        for path in project_files()
        if path != home
    }
    assert {path: names for path, names in offenders.items() if names} == {}
    importing = [
        str(path.relative_to(REPO))
        for path in project_files()
        if path != home and imports_of(path) & {"torch.cuda", "torch.cuda.memory", "pynvml"}
    ]
    assert importing == []


def test_every_torch_cuda_function_the_project_calls_is_listed_and_faked():
    home = REPO / "trainables" / "cuda.py"
    assert attribute_calls(home, ("torch", "cuda")) <= set(CUDA_CALLS)
    assert attribute_calls(home, ("pynvml",)) <= set(NVML_CALLS)
    fake = FakeCuda([FakeCard()])
    assert all(callable(getattr(fake, name, None)) for name in CUDA_CALLS)
    assert set(fake.nvml()) == set(NVML_CALLS)


def test_the_fake_replaces_exactly_the_listed_calls(monkeypatch):
    real = {name: getattr(torch.cuda, name) for name in dir(torch.cuda)}
    fake = FakeCuda([FakeCard()]).install(monkeypatch)
    replaced = {name for name in real if getattr(torch.cuda, name) is not real[name]}
    assert replaced == set(CUDA_CALLS)
    assert project_cuda.load_kernels == fake.load_kernels


def test_a_cuda_device_always_comes_back_with_its_index(fake_cuda):
    assert resolve_device("auto") == torch.device("cuda", 0)
    assert resolve_device("cuda") == torch.device("cuda", 0)
    assert resolve_device("cuda:0") == torch.device("cuda", 0)
    assert resolve_device("cpu") == torch.device("cpu")
    assert TorchCudaCard(torch.device("cuda")).device == torch.device("cuda", 0)


def test_the_current_device_is_the_one_cuda_means(monkeypatch):
    fake = FakeCuda([FakeCard(), FakeCard(name="second")]).install(monkeypatch)
    fake.current = 1  # as `torch.cuda.set_device(1)` would make it
    assert resolve_device("cuda") == torch.device("cuda", 1)
    assert TorchCudaCard(torch.device("cuda")).describe()["device_name"].startswith("second")
    # a trial's device is made current: what `empty_cache` and the bf16 check act on
    assert resolve_device("cuda:0") == torch.device("cuda", 0) and fake.current == 0


def test_a_device_index_torch_does_not_see_is_refused_with_what_it_sees(fake_cuda):
    with pytest.raises(RuntimeError, match=r"'cuda:1' .* torch sees 1 CUDA device\(s\)"):
        resolve_device("cuda:1")


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
def test_cuda_on_a_machine_without_one_is_refused_clearly():
    with pytest.raises(RuntimeError, match="torch sees no CUDA device"):
        resolve_device("cuda")
    assert resolve_device("auto") == torch.device("cpu")


@pytest.mark.parametrize("device", ["auto", "cpu", "cuda", "cuda:0", "cuda:3"])
def test_the_settings_accept_a_device_by_name_or_index(device):
    assert TrainSettings(device=device).device == device


@pytest.mark.parametrize("device", ["gpu", "cuda:", "cuda:x", "mps:0", "CUDA"])
def test_the_settings_refuse_another_device_name_saying_which_are_known(device):
    with pytest.raises(ValueError, match=r"must be one of auto, cpu, cuda or cuda:N"):
        TrainSettings(device=device)


def test_the_record_names_the_card_the_driver_and_the_versions(fake_cuda):
    record = describe_device(torch.device("cuda"))
    assert record["device_name"] == "Fake H100 (81920 MiB)"
    assert record["driver_version"] == "580.65.06"
    assert record["torch_version"] == torch.__version__
    assert set(record) == {"device_name", "driver_version", "torch_version", "cuda_version",
                           "cudnn_version"}  # fmt: skip


def test_on_cpu_the_record_names_the_processor_and_no_driver():
    record = describe_device(torch.device("cpu"))
    assert record["device_name"].startswith("cpu (") and record["driver_version"] == "none"


def test_the_context_is_measured_after_the_kernels_load_once_per_process(fake_cuda):
    card = TorchCudaCard(torch.device("cuda"))
    assert card.outside_allocator_bytes() == 500 * (1 << 20)
    assert card.outside_allocator_bytes() == 500 * (1 << 20)
    assert fake_cuda.calls.count("load_kernels") == 1


def test_programs_on_the_card_that_are_no_trials_are_counted_apart_from_the_trials(
    fake_cuda, tmp_path
):
    from trainables.cuda import TorchCudaCard
    from trainables.device_gate import DeviceGate
    from trainables.timing import outsiders

    card, gate = TorchCudaCard(torch.device("cuda")), DeviceGate("card", tmp_path)
    gate.register(0)  # this trial
    assert outsiders(card, gate) == 0
    fake_cuda.cards[0].other_programs = 2
    assert card.processes() == 3 and outsiders(card, gate) == 2
    fake_cuda.cards[0].nvml_sees_process = False  # a container's own PID space: not known
    assert card.processes() is None and outsiders(card, gate) is None
