"""Every way a user can get a config wrong ends in one message and exit code 2, never a
traceback: the shipped configs mutated key by key, and broken files."""

import copy
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml

from search.run import main
from tests.conftest import CONFIGS, REPO
from tests.fake_cuda import FakeCard, FakeCuda
from tests.processes import importable

SHIPPED = sorted(CONFIGS.glob("*.yaml"))
NEEDS_GPU = {"cats_dogs_gpu.yaml", "deelvin_resnet50.yaml"}


def leaves(node: Any, path: tuple = ()) -> list[tuple[tuple, Any]]:
    """Every (key path, value) under mappings; lists are leaves."""
    if isinstance(node, dict):
        return [leaf for key, value in node.items() for leaf in leaves(value, (*path, key))]
    return [(path, node)]


def with_value(raw: dict, path: tuple, value: Any) -> dict:
    changed = copy.deepcopy(raw)
    node = changed
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return changed


def without(raw: dict, path: tuple) -> dict:
    changed = copy.deepcopy(raw)
    node = changed
    for key in path[:-1]:
        node = node[key]
    del node[path[-1]]
    return changed


def mutations(raw: dict) -> list[tuple[str, dict, str | None]]:
    """(what, mutated config, the key path the error must name; None: still valid)."""
    cases = []
    for path, value in leaves(raw):
        key = ".".join(map(str, path))
        if path[0] == "space":  # an entry of the space: {kind: [...]}
            cases.append(
                (f"{key} not a range", with_value(raw, path[:2], "wide"), key[: key.rfind(".")])
            )
            continue
        if isinstance(value, int | float):  # bool is an int too
            cases.append((f"{key} as text", with_value(raw, path, "not-a-number"), key))
            if not path[-1].endswith("seed") and not isinstance(value, bool):
                cases.append((f"{key} negative", with_value(raw, path, -7), key))
        if isinstance(value, list):  # e.g. [low, high]: a list of words instead
            cases.append((f"{key} as words", with_value(raw, path, ["low", "high"]), key))
        elif value is not None:
            cases.append((f"{key} as a list", with_value(raw, path, [1, 2]), key))
        cases.append((f"{key} removed", without(raw, path), "name" if path == ("name",) else None))
    for path, _ in leaves(raw):
        typo = (*path[:-1], f"{path[-1]}x")
        if len(path) > 1 and path[0] != "space":
            cases.append((f"{typo} unknown", with_value(raw, typo, 1), ".".join(map(str, typo))))
    cases.append(("unknown section", {**raw, "trian": {"epochs": 1}}, "trian"))
    return cases


CASES = [
    pytest.param(config, *case[1:], id=f"{config.stem}: {case[0]}")
    for config in SHIPPED
    for case in mutations(yaml.safe_load(config.read_text()))
]


def test_the_mutations_cover_every_shipped_config_many_times():
    assert len(SHIPPED) >= 4 and len(CASES) > 400


@pytest.mark.parametrize(("config", "mutated", "named_key"), CASES)
def test_a_mutated_config_is_one_message_naming_file_and_key_or_it_runs(
    config: Path, mutated: dict, named_key: str | None, tmp_path, nothing_runs, capsys
):
    path = tmp_path / config.name
    path.write_text(yaml.safe_dump(mutated))
    code = main(["--config", str(path)])
    err = capsys.readouterr().err
    assert "Traceback" not in err
    needs_missing_gpu = config.name in NEEDS_GPU and not torch.cuda.is_available()
    if named_key is None and code == 0:  # still valid: the search would have started
        assert len(nothing_runs) == 1 and not needs_missing_gpu, err
        return
    assert code == 2 and not nothing_runs
    assert str(path) in err
    if named_key is not None:
        assert named_key in err, err
    else:  # a removed key took its default, and a rule between keys no longer holds
        assert re.search(r"^  [a-z_.\[\]0-9]+: ", err, flags=re.MULTILINE), err


