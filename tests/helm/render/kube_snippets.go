// deploy/kubernetes: the plain-YAML sidecar snippet and the kustomize component, for teams that do not
// template their manifests. Both must stay what the chart renders with its defaults (a demo pod of a
// release named "sidelock", so the ConfigMap is "sidelock"): the same sidecar container, volumes, grace
// period, app env and mounts, and a config that is the chart's once the sidecar's defaults
// (config/sidelock.yaml) are filled in. With kubectl on PATH, `kubectl kustomize` builds the example.
package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"sort"
	"strings"

	"gopkg.in/yaml.v3"
)

// chartReference renders the chart's defaults (demo pod on) and returns its pod spec, sidecar
// container, app container and config file.
func (s *suite) chartReference() (spec, sidecar, app, cfg obj, err error) {
	tmp, err := os.MkdirTemp("", "helmtest-snippet")
	if err != nil {
		return
	}
	defer os.RemoveAll(tmp)
	values := filepath.Join(tmp, "values.yaml")
	if err = os.WriteFile(values, []byte("demo:\n  enabled: true\n"), 0o644); err != nil {
		return
	}
	ms, err := renderFiles(filepath.Join(s.repo, "helm/sidelock"), []string{values},
		Options{ReleaseName: "sidelock", Namespace: "default", KubeVersion: "v1.30.0"})
	if err != nil {
		return
	}
	docs, err := parseStream(Stream(ms))
	if err != nil {
		return
	}
	for _, d := range docs {
		switch d["kind"] {
		case "Deployment":
			spec, _ = get(d, "spec", "template", "spec").(obj)
		case "ConfigMap":
			err = yaml.Unmarshal([]byte(str(get(d, "data", "sidelock.yaml"))), &cfg)
		}
	}
	sidecar = byName(list(spec["containers"]), "sidelock")
	app = byName(list(spec["containers"]), "app")
	if spec == nil || sidecar == nil || app == nil || cfg == nil {
		err = fmt.Errorf("the chart's default render has no demo pod with a sidelock container and a config")
	}
	return
}

// mergeDefaults returns base with over laid on top (maps merge, anything else replaces).
func mergeDefaults(base, over interface{}) interface{} {
	b, ok1 := base.(obj)
	o, ok2 := over.(obj)
	if !ok1 || !ok2 {
		return over
	}
	out := obj{}
	for k, v := range b {
		out[k] = v
	}
	for k, v := range o {
		out[k] = mergeDefaults(b[k], v)
	}
	return out
}

// compareConfig checks that cfg, completed with the sidecar's defaults, is the chart's config.
func (s *suite) compareConfig(what string, cfg, want obj) []string {
	defaults, err := readYAML(filepath.Join(s.repo, "config/sidelock.yaml"))
	if err != nil {
		return []string{err.Error()}
	}
	got := map[string]interface{}{}
	wantFlat := map[string]interface{}{}
	flattenKeys("", mergeDefaults(mergeDefaults(commentedDefaults, defaults), cfg), got)
	flattenKeys("", want, wantFlat)
	var errs []string
	for k, v := range wantFlat {
		if g, ok := got[k]; !ok || !sameValue(v, g) {
			errs = append(errs, fmt.Sprintf("%s: config %s = %v, the chart renders %v", what, k, g, v))
		}
	}
	for k := range got {
		if _, ok := wantFlat[k]; !ok {
			errs = append(errs, fmt.Sprintf("%s: config %s, which the chart does not render", what, k))
		}
	}
	return errs
}

// comparePod checks the sidecar parts of a pod spec against the chart's.
func comparePod(what string, spec, want, wantSidecar obj) []string {
	var errs []string
	if sc := byName(list(spec["containers"]), "sidelock"); sc == nil {
		errs = append(errs, what+": no sidelock container")
	} else {
		for _, d := range diffKeys(sc, wantSidecar) {
			errs = append(errs, what+": sidelock container "+d)
		}
	}
	for _, v := range list(want["volumes"]) {
		name := str(get(v, "name"))
		if got := byName(list(spec["volumes"]), name); !reflect.DeepEqual(got, v) {
			errs = append(errs, fmt.Sprintf("%s: volume %s = %v, the chart renders %v", what, name, got, v))
		}
	}
	if toInt(spec["terminationGracePeriodSeconds"]) != toInt(want["terminationGracePeriodSeconds"]) {
		errs = append(errs, fmt.Sprintf("%s: terminationGracePeriodSeconds %v, the chart renders %v", what,
			spec["terminationGracePeriodSeconds"], want["terminationGracePeriodSeconds"]))
	}
	if get(spec, "securityContext", "fsGroup") != get(want, "securityContext", "fsGroup") {
		errs = append(errs, fmt.Sprintf("%s: securityContext.fsGroup %v, the chart sets %v", what,
			get(spec, "securityContext", "fsGroup"), get(want, "securityContext", "fsGroup")))
	}
	return errs
}

