"""tagjit in every process vLLM spawns: several API servers, the offline ``LLM`` entry point, other backends."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import jsonschema
import openai
import pytest

from server import MODEL_DIR, build, closer_bias, vllm_server

SCHEMA = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"], "additionalProperties": False}


def test_two_api_servers_both_validate_and_serve_with_tagjit():
    bias = closer_bias()
    with vllm_server("tagjit", "--api-server-count", "2") as url:
        client = openai.OpenAI(base_url=url + "/v1", api_key="none", max_retries=0)
        for _ in range(6):  # requests are spread over both API servers
            r = client.chat.completions.create(
                model="tiny", messages=[{"role": "user", "content": "n?"}], max_tokens=60, logit_bias=bias,
                response_format={"type": "json_schema", "json_schema": {"name": "n", "schema": SCHEMA}})
            jsonschema.validate(json.loads(r.choices[0].message.content), SCHEMA)
            with pytest.raises(openai.BadRequestError, match="uniqueItems"):
                client.chat.completions.create(
                    model="tiny", messages=[{"role": "user", "content": "n?"}], max_tokens=5,
                    response_format={"type": "json_schema", "json_schema": {
                        "name": "bad", "schema": {"type": "array", "uniqueItems": True}}})


OFFLINE = textwrap.dedent('''
    import json, sys
    from vllm.plugins import load_general_plugins

    def main():
        load_general_plugins()
        from vllm import LLM, SamplingParams
        from vllm.sampling_params import StructuredOutputsParams
        backend = sys.argv[2]
        llm = LLM(model=sys.argv[1], structured_outputs_config={"backend": backend}, max_model_len=1024,
                  enforce_eager=True, dtype="bfloat16")
        bias = {int(k): v for k, v in json.loads(sys.argv[3]).items()}
        params = SamplingParams(max_tokens=40, logit_bias=bias, seed=1,
                                structured_outputs=StructuredOutputsParams(json=json.loads(sys.argv[4])))
        out = llm.generate(["Give n:"], params)[0].outputs[0].text
        print("OUTPUT=" + json.dumps(out))

    if __name__ == "__main__":
        main()
''')


@pytest.mark.parametrize("backend", ["tagjit", "xgrammar"])
def test_offline_llm_serves_json_schema_with_backend_and_its_bitmask_application(tmp_path, backend):
    script = tmp_path / "offline.py"
    script.write_text(OFFLINE)
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "OMP_NUM_THREADS": "1"}
    r = subprocess.run([sys.executable, str(script), build(MODEL_DIR), backend, json.dumps(closer_bias()),
                        json.dumps(SCHEMA)], capture_output=True, text=True, timeout=420, env=env)
    lines = [line for line in r.stdout.splitlines() if line.startswith("OUTPUT=")]
    assert r.returncode == 0 and lines, r.stderr[-3000:]
    jsonschema.validate(json.loads(json.loads(lines[0][len("OUTPUT="):])), SCHEMA)
    # tagjit's bitmask kernel runs only where tagjit is the backend, with tagjit merely installed it stays out
    assert ("token bitmasks applied by tagjit's kernel" in r.stdout + r.stderr) == (backend == "tagjit")
