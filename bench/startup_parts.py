"""What the parts of a search's fixed start-up cost, each timed in a fresh process.

docs/RESULTS.md (section 4, "The search's fixed part") explains where a search's first
seconds go and why each part runs where it does (on a thread beside Ray's start, only in
the processes that need it, or not at all). These are its figures: each part timed alone in
its own fresh Python process (what a search pays once per process), the parts in turn,
`--repeats` times, printed as the median and the range of each:

- drawing the main search's 2,000 synthetic images (32 px) into an empty cache, and
  reading them back from a filled one;
- `import torchvision.datasets` after torch (it loads `torch._dynamo`; only Oxford-IIIT
  Pet needs it);
- the first `torch.optim` optimizer of a process (PyTorch imports `torch._dynamo` to keep
  it out of `Optimizer.__init__`);
- one CPU forward of the small CNN, against the first forward on PyTorch's meta device
  (an `nn.Linear`), which loads sympy and hundreds of modules more;
- `ray.init()` of a local two-CPU cluster with nothing else running, and its
  `ray.shutdown()`;
- `import search.execute` (MLflow, Optuna, Tune, the report's libraries) once torch and Ray
  are in.

    python bench/startup_parts.py [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

# Each snippet runs in a fresh process and prints {part: seconds} as JSON; CACHE is
# replaced by a cache folder (empty, or filled by a first run).
_DRAW = """
import json, time
from trainables.data import DataSettings, prepare_data
settings = DataSettings(source="synthetic", image_size=32, train_per_class=600,
                        val_per_class=200, test_per_class=200, seed=0, cache_dir={cache!r})
started = time.perf_counter()
prepare_data(settings)
print(json.dumps({{{part!r}: time.perf_counter() - started}}))
"""
SNIPPETS = {
    "torchvision": """
import json, time, torch
started = time.perf_counter()
import torchvision.datasets
print(json.dumps({"import torchvision.datasets (after torch)": time.perf_counter() - started}))
""",
    "optimizer": """
import json, time, torch
model = torch.nn.Linear(8, 2)
started = time.perf_counter()
torch.optim.SGD(model.parameters(), lr=0.1)
print(json.dumps({"the first torch.optim optimizer": time.perf_counter() - started}))
""",
    "forwards": """
import json, time, torch
from trainables.models import build_model
model = build_model("small_cnn", 2, 32)
started = time.perf_counter()
with torch.no_grad():
    model(torch.zeros(1, 3, 32, 32))
cpu = time.perf_counter() - started
started = time.perf_counter()
torch.nn.Linear(8, 2, device="meta")(torch.empty(1, 8, device="meta"))
print(json.dumps({"a CPU forward of the small CNN": cpu,
                  "the first forward on the meta device (nn.Linear)":
                  time.perf_counter() - started}))
""",
    "ray": """
import json, time, ray
started = time.perf_counter()
ray.init(num_cpus=2, include_dashboard=False, configure_logging=False, address="local")
up = time.perf_counter() - started
started = time.perf_counter()
ray.shutdown()
print(json.dumps({"ray.init (local, 2 CPUs, idle)": up,
                  "ray.shutdown()": time.perf_counter() - started}))
""",
    "search modules": """
import json, time, torch, ray
started = time.perf_counter()
import search.execute
print(json.dumps({"import search.execute (after torch and Ray)": time.perf_counter() - started}))
""",
}


def run_snippet(code: str) -> dict[str, float]:
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True,
                          text=True, check=True)  # fmt: skip
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    times: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="startup-parts-") as folder:
        filled = Path(folder) / "filled"
        run_snippet(_DRAW.format(cache=str(filled), part="fill"))
        for repeat in range(args.repeats):
            empty = Path(folder) / f"empty-{repeat}"
            snippets = [
                _DRAW.format(cache=str(empty), part="draw 2,000 synthetic images (empty cache)"),
                _DRAW.format(cache=str(filled), part="read them back (filled cache)"),
                *SNIPPETS.values(),
            ]
            for code in snippets:
                for part, seconds in run_snippet(code).items():
                    times.setdefault(part, []).append(seconds)
    print(f"seconds, median (range) of {args.repeats} fresh processes each")
    for part, values in times.items():
        print(f"  {part:50s} {statistics.median(values):6.3f}  "
              f"({min(values):.3f}-{max(values):.3f})")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
