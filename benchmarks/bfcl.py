"""Tool-calling accuracy on trained weights: BFCL questions through a real ``vllm serve`` of SmolLM2.

For each backend (tagjit, vLLM's xgrammar and guidance) a server of SmolLM2-135M-Instruct
(``integration/real_model.py``) with the chosen tool parser and its chat template answers the first
``--questions`` questions of each BFCL category in ``../shared/data/bfcl`` (simple_python, multiple,
parallel, parallel_multiple), in three modes:

- ``required``: ``tool_choice="required"``;
- ``auto``: ``tool_choice="auto"`` with every tool ``strict: true`` (the backend constrains a call once started);
- ``none``: ``tool_choice="auto"``, nothing strict, so no backend constrains anything (asked of the xgrammar server),

each with parallel calls allowed (the API's default) and with ``parallel_tool_calls=false``. Greedy decoding.

Scored with BFCL's own AST checker (``bfcl-eval``'s ``ast_checker``: function name, required parameters,
each value among the possible answers, strings after BFCL's normalisation); the wheel is fetched once with
``pip download --no-deps`` into ``~/.cache/tagjit/`` and imported without its model-handler dependencies.
Reported per backend, mode and parallel setting: accuracy per category, the share of responses whose calls
all validate against their tool's schema (and at least one call), the share of 4xx/5xx answers and the median
latency. A table, ``--json PATH`` and a plot (``--plot``, default ``benchmarks/out/bfcl.png``).

    .venv/bin/python benchmarks/bfcl.py --questions 20 --parser hermes
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import types
import zipfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any, Callable

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "integration"))

import jsonschema  # noqa: E402
import openai  # noqa: E402

from real_model import cache_root, pip_download, serve  # noqa: E402
from tagjit.tools.bfcl import UnsupportedBFCLType, to_json_schema, to_tool  # noqa: E402

DATA = os.path.join(ROOT, "..", "shared", "data", "bfcl")
CATEGORIES = ("simple_python", "multiple", "parallel", "parallel_multiple")
BFCL_EVAL = "bfcl-eval==2026.3.23"
MODES = ("required", "auto", "none")
PARALLEL = ("allowed", "false")


@dataclass
class Answer:
    """One question asked of one server in one mode."""

    backend: str
    mode: str
    parallel: str
    category: str
    id: str
    status: int
    latency_s: float
    finish_reason: str | None = None
    calls: list[dict[str, Any]] = field(default_factory=list)
    valid: bool = False
    correct: bool = False
    error: str = ""


def load_ast_checker() -> Callable[..., dict]:
    """BFCL's ``ast_checker`` from the bfcl-eval wheel, its model-handler imports replaced by a stub."""
    root = os.path.join(os.path.dirname(cache_root()), "bfcl-eval", BFCL_EVAL.split("==")[1])
    if not os.path.exists(os.path.join(root, "bfcl_eval")):
        os.makedirs(root, exist_ok=True)
        print(f"downloading {BFCL_EVAL} (its AST checker, without dependencies) ...", file=sys.stderr, flush=True)
        with zipfile.ZipFile(pip_download(BFCL_EVAL, root, quiet=True)) as z:
            z.extractall(root, [m for m in z.namelist() if m.startswith("bfcl_eval/")])
    sys.path.insert(0, root)
    # ast_checker imports the model registry (every API client) only to ask whether a model spells dots as
    # underscores; the tools here keep BFCL's names, so the answer is always no.
    stub = types.ModuleType("bfcl_eval.constants.model_config")
    stub.MODEL_CONFIG_MAPPING = type("Always", (dict,), {"__missing__": lambda self, k: types.SimpleNamespace(
        underscore_to_dot=False)})()
    sys.modules["bfcl_eval.constants.model_config"] = stub
    from bfcl_eval.constants.enums import Language
    from bfcl_eval.eval_checker.ast_eval.ast_checker import ast_checker

    return lambda functions, output, answer, category: ast_checker(functions, output, answer, Language.PYTHON,
                                                                   category, "tagjit-bench")


