"""The README fits on a few screens and gives the commands a user needs; the guide, the
reference and the map keep up with the code they describe."""

import re

from tests.conftest import REPO

README = (REPO / "README.md").read_text()
GUIDE = (REPO / "docs" / "GUIDE.md").read_text()
# two workers, each file on one (pytest-xdist): bench/suite_time.py
TEST_COMMAND = "python -m pytest -n 2 --dist loadfile"


def test_the_readme_gives_the_install_main_test_and_mlflow_commands():
    assert 'pip install -e ".[dev]"' in README
    assert "python -m search.run --config configs/cats_dogs.yaml" in README
    assert f"```bash\n{TEST_COMMAND}\n```" in README
    assert "mlflow ui --backend-store-uri" in README
    ci = (REPO / ".ci" / "run").read_text()
    assert 'pip install -e ".[dev]"' in ci and f"\n{TEST_COMMAND}  " in ci


def test_the_test_command_is_the_guides_and_its_workers_come_with_the_dev_install():
    assert f"```bash\n{TEST_COMMAND}\n```" in GUIDE
    pyproject = (REPO / "pyproject.toml").read_text()
    assert re.search(r'^dev = \[.*"pytest-xdist[>=\d.]*".*\]$', pyproject, re.M)


def test_the_readme_fits_on_a_few_screens():
    assert len(README.splitlines()) <= 200


def test_every_page_the_readme_links_is_there():
    for link in re.findall(r"\]\(((?:docs/)?[A-Z]+\.md)(?:#[\w-]+)?\)", README):
        assert (REPO / link).exists(), link


def test_every_shipped_config_is_in_the_readme_and_every_benchmark_in_the_guide():
    for config in sorted((REPO / "configs").glob("*.yaml")):
        assert f"`configs/{config.name}`" in README, config.name
    for script in sorted((REPO / "bench").glob("*.py")):
        assert f"python bench/{script.name}" in GUIDE or f"python3 bench/{script.name}" in (
            GUIDE
        ), script.name


def test_every_shipped_config_opens_with_the_command_that_runs_it():
    for config in sorted((REPO / "configs").glob("*.yaml")):
        first = config.read_text().splitlines()[0]
        assert first.startswith("# python -m search.run --config"), config.name
