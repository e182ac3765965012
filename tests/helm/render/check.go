// The chart's test suite (helmtest test): golden renders, YAML parse, object/probe/mount/security
// checks, schema validation of good and bad values, config key coverage, copies of the dashboard and
// alert files, sidelock --check-config on the rendered config, and the deploy/ files.
package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strings"

	"gopkg.in/yaml.v3"
)

type suite struct {
	repo            string
	sidelock        string
	update          bool
	passed, failed  int
	skipped         []string
	checkConfigWork *bool // nil: not probed yet
}

// check records one named check: errs empty means it passed.
func (s *suite) check(name string, errs []string) {
	if len(errs) == 0 {
		s.passed++
		fmt.Printf("PASS %s\n", name)
		return
	}
	s.failed++
	fmt.Printf("FAIL %s\n", name)
	for _, e := range errs {
		fmt.Printf("    %s\n", e)
	}
}

func runTests(repo, bin string, update bool) int {
	s := &suite{repo: repo, sidelock: bin, update: update}
	s.checkChartBasics()
	s.checkFileCopies()
	cases, _ := filepath.Glob(filepath.Join(repo, "tests/helm/values/*.yaml"))
	for _, c := range cases {
		s.runCase(c)
	}
	if len(cases) < 5 {
		s.check("values cases present", []string{fmt.Sprintf("only %d cases in tests/helm/values", len(cases))})
	}
	bad, _ := filepath.Glob(filepath.Join(repo, "tests/helm/bad-values/*.yaml"))
	for _, b := range bad {
		s.runBadCase(b)
	}
	if len(bad) < 5 {
		s.check("bad values cases present", []string{fmt.Sprintf("only %d cases in tests/helm/bad-values", len(bad))})
	}
	s.checkDeployFiles()
	for _, k := range s.skipped {
		fmt.Printf("SKIP %s\n", k)
	}
	fmt.Printf("%d passed, %d failed, %d skipped\n", s.passed, s.failed, len(s.skipped))
	if s.failed > 0 {
		return 1
	}
	return 0
}

// header reads "# key: value" lines at the top of a values file.
func header(path string) map[string]string {
	h := map[string]string{}
	raw, _ := os.ReadFile(path)
	re := regexp.MustCompile(`^#\s*([a-z-]+):\s*(.*)$`)
	for _, line := range strings.Split(string(raw), "\n") {
		if !strings.HasPrefix(line, "#") {
			break
		}
		if m := re.FindStringSubmatch(line); m != nil {
			h[m[1]] = strings.TrimSpace(m[2])
		}
	}
	return h
}

// --- generic YAML access ---

type obj = map[string]interface{}

func get(v interface{}, path ...interface{}) interface{} {
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, ok := v.(obj)
			if !ok {
				return nil
			}
			v = m[k]
		case int:
			l, ok := v.([]interface{})
			if !ok || k >= len(l) {
				return nil
			}
			v = l[k]
		}
	}
	return v
}

func str(v interface{}) string {
	if v == nil {
		return ""
	}
	return fmt.Sprint(v)
}

func list(v interface{}) []interface{} { l, _ := v.([]interface{}); return l }

func byName(l []interface{}, name string) obj {
	for _, x := range l {
		if m, ok := x.(obj); ok && str(m["name"]) == name {
			return m
		}
	}
	return nil
}

func parseStream(stream string) ([]obj, error) {
	dec := yaml.NewDecoder(strings.NewReader(stream))
	var docs []obj
	for {
		var d obj
		err := dec.Decode(&d)
		if err != nil {
			if err.Error() == "EOF" {
				return docs, nil
			}
			return docs, err
		}
		if d != nil {
			docs = append(docs, d)
		}
	}
}

func flattenKeys(prefix string, v interface{}, out map[string]interface{}) {
	if m, ok := v.(obj); ok {
		for k, x := range m {
			flattenKeys(prefix+"."+k, x, out)
		}
		return
	}
	out[strings.TrimPrefix(prefix, ".")] = v
}

func readYAML(path string) (obj, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var m obj
	err = yaml.Unmarshal(raw, &m)
	return m, err
}

// --- chart-level checks ---