def load_questions(category: str, count: int) -> list[dict[str, Any]]:
    """The first ``count`` questions of a category whose functions convert to JSON Schema, with answers."""
    with open(os.path.join(DATA, "possible_answer", f"BFCL_v4_{category}.json")) as f:
        answers = {a["id"]: a["ground_truth"] for a in map(json.loads, filter(str.strip, f))}
    out = []
    with open(os.path.join(DATA, f"BFCL_v4_{category}.json")) as f:
        for q in map(json.loads, filter(str.strip, f)):
            try:
                q["tools"] = [to_tool(fn) for fn in q["function"]]
            except UnsupportedBFCLType:
                continue
            q["answer"] = answers[q["id"]]
            out.append(q)
            if len(out) >= count:
                break
    return out


def ask(client: openai.OpenAI, q: dict, backend: str, mode: str, parallel: str, category: str,
        max_tokens: int, check: Callable[..., dict]) -> Answer:
    """Ask one question and score the answer."""
    tools = [{**t, "function": {**t["function"], "strict": True}} for t in q["tools"]] if mode == "auto" else q["tools"]
    fields: dict[str, Any] = {"tools": tools, "tool_choice": "required" if mode == "required" else "auto"}
    if parallel == "false":
        fields["parallel_tool_calls"] = False
    started = time.perf_counter()
    try:
        r = client.chat.completions.create(model="smollm2", messages=q["question"][0], temperature=0,
                                           max_tokens=max_tokens, **fields)
    except openai.APIStatusError as e:
        return Answer(backend, mode, parallel, category, q["id"], e.status_code, time.perf_counter() - started,
                      error=str(e)[:300])
    answer = Answer(backend, mode, parallel, category, q["id"], 200, time.perf_counter() - started,
                    r.choices[0].finish_reason)
    schemas = {fn["name"]: to_json_schema(fn["parameters"]) for fn in q["function"]}
    output = []
    valid = bool(r.choices[0].message.tool_calls)
    for call in r.choices[0].message.tool_calls or []:
        try:
            args = json.loads(call.function.arguments)
        except ValueError:
            valid, args = False, None
        answer.calls.append({"name": call.function.name, "arguments": args})
        if args is None or call.function.name not in schemas:
            valid = False
            continue
        try:
            jsonschema.validate(args, schemas[call.function.name])
        except jsonschema.ValidationError:
            valid = False
        output.append({call.function.name: args})
    answer.valid = valid
    if not answer.calls:
        answer.error = (r.choices[0].message.content or "")[:300]
    elif len(output) == len(answer.calls):
        try:
            answer.correct = bool(check(q["function"], output, q["answer"], category)["valid"])
        except Exception as e:  # the checker's own errors on odd output count as wrong, as in BFCL
            answer.error = f"checker: {e}"[:300]
    return answer


def run_backend(backend: str, modes: list[str], args, questions: dict[str, list], check) -> list[Answer]:
    """Start one server and ask every question in each of its modes."""
    answers: list[Answer] = []
    started = time.perf_counter()
    print(f"[{backend}] starting vllm serve ...", file=sys.stderr, flush=True)
    with serve(backend, args.parser, timeout_s=600) as url:
        print(f"[{backend}] up after {time.perf_counter() - started:.0f} s", file=sys.stderr, flush=True)
        client = openai.OpenAI(base_url=url + "/v1", api_key="none", max_retries=0, timeout=600)
        for mode in modes:
            for parallel in PARALLEL:
                jobs = [(q, category) for category in args.categories for q in questions[category]]
                with ThreadPoolExecutor(args.concurrency) as pool:
                    done = list(pool.map(lambda job: ask(client, job[0], "none" if mode == "none" else backend,
                                                         mode, parallel, job[1], args.max_tokens, check), jobs))
                answers += done
                print(f"[{backend}] {mode:<8} parallel {parallel:<7} {sum(a.correct for a in done)}/{len(done)} "
                      f"correct, {sum(a.valid for a in done)} valid", file=sys.stderr, flush=True)
    return answers


