"""Where a search lives on disk, and what `--resume` needs to find it again."""

from __future__ import annotations

import json
import os
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from analysis.flat import flatten
from search.config import SearchConfig, sections_under_new_names
from search.errors import ConfigError, Problem

if TYPE_CHECKING:  # `--help` and config errors answer before MLflow loads
    from mlflow.entities import Run

STATE_FILE = "search_state.json"
ABLATION_KEY = "search.ablation"  # config keys a resumed search may change


@dataclass(frozen=True)
class SearchState:
    """Written next to Tune's own state before the first trial, read by `--resume`."""

    parent_run_id: str
    tracking_uri: str
    experiment: str
    # the resolved config the search started with; empty in states written before it was kept
    config: dict = field(default_factory=dict)
    # sampled keys the search left out on its machine, and why (`search.devices`): a resumed
    # search samples what it started with, without probing again
    left_out: dict = field(default_factory=dict)
    # the speed scale its CPU trials were timed on, by reference kind (`search.speed_scale`;
    # one number in states written before the kinds: the fp32_contiguous one's): a resumed
    # search keeps it; None: not measured, or a state written before it was kept
    speed_scale: dict[str, float] | float | None = None

    def differences(self, config: dict) -> list[tuple[str, object, object]]:
        """(key path, value the search started with, value now) for every change; a key
        renamed since (`RENAMED_KEYS`) is compared under its new name, and a key added
        since (absent from the saved config) is no change where it keeps its default. The
        ablations (`search.ablation`) may change: they come after the search and do not
        alter it."""
        started_with = sections_under_new_names(self.config)[0]
        before, now = flatten("", started_with), flatten("", config)
        defaults = flatten("", SearchConfig(name="defaults").as_yaml_dict())
        changed = sorted(
            key
            for key in before.keys() | now.keys()
            if before.get(key) != now.get(key)
            and not key.startswith(ABLATION_KEY)
            and not (key not in before and key in defaults and now.get(key) == defaults[key])
        )
        return [(key, before.get(key), now.get(key)) for key in changed]

    def save(self, experiment_dir: Path) -> None:
        experiment_dir.mkdir(parents=True, exist_ok=True)
        (experiment_dir / STATE_FILE).write_text(json.dumps(asdict(self), indent=2))

    @classmethod
    def load(cls, experiment_dir: Path) -> SearchState | None:
        path = experiment_dir / STATE_FILE
        return cls(**json.loads(path.read_text())) if path.exists() else None

    def parent_run(self) -> Run:
        """The search's MLflow run, as its tracking server holds it now."""
        from mlflow.tracking import MlflowClient

        return MlflowClient(self.tracking_uri).get_run(self.parent_run_id)


class ExperimentNotFound(Exception):
    pass


def check_storage(storage: Path, source: str) -> None:
    """Refuse, before anything starts, a storage path that cannot hold a search's folder:
    a file, or a place this user cannot create folders in."""
    existing = nearest_existing(storage)
    if not existing.is_dir():
        why = f"{existing} is a file" if existing != storage else "it is a file"
        problem = f"must be a folder for the search's results, but {why}: {storage}"
    elif not os.access(existing, os.W_OK | os.X_OK):
        problem = f"cannot create the results folder in {existing} (no permission): {storage}"
    else:
        try:  # made and taken away: what the permission bits cannot say (/proc, a full disk)
            os.rmdir(tempfile.mkdtemp(prefix=".search-probe-", dir=existing))
            return
        except OSError as error:
            problem = (
                f"cannot create the results folder in {existing} ({error.strerror}): {storage}"
            )
    raise ConfigError(source, [Problem("run.storage_path", problem)])


class BadRunName(ValueError):
    """A --name that cannot name a results folder."""


def check_run_name(name: str | None) -> None:
    """Refuse a `--name` that is no folder's name (the search's results folder is named by
    it): empty, `.` or `..`, with a `/`, or longer than a file name may be."""
    if name is None:
        return
    if name in ("", ".", "..") or "/" in name or "\0" in name or len(name.encode()) > 255:
        shown = name if len(name) <= 60 else f"{name[:60]}... ({len(name)} characters)"
        raise BadRunName(
            f"--name {shown!r} cannot name the results folder: give a folder name without "
            "'/', of at most 255 bytes"
        )


def nearest_existing(path: Path) -> Path:
    """`path` itself if it exists, else its nearest ancestor that does: where the folders
    to make it would be made."""
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def new_run_name(config_name: str) -> str:
    return f"{config_name}-{time.strftime('%Y%m%d-%H%M%S')}"


def has_saved_state(folder: Path) -> bool:
    """Whether a Tune experiment in `folder` can be continued: `can_restore` is true as soon
    as the Tuner exists; one that stopped before its first trial has no experiment state."""
    from ray.tune import Tuner  # here: only a resume needs Ray before the search starts

    return Tuner.can_restore(str(folder)) and any(folder.glob("experiment_state-*.json"))


def find_resumable(storage: Path, config_name: str, run_name: str | None) -> Path:
    """The experiment folder `--resume` continues: `--name`'s, or the newest of this config."""
    if run_name is not None:
        candidates = [storage / run_name]
    else:
        candidates = sorted(
            (p for p in storage.glob(f"{config_name}-*") if p.is_dir()),
            key=lambda p: p.stat().st_mtime,
            reverse=True,
        )
    for candidate in candidates:
        if has_saved_state(candidate):
            return candidate
    wanted = f"{storage / run_name}" if run_name else f"{storage}/{config_name}-*"
    raise ExperimentNotFound(
        f"nothing to resume at {wanted}: no search there has saved its state yet"
    )
