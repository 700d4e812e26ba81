package config

import (
	"strings"
	"testing"

	"github.com/paysvc/paysvc/internal/webhooks"
)

// TestLoadErrorsNameEntriesByPosition: an entry written the wrong way round
// puts a secret where a name is expected, and a name that passes as valid
// was echoed: `entry 1 (merchant "sk_live_…")`. No error may contain any
// run of 4 characters of a value that could be a secret.
func TestLoadErrorsNameEntriesByPosition(t *testing.T) {
	const (
		live   = "sk_live_4eC39HqLyjWDarjtT1zdp7dc" // a key that is also a valid merchant id
		livePr = "s3cr3t_h00k_k3y"                  // a raw secret that is also a valid provider name
	)
	tests := []struct {
		name    string
		env     map[string]string
		secrets []string
	}{
		{"api key entry reversed, short merchant", map[string]string{envAPIKeys: live + ":m1"}, []string{live}},
		{"api key entry reversed after a good one", map[string]string{envAPIKeys: "m1:" + keyA + "," + live + ":acme"},
			[]string{live, keyA}},
		{"api key entry reversed, merchant with a space", map[string]string{envAPIKeys: live + ":acme merchant 1234567"},
			[]string{live}},
		{"api key entry reversed, key repeated", map[string]string{envAPIKeys: live + ":" + keyA + ",m2:" + keyA},
			[]string{live, keyA}},
		{"api key entry reversed, repeating a key", map[string]string{envAPIKeys: "m1:" + keyA + "," + live + ":" + keyA},
			[]string{live, keyA}},
		{"webhook entry reversed", map[string]string{envWebhookSecrets: livePr + "=stripe"}, []string{livePr}},
		{"webhook entry reversed twice", map[string]string{envWebhookSecrets: livePr + "=" + secretSW + "," + livePr + "=" + secretPad},
			[]string{livePr, secretSW, secretPad}},
		{"webhook entry reversed, no secret", map[string]string{envWebhookSecrets: livePr + "= "}, []string{livePr}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Load(env(tt.env))
			if err == nil {
				t.Fatal("Load succeeded")
			}
			msg := err.Error()
			if !strings.Contains(msg, "entry ") {
				t.Errorf("error %q does not name the entry", msg)
			}
			for _, s := range tt.secrets {
				for i := 0; i+4 <= len(s); i++ {
					if strings.Contains(msg, s[i:i+4]) {
						t.Fatalf("error %q leaks %q of %q", msg, s[i:i+4], s)
					}
				}
			}
		})
	}
}

// TestLoadWebhookSecretsDecodeAsTheVerifier: config accepts a secret
// exactly when the verifier's decoder (webhooks.ParseSecret) does. With
// two decoders, "whsec_QUJ" passed config and then serve exited.
func TestLoadWebhookSecretsDecodeAsTheVerifier(t *testing.T) {
	for _, s := range []string{
		secretSW, secretPad, secretNoPad,
		"whsec_QUJ",      // unpadded with non-zero trailing bits
		"whsec_QUI",      // the same, canonical
		"whsec_QUJ=",     // padded with non-zero trailing bits
		"whsec_QUI=",     // the same, canonical
		"whsec_QQ",       // one byte, unpadded
		"whsec_QR==",     // one byte, non-zero trailing bits
		"whsec_QQ=",      // padding short
		"whsec_QQ===",    // padding long
		"whsec_",         // no key
		"whsec_====",     // only padding
		"WHSEC_AQIDBA",   // prefix in upper case
		"whsec_-_-_",     // URL alphabet
		"whsec_AQIDBA==", // padded, 4 bytes
	} {
		_, parseErr := webhooks.ParseSecret(s)
		_, loadErr := Load(env(map[string]string{envWebhookSecrets: "p=" + s}))
		if (parseErr == nil) != (loadErr == nil) {
			t.Errorf("secret %q: config says %v, the verifier's decoder says %v", s, loadErr, parseErr)
		}
	}
}