def summarize(answers: list[Answer], categories: list[str]) -> list[dict[str, Any]]:
    """One row per backend, mode and parallel setting."""
    rows = []
    keys = list(dict.fromkeys((a.backend, a.mode, a.parallel) for a in answers))
    for backend, mode, parallel in keys:
        group = [a for a in answers if (a.backend, a.mode, a.parallel) == (backend, mode, parallel)]
        row: dict[str, Any] = {"backend": backend, "mode": mode, "parallel_calls": parallel, "n": len(group)}
        for c in categories:
            sub = [a for a in group if a.category == c]
            row[c] = sum(a.correct for a in sub) / len(sub) if sub else None
        row["accuracy"] = sum(a.correct for a in group) / len(group)
        row["valid"] = sum(a.valid for a in group) / len(group)
        row["errors"] = sum(a.status >= 400 for a in group) / len(group)
        row["cut"] = sum(a.finish_reason == "length" for a in group) / len(group)
        row["median_latency_s"] = statistics.median(a.latency_s for a in group)
        rows.append(row)
    return rows


def print_table(rows: list[dict[str, Any]], categories: list[str]) -> None:
    """Markdown table: accuracy per category, then the shares and the latency."""
    head = ["backend", "tool_choice", "parallel", *categories, "all", "schema-valid", "4xx/5xx", "cut", "median s"]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for r in rows:
        mode = {"required": "required", "auto": "auto (strict tools)", "none": "auto (nothing strict)"}[r["mode"]]
        cells = [r["backend"], mode, r["parallel_calls"], *[f"{r[c]:.0%}" for c in categories], f"{r['accuracy']:.0%}",
                 f"{r['valid']:.0%}", f"{r['errors']:.0%}", f"{r['cut']:.0%}", f"{r['median_latency_s']:.1f}"]
        print("| " + " | ".join(cells) + " |")


def plot(rows: list[dict[str, Any]], categories: list[str], path: str, title: str) -> None:
    """Accuracy per category per backend and mode, one panel per parallel setting."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(PARALLEL), figsize=(13, 4.5), sharey=True)
    for ax, parallel in zip(axes, PARALLEL):
        sub = [r for r in rows if r["parallel_calls"] == parallel]
        width = 0.8 / max(len(sub), 1)
        for i, r in enumerate(sub):
            xs = [k + i * width for k in range(len(categories))]
            ax.bar(xs, [100 * r[c] for c in categories], width, label=f"{r['backend']} / {r['mode']}")
        ax.set_xticks([k + 0.4 - width / 2 for k in range(len(categories))], categories)
        ax.set_title(f"parallel calls {parallel}")
        ax.set_ylabel("AST-correct (%)")
    axes[-1].legend(fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    fig.savefig(path, dpi=110)


def main() -> int:
    """Run the benchmark; print the table, write the JSON and the plot."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--questions", type=int, default=20, help="questions per category (default 20)")
    p.add_argument("--parser", default="hermes", choices=["hermes", "qwen3_coder"])
    p.add_argument("--backends", default="tagjit,xgrammar,guidance")
    p.add_argument("--modes", default=",".join(MODES))
    p.add_argument("--categories", default=",".join(CATEGORIES))
    p.add_argument("--max-tokens", type=int, default=300)
    p.add_argument("--concurrency", type=int, default=4, help="requests in flight per server (default 4)")
    p.add_argument("--json", help="write every answer and the summary here")
    p.add_argument("--plot", default=os.path.join(HERE, "out", "bfcl.png"))
    args = p.parse_args()
    args.categories = args.categories.split(",")
    modes = args.modes.split(",")
    check = load_ast_checker()
    questions = {c: load_questions(c, args.questions) for c in args.categories}
    answers: list[Answer] = []
    for backend in args.backends.split(","):
        # "none" constrains nothing whichever backend is configured; ask it once, of the xgrammar server.
        own = [m for m in modes if m != "none" or backend == "xgrammar" or "xgrammar" not in args.backends]
        answers += run_backend(backend, own, args, questions, check)
    rows = summarize(answers, args.categories)
    print(f"\nBFCL, SmolLM2-135M-Instruct, {args.parser} parser, {args.questions} questions per category, greedy, "
          f"max_tokens {args.max_tokens}, {args.concurrency} in flight\n")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "summary": rows, "answers": [asdict(a) for a in answers]}, f, indent=1)
    print_table(rows, args.categories)
    plot(rows, args.categories, args.plot, f"BFCL on SmolLM2-135M-Instruct ({args.parser}, "
                                            f"{args.questions} per category)")
    print(f"\nplot: {args.plot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
