// Checks of rendered objects that concern operations rather than the sidecar's wiring: the demo Redis
// servers persist every write (a Redlock node that may lose writes is quarantined for locks.max_ttl_ms),
// and every alert's runbook_url is an absolute link under monitoring.prometheusRule.runbookBaseUrl.
package main

import (
	"fmt"
	"strings"
)

func (s *suite) checkDemoRedisPersistence(name string, docs []obj) {
	var errs []string
	seen := 0
	for _, d := range docs {
		if sel := str(get(d, "spec", "selector", "matchLabels", "app.kubernetes.io/name")); sel != "sidelock-redis" && sel != "sidelock-redlock" {
			continue
		}
		for _, ct := range list(get(d, "spec", "template", "spec", "containers")) {
			seen++
			args := strings.Join(strings.Fields(fmt.Sprint(get(ct, "args"))), " ")
			if !strings.Contains(args, "--appendonly yes") || !strings.Contains(args, "--appendfsync always") {
				errs = append(errs, fmt.Sprintf("%s/%s: demo Redis args %s lack --appendonly yes --appendfsync always (a Redlock node would not vote for locks.max_ttl_ms)",
					d["kind"], get(d, "metadata", "name"), args))
			}
		}
	}
	if seen > 0 {
		s.check(name+": demo Redis persists every write", errs)
	}
}

func (s *suite) checkRunbookURLs(name string, docs []obj, vals map[string]interface{}) {
	base := str(get(vals, "monitoring", "prometheusRule", "runbookBaseUrl"))
	var errs []string
	for _, d := range docs {
		if d["kind"] != "PrometheusRule" {
			continue
		}
		for _, g := range list(get(d, "spec", "groups")) {
			for _, r := range list(get(g, "rules")) {
				alert := str(get(r, "alert"))
				want := base + "#" + strings.ToLower(alert)
				if got := str(get(r, "annotations", "runbook_url")); alert != "" && got != want {
					errs = append(errs, fmt.Sprintf("%s: runbook_url %q, want %q", alert, got, want))
				}
			}
		}
	}
	if !strings.HasPrefix(base, "https://") && !strings.HasPrefix(base, "http://") {
		errs = append(errs, fmt.Sprintf("monitoring.prometheusRule.runbookBaseUrl %q is not an absolute URL", base))
	}
	s.check(name+": alert runbook_url under monitoring.prometheusRule.runbookBaseUrl", errs)
}
