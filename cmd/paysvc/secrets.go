package main

import (
	"context"
	"errors"
	"fmt"
	"io"

	"gorm.io/gorm"

	"github.com/paysvc/paysvc/internal/cli"
	"github.com/paysvc/paysvc/internal/config"
	"github.com/paysvc/paysvc/internal/endpoints"
)

// secretsCmd runs `paysvc secrets rewrap` (README.md, "Webhook endpoints"):
// exit 0 done, 1 refused (no key, or a secret sealed under neither key),
// 2 database not reachable.
func secretsCmd(ctx context.Context, cfg config.Config, args []string, stdout io.Writer) error {
	if len(args) != 1 || args[0] != "rewrap" {
		return usageError("secrets: want rewrap")
	}
	keys, err := endpoints.NewKeyring(cfg.Endpoints.SecretsKey, cfg.Endpoints.SecretsKeyOld)
	if err != nil {
		return refusal("%v", err)
	}
	if !keys.Ready() {
		return refusal("secrets rewrap: PAYSVC_SECRETS_KEY is not set (the key to seal under)")
	}
	var n int64
	err = withDB(ctx, cfg, func(gdb *gorm.DB) error {
		var err error
		n, err = endpoints.Rewrap(ctx, gdb, keys)
		return err
	})
	if err != nil {
		if ee, ok := err.(*cli.ExitError); ok && isSealRefusal(ee.Err) {
			return refusal("secrets rewrap: %v (%d rewrapped before)", ee.Err, n)
		}
		return err
	}
	fmt.Fprintf(stdout, "rewrapped %d\n", n)
	return nil
}

func isSealRefusal(err error) bool {
	return err != nil && (errors.Is(err, endpoints.ErrSealedElsewhere) || errors.Is(err, endpoints.ErrNoSecretsKey))
}
