"""Where one pi0.5 fast-path call spends its time: torch.profiler over a warm call, per batch.

For each batch size: warm the bucket up (compile, or load it from the compile cache: a
`warmup` row with its seconds, their source and the process's age after it, so a run after
bench/featurize.py measures a second start; `compile_times_s`: torch's compile-phase timers,
where a cache load spends its seconds), then profile `--calls` calls of each path and read
the trace. The paths (`path` in each row) are bench/featurize.py's: `fast`,
`PI05FeatureModel.features_from_policy_batch` (outputs left on the device), and `in-process`,
raw observations -> `z_rl` + chunk through `RLTFeaturizer` (host stacking, pre-processing, the
RL token in the policy's dtype, the read back):

- `kernel` rows: device time per kernel name (ms per call, launches per call, share), the top
  `--top`;
- a `kernel_classes` row: the same summed by class (matmul, attention, inductor's Triton
  kernels, copies, other), what decides the lever (bf16 vision tower, fused attention, ...);
- a `timeline` row: per call, the wall time on the CPU, the device's busy time (the union of
  its kernels), its idle gaps between kernels (sum, count, the largest with the kernels around
  them) and the CPU time in launch calls (`cudaLaunchKernel`, `cudaGraphLaunch`, ...).

On the CPU (a smoke run) the "kernels" are the CPU ops and there is no launch time. The model
takes the `PI05Options` flags of bench/featurize.py, its buckets being the batch sizes profiled
(they replace `--batch-buckets`).

    # H200, bf16, the full-size model (random weights), CUDA graphs as the library runs them
    python bench/pi05_profile.py --device cuda --size full --batch-sizes 1 64 \
        --jsonl bench/figures/pi05/h200_profile.jsonl
    # the same without CUDA graphs: every launch and its gaps visible
    python bench/pi05_profile.py --compile-mode max-autotune-no-cudagraphs ...
"""

import json
import logging
import re
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass, replace
from pathlib import Path

import torch
import tyro
from featurize import (
    ModelArgs,
    dynamo_compile_times,
    pi05_featurizer,
    pi05_policy,
    policy_batch_call,
    process_age_s,
    rlt_call,
    synchronized,
)

from rpent_agents.features.buckets import bucket_size

KERNEL_CLASSES = {  # first match wins
    "attention": r"flash|fmha|attention|sdpa|softmax",
    "matmul": r"gemm|cutlass|xmma|nvjet|cublas|matmul|^aten::(mm|bmm|addmm|linear)",
    "copy": r"memcpy|memset|copy|^aten::(cat|clone|contiguous)",
    "inductor triton": r"^triton_",
}
LAUNCH_CALLS = r"cudaLaunchKernel|cudaGraphLaunch|cuLaunchKernel|cudaLaunchKernelExC|cudaMemcpy"
GAPS_LISTED = 5


def kernel_class(name):
    for label, pattern in KERNEL_CLASSES.items():
        if re.search(pattern, name, re.IGNORECASE):
            return label
    return "other"


