# SGLang 0.5.23 with tagjit as its grammar backend (GPU image).
#   docker build -f docker/sglang.Dockerfile -t sglang-tagjit .
#   docker run --gpus all -p 30000:30000 --ipc=host -v ~/.cache/huggingface:/root/.cache/huggingface \
#     sglang-tagjit --model-path Qwen/Qwen2.5-7B-Instruct --tool-call-parser qwen25
# The tag is unverified here (no registry access): use the SGLang 0.5.23 image for your CUDA version.
ARG SGLANG_IMAGE=lmsysorg/sglang:v0.5.23
FROM ${SGLANG_IMAGE}

WORKDIR /opt/tagjit
COPY pyproject.toml README.md ./
COPY src ./src
COPY configs ./configs
COPY plugins ./plugins
# --no-deps keeps the image's torch, xgrammar (0.2.7) and sglang exactly as SGLang ships them.
RUN pip install --no-cache-dir --no-deps . && pip install --no-cache-dir jsonschema prometheus_client \
    && python -m sglang.launch_server --help | grep -q "tagjit"

ENV TAGJIT_DISK_CACHE_DIR=/var/cache/tagjit
ENTRYPOINT ["python", "-m", "sglang.launch_server", "--host", "0.0.0.0", "--port", "30000", "--grammar-backend", "tagjit"]
