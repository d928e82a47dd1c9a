# syntax=docker/dockerfile:1
# The `outbox` binary (relay, serve, operator commands) in a small image.
#   docker build -t outbox:0.1 .
#   docker run --rm outbox:0.1 --help
# The build step is `cargo build --release --locked -p outboxkit-cli`.

FROM rust:1.94-bookworm AS build
WORKDIR /src
COPY . .
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked -p outboxkit-cli \
    && install -D -m 0755 target/release/outbox /out/outbox

FROM debian:bookworm-slim
# CA roots for HTTPS webhooks, TLS to the database and the mail API.
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --uid 10001 --home-dir /nonexistent --shell /usr/sbin/nologin outbox
COPY --from=build /out/outbox /usr/local/bin/outbox
USER 10001:10001
# /metrics, /healthz, /readyz of `outbox relay --metrics-addr 0.0.0.0:9090`;
# the admin API of `outbox serve --listen 0.0.0.0:8080`.
EXPOSE 9090 8080
ENTRYPOINT ["/usr/local/bin/outbox"]
CMD ["relay", "--metrics-addr", "0.0.0.0:9090", "--log-format", "json"]
