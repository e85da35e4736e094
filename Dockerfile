# syntax=docker/dockerfile:1
# challenge-hook: a static binary on distroless, running as the nonroot user (65532).

FROM golang:1.26-bookworm AS build
WORKDIR /src
# Dependencies first, so that source changes do not re-download modules.
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
# xterm.js for the player page's terminal, at the version and integrity hack/fetch-xterm.sh pins
# (never committed: it is another project's file).
RUN bash hack/fetch-xterm.sh
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o /out/challenge-hook ./cmd/challenge-hook && \
    CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o /out/pause ./cmd/pause

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/challenge-hook /challenge-hook
# The pre-pull DaemonSets' program (manifests/components/prepull): 1.5 MiB, copied by their init
# container, where a copy of the 25 MiB hook would do.
COPY --from=build /out/pause /pause
USER 65532:65532
EXPOSE 8080
ENTRYPOINT ["/challenge-hook"]
