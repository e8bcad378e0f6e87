"""Settings: every TAGJIT_* variable read in one place, and a bad value is an error that names it."""

from __future__ import annotations

import dataclasses
import inspect
import json
import subprocess
import sys
import textwrap

import pytest

from tagjit.settings import Settings, env_name


def test_every_setting_has_a_variable_named_after_it():
    assert env_name("max_whitespace") == "TAGJIT_MAX_WHITESPACE"
    env = {env_name("compile_threads"): "3", env_name("vllm_apply"): "off", env_name("jit"): "never",
           env_name("max_whitespace"): "none"}
    s = Settings.from_env(env)
    assert (s.compile_threads, s.vllm_apply, s.jit, s.max_whitespace) == (3, False, "never", None)


@pytest.mark.parametrize("variable, value, allowed", [
    ("TAGJIT_JIT", "sometimes", "one of auto, always, never"),
    ("TAGJIT_TOOL_SCOPE", "alwyas", "one of auto, always"),
    ("TAGJIT_TOOL_SCHEMA_MODE", "lenient", "one of default, auto, strict"),
    ("TAGJIT_LINT", "maybe", "a boolean"),
    ("TAGJIT_VLLM_TOOLS", "2", "a boolean"),
    ("TAGJIT_COMPILE_TIMEOUT_S", "ten", "a number"),
    ("TAGJIT_MAX_WHITESPACE", "-1", "at least 0"),
    ("TAGJIT_JSON_STYLE", "pretty", "one of auto, free, dumps"),
])
def test_a_bad_value_names_the_variable_and_what_it_accepts(variable, value, allowed):
    with pytest.raises(ValueError) as e:
        Settings.from_env({variable: value})
    message = str(e.value)
    assert variable in message and value in message and allowed in message


def test_a_config_file_with_an_unknown_key_is_refused_with_the_known_ones(tmp_path):
    path = tmp_path / "tagjit.json"
    path.write_text(json.dumps({"max_whitespcae": 2}))
    with pytest.raises(ValueError, match="unknown tagjit settings.*max_whitespcae.*known: max_whitespace"):
        Settings.from_env({"TAGJIT_CONFIG": str(path)})


def test_a_config_file_value_of_the_wrong_type_is_refused(tmp_path):
    path = tmp_path / "tagjit.json"
    path.write_text(json.dumps({"tool_scope": "sometimes"}))
    with pytest.raises(ValueError, match="TAGJIT_TOOL_SCOPE='sometimes': expected one of auto, always"):
        Settings.from_env({"TAGJIT_CONFIG": str(path)})


def test_settings_built_in_code_are_checked_too():
    with pytest.raises(ValueError, match="TAGJIT_JIT"):
        Settings(jit="sometimes")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="TAGJIT_COMPILE_THREADS"):
        Settings().replace(compile_threads=-2)


def test_the_defaults_are_valid_and_every_field_is_documented():
    Settings.from_env({})
    source = inspect.getsource(Settings)
    for f in dataclasses.fields(Settings):
        assert '"""' in source.split(f"    {f.name}:")[1].split("\n")[1], f"{f.name} has no docstring"


def test_importing_tagjit_reads_no_setting():
    r = subprocess.run([sys.executable, "-c", textwrap.dedent("""
        import os
        os.environ["TAGJIT_JIT"] = "sometimes"      # bad: would raise if read
        import tagjit, tagjit.tools, tagjit.schema, tagjit.tools.xml_args, tagjit.constraint, tagjit.compile.service
        from tagjit import settings
        print(settings._current is None)
    """)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["True"]


def test_an_engines_compact_json_option_wins_over_its_whitespace_bound():
    assert Settings(max_whitespace=8).for_engine(compact_json=True, max_whitespace=4).max_whitespace == 0


def test_an_engines_whitespace_bound_replaces_tagjits():
    assert Settings(max_whitespace=8).for_engine(max_whitespace=2).max_whitespace == 2


def test_an_engine_without_json_options_keeps_tagjits_settings():
    s = Settings(max_whitespace=8)
    assert s.for_engine() is s


def test_an_unknown_tagjit_variable_is_an_error_naming_the_closest_setting():
    with pytest.raises(ValueError, match="TAGJIT_JTI: not a tagjit setting; did you mean TAGJIT_JIT"):
        Settings.from_env({"TAGJIT_JTI": "never"})


def test_the_variables_tagjit_hands_to_its_own_processes_are_not_errors():
    assert Settings.from_env({"TAGJIT_VLLM_SELECTED": "1", "TAGJIT_METRICS_DIR": "/tmp/x"}) == Settings()


@pytest.mark.parametrize("cpus", ["abc", "1-", "2,,3"])
def test_a_bad_cpu_list_is_an_error_at_start(cpus):
    with pytest.raises(ValueError, match="TAGJIT_COMPILE_CPUS"):
        Settings.from_env({"TAGJIT_COMPILE_CPUS": cpus})


def test_a_cpu_list_is_accepted():
    assert Settings.from_env({"TAGJIT_COMPILE_CPUS": "0-3, 8"}).compile_cpus == "0-3, 8"
