"""Featurization speed: built-in VLA + RL token, and a pi0.5-size PI05 with random weights.

For each model: batch-1 latency (ms per call) and batch-64 throughput (observations/s) of one
featurization call (prefix pass + reference chunk [+ z_rl for the built-in model]), and the
first call's seconds (warm-up: kernels, allocator; compile and CUDA-graph capture for the fast
path).

`--models builtin-graphed` times the built-in model as training calls it, raw observations ->
`z_rl` + chunk through `rlt_features` in float32: the embedded default checkpoint (`--size
full`; a small random model with `--size small`) through `RLTFeaturizer` (eager) and through
`GraphedRLTFeaturizer` (one CUDA graph per batch bucket; on the CPU the same padded computation
runs eagerly, with no graph), then prints their ratio per batch size (`eager_over_graphed`).

pi0.5 runs along several paths (`--pi05-paths`):

- `eager`: `PI05FeatureModel` on the stock eager LeRobot code, from the policy batch, its
  outputs left on the device;
- `fast`: the same with the fast path (torch.compile, batch buckets, one CUDA graph per bucket
  on CUDA; the vision tower in bf16 for a bf16 policy: `bf16_vision`). It is the in-process
  featurizer's model, so on CUDA its graph also runs the fused RL token (`fuse_rl_token`);
- `in-process`: raw observations -> `z_rl` + chunk through `RLTFeaturizer` (fast path, a random
  RL token, computed in bf16 for a bf16 policy: `rl_token_dtype`), what the RL stage calls;
- `remote`: the same through `rpent-feature-server`'s `FeatureServer` and `RemoteFeatureModel`
  over loopback (a server process of this script, `--serve`, with its own fast-path model). As
  the server's default `--warm-up first` (`--server-warm-up`), it warms up the smallest batch
  size before it listens (`listening_after_s`: its start, cache load included) and each larger
  one on its first request; each remote row's `since_server_spawn_s` is the seconds from the
  spawn to the end of its first call, and the server's log lines show each bucket's warm-up.

The fast paths take every `PI05Options` field as a flag (eager stays stock). With
`--prompt-slots N` they keep only the prompt's first N of its 200 token slots (the stand-in
prompts fill 50). With `--dynamic-batch` the buckets above 1 share one compile.
`--compile-mode reduce-overhead` has torch record its own CUDA graphs instead of RPent's one graph
per bucket (`cuda_graph=False`; the RL token then runs eagerly after them), and
`--precompute False` recomputes the adaRMS modulations and the bf16 vision weights at every
call, and `--grouped-attention False` copies Gemma's key/value head to every query head as the
stock attention does: A/B baselines.

Every JSON line printed also goes to `--jsonl PATH` (appended, each tagged with `--label`), the
file the H200 runs commit (`bench/figures/pi05/*.jsonl`). pi0.5 fast-path rows carry the
bucket's warm-up (`source`: "compiled" or "cache", `first_compile_s`) and `since_start_s`, the
seconds from this process's start to the end of the row's first call; the compile cache lives
in `--compile-cache-dir` (default: the library's, `~/.cache/rpent/compile`), so a second run of
this script is the "second start" (and its `remote` path a feature-server restart). Every row
also carries `host_busy_cores`, the machine's CPU cores busy during its timed calls (all
processes: a feature server's compile workers too), and remote rows the server's milliseconds
of each timed call (`server_infer_ms_calls`).

The pi0.5 pre-processor here is a stand-in (images to the device, fixed random prompt tokens
filling a quarter of the 200 slots): the stock one needs the PaliGemma tokenizer.

    # CUDA, bf16, real sizes (pi0.5: gemma_2b + SigLIP So400m at 224 px, 2 cameras, 200 tokens)
    python bench/featurize.py --device cuda --dtype bfloat16 --size full
    # CPU, small sizes (a smoke run; pi0.5 shrunk to a 1-layer toy)
    python bench/featurize.py --device cpu --dtype float32 --size small --batch-sizes 1 8
    # the built-in model eager vs its CUDA graphs, at the batch sizes of a training loop
    python bench/featurize.py --device cuda --models builtin-graphed --batch-sizes 1 8 16

The built-in part needs torch only; the pi0.5 part needs the `pi` extra (lerobot + transformers)
and is skipped with a message when it is missing; the remote path needs the `remote` extra.
"""

import functools
import json
import logging
import os
import socket
import subprocess
import sys
import time
from contextlib import nullcontext
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Annotated, Literal

import numpy as np
import torch
import tyro

