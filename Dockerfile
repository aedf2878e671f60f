# CPU image that serves the clinicode app. No data or checkpoints are baked in: mount them read-only.
#   docker build -t clinicode .
#   docker run --rm -p 127.0.0.1:8501:8501 -v "$PWD/runs:/runs:ro" clinicode
# The app only reads /runs (each run's checkpoint/ and, for test-split notes, the prepared data its manifest
# names; mount that read-only too, at the same path). It runs as an unprivileged user and writes nothing.
# Layer order: system packages, then dependencies (cached while only code changes), then the code.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 \
    TOKENIZERS_PARALLELISM=true CLINICODE_RUNS=/runs \
    STREAMLIT_BROWSER_GATHER_USAGE_STATS=false

RUN apt-get update && apt-get install -y --no-install-recommends curl && rm -rf /var/lib/apt/lists/*

WORKDIR /app
# CPU-only torch from PyTorch's CPU index keeps the image ~1 GB instead of ~6 GB with CUDA.
RUN pip install --index-url https://download.pytorch.org/whl/cpu "torch>=2.2"
COPY pyproject.toml README.md ./
COPY clinicode/__init__.py clinicode/__init__.py
RUN pip install ".[app]" && pip uninstall -y clinicode

COPY clinicode ./clinicode
COPY app_streamlit ./app_streamlit
COPY .streamlit ./.streamlit
RUN pip install --no-deps . && useradd --create-home --uid 10001 clinicode
USER clinicode

EXPOSE 8501
HEALTHCHECK --interval=30s --timeout=5s --start-period=20s --retries=3 \
    CMD curl -fsS http://127.0.0.1:8501/_stcore/health || exit 1
CMD ["streamlit", "run", "app_streamlit/main.py", "--server.address=0.0.0.0", "--server.port=8501", "--server.headless=true"]
