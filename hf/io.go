package hf

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"trellis/internal/bounded"
	"trellis/model"
	"trellis/safetensors"
)

// File names inside a Hugging Face model directory.
const (
	WeightsFile = "model.safetensors"
	ConfigFile  = "config.json"
)

// Model is a GPT-2's or a Llama's (dense or MoE) configuration and weights, the flat vector in
// Config.Layout() order, with the safetensors metadata (Trellis records
// its tokenizer there as "trellis.tokenizer").
type Model struct {
	Config model.Config
	W      []float32
	Meta   map[string]string
}

// MetaTokenizer is the metadata key of the tokenizer a Trellis export was
// trained with.
const MetaTokenizer = "trellis.tokenizer"

// Write saves m as a Hugging Face model directory — GPT2LMHeadModel's,
// LlamaForCausalLM's, or an MoE Llama's Qwen2MoeForCausalLM (qwen2moe.go;
// the MoE models it does not compute exactly are refused) —
// dir/model.safetensors (tensors of dtype, F32, BF16 or F16) and
// dir/config.json. Each file is written to a temporary name and renamed,
// so an interrupted export leaves no half-written file under the final
// names.
func Write(dir string, m Model, dtype safetensors.DType) error {
	cfg, w := m.Config, m.W
	if err := cfg.Validate(); err != nil {
		return err
	}
	lay := cfg.Layout()
	if len(w) != lay.Size {
		return fmt.Errorf("hf: %d weights, the model has %d", len(w), lay.Size)
	}
	torchName := map[safetensors.DType]string{safetensors.F32: "float32", safetensors.BF16: "bfloat16", safetensors.F16: "float16"}[dtype]
	if torchName == "" {
		return fmt.Errorf("hf: --dtype %s: want F32, BF16 or F16", dtype)
	}
	var hcfg any = ConfigOf(cfg, torchName)
	switch {
	case cfg.Experts > 0:
		q, err := Qwen2MoeConfigOf(cfg, torchName)
		if err != nil {
			return err
		}
		hcfg = q
	case cfg.IsLlama():
		hcfg = LlamaConfigOf(cfg, torchName)
	}
	var ts []safetensors.Tensor
	for _, x := range exportTensors(cfg, w) {
		st, err := safetensors.FromFloat32As(x.name, dtype, x.shape, x.v)
		if err != nil {
			return fmt.Errorf("hf: %s: %w", x.name, err)
		}
		ts = append(ts, st)
	}
	js, err := json.MarshalIndent(hcfg, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("hf: %w", err)
	}
	meta := map[string]string{"format": "pt", "producer": "trellis"}
	for k, v := range m.Meta {
		meta[k] = v
	}
	if err := safetensors.WriteFile(filepath.Join(dir, WeightsFile), ts, meta); err != nil {
		return err
	}
	return writeFileAtomic(filepath.Join(dir, ConfigFile), append(js, '\n'))
}

// Read loads a Hugging Face GPT-2, Llama or Qwen2-MoE model: path is the model
// directory or its model.safetensors, with config.json beside it. It
// returns the model configuration and the weights as a flat vector in
// cfg.Layout() order. Every tensor the layout needs must be present with
// its shape; a separate lm_head.weight of a tied model must equal its
// token embedding; any other tensor is an error naming it (the buffers
// older exports carry — GPT-2's attention masks "….attn.bias" and
// "….attn.masked_bias", a Llama's "….rotary_emb.inv_freq" — are skipped).
func Read(path string) (Model, error) {
	cfg, weights, err := ReadConfig(path)
	if err != nil {
		return Model{}, err
	}
	f, err := safetensors.ReadFile(weights)
	if err != nil {
		return Model{Config: cfg}, err
	}
	w, err := unpack(f, cfg)
	return Model{Config: cfg, W: w, Meta: f.Metadata()}, err
}

// ReadConfig reads only config.json of the model at path (a directory or
// its model.safetensors) and returns the model configuration and the
// weights file's path.
func ReadConfig(path string) (model.Config, string, error) {
	dir, weights := path, filepath.Join(path, WeightsFile)
	if st, err := os.Stat(path); err == nil && !st.IsDir() {
		dir, weights = filepath.Dir(path), path
	}
	cb, err := bounded.ReadFile(filepath.Join(dir, ConfigFile), bounded.Config, "Hugging Face config.json")
	if err != nil {
		return model.Config{}, "", fmt.Errorf("hf: %w (a Hugging Face model needs its config.json beside %s)", err, filepath.Base(weights))
	}
	cfg, err := ParseModelConfig(cb)
	if err != nil {
		return cfg, "", fmt.Errorf("hf: %s: %w", dir, err)
	}
	return cfg, weights, nil
}

