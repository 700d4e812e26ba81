package config

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestNotifyConfig(t *testing.T) {
	const (
		secret2 = "whsec_AQIDBAUGBwgJCgsMDQ4PEBE"
		url1    = "https://user:pa55word@merchant.example/hooks"
	)
	got, err := Load(env(map[string]string{
		envNotifyEndpoints: " acme=" + url1 + " " + secretSW + " " + secret2 + " , m_2=http://127.0.0.1:9/x " + secretPad,
		envNotifyTimeout:   "2s",
		envNotifySchedule:  "1s, 2m,3h",
		envEventTTL:        "48h",
		envNotifyConc:      "32",
	}))
	if err != nil {
		t.Fatal(err)
	}
	want := Notify{
		Endpoints: map[string]Endpoint{
			"acme": {URL: url1, Secrets: []string{secretSW, secret2}},
			"m_2":  {URL: "http://127.0.0.1:9/x", Secrets: []string{secretPad}},
		},
		Timeout:     2 * time.Second,
		Schedule:    []time.Duration{time.Second, 2 * time.Minute, 3 * time.Hour},
		EventTTL:    48 * time.Hour,
		Concurrency: 32,
	}
	if !reflect.DeepEqual(got.Notify, want) {
		t.Errorf("Notify = %#v\nwant %#v", got.Notify, want)
	}
	// Neither the URL (it may carry credentials) nor a secret is logged.
	for _, out := range []string{got.String(), got.LogValue().String()} {
		for _, leak := range []string{"pa55word", "merchant.example", secretSW[6:], secret2[6:], secretPad[6:16]} {
			if strings.Contains(out, leak) {
				t.Errorf("logged config leaks %q: %s", leak, out)
			}
		}
	}
}

func TestNotifyConfigErrors(t *testing.T) {
	tests := []struct {
		name, variable, value, wantIn string
	}{
		{"empty entry", envNotifyEndpoints, "acme=http://x/ " + secretSW + ",", "entry 2 is empty"},
		{"no merchant", envNotifyEndpoints, "http://x/ " + secretSW, "entry 1 has no merchant"},
		{"secret first", envNotifyEndpoints, secretPad + " http://x/", "entry 1 has no merchant"},
		{"bad merchant", envNotifyEndpoints, "ac me=http://x/ " + secretSW, "merchant id"},
		{"twice", envNotifyEndpoints, "acme=http://x/ " + secretSW + ",acme=http://y/ " + secretPad, "entry 2 names the merchant of entry 1"},
		{"no url", envNotifyEndpoints, "acme=", "entry 1 has no URL"},
		{"relative url", envNotifyEndpoints, "acme=/hooks " + secretSW, "absolute http or https URL"},
		{"ftp url", envNotifyEndpoints, "acme=ftp://x/ " + secretSW, "absolute http or https URL"},
		{"no secret", envNotifyEndpoints, "acme=http://x/", "entry 1 has no secret"},
		{"bad secret", envNotifyEndpoints, "acme=http://x/ whsec_!!notbase64", "entry 1, secret 1: is not base64"},
		{"not a secret", envNotifyEndpoints, "acme=http://x/ " + secretSW + " sk_live_oops", "entry 1, secret 2: does not start with whsec_"},
		{"timeout", envNotifyTimeout, "soon", "is not a duration"},
		{"zero timeout", envNotifyTimeout, "0s", "must be greater than 0"},
		{"schedule", envNotifySchedule, "5s,,5m", "delay 2"},
		{"negative delay", envNotifySchedule, "5s,-1m", "delay 2"},
		{"ttl", envEventTTL, "30d", "is not a duration"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Load(env(map[string]string{tc.variable: tc.value}))
			if err == nil {
				t.Fatalf("Load(%s=%q) succeeded", tc.variable, tc.value)
			}
			msg := err.Error()
			if !strings.HasPrefix(msg, tc.variable+": ") || !strings.Contains(msg, tc.wantIn) || strings.Contains(msg, "\n") {
				t.Errorf("error %q, want one line starting %q containing %q", msg, tc.variable, tc.wantIn)
			}
			for _, leak := range []string{secretSW[6:], secretPad[6:16], "notbase64", "sk_live_oops"} {
				if strings.Contains(msg, leak) {
					t.Errorf("error %q leaks %q", msg, leak)
				}
			}
		})
	}
}

// TestEventTTLOutlivesTheSchedule: events must be kept longer than their
// delivery can stay pending on PAYSVC_NOTIFY_SCHEDULE (its delays with
// their +20% jitter, and an attempt's timeout for each attempt), or purge
// would remove an event whose delivery is still going on. A shorter
// PAYSVC_EVENT_TTL stops the load, naming it and the schedule.
func TestEventTTLOutlivesTheSchedule(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  map[string]string
		ok   bool
	}{
		{"the defaults", nil, true},
		{"an hour, with the default schedule", map[string]string{envEventTTL: "1h"}, false},
		{"a day, with the default schedule (33h)", map[string]string{envEventTTL: "24h"}, false},
		{"a day, with a short schedule", map[string]string{envEventTTL: "24h", envNotifySchedule: "1m,1h"}, true},
		{"the default, with a schedule of 30 days", map[string]string{envNotifySchedule: "300h,300h"}, false},
		{"just over the span", map[string]string{envEventTTL: "61s", envNotifySchedule: "10s", envNotifyTimeout: "20s"}, true},
		{"just under the span", map[string]string{envEventTTL: "51s", envNotifySchedule: "10s", envNotifyTimeout: "20s"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Load(env(tc.env))
			if tc.ok != (err == nil) {
				t.Fatalf("Load: %v, want ok %t", err, tc.ok)
			}
			if err != nil && (!strings.HasPrefix(err.Error(), envEventTTL+": ") || !strings.Contains(err.Error(), envNotifySchedule)) {
				t.Errorf("error %q, want one naming %s and %s", err, envEventTTL, envNotifySchedule)
			}
			if err != nil {
				t.Log(err)
			}
		})
	}
}

// TestScheduleBeyondWhatADurationHolds: a schedule whose span does not fit
// in a time.Duration (delays that add up past about 292 years, or one
// whose +20% jitter does) must not wrap around to a negative span that
// any PAYSVC_EVENT_TTL outlives, nor reach the relay as a delay that its
// jitter turns negative, which would make the retry due at once.
func TestScheduleBeyondWhatADurationHolds(t *testing.T) {
	for _, tc := range []struct {
		name, schedule, wantVar string
	}{
		{"two delays whose sum overflows", "2000000h,2000000h", envEventTTL},
		{"one delay whose jitter overflows", "5s,2200000h", envNotifySchedule},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Load(env(map[string]string{envNotifySchedule: tc.schedule}))
			if err == nil {
				t.Fatalf("Load accepted %s=%s with %s=720h", envNotifySchedule, tc.schedule, envEventTTL)
			}
			if !strings.HasPrefix(err.Error(), tc.wantVar+": ") {
				t.Errorf("error %q, want one naming %s", err, tc.wantVar)
			}
		})
	}
}
