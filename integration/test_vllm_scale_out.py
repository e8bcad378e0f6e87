"""tagjit scaled out inside vLLM: two API servers, two data-parallel engine cores, one /metrics, one disk cache."""

from __future__ import annotations

import functools
import glob
import json
import os
import time
import urllib.parse
from dataclasses import dataclass
from typing import Callable, Iterator

import httpx
import jsonschema
import openai
import psutil
import pytest
from prometheus_client.parser import text_string_to_metric_families

from server import vllm_server

# Connections stay open between requests, so each one keeps talking to the API server it was accepted by.
KEEP_ALIVE = {"VLLM_HTTP_TIMEOUT_KEEP_ALIVE": "3600"}
BAD_SCHEMA = {"type": "array", "uniqueItems": True}
WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string", "maxLength": 12}}, "required": ["city"],
    "additionalProperties": False}}}
PATIENCE_S = 300.0  # give-up bound when waiting for a count: never reached unless the count is wrong


def schema(key: str) -> dict:
    """An object with one required integer property: a grammar no other test has compiled."""
    return {"type": "object", "properties": {key: {"type": "integer"}}, "required": [key],
            "additionalProperties": False}


def response_format(s: dict) -> dict:
    return {"type": "json_schema", "json_schema": {"name": "out", "schema": s}}


def samples(text: str) -> list[tuple[str, dict[str, str], float]]:
    return [(s.name, s.labels, s.value) for family in text_string_to_metric_families(text) for s in family.samples]


def total(text: str, name: str, **labels: str) -> float:
    """Sum of a sample over every label set that has these labels (with or without a ``process`` label)."""
    return sum(v for n, lab, v in samples(text)
               if n == name and all(lab.get(k) == want for k, want in labels.items()))


def tagjit_lines(text: str) -> list[str]:
    return sorted(line for line in text.splitlines() if line.startswith("tagjit_"))


def wait_for(read: Callable[[], float], at_least: float) -> float:
    """Poll a count until it reaches at_least (snapshots may lag a little), then return it."""
    deadline = time.monotonic() + PATIENCE_S
    while True:
        value = read()
        if value >= at_least or time.monotonic() > deadline:
            return value
        time.sleep(0.2)


def exported_by_process(metrics_dir: str, name: str, **labels: str) -> dict[str, float]:
    """A sample summed per engine-core snapshot file in TAGJIT_METRICS_DIR (``<pid>.json``, one per engine core).
    Each process writes its file after anything else it exports, so once these show a count, /metrics has
    everything that process will add for it."""
    out: dict[str, float] = {}
    for path in glob.glob(os.path.join(metrics_dir, "*.json")):
        try:
            with open(path) as f:
                families = json.load(f)
        except (OSError, ValueError):
            continue
        out[os.path.basename(path)] = sum(v for fam in families for n, lab, v in fam["samples"]
                                          if n == name and all(lab.get(k) == want for k, want in labels.items()))
    return out


def exported(metrics_dir: str, name: str, **labels: str) -> float:
    """A sample summed over every engine core's snapshot file."""
    return sum(exported_by_process(metrics_dir, name, **labels).values())


def settled(scrape: Callable[[], str], metrics_dir: str, name: str, expected: float,
            **labels: str) -> tuple[float, float]:
    """An engine-core count once the engine cores have exported ``expected``: (what they exported, what /metrics
    shows). Equal when each process is counted once; a second copy of a process's counts would show here."""
    done = wait_for(lambda: exported(metrics_dir, name, **labels), expected)
    return done, total(scrape(), name, **labels)


def cached_files(directory: str) -> set[str]:
    """The grammar files in a tagjit disk cache."""
    return {os.path.join(d, f) for d, _, names in os.walk(directory) for f in names if f.endswith(".json")}


def api_server_of(response: httpx.Response, port: int) -> int:
    """The pid of the process that holds the server end of the connection a response came on."""
    client_addr = response.extensions["network_stream"].get_extra_info("client_addr")
    for conn in psutil.net_connections(kind="tcp"):
        if conn.laddr and conn.laddr.port == port and conn.raddr and tuple(conn.raddr) == tuple(client_addr) \
                and conn.pid is not None:
            return conn.pid
    raise AssertionError(f"no process holds the server end of {client_addr}")


