package hf

import (
	"os/exec"
	"strings"
	"testing"
)

// scripts/hf_gpt2.py prints a summary of the logits (a few lines per
// position), not the 30 KB list of every float, unless --json asks. Its
// summarize needs no torch: the test runs it alone.
func TestHFScriptSummarizes(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("no python3")
	}
	prog := `
import ast, sys
src = open("../scripts/hf_gpt2.py").read()
fn = [n for n in ast.parse(src).body if isinstance(n, ast.FunctionDef) and n.name == "summarize"]
if not fn:
    sys.exit("no summarize in hf_gpt2.py")
ns = {}
exec(compile(ast.Module(body=fn, type_ignores=[]), "hf_gpt2.py", "exec"), ns)
rows = [[((i * 7919 + j * 104729) % 1000) / 100.0 for j in range(50257)] for i in range(4)]
print(ns["summarize"](rows))
`
	out, err := exec.Command(py, "-c", prog).CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if len(out) > 2048 || !strings.Contains(string(out), "4 positions x 50257 logits") || strings.Count(string(out), "\n") != 5 {
		t.Errorf("summary of 4 × 50257 logits is %d bytes:\n%.500s", len(out), out)
	}
}
