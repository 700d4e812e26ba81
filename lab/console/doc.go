// Package console drives the operator console of `paysvc serve` in a real
// headless Chromium (Debian's chromium, through the DevTools protocol with
// chromedp): signed in, through every page and action, with no JavaScript
// error on any page. Its tests take the screenshots README shows
// (PAYSVC_SCREENSHOTS=1 go test ./lab/console/).
package console
