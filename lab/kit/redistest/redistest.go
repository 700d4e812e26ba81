// Package redistest names the Redis the suites' pre-check variants use.
package redistest

import "os"

// URL is PAYSVC_TEST_REDIS_URL, else the Redis scripts/ensure-redis.sh
// starts. The pre-check namespaces its entries by database, so parallel
// tests over their own databases never meet in it.
func URL() string {
	if u := os.Getenv("PAYSVC_TEST_REDIS_URL"); u != "" {
		return u
	}
	return "redis://127.0.0.1:6379/0"
}