func (s *suite) checkChartBasics() {
	chart, err := LoadChart(filepath.Join(s.repo, "helm/sidelock"))
	if err != nil {
		s.check("chart loads", []string{err.Error()})
		return
	}
	s.check("chart loads", nil)
	var errs []string
	if tag := str(get(chart.Defaults, "image", "tag")); tag != chart.Meta.AppVersion {
		errs = append(errs, fmt.Sprintf("values image.tag %q != Chart.yaml appVersion %q", tag, chart.Meta.AppVersion))
	}
	s.check("image tag matches appVersion", errs)

	// Every key of config/sidelock.yaml is a chart value, with the same default (except the two the
	// chart changes on purpose), and the schema knows it.
	errs = nil
	ref, err := readYAML(filepath.Join(s.repo, "config/sidelock.yaml"))
	if err != nil {
		s.check("config keys covered", []string{err.Error()})
		return
	}
	refKeys, chartKeys := map[string]interface{}{}, map[string]interface{}{}
	flattenKeys("", ref, refKeys)
	var chartCfg obj
	raw, _ := os.ReadFile(filepath.Join(s.repo, "helm/sidelock/values.yaml"))
	var vals obj
	if err := yaml.Unmarshal(raw, &vals); err != nil {
		errs = append(errs, err.Error())
	}
	chartCfg, _ = vals["config"].(obj)
	flattenKeys("", chartCfg, chartKeys)
	intended := map[string]bool{"listen.admin": true, "backend.nodes": true}
	for k, v := range refKeys {
		cv, ok := chartKeys[k]
		if !ok {
			errs = append(errs, "values.yaml config lacks "+k)
		} else if !intended[k] && !reflect.DeepEqual(v, cv) {
			errs = append(errs, fmt.Sprintf("config.%s default %v differs from config/sidelock.yaml %v", k, cv, v))
		}
	}
	for k := range chartKeys {
		if _, ok := refKeys[k]; !ok && !commentedInReference(ref, k) {
			errs = append(errs, "values.yaml config has "+k+" which config/sidelock.yaml does not")
		}
	}
	var schema obj
	if raw, err := os.ReadFile(filepath.Join(s.repo, "helm/sidelock/values.schema.json")); err != nil {
		errs = append(errs, err.Error())
	} else if err := yaml.Unmarshal(raw, &schema); err != nil {
		errs = append(errs, "values.schema.json: "+err.Error())
	}
	for k := range refKeys {
		p := []interface{}{"properties", "config"}
		for _, part := range strings.Split(k, ".") {
			p = append(p, "properties", part)
		}
		if get(schema, p...) == nil {
			errs = append(errs, "values.schema.json lacks config."+k)
		}
	}
	sort.Strings(errs)
	s.check("config keys covered by values and schema", errs)
	s.checkSchemaMatchesConfigCode(schema)

	// By default the lock API stays on localhost (other pods cannot take or release locks) and only the
	// admin listener, which serves no lock routes, is reachable on the pod IP.
	errs = nil
	tcp, admin := str(get(chartCfg, "listen", "tcp")), str(get(chartCfg, "listen", "admin"))
	if !loopbackRe.MatchString(tcp) {
		errs = append(errs, fmt.Sprintf("config.listen.tcp default %q is not loopback-only", tcp))
	}
	if admin == "" || loopbackRe.MatchString(admin) || portOf(admin) == portOf(tcp) {
		errs = append(errs, fmt.Sprintf("config.listen.admin default %q must be reachable on the pod IP, on its own port", admin))
	}
	s.check("defaults: lock API on localhost, admin listener on the pod IP", errs)
}

// The top-level keys config/sidelock.yaml shows only in comments, with the value the chart gives them
// (the sidecar's default: its own identity, no elections), so a config that omits them is the chart's.
var commentedDefaults = obj{"identity": "", "elections": []interface{}{}}

// commentedInReference: key is one of commentedDefaults and the reference file has it (commented out).
func commentedInReference(ref obj, key string) bool {
	_, known := commentedDefaults[key]
	_, present := ref[key]
	return known && !present
}

// loopbackRe matches a "host:port" listen address that only the pod's own containers can reach
// (mirrors sidelock.isLoopback in the chart).
var loopbackRe = regexp.MustCompile(`^(127\.[0-9.]+|localhost|\[::1\]):[0-9]+$`)

func portOf(addr string) string { return regexp.MustCompile(`^.*:`).ReplaceAllString(addr, "") }

// The chart carries copies of files other areas own (Helm's .Files only sees the chart directory);
// helm/sync-files.sh refreshes them and this check fails when they are stale.
var fileCopies = map[string]string{
	"helm/sidelock/files/sidelock-lock-health.json": "dashboards/sidelock-lock-health.json",
	"helm/sidelock/files/sidelock-alerts.yaml":      "deploy/prometheus/sidelock-alerts.yaml",
}

func (s *suite) checkFileCopies() {
	var errs []string
	for dst, src := range fileCopies {
		a, err1 := os.ReadFile(filepath.Join(s.repo, src))
		b, err2 := os.ReadFile(filepath.Join(s.repo, dst))
		switch {
		case err1 != nil:
			errs = append(errs, fmt.Sprintf("%s: %v", src, err1))
		case err2 != nil:
			errs = append(errs, fmt.Sprintf("%s missing: run helm/sync-files.sh", dst))
		case !bytes.Equal(a, b):
			errs = append(errs, fmt.Sprintf("%s differs from %s: run helm/sync-files.sh", dst, src))
		}
	}
	sort.Strings(errs)
	s.check("chart file copies up to date", errs)
}

