"""The services a search reaches are checked before anything starts: here, the MLflow
store a tracking URI names (`search.cluster.check_tracking_store`)."""

import pytest

from search.cluster import check_tracking_store
from search.errors import ConfigError

SOURCE = "configs/x.yaml"


@pytest.mark.parametrize(
    "uri",
    [
        "http://127.0.0.1:5000",
        "https://mlflow.example.org",
        "postgresql+psycopg2://user@db.example.org/mlflow",
        "mysql://user@db.example.org/mlflow",
        "databricks://my-profile",
        "file:///tmp/mlruns",
        "sqlite://",  # in memory
    ],
)
def test_the_stores_mlflow_keeps_runs_in_are_accepted(uri, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    check_tracking_store(uri, SOURCE)
    assert list(tmp_path.iterdir()) == []  # checked, not opened: nothing made


def test_a_scheme_mlflow_has_no_store_for_is_refused_naming_the_file_key_and_value():
    with pytest.raises(ConfigError) as caught:
        check_tracking_store("mlflwo://127.0.0.1:5000", SOURCE)
    message = caught.value.render()
    assert SOURCE in message and "tracking.uri: MLflow keeps no runs at mlflwo:// URIs" in message
    assert "sqlite://" in message and "'mlflwo://127.0.0.1:5000'" in message


def test_a_new_sqlite_store_in_folders_yet_to_be_made_is_accepted_and_nothing_is_made(tmp_path):
    database = tmp_path / "not" / "yet" / "mlflow.db"
    check_tracking_store(f"sqlite:///{database}", SOURCE)
    assert list(tmp_path.iterdir()) == []


def test_an_existing_sqlite_store_is_accepted_and_left_as_it_was(tmp_path):
    database = tmp_path / "mlflow.db"
    database.write_bytes(b"")
    check_tracking_store(f"sqlite:///{database}", SOURCE)
    assert list(tmp_path.iterdir()) == [database] and database.read_bytes() == b""


@pytest.mark.parametrize(
    ("where", "why"),
    [
        ("a_file/mlflow.db", "cannot make the SQLite database {tmp}/a_file/mlflow.db: {tmp}/a"),
        ("a_file/deeper/mlflow.db", "{tmp}/a_file is a file"),
        ("a_folder", "must be a SQLite database file, but {tmp}/a_folder is a folder"),
    ],
)  # fmt: skip
def test_a_sqlite_store_that_cannot_be_made_there_is_refused_saying_why(where, why, tmp_path):
    (tmp_path / "a_file").write_text("a file, not a folder")
    (tmp_path / "a_folder").mkdir()
    uri = f"sqlite:///{tmp_path / where}"
    with pytest.raises(ConfigError) as caught:
        check_tracking_store(uri, SOURCE)
    [problem] = caught.value.problems
    assert problem.path == "tracking.uri"
    assert why.format(tmp=tmp_path) in problem.message and repr(uri) in problem.message
