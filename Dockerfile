# Multi-stage build of the switchyard binary (see deploy/offline.yaml).
FROM rust:1-bookworm AS build
RUN apt-get update && apt-get install -y --no-install-recommends cmake && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN cargo build --release --locked && cp target/release/switchyard /switchyard

FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /switchyard /usr/local/bin/switchyard
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/switchyard"]