// --- value cases ---

func (s *suite) runCase(path string) {
	name := strings.TrimSuffix(filepath.Base(path), ".yaml")
	h := header(path)
	chartDir := filepath.Join(s.repo, "helm/sidelock")
	if h["chart"] != "" {
		chartDir = filepath.Join(s.repo, h["chart"])
	}
	kube := h["kube-version"]
	if kube == "" {
		kube = "v1.30.0"
	}
	opt := Options{ReleaseName: "demo", Namespace: "apps", KubeVersion: kube}
	ms, err := renderFiles(chartDir, []string{path}, opt)
	if err != nil {
		s.check(name+": renders", []string{err.Error()})
		return
	}
	s.check(name+": renders", nil)
	stream := Stream(ms)

	golden := filepath.Join(s.repo, "tests/helm/golden", name+".yaml")
	if s.update {
		if err := os.WriteFile(golden, []byte(stream), 0o644); err != nil {
			s.check(name+": golden", []string{err.Error()})
		} else {
			s.check(name+": golden (updated)", nil)
		}
	} else {
		want, err := os.ReadFile(golden)
		var errs []string
		if err != nil {
			errs = append(errs, fmt.Sprintf("%v (UPDATE_GOLDEN=1 creates it)", err))
		} else if string(want) != stream {
			errs = append(errs, firstDiff(string(want), stream)+" (review, then UPDATE_GOLDEN=1)")
		}
		s.check(name+": matches golden", errs)
	}

	docs, err := parseStream(stream)
	if err != nil {
		s.check(name+": output is valid YAML", []string{err.Error()})
		return
	}
	var errs []string
	for i, d := range docs {
		if str(d["apiVersion"]) == "" || str(d["kind"]) == "" || str(get(d, "metadata", "name")) == "" {
			errs = append(errs, fmt.Sprintf("document %d lacks apiVersion/kind/metadata.name", i))
		}
	}
	s.check(name+": output is valid YAML objects", errs)

	var got []string
	for _, d := range docs {
		got = append(got, str(d["kind"])+"/"+str(get(d, "metadata", "name")))
	}
	sort.Strings(got)
	want := strings.Fields(h["expect-objects"])
	sort.Strings(want)
	errs = nil
	if !reflect.DeepEqual(got, want) {
		errs = append(errs, fmt.Sprintf("objects %v, want %v", got, want))
	}
	s.check(name+": expected objects", errs)

	// The values the templates saw, for the checks below.
	c, _ := LoadChart(chartDir)
	user, _ := os.ReadFile(path)
	uv, _ := ReadValues(user)
	vals := CoalesceValues(c, uv)
	if sub, ok := vals["sidelock"].(map[string]interface{}); ok && c.Meta.Name != "sidelock" {
		vals = sub
	}
	s.checkObjects(name, docs, vals, kube)
}

func firstDiff(want, got string) string {
	wl, gl := strings.Split(want, "\n"), strings.Split(got, "\n")
	for i := 0; i < len(wl) || i < len(gl); i++ {
		var w, g string
		if i < len(wl) {
			w = wl[i]
		}
		if i < len(gl) {
			g = gl[i]
		}
		if w != g {
			return fmt.Sprintf("golden differs at line %d: want %q, got %q", i+1, w, g)
		}
	}
	return "golden differs"
}

