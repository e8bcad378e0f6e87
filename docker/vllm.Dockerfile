# vLLM (GPU) with tagjit installed and selected as the structured-output backend.
#   docker build -f docker/vllm.Dockerfile -t vllm-tagjit .
#   docker run --gpus all -p 8000:8000 vllm-tagjit MODEL --enable-auto-tool-choice --tool-call-parser hermes
ARG VLLM_IMAGE=vllm/vllm-openai:v0.32.0
FROM ${VLLM_IMAGE}

COPY pyproject.toml README.md /opt/tagjit/
COPY src /opt/tagjit/src
COPY plugins /opt/tagjit/plugins
COPY configs /opt/tagjit/configs
# --no-deps: the image already has vLLM's torch and xgrammar; tagjit's own needs are light.
RUN pip install --no-cache-dir --no-deps /opt/tagjit \
 && pip install --no-cache-dir "jsonschema>=4.18" "prometheus_client>=0.17" \
 && python -c "import tagjit, tagjit_vllm"

# Optional: compiled grammars shared by every replica that mounts the same volume.
ENV TAGJIT_DISK_CACHE_DIR=/var/cache/tagjit
VOLUME /var/cache/tagjit

ENTRYPOINT ["vllm", "serve", "--structured-outputs-config.backend", "tagjit"]
