// Package golden reads the golden corpus, testdata/<case>/ (testdata/README.md): each case's
// input (case.yaml), the request Metacontroller sends for it (request.json), the hook's answer
// (response.json) and the flags the hook serves it with (hook.flags). The sync package writes the
// corpus (make update); its tests, the server's and the end-to-end tests read it here.
package golden

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"sigs.k8s.io/yaml"
)

// The files of a case's directory.
const (
	InputFile    = "case.yaml"
	RequestFile  = "request.json"
	ResponseFile = "response.json"
	// FlagsFile holds the case's hook flags on top of testdata/dev.flags, for whoever serves its
	// request (make run, the replay and end-to-end tests); absent when it has none.
	FlagsFile = "hook.flags"
)

// Case is one directory of the corpus with a request.
type Case struct {
	Name string
	Dir  string
	// Request is request.json as written: indented.
	Request []byte
	// Response is response.json as written, nil while `make update` has not written it.
	Response []byte
	// Flags are hook.flags' flags, nil without.
	Flags []string
}

// Customize: the request is a customize hook's (a case named customize-*).
func (c Case) Customize() bool { return strings.HasPrefix(c.Name, "customize-") }

// Cases reads every case under dir (testdata, or testdata/prepull): each <dir>/<case>/request.json,
// in name order.
func Cases(dir string) ([]Case, error) {
	requests, err := filepath.Glob(filepath.Join(dir, "*", RequestFile))
	if err != nil {
		return nil, err
	}
	if len(requests) == 0 {
		return nil, fmt.Errorf("no golden cases (%s)", filepath.Join(dir, "*", RequestFile))
	}
	var cases []Case
	for _, path := range requests {
		c := Case{Name: filepath.Base(filepath.Dir(path)), Dir: filepath.Dir(path)}
		if c.Request, err = os.ReadFile(path); err != nil {
			return nil, err
		}
		c.Response, err = os.ReadFile(filepath.Join(c.Dir, ResponseFile))
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
		switch flags, err := os.ReadFile(filepath.Join(c.Dir, FlagsFile)); {
		case err == nil:
			c.Flags = strings.Fields(string(flags))
		case !errors.Is(err, fs.ErrNotExist):
			return nil, err
		}
		cases = append(cases, c)
	}
	return cases, nil
}

// Inputs are the directories of the cases under dir written by hand: those with a case.yaml
// (the others are derived from another case's request).
func Inputs(dir string) ([]string, error) {
	inputs, err := filepath.Glob(filepath.Join(dir, "*", InputFile))
	if err != nil {
		return nil, err
	}
	if len(inputs) == 0 {
		return nil, fmt.Errorf("no golden cases (%s)", filepath.Join(dir, "*", InputFile))
	}
	dirs := make([]string, 0, len(inputs))
	for _, input := range inputs {
		dirs = append(dirs, filepath.Dir(input))
	}
	return dirs, nil
}

// ReadInput decodes a case's case.yaml into input, strictly: a key input does not declare is an
// error.
func ReadInput(dir string, input any) error {
	path := filepath.Join(dir, InputFile)
	content, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := yaml.UnmarshalStrict(content, input); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// ReadObject decodes a YAML file holding one object.
func ReadObject(path string) (map[string]any, error) {
	content, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var obj map[string]any
	if err := yaml.Unmarshal(content, &obj); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return obj, nil
}

// Controller is the CompositeController the corpus' requests carry: root's
// manifests/compositecontroller.yaml, with a component of manifests/components applied (only its
// patches that add to /spec/childResources, the one kind the components make).
func Controller(root, component string) (map[string]any, error) {
	controller, err := ReadObject(filepath.Join(root, "manifests", "compositecontroller.yaml"))
	if err != nil || component == "" {
		return controller, err
	}
	var kustomization struct {
		Patches []struct {
			Patch string `json:"patch"`
		} `json:"patches"`
	}
	path := filepath.Join(root, "manifests", "components", component, "kustomization.yaml")
	content, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if err := yaml.Unmarshal(content, &kustomization); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	spec, _ := controller["spec"].(map[string]any)
	for _, p := range kustomization.Patches {
		var ops []struct {
			Op    string         `json:"op"`
			Path  string         `json:"path"`
			Value map[string]any `json:"value"`
		}
		if err := yaml.Unmarshal([]byte(p.Patch), &ops); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		for _, op := range ops {
			if op.Op+" "+op.Path != "add /spec/childResources/-" {
				return nil, fmt.Errorf("%s: %s %s is a patch the golden cases cannot apply", path, op.Op, op.Path)
			}
			resources, _ := spec["childResources"].([]any)
			spec["childResources"] = append(resources, op.Value)
		}
	}
	return controller, nil
}
