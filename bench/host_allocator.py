"""A step's speed and the pages it faults in, with glibc's allocator left alone and held to
fixed thresholds (`trainables.host_memory`), side by side.

Each side runs in a fresh process (the thresholds are a process's), the sides in turn,
`--repeats` times: the main search's knee's step (small CNN, 32 px, batch 32, accumulation
4, Adam, one thread; `--batch-size B`: batches of B, no accumulation; `--channels-last`:
the knee's layout) after 10 warm-up
steps, 60 steps timed. The sides: left alone; the thresholds only (the hold until
2026-11-27's docs/RESULTS.md section 27: blocks over 32 MiB still mapped afresh every
time); the trim threshold at 256 MiB (the hold until section 41: a step that frees more
gives the heap's top back and faults it in again); held (`hold_host_allocator`: the
thresholds and no block mapped apart). Printed:
each run's images per second and minor page faults a step, the medians, and the ratios to
left alone.

    python bench/host_allocator.py [--repeats 3] [--batch-size 512] [--channels-last]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

# The step loop, in a fresh process after `before` (python source), prints JSON; the test
# of trainables.host_memory runs it too.
LOOP = """
import json, resource, time, torch
from trainables.host_memory import hold_host_allocator
from trainables.models import build_model
{before}
torch.set_num_threads(1)
model = build_model("small_cnn", 2, 32).to(memory_format={layout})
optimizer = torch.optim.Adam(model.parameters(), 1e-3)
pixels = torch.randn({batch}, 3, 32, 32).to(memory_format={layout})
labels = torch.randint(0, 2, ({batch},))
def step():
    for _ in range({accumulation}):
        torch.nn.functional.cross_entropy(model(pixels), labels).backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
for _ in range(10):
    step()
faults, started = resource.getrusage(resource.RUSAGE_SELF).ru_minflt, time.perf_counter()
for _ in range({steps}):
    step()
seconds = time.perf_counter() - started
faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults
print(json.dumps({{"images_per_s": {steps} * {batch} * {accumulation} / seconds,
                  "faults_per_step": faults / {steps}}}))
"""
HELD = "assert hold_host_allocator()"
# the hold before section 27: glibc's two thresholds, blocks above 32 MiB still mapped apart
THRESHOLDS_ONLY = "from trainables.host_memory import fix_thresholds; assert fix_thresholds()"
# the hold before section 41: the heap's free top past 256 MiB given back
TRIM_AT_256_MIB = f"""{HELD}
from trainables.host_memory import _M_TRIM_THRESHOLD, _c_library
assert _c_library().mallopt(_M_TRIM_THRESHOLD, 256 << 20) == 1"""
SIDES = {"left alone": "", "thresholds only": THRESHOLDS_ONLY, "trim at 256 MiB": TRIM_AT_256_MIB,
         "held": HELD}  # fmt: skip
KNEE_STEP = (32, 4)  # the main search's knee: batches of 32, 4 a step
TIMED_STEPS = 60  # after 10 warm-up steps: enough for a speed; a page count needs fewer


def one_run(
    before: str = "",
    batch: int = 32,
    accumulation: int = 4,
    steps: int = TIMED_STEPS,
    channels_last: bool = False,
) -> dict[str, float]:
    """The loop in a fresh process after `before`, on batches of `batch`, `accumulation` a
    step, `steps` steps timed after the warm-up, channels-last or contiguous: its images
    per second and minor page faults a step."""
    layout = "torch.channels_last" if channels_last else "torch.contiguous_format"
    source = LOOP.format(before=before, batch=batch, accumulation=accumulation, steps=steps,
                         layout=layout)  # fmt: skip
    done = subprocess.run([sys.executable, "-c", source], cwd=REPO,
                          capture_output=True, text=True, check=False)  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"the step loop failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--batch-size", type=int,
                        help="batches of this many images, one a step (default: the knee's "
                        "32, four a step)")  # fmt: skip
    parser.add_argument("--channels-last", action="store_true",
                        help="the model and its batches channels-last (NHWC)")  # fmt: skip
    args = parser.parse_args(argv)
    batch, accumulation = (args.batch_size, 1) if args.batch_size else KNEE_STEP
    runs: dict[str, list[dict[str, float]]] = {side: [] for side in SIDES}
    for repeat in range(args.repeats):
        for side, before in SIDES.items():
            run = one_run(before, batch, accumulation, channels_last=args.channels_last)
            runs[side].append(run)
            print(f"{repeat + 1} {side:15s} {run['images_per_s']:7.0f} images/s "
                  f"{run['faults_per_step']:9.1f} page faults a step", flush=True)  # fmt: skip
    medians = {side: statistics.median(run["images_per_s"] for run in done)
               for side, done in runs.items()}  # fmt: skip
    for side, value in medians.items():
        print(f"median {side:15s} {value:7.0f} images/s, "
              f"{value / medians['left alone']:.3f} of left alone")  # fmt: skip
    print(f"held / thresholds only: {medians['held'] / medians['thresholds only']:.3f}")
    print(f"held / trim at 256 MiB: {medians['held'] / medians['trim at 256 MiB']:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
