"""The compile cache of the fast path: `torch.compile`'s work kept on disk, paid once per machine.

A fast-path model (`PI05FeatureModel`) compiles each batch bucket on its first call. Here that
compile runs with torch's own caches (inductor's FX graph cache, the AOTAutograd cache, Triton's
kernel cache) pointed into a folder RPent owns, and the bucket's artifacts are also saved as one
"mega-cache" file (`torch.compiler.save_cache_artifacts`). The next process with the same model
on the same machine finds them: dynamo traces the function again, but nothing is lowered or
built, and the warm-up reports `source="cache"`. A warm-up whose mega-cache is there loads its
kernels in this process, without inductor's compile workers: torch would start one process per
core for them, whose start-up slowed the first seconds of calls after a restart (a feature
server's batch-1 calls: bench/RESULTS.md, issue 28); a cache that turns out not to serve the
bucket then compiles it in this process only, slower.

Layout, one folder per model key (a hash of the facts that shape the compiled code: model
architecture and config, dtypes, device kind, torch version, compile mode)::

    <root>/<model>-<key>/key.json           the facts, readable
    <root>/<model>-<key>/<graphs>.json      the graphs' first-ever compile seconds
    <root>/<model>-<key>/<graphs>.artifacts  their mega-cache (portable to a twin machine)
    <root>/<model>-<key>/inductor/          torch's caches while compiling (C++/Triton builds)
    <root>/<model>-<key>/manifest.json      the size of every file above after each warm-up

`<graphs>` names what a bucket's calls compile: `bucket-<n>` for graphs of its own, or a name
several buckets share (pi0.5's `dynamic-batch`: one graph for every bucket above 1), so a
bucket whose graphs another bucket already compiled or loaded in this process warms up as
`source="shared"` (only its CUDA graphs are recorded).
`<root>` is the `compile_cache_dir` argument, else `$RPENT_COMPILE_CACHE_DIR`, else
`$XDG_CACHE_HOME/rpent/compile` (default `~/.cache/rpent/compile`). Torch's own cache keys guard
correctness; the folder key only groups what one model wrote, so clearing one is safe at any
time: `clear_compile_cache()`, or `python -m rpent_agents.features.compile_cache --clear`.
A damaged cache (a truncated file, a half-copied folder) is never fatal, and is logged as a
warning: before use, the files whose size differs from the manifest's are deleted (a truncated
kernel library would crash the process that loads it; torch builds the missing ones again) and
an unreadable manifest clears the folder; an artifacts file that does not load is deleted; a
warm-up that fails while reading the cache clears the folder and compiles afresh.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import logging
import os
import platform
import shutil
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import torch

logger = logging.getLogger(__name__)
CACHE_DIR_ENV = "RPENT_COMPILE_CACHE_DIR"
KEY_FILE = "key.json"
MANIFEST_FILE = "manifest.json"
# torch's counters (`torch._dynamo.utils.counters`) of graphs its caches served, and of graphs
# compiled past them
CACHE_HIT_COUNTERS = (("inductor", "fxgraph_cache_hit"), ("aot_autograd", "autograd_cache_hit"))
CACHE_MISS_COUNTERS = (
    ("inductor", "fxgraph_cache_miss"),
    ("inductor", "fxgraph_cache_bypass"),
    ("aot_autograd", "autograd_cache_miss"),
    ("aot_autograd", "autograd_cache_bypass"),
)


def default_cache_root() -> Path:
    """`$RPENT_COMPILE_CACHE_DIR`, else `$XDG_CACHE_HOME/rpent/compile` (`~/.cache/...`)."""
    if os.environ.get(CACHE_DIR_ENV):
        return Path(os.environ[CACHE_DIR_ENV]).expanduser()
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "rpent" / "compile"


def device_kind(device: torch.device) -> str:
    """What a compile is specific to: the GPU model and its compute capability, or the CPU."""
    if device.type == "cuda":
        major, minor = torch.cuda.get_device_capability(device)
        return f"{torch.cuda.get_device_name(device)} (sm_{major}{minor})"
    return f"{device.type} {platform.machine()}"


@dataclass(frozen=True)
class BucketWarmup:
    """How one batch bucket reached its first fast call in this process.

    Attributes:
        seconds: The bucket's first calls here (compile or cache load, CUDA-graph capture).
        source: "compiled" (some graph was lowered and built here), "cache" (all of it came
            from the compile cache) or "shared" (its graphs were already in this process,
            compiled or loaded for another bucket).
        first_compile_s: Seconds of the first-ever compile of the bucket's graphs into this
            cache (this process's when it compiled; None when the cache lost that record).
    """

    seconds: float
    source: Literal["compiled", "cache", "shared"]
    first_compile_s: float | None


class CompileCache:
    """One model's folder of the compile cache (see the module doc).

    Example:
        >>> cache = CompileCache(default_cache_root(), {"model": "pi05", "torch": "2.11"})
        >>> warmup = cache.warm_up(8, lambda: compiled(*inputs_of_batch_8))
        >>> warmup.source, warmup.seconds
    """

    def __init__(self, root: Path, facts: Mapping[str, Any]) -> None:
        """The folder of the model described by `facts` (JSON-able; "model" names it)."""
        text = json.dumps(facts, sort_keys=True, default=str)
        key = hashlib.sha256(text.encode()).hexdigest()[:16]
        self.folder = Path(root) / f"{facts.get('model', 'model')}-{key}"
        self.facts = dict(facts)

    def warm_up(
        self, bucket: int, first_calls: Callable[[], None], graphs: str | None = None
    ) -> BucketWarmup:
        """Run a bucket's first calls (they compile) with torch's caches in this folder.

        Args:
            bucket: The batch bucket.
            first_calls: Its first calls.
            graphs: Names the graphs they compile, for their mega-cache and first-compile
                record (default `bucket-<bucket>`; a name several buckets share: module doc).

        A failure while cached files were in use is taken for a damaged cache: the folder is
        cleared and the calls run again, compiling; a failure without them is raised.
        """
        graphs = graphs or f"bucket-{bucket}"
        self._drop_damaged_files()
        used_cache = self._inductor_folder.is_dir() or self._artifacts_path(graphs).is_file()
        try:
            return self._timed_warm_up(graphs, first_calls)
        except Exception as error:
            if not used_cache:
                raise
            logger.warning(
                "compile cache %s failed (%s: %s); cleared it, compiling bucket %d afresh",
                self.folder,
                type(error).__name__,
                error,
                bucket,
            )
            self.clear()
            return self._timed_warm_up(graphs, first_calls)

    def clear(self) -> None:
        """Delete this model's folder (the next warm-up compiles)."""
        shutil.rmtree(self.folder, ignore_errors=True)

    def _drop_damaged_files(self) -> None:
        """Delete the files whose size differs from the manifest's (all, if it is unreadable).

        Torch rebuilds what is missing (a kernel library from its source, a graph by
        compiling); a listed file that is gone is fine (torch renames its temporary files).
        """
        manifest = self.folder / MANIFEST_FILE
        if not manifest.exists():
            return
        try:
            sizes = json.loads(manifest.read_text())
            damaged = [
                self.folder / name
                for name, size in sizes.items()
                if (self.folder / name).is_file() and (self.folder / name).stat().st_size != size
            ]
        except (OSError, ValueError, AttributeError) as error:
            logger.warning("%s does not read (%s); cleared %s", manifest, error, self.folder)
            self.clear()
            return
        if damaged:
            logger.warning(
                "compile cache %s is damaged: deleted %d file(s) whose size changed since saved"
                " (e.g. %s); torch builds them again",
                self.folder,
                len(damaged),
                damaged[0].relative_to(self.folder),
            )
            for path in damaged:
                path.unlink(missing_ok=True)
            self._write_manifest()

    def _write_manifest(self) -> None:
        sizes = {
            str(path.relative_to(self.folder)): path.stat().st_size
            for path in self.folder.rglob("*")
            if path.is_file() and path.name != MANIFEST_FILE
        }
        _write_atomically(self.folder / MANIFEST_FILE, json.dumps(sizes).encode())

    @property
    def _inductor_folder(self) -> Path:
        return self.folder / "inductor"

    def _artifacts_path(self, graphs: str) -> Path:
        return self.folder / f"{graphs}.artifacts"

    def _record_path(self, graphs: str) -> Path:
        return self.folder / f"{graphs}.json"

    def _timed_warm_up(self, graphs: str, first_calls: Callable[[], None]) -> BucketWarmup:
        from torch.compiler._cache import CacheArtifactManager

        self.folder.mkdir(parents=True, exist_ok=True)
        from_cache = self._artifacts_path(graphs).is_file()
        with (
            _torch_caches_in(self._inductor_folder),
            CacheArtifactManager.with_fresh_cache(),
            _no_compile_workers() if from_cache else contextlib.nullcontext(),
        ):
            self._load_artifacts(graphs)
            before = _cache_counts()
            start = time.perf_counter()
            first_calls()
            seconds = time.perf_counter() - start
            hits, misses = (after - was for after, was in zip(_cache_counts(), before, strict=True))
            if hits == misses == 0:  # dynamo already held the graphs: nothing compiled or read
                warmup = BucketWarmup(seconds, "shared", self._first_compile_s(graphs))
            elif misses == 0:
                warmup = BucketWarmup(seconds, "cache", self._first_compile_s(graphs))
            else:
                self._save(graphs, seconds)
                warmup = BucketWarmup(seconds, "compiled", seconds)
        self._write_manifest()  # what this warm-up rebuilt or added is listed too
        return warmup

    def _load_artifacts(self, graphs: str) -> None:
        path = self._artifacts_path(graphs)
        if not path.is_file():
            return
        try:
            loaded = torch.compiler.load_cache_artifacts(path.read_bytes())
            failure = "torch could not read it" if loaded is None else None
        except Exception as error:  # torch's loaders raise what the damaged bytes give
            failure = f"{type(error).__name__}: {error}"
        if failure is not None:
            logger.warning("%s does not load (%s); deleted it", path, failure)
            path.unlink(missing_ok=True)

    def _save(self, graphs: str, compile_s: float) -> None:
        saved = torch.compiler.save_cache_artifacts()
        if saved is not None:
            _write_atomically(self._artifacts_path(graphs), saved[0])
        record = {"graphs": graphs, "first_compile_s": round(compile_s, 3), "at": time.ctime()}
        _write_atomically(self._record_path(graphs), json.dumps(record).encode())
        _write_atomically(self.folder / KEY_FILE, json.dumps(self.facts, indent=1).encode())

    def _first_compile_s(self, graphs: str) -> float | None:
        return _read_first_compile_s(self._record_path(graphs))


def _read_first_compile_s(record: Path) -> float | None:
    try:
        return float(json.loads(record.read_text())["first_compile_s"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _cache_counts() -> tuple[int, int]:
    """(graphs served from torch's caches, graphs compiled or bypassing them) so far."""
    from torch._dynamo.utils import counters

    hits = sum(counters[group][name] for group, name in CACHE_HIT_COUNTERS)
    misses = sum(counters[group][name] for group, name in CACHE_MISS_COUNTERS)
    return hits, misses


def _no_compile_workers() -> contextlib.AbstractContextManager:
    """Inductor builds in this process: it starts no compile-worker processes.

    A process's first Triton kernel makes inductor start its pool of compile workers, one
    process per core (`compile_threads`), even when every kernel comes from the cache; their
    start-up then competes for the CPU with the model's first calls, and batch-1 calls are
    bound by launching kernels from the CPU.
    """
    from torch._inductor import config as inductor_config

    return inductor_config.patch(compile_threads=1)


@contextlib.contextmanager
def _torch_caches_in(folder: Path) -> Iterator[None]:
    """Point inductor's and Triton's cache folders at `folder` (as torch's `fresh_cache`)."""
    from torch._inductor.utils import clear_caches

    names = {"TORCHINDUCTOR_CACHE_DIR": folder, "TRITON_CACHE_DIR": folder / "triton"}
    previous = {name: os.environ.get(name) for name in names}
    clear_caches()  # torch memoises some paths under the cache folder
    try:
        os.environ.update({name: str(path) for name, path in names.items()})
        yield
    finally:
        for name, value in previous.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        clear_caches()


def _write_atomically(path: Path, content: bytes) -> None:
    staging = path.with_name(path.name + ".partial")
    staging.write_bytes(content)
    os.replace(staging, path)


def cached_models(root: Path | None = None) -> list[Path]:
    """The model folders under `root` (default: `default_cache_root()`)."""
    root = Path(root) if root is not None else default_cache_root()
    return sorted(path.parent for path in root.glob(f"*/{KEY_FILE}"))


def clear_compile_cache(root: Path | None = None) -> list[Path]:
    """Delete every model folder of the compile cache under `root`; returns those deleted.

    Only folders holding a `key.json` go, so a `root` shared with other files keeps them.
    """
    folders = cached_models(root)
    for folder in folders:
        shutil.rmtree(folder, ignore_errors=True)
    return folders


def folder_summary(folder: Path) -> str:
    """One line on a model folder: its size, device, torch and first compile per graphs."""
    size_mib = sum(path.stat().st_size for path in folder.rglob("*") if path.is_file()) / 2**20
    records = sorted(set(folder.glob("*.json")) - {folder / KEY_FILE, folder / MANIFEST_FILE})
    compiles = [f"{path.stem}: {_read_first_compile_s(path)} s" for path in records]
    try:
        facts = json.loads((folder / KEY_FILE).read_text())
    except (OSError, ValueError):
        facts = {}
    described = ", ".join(f"{name}={facts[name]}" for name in ("device", "torch") if name in facts)
    return (
        f"{folder} ({size_mib:.1f} MiB; {described or 'no key.json'}; first compiles:"
        f" {', '.join(compiles) or 'none'})"
    )


def main() -> None:
    """`python -m rpent_agents.features.compile_cache [--root DIR] [--clear]`."""
    from rpent_agents.common.cli import command

    parser = argparse.ArgumentParser(description="List or clear RPent's compile cache.")
    parser.add_argument("--root", type=Path, default=None, help=f"default: ${CACHE_DIR_ENV}")
    parser.add_argument("--clear", action="store_true", help="delete every model folder")
    args = parser.parse_args()
    root = args.root or default_cache_root()
    with command("rpent_agents.features.compile_cache"):
        if args.clear:
            print(f"deleted {len(clear_compile_cache(root))} model folder(s) under {root}")
            return
        folders = cached_models(root)
        print("\n".join(folder_summary(folder) for folder in folders) or f"{root}: empty")


if __name__ == "__main__":
    main()