func (s *suite) checkObjects(name string, docs []obj, vals map[string]interface{}, kube string) {
	mode := str(get(vals, "sidecar", "mode"))
	socketDir := str(get(vals, "sidecar", "socketDir"))
	var configMaps = map[string]obj{}
	for _, d := range docs {
		if d["kind"] == "ConfigMap" {
			configMaps[str(get(d, "metadata", "name"))] = d
		}
	}
	pods := 0
	for _, d := range docs {
		kind := str(d["kind"])
		if kind != "Deployment" && kind != "StatefulSet" {
			continue
		}
		spec, _ := get(d, "spec", "template", "spec").(obj)
		label := name + ": " + kind + "/" + str(get(d, "metadata", "name"))
		var errs []string
		// Every container: no privilege escalation, read-only root, all capabilities dropped.
		for _, list_ := range []string{"initContainers", "containers"} {
			for _, ct := range list(spec[list_]) {
				c := ct.(obj)
				sc := get(c, "securityContext")
				if get(sc, "allowPrivilegeEscalation") != false || get(sc, "readOnlyRootFilesystem") != true ||
					!contains(list(get(sc, "capabilities", "drop")), "ALL") {
					errs = append(errs, fmt.Sprintf("container %s: securityContext not restrictive: %v", c["name"], sc))
				}
				if get(c, "resources", "limits", "memory") == nil || get(c, "resources", "requests") == nil {
					errs = append(errs, fmt.Sprintf("container %s: no resources", c["name"]))
				}
			}
		}
		if get(spec, "securityContext", "runAsNonRoot") != true {
			errs = append(errs, "pod securityContext.runAsNonRoot is not true")
		}
		classic := byName(list(spec["containers"]), str(get(vals, "sidecar", "name")))
		native := byName(list(spec["initContainers"]), str(get(vals, "sidecar", "name")))
		if classic == nil && native == nil {
			s.check(label+": security", errs)
			continue
		}
		pods++
		sc := classic
		switch {
		case mode == "classic" && (native != nil || classic == nil || classic["restartPolicy"] != nil):
			errs = append(errs, "classic mode: sidecar must be in containers without restartPolicy")
		case mode == "native" && (classic != nil || native == nil || native["restartPolicy"] != "Always"):
			errs = append(errs, "native mode: sidecar must be an init container with restartPolicy: Always")
		}
		if native != nil {
			sc = native
		}
		if get(sc, "securityContext", "runAsNonRoot") != true {
			errs = append(errs, "sidecar: runAsNonRoot is not true")
		}
		if !reflect.DeepEqual(list(sc["args"]), []interface{}{"--config", "/etc/sidelock/sidelock.yaml"}) {
			errs = append(errs, fmt.Sprintf("sidecar args %v", sc["args"]))
		}
		// Probes GET the admin port (listen.admin, else a listen.tcp beyond loopback); the lock API gets
		// a container port only when it listens beyond loopback on a port of its own.
		tcp, admin := str(get(vals, "config", "listen", "tcp")), str(get(vals, "config", "listen", "admin"))
		probesOn := false
		// Readiness asks /healthz unless sidecar.probes.readiness.requireBackend: a Redis outage must
		// not take every app pod out of its Services by default.
		readinessPath := "/healthz"
		if get(vals, "sidecar", "probes", "readiness", "requireBackend") == true {
			readinessPath = "/readyz"
		}
		for probe, path := range map[string]string{"startupProbe": "/healthz", "livenessProbe": "/healthz",
			"readinessProbe": readinessPath} {
			key := strings.TrimSuffix(probe, "Probe")
			if get(vals, "sidecar", "probes", key, "enabled") != true {
				if sc[probe] != nil {
					errs = append(errs, fmt.Sprintf("sidecar %s rendered although sidecar.probes.%s.enabled is false", probe, key))
				}
				continue
			}
			probesOn = true
			if str(get(sc, probe, "httpGet", "path")) != path || str(get(sc, probe, "httpGet", "port")) != "sidelock-admin" {
				errs = append(errs, fmt.Sprintf("sidecar %s: want GET %s on sidelock-admin, got %v", probe, path, sc[probe]))
			}
		}
		adminAddr := admin
		if adminAddr == "" && probesOn {
			adminAddr = tcp
		}
		adminPort := byName(list(sc["ports"]), "sidelock-admin")
		switch {
		case adminAddr == "" && adminPort != nil:
			errs = append(errs, fmt.Sprintf("sidecar port sidelock-admin %v without an admin listener", adminPort))
		case adminAddr != "" && (adminPort == nil || fmt.Sprint(adminPort["containerPort"]) != portOf(adminAddr)):
			errs = append(errs, fmt.Sprintf("sidecar port sidelock-admin %v does not match %q", adminPort, adminAddr))
		}
		if probesOn && (adminAddr == "" || loopbackRe.MatchString(adminAddr)) {
			errs = append(errs, fmt.Sprintf("probes on %q, which the kubelet cannot reach", adminAddr))
		}
		lockPort := byName(list(sc["ports"]), "sidelock")
		lockExposed := tcp != "" && !loopbackRe.MatchString(tcp) && portOf(tcp) != portOf(adminAddr)
		switch {
		case !lockExposed && lockPort != nil:
			errs = append(errs, fmt.Sprintf("sidecar port sidelock %v, but the lock API (%q) has no port of its own beyond loopback", lockPort, tcp))
		case lockExposed && (lockPort == nil || fmt.Sprint(lockPort["containerPort"]) != portOf(tcp)):
			errs = append(errs, fmt.Sprintf("sidecar port sidelock %v does not match config.listen.tcp %q", lockPort, tcp))
		}
		mounts := list(sc["volumeMounts"])
		if m := byName(mounts, "sidelock-socket"); m == nil || str(m["mountPath"]) != socketDir {
			errs = append(errs, "sidecar does not mount the socket volume at "+socketDir)
		}
		if m := byName(mounts, "sidelock-config"); m == nil || str(m["mountPath"]) != "/etc/sidelock" || m["readOnly"] != true {
			errs = append(errs, "sidecar does not mount the config read-only at /etc/sidelock")
		}
		// The app's containers share the socket directory.
		for _, ct := range list(spec["containers"]) {
			c := ct.(obj)
			if c["name"] == get(vals, "sidecar", "name") {
				continue
			}
			if m := byName(list(c["volumeMounts"]), "sidelock-socket"); m == nil || str(m["mountPath"]) != socketDir {
				errs = append(errs, fmt.Sprintf("app container %s does not mount the socket volume", c["name"]))
			}
			// The app reaches the lock API over loopback (SIDELOCK_ADDR) when listen.tcp is set.
			addr := byName(list(c["env"]), "SIDELOCK_ADDR")
			switch {
			case tcp == "" && addr != nil:
				errs = append(errs, fmt.Sprintf("app container %s: SIDELOCK_ADDR without listen.tcp", c["name"]))
			case tcp != "" && (addr == nil || !loopbackRe.MatchString(str(addr["value"])) || portOf(str(addr["value"])) != portOf(tcp)):
				errs = append(errs, fmt.Sprintf("app container %s: SIDELOCK_ADDR %v is not loopback on port %s", c["name"], addr, portOf(tcp)))
			}
		}
		vols := list(spec["volumes"])
		if v := byName(vols, "sidelock-socket"); v == nil || get(v, "emptyDir") == nil {
			errs = append(errs, "no emptyDir volume sidelock-socket")
		}
		cmName := str(get(byName(vols, "sidelock-config"), "configMap", "name"))
		cm := configMaps[cmName]
		if cm == nil {
			errs = append(errs, fmt.Sprintf("config volume names ConfigMap %q, which is not rendered", cmName))
		}
		// Shutdown: the pod waits long enough for the preStop sleep plus the drain.
		graceS := (toInt(get(vals, "config", "shutdown", "grace_ms")) + 999) / 1000
		sleep := toInt(get(sc, "lifecycle", "preStop", "sleep", "seconds"))
		wantSleep := 0
		if mode == "classic" && semverAtLeast(kube, 1, 30) {
			wantSleep = toInt(get(vals, "sidecar", "preStopSleepSeconds"))
		}
		if sleep != wantSleep {
			errs = append(errs, fmt.Sprintf("preStop sleep %d s, want %d s (mode %s, kube %s)", sleep, wantSleep, mode, kube))
		}
		if get(sc, "lifecycle", "preStop", "exec") != nil {
			errs = append(errs, "preStop exec: the image has no shell")
		}
		if tgp := toInt(spec["terminationGracePeriodSeconds"]); tgp < graceS+sleep+toInt(get(vals, "sidecar", "appShutdownSeconds")) {
			errs = append(errs, fmt.Sprintf("terminationGracePeriodSeconds %d < app + preStop %d + drain %d", tgp, sleep, graceS))
		}
		// TLS material comes from its Secret, mounted where the config points.
		if secret := str(get(vals, "redis", "tls", "existingSecret")); secret != "" {
			v := byName(vols, "sidelock-redis-tls")
			if str(get(v, "secret", "secretName")) != secret || byName(mounts, "sidelock-redis-tls") == nil {
				errs = append(errs, "TLS secret not mounted")
			}
		}
		// Credentials come from the Secret, never from the ConfigMap.
		if secret := str(get(vals, "redis", "existingSecret")); secret != "" {
			if get(vals, "redis", "mountAsFile") == true {
				v := byName(vols, "sidelock-redis-credentials")
				if str(get(v, "secret", "secretName")) != secret || byName(mounts, "sidelock-redis-credentials") == nil {
					errs = append(errs, "credentials secret not mounted")
				}
			} else {
				env := byName(list(sc["env"]), str(get(vals, "config", "backend", "password_env")))
				if str(get(env, "valueFrom", "secretKeyRef", "name")) != secret {
					errs = append(errs, "password env var does not come from the secret")
				}
			}
		}
		// The downward API gives the sidecar its pod's name (config.identity's default) and IP (for
		// ${POD_IP} in config.elections), unless sidecar.extraEnv sets them.
		for v, field := range map[string]string{"POD_NAME": "metadata.name", "POD_IP": "status.podIP"} {
			e := byName(list(sc["env"]), v)
			if byName(list(get(vals, "sidecar", "extraEnv")), v) == nil && str(get(e, "valueFrom", "fieldRef", "fieldPath")) != field {
				errs = append(errs, fmt.Sprintf("sidecar env %s is %v, want the downward API's %s", v, e, field))
			}
		}
		errs = append(errs, electionProbeProblems(spec, vals)...)
		s.check(label+": sidecar, probes, mounts, security, shutdown", errs)
		if cm != nil {
			s.checkConfigMap(label, cm, vals, containerEnv(sc))
		}
	}
	s.checkDemoRedisPersistence(name, docs)
	s.checkRunbookURLs(name, docs, vals)
	if get(vals, "demo", "enabled") == true && pods == 0 {
		s.check(name+": demo pod has the sidecar", []string{"no pod template with a sidelock container"})
	}
	// Monitoring objects exist exactly when enabled.
	var errs []string
	for key, kind := range map[string]string{"podMonitor": "PodMonitor", "serviceMonitor": "ServiceMonitor",
		"prometheusRule": "PrometheusRule"} {
		n := countKind(docs, kind)
		if on := get(vals, "monitoring", key, "enabled") == true; (n > 0) != on {
			errs = append(errs, fmt.Sprintf("%d %s objects with monitoring.%s.enabled=%v", n, kind, key, on))
		}
	}
	dash := 0
	for _, d := range docs {
		if d["kind"] == "ConfigMap" && str(get(d, "metadata", "labels", "grafana_dashboard")) == "1" {
			dash++
			var parsed interface{}
			if err := yaml.Unmarshal([]byte(str(get(d, "data", "sidelock-lock-health.json"))), &parsed); err != nil || parsed == nil {
				errs = append(errs, "dashboard ConfigMap does not hold the dashboard JSON")
			}
		}
	}
	if on := get(vals, "monitoring", "grafanaDashboard", "enabled") == true; (dash > 0) != on {
		errs = append(errs, fmt.Sprintf("%d dashboard ConfigMaps with grafanaDashboard.enabled=%v", dash, on))
	}
	for _, d := range docs {
		if d["kind"] == "PrometheusRule" && len(list(get(d, "spec", "groups"))) == 0 {
			errs = append(errs, "PrometheusRule has no groups")
		}
	}
	s.check(name+": monitoring objects match the toggles", errs)

	// Scraping goes to the admin port; no Service exposes the lock API.
	errs = nil
	tcpPort := portOf(str(get(vals, "config", "listen", "tcp")))
	if str(get(vals, "config", "listen", "tcp")) == "" {
		tcpPort = ""
	}
	for _, d := range docs {
		id := str(d["kind"]) + "/" + str(get(d, "metadata", "name"))
		switch d["kind"] {
		case "PodMonitor":
			for _, e := range list(get(d, "spec", "podMetricsEndpoints")) {
				if str(get(e, "port")) != "sidelock-admin" {
					errs = append(errs, fmt.Sprintf("%s scrapes port %v, want sidelock-admin", id, get(e, "port")))
				}
			}
		case "ServiceMonitor":
			for _, e := range list(get(d, "spec", "endpoints")) {
				if str(get(e, "port")) != "sidelock-admin" {
					errs = append(errs, fmt.Sprintf("%s scrapes port %v, want sidelock-admin", id, get(e, "port")))
				}
			}
		case "Service":
			if sel := str(get(d, "spec", "selector", "app.kubernetes.io/name")); sel == "sidelock-redis" || sel == "sidelock-redlock" {
				continue // the demo's Redis servers, not the sidecar pods
			}
			for _, p := range list(get(d, "spec", "ports")) {
				if str(get(p, "targetPort")) != "sidelock-admin" || (tcpPort != "" && fmt.Sprint(get(p, "port")) == tcpPort) {
					errs = append(errs, fmt.Sprintf("%s exposes port %v (target %v): only sidelock-admin, never the lock API", id, get(p, "port"), get(p, "targetPort")))
				}
			}
		}
	}
	s.check(name+": scraping on the admin port, no Service for the lock API", errs)
}

