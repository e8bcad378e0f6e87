"""Metrics under prometheus_client's multiprocess mode (vLLM with several API servers): each process counted once."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.parser import text_string_to_metric_families

from tagjit import metrics


def served(directory: str) -> dict[tuple[str, tuple], float]:
    """tagjit's samples as vLLM's /metrics serves them in multiprocess mode (a fresh registry over the files)."""
    registry = CollectorRegistry()
    MultiProcessCollector(registry, path=directory)
    out = {}
    for family in text_string_to_metric_families(generate_latest(registry).decode()):
        for s in family.samples:
            if s.name.startswith("tagjit_"):
                out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def own(name: str, **labels: str) -> float:
    return metrics.REGISTRY.get_sample_value(name, labels) or 0.0


def test_a_process_with_in_memory_values_writes_them_in_multiprocess_format(tmp_path, monkeypatch):
    assert not metrics.in_multiprocess_files()  # this test process loaded prometheus_client without the variable
    multiproc = tmp_path / "prom"
    multiproc.mkdir()
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(multiproc))
    metrics.CACHE.labels("disk", "hit").inc(3)
    for ms in (0.07, 3.0, 3.0, 20000.0):
        metrics.COMPILE_MS.labels("regex").observe(ms)
    writer = metrics.SnapshotWriter(str(tmp_path))
    writer.write()
    writer.write()  # values are overwritten in place, never added again
    values = served(str(multiproc))
    writer.stop()
    assert values[("tagjit_cache_lookups_total", (("layer", "disk"), ("result", "hit")))] == \
        own("tagjit_cache_lookups_total", layer="disk", result="hit")
    for bucket in ("0.1", "5.0", "10000.0", "+Inf"):
        assert values[("tagjit_compile_milliseconds_bucket", (("kind", "regex"), ("le", bucket)))] == \
            own("tagjit_compile_milliseconds_bucket", kind="regex", le=bucket)
    assert values[("tagjit_compile_milliseconds_count", (("kind", "regex"),))] == \
        own("tagjit_compile_milliseconds_count", kind="regex")
    assert values[("tagjit_compile_milliseconds_sum", (("kind", "regex"),))] == \
        pytest.approx(own("tagjit_compile_milliseconds_sum", kind="regex"))


CHILD = textwrap.dedent('''
    import sys
    from tagjit import metrics
    metrics.ERRORS.labels("json").inc(int(sys.argv[2]))
    writer = metrics.SnapshotWriter(sys.argv[1])
    writer.write()
    writer.stop()
    print(metrics.in_multiprocess_files())
''')


def test_processes_started_in_multiprocess_mode_are_each_counted_once(tmp_path):
    multiproc = tmp_path / "prom"
    multiproc.mkdir()
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(multiproc)}
    for n in (2, 5):  # as vLLM's spawned API servers and engine cores: values in prometheus_client's own files
        r = subprocess.run([sys.executable, "-c", CHILD, str(tmp_path), str(n)], env=env, capture_output=True,
                           text=True, timeout=120)
        assert r.returncode == 0 and r.stdout.strip() == "True", r.stderr[-2000:]
    assert not [name for name in os.listdir(multiproc) if "tagjit" in name]  # no second copy of the same values
    assert served(str(multiproc))[("tagjit_constraint_errors_total", (("kind", "json"),))] == 7
