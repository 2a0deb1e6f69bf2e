# A static sidecar-operator on a distroless, non-root base.
#   docker build -t sidecar-operator:dev .
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/sidecar-operator ./cmd/sidecar-operator

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/sidecar-operator /sidecar-operator
USER 65532:65532
ENTRYPOINT ["/sidecar-operator"]
