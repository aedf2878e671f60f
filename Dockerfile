# CPU image that serves clinicode: by default the HTTP scoring service (`clinicode serve`, docs/serve.md), or the
# Streamlit app as an alternative command. No data, checkpoints or tokens are baked in: mount them read-only.
#   docker build -t clinicode .
#   docker run --rm -p 127.0.0.1:8000:8000 -v "$PWD/runs:/runs:ro" -e CLINICODE_RUN=/runs/leam \
#       -v "$PWD/serve-token:/run/secrets/clinicode-bearer:ro" --user "$(id -u):$(id -g)" clinicode
# The service binds 0.0.0.0 inside the container, so it needs a bearer token: a file of mode 600 that the container's
# user can read (hence --user with your own ids, or chown 10001 the file); without it the container stops at once with
# one line saying so. The app instead (runs are the subfolders of /runs):
#   docker run --rm -p 127.0.0.1:8501:8501 -v "$PWD/runs:/runs:ro" clinicode \
#       streamlit run app_streamlit/main.py --server.address=0.0.0.0 --server.port=8501 --server.headless=true
# Both only read /runs (each run's checkpoint/ and, for the app's test-split notes, the prepared data its manifest
# names; mount that read-only too, at the same path). They run as an unprivileged user and write nothing.
# Layer order: system packages, then dependencies (cached while only code changes), then the code.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 \
    TOKENIZERS_PARALLELISM=true CLINICODE_RUNS=/runs CLINICODE_RUN=/runs/run \
    STREAMLIT_BROWSER_GATHER_USAGE_STATS=false

RUN apt-get update && apt-get install -y --no-install-recommends curl && rm -rf /var/lib/apt/lists/*

WORKDIR /app
# CPU-only torch from PyTorch's CPU index keeps the image ~1 GB instead of ~6 GB with CUDA.
RUN pip install --index-url https://download.pytorch.org/whl/cpu "torch>=2.2"
COPY pyproject.toml README.md ./
COPY clinicode/__init__.py clinicode/__init__.py
RUN pip install ".[app,serve]" && pip uninstall -y clinicode

COPY clinicode ./clinicode
COPY app_streamlit ./app_streamlit
COPY .streamlit ./.streamlit
RUN pip install --no-deps . && useradd --create-home --uid 10001 clinicode
USER clinicode

EXPOSE 8000 8501
HEALTHCHECK --interval=30s --timeout=5s --start-period=30s --retries=3 \
    CMD curl -fsS http://127.0.0.1:8000/health || curl -fsS http://127.0.0.1:8501/_stcore/health || exit 1
CMD ["sh", "-c", "exec clinicode serve --checkpoint \"$CLINICODE_RUN\" --host 0.0.0.0 --port 8000 --token-file /run/secrets/clinicode-bearer"]
