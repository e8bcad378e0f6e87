"""Token-bitmask application: tagjit vs xgrammar's kernels vs vLLM's own, in microseconds and as a
fraction of the memory-bandwidth bound.

The bound is (logits read + written + bitmask read) / peak bandwidth, the peak being a measured
torch copy on the same device (or --peak-gbps). A kernel that only writes masked logits can beat
it (it never reads them), so fractions above 1 are possible and honest.

    python benchmarks/bitmask.py                 # full grid on the available device
    python benchmarks/bitmask.py --quick --json out/bitmask.json

Rows run on CPU: batches 1/8/64/512 (4096 only while batch x vocab <= --cpu-max-elements, since
xgrammar's CPU kernel takes about a second per call there) at vocabularies 32k/128k/131k/152k.
On a GPU every batch runs, and the Triton and CUDA kernels of xgrammar and vLLM's Model Runner V2
kernel join the comparison.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

import torch
import xgrammar as xgr

from tagjit.kernels import apply_token_bitmask_inplace, cpu_backend

BATCHES = (1, 8, 64, 512, 4096)
VOCABS = (32000, 128256, 131072, 151936)
QUICK_BATCHES = (1, 64, 512)
QUICK_VOCABS = (32000, 131072)


@dataclass
class Result:
    device: str
    dtype: str
    batch: int
    vocab: int
    impl: str
    us: float
    bound_us: float

    @property
    def fraction_of_bound(self) -> float:
        return self.bound_us / self.us


def bytes_moved(batch: int, vocab: int, dtype: torch.dtype) -> int:
    """Logits read and written once, bitmask read once."""
    return 2 * batch * vocab * dtype.itemsize + batch * ((vocab + 31) // 32) * 4


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def time_us(fn: Callable[[], None], device: torch.device, min_seconds: float, max_reps: int) -> float:
    """Median microseconds per call (CPU wall clock; CUDA events on GPUs)."""
    fn()
    sync(device)
    if device.type == "cuda":
        import triton.testing

        return 1000 * triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median")
    samples: list[float] = []
    start = time.perf_counter()
    while len(samples) < 3 or (len(samples) < max_reps and time.perf_counter() - start < min_seconds):
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    return 1e6 * statistics.median(samples)


def copy_bandwidth_gbps(device: torch.device) -> float:
    """Peak device-memory bandwidth as a large torch copy measures it (bytes read + written)."""
    size = (1 << 30) if device.type == "cuda" else (256 << 20)
    src = torch.empty(size, dtype=torch.uint8, device=device).fill_(1)
    dst = torch.empty_like(src)
    if device.type == "cuda":
        us = time_us(lambda: dst.copy_(src), device, min_seconds=0.5, max_reps=20)
    else:  # the fastest of several copies: other processes share a CPU's memory bus
        dst.copy_(src)
        samples = []
        for _ in range(10):
            t0 = time.perf_counter()
            dst.copy_(src)
            samples.append(time.perf_counter() - t0)
        us = 1e6 * min(samples)
    return 2 * size / us / 1e3


def implementations(device: torch.device, torch_compile: bool, xgrammar_cuda: bool) -> dict[str, Callable[..., None]]:
    """name -> fn(logits, bitmask) for every kernel available on this device."""
    impls: dict[str, Callable[..., None]] = {"tagjit": apply_token_bitmask_inplace}
    if device.type == "cpu":
        impls["xgrammar-cpu"] = lambda logits, mask: xgr.apply_token_bitmask_inplace(logits, mask, backend="cpu")
        if torch_compile:
            impls["xgrammar-torch.compile"] = lambda logits, mask: xgr.apply_token_bitmask_inplace(
                logits, mask, backend="torch_compile")
        return impls
    impls["xgrammar-triton"] = lambda logits, mask: xgr.apply_token_bitmask_inplace(logits, mask, backend="triton")
    if xgrammar_cuda:  # opt-in: its first call JIT-compiles with nvcc, which can take minutes
        try:
            probe = torch.zeros(1, 64, device=device)
            xgr.apply_token_bitmask_inplace(probe, torch.zeros(1, 2, dtype=torch.int32, device=device),
                                            backend="cuda")
            impls["xgrammar-cuda"] = lambda logits, mask: xgr.apply_token_bitmask_inplace(
                logits, mask, backend="cuda")
        except Exception as exc:
            print(f"# xgrammar-cuda skipped: {type(exc).__name__}: {str(exc)[:120]}", file=sys.stderr)
    try:
        impls["vllm-mrv2"] = vllm_mrv2(device)
    except Exception as exc:
        print(f"# vllm-mrv2 skipped: {type(exc).__name__}: {str(exc)[:120]}", file=sys.stderr)
    return impls


def vllm_mrv2(device: torch.device) -> Callable[..., None]:
    """vLLM's Model Runner V2 kernel, launched as its worker does, every row a one-logit request."""
    from vllm.v1.worker.gpu import structured_outputs as mrv2

    kernel = mrv2._apply_grammar_bitmask_kernel
    kernel = getattr(kernel, "original", kernel)  # unwrap tagjit's launcher if installed
    block = 8192
    cache: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}

    def run(logits: torch.Tensor, mask: torch.Tensor) -> None:
        rows, vocab = logits.shape
        if rows not in cache:
            cache[rows] = (torch.arange(rows, dtype=torch.int32, device=device),
                           torch.arange(rows + 1, dtype=torch.int32, device=device))
        mapping, cu_num_logits = cache[rows]
        kernel[(rows, -(-vocab // block))](logits, logits.stride(0), mapping, cu_num_logits, mask, mask.stride(0),
                                            vocab, MASK_STRIDE=1, BLOCK_SIZE=block)

    return run


def make_bitmask(rows: int, vocab: int, kind: str, device: torch.device) -> torch.Tensor:
    g = torch.Generator().manual_seed(0)
    words = (vocab + 31) // 32
    if kind == "random":  # half the tokens allowed, bit by bit: the worst case for branchy kernels
        mask = torch.randint(-2**31, 2**31 - 1, (rows, words), generator=g, dtype=torch.int32)
    else:  # "sparse": a grammar state allowing ~1% of the vocabulary, in a few runs
        mask = torch.zeros(rows, words, dtype=torch.int32)
        starts = torch.randint(0, max(1, words - 64), (rows, 4), generator=g)
        for r in range(rows):
            for s in starts[r].tolist():
                mask[r, s:s + max(1, words // 400)] = -1
    return mask.to(device)


def run(args: argparse.Namespace) -> tuple[list[Result], dict]:
    device = torch.device(args.device)
    impls = implementations(device, args.torch_compile, args.xgrammar_cuda)
    peak = args.peak_gbps or copy_bandwidth_gbps(device)
    meta = {
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "threads": torch.get_num_threads(), "peak_gbps": round(peak, 1),
        "peak_source": "given" if args.peak_gbps else "measured torch copy",
        "cpu_backend": cpu_backend() if device.type == "cpu" else None,
        "torch": torch.__version__, "xgrammar": importlib.metadata.version("xgrammar"),
        "mask": args.mask, "skipped": [],
    }
    print(f"# {meta['device']}, {meta['threads']} threads, peak {meta['peak_gbps']} GB/s "
          f"({meta['peak_source']}), CPU kernel {meta['cpu_backend']}, mask {meta['mask']}")
    results: list[Result] = []
    for dtype_name in args.dtypes:
        dtype = getattr(torch, dtype_name)
        for vocab in args.vocabs:
            batches = [b for b in args.batches
                       if device.type != "cpu" or b * vocab <= args.cpu_max_elements]
            meta["skipped"] += [f"{dtype_name} batch {b} x vocab {vocab}: over --cpu-max-elements"
                                for b in args.batches if b not in batches]
            if not batches:
                continue
            # One allocation per vocabulary; each batch masks the first rows of it.
            logits_all = torch.randn(max(batches), vocab, device=device).to(dtype)
            mask_all = make_bitmask(max(batches), vocab, args.mask, device)
            for batch in batches:
                logits, mask = logits_all[:batch], mask_all[:batch]
                if batch <= 64:
                    check_exact(impls, logits, mask)
                bound_us = bytes_moved(batch, vocab, dtype) / (peak * 1e3)
                for name, fn in impls.items():
                    us = time_us(lambda: fn(logits, mask), device, args.min_seconds, args.max_reps)
                    results.append(Result(device.type, dtype_name, batch, vocab, name, us, bound_us))
                print_row([r for r in results if (r.dtype, r.batch, r.vocab) == (dtype_name, batch, vocab)])
            del logits_all, mask_all
    return results, meta


def check_exact(impls: dict[str, Callable[..., None]], logits: torch.Tensor, mask: torch.Tensor) -> None:
    """Every kernel must produce xgrammar's logits bit for bit (they are compared before timing)."""
    outputs = {}
    for name, fn in impls.items():
        out = logits.clone()
        fn(out, mask)
        outputs[name] = out
    reference = outputs.get("xgrammar-cpu", outputs.get("xgrammar-triton"))
    for name, out in outputs.items():
        if not torch.equal(out, reference):
            raise SystemExit(f"{name} differs from xgrammar at batch {logits.shape[0]} x vocab {logits.shape[1]}")


_header_printed: list[str] = []


def print_row(rows: list[Result]) -> None:
    """One table line: each kernel's time and fraction of the bound, and tagjit's speedup."""
    names = [r.impl for r in rows]
    baseline = next((r for r in rows if r.impl in ("xgrammar-cpu", "xgrammar-triton")), None)
    if not _header_printed:
        cells = "".join(f"{n:>26}" for n in names)
        line = f"{'dtype':>9} {'batch':>6} {'vocab':>7} {'bound us':>10}{cells}   tagjit speedup"
        print(line)
        print("-" * len(line))
        _header_printed.append(line)
    first = rows[0]
    cells = "".join(f"{f'{r.us:,.1f} us ({r.fraction_of_bound:.0%})':>26}" for r in rows)
    tag = next(r for r in rows if r.impl == "tagjit")
    speedup = f"{baseline.us / tag.us:.1f}x vs {baseline.impl}" if baseline else ""
    print(f"{first.dtype:>9} {first.batch:>6} {first.vocab:>7} {first.bound_us:>10,.1f}{cells}   {speedup}",
          flush=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--quick", action="store_true", help="a subset: batches 1/64/512, vocabularies 32k/131k")
    parser.add_argument("--json", metavar="PATH", help="write the results and the setup as JSON")
    parser.add_argument("--batches", type=int, nargs="+")
    parser.add_argument("--vocabs", type=int, nargs="+")
    parser.add_argument("--dtypes", nargs="+", choices=["float32", "bfloat16", "float16"])
    parser.add_argument("--mask", choices=["random", "sparse"], default="random")
    parser.add_argument("--peak-gbps", type=float, help="peak bandwidth to use instead of measuring a copy")
    parser.add_argument("--cpu-max-elements", type=int, default=160_000_000,
                        help="skip CPU runs with more logits than this (xgrammar takes ~1 s per call at 4096 x 152k)")
    parser.add_argument("--torch-compile", action="store_true", help="also time xgrammar's torch.compile path (CPU)")
    parser.add_argument("--xgrammar-cuda", action="store_true",
                        help="also time xgrammar's CUDA kernel (GPU; needs nvcc)")
    parser.add_argument("--min-seconds", type=float, default=0.4, help="CPU: time each kernel at least this long")
    parser.add_argument("--max-reps", type=int, default=50)
    args = parser.parse_args(argv)
    args.batches = args.batches or (QUICK_BATCHES if args.quick else BATCHES)
    args.vocabs = args.vocabs or (QUICK_VOCABS if args.quick else VOCABS)
    args.dtypes = args.dtypes or (["float32"] if args.device == "cpu" else ["float32", "bfloat16"])

    started = time.perf_counter()
    results, meta = run(args)
    meta["seconds"] = round(time.perf_counter() - started, 1)
    print(f"# {meta['seconds']} s")
    for note in meta["skipped"]:
        print(f"# skipped {note}")
    if args.json:
        rows = [{**asdict(r), "fraction_of_bound": round(r.fraction_of_bound, 4)} for r in results]
        with open(args.json, "w") as f:
            json.dump({"meta": meta, "results": rows}, f, indent=1)


if __name__ == "__main__":
    main()
