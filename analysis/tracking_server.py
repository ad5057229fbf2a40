"""Whether an MLflow tracking URI is a server, and whether that server answers: asked
before a search starts or a report is read, so that a server that is down is said within
seconds, not after MLflow's minutes of retries. Standard library only: `search.run` asks
before torch, Ray or MLflow load."""

from __future__ import annotations

import urllib.error
import urllib.request


class TrackingUnavailable(Exception):
    """The tracking server cannot be reached; raised before anything starts."""


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
