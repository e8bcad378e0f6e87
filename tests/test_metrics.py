"""Metrics: a serving process shows its own tagjit metrics and the snapshots other processes export."""

import os

from prometheus_client import CollectorRegistry, generate_latest

from tagjit import metrics


def exposition(directory: str) -> str:
    registry = CollectorRegistry()
    registry.register(metrics.MergedCollector(directory))
    return generate_latest(registry).decode()


def test_snapshot_of_another_process_appears_with_its_process_label(tmp_path):
    metrics.LINT.labels("sorted-properties").inc()
    writer = metrics.SnapshotWriter(str(tmp_path))
    writer.path = os.path.join(str(tmp_path), "12345.json")  # as if written by the engine-core process
    writer.write()
    text = exposition(str(tmp_path))
    assert 'tagjit_lint_findings_total{process="engine-12345",rule="sorted-properties"}' in text
    assert 'tagjit_lint_findings_total{process="server",rule="sorted-properties"}' in text


def test_each_family_is_exposed_once(tmp_path):
    for pid in ("1", "2"):
        w = metrics.SnapshotWriter(str(tmp_path))
        w.path = os.path.join(str(tmp_path), f"{pid}.json")
        w.write()
    text = exposition(str(tmp_path))
    assert text.count("# TYPE tagjit_compile_milliseconds histogram") == 1


def test_unreadable_snapshot_is_skipped(tmp_path):
    (tmp_path / "99.json").write_text("{broken")
    assert "tagjit_cache_lookups" in exposition(str(tmp_path))
