import pytest

from analysis.tracking_server import TrackingUnavailable, check_reachable, is_server


def test_an_unreachable_server_is_reported_within_seconds():
    with pytest.raises(TrackingUnavailable, match="cannot reach the MLflow server"):
        check_reachable("http://127.0.0.1:9", timeout_s=2)


def test_only_http_addresses_are_servers_a_store_file_is_not_asked():
    assert is_server("https://mlflow.example") and not is_server("sqlite:///mlflow.db")
    check_reachable("sqlite:///nowhere/mlflow.db")  # nothing to ask: no error