from rpent_agents.features.builtin import BuiltinVLA, BuiltinVLAConfig
from rpent_agents.features.checkpoint import DEFAULT_CHECKPOINT_DIR, load_checkpoint
from rpent_agents.features.graphed import GraphedRLTFeaturizer
from rpent_agents.features.norm import NormStats
from rpent_agents.features.pi05_options import PI05Options
from rpent_agents.features.protocol import RLTFeaturizer
from rpent_agents.features.rl_token import RLToken, RLTokenConfig
from rpent_agents.features.server import WarmUp

INSTRUCTION = "insert the peg in the hole"
SERVER_START_S = 600.0  # the server process builds its own pi0.5 before it listens
JSONL = {"path": None, "label": ""}  # --jsonl, --label


def emit(record):
    """Print one JSON line, and append it (tagged with the label) to --jsonl."""
    print(json.dumps(record), flush=True)
    if JSONL["path"] is not None:
        with JSONL["path"].open("a") as file:
            file.write(json.dumps({"label": JSONL["label"]} | record) + "\n")


def process_age_s():
    """Seconds since this process started (Linux: /proc)."""
    start_ticks = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19])
    uptime_s = float(Path("/proc/uptime").read_text().split()[0])
    return round(uptime_s - start_ticks / os.sysconf("SC_CLK_TCK"), 2)


def synchronized(call, device):
    start = time.perf_counter()
    call()
    if device.type == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - start


def host_cpu_ticks():
    """(busy, all) CPU ticks of the whole machine since it booted (Linux: /proc/stat)."""
    ticks = [int(tick) for tick in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = ticks[3] + ticks[4]  # idle, iowait
    return sum(ticks) - idle, sum(ticks)


def timed(call, device, iterations):
    """(first call's seconds, the process's age after it, mean seconds of `iterations` calls
    after a second warm-up call, the machine's busy cores during those calls: every process's,
    a server's and its compile workers' included)."""
    first = synchronized(call, device)  # warm-up (kernels, allocator; compile and capture)
    age_s = process_age_s()
    call()
    busy_before, all_before = host_cpu_ticks()
    mean_s = synchronized(lambda: [call() for _ in range(iterations)], device) / iterations
    busy_after, all_after = host_cpu_ticks()
    busy_share = (busy_after - busy_before) / max(all_after - all_before, 1)
    return first, age_s, mean_s, round(busy_share * os.cpu_count(), 2)


def autocast(device, dtype):
    if dtype == torch.float32:
        return nullcontext()
    return torch.autocast(device.type, dtype=dtype)


def raw_observations(count, size_px):
    rng = np.random.default_rng(0)
    return [
        {
            "image": rng.integers(0, 256, (size_px, size_px, 3), dtype=np.uint8),
            "wrist_image": rng.integers(0, 256, (size_px, size_px, 3), dtype=np.uint8),
            "state": rng.normal(size=9).astype(np.float32),
        }
        for _ in range(count)
    ]


def random_builtin_models(size, device):
    config = BuiltinVLAConfig() if size == "full" else BuiltinVLAConfig(dim=128, patch_size=16)
    vla = BuiltinVLA(config, NormStats.identity(9, 8)).to(device).eval()
    rl_token = RLToken(RLTokenConfig(dim=config.dim, prefix_seq_len=256)).to(device).eval()
    return vla, rl_token


def builtin_call(size, device, dtype, batch_size):
    vla, rl_token = random_builtin_models(size, device)
    observations = raw_observations(batch_size, vla.config.image_size)

    @torch.no_grad()
    def call():
        with autocast(device, dtype):
            prefix = vla.featurize(observations, [INSTRUCTION] * batch_size)
            z_rl = rl_token.encode(prefix.prefix_tokens, prefix.pad_mask)
        return z_rl.float().cpu().numpy(), prefix.ref_chunk.float().cpu().numpy()

    return call


def builtin_graphed_report(size, device, batch_sizes, iterations):
    """`--models builtin-graphed`: eager and graphed rows per batch size, then their ratio."""
    if size == "full":
        vla, rl_token, _ = load_checkpoint(DEFAULT_CHECKPOINT_DIR, device)
    else:
        vla, rl_token = random_builtin_models(size, device)
    featurizers = {
        "eager": RLTFeaturizer(vla.eval(), rl_token),
        "graphed": GraphedRLTFeaturizer(vla.eval(), rl_token),
    }
    graphed_path = "cuda graphs" if featurizers["graphed"].use_cuda_graphs else "padded eager"
    rows = []
    for batch_size in batch_sizes:
        latency_ms = {}
        for path, featurizer in featurizers.items():
            make = functools.partial(rlt_call, featurizer, vla.config.image_size)
            name = f"builtin rlt_features {path} (float32)"
            rows += report(name, [batch_size], make, device, iterations)
            latency_ms[path] = rows[-1]["latency_ms"]
        ratio = round(latency_ms["eager"] / latency_ms["graphed"], 2)
        emit(
            {
                "model": "builtin rlt_features",
                "batch": batch_size,
                "graphed_path": graphed_path,
                "eager_over_graphed": ratio,
            }
        )
    return rows


def pi05_policy(size, device, dtype):
    from lerobot.configs.types import FeatureType, PolicyFeature
    from lerobot.policies.pi05 import modeling_pi05
    from lerobot.policies.pi05.configuration_pi05 import PI05Config

    resolution = 224 if size == "full" else 32
    if size == "small":
        tiny = modeling_pi05.GemmaConfig(64, 1, 128, 2, 1, 32)
        modeling_pi05.get_gemma_config = lambda variant: tiny
        build = modeling_pi05.PaliGemmaForConditionalGenerationWithPiGemma

        def small_paligemma(config):
            vision = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=1)
            vision.update(num_attention_heads=2, patch_size=16, projection_dim=64)
            config.vision_config.update(vision)
            return build(config=config)

        modeling_pi05.PaliGemmaForConditionalGenerationWithPiGemma = small_paligemma
    visual = PolicyFeature(FeatureType.VISUAL, (3, resolution, resolution))
    config = PI05Config(
        device=str(device),
        dtype="bfloat16" if dtype == torch.bfloat16 else "float32",
        image_resolution=(resolution, resolution),
        input_features={
            "observation.images.base": visual,
            "observation.images.wrist": visual,
            "observation.state": PolicyFeature(FeatureType.STATE, (9,)),
        },
        output_features={"action": PolicyFeature(FeatureType.ACTION, (8,))},
    )
    with torch.device(device):
        return modeling_pi05.PI05Policy(config), resolution