@dataclass
class Connection:
    """One keep-alive connection to one API server, used by an OpenAI client and for /metrics."""

    pid: int
    http: httpx.Client
    client: openai.OpenAI
    url: str
    port: int

    def chat(self, s: dict, bias: dict[str, float]) -> dict:
        """A json_schema request on this connection; returns the parsed output."""
        raw = self.client.chat.completions.with_raw_response.create(
            model="tiny", messages=[{"role": "user", "content": "n?"}], max_tokens=100, logit_bias=bias,
            response_format=response_format(s))
        assert api_server_of(raw.http_response, self.port) == self.pid
        return json.loads(raw.parse().choices[0].message.content)

    def tool_call(self, bias: dict[str, float]) -> tuple[str, dict]:
        """A tool_choice=required request for one call on this connection; returns its name and arguments."""
        raw = self.client.chat.completions.with_raw_response.create(
            model="tiny", messages=[{"role": "user", "content": "weather?"}], max_tokens=100, logit_bias=bias,
            tools=[WEATHER], tool_choice="required", parallel_tool_calls=False)
        assert api_server_of(raw.http_response, self.port) == self.pid
        (call,) = raw.parse().choices[0].message.tool_calls
        return call.function.name, json.loads(call.function.arguments)

    def refused(self) -> str:
        """Send a schema tagjit refuses; returns the 400's message."""
        with pytest.raises(openai.BadRequestError) as err:
            self.client.chat.completions.create(
                model="tiny", messages=[{"role": "user", "content": "n?"}], max_tokens=5,
                response_format=response_format(BAD_SCHEMA))
        assert api_server_of(err.value.response, self.port) == self.pid
        return str(err.value)

    def metrics(self) -> str:
        r = self.http.get(self.url + "/metrics")
        r.raise_for_status()
        assert api_server_of(r, self.port) == self.pid
        return r.text


@pytest.fixture(scope="class")
def metrics_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    """TAGJIT_METRICS_DIR of the class's server, where its engine cores write their snapshots."""
    return str(tmp_path_factory.mktemp("tagjit-metrics"))


@pytest.fixture(scope="class")
def two_api_servers(metrics_dir: str) -> Iterator[str]:
    """``vllm serve --api-server-count 2`` (one engine core); torn down after the class that uses it."""
    with vllm_server("tagjit", "--api-server-count", "2", "--enable-auto-tool-choice", "--tool-call-parser", "hermes",
                     env={"TAGJIT_METRICS_DIR": metrics_dir, **KEEP_ALIVE}) as url:
        yield url


@pytest.fixture(scope="class")
def connections(two_api_servers: str) -> Iterator[list[Connection]]:
    """A connection to each API server (new connections until the kernel has handed one to each)."""
    url = two_api_servers
    port = urllib.parse.urlsplit(url).port
    found: dict[int, Connection] = {}
    for _ in range(64):
        http = httpx.Client(timeout=300)
        pid = api_server_of(http.get(url + "/health"), port)
        if pid in found:
            http.close()
            continue
        client = openai.OpenAI(base_url=url + "/v1", api_key="none", max_retries=0, http_client=http)
        found[pid] = Connection(pid, http, client, url, port)
        if len(found) == 2:
            break
    assert len(found) == 2, f"64 connections all went to API server(s) {sorted(found)}"
    yield list(found.values())
    for conn in found.values():
        conn.http.close()


@pytest.fixture(scope="class")
def disk_cache(tmp_path_factory: pytest.TempPathFactory) -> str:
    """An empty TAGJIT_DISK_CACHE_DIR for the data-parallel server."""
    return str(tmp_path_factory.mktemp("tagjit-disk-cache"))


@pytest.fixture(scope="class")
def data_parallel(disk_cache: str, metrics_dir: str) -> Iterator[str]:
    """``vllm serve --data-parallel-size 2`` (two engine cores, two API servers) sharing a disk cache."""
    with vllm_server("tagjit", "--data-parallel-size", "2", "--data-parallel-backend", "mp",
                     env={"TAGJIT_DISK_CACHE_DIR": disk_cache, "TAGJIT_METRICS_DIR": metrics_dir, **KEEP_ALIVE}) as url:
        yield url


@pytest.fixture(scope="class")
def dp_client(data_parallel: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=data_parallel + "/v1", api_key="none", max_retries=0, timeout=300)


class TestTwoApiServers:
    """``--api-server-count 2``: one engine core behind two API servers that share the port."""

    def test_json_schema_requests_on_each_api_server_are_valid(self, connections: list[Connection],
                                                               bias: dict[str, float]) -> None:
        s = schema("n")
        for conn in connections:
            for _ in range(2):
                jsonschema.validate(conn.chat(s, bias), s)

    def test_tool_calls_on_each_api_server_take_tagjits_tag(self, connections: list[Connection],
                                                            bias: dict[str, float]) -> None:
        # The API servers vLLM spawns never validate the config again: tagjit's tool hook must know it was chosen.
        # vLLM's own tag would leave a tool without strict: true free arguments, which a random model gets wrong.
        for conn in connections:
            name, arguments = conn.tool_call(bias)
            assert name == "get_weather"
            jsonschema.validate(arguments, WEATHER["function"]["parameters"])

    def test_a_bad_schema_is_a_400_naming_the_problem_from_each_api_server(
            self, connections: list[Connection]) -> None:
        for conn in connections:
            assert "uniqueItems" in conn.refused()

    def test_metrics_of_each_api_server_sum_the_refusals_of_both(self, connections: list[Connection]) -> None:
        before = total(connections[0].metrics(), "tagjit_constraint_errors_total", kind="json")
        for conn in connections:
            for _ in range(2):
                conn.refused()
        expected = before + 2 * len(connections)
        for conn in connections:
            got = wait_for(lambda: total(conn.metrics(), "tagjit_constraint_errors_total", kind="json"), expected)
            assert got == expected

    def test_metrics_of_each_api_server_count_the_engine_core_work_once(
            self, connections: list[Connection], bias: dict[str, float], metrics_dir: str) -> None:
        before = connections[0].metrics()
        s = schema("once")
        for conn in connections:
            conn.chat(s, bias)
        n = len(connections)
        for conn in connections:
            for name, labels, added in (("tagjit_jit_decisions_total", {}, n),  # one JIT decision per request
                                        ("tagjit_cache_lookups_total", {"layer": "memory"}, n),
                                        ("tagjit_compile_milliseconds_count", {}, 1)):
                expected = total(before, name, **labels) + added
                assert settled(conn.metrics, metrics_dir, name, expected, **labels) == (expected, expected), name
        assert tagjit_lines(connections[0].metrics()) == tagjit_lines(connections[1].metrics())  # the same sums


