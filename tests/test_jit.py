"""The JIT policy: overlap compile with prefill when it fits, hold the request back when it would stall."""

import torch

from pools import UNHURRIED, compile_pool_held
from tagjit import CompileService, Settings, allocate_token_bitmask
from tagjit.compile.jit import JitPolicy
from tagjit.metrics import JIT_DECISIONS
from tagjit.constraint import Constraint, Kind


def decisions(label: str) -> float:
    return JIT_DECISIONS.labels(label)._value.get()


def test_cache_hit_always_overlaps():
    policy = JitPolicy(Settings())
    assert policy.overlap(cached=True, estimate_ms=10_000, prompt_tokens=1)


def test_compile_that_fits_in_prefill_overlaps():
    policy = JitPolicy(Settings(stall_budget_ms=5), ms_per_prompt_token=0.1)
    assert policy.overlap(cached=False, estimate_ms=100, prompt_tokens=2000)  # 200 ms of prefill


def test_long_compile_with_short_prompt_waits():
    policy = JitPolicy(Settings(stall_budget_ms=5), ms_per_prompt_token=0.1)
    assert not policy.overlap(cached=False, estimate_ms=500, prompt_tokens=100)  # 10 ms of prefill


def test_stall_budget_widens_what_overlaps():
    tight = JitPolicy(Settings(stall_budget_ms=1), ms_per_prompt_token=0.1)
    loose = JitPolicy(Settings(stall_budget_ms=50), ms_per_prompt_token=0.1)
    assert not tight.overlap(cached=False, estimate_ms=30, prompt_tokens=100)
    assert loose.overlap(cached=False, estimate_ms=30, prompt_tokens=100)


def test_long_compile_overlaps_when_no_other_request_is_live():
    policy = JitPolicy(Settings(stall_budget_ms=5), ms_per_prompt_token=0.1)
    assert policy.overlap(cached=False, estimate_ms=500, prompt_tokens=100, others_live=0)


def test_long_compile_waits_when_another_request_is_live():
    policy = JitPolicy(Settings(stall_budget_ms=5), ms_per_prompt_token=0.1)
    assert not policy.overlap(cached=False, estimate_ms=500, prompt_tokens=100, others_live=1)


def test_first_observed_prefill_replaces_the_prior():
    policy = JitPolicy(Settings(), ms_per_prompt_token=0.01)
    policy.observe_prefill(1000, 500.0)
    assert policy.ms_per_prompt_token == 0.5


def test_never_mode_waits_on_every_miss():
    policy = JitPolicy(Settings(jit="never"))
    assert not policy.overlap(cached=False, estimate_ms=0.1, prompt_tokens=100_000)


def test_always_mode_overlaps_every_miss():
    policy = JitPolicy(Settings(jit="always"))
    assert policy.overlap(cached=False, estimate_ms=100_000, prompt_tokens=1)


def test_prefill_speed_is_learned_from_observed_requests():
    policy = JitPolicy(Settings(), ms_per_prompt_token=0.01)
    for _ in range(20):
        policy.observe_prefill(1000, 500.0)  # 0.5 ms per token
    assert abs(policy.ms_per_prompt_token - 0.5) < 0.01


def test_every_decision_is_counted():
    before = decisions("wait")
    JitPolicy(Settings(jit="never")).overlap(cached=False, estimate_ms=1, prompt_tokens=1)
    assert decisions("wait") == before + 1


def test_jit_mask_equals_the_mask_of_a_synchronously_compiled_grammar(service, llama3_info):
    c = Constraint.of(Kind.JSON, {"type": "object", "properties": {"jit2": {"enum": ["a", "b"]}}})
    jit_service = CompileService(llama3_info, UNHURRIED.replace(compile_threads=1))
    with compile_pool_held(jit_service):
        jit = jit_service.jit_grammar(c)
        assert not jit.ready()  # the mask below comes from a grammar that was still compiling when handed out
    ours, ref = allocate_token_bitmask(1, llama3_info.vocab_size), allocate_token_bitmask(1, llama3_info.vocab_size)
    jit.fill_bitmask(ours, 0)
    service.grammar(c).fill_bitmask(ref, 0)
    assert torch.equal(ours, ref)
    jit_service.close()


def test_compile_threads_run_at_the_configured_niceness(llama3_info):
    import os
    import threading

    from tagjit import CompileService

    svc = CompileService(llama3_info, UNHURRIED.replace(compile_nice=7))
    try:
        nice = svc._pool.submit(lambda: os.getpriority(os.PRIO_PROCESS, threading.get_native_id())).result()
    finally:
        svc.close()
    assert nice == max(7, os.getpriority(os.PRIO_PROCESS, 0))


def test_compile_threads_run_only_on_the_configured_cpus(llama3_info):
    import os

    from tagjit import CompileService

    before = os.sched_getaffinity(0)
    cpu = min(before)
    svc = CompileService(llama3_info, UNHURRIED.replace(compile_cpus=str(cpu)))
    try:
        cpus = svc._pool.submit(os.sched_getaffinity, 0).result()
        units = svc._unit_pool.submit(os.sched_getaffinity, 0).result()
    finally:
        svc.close()
    assert cpus == units == {cpu}
    assert os.sched_getaffinity(0) == before  # the serving thread keeps its CPUs


def test_a_cpu_list_names_ranges_and_single_cpus():
    from tagjit.compile.service import parse_cpus

    assert parse_cpus("0-2, 5,7-8") == {0, 1, 2, 5, 7, 8}
