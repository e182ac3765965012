// Checks of deploy/ that need no Docker daemon: the compose stack's structure and files, its sidelock
// configs, its Prometheus config (promtool), the Dockerfile's runtime packages (apt-cache, and against the
// built binary's shared libraries), the systemd unit (systemd-analyze verify / security), and the
// Kubernetes snippets of deploy/kubernetes (kube_snippets.go).
package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

func (s *suite) checkDeployFiles() {
	s.checkCompose()
	s.checkDockerfile()
	s.checkSystemd()
	s.checkKubernetesSnippets()
}

func (s *suite) checkCompose() {
	dir := filepath.Join(s.repo, "deploy/compose")
	c, err := readYAML(filepath.Join(dir, "compose.yaml"))
	if err != nil {
		s.check("compose: parses", []string{err.Error()})
		return
	}
	var errs []string
	services, _ := c["services"].(obj)
	want := []string{"grafana", "prometheus", "redis", "redlock-1", "redlock-2", "redlock-3", "redlock-4",
		"redlock-5", "sidelock-redis", "sidelock-redlock"}
	var got []string
	for k := range services {
		got = append(got, k)
	}
	sort.Strings(got)
	if strings.Join(got, " ") != strings.Join(want, " ") {
		errs = append(errs, fmt.Sprintf("services %v, want %v", got, want))
	}
	for name, sv := range services {
		for _, v := range list(get(sv, "volumes")) {
			src := strings.SplitN(str(v), ":", 2)[0]
			if strings.HasPrefix(src, ".") {
				if _, err := os.Stat(filepath.Join(dir, src)); err != nil {
					errs = append(errs, fmt.Sprintf("%s mounts %s, which does not exist", name, src))
				}
			}
		}
		if strings.HasPrefix(name, "sidelock-") {
			if get(sv, "read_only") != true || !contains(list(get(sv, "cap_drop")), "ALL") {
				errs = append(errs, name+": not read_only with all capabilities dropped (merge key lost?)")
			}
			if df := str(get(sv, "build", "dockerfile")); df != "" {
				if _, err := os.Stat(filepath.Join(dir, str(get(sv, "build", "context")), df)); err != nil {
					errs = append(errs, name+": dockerfile "+df+" not found")
				}
			}
		}
	}
	s.check("compose: services, mounts, sidecar hardening", errs)

	// The redlock sidecar uses exactly the redlock-N services.
	errs = nil
	cfg, err := readYAML(filepath.Join(dir, "sidelock-redlock.yaml"))
	if err != nil {
		errs = append(errs, err.Error())
	} else {
		var nodes []string
		for _, n := range list(get(cfg, "backend", "nodes")) {
			nodes = append(nodes, strings.Split(str(n), ":")[0])
		}
		if strings.Join(nodes, " ") != "redlock-1 redlock-2 redlock-3 redlock-4 redlock-5" {
			errs = append(errs, fmt.Sprintf("redlock nodes %v", nodes))
		}
	}
	s.check("compose: redlock sidecar uses the five masters", errs)

	// The Redlock masters persist every write, so they vote as soon as they are up (a node that may
	// lose writes on a restart is quarantined for locks.max_ttl_ms: the stack would grant nothing).
	errs = nil
	for name, sv := range services {
		if !strings.HasPrefix(name, "redlock-") {
			continue
		}
		cmd := strings.Join(strings.Fields(fmt.Sprint(get(sv, "command"))), " ")
		if !strings.Contains(cmd, "--appendonly yes") || !strings.Contains(cmd, "--appendfsync always") {
			errs = append(errs, fmt.Sprintf("%s: command %s lacks --appendonly yes --appendfsync always", name, cmd))
		}
	}
	sort.Strings(errs)
	s.check("compose: Redlock masters persist every write", errs)

	// Prometheus scrapes each sidecar's admin listener (health and metrics only), not the lock API.
	errs = nil
	targets := map[string]bool{}
	if prom, err := readYAML(filepath.Join(dir, "prometheus.yml")); err != nil {
		errs = append(errs, err.Error())
	} else {
		for _, job := range list(get(prom, "scrape_configs")) {
			for _, sc := range list(get(job, "static_configs")) {
				for _, t := range list(get(sc, "targets")) {
					targets[str(t)] = true
				}
			}
		}
	}
	for _, svc := range []string{"sidelock-redis", "sidelock-redlock"} {
		cfg, err := readYAML(filepath.Join(dir, svc+".yaml"))
		if err != nil {
			errs = append(errs, err.Error())
			continue
		}
		admin := str(get(cfg, "listen", "admin"))
		switch {
		case admin == "" || loopbackRe.MatchString(admin):
			errs = append(errs, fmt.Sprintf("%s.yaml: listen.admin %q is not reachable by Prometheus", svc, admin))
		case !targets[svc+":"+portOf(admin)]:
			errs = append(errs, fmt.Sprintf("prometheus.yml does not scrape %s:%s (its listen.admin)", svc, portOf(admin)))
		}
		delete(targets, svc+":"+portOf(admin))
	}
	for t := range targets {
		errs = append(errs, "prometheus.yml scrapes "+t+", which is no sidecar's admin listener")
	}
	sort.Strings(errs)
	s.check("compose: Prometheus scrapes the admin listeners", errs)
	for _, f := range []string{"sidelock-redis.yaml", "sidelock-redlock.yaml"} {
		raw, _ := os.ReadFile(filepath.Join(dir, f))
		s.checkConfigWithBinary("compose "+f, string(raw), nil)
	}

	if _, err := exec.LookPath("promtool"); err != nil {
		s.skipped = append(s.skipped, "compose: promtool check config (promtool not installed)")
		return
	}
	tmp, _ := os.MkdirTemp("", "helmtest-prom")
	defer os.RemoveAll(tmp)
	for src, dst := range map[string]string{"deploy/compose/prometheus.yml": "prometheus.yml",
		"deploy/prometheus/sidelock-alerts.yaml": "sidelock-alerts.yaml"} {
		raw, err := os.ReadFile(filepath.Join(s.repo, src))
		if err != nil {
			s.check("compose: promtool check config", []string{err.Error()})
			return
		}
		_ = os.WriteFile(filepath.Join(tmp, dst), raw, 0o644)
	}
	out, err := exec.Command("promtool", "check", "config", filepath.Join(tmp, "prometheus.yml")).CombinedOutput()
	errs = nil
	if err != nil {
		errs = append(errs, fmt.Sprintf("%v: %s", err, out))
	}
	s.check("compose: promtool check config", errs)
}