// IsModelDir reports whether path is a Hugging Face model directory (or
// its weights file): config.json and model.safetensors side by side.
func IsModelDir(path string) bool {
	dir := path
	if st, err := os.Stat(path); err == nil && !st.IsDir() {
		dir = filepath.Dir(path)
	}
	for _, f := range []string{ConfigFile, WeightsFile} {
		if st, err := os.Stat(filepath.Join(dir, f)); err != nil || !st.Mode().IsRegular() {
			return false
		}
	}
	return true
}

// unpack fills the flat vector from f's tensors.
func unpack(f *safetensors.File, cfg model.Config) ([]float32, error) {
	names := map[string]bool{}
	for _, n := range f.Names() {
		names[n] = true
	}
	find := func(trellis string) (string, bool) {
		cands := []string{Name(trellis), bare(trellis)}
		if cfg.IsLlama() {
			cands = []string{llamaName(trellis), trellis}
		}
		for _, n := range cands {
			if names[n] {
				return n, true
			}
		}
		return "", false
	}
	lay := cfg.Layout()
	w := make([]float32, lay.Size)
	var errs []error
	for _, u := range lay.Units {
		for _, t := range u.Tensors {
			n, ok := find(t.Name)
			if !ok && cfg.Experts > 0 && t.Expert { // E matrices in Hugging Face's checkpoints
				errs = append(errs, readExperts(f, names, t, w[t.Offset:t.Offset+t.Size])...)
				continue
			}
			if !ok {
				errs = append(errs, fmt.Errorf("hf: %s: missing tensor %s", f.Name(), hfName(cfg, t.Name)))
				continue
			}
			delete(names, n)
			if err := readTensor(f, n, t, w[t.Offset:t.Offset+t.Size]); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if cfg.Tied() {
		if err := checkHead(f, names, lay, w); err != nil {
			return nil, err
		}
	}
	for n := range names {
		if cfg.IsLlama() {
			if ok, err := qwenUnused(f, n, cfg); ok || err != nil {
				if err != nil {
					return nil, err
				}
				continue
			}
		}
		if !isMaskBuffer(n) && !isLlamaBuffer(n) {
			return nil, fmt.Errorf("hf: %s: tensor %s is not part of a %s that Trellis computes", f.Name(), n, archTitle(cfg))
		}
	}
	return w, nil
}

// archTitle names cfg's architecture in messages.
func archTitle(cfg model.Config) string {
	if cfg.Experts > 0 {
		return "mixture-of-experts Llama (Qwen2MoeForCausalLM)"
	}
	if cfg.IsLlama() {
		return "Llama"
	}
	return "GPT-2"
}

// hfName is the Hugging Face name of a Trellis tensor of cfg's architecture.
func hfName(cfg model.Config, trellis string) string {
	if cfg.IsLlama() {
		return llamaName(trellis)
	}
	return Name(trellis)
}

func readTensor(f *safetensors.File, name string, t model.Tensor, dst []float32) error {
	info, err := f.Info(name)
	if err != nil {
		return err
	}
	want := HFShape(t)
	if !slices.Equal(info.Shape, want) {
		return fmt.Errorf("hf: %s: tensor %s has shape %v, config.json implies %v", f.Name(), name, info.Shape, want)
	}
	v, err := f.Float32(name)
	if err != nil {
		return err
	}
	fromHF(t, v, dst)
	return nil
}

// checkHead accepts an explicit lm_head.weight of a tied model only when
// it equals the token embedding (unit 0's first tensor).
func checkHead(f *safetensors.File, names map[string]bool, lay model.Layout, w []float32) error {
	if !names["lm_head.weight"] {
		return nil
	}
	delete(names, "lm_head.weight")
	wte := lay.Units[0].Tensors[0]
	head, err := f.Float32("lm_head.weight")
	if err != nil {
		return err
	}
	emb := w[wte.Offset : wte.Offset+wte.Size]
	if len(head) != len(emb) {
		return fmt.Errorf("hf: %s: lm_head.weight has %d elements, %s %d", f.Name(), len(head), wte.Name, len(emb))
	}
	for i := range head {
		if head[i] != emb[i] {
			return fmt.Errorf("hf: %s: lm_head.weight differs from %s at element %d: Trellis ties the LM head to the embedding", f.Name(), wte.Name, i)
		}
	}
	return nil
}

func isMaskBuffer(n string) bool {
	return strings.HasSuffix(n, ".attn.bias") || strings.HasSuffix(n, ".attn.masked_bias")
}

// writeFileAtomic writes b to path through a temporary file and a rename.
func writeFileAtomic(path string, b []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return fmt.Errorf("hf: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("hf: %w", err)
	}
	return nil
}
