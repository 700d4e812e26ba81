# syntax=docker/dockerfile:1
# Two images from one build, each a static binary on distroless as a
# non-root user:
#   docker build -t paysvc .                         the service (default target)
#   docker build --target mockpay -t paysvc-mockpay .  the demo: the simulated provider
#                                                      (mockpay) and the tour (demo)
# The service's image holds the paysvc binary alone: no simulator, no lab.
FROM golang:1.26-bookworm AS build
WORKDIR /src
# Dependencies first, so that a code change does not download them again.
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ENV CGO_ENABLED=0
RUN go build -trimpath -ldflags="-s -w" -o /out/paysvc ./cmd/paysvc \
 && go build -trimpath -ldflags="-s -w" -o /out/mockpay ./cmd/mockpay \
 && go build -trimpath -ldflags="-s -w" -o /out/demo ./cmd/demo

# distroless/static: CA certificates, tzdata, /etc/passwd with "nonroot"
# (65532), and no shell or package manager to attack.
FROM gcr.io/distroless/static-debian12:nonroot AS mockpay
COPY --from=build /out/mockpay /out/demo /usr/local/bin/
USER nonroot:nonroot
ENTRYPOINT ["/usr/local/bin/mockpay"]

FROM gcr.io/distroless/static-debian12:nonroot AS paysvc
COPY --from=build /out/paysvc /usr/local/bin/
USER nonroot:nonroot
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/paysvc"]
CMD ["serve"]
