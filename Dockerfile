# c1m in a container, built from source inside the image (crates.io and Debian apt only).
#   docker build -t c1m --build-arg C1M_GIT_COMMIT=$(git rev-parse --short=12 HEAD) .
#   docker run --rm -p 8080:8080 --ulimit nofile=1048576:1048576 \
#     --sysctl net.core.somaxconn=16384 --sysctl net.ipv4.tcp_max_tw_buckets=1048576 \
#     --sysctl net.ipv4.tcp_slow_start_after_idle=0 c1m
# Those are what `c1m tune --conns 1M` prints for a container. Host-wide limits (fs.nr_open,
# fs.file-max, tcp_mem, ...) are not namespaced: set them on the host with
# `c1m tune --conns N --apply`. docs/install.md, "Container", has the details.

FROM rust:1-slim-bookworm AS build
WORKDIR /src
COPY . .
# The context has no .git (see .dockerignore), so the commit for `c1m --version` comes in as a
# build argument; left out, the binary says "unknown".
ARG C1M_GIT_COMMIT=unknown
ENV C1M_GIT_COMMIT=${C1M_GIT_COMMIT}
RUN cargo build --release --locked -p c1m \
    && strip target/release/c1m

FROM debian:bookworm-slim
COPY --from=build /src/target/release/c1m /usr/bin/c1m
COPY dist/c1m.toml /etc/c1m/c1m.toml
COPY LICENSE LICENSE-MIT LICENSE-APACHE /usr/share/doc/c1m/
# Unprivileged: nothing in serve needs root (port 8080, no capabilities).
USER 65534:65534
EXPOSE 8080
# Readiness and liveness for orchestrators: GET /healthz (200 only when every worker answers).
STOPSIGNAL SIGTERM
ENTRYPOINT ["/usr/bin/c1m"]
CMD ["serve", "--config", "/etc/c1m/c1m.toml"]
