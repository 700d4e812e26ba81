#!/usr/bin/env bash
# Makes sure stripe-mock (Stripe's own mock of its API, which validates
# requests against Stripe's OpenAPI spec and answers fixtures) is installed:
# `go install github.com/stripe/stripe-mock@v0.203.0` into $(go env GOPATH)/bin
# if that exact version is missing, then prints the binary's path. The tests
# of internal/providers/stripe start their own stripe-mock on a free port
# and stop it afterwards (they find it the same way, and install it
# themselves when this script has not run); they never skip.
set -euo pipefail

version=v0.203.0
bin="$(go env GOPATH)/bin/stripe-mock"
# stripe-mock -version prints "master"; the build info names the module version.
if [ -x "$bin" ] && go version -m "$bin" 2>/dev/null | grep -q "stripe-mock[[:space:]]*$version"; then
  echo "$bin"
  exit 0
fi
echo "ensure-stripe-mock: installing stripe-mock@$version" >&2
go install "github.com/stripe/stripe-mock@$version"
echo "$bin"
