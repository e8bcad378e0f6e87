"""Prometheus metrics: compile time, cache hits per layer, JIT waits, mask-fill time, lint findings.

The metrics live in tagjit's own registry. An engine that compiles in one process and serves
``/metrics`` from another (vLLM: engine core vs API server) exports snapshots from the first
(``SnapshotWriter``) and merges them in the second (``MergedCollector``), one ``process`` label each.

With several API servers (``--api-server-count N``, or data parallelism, which starts one per rank) vLLM
turns on prometheus_client's multiprocess mode: it sets ``PROMETHEUS_MULTIPROC_DIR`` before it starts the
API servers and engine cores, and every ``/metrics`` serves a fresh registry that sums the counters and
histograms of all processes' files in that directory (``MultiProcessCollector``), not the default registry
that ``MergedCollector`` sits on. tagjit's metrics are prometheus_client metrics, so a process started after
that (spawned: vLLM's CLI default) keeps them in its own file there and each process is counted once, summed,
without a ``process`` label. A process whose prometheus_client was loaded before the variable was set (an
engine core forked from the CLI process, ``VLLM_WORKER_MULTIPROC_METHOD=fork``) keeps them in memory;
its ``SnapshotWriter`` writes them into that directory in the same file format instead.
"""

from __future__ import annotations

import json
import os
import tempfile
import threading
from typing import Iterator

from prometheus_client import CollectorRegistry, Counter, Histogram, values
from prometheus_client.core import Metric
from prometheus_client.mmap_dict import MmapedDict, mmap_key

REGISTRY = CollectorRegistry(auto_describe=True)

_MS_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000)
_US_BUCKETS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 5000)

COMPILE_MS = Histogram("tagjit_compile_milliseconds", "Grammar compile time (cache misses)", ["kind"],
                       buckets=_MS_BUCKETS, registry=REGISTRY)
CACHE = Counter("tagjit_cache_lookups", "Grammar cache lookups by layer and result", ["layer", "result"],
                registry=REGISTRY)
JIT_DECISIONS = Counter("tagjit_jit_decisions", "JIT policy decisions", ["decision"], registry=REGISTRY)
REASONING_PROBES = Counter("tagjit_jit_reasoning_probes",
                           "Reasoning-end probes of a reasoning request's grammar (vLLM 0.33): exact, or provisional "
                           "while the grammar still compiles (every implicit end token masked, asked again later)",
                           ["answer"], registry=REGISTRY)
JIT_WAIT_MS = Histogram("tagjit_jit_wait_milliseconds", "Time the first token mask waited for its grammar",
                        buckets=_MS_BUCKETS, registry=REGISTRY)
MASK_FILL_US = Histogram("tagjit_mask_fill_microseconds", "Token mask fill time per row", buckets=_US_BUCKETS,
                         registry=REGISTRY)
ERRORS = Counter("tagjit_constraint_errors", "Constraints refused", ["kind"], registry=REGISTRY)
RELAXATIONS = Counter("tagjit_relaxations",
                      "Constraints served by a named relaxation (looser than their schema), by relaxation and by "
                      "what was relaxed (tool, schema)", ["relaxation", "subject"], registry=REGISTRY)
PARTS = Counter("tagjit_composite_parts", "Per-tool parts of composite tool-call tags queued to compile, and "
                "finished (compiled or failed): the difference is the background work still to do", ["state"],
                registry=REGISTRY)
LINT = Counter("tagjit_lint_findings", "Schema lint findings", ["rule"], registry=REGISTRY)
WARMUP_MS = Histogram("tagjit_warmup_milliseconds",
                      "Once-per-process work done while the engine starts, before it takes requests, by step",
                      ["step"], buckets=_MS_BUCKETS, registry=REGISTRY)


def snapshot() -> list[dict]:
    """This process's tagjit metrics as JSON-serialisable families."""
    out = []
    for family in REGISTRY.collect():
        out.append({"name": family.name, "type": family.type, "documentation": family.documentation,
                    "samples": [[s.name, s.labels, s.value] for s in family.samples]})
    return out


def in_multiprocess_files() -> bool:
    """Whether this process's prometheus_client keeps metric values in ``PROMETHEUS_MULTIPROC_DIR`` files."""
    return bool(getattr(values.ValueClass, "_multiprocess", False))


