package main

import (
	"maps"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/goccy/go-yaml"

	"github.com/paysvc/paysvc/internal/config"
)

// composeFile is the part of docker-compose.yml these tests read.
type composeFile struct {
	Services map[string]composeService `yaml:"services"`
}

type composeService struct {
	Build struct {
		Target string `yaml:"target"`
	} `yaml:"build"`
	Command         []string          `yaml:"command"`
	Entrypoint      []string          `yaml:"entrypoint"`
	Environment     map[string]string `yaml:"environment"`
	Ports           []string          `yaml:"ports"`
	StopGracePeriod string            `yaml:"stop_grace_period"`
	Healthcheck     struct {
		Test []string `yaml:"test"`
	} `yaml:"healthcheck"`
}

func readCompose(t *testing.T) composeFile {
	t.Helper()
	b, err := os.ReadFile("../../docker-compose.yml")
	if err != nil {
		t.Fatal(err)
	}
	var f composeFile
	if err := yaml.Unmarshal(b, &f); err != nil {
		t.Fatalf("docker-compose.yml: %v", err)
	}
	for _, name := range []string{"mysql", "paysvc", "demo", "merchant", "nats"} {
		if _, ok := f.Services[name]; !ok {
			t.Fatalf("docker-compose.yml has no %s service", name)
		}
	}
	// Values are read as compose reads them with nothing set in the
	// shell: "${NAME:-default}" is its default. Services sharing one
	// environment (a YAML alias) get copies, edited apart.
	for name, svc := range f.Services {
		env := make(map[string]string, len(svc.Environment))
		for k, v := range svc.Environment {
			env[k] = composeDefault.ReplaceAllString(v, "$1")
		}
		svc.Environment = env
		f.Services[name] = svc
	}
	return f
}

var composeDefault = regexp.MustCompile(`\$\{[A-Z0-9_]+:-([^}]*)\}`)

// TestComposeEnvironmentIsTheContract: every PAYSVC_* value the compose
// file passes is a variable paysvc reads (a bad value for it is refused
// with its name) and the whole set loads; the demo reads the very same
// configuration.
func TestComposeEnvironmentIsTheContract(t *testing.T) {
	t.Parallel()
	f := readCompose(t)
	env := f.Services["paysvc"].Environment
	if _, err := config.Load(func(k string) string { return env[k] }); err != nil {
		t.Fatalf("compose paysvc environment does not load: %v", err)
	}
	for name := range env {
		if !strings.HasPrefix(name, "PAYSVC_") {
			t.Errorf("compose passes %s, which is not a paysvc variable", name)
			continue
		}
		bad := map[string]string{name: "\x01not-valid"}
		_, err := config.Load(func(k string) string { return bad[k] })
		if err == nil || !strings.HasPrefix(err.Error(), name) {
			t.Errorf("%s: paysvc does not read it (a bad value gave %v)", name, err)
		}
	}
	if demo := f.Services["demo"].Environment; !maps.Equal(demo, env) {
		t.Errorf("the demo's environment is not paysvc's:\n demo   %v\n paysvc %v", demo, env)
	}
	if unknown := config.UnknownVariables(environ(env)); len(unknown) > 0 {
		t.Errorf("compose passes unknown variables: %v", unknown)
	}
}

// TestComposePublishesOnLoopback: the demo's ports are reachable from this
// host only, never from every interface (a bare "8080:8080" publishes on
// 0.0.0.0, and Docker's rules bypass host firewalls).
func TestComposePublishesOnLoopback(t *testing.T) {
	t.Parallel()
	f := readCompose(t)
	if len(f.Services["paysvc"].Ports) == 0 {
		t.Error("paysvc publishes no port")
	}
	for name, svc := range f.Services {
		for _, p := range svc.Ports {
			if !strings.HasPrefix(p, "127.0.0.1:") {
				t.Errorf("%s publishes %q: bind it to 127.0.0.1 (127.0.0.1:HOST:CONTAINER)", name, p)
			}
		}
	}
}

// TestComposeStopOutlastsDrain: docker stop waits stop_grace_period after
// SIGTERM before SIGKILL (10 s when unset); it must be longer than paysvc's
// drain, or a stop kills requests the drain would have finished.
func TestComposeStopOutlastsDrain(t *testing.T) {
	t.Parallel()
	svc := readCompose(t).Services["paysvc"]
	cfg, err := config.Load(func(k string) string { return svc.Environment[k] })
	if err != nil {
		t.Fatal(err)
	}
	grace := 10 * time.Second // Docker's default
	if svc.StopGracePeriod != "" {
		if grace, err = time.ParseDuration(svc.StopGracePeriod); err != nil {
			t.Fatalf("stop_grace_period %q: %v", svc.StopGracePeriod, err)
		}
	}
	if grace <= cfg.ShutdownTimeout {
		t.Errorf("paysvc stop_grace_period %v is not above PAYSVC_SHUTDOWN_TIMEOUT %v", grace, cfg.ShutdownTimeout)
	}
}

// TestComposeDedicatedDatabaseUser: paysvc connects as the user the mysql
// service creates for it (MYSQL_USER, with rights on MYSQL_DATABASE only),
// not as root.
func TestComposeDedicatedDatabaseUser(t *testing.T) {
	t.Parallel()
	f := readCompose(t)
	my := f.Services["mysql"].Environment
	dsn, err := mysql.ParseDSN(f.Services["paysvc"].Environment["PAYSVC_DSN"])
	if err != nil {
		t.Fatalf("PAYSVC_DSN: %v", err)
	}
	if dsn.User == "root" || dsn.User == "" {
		t.Errorf("paysvc connects as %q: use a dedicated user", dsn.User)
	}
	if my["MYSQL_USER"] == "" || my["MYSQL_USER"] == "root" {
		t.Errorf("mysql MYSQL_USER = %q: the image must create paysvc's user", my["MYSQL_USER"])
	}
	if dsn.User != my["MYSQL_USER"] || dsn.Passwd != my["MYSQL_PASSWORD"] {
		t.Errorf("PAYSVC_DSN user %q is not mysql's MYSQL_USER %q with MYSQL_PASSWORD", dsn.User, my["MYSQL_USER"])
	}
	// The image grants MYSQL_USER its rights on MYSQL_DATABASE only.
	if dsn.DBName != my["MYSQL_DATABASE"] {
		t.Errorf("PAYSVC_DSN database %q is not mysql's MYSQL_DATABASE %q", dsn.DBName, my["MYSQL_DATABASE"])
	}
	if _, ok := my["MYSQL_ROOT_PASSWORD"]; ok {
		t.Error("MYSQL_ROOT_PASSWORD is set: nothing needs root; use MYSQL_RANDOM_ROOT_PASSWORD")
	}
	for _, a := range f.Services["mysql"].Healthcheck.Test {
		if a == "-uroot" || a == "root" {
			t.Errorf("the mysql healthcheck logs in as root: %v", f.Services["mysql"].Healthcheck.Test)
		}
	}
}