def prompt_tokens(policy, batch_size, device):
    slots = policy.config.tokenizer_max_length
    generator = torch.Generator().manual_seed(batch_size)
    tokens = torch.randint(0, 1000, (batch_size, slots), generator=generator)
    mask = torch.zeros(batch_size, slots, dtype=torch.bool)
    mask[:, : slots // 4] = True  # a typical prompt fills a quarter of the 200 slots
    return {
        "observation.language.tokens": tokens.to(device),
        "observation.language.attention_mask": mask.to(device),
    }


def stand_in_preprocessor(policy, device):
    """What the stock pre-processor gives the model, minus the tokenizer (module doc)."""

    def preprocess(batch):
        inputs = {key: batch[key].to(device) for key in policy.config.image_features}
        return inputs | prompt_tokens(policy, len(batch["task"]), device)

    return preprocess


def policy_batch_call(model, resolution, device, batch_size):
    batch = {
        key: torch.rand(batch_size, 3, resolution, resolution, device=device)
        for key in model.policy.config.image_features
    }
    batch |= prompt_tokens(model.policy, batch_size, device)

    def call():  # on the device: the timers synchronise (the prefix is ~0.5 GB at batch 64)
        features = model.features_from_policy_batch(batch)
        return features.prefix_tokens, features.ref_chunk

    return call


def rlt_call(featurizer, resolution, batch_size):
    observations = raw_observations(batch_size, resolution)
    return lambda: featurizer.rlt_features(observations, [INSTRUCTION] * batch_size)


def remote_call(remote, resolution, server_ms, batch_size):
    """`rlt_call` on a `RemoteFeatureModel`, each call's server-side milliseconds appended
    to `server_ms`."""
    call = rlt_call(remote, resolution, batch_size)

    def call_and_note():
        features = call()
        server_ms.append(remote.last_server_infer_ms)
        return features

    return call_and_note


def pi05_featurizer(policy, device, options):
    """`RLTFeaturizer` of a `PI05FeatureModel` with `options` (`PI05Options`), the stand-in
    pre-processor and a random RL token."""
    from rpent_agents.features.pi05 import PI05FeatureModel

    model = PI05FeatureModel(
        policy, stand_in_preprocessor(policy, device), lambda chunk: chunk, options
    )
    rl_token = RLToken(RLTokenConfig(dim=model.prefix_dim, prefix_seq_len=1024))
    rl_token_dtype = torch.bfloat16 if policy.config.dtype == "bfloat16" else torch.float32
    return RLTFeaturizer(model, rl_token, rl_token_dtype)


def serve(args, device, dtype):
    """`--serve PORT`: the feature server of the remote path, a process of its own, warmed up
    as `rpent-feature-server --warm-up` says (`--server-warm-up`)."""
    from rpent_agents.features.server import FeatureServer, FeatureServerPolicy, warm_up_sizes

    def build_policy():  # on the server's model thread, as rpent-feature-server builds it
        featurizer = pi05_featurizer(pi05_policy(args.size, device, dtype)[0], device, args.pi05)
        if sizes := warm_up_sizes(args.batch_sizes, args.server_warm_up):
            featurizer.feature_model.warm_up(sizes)
        return FeatureServerPolicy(featurizer)

    FeatureServer(build_policy, port=args.serve).serve_forever()


def start_server():
    """A `--serve` process with the same model on a free loopback port, its client, and this
    process's age when it was spawned.

    The process runs this script's own command line with `--serve PORT` added: the same model,
    sizes and options.
    """
    from rpent_agents.features.remote import RemoteFeatureModel

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    command = [sys.executable, __file__, *sys.argv[1:], "--serve", str(port)]
    spawn_age_s = process_age_s()
    server, started = subprocess.Popen(command), time.monotonic()
    deadline = started + SERVER_START_S
    while True:
        try:
            remote = RemoteFeatureModel("127.0.0.1", port, connect_timeout_s=5.0)
            listening_s = round(time.monotonic() - started, 2)
            emit({"model": "pi0.5 feature server", "listening_after_s": listening_s})
            return server, remote, spawn_age_s
        except ConnectionError:
            if server.poll() is not None:
                raise RuntimeError(f"the feature server exited with {server.returncode}") from None
            if time.monotonic() > deadline:
                server.terminate()
                raise


def pi05_report(policy, resolution, device, args):
    eager = pi05_featurizer(policy, device, PI05Options(fast_path=False)).feature_model
    in_process = pi05_featurizer(policy, device, args.pi05)
    fast = in_process.feature_model
    makers = {
        "eager": lambda batch: policy_batch_call(eager, resolution, device, batch),
        "fast": lambda batch: policy_batch_call(fast, resolution, device, batch),
        "in-process": lambda batch: rlt_call(in_process, resolution, batch),
    }
    server, spawn_age_s, rows, server_ms = None, None, [], None
    try:
        for path in args.pi05_paths:
            if path == "remote":  # started after the in-process rows: it reads their compiles
                server, remote, spawn_age_s = start_server()
                server_ms = []
                makers["remote"] = functools.partial(remote_call, remote, resolution, server_ms)
            name = f"pi0.5 (PI05Policy) {path}"
            warmups = fast.warmup if path in ("fast", "in-process") else None
            rows += report(
                name,
                args.batch_sizes,
                makers[path],
                device,
                args.iterations,
                warmups,
                spawn_age_s,
                server_ms if path == "remote" else None,
            )
    finally:
        if server is not None:
            server.terminate()
            server.wait()
    emit(
        {
            "model": "pi0.5 fast path",
            "compile_mode": fast.options.compile_mode,
            "cuda_graph": fast.options.cuda_graph,
            "precompute": fast.options.precompute,
            "grouped_attention": fast.options.grouped_attention,
            "compile_cache": str(fast.options.compile_cache_dir),
            "warmup": {bucket: asdict(warmup) for bucket, warmup in fast.warmup.items()},
            "compile_times_s": dynamo_compile_times(),
        }
    )
    return rows


def dynamo_compile_times(top=12):
    """torch's compile-phase timers of this process (seconds, summed), the largest first."""
    from torch._dynamo.utils import compilation_time_metrics

    totals = {name: sum(values) for name, values in compilation_time_metrics.items()}
    ranked = sorted(totals, key=totals.get, reverse=True)[:top]
    return {name: round(totals[name], 2) for name in ranked}


def report(
    name,
    batch_sizes,
    make_call,
    device,
    iterations,
    warmups=None,
    spawn_age_s=None,
    server_ms=None,
):
    """One row per batch size; `warmups`: the fast-path model's, for its bucket's warm-up;
    `spawn_age_s`: this process's age when the server answering the calls was spawned;
    `server_ms`: the list the remote calls append the server's milliseconds to (a row gets
    the mean of its timed calls', `server_infer_ms`)."""
    rows = []
    for batch_size in batch_sizes:
        known = set(warmups or ())
        first, age_s, seconds, busy_cores = timed(make_call(batch_size), device, iterations)
        rows.append(
            {
                "model": name,
                "batch": batch_size,
                "latency_ms": round(1000 * seconds, 2),
                "obs_per_s": round(batch_size / seconds, 1),
                "first_call_s": round(first, 2),
                "since_start_s": age_s,
                "host_busy_cores": busy_cores,
            }
        )
        if spawn_age_s is not None:
            rows[-1]["since_server_spawn_s"] = round(age_s - spawn_age_s, 2)
        if server_ms:  # the timed calls' (a trend tells a start-up transient from a steady cost)
            rows[-1]["server_infer_ms"] = round(float(np.mean(server_ms[-iterations:])), 2)
            rows[-1]["server_infer_ms_calls"] = [round(ms, 1) for ms in server_ms[-iterations:]]
        for bucket in set(warmups or ()) - known:  # warmed up by this row's first call
            rows[-1] |= {"bucket": bucket, "source": warmups[bucket].source}
            first_compile_s = warmups[bucket].first_compile_s
            rows[-1]["first_compile_s"] = first_compile_s and round(first_compile_s, 2)
        emit(rows[-1])
    return rows


@dataclass
class ModelArgs:
    """The models timed: device, precision, size, batch sizes and pi0.5's fast-path options."""

    device: str = field(default_factory=lambda: "cuda" if torch.cuda.is_available() else "cpu")
    dtype: Literal["bfloat16", "float32"] = "bfloat16"
    size: Literal["full", "small"] = "full"
    """full: real sizes; small: a smoke run (pi0.5 shrunk to a 1-layer toy)."""
    batch_sizes: tuple[int, ...] = (1, 64)
    # Spelled out (the library's choices on the fast path) so the header line records them
    pi05: Annotated[PI05Options, tyro.conf.OmitArgPrefixes] = field(
        default_factory=lambda: PI05Options(
            fast_path=True, compile_mode="default", precompute=True, grouped_attention=True
        )
    )
    """pi0.5 fast paths: the model's options (the eager path stays stock)."""


@dataclass
class FeaturizeArgs(ModelArgs):
    """Featurization speed: built-in VLA + RL token, and a pi0.5-size PI05 with random weights."""

    iterations: int = 10
    models: tuple[Literal["builtin", "builtin-graphed", "pi05"], ...] = ("builtin", "pi05")
    """(module doc)"""
    pi05_paths: tuple[Literal["eager", "fast", "in-process", "remote"], ...] = (
        "eager",
        "fast",
        "in-process",
        "remote",
    )
    server_warm_up: WarmUp = "first"
    """remote path: the server's --warm-up (first: the smallest size before it listens)."""
    jsonl: Path | None = None
    """Append every JSON line to this file."""
    label: str = ""
    """Tags the --jsonl lines (e.g. the run)."""
    serve: int | None = None
    """(internal) the remote path's server process, on this port."""


def main():
    args = tyro.cli(FeaturizeArgs)
    if args.jsonl is not None:
        args.jsonl.parent.mkdir(parents=True, exist_ok=True)
        JSONL.update(path=args.jsonl, label=args.label)
    logging.basicConfig(level=logging.WARNING)
    logging.getLogger("rpent_agents.features.pi05_fast_path").setLevel(logging.INFO)
    device, dtype = torch.device(args.device), getattr(torch, args.dtype)
    torch.manual_seed(0)
    if args.serve:
        serve(args, device, dtype)
        return
    header = {"device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu"}
    header.update(dtype=args.dtype, size=args.size, torch=torch.__version__)
    options = args.pi05
    header.update(prompt_slots=options.prompt_slots, dynamic_batch=options.dynamic_batch)
    header.update(precompute=options.precompute, grouped_attention=options.grouped_attention)
    emit(header | {"started_s": process_age_s()})
    rows = []
    if "builtin" in args.models:
        make = lambda batch: builtin_call(args.size, device, dtype, batch)  # noqa: E731
        rows += report("builtin VLA + RL token", args.batch_sizes, make, device, args.iterations)
    if "builtin-graphed" in args.models:
        rows += builtin_graphed_report(args.size, device, args.batch_sizes, args.iterations)
    if "pi05" in args.models:
        try:
            policy, resolution = pi05_policy(args.size, device, dtype)
        except ImportError as error:
            emit({"model": "pi05", "skipped": f"needs the pi extra: {error}"})
        else:
            params = sum(parameter.numel() for parameter in policy.parameters())
            emit({"model": "pi05", "parameters": params, "built_s": process_age_s()})
            rows += pi05_report(policy, resolution, device, args)
    print("| model | batch | latency ms | obs/s | first call s |\n|---|---|---|---|---|")
    for row in rows:
        cells = [row[key] for key in ("model", "batch", "latency_ms", "obs_per_s", "first_call_s")]
        print("| " + " | ".join(map(str, cells)) + " |")


if __name__ == "__main__":
    main()