func (s *suite) checkConfigMap(label string, cm obj, vals map[string]interface{}, env []string) {
	text := str(get(cm, "data", "sidelock.yaml"))
	var cfg obj
	var errs []string
	if err := yaml.Unmarshal([]byte(text), &cfg); err != nil {
		s.check(label+": ConfigMap sidelock.yaml parses", []string{err.Error()})
		return
	}
	// Every config value is rendered as given, except what the chart sets itself.
	want, got := map[string]interface{}{}, map[string]interface{}{}
	wantCfg, _ := deepCopy(vals["config"]).(obj)
	if wantCfg != nil && wantCfg["elections"] != nil {
		wantCfg["elections"] = electionsWithAppHealth(list(wantCfg["elections"]), vals)
	}
	flattenKeys("", wantCfg, want)
	flattenKeys("", cfg, got)
	for k, v := range want {
		g, ok := got[k]
		if !ok {
			errs = append(errs, "ConfigMap lacks "+k)
			continue
		}
		if k == "backend.nodes" || k == "backend.password_file" {
			continue
		}
		if strings.HasPrefix(k, "backend.tls.") && str(get(vals, "redis", "tls", "existingSecret")) != "" {
			continue // set by the chart from redis.tls
		}
		if (k == "auth.tokens_file" || k == "auth.admin_tokens_file") && str(get(vals, "auth", "existingSecret")) != "" {
			continue // set by the chart from auth
		}
		if !sameValue(v, g) {
			errs = append(errs, fmt.Sprintf("ConfigMap %s = %v, values say %v", k, g, v))
		}
	}
	if len(got) != len(want) {
		errs = append(errs, fmt.Sprintf("ConfigMap has %d keys, values %d", len(got), len(want)))
	}
	if strings.Contains(text, "e+") {
		errs = append(errs, "a number is rendered in exponent form")
	}
	s.check(label+": ConfigMap holds every config value", errs)
	s.checkConfigWithBinary(label, text, env)
}