// diffKeys lists the keys (dotted paths; lists compared whole) where got and want differ.
func diffKeys(got, want obj) []string {
	g, w := map[string]interface{}{}, map[string]interface{}{}
	flattenKeys("", got, g)
	flattenKeys("", want, w)
	var out []string
	for k, v := range w {
		if gv, ok := g[k]; !ok || !reflect.DeepEqual(gv, v) {
			out = append(out, fmt.Sprintf("%s = %v, the chart renders %v", k, gv, v))
		}
	}
	for k, v := range g {
		if _, ok := w[k]; !ok {
			out = append(out, fmt.Sprintf("%s = %v, which the chart does not render", k, v))
		}
	}
	sort.Strings(out)
	return out
}

// compareAppContainer checks that the app container carries the chart's env and socket mount.
func compareAppContainer(what string, c, wantApp obj) []string {
	var errs []string
	if c == nil {
		return []string{what + ": no app container"}
	}
	for _, key := range []string{"env", "volumeMounts"} {
		for _, item := range list(wantApp[key]) {
			name := str(get(item, "name"))
			if got := byName(list(c[key]), name); !reflect.DeepEqual(got, item) {
				errs = append(errs, fmt.Sprintf("%s: app %s %s = %v, the chart renders %v", what, key, name, got, item))
			}
		}
	}
	return errs
}

