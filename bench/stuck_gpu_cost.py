"""CPU of one ``stuck_gpu.detect`` over a fleet of whole GPUs or of NVIDIA MIG instances (session 19, helper A).

64 nodes x 8 GPUs, each whole (512 samples) or cut into 7 MIG instances sharing its UUID (3,584 samples); one
replica on every fourth GPU (or instance); GPU 1 pinned at 99 % while its replicas make no progress (hang), GPU 2
carrying XID 79 (drain class), observed over two ticks. Prints the candidates found and the median of ``--repeats``
process-CPU timings of ``--calls`` calls, in ms per call. Run it in a tree (``PYTHONPATH=<tree>``) to compare.

    .venv/bin/python bench/stuck_gpu_cost.py whole
    .venv/bin/python bench/stuck_gpu_cost.py mig
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path.cwd()))

from collector.samples import GpuSample, ReplicaSample
from collector.state import FleetState
from detectors import stuck_gpu
from detectors.thresholds import DEFAULT
from tests.unit.detectors.detector_fleet import gpu, replica


def fleet(mig: bool) -> FleetState:
    state = FleetState()
    for t in (0.0, 5.0):
        replicas: list[ReplicaSample] = []
        gpus: list[GpuSample] = []
        for n in range(64):
            node = f"node-{n}"
            for g in range(8):
                for p in range(7) if mig else [None]:
                    pod = f"r-{n}-{g}-{p}" if (g + (p or 0)) % 4 == 0 else None
                    gpus.append(
                        gpu(
                            node,
                            t,
                            index=f"{g}/{p}" if p is not None else str(g),
                            uuid=f"GPU-{n}-{g}",
                            utilisation=0.99 if g == 1 else 0.5,
                            mig_instance=None if p is None else str(p),
                            pod=pod,
                            namespace="ml" if pod else None,
                            last_xid=79 if g == 2 else 0,
                        )
                    )
                    if pod:
                        replicas.append(replica(pod, t, deployment="d", node=node, generation_tokens=5.0))
        state.observe(replicas, gpus, now=t)
    return state


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("fleet", choices=["whole", "mig"])
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    state = fleet(args.fleet == "mig")
    runs = []
    found = 0
    for _ in range(args.repeats):
        t0 = time.process_time()
        for _ in range(args.calls):
            found = len(stuck_gpu.detect(state, thresholds=DEFAULT, now=10.0))
        runs.append((time.process_time() - t0) / args.calls * 1e3)
    print(f"{args.fleet} candidates={found} ms_per_call={statistics.median(runs):.3f}")


if __name__ == "__main__":
    main()
