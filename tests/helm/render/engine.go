// A small, faithful stand-in for `helm template`: Go's text/template plus sprig (both from Debian's
// golang packages) plus the functions and objects Helm adds that the sidelock chart uses. It exists
// because neither a helm binary nor a cluster is available on build machines; the chart must stay within
// what this file implements (see helm/sidelock/README.md, "Testing the chart").
//
// Mirrors helm.sh/helm/v3/pkg/engine and pkg/chartutil:
//   - values are read like sigs.k8s.io/yaml does (YAML 1.1 via yaml.v2, then JSON: numbers become
//     float64), user files are deep-merged in order, then coalesced with the chart defaults (null deletes);
//   - values are validated against values.schema.json with xeipuuv/gojsonschema, as Helm does;
//   - functions: sprig's TxtFuncMap minus env/expandenv, plus include, tpl, required, toYaml, fromYaml,
//     fromYamlArray, toJson, fromJson, fromJsonArray, lookup (always empty: no cluster);
//   - objects: .Values .Release .Chart .Capabilities (.KubeVersion, .APIVersions.Has) .Files (.Get,
//     .GetBytes, .Lines) .Template (.Name, .BasePath) and subcharts from Chart.yaml dependencies with a
//     file:// repository (values scoped under the dependency name, one shared template namespace);
//   - missingkey=zero and "<no value>" removed from the output; templates named _* are partials.
//
// Not implemented (the chart must not use them): .Files.Glob/AsConfig/AsSecrets, toToml, global values,
// import-values, dependency conditions/tags, hooks, NOTES.txt, manifest sorting by kind (output is in
// template path order).
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"text/template"

	sprig "github.com/Masterminds/sprig/v3"
	"github.com/xeipuuv/gojsonschema"
	yaml2 "gopkg.in/yaml.v2"
)

// ChartMeta holds the Chart.yaml fields templates may read as .Chart.X (Helm's chart.Metadata).
type ChartMeta struct {
	APIVersion   string            `json:"apiVersion"`
	Name         string            `json:"name"`
	Version      string            `json:"version"`
	AppVersion   string            `json:"appVersion"`
	KubeVersion  string            `json:"kubeVersion"`
	Description  string            `json:"description"`
	Type         string            `json:"type"`
	Home         string            `json:"home"`
	Keywords     []string          `json:"keywords"`
	Sources      []string          `json:"sources"`
	Annotations  map[string]string `json:"annotations"`
	Dependencies []Dependency      `json:"dependencies"`
}

type Dependency struct {
	Name       string `json:"name"`
	Version    string `json:"version"`
	Repository string `json:"repository"`
	Alias      string `json:"alias"`
}

// Files is .Files: every chart file outside templates/ and the chart's own metadata files.
type Files map[string][]byte

func (f Files) Get(name string) string      { return string(f[name]) }
func (f Files) GetBytes(name string) []byte { return f[name] }
func (f Files) Lines(name string) []string {
	if f[name] == nil {
		return []string{}
	}
	return strings.Split(string(f[name]), "\n")
}

type KubeVersion struct {
	Version string
	Major   string
	Minor   string
}

func (k KubeVersion) String() string     { return k.Version }
func (k KubeVersion) GitVersion() string { return k.Version }

type VersionSet []string

func (v VersionSet) Has(apiVersion string) bool {
	for _, x := range v {
		if x == apiVersion {
			return true
		}
	}
	return false
}

type Capabilities struct {
	KubeVersion KubeVersion
	APIVersions VersionSet
}

// Chart is a loaded chart directory and its file:// dependencies.
type Chart struct {
	Dir       string
	Meta      ChartMeta
	Defaults  map[string]interface{}
	Schema    []byte
	Templates map[string]string // path relative to the chart dir -> source
	Files     Files
	Subcharts []*Chart // with Meta.Name already replaced by the alias, if any
}