def multiprocess_entries(families: list[dict]) -> Iterator[tuple[str, str, float]]:
    """``(file type, key, value)`` of each value as prometheus_client's multiprocess files hold it:
    counters by ``_total``, histograms by ``_sum`` and per-bucket (not cumulative) counts."""
    for fam in families:
        if fam["type"] not in ("counter", "histogram"):
            continue
        below: dict[tuple, float] = {}  # cumulative count of the previous bucket, per label set
        for name, labels, value in fam["samples"]:
            if fam["type"] == "counter" and not name.endswith("_total"):
                continue
            if fam["type"] == "histogram":
                if name.endswith("_bucket"):
                    group = tuple(sorted((k, v) for k, v in labels.items() if k != "le"))
                    value, below[group] = value - below.get(group, 0.0), value
                elif not name.endswith("_sum"):
                    continue
            names = sorted(labels)
            yield fam["type"], mmap_key(fam["name"], name, names, [labels[n] for n in names],
                                        fam["documentation"]), value


class SnapshotWriter:
    """Writes this process's snapshot to ``DIR/<pid>.json`` every ``interval_s`` (atomic replace), and
    under prometheus_client's multiprocess mode, if this process keeps its values in memory, to
    ``$PROMETHEUS_MULTIPROC_DIR/<type>_tagjit-<pid>.db`` (what vLLM's several API servers serve)."""

    def __init__(self, directory: str, interval_s: float = 1.0) -> None:
        self.path = os.path.join(directory, f"{os.getpid()}.json")
        self.directory = directory
        self.interval_s = interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="tagjit-metrics")
        self._lock = threading.Lock()
        self._files: dict[str, MmapedDict] = {}

    def start(self) -> "SnapshotWriter":
        """Start the background writer."""
        self._thread.start()
        return self

    def write(self) -> None:
        """Write one snapshot now (the JSON file last: whoever reads it knows the other files are as new)."""
        families = snapshot()
        multiproc_dir = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
        if multiproc_dir and not in_multiprocess_files():
            self._write_multiprocess(multiproc_dir, families)
        try:
            fd, tmp = tempfile.mkstemp(dir=self.directory, prefix=".tmp-")
            with os.fdopen(fd, "w") as f:
                json.dump(families, f)
            os.replace(tmp, self.path)
        except OSError:
            pass

    def _write_multiprocess(self, directory: str, families: list[dict]) -> None:
        """Store this process's values in prometheus_client's multiprocess format (values overwritten in place;
        the files stay after the process ends, as prometheus_client's own do, so its counts keep counting)."""
        with self._lock:
            try:
                for typ, key, value in multiprocess_entries(families):
                    db = self._files.get(typ)
                    if db is None:
                        db = self._files[typ] = MmapedDict(os.path.join(directory, f"{typ}_tagjit-{os.getpid()}.db"))
                    db.write_value(key, value, 0.0)
            except (OSError, ValueError):
                pass

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.write()

    def stop(self) -> None:
        """Stop writing and remove this process's snapshot (multiprocess files get the final values and stay)."""
        self._stop.set()
        try:
            os.unlink(self.path)
        except OSError:
            pass
        multiproc_dir = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
        if multiproc_dir and not in_multiprocess_files():
            self._write_multiprocess(multiproc_dir, snapshot())
        with self._lock:
            for db in self._files.values():
                db.close()
            self._files.clear()


class MergedCollector:
    """A collector for the serving process: its own tagjit metrics plus every snapshot in a directory."""

    def __init__(self, directory: str) -> None:
        self.directory = directory

    def collect(self) -> Iterator[Metric]:
        """Yield each tagjit family once, samples labelled with the process they come from."""
        families: dict[str, Metric] = {}
        sources = [("server", snapshot())]
        try:
            names = sorted(os.listdir(self.directory))
        except OSError:
            names = []
        for name in names:
            if not name.endswith(".json") or name == f"{os.getpid()}.json":
                continue
            try:
                with open(os.path.join(self.directory, name)) as f:
                    sources.append((f"engine-{name[:-5]}", json.load(f)))
            except (OSError, ValueError):
                continue
        for process, fams in sources:
            for fam in fams:
                metric = families.get(fam["name"])
                if metric is None:
                    metric = families[fam["name"]] = Metric(fam["name"], fam["documentation"], fam["type"])
                for sample_name, labels, value in fam["samples"]:
                    metric.add_sample(sample_name, {**labels, "process": process}, value)
        yield from families.values()
