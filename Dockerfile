# syntax=docker/dockerfile:1
# Two binaries, paysvc and mockpay, in one small static image that runs as
# a non-root user. Build: docker build -t paysvc .
FROM golang:1.26-bookworm AS build
WORKDIR /src
# Dependencies first, so that a code change does not download them again.
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ENV CGO_ENABLED=0
RUN go build -trimpath -ldflags="-s -w" -o /out/paysvc ./cmd/paysvc \
 && go build -trimpath -ldflags="-s -w" -o /out/mockpay ./cmd/mockpay

# distroless/static: CA certificates, tzdata, /etc/passwd with "nonroot"
# (65532), and no shell or package manager to attack.
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/paysvc /out/mockpay /usr/local/bin/
USER nonroot:nonroot
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/paysvc"]
CMD ["serve"]
