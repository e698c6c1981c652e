"""`CompileCache` on a one-kernel function: real inductor compiles, real files in tmp_path.

Each warm-up starts from `torch.compiler.reset()`, so dynamo traces again as a new process
would, and the cache folder alone decides whether inductor compiles.
"""

import pytest
import torch
from torch._inductor import config as inductor_config

from rpent_agents.features.compile_cache import (
    MANIFEST_FILE,
    CompileCache,
    cached_models,
    clear_compile_cache,
    default_cache_root,
)

pytestmark = pytest.mark.subprocess

FACTS = {"model": "toy", "torch": torch.__version__}


def warm_up(cache, fail_first_calls=False):
    """A fresh compile of a one-kernel function, warmed up through `cache` (bucket 1).

    `fail_first_calls`: the first attempt raises before compiling, as a damaged entry would.
    """
    torch.compiler.reset()
    compiled = torch.compile(lambda x: torch.sin(x) * 2 + 1, dynamic=False)
    inputs, attempts = torch.arange(8.0), []

    def first_calls():
        attempts.append(1)
        if fail_first_calls and len(attempts) == 1:
            raise RuntimeError("a damaged cache entry")
        compiled(inputs)

    with inductor_config.patch({"cpp.vec_isa_ok": False}):
        warmup = cache.warm_up(1, first_calls)
    torch.testing.assert_close(compiled(inputs), torch.sin(inputs) * 2 + 1)
    return warmup


def test_second_warm_up_is_served_from_the_folder(tmp_path):
    first = warm_up(CompileCache(tmp_path, FACTS))
    second = warm_up(CompileCache(tmp_path, FACTS))
    assert (first.source, second.source) == ("compiled", "cache")
    assert second.first_compile_s == pytest.approx(first.seconds, 1e-3)
    assert cached_models(tmp_path) == [CompileCache(tmp_path, FACTS).folder]


def test_damaged_files_are_deleted_and_built_again(tmp_path, caplog):
    cache = CompileCache(tmp_path, FACTS)
    warm_up(cache)
    for path in cache.folder.rglob("*"):  # a copy cut short, the kernels' libraries included
        if path.is_file() and path.name != MANIFEST_FILE:
            path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    assert warm_up(cache).source == "compiled"
    assert "is damaged: deleted" in caplog.text
    assert warm_up(cache).source == "cache"  # and the new compile was saved whole


def test_an_unreadable_manifest_clears_the_folder(tmp_path, caplog):
    cache = CompileCache(tmp_path, FACTS)
    warm_up(cache)
    (cache.folder / MANIFEST_FILE).write_text("{not json")
    assert warm_up(cache).source == "compiled"
    assert "does not read" in caplog.text


def test_unreadable_artifacts_are_deleted(tmp_path, caplog):
    cache = CompileCache(tmp_path, FACTS)
    warm_up(cache)
    artifacts = cache.folder / "bucket-1.artifacts"
    artifacts.write_bytes(b"not a cache")
    (cache.folder / MANIFEST_FILE).unlink()  # no manifest to catch it: the loader must
    assert warm_up(cache).source == "cache"  # served by the folder's inductor files
    assert not artifacts.exists() and "does not load" in caplog.text


def test_a_warm_up_failing_on_the_cache_compiles_afresh(tmp_path, caplog):
    cache = CompileCache(tmp_path, FACTS)
    warm_up(cache)
    assert warm_up(cache, fail_first_calls=True).source == "compiled"
    assert "compiling bucket 1 afresh" in caplog.text
    with pytest.raises(RuntimeError, match="damaged"):  # no cache in use: the error is real
        warm_up(CompileCache(tmp_path / "empty", FACTS), fail_first_calls=True)


def test_clear_and_the_default_root(tmp_path, monkeypatch):
    warm_up(CompileCache(tmp_path, FACTS))
    (tmp_path / "unrelated.txt").write_text("kept")
    assert len(clear_compile_cache(tmp_path)) == 1
    assert cached_models(tmp_path) == [] and (tmp_path / "unrelated.txt").exists()
    monkeypatch.setenv("RPENT_COMPILE_CACHE_DIR", str(tmp_path / "mine"))
    assert default_cache_root() == tmp_path / "mine"
    monkeypatch.delenv("RPENT_COMPILE_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_cache_root() == tmp_path / "xdg" / "rpent" / "compile"
