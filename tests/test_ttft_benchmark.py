"""benchmarks/ttft.py: the overheads its table reports, from the rows a run writes."""

from __future__ import annotations

import pytest

from benchmark_modules import load_benchmark


@pytest.fixture(scope="module")
def bench():
    return load_benchmark("ttft")


def rows(plain: list[float], free: list[float], constrained: list[float]) -> list[dict]:
    """One backend's tools-200 samples, in the order a run takes them (plain, free, constrained per sample)."""
    out = []
    for p, f, c in zip(plain, free, constrained):
        out += [{"backend": "tagjit", "scenario": "tools-200", "variant": v, "ttft_ms": ms, "total_ms": ms}
                for v, ms in (("plain", p), ("free", f), ("constrained", c))]
    return out


def test_paired_overhead_is_the_median_of_per_sample_ratios_over_the_same_prompt(bench):
    # The machine slows down during the run: each constrained sample is 2% over its own plain one.
    plain = [600.0, 620.0, 700.0, 800.0, 900.0]
    summary = bench.summarize(rows(plain, [p * 1.01 for p in plain], [p * 1.02 for p in plain]))[0]
    assert summary["paired_pct"] == pytest.approx(2.0)
    assert summary["paired_free_pct"] == pytest.approx(100 * (1.02 / 1.01 - 1))
    assert summary["overhead_pct"] == pytest.approx(2.0)  # the medians are pairs here too


def test_paired_overhead_ignores_drift_that_the_ratio_of_medians_reports(bench):
    plain = [600.0, 610.0, 1000.0, 1010.0, 1020.0]
    constrained = [606.0, 616.1, 1010.0, 620.0, 630.0]  # the slow spell ended before the last two constrained
    summary = bench.summarize(rows(plain, plain, constrained))[0]
    assert summary["paired_pct"] == pytest.approx(1.0)
    assert summary["overhead_pct"] == pytest.approx(100 * (620.0 / 1000.0 - 1))


def test_a_failed_sample_is_left_out_of_the_pairs(bench):
    r = rows([600.0, 700.0, 800.0], [600.0, 700.0, 800.0], [630.0, 735.0, 840.0])
    r[-1] = {"backend": "tagjit", "scenario": "tools-200", "variant": "constrained", "error": "boom"}
    assert bench.summarize(r)[0]["paired_pct"] == pytest.approx(5.0)