def trace_events(profiler):
    """The profiler's chrome-trace events (complete events only)."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "trace.json"
        profiler.export_chrome_trace(str(path))
        events = json.loads(path.read_text())["traceEvents"]
    return [event for event in events if event.get("ph") == "X" and "dur" in event]


def device_events(events):
    """Kernels, device copies and sets on the GPU; on the CPU, the CPU ops (a smoke run)."""
    on_device = [e for e in events if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    return on_device or [e for e in events if e.get("cat") == "cpu_op"]


def kernel_rows(kernels, calls, top):
    total_us, launches = defaultdict(float), defaultdict(int)
    for event in kernels:
        total_us[event["name"]] += event["dur"]
        launches[event["name"]] += 1
    everything = sum(total_us.values()) or 1.0
    ranked = sorted(total_us, key=total_us.get, reverse=True)
    rows = [
        {
            "kind": "kernel",
            "name": name[:160],
            "class": kernel_class(name),
            "ms_per_call": round(total_us[name] / calls / 1000, 4),
            "launches_per_call": launches[name] / calls,
            "share": round(total_us[name] / everything, 4),
        }
        for name in ranked[:top]
    ]
    classes = defaultdict(float)
    for name, microseconds in total_us.items():
        classes[kernel_class(name)] += microseconds
    summary = {label: round(us / calls / 1000, 3) for label, us in sorted(classes.items())}
    distinct = {"kind": "kernel_classes", "ms_per_call": summary, "distinct_kernels": len(ranked)}
    return rows, distinct


def busy_and_gaps(kernels):
    """(busy microseconds as the union of intervals, gaps between them as (us, before, after))."""
    spans = sorted((e["ts"], e["ts"] + e["dur"], e["name"]) for e in kernels)
    busy, gaps = 0.0, []
    run_start, run_end, last_name = spans[0]
    for start, end, name in spans[1:]:
        if start > run_end:
            busy += run_end - run_start
            gaps.append((start - run_end, last_name, name))
            run_start, run_end, last_name = start, end, name
        elif end > run_end:
            run_end, last_name = end, name
    busy += run_end - run_start
    return busy, gaps


def timeline_row(events, kernels, calls, wall_s):
    busy_us, gaps = busy_and_gaps(kernels)
    launches = [e for e in events if re.search(LAUNCH_CALLS, e["name"])]
    largest = sorted(gaps, reverse=True)[:GAPS_LISTED]
    return {
        "kind": "timeline",
        "wall_ms_per_call": round(1000 * wall_s / calls, 3),
        "device_busy_ms_per_call": round(busy_us / calls / 1000, 3),
        "device_idle_ms_per_call": round(sum(gap for gap, _, _ in gaps) / calls / 1000, 3),
        "gaps_per_call": len(gaps) / calls,
        "largest_gaps": [
            {"us": round(gap, 1), "after": before[:80], "before": after[:80]}
            for gap, before, after in largest
        ],
        "launch_calls_per_call": len(launches) / calls,
        "launch_cpu_ms_per_call": round(sum(e["dur"] for e in launches) / calls / 1000, 3),
    }


def profile_calls(call, device, calls):
    """`calls` calls of `call` under torch.profiler: (trace events, wall seconds)."""
    activities = [torch.profiler.ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    with torch.profiler.profile(activities=activities) as profiler:
        start = time.perf_counter()
        for _ in range(calls):
            call()
        if device.type == "cuda":
            torch.cuda.synchronize()
        wall_s = time.perf_counter() - start
    return trace_events(profiler), wall_s


def profile_batch(featurizer, resolution, device, batch_size, args):
    model = featurizer.feature_model
    calls = {
        "fast": policy_batch_call(model, resolution, device, batch_size),
        "in-process": rlt_call(featurizer, resolution, batch_size),
    }
    # The bucket's warm-up: compile or compile cache, capture.
    first_call_s, since_start_s = synchronized(calls["fast"], device), process_age_s()
    warmup = model.warmup[bucket_size(batch_size, model.options.batch_buckets)]
    head = {"batch": batch_size, "compile_mode": model.options.compile_mode}
    first = {"kind": "warmup", "first_call_s": round(first_call_s, 2), "source": warmup.source}
    first |= {"first_compile_s": warmup.first_compile_s, "since_start_s": since_start_s}
    first |= {"compile_times_s": dynamo_compile_times()}  # this process's, summed so far
    rows = [head | first]
    for path, call in calls.items():
        call()
        events, wall_s = profile_calls(call, device, args.calls)
        kernels = device_events(events)
        kernel_table, classes = kernel_rows(kernels, args.calls, args.top)
        timeline = timeline_row(events, kernels, args.calls, wall_s)
        rows += [head | {"path": path} | row for row in (timeline, classes, *kernel_table)]
    return rows


@dataclass
class ProfileArgs(ModelArgs):
    """Where one pi0.5 fast-path call spends its time: torch.profiler over warm calls."""

    calls: int = 3
    """Calls profiled per batch size."""
    top: int = 25
    """Kernels listed per batch size."""
    jsonl: Path | None = None
    """Append the rows to this file too."""


def main():
    args = tyro.cli(ProfileArgs)
    logging.basicConfig(level=logging.WARNING)
    logging.getLogger("rpent_agents.features.pi05_fast_path").setLevel(logging.INFO)
    device, dtype = torch.device(args.device), getattr(torch, args.dtype)
    torch.manual_seed(0)
    policy, resolution = pi05_policy(args.size, device, dtype)
    options = replace(args.pi05, batch_buckets=args.batch_sizes)
    featurizer = pi05_featurizer(policy, device, options)
    for batch_size in args.batch_sizes:
        for row in profile_batch(featurizer, resolution, device, batch_size, args):
            line = json.dumps({"bench": "pi05_profile", "size": args.size} | row)
            print(line, flush=True)
            if args.jsonl:
                args.jsonl.parent.mkdir(parents=True, exist_ok=True)
                with args.jsonl.open("a") as file:
                    file.write(line + "\n")


if __name__ == "__main__":
    main()
