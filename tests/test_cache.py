"""The compiled-grammar caches: byte-bounded LRU in memory, shared directory on disk."""

import json
import os

from tagjit import CompileService, Settings
from tagjit.cache import LRUCache
from tagjit.spec import Constraint, Kind


def test_lru_evicts_least_recently_used_past_its_byte_bound():
    cache: LRUCache[str] = LRUCache(10, len)
    cache.put("a", "aaaa")
    cache.put("b", "bbbb")
    assert cache.get("a") == "aaaa"  # a is now the most recent
    cache.put("c", "cccc")
    assert "b" not in cache and "a" in cache and "c" in cache
    assert cache.bytes <= 10


def test_lru_refuses_a_value_larger_than_the_bound():
    cache: LRUCache[str] = LRUCache(3, len)
    cache.put("big", "xxxx")
    assert "big" not in cache


def test_memory_cache_is_bounded_in_bytes(llama3_info):
    svc = CompileService(llama3_info, Settings(cache_bytes=100_000))
    for i in range(6):
        svc.compile(Constraint.of(Kind.REGEX, f"bounded-{i}-[a-z]+"))
    assert svc.memory.bytes <= 100_000
    assert svc.memory.evictions > 0


def test_disk_cache_is_shared_between_services(llama3_info, tmp_path):
    settings = Settings(disk_cache_dir=str(tmp_path))
    c = Constraint.of(Kind.JSON, {"type": "object", "properties": {"d": {"type": "string"}}})
    CompileService(llama3_info, settings).compile(c)
    other = CompileService(llama3_info, settings)
    other.compile(c)
    assert other.disk is not None and other.disk.hits == 1


def test_corrupt_disk_cache_file_is_rebuilt_not_fatal(llama3_info, tmp_path):
    settings = Settings(disk_cache_dir=str(tmp_path))
    c = Constraint.of(Kind.REGEX, "corrupt-[0-9]+")
    first = CompileService(llama3_info, settings)
    first.compile(c)
    (path,) = [os.path.join(d, f) for d, _, fs in os.walk(tmp_path) for f in fs if f.endswith(".json")]
    with open(path, "w") as f:
        f.write('{"version": "1", "payl')
    second = CompileService(llama3_info, settings)
    g = second.grammar(c)
    assert g.accept_string("corrupt-42") and second.disk.corrupt == 1
    with open(path) as f:
        assert json.load(f)["key"] == second.key(c)


def test_disk_cache_entry_from_another_version_is_ignored(llama3_info, tmp_path):
    c = Constraint.of(Kind.REGEX, "versioned-[0-9]+")
    CompileService(llama3_info, Settings(disk_cache_dir=str(tmp_path))).compile(c)
    other = CompileService(llama3_info, Settings(disk_cache_dir=str(tmp_path), max_whitespace=3))
    other.compile(c)
    assert other.disk.hits == 0


def test_concurrent_requests_for_one_constraint_compile_once(llama3_info):
    svc = CompileService(llama3_info, Settings())
    c = Constraint.of(Kind.JSON, {"type": "object", "properties": {"once": {"type": "integer"}}})
    futures = [svc.submit(c) for _ in range(8)]
    results = {id(f.result()) for f in futures}
    assert len(results) == 1
