package layers

import (
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// layer gives every package a level; a package may import only packages of a
// strictly lower level (and its own subpackages' helpers listed as lower).
// A new package must be added here, which is the point: its place in the
// architecture is decided, not discovered.
var layer = map[string]int{
	"tensor":            0,
	"mesh":              0,
	"config":            0,
	"rng":               0,
	"internal/layers":   0,
	"arch":              1, // the architectures' declarations: pure (TestPlanIsPure)
	"precision":         1, // the mixed-precision policy
	"fp8":               1, // fp8 formats, scales, tiles and amax histories (emulated exactly)
	"plan":              2, // pure: see TestPlanIsPure
	"device":            1,
	"safetensors":       1,
	"comm":              1,
	"comm/reducegen":    1, // code generator of comm's sum kernels (build-time only)
	"ops":               2,
	"ops/asmgen":        2, // code generator (build-time only)
	"ops/internal/coef": 0, // GELU's, tanh's and exp's constants, shared by the kernel generators
	"comm/local":        2,
	"comm/tcp":          2,
	"comm/mpi":          2, // build tag mpi: cgo against Open MPI
	"comm/shm":          2, // ranks of one host over shared memory (Linux)
	"comm/hier":         2, // groups across hosts: intra-host and inter-host phases over two Groups
	"data":              2,
	"checkpoint":        2,
	"hf":                4, // Hugging Face GPT-2 layout: model + safetensors
	"profile":           5, // measures this machine for the planner (ops, commbench, plan)
	"model":             3,
	"optim":             3,
	"comm/commtest":     3,
	"launch":            3,
	"comm/world":        3, // backends opened by name (cmd never names a transport)
	"comm/commbench":    4, // starts tcp workers through launch
	"parallel":          4, // the Strategy interface
	"parallel/flat":     4,
	"parallel/dptest":   5, // the test harness of parallel/zero
	"parallel/zero":     5, // the state strategy: dp and ZeRO 0-3 over a reduction group

	"parallel/tp":       5,
	"parallel/pp":       5,
	"trace":             2, // Chrome trace-event spans (bounded reads, outfile writes)
	"train":             7,
	"cmd/trellis":       8,
	"internal/checked":  0, // overflow-checked size arithmetic
	"internal/sysmem":   0, // the machine's physical memory
	"internal/proctime": 0, // the process's CPU time (benchmarks)
	"internal/bounded":  0, // size-bounded reads of outside files
	"internal/avxrow":   0, // the vector loops the kernel generators share (build-time only)
	"internal/outfile":  1, // outputs that refuse to replace inputs, devices, FIFOs
	"internal/netns":    0, // network namespaces standing for hosts (tests, benchmarks)
	"metrics":           0, // the --metrics line schema (train writes it, viz reads it)
	"viz":               1, // pages and SVG from metrics, traces and plans: no runtime package
	"dashboard":         3, // serves viz pages; never train (it gets metrics through train.Observer)
}

// planned are packages given their layer before they exist. Every other
// entry of layer must exist.
var planned = map[string]bool{}

const module = "trellis"

// touchSources reads the module's directories and Go files so that the test
// cache (which tracks files a test opens, not files go list reads) reruns
// this test whenever an import could have changed.
func touchSources(t *testing.T) {
	t.Helper()
	err := filepath.WalkDir("../..", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && strings.HasPrefix(d.Name(), ".") && p != "../.." {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(p, ".go") {
			_, err = os.ReadFile(p)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

func goList(t *testing.T, args ...string) map[string][]string {
	t.Helper()
	touchSources(t)
	cmd := exec.Command("go", append([]string{"list", "-f", "{{.ImportPath}}:{{join .Imports \" \"}}:{{join .Deps \" \"}}"}, args...)...)
	cmd.Dir = "../.."
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	res := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		parts := strings.SplitN(line, ":", 3)
		res[parts[0]] = append(strings.Fields(parts[1]), "|")
		res[parts[0]] = append(res[parts[0]], strings.Fields(parts[2])...)
	}
	return res
}

func rel(p string) (string, bool) {
	if p == module {
		return "", true
	}
	if strings.HasPrefix(p, module+"/") {
		return strings.TrimPrefix(p, module+"/"), true
	}
	return "", false
}

func level(p string) (int, bool) {
	for q := p; q != ""; {
		if l, ok := layer[q]; ok {
			return l, true
		}
		i := strings.LastIndex(q, "/")
		if i < 0 {
			break
		}
		q = q[:i]
	}
	return 0, false
}

func TestImportDirection(t *testing.T) {
	pkgs := goList(t, "./...")
	names := make([]string, 0, len(pkgs))
	for p := range pkgs {
		names = append(names, p)
	}
	sort.Strings(names)
	for _, p := range names {
		rp, ok := rel(p)
		if !ok {
			continue
		}
		lp, ok := level(rp)
		if !ok {
			t.Errorf("package %s has no layer: add it to internal/layers", rp)
			continue
		}
		for _, imp := range pkgs[p] {
			if imp == "|" {
				break // direct imports end here
			}
			ri, ok := rel(imp)
			if !ok {
				continue
			}
			li, ok := level(ri)
			if !ok {
				continue // reported on its own
			}
			if li >= lp && !strings.HasPrefix(ri, rp+"/") {
				t.Errorf("%s (layer %d) imports %s (layer %d): imports must point to lower layers", rp, lp, ri, li)
			}
		}
	}
}

// Every package the table lists exists (or is planned), so the table
// describes this repository.
func TestLayersExist(t *testing.T) {
	pkgs := goList(t, "./...")
	for p := range layer {
		if _, ok := pkgs[module+"/"+p]; !ok && !planned[p] {
			t.Errorf("internal/layers lists %s, which does not exist", p)
		}
	}
}

// TestPlanIsPure holds the architecture's rule that the planner depends on no
// runtime package: its whole dependency closure is outside the module, but
// for the architectures' declarations it shares with the engine (arch,
// itself pure: overflow-checked arithmetic its only import), from which
// it computes the engine's activation memory.
func TestPlanIsPure(t *testing.T) {
	pkgs := goList(t, "./plan/...")
	for p, list := range pkgs {
		deps := list
		for i, d := range list {
			if d == "|" {
				deps = list[i+1:]
				break
			}
		}
		for _, d := range deps {
			if rd, ok := rel(d); ok && !strings.HasPrefix(rd, "plan") && rd != "arch" && rd != "internal/checked" {
				t.Errorf("%s depends on %s; the planner must not depend on runtime packages", p, d)
			}
		}
	}
}
