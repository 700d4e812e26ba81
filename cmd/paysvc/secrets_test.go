package main

import (
	"context"
	"encoding/base64"
	"fmt"
	"strings"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/paysvc/paysvc/internal/cli"
	"github.com/paysvc/paysvc/internal/endpoints"
	"github.com/paysvc/paysvc/lab/kit/dbtest"
)

// `paysvc secrets rewrap` under a new key: every secret is sealed again,
// once (a second run rewraps nothing), and opens under the new key alone
// to the very secret it was, so every delivery's signatures verify with
// what the merchant holds; no secret is in the database in clear.
func TestSecretsRewrap(t *testing.T) {
	t.Parallel()
	d := dbtest.New(t)
	ctx := context.Background()
	k1, k2 := make([]byte, 32), make([]byte, 32)
	for i := range k1 {
		k1[i], k2[i] = byte(i), byte(100+i)
	}
	old, _ := endpoints.NewKeyring(k1, nil)
	var ids []string
	for i := range 3 {
		var e endpoints.Endpoint
		if err := d.Gorm.Transaction(func(tx *gorm.DB) (err error) {
			e, err = endpoints.Create(ctx, tx, old, "acme", endpoints.Input{URL: fmt.Sprintf("https://127.0.0.1:9/%d", i), EnabledEvents: []string{"*"}}, time.Now())
			return err
		}); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, e.ID)
	}
	reveal := func(k *endpoints.Keyring) string {
		var all []string
		for _, id := range ids {
			s, err := endpoints.Secrets(ctx, d.Gorm, k, "acme", id, time.Now())
			if err != nil {
				t.Fatalf("%s: %v", id, err)
			}
			for _, x := range s {
				all = append(all, x.Text)
			}
		}
		return strings.Join(all, " ")
	}
	before := reveal(old)
	b64 := base64.StdEncoding.EncodeToString
	env := func(kv ...string) func(string) string { return rtEnv(append([]string{"PAYSVC_DSN", d.DSN}, kv...)...) }

	// The new key alone: the old secrets do not open, exit 1.
	var out, errOut strings.Builder
	err := run(ctx, []string{"secrets", "rewrap"}, env("PAYSVC_SECRETS_KEY", b64(k2)), &out, &errOut)
	if cli.Status(err) != 1 || !strings.Contains(fmt.Sprint(err), "PAYSVC_SECRETS_KEY_OLD") {
		t.Fatalf("without the old key: exit %d, %v", cli.Status(err), err)
	}
	for _, want := range []string{"rewrapped 3\n", "rewrapped 0\n"} {
		out.Reset()
		err := run(ctx, []string{"secrets", "rewrap"}, env("PAYSVC_SECRETS_KEY", b64(k2), "PAYSVC_SECRETS_KEY_OLD", b64(k1)), &out, &errOut)
		if err != nil || out.String() != want {
			t.Fatalf("rewrap: %q, %v; want %q", out.String(), err, want)
		}
	}
	fresh, _ := endpoints.NewKeyring(k2, nil)
	if after := reveal(fresh); after != before {
		t.Fatal("the secrets changed in the rewrap")
	}
	for _, row := range d.Rows(t, `SELECT * FROM webhook_endpoint_secrets`) {
		for _, s := range strings.Fields(before) {
			if strings.Contains(fmt.Sprint(row), strings.TrimPrefix(s, "whsec_")) {
				t.Fatal("a secret in clear in the database")
			}
		}
	}
	if err := run(ctx, []string{"secrets", "rewrap"}, env(), &out, &errOut); cli.Status(err) != 1 {
		t.Fatalf("without PAYSVC_SECRETS_KEY: exit %d, %v", cli.Status(err), err)
	}
}