BROKEN_FILES = {
    "empty": "",
    "only a comment": "# nothing here\n",
    "unclosed bracket": "name: x\nspace: {batch_size: {choice: [16, 32}\n",
    "tab indentation": "name: x\ntrain:\n\tepochs: 3\n",
    "duplicate colon": "name: x: y\n",
    "a list, not a mapping": "- name: x\n",
    "a scalar": "just words\n",
    "binary": "\x00\x01\x02 name",
    "python object tag": "name: !!python/object/apply:os.system ['echo pwned']\n",
    "unterminated string": "name: 'x\n",
}


@pytest.mark.parametrize("text", BROKEN_FILES.values(), ids=BROKEN_FILES.keys())
def test_a_file_that_is_not_a_config_is_one_message(text, tmp_path, nothing_runs, capsys):
    path = tmp_path / "broken.yaml"
    path.write_text(text)
    assert main(["--config", str(path)]) == 2
    err = capsys.readouterr().err
    assert str(path) in err and "Traceback" not in err and not nothing_runs


def test_a_missing_file_or_a_folder_is_one_message(tmp_path, nothing_runs, capsys):
    for path in (tmp_path / "nope.yaml", tmp_path):
        assert main(["--config", str(path)]) == 2
        err = capsys.readouterr().err
        assert str(path) in err and "Traceback" not in err


@pytest.mark.parametrize(
    "override",
    ["train.epochs=many", "space.lr={loguniform: [0, 1]}", "nonsense", "search.=3", "name.x=1"],
)
def test_a_bad_override_on_the_command_line_is_one_message(override, nothing_runs, capsys):
    assert main(["--config", str(CONFIGS / "smoke.yaml"), override]) == 2
    err = capsys.readouterr().err
    assert "smoke.yaml" in err and "Traceback" not in err


@pytest.mark.parametrize(
    ("arguments", "said"),
    [
        (["space.batchsize=null"],
         "space.batchsize: unknown key; did you mean 'batch_size'? (set on the command line)"),
        (["--num-samples", "3", "search.num_samples=0"],
         "search.num_samples: is given twice, 3 by its flag and `search.num_samples=0`; "
         "give one (set on the command line)"),
    ],
)  # fmt: skip
def test_what_the_command_line_would_drop_without_a_word_is_one_message(
    arguments, said, nothing_runs, capsys
):
    assert main(["--config", str(CONFIGS / "smoke.yaml"), *arguments]) == 2
    assert said in capsys.readouterr().err and not nothing_runs


@pytest.mark.parametrize(
    ("arguments", "said"),
    [
        (["--name", "n" * 300], "(300 characters)' cannot name the results folder"),
        (["--name", "n" * 300, "--resume"], "cannot name the results folder"),
        (["--name", "a/b"], "--name 'a/b' cannot name the results folder"),
        (["run.storage_path=/proc/results"],
         "run.storage_path: cannot create the results folder in /proc"),
    ],
)  # fmt: skip
def test_a_results_folder_that_cannot_be_made_is_one_message(arguments, said, nothing_runs, capsys):
    assert main(["--config", str(CONFIGS / "smoke.yaml"), *arguments]) == 2
    err = capsys.readouterr().err
    assert said in err and "Traceback" not in err and not nothing_runs


def test_a_config_path_through_a_file_is_one_message(tmp_path, nothing_runs, capsys):
    (tmp_path / "afile").write_text("x")
    assert main(["--config", str(tmp_path / "afile" / "x.yaml")]) == 2
    assert "cannot be read: [Errno 20] Not a directory" in capsys.readouterr().err


def test_a_key_given_twice_in_the_file_is_one_message_naming_both_lines(
    tmp_path, nothing_runs, capsys
):
    path = tmp_path / "twice.yaml"
    path.write_text("name: twice\ntrain:\n  epochs: 1\n  lr: 0.01\n  epochs: 2\n")
    assert main(["--config", str(path)]) == 2
    err = capsys.readouterr().err
    assert "line 5, column 3: 'epochs' is given twice (first on line 3)" in err
    assert "Traceback" not in err and not nothing_runs