// runtimePackages returns the packages the runtime stage installs.
func runtimePackages(dockerfile string) []string {
	stage := dockerfile[strings.LastIndex(dockerfile, "\nFROM "):]
	m := regexp.MustCompile(`(?s)apt-get install ([^&]*)&&`).FindStringSubmatch(stage)
	if m == nil {
		return nil
	}
	var pkgs []string
	for _, w := range strings.Fields(strings.ReplaceAll(m[1], "\\", " ")) {
		if !strings.HasPrefix(w, "-") {
			pkgs = append(pkgs, w)
		}
	}
	return pkgs
}

func (s *suite) checkDockerfile() {
	raw, err := os.ReadFile(filepath.Join(s.repo, "deploy/Dockerfile"))
	if err != nil {
		s.check("Dockerfile: structure", []string{err.Error()})
		return
	}
	df := string(raw)
	var errs []string
	for _, want := range []string{"FROM debian:bookworm AS build", "FROM debian:bookworm-slim AS runtime",
		"USER 65532:65532", `ENTRYPOINT ["/usr/bin/sidelock"]`, `CMD ["--config", "/etc/sidelock/sidelock.yaml"]`} {
		if !strings.Contains(df, want) {
			errs = append(errs, "missing: "+want)
		}
	}
	for _, m := range regexp.MustCompile(`(?m)^COPY (\S+) `).FindAllStringSubmatch(df, -1) {
		if m[1] != "." && !strings.HasPrefix(m[1], "--from") {
			if _, err := os.Stat(filepath.Join(s.repo, m[1])); err != nil {
				errs = append(errs, "COPY source missing: "+m[1])
			}
		}
	}
	if _, err := os.Stat(filepath.Join(s.repo, ".dockerignore")); err != nil {
		errs = append(errs, ".dockerignore missing")
	}
	pkgs := runtimePackages(df)
	if len(pkgs) == 0 {
		errs = append(errs, "no apt-get install in the runtime stage")
	}
	s.check("Dockerfile: structure", errs)

	// The runtime packages exist in Debian (needs apt lists: skipped on a machine without them).
	if exec.Command("apt-cache", "show", "--no-all-versions", "libc6").Run() != nil {
		s.skipped = append(s.skipped, "Dockerfile: runtime packages exist (no apt lists; run apt-get update)")
	} else {
		errs = nil
		for _, p := range pkgs {
			if exec.Command("apt-cache", "show", "--no-all-versions", p).Run() != nil {
				errs = append(errs, "apt-cache knows no package "+p)
			}
		}
		s.check("Dockerfile: runtime packages exist in Debian", errs)
	}

	// Every shared library the built binary needs comes from a runtime package or the base image.
	if s.sidelock == "" {
		s.skipped = append(s.skipped, "Dockerfile: runtime packages cover the binary's libraries (no binary)")
		return
	}
	if _, err := os.Stat(s.sidelock); err != nil {
		s.skipped = append(s.skipped, "Dockerfile: runtime packages cover the binary's libraries (not built)")
		return
	}
	out, err := exec.Command("ldd", s.sidelock).Output()
	if err != nil {
		s.check("Dockerfile: runtime packages cover the binary's libraries", []string{"ldd: " + err.Error()})
		return
	}
	// The sanitizer runtimes appear when the suite runs on the ASan/UBSan build; the image never
	// ships that build.
	have := map[string]bool{"libc6": true, "libstdc++6": true, "libgcc-s1": true,
		"libasan8": true, "libubsan1": true}
	for _, p := range pkgs {
		have[p] = true
	}
	errs = nil
	for _, m := range regexp.MustCompile(`=> (/\S+)`).FindAllStringSubmatch(string(out), -1) {
		lib := m[1]
		pkg := ""
		for _, cand := range []string{lib, strings.Replace(lib, "/lib/", "/usr/lib/", 1),
			strings.Replace(lib, "/usr/lib/", "/lib/", 1)} {
			if o, err := exec.Command("dpkg", "-S", cand).Output(); err == nil {
				pkg = strings.Split(strings.SplitN(string(o), ":", 2)[0], ",")[0]
				break
			}
		}
		if pkg == "" {
			errs = append(errs, "no Debian package owns "+lib)
			continue
		}
		// Transitive libraries come with the packages' own dependencies; only those the binary or a
		// listed package needs directly are expected here, so check dependencies via apt-cache.
		if !have[pkg] && !dependedOn(pkg, pkgs) {
			errs = append(errs, fmt.Sprintf("%s (package %s) is not installed by the runtime stage", lib, pkg))
		}
	}
	s.check("Dockerfile: runtime packages cover the binary's libraries", errs)
}

