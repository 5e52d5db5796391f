# syntax=docker/dockerfile:1.4
# spotshift: one image for spot-extender (webhook + scheduler extender), spot-rescheduler and spot-certs.
#
#   bash deploy/image/build.sh [--base IMAGE] [--tag TAG]      (docker build where an engine runs, else buildah)
#   docker build --build-arg VERSION=$(version) -t spotshift .   (by hand; VERSION is pyproject.toml's version)
#
# The builder and the runtime stage start from the same base image, so the virtual environment built in the
# first (/opt/spotshift, its python a symlink to the base's python3) runs unchanged in the second. Either base
# works: a public Python image (python3 with venv and pip, the default) or Debian's own python3 (a minbase
# root filesystem; deploy/image/base.sh makes one), for which the builder installs python3-venv with apt.
# The runtime stage gets the environment and nothing else: no compiler, no pip, no package cache, no source.
ARG BASE_IMAGE=docker.io/library/python:3.11-slim-bookworm

FROM ${BASE_IMAGE} AS build
# Debian's python3 has no venv/ensurepip without python3-venv; a public Python image has both.
RUN if ! python3 -c 'import ensurepip, venv' 2>/dev/null; then \
      apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends python3-venv \
      && rm -rf /var/lib/apt/lists/*; \
    fi \
    && python3 -m venv /opt/spotshift
WORKDIR /src
# Dependencies first, from pyproject.toml alone, so a source change reuses this (slowest) layer.
# The optional secret `cacert` is a CA bundle for machines whose TLS-intercepting proxy signs PyPI's
# certificate: used for this step only, never stored in a layer.
# kubernetes.aio, the client's asyncio twin of kubernetes.client (~68 MB with its bytecode, a third of the
# environment), is left out: spotshift uses the synchronous client only (tests/unit/test_deploy.py checks
# that nothing imports kubernetes.aio) and the package's own __init__ does not import it.
COPY pyproject.toml ./
RUN --mount=type=secret,id=cacert,required=false \
    if [ -s /run/secrets/cacert ]; then export PIP_CERT=/run/secrets/cacert; fi \
    && python3 -c 'import tomllib; print("\n".join(tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"]))' \
       > /tmp/requirements.txt \
    && /opt/spotshift/bin/pip install --no-cache-dir --disable-pip-version-check -q -r /tmp/requirements.txt \
    && rm -rf /opt/spotshift/lib/python3*/site-packages/kubernetes/aio
COPY README.md ./
COPY shared ./shared
COPY extender ./extender
COPY rescheduler ./rescheduler
ARG VERSION=""
RUN --mount=type=secret,id=cacert,required=false \
    if [ -s /run/secrets/cacert ]; then export PIP_CERT=/run/secrets/cacert; fi \
    && /opt/spotshift/bin/pip wheel --no-cache-dir --disable-pip-version-check -q --no-deps -w /tmp/dist . \
    && /opt/spotshift/bin/pip install --no-cache-dir --disable-pip-version-check -q --no-deps /tmp/dist/*.whl \
    && built=$(/opt/spotshift/bin/python -c 'import importlib.metadata as m; print(m.version("spotshift"))') \
    && if [ -n "$VERSION" ] && [ "$VERSION" != "$built" ]; then \
         echo "VERSION=$VERSION but pyproject.toml says $built" >&2; exit 1; \
       fi \
    && /opt/spotshift/bin/pip uninstall -q -y pip setuptools \
    && /opt/spotshift/bin/spot-extender --help >/dev/null \
    && /opt/spotshift/bin/spot-rescheduler --help >/dev/null \
    && /opt/spotshift/bin/spot-certs --help >/dev/null

FROM ${BASE_IMAGE}
ARG VERSION=""
LABEL org.opencontainers.image.title="spotshift" \
      org.opencontainers.image.description="Kubernetes workloads on spot capacity: admission webhook, scheduler extender and rescheduler" \
      org.opencontainers.image.source="https://github.com/spotshift/spotshift" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=build /opt/spotshift /opt/spotshift
# HOME=/tmp: the only writable place when the root filesystem is read-only (an emptyDir in deploy/).
# Bytecode was compiled at install time; nothing tries to write more.
ENV PATH=/opt/spotshift/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    HOME=/tmp \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
WORKDIR /tmp
# Numeric, so Kubernetes can check runAsNonRoot without a passwd entry (the distroless "nonroot" id).
USER 65532:65532
CMD ["spot-extender", "--help"]
