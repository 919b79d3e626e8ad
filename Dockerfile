# The webhooks image: every process of the Procfile from one image (docs/deploy.md).
#
#   podman build --format docker -t webhooks .      # or: docker build -t webhooks .
#   docker run -p 8000:8000 -v webhooks-data:/data webhooks
#
# The default command is the quick start (`webhooks serve`: SQLite, web and worker, the console), its
# database, key file and admin password file in the /data volume. The Procfile's processes are the same
# image with another command: `webhooks db upgrade`, `web` (gunicorn), `webhooks worker`.
#
# Build arguments: EXTRAS adds the package's extras (`rabbitmq`, `nats`, `sqs`, `kafka`, `buses`, `otel`; comma-
# separated); BASE is the Debian image. With no package index in reach, mount a wheelhouse (wheels of
# the package and of its dependencies: `pip wheel --wheel-dir wheelhouse .`) at /wheelhouse:
#   podman build --format docker -v "$PWD/wheelhouse:/wheelhouse:ro" -t webhooks .
ARG BASE=docker.io/library/debian:bookworm-slim

# ---- build: the package and its dependencies in a virtual environment, bytecode compiled ----
FROM ${BASE} AS build
RUN apt-get update \
    && apt-get install -y --no-install-recommends python3 python3-venv \
    && rm -rf /var/lib/apt/lists/*
COPY pyproject.toml README.md /src/
COPY webhooks /src/webhooks
COPY jobs /src/jobs
COPY migrations /src/migrations
COPY tests/payloads /src/tests/payloads
ARG EXTRAS=""
RUN set -eu; \
    python3 -m venv /opt/webhooks; \
    want="webhooks${EXTRAS:+[$EXTRAS]}"; \
    if ls /wheelhouse/*.whl >/dev/null 2>&1; then \
        /opt/webhooks/bin/pip install --no-cache-dir --no-index --find-links /wheelhouse "$want"; \
    else \
        /opt/webhooks/bin/pip install --no-cache-dir "/src${EXTRAS:+[$EXTRAS]}"; \
    fi; \
    /opt/webhooks/bin/pip uninstall -y -q pip setuptools; \
    /opt/webhooks/bin/python -m compileall -q -j 0 /opt/webhooks/lib; \
    /opt/webhooks/bin/webhooks --version

# ---- runtime: Debian's python3 and the environment; no compiler, no pip, no secret ----
FROM ${BASE}
ARG VERSION=0.1.0
ARG SOURCE=https://github.com/webhooks/webhooks
LABEL org.opencontainers.image.title="webhooks" \
      org.opencontainers.image.description="A self-hosted receiver for payment and platform webhooks: verified, stored once, processed in order." \
      org.opencontainers.image.source="${SOURCE}" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.licenses="MIT"
RUN apt-get update \
    && apt-get install -y --no-install-recommends python3 ca-certificates \
    && rm -rf /var/lib/apt/lists/* /var/cache/apt/* /var/log/apt /var/log/dpkg.log \
    && groupadd --system --gid 10001 webhooks \
    && useradd --system --uid 10001 --gid 10001 --home-dir /data --no-create-home --shell /usr/sbin/nologin webhooks \
    && mkdir /data && chown 10001:10001 /data
COPY --from=build /opt/webhooks /opt/webhooks
# DATABASE_URL: the embedded default's SQLite file in the volume (its key file and admin password file
# are kept beside it); set it (and REDIS_URL) for PostgreSQL and Redis. PYTHONDONTWRITEBYTECODE: the
# bytecode is compiled above, and the root filesystem may be read-only.
ENV PATH=/opt/webhooks/bin:$PATH \
    DATABASE_URL=sqlite:////data/webhooks.db \
    PORT=8000 \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
WORKDIR /data
VOLUME ["/data"]
USER 10001:10001
EXPOSE 8000
STOPSIGNAL SIGTERM
HEALTHCHECK --interval=30s --timeout=5s --start-period=20s --retries=3 \
    CMD ["python3", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/healthz' % os.environ.get('PORT', '8000'), timeout=4)"]
CMD ["webhooks", "serve", "--host", "0.0.0.0"]
