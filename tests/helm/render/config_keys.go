// The values schema against the config keys the sidecar really accepts: the known-key lists of
// src/config/config.cc (Section::rejectUnknown), so a key added to the code but not to the schema (which
// rejects unknown keys) fails here, and so does a schema key the sidecar would refuse at startup.
package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

// Keys config.cc lists as known only to refuse them with a specific message (credentials never go into
// the config file): the schema must not allow them.
var refusedConfigKeys = map[string]bool{"backend.username": true, "backend.password": true}

var (
	sectionDeclRe = regexp.MustCompile(`Section\s+(\w+)\s*\(([^;]*)\);`)
	// `Section e(list[i], at)`: an item of a list (config `elections`), whose keys are the schema's
	// `items`, not properties of the list: its known keys are not config paths.
	itemDeclRe = regexp.MustCompile(`^\w+\[\w+\],`)
	pathArgRe  = regexp.MustCompile(`,\s*(?:"([^"]*)"|(\w+)\.path\("([^"]*)"\))\s*$`)
	rejectRe   = regexp.MustCompile(`(\w+)\.rejectUnknown\(\s*\{([^}]*)\}`)
	quotedRe   = regexp.MustCompile(`"([^"]*)"`)
)

// The path of a list item's Section (no config path of its own).
const listItem = "[]"

// configCodeKeys returns every "section.key" path config.cc accepts, sections included ("backend.tls").
// Sections are followed through their declarations: `Section t(s.child("tls"), s.path("tls"))` makes t
// "backend.tls" when s is "backend"; a Section parameter is named after its path ("backend"), "root"
// being the top.
func configCodeKeys(src string) (map[string]bool, error) {
	type event struct {
		pos  int
		decl []string // sectionDeclRe match
		rej  []string // rejectRe match
	}
	var events []event
	for _, m := range sectionDeclRe.FindAllStringSubmatchIndex(src, -1) {
		events = append(events, event{pos: m[0], decl: submatches(src, m)})
	}
	for _, m := range rejectRe.FindAllStringSubmatchIndex(src, -1) {
		events = append(events, event{pos: m[0], rej: submatches(src, m)})
	}
	sort.Slice(events, func(i, j int) bool { return events[i].pos < events[j].pos })
	paths := map[string]string{}
	pathOf := func(v string) string {
		if p, ok := paths[v]; ok {
			return p
		}
		if v == "root" {
			return ""
		}
		return v
	}
	join := func(a, b string) string {
		if a == "" {
			return b
		}
		return a + "." + b
	}
	keys := map[string]bool{}
	for _, e := range events {
		if e.decl != nil {
			m := pathArgRe.FindStringSubmatch(e.decl[2])
			if m == nil && itemDeclRe.MatchString(e.decl[2]) {
				paths[e.decl[1]] = listItem
				continue
			}
			if m == nil {
				return nil, fmt.Errorf("cannot read the path of `Section %s(%s)`", e.decl[1], e.decl[2])
			}
			if m[2] == "" {
				paths[e.decl[1]] = m[1]
			} else if pathOf(m[2]) == listItem {
				// A section inside a list item (`elections[i].health`): an item's keys, too.
				paths[e.decl[1]] = listItem
			} else {
				paths[e.decl[1]] = join(pathOf(m[2]), m[3])
			}
			continue
		}
		base := pathOf(e.rej[1])
		if base == listItem {
			continue
		}
		for _, q := range quotedRe.FindAllStringSubmatch(e.rej[2], -1) {
			if k := join(base, q[1]); !refusedConfigKeys[k] {
				keys[k] = true
			}
		}
	}
	return keys, nil
}

func submatches(s string, idx []int) []string {
	out := make([]string, len(idx)/2)
	for i := range out {
		if idx[2*i] >= 0 {
			out[i] = s[idx[2*i]:idx[2*i+1]]
		}
	}
	return out
}

// schemaConfigKeys flattens the schema's config properties into "section.key" paths, sections included.
func schemaConfigKeys(schema obj) map[string]bool {
	keys := map[string]bool{}
	var walk func(prefix string, node interface{})
	walk = func(prefix string, node interface{}) {
		props, _ := get(node, "properties").(obj)
		for k, v := range props {
			p := strings.TrimPrefix(prefix+"."+k, ".")
			keys[p] = true
			walk(p, v)
		}
	}
	walk("", get(schema, "properties", "config"))
	return keys
}

func (s *suite) checkSchemaMatchesConfigCode(schema obj) {
	const name = "values.schema.json config keys match src/config/config.cc"
	raw, err := os.ReadFile(filepath.Join(s.repo, "src/config/config.cc"))
	if err != nil {
		s.check(name, []string{err.Error()})
		return
	}
	code, err := configCodeKeys(string(raw))
	var errs []string
	if err != nil {
		errs = append(errs, err.Error())
	}
	// A parser that finds (almost) nothing would pass vacuously: the code has well over 60 keys in
	// the 7 top-level sections.
	for _, section := range []string{"listen", "backend", "locks", "shutdown", "log", "auth", "dapr"} {
		if !code[section] {
			errs = append(errs, "no known-key list found for section "+section+" in config.cc (the extraction in tests/helm/render/config_keys.go needs updating)")
		}
	}
	if len(code) < 60 {
		errs = append(errs, fmt.Sprintf("only %d keys extracted from config.cc", len(code)))
	}
	inSchema := schemaConfigKeys(schema)
	for k := range code {
		if !inSchema[k] {
			errs = append(errs, "the sidecar accepts config."+k+" but values.schema.json rejects it")
		}
	}
	for k := range inSchema {
		if !code[k] {
			errs = append(errs, "values.schema.json allows config."+k+", which the sidecar refuses as unknown")
		}
	}
	sort.Strings(errs)
	s.check(name, errs)
}
