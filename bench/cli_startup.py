"""How soon the CLI answers, side by side with what it used to load before answering.

`python -m search.run --help` (and a config error) now parse and validate before torch, Ray
or MLflow load; before, every answer waited for those imports, which `import
search.execute` still makes. Each command runs in a fresh process, alternating, and the
script prints the median wall seconds of each and the ratio.

    python bench/cli_startup.py [--repeats 5]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
COMMANDS = {
    "search.run --help": [sys.executable, "-m", "search.run", "--help"],
    "a config error": [
        sys.executable,
        "-m",
        "search.run",
        "--config",
        str(REPO / "configs" / "smoke.yaml"),
        "train.epochs=0",
    ],
    "the heavy imports (import search.execute)": [sys.executable, "-c", "import search.execute"],
}


def seconds(command: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run(command, cwd=REPO, capture_output=True, check=False)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    times: dict[str, list[float]] = {name: [] for name in COMMANDS}
    for command in COMMANDS.values():  # warm the file cache for every side
        seconds(command)
    for _ in range(args.repeats):
        for name, command in COMMANDS.items():
            times[name].append(seconds(command))
    medians = {name: statistics.median(values) for name, values in times.items()}
    print(f"median wall seconds of {args.repeats} fresh processes each")
    for name, value in medians.items():
        print(f"  {name:45s} {value:6.2f} s")
    heavy = medians["the heavy imports (import search.execute)"]
    print(f"ratio --help / heavy imports:       {medians['search.run --help'] / heavy:.3f}")
    print(f"ratio config error / heavy imports: {medians['a config error'] / heavy:.3f}")


if __name__ == "__main__":
    main()