func LoadChart(dir string) (*Chart, error) {
	c := &Chart{Dir: dir, Templates: map[string]string{}, Files: Files{}}
	raw, err := os.ReadFile(filepath.Join(dir, "Chart.yaml"))
	if err != nil {
		return nil, err
	}
	if err := sigsUnmarshal(raw, &c.Meta); err != nil {
		return nil, fmt.Errorf("%s/Chart.yaml: %w", dir, err)
	}
	if raw, err = os.ReadFile(filepath.Join(dir, "values.yaml")); err == nil {
		if c.Defaults, err = ReadValues(raw); err != nil {
			return nil, fmt.Errorf("%s/values.yaml: %w", dir, err)
		}
	} else {
		c.Defaults = map[string]interface{}{}
	}
	if raw, err = os.ReadFile(filepath.Join(dir, "values.schema.json")); err == nil {
		c.Schema = raw
	}
	err = filepath.Walk(dir, func(p string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		rel = filepath.ToSlash(rel)
		if info.IsDir() {
			if rel == "charts" {
				return filepath.SkipDir
			}
			return nil
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		switch {
		case strings.HasPrefix(rel, "templates/"):
			c.Templates[rel] = string(data)
		case rel == "Chart.yaml" || rel == "values.yaml" || rel == "values.schema.json" ||
			rel == "Chart.lock" || rel == ".helmignore":
		default:
			c.Files[rel] = data
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	for _, d := range c.Meta.Dependencies {
		if !strings.HasPrefix(d.Repository, "file://") {
			return nil, fmt.Errorf("dependency %s: only file:// repositories are supported", d.Name)
		}
		sub, err := LoadChart(filepath.Join(dir, strings.TrimPrefix(d.Repository, "file://")))
		if err != nil {
			return nil, err
		}
		if d.Alias != "" {
			sub.Meta.Name = d.Alias
		}
		c.Subcharts = append(c.Subcharts, sub)
	}
	return c, nil
}

// --- values (pkg/chartutil) ---

// sigsUnmarshal behaves like sigs.k8s.io/yaml.Unmarshal: YAML (1.1, yaml.v2) -> JSON -> encoding/json.
func sigsUnmarshal(data []byte, out interface{}) error {
	var obj interface{}
	if err := yaml2.Unmarshal(data, &obj); err != nil {
		return err
	}
	j, err := json.Marshal(jsonify(obj))
	if err != nil {
		return err
	}
	return json.Unmarshal(j, out)
}

// sigsMarshal behaves like sigs.k8s.io/yaml.Marshal: encoding/json, then JSON -> YAML with yaml.v2
// (sorted keys, block style).
func sigsMarshal(v interface{}) ([]byte, error) {
	j, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	var obj interface{}
	if err := yaml2.Unmarshal(j, &obj); err != nil {
		return nil, err
	}
	return yaml2.Marshal(obj)
}

func jsonify(v interface{}) interface{} {
	switch t := v.(type) {
	case map[interface{}]interface{}:
		m := make(map[string]interface{}, len(t))
		for k, x := range t {
			m[fmt.Sprint(k)] = jsonify(x)
		}
		return m
	case []interface{}:
		for i := range t {
			t[i] = jsonify(t[i])
		}
	}
	return v
}

func ReadValues(data []byte) (map[string]interface{}, error) {
	vals := map[string]interface{}{}
	if err := sigsUnmarshal(data, &vals); err != nil {
		return nil, err
	}
	if vals == nil {
		vals = map[string]interface{}{}
	}
	return vals, nil
}

// MergeMaps is how `helm -f a.yaml -f b.yaml` combines user files: later files win, maps merge deeply.
func MergeMaps(a, b map[string]interface{}) map[string]interface{} {
	out := make(map[string]interface{}, len(a))
	for k, v := range a {
		out[k] = v
	}
	for k, v := range b {
		if vm, ok := v.(map[string]interface{}); ok {
			if om, ok := out[k].(map[string]interface{}); ok {
				out[k] = MergeMaps(om, vm)
				continue
			}
		}
		out[k] = v
	}
	return out
}

func deepCopy(v interface{}) interface{} {
	switch t := v.(type) {
	case map[string]interface{}:
		m := make(map[string]interface{}, len(t))
		for k, x := range t {
			m[k] = deepCopy(x)
		}
		return m
	case []interface{}:
		l := make([]interface{}, len(t))
		for i, x := range t {
			l[i] = deepCopy(x)
		}
		return l
	}
	return v
}

// coalesce fills user values from defaults: user wins, maps merge, a user null deletes the key.
func coalesce(user, defaults map[string]interface{}) map[string]interface{} {
	for k, dv := range defaults {
		uv, ok := user[k]
		if !ok {
			user[k] = deepCopy(dv)
			continue
		}
		if uv == nil {
			delete(user, k)
			continue
		}
		if um, ok := uv.(map[string]interface{}); ok {
			if dm, ok := dv.(map[string]interface{}); ok {
				coalesce(um, dm)
			}
		}
	}
	for k, v := range user {
		if v == nil {
			delete(user, k)
		}
	}
	return user
}

// CoalesceValues returns the values templates see: user values over the chart defaults, and for each
// subchart its section over the subchart's defaults.
func CoalesceValues(c *Chart, user map[string]interface{}) map[string]interface{} {
	vals := coalesce(deepCopy(user).(map[string]interface{}), c.Defaults)
	for _, sub := range c.Subcharts {
		section, _ := vals[sub.Meta.Name].(map[string]interface{})
		if section == nil {
			section = map[string]interface{}{}
		}
		vals[sub.Meta.Name] = CoalesceValues(sub, section)
	}
	return vals
}

// ValidateValues checks vals against the chart's schema and each subchart's section against its own.
func ValidateValues(c *Chart, vals map[string]interface{}) error {
	var msgs []string
	if c.Schema != nil {
		var schema interface{}
		if err := sigsUnmarshal(c.Schema, &schema); err != nil {
			return fmt.Errorf("%s: values.schema.json: %w", c.Meta.Name, err)
		}
		res, err := gojsonschema.Validate(gojsonschema.NewGoLoader(schema), gojsonschema.NewGoLoader(vals))
		if err != nil {
			return fmt.Errorf("%s: schema: %w", c.Meta.Name, err)
		}
		for _, e := range res.Errors() {
			msgs = append(msgs, fmt.Sprintf("- %s: %s", e.Field(), e.Description()))
		}
	}
	for _, sub := range c.Subcharts {
		section, _ := vals[sub.Meta.Name].(map[string]interface{})
		if err := ValidateValues(sub, section); err != nil {
			msgs = append(msgs, err.Error())
		}
	}
	if len(msgs) > 0 {
		sort.Strings(msgs)
		return fmt.Errorf("values don't meet the specifications of the schema(s) in the following chart(s):\n%s:\n%s",
			c.Meta.Name, strings.Join(msgs, "\n"))
	}
	return nil
}

// --- engine (pkg/engine) ---

type Options struct {
	ReleaseName string
	Namespace   string
	KubeVersion string // "v1.30.0"
}

type renderable struct {
	name   string // "<chart>/templates/x.yaml" or "<parent>/charts/<sub>/templates/x.yaml"
	source string
	vals   map[string]interface{} // the top-level object for this template
}

func parseKubeVersion(v string) (KubeVersion, error) {
	s := strings.TrimPrefix(v, "v")
	parts := strings.SplitN(s, ".", 3)
	if len(parts) < 2 {
		return KubeVersion{}, fmt.Errorf("bad kube version %q", v)
	}
	for _, p := range parts[:2] {
		if _, err := strconv.Atoi(p); err != nil {
			return KubeVersion{}, fmt.Errorf("bad kube version %q", v)
		}
	}
	return KubeVersion{Version: "v" + s, Major: parts[0], Minor: parts[1]}, nil
}

func collect(c *Chart, prefix string, vals map[string]interface{}, top map[string]interface{},
	out *[]renderable) {
	base := map[string]interface{}{}
	for k, v := range top {
		base[k] = v
	}
	base["Values"] = vals
	base["Chart"] = c.Meta
	base["Files"] = c.Files
	for p, src := range c.Templates {
		name := path.Join(prefix, p)
		tv := map[string]interface{}{}
		for k, v := range base {
			tv[k] = v
		}
		tv["Template"] = map[string]interface{}{"Name": name, "BasePath": path.Join(prefix, "templates")}
		*out = append(*out, renderable{name: name, source: src, vals: tv})
	}
	for _, sub := range c.Subcharts {
		sv, _ := vals[sub.Meta.Name].(map[string]interface{})
		collect(sub, path.Join(prefix, "charts", sub.Meta.Name), sv, top, out)
	}
}

// Manifest is one rendered template file.
type Manifest struct {
	Name    string
	Content string
}

// Render renders every non-partial template of c (and its subcharts) with the coalesced values.
func Render(c *Chart, vals map[string]interface{}, opt Options) ([]Manifest, error) {
	kv, err := parseKubeVersion(opt.KubeVersion)
	if err != nil {
		return nil, err
	}
	top := map[string]interface{}{
		"Release": map[string]interface{}{
			"Name": opt.ReleaseName, "Namespace": opt.Namespace, "Revision": 1,
			"IsInstall": true, "IsUpgrade": false, "Service": "Helm",
		},
		"Capabilities": Capabilities{KubeVersion: kv, APIVersions: VersionSet{"v1", "apps/v1", "policy/v1"}},
	}
	var items []renderable
	collect(c, c.Meta.Name, vals, top, &items)
	sort.Slice(items, func(i, j int) bool { return items[i].name < items[j].name })

	t := template.New("gotpl").Option("missingkey=zero")
	includedNames := map[string]int{}
	funcs := sprig.TxtFuncMap()
	delete(funcs, "env")
	delete(funcs, "expandenv")
	funcs["toYaml"] = func(v interface{}) string {
		data, err := sigsMarshal(v)
		if err != nil {
			return ""
		}
		return strings.TrimSuffix(string(data), "\n")
	}
	funcs["fromYaml"] = func(s string) map[string]interface{} {
		m := map[string]interface{}{}
		if err := sigsUnmarshal([]byte(s), &m); err != nil {
			m["Error"] = err.Error()
		}
		return m
	}
	funcs["fromYamlArray"] = func(s string) []interface{} {
		a := []interface{}{}
		if err := sigsUnmarshal([]byte(s), &a); err != nil {
			a = []interface{}{err.Error()}
		}
		return a
	}
	funcs["toJson"] = func(v interface{}) string {
		data, err := json.Marshal(v)
		if err != nil {
			return ""
		}
		return string(data)
	}
	funcs["fromJson"] = func(s string) map[string]interface{} {
		m := map[string]interface{}{}
		if err := json.Unmarshal([]byte(s), &m); err != nil {
			m["Error"] = err.Error()
		}
		return m
	}
	funcs["fromJsonArray"] = func(s string) []interface{} {
		a := []interface{}{}
		if err := json.Unmarshal([]byte(s), &a); err != nil {
			a = []interface{}{err.Error()}
		}
		return a
	}
	funcs["required"] = func(warn string, val interface{}) (interface{}, error) {
		if val == nil {
			return val, errors.New(warn)
		}
		if s, ok := val.(string); ok && s == "" {
			return val, errors.New(warn)
		}
		return val, nil
	}
	funcs["lookup"] = func(string, string, string, string) (map[string]interface{}, error) {
		return map[string]interface{}{}, nil
	}
	funcs["include"] = func(name string, data interface{}) (string, error) {
		if includedNames[name] > 1000 {
			return "", fmt.Errorf("rendering template has a nested reference name: %s", name)
		}
		includedNames[name]++
		defer func() { includedNames[name]-- }()
		var buf strings.Builder
		err := t.ExecuteTemplate(&buf, name, data)
		return buf.String(), err
	}
	funcs["tpl"] = func(text string, vals map[string]interface{}) (string, error) {
		clone, err := t.Clone()
		if err != nil {
			return "", err
		}
		tmpl, _ := vals["Template"].(map[string]interface{})
		name := fmt.Sprint(tmpl["Name"])
		if _, err := clone.New(name).Parse(text); err != nil {
			return "", fmt.Errorf("cannot parse template %q: %w", text, err)
		}
		var buf strings.Builder
		if err := clone.ExecuteTemplate(&buf, name, vals); err != nil {
			return "", fmt.Errorf("error during tpl function execution for %q: %w", text, err)
		}
		return strings.ReplaceAll(buf.String(), "<no value>", ""), nil
	}
	t.Funcs(funcs)
	for _, it := range items {
		if _, err := t.New(it.name).Parse(it.source); err != nil {
			return nil, fmt.Errorf("parse error in %s: %w", it.name, err)
		}
	}
	var out []Manifest
	for _, it := range items {
		if strings.HasPrefix(path.Base(it.name), "_") || path.Base(it.name) == "NOTES.txt" {
			continue
		}
		var buf bytes.Buffer
		if err := t.ExecuteTemplate(&buf, it.name, it.vals); err != nil {
			return nil, fmt.Errorf("render error in %s: %w", it.name, err)
		}
		content := strings.ReplaceAll(buf.String(), "<no value>", "")
		if strings.TrimSpace(content) == "" {
			continue
		}
		out = append(out, Manifest{Name: it.name, Content: content})
	}
	return out, nil
}

// Stream formats manifests like `helm template`.
func Stream(ms []Manifest) string {
	var b strings.Builder
	for _, m := range ms {
		fmt.Fprintf(&b, "---\n# Source: %s\n%s", m.Name, strings.TrimLeft(m.Content, "\n"))
		if !strings.HasSuffix(m.Content, "\n") {
			b.WriteString("\n")
		}
	}
	return b.String()
}
