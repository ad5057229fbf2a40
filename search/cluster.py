"""Reaching the services a search uses, an existing Ray cluster and an MLflow server: fail
in seconds with a clear message, not after minutes of the libraries' connection retries."""

from __future__ import annotations

import os
import socket
import urllib.parse
from importlib.metadata import entry_points
from pathlib import Path

from search.errors import ConfigError, Problem
from search.experiment import nearest_existing

LOCAL_ADDRESSES = ("auto", "local")  # Ray finds or starts the cluster itself
# The schemes MLflow 3 keeps runs in (`mlflow.tracking._tracking_service.utils`); a
# database's may name its driver (`postgresql+psycopg2`). Plugins add theirs through the
# `mlflow.tracking_store` entry points.
DATABASE_SCHEMES = ("sqlite", "postgresql", "mysql", "mssql")
STORE_SCHEMES = (*DATABASE_SCHEMES, "http", "https", "file", "databricks", "databricks-uc", "uc")
STORE_PLUGINS = "mlflow.tracking_store"


class ClusterUnavailable(Exception):
    pass


def check_address(address: str | None, timeout_s: float = 5.0) -> None:
    """Raise `ClusterUnavailable` unless something listens at `address` (HOST:PORT, or
    ray://HOST:PORT for Ray Client)."""
    if address is None or address in LOCAL_ADDRESSES:
        return
    host, sep, port = address.removeprefix("ray://").rpartition(":")
    if "://" in host:  # e.g. the dashboard's http://HOST:8265, which Ray Jobs take
        raise ClusterUnavailable(
            f"--address {address!r} is a web address; a search joins the cluster at the head "
            "node's HOST:PORT (for example 10.0.0.5:6379, what `ray start --head` prints), or "
            "ray://HOST:10001 for Ray Client"
        )
    if not sep or not host or not port.isdigit():
        raise ClusterUnavailable(
            f"--address {address!r} is not HOST:PORT (for example 10.0.0.5:6379, the head "
            "node's address that `ray start --head` prints)"
        )
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s):
            return
    except OSError as error:
        raise ClusterUnavailable(
            f"cannot reach the Ray cluster at {address} ({error.strerror or error}); start "
            "its head node (`ray start --head --port=6379`) or check --address / RAY_ADDRESS"
        ) from None


def join_refused(address: str, error: Exception) -> ClusterUnavailable:
    """Why Ray could not join the cluster at `address` (which answered `check_address`),
    with the likely cause where this process does not ask for token authentication: a head
    started by `ray start --head` takes only clients that send its token (Ray 2.59 and
    later), and Ray turns token authentication on by itself only for a cluster it finds,
    never for an address it is given. Ray retried for about 20 s first (2.60)."""
    message = f"could not join the Ray cluster at {address} ({error})"
    if os.environ.get("RAY_AUTH_MODE", "").lower() != "token":
        message += (
            "; a head started by `ray start --head` takes only clients with its token: run "
            "the search with RAY_AUTH_MODE=token and that token (the head node's "
            "~/.ray/auth_token copied to this machine, or RAY_AUTH_TOKEN)"
        )
    return ClusterUnavailable(message)


def check_tracking_store(uri: str, source: str) -> None:
    """Refuse, before anything starts, a tracking URI MLflow keeps no runs in, or a SQLite
    store that cannot be made where it points: MLflow would fail after Ray had started, or
    retry an unopenable database for minutes. `uri` is the resolved one (`sqlite:////abs`)."""
    scheme = urllib.parse.urlparse(uri).scheme.lower().partition("+")[0]
    known = {*STORE_SCHEMES, *(plugin.name for plugin in entry_points(group=STORE_PLUGINS))}
    if scheme not in known:
        raise ConfigError(
            source,
            [
                Problem(
                    "tracking.uri",
                    f"MLflow keeps no runs at {scheme}:// URIs; use one of "
                    f"{', '.join(f'{name}://' for name in sorted(known))}, got {uri!r}",
                )
            ],
        )
    if scheme == "sqlite" and uri.startswith("sqlite:///"):
        problem = sqlite_problem(Path(uri.split(":///", 1)[1]))
        if problem:
            raise ConfigError(source, [Problem("tracking.uri", f"{problem}; got {uri!r}")])


def sqlite_problem(database: Path) -> str | None:
    """Why a SQLite database cannot be opened or made at `database`; None: it can."""
    if database.exists():
        if database.is_dir():
            return f"must be a SQLite database file, but {database} is a folder"
        # SQLite writes its journal beside the database
        if not os.access(database, os.R_OK | os.W_OK) or not writable(database.parent):
            return f"cannot write the SQLite database {database} (no permission)"
        return None
    existing = nearest_existing(database.parent)
    if not existing.is_dir():
        return f"cannot make the SQLite database {database}: {existing} is a file"
    if not writable(existing):
        return f"cannot make the SQLite database {database} in {existing} (no permission)"
    return None


def writable(folder: Path) -> bool:
    return os.access(folder, os.W_OK | os.X_OK)
