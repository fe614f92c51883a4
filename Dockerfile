# kvpilot container image: `make image` builds it as kvpilot:<version in pyproject.toml>, the tag deploy/base runs,
# with docker, podman or buildah. The development machines and CI have no container engine: `make lint` lints this
# file (hadolint) and tests/deploy/test_image.py builds the wheel from exactly the files copied below.
FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY collector collector
COPY detectors detectors
COPY scaler scaler
COPY store store
COPY api api
COPY simulator simulator
COPY kvpilot kvpilot
COPY migrations migrations
COPY dashboards dashboards
COPY alerts alerts
RUN pip wheel --no-cache-dir --wheel-dir /wheels .

FROM python:3.11-slim
RUN groupadd --system --gid 10001 kvpilot \
 && useradd --system --uid 10001 --gid kvpilot --home-dir /var/lib/kvpilot --create-home kvpilot
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir /wheels/*.whl && rm -rf /wheels
USER 10001:10001
WORKDIR /var/lib/kvpilot
ENV KVPILOT_DATA_DIR=/var/lib/kvpilot PYTHONUNBUFFERED=1
EXPOSE 8080 9090
ENTRYPOINT ["kvpilot"]
CMD ["run", "--config", "/etc/kvpilot/config.yaml"]
