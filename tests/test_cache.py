"""The compiled-grammar caches: byte-bounded LRU in memory, shared directory on disk."""

import json
import os

from pools import UNHURRIED
from tagjit import CompileService, Settings
from tagjit.compile.cache import LRUCache, bounded_memo
from tagjit.constraint import Constraint, Kind


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


def test_bounded_memo_holds_its_byte_bound_for_a_stream_of_distinct_inputs():
    @bounded_memo(10_000, lambda args, value: len(args[0]) + len(value))
    def echo(text: str) -> str:
        return text.upper()

    for i in range(1_000):
        echo(f"{i:04d}" * 100)  # 800 estimated bytes each
    assert echo.cache().bytes <= 10_000
    assert len(echo.cache()) == 12


def test_bounded_memo_returns_the_memoised_result():
    calls = []

    @bounded_memo(10_000, lambda args, value: 1)
    def parse(text: str) -> dict:
        calls.append(text)
        return json.loads(text)

    assert parse('{"b": 1, "a": 2}') is parse('{"b": 1, "a": 2}')
    assert calls == ['{"b": 1, "a": 2}']


def test_memory_cache_is_bounded_in_bytes(llama3_info):
    svc = CompileService(llama3_info, UNHURRIED.replace(cache_bytes=100_000))
    for i in range(6):
        svc.compile(Constraint.of(Kind.REGEX, f"bounded-{i}-[a-z]+"))
    assert svc.memory.bytes <= 100_000
    assert svc.memory.evictions > 0


def test_disk_cache_is_shared_between_services(llama3_info, tmp_path):
    settings = UNHURRIED.replace(disk_cache_dir=str(tmp_path))
    c = Constraint.of(Kind.JSON, {"type": "object", "properties": {"d": {"type": "string"}}})
    CompileService(llama3_info, settings).compile(c)
    other = CompileService(llama3_info, settings)
    other.compile(c)
    assert other.disk is not None and other.disk.hits == 1


def test_corrupt_disk_cache_file_is_rebuilt_not_fatal(llama3_info, tmp_path):
    settings = UNHURRIED.replace(disk_cache_dir=str(tmp_path))
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
    CompileService(llama3_info, UNHURRIED.replace(disk_cache_dir=str(tmp_path))).compile(c)
    other = CompileService(llama3_info, UNHURRIED.replace(disk_cache_dir=str(tmp_path), max_whitespace=3))
    other.compile(c)
    assert other.disk.hits == 0


def test_concurrent_requests_for_one_constraint_compile_once(llama3_info):
    svc = CompileService(llama3_info, UNHURRIED)
    c = Constraint.of(Kind.JSON, {"type": "object", "properties": {"once": {"type": "integer"}}})
    futures = [svc.submit(c) for _ in range(8)]
    results = {id(f.result()) for f in futures}
    assert len(results) == 1


def _compile_in_process(directory: str, tokenizer: str, patterns: list[str]) -> int:
    from tagjit import CompileService, Settings, load_tokenizer_info
    from tagjit.constraint import Constraint, Kind

    svc = CompileService(load_tokenizer_info(tokenizer), UNHURRIED.replace(disk_cache_dir=directory))
    for p in patterns:
        svc.compile(Constraint.of(Kind.REGEX, p))
    return svc.disk.corrupt


def test_processes_sharing_a_disk_cache_never_see_torn_files(tmp_path):
    import multiprocessing

    from shared_data import TOKENIZERS

    from tagjit import load_tokenizer_info

    tokenizer = str(TOKENIZERS / "llama3" / "tokenizer.model")
    patterns = [f"shared-{i}-[a-z]{{2,4}}" for i in range(6)]
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(3) as pool:
        corrupt = pool.starmap(_compile_in_process, [(str(tmp_path), tokenizer, patterns)] * 3)
    assert corrupt == [0, 0, 0]
    reader = CompileService(load_tokenizer_info(tokenizer), UNHURRIED.replace(disk_cache_dir=str(tmp_path)))
    for p in patterns:
        reader.compile(Constraint.of(Kind.REGEX, p))
    assert reader.disk.hits == len(patterns) and reader.disk.corrupt == 0
