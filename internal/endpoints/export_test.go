package endpoints_test

import (
	"encoding/base64"
	"strings"
)

func decode(s string) ([]byte, error) {
	return base64.StdEncoding.DecodeString(strings.TrimPrefix(s, "whsec_"))
}
