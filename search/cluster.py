"""Reaching the services a search uses, an existing Ray cluster and an MLflow server: fail
in seconds with a clear message, not after minutes of the libraries' connection retries."""

from __future__ import annotations

import socket
import urllib.error
import urllib.request

LOCAL_ADDRESSES = ("auto", "local")  # Ray finds or starts the cluster itself


class ClusterUnavailable(Exception):
    pass


def check_address(address: str | None, timeout_s: float = 5.0) -> None:
    """Raise `ClusterUnavailable` unless something listens at `address` (HOST:PORT, or
    ray://HOST:PORT for Ray Client)."""
    if address is None or address in LOCAL_ADDRESSES:
        return
    host, sep, port = address.removeprefix("ray://").rpartition(":")
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


class TrackingUnavailable(Exception):
    """The tracking store cannot be reached; raised before any trial runs."""


def is_server(tracking_uri: str) -> bool:
    """An MLflow server (http or https), as opposed to a store the search opens itself."""
    return tracking_uri.startswith(("http://", "https://"))


def check_reachable(uri: str, timeout_s: float = 5.0) -> None:
    """Fail within seconds, not after MLflow's minutes of retries, if a server is down."""
    if not is_server(uri):
        return
    try:
        with urllib.request.urlopen(f"{uri.rstrip('/')}/health", timeout=timeout_s):
            return
    except urllib.error.HTTPError:
        return  # something answers; MLflow's own calls will report what is wrong
    except (urllib.error.URLError, OSError) as error:
        reason = getattr(error, "reason", error)
        raise TrackingUnavailable(
            f"cannot reach the MLflow server at {uri} ({reason}); start it "
            f"(`mlflow server --host 127.0.0.1 --port PORT`) or pass another --tracking-uri"
        ) from None
