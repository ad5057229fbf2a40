"""Configs are data, checkpoints are data, and what the project starts stays on loopback."""

import pickle
import re
import subprocess
import sys

import pytest
import torch

from search.config import load_config
from search.errors import ConfigError
from tests.conftest import REPO
from tests.processes import importable
from trainables.trial_state import STATE_FILE, load_trial_state


class RunsCodeWhenUnpickled:
    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):
        return (open, (self.marker, "w"))


def test_yaml_is_safe_loaded_so_a_python_tag_runs_nothing(tmp_path):
    marker = tmp_path / "pwned"
    config = tmp_path / "evil.yaml"
    config.write_text(f"name: !!python/object/apply:os.system ['touch {marker}']\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(config)
    assert not marker.exists()


def test_a_checkpoint_loads_weights_only_so_a_pickled_object_runs_nothing(tmp_path):
    marker = tmp_path / "pwned"
    torch.save({"model": RunsCodeWhenUnpickled(str(marker))}, tmp_path / STATE_FILE)
    with pytest.raises(pickle.UnpicklingError):
        load_trial_state(tmp_path)
    assert not marker.exists()


PROBE = """
import os, ray
from search.startup import start_ray
start_ray(None)
print("AUTH", os.environ.get("RAY_AUTH_MODE"))
ray.shutdown()
"""


def test_a_local_ray_instance_runs_with_token_authentication():
    """Ray's services listen on the machine's address (Ray has no loopback-only mode); the
    token Ray generates for the cluster is what guards them, so it must stay on."""
    finished = subprocess.run(
        [sys.executable, "-c", PROBE],
        capture_output=True,
        text=True,
        timeout=120,
        env={"PYTHONPATH": importable(), "PATH": "/usr/bin:/bin", "HOME": "/root"},
    )
    assert finished.returncode == 0, finished.stderr[-2000:]
    assert "AUTH token" in finished.stdout


def test_no_code_turns_ray_authentication_off():
    """The project may read Ray's authentication mode (to say what a refused join lacks)
    and name it in messages, never set it, let alone to "disabled"."""
    sources = [
        p for folder in ("search", "trainables", "analysis") for p in (REPO / folder).rglob("*.py")
    ]
    assert sources
    sets_it = re.compile(
        r"environ\[\s*.RAY_AUTH_MODE.\s*\]\s*=(?!=)|setdefault\(\s*.RAY_AUTH_MODE"
        r"|putenv\(\s*.RAY_AUTH_MODE|.RAY_AUTH_MODE.\s*:|RAY_AUTH_MODE=(?!token)"
    )
    for source in sources:
        for line in source.read_text().splitlines():
            if "RAY_AUTH_MODE" in line:
                assert "disabled" not in line.lower() and not sets_it.search(line), (source, line)
    assert sets_it.search('os.environ["RAY_AUTH_MODE"] = "disabled"')  # the pattern bites
    assert sets_it.search('env = {"RAY_AUTH_MODE": "token"}')
