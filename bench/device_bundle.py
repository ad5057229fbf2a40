"""Builds what the lent GPU machine lacks into one archive, for `python bench/gpu.py` and the
test suite there (it has no network: the packages must travel with the run).

The machine's Python 3.12 image already holds PyTorch, NumPy, pandas, SciPy, statsmodels,
pyarrow, pytest and more (`DEVICE_HAS`, as its description listed them on 2026-11-17); the
rest of this project's dependencies are installed for Python 3.12 manylinux x86-64 into a
folder, the packages it has are taken out again, parts of Ray and MLflow that nothing here
runs are dropped (Java jars, RLlib, Serve, the LLM libraries, the web UIs' built assets),
binaries are stripped, and the folder is packed with xz: it must stay under the 64 MiB a
call carries. On the machine:

    mkdir -p /tmp/site && tar -xJf .bundle/site.tar.xz -C /tmp/site
    export PYTHONPATH=/tmp/site:$PWD
    python bench/gpu.py --out $OUT/gpu.csv && python -m pytest -q

    python bench/device_bundle.py [--out .bundle/site.tar.xz]
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PLATFORMS = ["manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64"]
# The machine's own: carried again they would only shadow its versions.
DEVICE_HAS = frozenset(
    [
        "aiohappyeyeballs",
        "aiohttp",
        "aiosignal",
        "annotated-doc",
        "anyio",
        "attrs",
        "certifi",
        "charset-normalizer",
        "click",
        "cloudpickle",
        "contourpy",
        "cycler",
        "filelock",
        "fonttools",
        "formulaic",
        "frozenlist",
        "fsspec",
        "h11",
        "idna",
        "iniconfig",
        "interface-meta",
        "jinja2",
        "joblib",
        "kiwisolver",
        "markupsafe",
        "matplotlib",
        "msgpack",
        "multidict",
        "narwhals",
        "numpy",
        "nvidia-ml-py",
        "packaging",
        "pandas",
        "patsy",
        "pillow",
        "pluggy",
        "propcache",
        "protobuf",
        "psutil",
        "pyarrow",
        "pygments",
        "pyparsing",
        "pytest",
        "python-dateutil",
        "pyyaml",
        "requests",
        "scikit-learn",
        "scipy",
        "six",
        "statsmodels",
        "tabulate",
        "threadpoolctl",
        "torch",
        "torchvision",
        "tqdm",
        "typing-extensions",
        "urllib3",
        "werkzeug",
        "wrapt",
        "yarl",
        "zipp",
    ]
)
NOT_RUN_THERE = [
    "ray/jars", "ray/rllib", "ray/serve", "ray/llm", "ray/dashboard/client/build",
    "mlflow/server/js", "bin",
]  # fmt: skip
CARRY_LIMIT_MB = 64


def requirements() -> list[str]:
    """This project's dependencies, less PyTorch and torchvision (the machine's own)."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    return [
        requirement
        for requirement in project["dependencies"]
        if _name(re.split(r"[<>=\[; ]", requirement, maxsplit=1)[0]) not in DEVICE_HAS
    ]


def _name(distribution: str) -> str:
    return re.sub(r"[-_.]+", "-", distribution).lower()


def install(site: Path) -> None:
    platforms = [option for platform in PLATFORMS for option in ("--platform", platform)]
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--target", str(site),
         "--python-version", "3.12", "--implementation", "cp", "--only-binary=:all:",
         *platforms, *requirements()],
        check=True,
    )  # fmt: skip


def take_out_what_the_device_has(site: Path) -> list[str]:
    """Remove each installed distribution the machine already has: the files its RECORD
    lists (never a path outside `site`), then the folders left empty. Whole top-level
    folders are not removed: distributions share them (protobuf and google-auth both
    install into google/)."""
    removed = []
    root = site.resolve()
    for info in sorted(site.glob("*.dist-info")):
        name = _name(info.name.removesuffix(".dist-info").rsplit("-", 1)[0])
        if name not in DEVICE_HAS:
            continue
        record = info / "RECORD"
        lines = record.read_text().splitlines() if record.exists() else []
        folders = set()
        for line in lines:
            relative = line.split(",", 1)[0]
            path = (site / relative).resolve()
            # Scripts are recorded as ../../bin/...: never follow a path out of the folder.
            if not relative or root not in path.parents or not path.is_file():
                continue
            path.unlink()
            folders.update(parent for parent in path.parents if root in parent.parents)
        for folder in sorted(folders, key=lambda p: len(p.parts), reverse=True):
            if folder.is_dir() and not any(folder.iterdir()):
                folder.rmdir()
        shutil.rmtree(info, ignore_errors=True)
        removed.append(name)
    return removed


def slim(site: Path) -> None:
    for part in NOT_RUN_THERE:
        shutil.rmtree(site / part, ignore_errors=True)
    for cache in list(site.rglob("__pycache__")):
        shutil.rmtree(cache, ignore_errors=True)
    binaries = [p for p in site.rglob("*") if p.is_file() and (".so" in p.name or
                p.name in {"raylet", "gcs_server"})]  # fmt: skip
    for binary in binaries:
        subprocess.run(["strip", "--strip-unneeded", str(binary)], check=False,
                       capture_output=True)  # fmt: skip


def pack(site: Path, out: Path) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("wb") as archive:
        tar = subprocess.Popen(["tar", "-cf", "-", "-C", str(site), "."], stdout=subprocess.PIPE)
        subprocess.run(["xz", "-T0", "-6"], stdin=tar.stdout, stdout=archive, check=True)
        tar.wait()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO / ".bundle" / "site.tar.xz")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="device-site-") as folder:
        site = Path(folder) / "site"
        print(f"installing for Python 3.12: {', '.join(requirements())}", flush=True)
        install(site)
        removed = take_out_what_the_device_has(site)
        print(f"taken out (the machine has them): {', '.join(removed)}", flush=True)
        slim(site)
        pack(site, args.out)
    size_mb = args.out.stat().st_size / (1 << 20)
    print(f"{args.out}: {size_mb:.1f} MiB (a call carries at most {CARRY_LIMIT_MB})")
    return 0 if size_mb < CARRY_LIMIT_MB else 1


if __name__ == "__main__":
    sys.exit(main())
