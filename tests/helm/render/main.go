// helmtest renders the sidelock Helm chart without helm or a cluster and checks the result.
//
//	helmtest render [-chart DIR] [-f values.yaml]... [-kube-version v1.30.0] [-name R] [-namespace NS]
//	    validates the values against values.schema.json and prints the manifests like `helm template`.
//	helmtest test -repo ROOT [-sidelock BIN] [-update]
//	    runs every check (see check.go); -update (or UPDATE_GOLDEN=1) rewrites tests/helm/golden/.
package main

import (
	"flag"
	"fmt"
	"os"
	"strings"
)

type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(s string) error { *l = append(*l, s); return nil }

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: helmtest render|test [flags]")
		os.Exit(2)
	}
	switch os.Args[1] {
	case "render":
		fs := flag.NewFlagSet("render", flag.ExitOnError)
		chartDir := fs.String("chart", "helm/sidelock", "chart directory")
		kube := fs.String("kube-version", "v1.30.0", "Kubernetes version for .Capabilities")
		name := fs.String("name", "demo", "release name")
		ns := fs.String("namespace", "default", "release namespace")
		var files listFlag
		fs.Var(&files, "f", "values file (repeatable)")
		_ = fs.Parse(os.Args[2:])
		out, err := renderFiles(*chartDir, files, Options{ReleaseName: *name, Namespace: *ns, KubeVersion: *kube})
		if err != nil {
			fmt.Fprintln(os.Stderr, "Error:", err)
			os.Exit(1)
		}
		fmt.Print(Stream(out))
	case "test":
		fs := flag.NewFlagSet("test", flag.ExitOnError)
		repo := fs.String("repo", ".", "repository root")
		bin := fs.String("sidelock", "", "sidelock binary for --check-config (skipped if absent)")
		update := fs.Bool("update", os.Getenv("UPDATE_GOLDEN") == "1", "rewrite golden files")
		_ = fs.Parse(os.Args[2:])
		os.Exit(runTests(*repo, *bin, *update))
	default:
		fmt.Fprintln(os.Stderr, "unknown command", os.Args[1])
		os.Exit(2)
	}
}

// renderFiles does what `helm template -f ... CHART` does: merge the files, coalesce with the chart's
// defaults, validate against the schema(s), render.
func renderFiles(chartDir string, files []string, opt Options) ([]Manifest, error) {
	c, err := LoadChart(chartDir)
	if err != nil {
		return nil, err
	}
	user := map[string]interface{}{}
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		v, err := ReadValues(raw)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		user = MergeMaps(user, v)
	}
	vals := CoalesceValues(c, user)
	if err := ValidateValues(c, vals); err != nil {
		return nil, err
	}
	return Render(c, vals, opt)
}
