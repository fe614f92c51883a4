# kvpilot container image. No image can be built on the development machines (no Docker engine there);
# CI renders the manifests instead. Build elsewhere with: docker build -t kvpilot:0.1.0 .
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