// electionsWithAppHealth is config.elections as the chart renders them (sidelock.electionHealth): an
// entry without health gets the app container's readiness endpoint (sidecar.appReadiness, when its
// port is set), `health: false` loses the key, an entry's own health stays.
func electionsWithAppHealth(elections []interface{}, vals map[string]interface{}) []interface{} {
	app, _ := get(vals, "sidecar", "appReadiness").(obj)
	port := fmt.Sprint(get(app, "port"))
	var out []interface{}
	for _, x := range elections {
		e, _ := x.(obj)
		if e == nil {
			out = append(out, x)
			continue
		}
		if h, ok := e["health"]; ok && h == false {
			delete(e, "health")
		} else if !ok && port != "0" && port != "<nil>" && port != "" {
			e["health"] = obj{
				"url":         "http://127.0.0.1:" + port + str(get(app, "path")),
				"interval_ms": get(app, "intervalMs"),
				"failures":    get(app, "failures"),
				"grace_ms":    get(app, "graceMs"),
			}
		}
		out = append(out, e)
	}
	return out
}

// containerEnv is the environment a container would get, as NAME=value: literal values as given,
// the downward API's pod name and IP as a pod would have them, anything from a Secret as "secret".
// (sidelock --check-config needs it: config.elections values expand ${VAR} from the environment.)
func containerEnv(c obj) []string {
	var env []string
	for _, x := range list(c["env"]) {
		e, _ := x.(obj)
		v := str(e["value"])
		switch str(get(e, "valueFrom", "fieldRef", "fieldPath")) {
		case "metadata.name":
			v = "demo-7d9f5c6b8-x2x4q"
		case "status.podIP":
			v = "10.1.2.3"
		}
		if get(e, "valueFrom", "secretKeyRef") != nil {
			v = "secret"
		}
		env = append(env, str(e["name"])+"="+v)
	}
	return env
}