class TestDataParallel:
    """``--data-parallel-size 2``: two engine cores (and two API servers), requests pinned with a rank header."""

    @staticmethod
    def scrape(url: str) -> str:
        return httpx.get(url + "/metrics", timeout=60).text

    @staticmethod
    def ask(client: openai.OpenAI, s: dict, rank: int, bias: dict[str, float]) -> dict:
        """A json_schema request that vLLM routes to data-parallel rank ``rank`` (its X-data-parallel-rank header)."""
        r = client.chat.completions.create(
            model="tiny", messages=[{"role": "user", "content": "n?"}], max_tokens=100, logit_bias=bias,
            response_format=response_format(s), extra_headers={"X-data-parallel-rank": str(rank)})
        return json.loads(r.choices[0].message.content)

    def served_by_each_rank(self, url: str, before: str, counts: dict[int, int]) -> None:
        """vLLM's own per-engine request counts rose by exactly these numbers (the header routed them)."""
        for rank, n in counts.items():
            want = total(before, "vllm:request_success_total", engine=str(rank)) + n
            got = wait_for(lambda: total(self.scrape(url), "vllm:request_success_total", engine=str(rank)), want)
            assert got == want

    def test_each_engine_core_serves_tagjit_grammars(self, data_parallel: str, dp_client: openai.OpenAI,
                                                     bias: dict[str, float], metrics_dir: str) -> None:
        before = self.scrape(data_parallel)
        for rank in (0, 1):
            s = schema(f"rank{rank}")
            jsonschema.validate(self.ask(dp_client, s, rank, bias), s)
        self.served_by_each_rank(data_parallel, before, {0: 1, 1: 1})

        def decisions() -> dict[str, float]:
            return exported_by_process(metrics_dir, "tagjit_jit_decisions_total")

        # two engine cores, each with tagjit's JIT decisions of its own
        wait_for(lambda: len([n for n in decisions().values() if n >= 1]), 2)
        assert len(decisions()) == 2 and min(decisions().values()) >= 1

    def test_metrics_show_the_compiles_of_both_engine_cores(self, data_parallel: str, dp_client: openai.OpenAI,
                                                            bias: dict[str, float], metrics_dir: str) -> None:
        before = self.scrape(data_parallel)
        for rank in (0, 1):
            self.ask(dp_client, schema(f"compiled_on_{rank}"), rank, bias)
        self.served_by_each_rank(data_parallel, before, {0: 1, 1: 1})
        expected = total(before, "tagjit_compile_milliseconds_count") + 2
        assert settled(functools.partial(self.scrape, data_parallel), metrics_dir, "tagjit_compile_milliseconds_count",
                       expected) == (expected, expected)

    def test_a_grammar_compiled_by_one_engine_core_is_a_disk_cache_hit_on_the_other(
            self, data_parallel: str, dp_client: openai.OpenAI, bias: dict[str, float], disk_cache: str,
            metrics_dir: str) -> None:
        s = schema("shared")
        scrape = functools.partial(self.scrape, data_parallel)
        files = cached_files(disk_cache)
        before = scrape()
        jsonschema.validate(self.ask(dp_client, s, 0, bias), s)
        self.served_by_each_rank(data_parallel, before, {0: 1})
        assert len(cached_files(disk_cache) - files) == 1  # rank 0 compiled it and wrote it
        for name, labels, added in (("tagjit_cache_lookups_total", {"layer": "disk", "result": "miss"}, 1),
                                    ("tagjit_compile_milliseconds_count", {}, 1)):
            expected = total(before, name, **labels) + added
            assert settled(scrape, metrics_dir, name, expected, **labels) == (expected, expected), name
        first = scrape()
        jsonschema.validate(self.ask(dp_client, s, 1, bias), s)
        self.served_by_each_rank(data_parallel, first, {1: 1})
        expected = total(first, "tagjit_cache_lookups_total", layer="disk", result="hit") + 1
        assert settled(scrape, metrics_dir, "tagjit_cache_lookups_total", expected, layer="disk", result="hit") \
            == (expected, expected)
        assert total(scrape(), "tagjit_compile_milliseconds_count") == total(first, "tagjit_compile_milliseconds_count")