func (s *suite) checkKubernetesSnippets() {
	dir := filepath.Join(s.repo, "deploy/kubernetes")
	spec, sidecar, app, cfg, err := s.chartReference()
	if err != nil {
		s.check("deploy/kubernetes: chart reference renders", []string{err.Error()})
		return
	}

	// The plain-YAML snippet: a ConfigMap and an example Deployment.
	var errs []string
	raw, err := os.ReadFile(filepath.Join(dir, "sidecar-snippet.yaml"))
	docs, err2 := parseStream(string(raw))
	if err != nil || err2 != nil {
		s.check("deploy/kubernetes/sidecar-snippet.yaml: parses", []string{fmt.Sprint(err, err2)})
		return
	}
	var snippetCfgText string
	var snippetSpec obj
	for _, d := range docs {
		switch d["kind"] {
		case "ConfigMap":
			if str(get(d, "metadata", "name")) != "sidelock" {
				errs = append(errs, "ConfigMap is not named sidelock (the config volume's name)")
			}
			snippetCfgText = str(get(d, "data", "sidelock.yaml"))
		case "Deployment":
			snippetSpec, _ = get(d, "spec", "template", "spec").(obj)
		}
	}
	var snippetCfg obj
	if err := yaml.Unmarshal([]byte(snippetCfgText), &snippetCfg); err != nil || snippetCfg == nil {
		errs = append(errs, fmt.Sprintf("ConfigMap sidelock.yaml does not parse: %v", err))
	}
	if snippetSpec == nil {
		errs = append(errs, "no Deployment")
	} else {
		errs = append(errs, comparePod("snippet", snippetSpec, spec, sidecar)...)
		var appC obj
		for _, c := range list(snippetSpec["containers"]) {
			if str(get(c, "name")) != "sidelock" {
				appC, _ = c.(obj)
			}
		}
		errs = append(errs, compareAppContainer("snippet", appC, app)...)
	}
	errs = append(errs, s.compareConfig("snippet", snippetCfg, cfg)...)
	sort.Strings(errs)
	s.check("deploy/kubernetes/sidecar-snippet.yaml: what the chart renders", errs)
	if snippetCfgText != "" {
		s.checkConfigWithBinary("deploy/kubernetes/sidecar-snippet.yaml", snippetCfgText, nil)
	}

	// The kustomize component: its patch and config are the same.
	errs = nil
	comp := filepath.Join(dir, "kustomize/sidelock")
	k, err := readYAML(filepath.Join(comp, "kustomization.yaml"))
	if err != nil {
		errs = append(errs, err.Error())
	} else {
		if str(k["kind"]) != "Component" {
			errs = append(errs, fmt.Sprintf("kustomization kind %v, want Component", k["kind"]))
		}
		gen := list(k["configMapGenerator"])
		if len(gen) != 1 || str(get(gen[0], "name")) != "sidelock" {
			errs = append(errs, fmt.Sprintf("configMapGenerator %v: want one ConfigMap named sidelock", gen))
		}
		for _, p := range list(k["patches"]) {
			if _, err := os.Stat(filepath.Join(comp, str(get(p, "path")))); err != nil {
				errs = append(errs, "patch "+str(get(p, "path"))+" missing")
			}
		}
	}
	patch, err := readYAML(filepath.Join(comp, "sidecar-patch.yaml"))
	if err != nil {
		errs = append(errs, err.Error())
	} else {
		pspec, _ := get(patch, "spec", "template", "spec").(obj)
		errs = append(errs, comparePod("kustomize patch", pspec, spec, sidecar)...)
	}
	kcfg, err := readYAML(filepath.Join(comp, "sidelock.yaml"))
	if err != nil {
		errs = append(errs, err.Error())
	} else {
		errs = append(errs, s.compareConfig("kustomize sidelock.yaml", kcfg, cfg)...)
	}
	exampleDep, err := readYAML(filepath.Join(dir, "kustomize/example/deployment.yaml"))
	if err != nil {
		errs = append(errs, err.Error())
	} else {
		appC := byName(list(get(exampleDep, "spec", "template", "spec", "containers")), "myapp")
		errs = append(errs, compareAppContainer("kustomize example", appC, app)...)
	}
	sort.Strings(errs)
	s.check("deploy/kubernetes/kustomize: the component is what the chart renders", errs)

	// kubectl's built-in kustomize, where installed (not a Debian package, so optional): the example
	// builds, and its Deployment gets the chart's sidecar with the generated (hash-suffixed) ConfigMap.
	if _, err := exec.LookPath("kubectl"); err != nil {
		s.skipped = append(s.skipped, "deploy/kubernetes/kustomize: kubectl kustomize (kubectl not installed)")
		return
	}
	out, err := exec.Command("kubectl", "kustomize", filepath.Join(dir, "kustomize/example")).CombinedOutput()
	if err != nil {
		s.check("deploy/kubernetes/kustomize: kubectl kustomize builds the example", []string{fmt.Sprintf("%v: %s", err, out)})
		return
	}
	built, err := parseStream(string(out))
	errs = nil
	if err != nil {
		errs = append(errs, err.Error())
	}
	var cmName string
	var builtSpec obj
	for _, d := range built {
		switch d["kind"] {
		case "ConfigMap":
			cmName = str(get(d, "metadata", "name"))
		case "Deployment":
			builtSpec, _ = get(d, "spec", "template", "spec").(obj)
		}
	}
	if !strings.HasPrefix(cmName, "sidelock-") {
		errs = append(errs, fmt.Sprintf("generated ConfigMap %q, want sidelock-<hash>", cmName))
	}
	if builtSpec == nil {
		errs = append(errs, "no Deployment in the output")
	} else {
		// The generated name is the only difference to the chart's pod.
		if v := byName(list(builtSpec["volumes"]), "sidelock-config"); v != nil && str(get(v, "configMap", "name")) == cmName {
			v["configMap"].(obj)["name"] = "sidelock"
		} else {
			errs = append(errs, fmt.Sprintf("volume sidelock-config %v does not name the generated ConfigMap %q", v, cmName))
		}
		errs = append(errs, comparePod("kubectl kustomize", builtSpec, spec, sidecar)...)
		errs = append(errs, compareAppContainer("kubectl kustomize", byName(list(builtSpec["containers"]), "myapp"), app)...)
	}
	sort.Strings(errs)
	s.check("deploy/kubernetes/kustomize: kubectl kustomize builds the example with the sidecar", errs)
}