// electionProbeProblems checks the app containers' readiness probes on sidelock's election route
// (sidelock.electionReadinessProbe): the kubelet must reach it, so it asks the admin listener by port
// number (a named port is looked up in the probe's own container, and sidelock-admin is the
// sidecar's), for a valid election name.
func electionProbeProblems(spec obj, vals map[string]interface{}) []string {
	var errs []string
	admin := str(get(vals, "config", "listen", "admin"))
	for _, ct := range append(list(spec["containers"]), list(spec["initContainers"])...) {
		c, _ := ct.(obj)
		for _, probe := range []string{"readinessProbe", "livenessProbe", "startupProbe"} {
			path := str(get(c, probe, "httpGet", "path"))
			m := electionReadyRe.FindStringSubmatch(path)
			if m == nil {
				continue
			}
			if probe != "readinessProbe" || c["name"] == get(vals, "sidecar", "name") {
				errs = append(errs, fmt.Sprintf("container %s: %s on %s: the election route belongs in an app container's readinessProbe", c["name"], probe, path))
			}
			if port := fmt.Sprint(get(c, probe, "httpGet", "port")); admin == "" || loopbackRe.MatchString(admin) || port != portOf(admin) {
				errs = append(errs, fmt.Sprintf("container %s: %s on port %s, want config.listen.admin's port (%q) by number", c["name"], path, port, admin))
			}
		}
	}
	return errs
}

var electionReadyRe = regexp.MustCompile(`^/v1/elections/([A-Za-z0-9_.:@~-]+)/ready$`)

