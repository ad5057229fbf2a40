"""The README is the user's manual: it must keep up with the code it describes."""

import re

from tests.conftest import REPO
from trainables.metrics import METRICS
from trainables.settings import TRAIN_KEYS

README = (REPO / "README.md").read_text()


def table_keys(text: str) -> set[str]:
    return set(re.findall(r"^\| `([a-z_]+)`", text, flags=re.MULTILINE))


def test_every_trainable_config_key_is_documented():
    assert TRAIN_KEYS <= table_keys(README)


def test_every_metric_of_the_schema_is_documented():
    documented = set(re.findall(r"`([a-z_]+)`", README))
    assert set(METRICS) <= documented


def test_the_readme_gives_the_install_main_test_and_mlflow_commands():
    assert 'pip install -e ".[dev]"' in README
    assert "python -m search.run --config configs/cats_dogs.yaml" in README
    assert "python -m pytest" in README
    assert "mlflow ui --backend-store-uri" in README
    ci = (REPO / ".ci" / "run").read_text()
    assert 'pip install -e ".[dev]"' in ci and "python -m pytest" in ci


def test_every_shipped_config_and_benchmark_is_introduced():
    for config in sorted((REPO / "configs").glob("*.yaml")):
        assert f"`configs/{config.name}`" in README, config.name
    for script in sorted((REPO / "bench").glob("*.py")):
        assert f"python bench/{script.name}" in README, script.name
