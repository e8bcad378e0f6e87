"""A short run of integration/load.py against the session's server: no 5xx, no leaks, nothing left running."""

from __future__ import annotations

from load import run


def test_twenty_seconds_of_mixed_load_has_no_violation(vllm_url):
    # The session server runs with the default 512 MB grammar cache, which this run partly fills, so
    # memory is judged by `python integration/load.py` (its own server, a 16 MB cache), not here.
    report = run(duration=20, clients=8, url=vllm_url, rss_growth_mb=float("inf"))
    assert sum(report.completed.values()) > 0
    assert not report.violations, report.violations