// dependedOn reports whether pkg is a (recursive) dependency of one of roots.
func dependedOn(pkg string, roots []string) bool {
	args := append([]string{"depends", "--recurse", "--no-recommends", "--no-suggests", "--no-conflicts",
		"--no-breaks", "--no-replaces", "--no-enhances"}, roots...)
	out, err := exec.Command("apt-cache", args...).Output()
	if err != nil {
		return false
	}
	re := regexp.MustCompile(`(?m)^\s*(?:\|?Depends|PreDepends):\s*<?([^\s:>]+)`)
	for _, m := range re.FindAllStringSubmatch(string(out), -1) {
		if m[1] == pkg {
			return true
		}
	}
	return false
}

func (s *suite) checkSystemd() {
	unit := filepath.Join(s.repo, "deploy/systemd/sidelock.service")
	raw, err := os.ReadFile(unit)
	if err != nil {
		s.check("systemd unit: hardening", []string{err.Error()})
		return
	}
	var errs []string
	for _, want := range []string{"DynamicUser=yes", "RuntimeDirectory=sidelock", "ProtectSystem=strict",
		"NoNewPrivileges=yes", "CapabilityBoundingSet=\n", "ExecStartPre=/usr/bin/sidelock --check-config",
		"KillSignal=SIGTERM"} {
		if !strings.Contains(string(raw), want) {
			errs = append(errs, "missing "+strings.TrimSpace(want))
		}
	}
	s.check("systemd unit: hardening", errs)
	if _, err := exec.LookPath("systemd-analyze"); err != nil {
		s.skipped = append(s.skipped, "systemd unit: systemd-analyze verify (not installed)")
		return
	}
	tmp, _ := os.MkdirTemp("", "helmtest-unit")
	defer os.RemoveAll(tmp)
	// verify checks that ExecStart exists: point it at a binary that does.
	copyPath := filepath.Join(tmp, "sidelock.service")
	_ = os.WriteFile(copyPath, []byte(strings.ReplaceAll(string(raw), "/usr/bin/sidelock", "/bin/true")), 0o644)
	errs = nil
	if out, err := exec.Command("systemd-analyze", "verify", copyPath).CombinedOutput(); err != nil {
		errs = append(errs, fmt.Sprintf("systemd-analyze verify: %v: %s", err, out))
	}
	// Exposure score (0 = locked down, 10 = unprotected): keep it "OK" or better.
	if out, err := exec.Command("systemd-analyze", "security", "--offline=yes", "--threshold=20",
		copyPath).CombinedOutput(); err != nil {
		errs = append(errs, fmt.Sprintf("systemd-analyze security: exposure above 2.0: %s", lastLine(string(out))))
	}
	s.check("systemd unit: systemd-analyze verify and security", errs)
}

func lastLine(s string) string {
	l := strings.Split(strings.TrimSpace(s), "\n")
	return l[len(l)-1]
}