// checkConfigWithBinary runs `sidelock --check-config` on the rendered file once the binary validates
// (a config with an unknown key must be rejected first; until then the check is reported as skipped),
// with env (NAME=value) added to its environment.
func (s *suite) checkConfigWithBinary(label, text string, env []string) {
	if s.sidelock == "" {
		s.skipped = append(s.skipped, label+": sidelock --check-config (no binary given)")
		return
	}
	if _, err := os.Stat(s.sidelock); err != nil {
		s.skipped = append(s.skipped, label+": sidelock --check-config (binary not built)")
		return
	}
	dir, _ := os.MkdirTemp("", "helmtest")
	defer os.RemoveAll(dir)
	run := func(cfg string) (string, error) {
		f := filepath.Join(dir, "sidelock.yaml")
		_ = os.WriteFile(f, []byte(cfg), 0o600)
		cmd := exec.Command(s.sidelock, "--check-config", f)
		cmd.Env = append(os.Environ(), env...)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	if s.checkConfigWork == nil {
		_, err := run("listen:\n  no_such_key: 1\n")
		ok := err != nil
		s.checkConfigWork = &ok
	}
	if !*s.checkConfigWork {
		s.skipped = append(s.skipped, label+": sidelock --check-config (the binary accepts an unknown key: not implemented yet)")
		return
	}
	// A mounted password file does not exist here: point it at a temporary one.
	re := regexp.MustCompile(`(?m)^(\s*password_file:).*$`)
	if m := re.FindStringSubmatch(text); m != nil && !strings.HasSuffix(strings.TrimSpace(m[0]), `""`) {
		pw := filepath.Join(dir, "password")
		_ = os.WriteFile(pw, []byte("secret\n"), 0o600)
		text = re.ReplaceAllString(text, "${1} "+pw)
	}
	// Mounted TLS files do not exist here either: point them at a certificate made for the check.
	tlsRe := regexp.MustCompile(`(?m)^(\s*(?:ca_file|cert_file|key_file):)\s*(/etc/sidelock/tls/\S+)\s*$`)
	if tlsRe.MatchString(text) {
		crt, key := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
		gen := exec.Command("openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
			"-nodes", "-keyout", key, "-out", crt, "-days", "1", "-subj", "/CN=helmtest")
		if out, err := gen.CombinedOutput(); err != nil {
			s.check(label+": sidelock --check-config accepts the ConfigMap", []string{"openssl: " + string(out)})
			return
		}
		text = tlsRe.ReplaceAllStringFunc(text, func(line string) string {
			m := tlsRe.FindStringSubmatch(line)
			if strings.Contains(m[1], "key_file") {
				return m[1] + " " + key
			}
			return m[1] + " " + crt
		})
	}
	// Mounted token files neither: point them at one holding a valid token.
	tokRe := regexp.MustCompile(`(?m)^(\s*(?:tokens_file|admin_tokens_file):)\s*(/etc/sidelock/auth/\S+)\s*$`)
	if tokRe.MatchString(text) {
		tok := filepath.Join(dir, "tokens")
		_ = os.WriteFile(tok, []byte("helmtestToken0123456789abcdef\n"), 0o600)
		text = tokRe.ReplaceAllString(text, "${1} "+tok)
	}
	// The socket's directory is a mounted emptyDir in the pod; --check-config checks that it exists.
	unixRe := regexp.MustCompile(`(?m)^(\s*unix:)\s*"?/run/sidelock/([^"\s]+)"?.*$`)
	text = unixRe.ReplaceAllString(text, "${1} "+filepath.Join(dir, "${2}"))
	out, err := run(text)
	var errs []string
	if err != nil {
		errs = append(errs, fmt.Sprintf("sidelock --check-config: %v: %s", err, out))
	}
	s.check(label+": sidelock --check-config accepts the ConfigMap", errs)
}

func (s *suite) runBadCase(path string) {
	name := "bad-values/" + strings.TrimSuffix(filepath.Base(path), ".yaml")
	h := header(path)
	chartDir := filepath.Join(s.repo, "helm/sidelock")
	if h["chart"] != "" {
		chartDir = filepath.Join(s.repo, h["chart"])
	}
	kube := h["kube-version"]
	if kube == "" {
		kube = "v1.30.0"
	}
	_, err := renderFiles(chartDir, []string{path}, Options{ReleaseName: "demo", Namespace: "apps", KubeVersion: kube})
	var errs []string
	switch {
	case h["expect"] == "":
		errs = append(errs, "no '# expect: <message part>' header")
	case err == nil:
		errs = append(errs, "accepted, want an error containing "+h["expect"])
	case !strings.Contains(err.Error(), h["expect"]):
		errs = append(errs, fmt.Sprintf("error %q does not contain %q", err.Error(), h["expect"]))
	}
	s.check(name+": rejected", errs)
}

func contains(l []interface{}, s string) bool {
	for _, x := range l {
		if str(x) == s {
			return true
		}
	}
	return false
}

func countKind(docs []obj, kind string) int {
	n := 0
	for _, d := range docs {
		if d["kind"] == kind {
			n++
		}
	}
	return n
}

func toInt(v interface{}) int {
	switch t := v.(type) {
	case int:
		return t
	case int64:
		return int(t)
	case float64:
		return int(t)
	}
	return 0
}

func semverAtLeast(v string, major, minor int) bool {
	var a, b int
	fmt.Sscanf(strings.TrimPrefix(v, "v"), "%d.%d", &a, &b)
	return a > major || (a == major && b >= minor)
}

// sameValue compares a value from values.yaml (numbers are float64, as in Helm) with one parsed from
// the rendered YAML (integers are int).
func sameValue(a, b interface{}) bool {
	num := func(v interface{}) (float64, bool) {
		switch t := v.(type) {
		case int:
			return float64(t), true
		case int64:
			return float64(t), true
		case float64:
			return t, true
		}
		return 0, false
	}
	if x, ok := num(a); ok {
		y, ok2 := num(b)
		return ok2 && x == y
	}
	return fmt.Sprint(a) == fmt.Sprint(b)
}