@pytest.mark.parametrize(
    ("overrides", "said"),
    [
        (["train.device=gpu"], "train.device: must be one of auto, cpu, cuda or cuda:N"),
        (["train.device=cuda:1", "resources.gpu=0.5"],
         "train.device: is 'cuda:1' but each trial sees 1 GPU (resources.gpu=0.5), numbered "
         "from 0: use 'cuda' or 'auto' (set on the command line)"),
        (["train.device=cuda:0"], "train.device: is 'cuda:0' but each trial gets no GPU"),
    ],
)  # fmt: skip
def test_a_device_the_trials_cannot_see_is_one_message_before_anything_starts(
    overrides, said, nothing_runs, capsys
):
    assert main(["--config", str(CONFIGS / "smoke.yaml"), *overrides]) == 2
    err = capsys.readouterr().err
    assert said in err and "Traceback" not in err


def test_an_image_folder_that_is_not_there_is_one_message_before_anything_starts(
    tmp_path, nothing_runs, capsys
):
    (tmp_path / "Cat").mkdir()
    for root, said in (
        (tmp_path / "nowhere", "data.root: no folder at"),
        (tmp_path, "data.root: " + f"{tmp_path} needs at least 2 class folders"),
    ):
        overrides = ["data.source=image_folder", f"data.root={root}"]
        assert main(["--config", str(CONFIGS / "smoke.yaml"), *overrides]) == 2
        err = capsys.readouterr().err
        assert said in err and "nothing was started" in err and "Traceback" not in err


@pytest.mark.parametrize(
    ("overrides", "said"),
    [
        (["train.amp_dtype=bfloat16"],
         "train.amp_dtype: is bfloat16, but cuda:1 (Tesla V100) has no native bfloat16"),
        (["space.amp_dtype={choice: [float16, bfloat16]}"],
         "space.amp_dtype: samples bfloat16, but cuda:1 (Tesla V100) has no native bfloat16"),
    ],
)  # fmt: skip
def test_bfloat16_on_a_machine_with_a_card_without_it_is_one_message_before_anything_starts(
    overrides, said, nothing_runs, monkeypatch, capsys
):
    FakeCuda([FakeCard(), FakeCard(name="Tesla V100", major=7)]).install(monkeypatch)
    args = ["--config", str(CONFIGS / "smoke.yaml"), "resources.gpu=0.5", *overrides]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert said in err and "use float16 (set on the command line)" in err
    assert not nothing_runs


def test_bfloat16_where_every_card_has_it_starts(nothing_runs, monkeypatch):
    FakeCuda([FakeCard(), FakeCard(name="A100", major=8)]).install(monkeypatch)
    args = ["--config", str(CONFIGS / "smoke.yaml"), "resources.gpu=0.5",
            "space.amp_dtype={choice: [float16, bfloat16]}"]  # fmt: skip
    assert main(args) == 0 and len(nothing_runs) == 1


@pytest.mark.parametrize("args", [["--config"], ["--num-samples", "x", "--config", "c.yaml"], []])
def test_bad_command_line_arguments_exit_2_with_usage(args, capsys):
    with pytest.raises(SystemExit) as caught:
        main(args)
    assert caught.value.code == 2 and "usage:" in capsys.readouterr().err


def test_as_a_real_process_a_bad_config_prints_no_traceback(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("name: x\ntrain: {epochs: -1, batch_sise: 3}\n")
    finished = subprocess.run(
        [sys.executable, "-m", "search.run", "--config", str(path)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env={"PYTHONPATH": importable(), "PATH": "/usr/bin:/bin"},
    )
    assert finished.returncode == 2
    assert "Traceback" not in finished.stderr + finished.stdout
    assert "train.epochs" in finished.stderr and "train.batch_sise" in finished.stderr


HEAVY = ("torch", "ray", "mlflow", "pandas", "torchvision")


@pytest.mark.parametrize(
    "args",
    [["--help"], ["--config", str(CONFIGS / "smoke.yaml"), "train.epochs=0"]],
    ids=["help", "config error"],
)
def test_help_and_config_errors_answer_before_torch_ray_or_mlflow_load(args):
    probe = (
        "import sys\n"
        "from search.run import main\n"
        "try:\n"
        f"    main({args!r})\n"
        "except SystemExit:\n"
        "    pass\n"
        f"print(sorted(name for name in {HEAVY!r} if name in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True,
                         text=True, timeout=60)  # fmt: skip
    assert out.stdout.strip().splitlines()[-1] == "[]", out.stdout + out.stderr
