#!/usr/bin/python3
"""An independent Llama in PyTorch, written from Hugging Face's definition
(transformers' modeling_llama.py: LlamaRMSNorm, LlamaRotaryEmbedding with
rotate_half, repeat_kv for grouped-query attention, LlamaMLP's
down(silu(gate(x)) * up(x)), LlamaForCausalLM's untied lm_head), to hold
Trellis's Llama to.

  fixture   builds hf/testdata/llama_hf/ (a LlamaForCausalLM directory:
            config.json and model.safetensors in Hugging Face's names, fp32
            weights) and hf/testdata/llama_fixture.safetensors (the batch,
            the logits, the mean cross-entropy and every parameter's
            gradient under its Hugging Face name, "grad." + name), all
            computed in float64 from the fp32 weights. package hf.s
            TestLlamaMatchesPyTorch reads both (the import path, hf.Read)
            and requires loss, logits and gradients within 1e-5.

  logits --model DIR --tokens 1,2,3 --out FILE
            reads a Hugging Face Llama directory (what `trellis export`
            writes), runs it in float64 on the token ids and writes their
            (T, V) logits to FILE, with the SHA-256 of the model.safetensors
            they came from in its metadata (hf's TestLlamaExportMatchesPyTorch
            holds Trellis's logits to them within 1e-5).

Differences from the Hugging Face code, all of precision: it computes in
float64 where transformers upcasts 16-bit activations to float32 (RMSNorm,
softmax); the RoPE table is Hugging Face's, computed in float32 and then
cast (as LlamaRotaryEmbedding casts it to the activations' dtype).

Run with Debian's python3-torch (1.13): /usr/bin/python3 scripts/torch_llama.py fixture
The safetensors format is read and written by hand (8-byte little-endian
header length, JSON header, raw little-endian data).
"""
import argparse
import hashlib
import json
import math
import os
import struct

import torch
import torch.nn.functional as F

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# ---------------------------------------------------------------- safetensors

DT = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16, "I32": torch.int32, "F64": torch.float64}


def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        lo, hi = info["data_offsets"]
        raw = bytearray(data[lo:hi])
        t = torch.frombuffer(raw, dtype=DT[info["dtype"]]) if hi > lo else torch.zeros(0, dtype=DT[info["dtype"]])
        out[name] = t.reshape(info["shape"]).clone()
    return out


def write_safetensors(path, tensors, metadata=None):
    header = {"__metadata__": metadata or {}}
    data = b""
    for name in sorted(tensors):
        t = tensors[name].detach().contiguous()
        if t.dtype in (torch.int32, torch.int64):
            dtype, raw = "I32", t.to(torch.int32).numpy().astype("<i4").tobytes()
        else:
            dtype, raw = "F32", t.to(torch.float32).numpy().astype("<f4").tobytes()
        header[name] = {"dtype": dtype, "shape": list(t.shape), "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    hjson = json.dumps(header, separators=(",", ":")).encode()
    hjson += b" " * (-len(hjson) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hjson)))
        f.write(hjson)
        f.write(data)


# ---------------------------------------------------------------- the model

class Config:
    def __init__(self, d):
        self.hidden = d["hidden_size"]
        self.layers = d["num_hidden_layers"]
        self.heads = d["num_attention_heads"]
        self.kv_heads = d.get("num_key_value_heads", self.heads)
        self.ffn = d["intermediate_size"]
        self.vocab = d["vocab_size"]
        self.eps = d.get("rms_norm_eps", 1e-6)
        self.theta = d.get("rope_theta", 10000.0)
        self.tied = d.get("tie_word_embeddings", False)
        self.head_dim = d.get("head_dim", self.hidden // self.heads)
        assert d.get("hidden_act", "silu") == "silu", d.get("hidden_act")
        assert not d.get("attention_bias", False) and not d.get("mlp_bias", False)
        assert d.get("rope_scaling") is None, "default RoPE only"


def rms_norm(x, w, eps):  # LlamaRMSNorm
    variance = x.pow(2).mean(-1, keepdim=True)
    return w * (x * torch.rsqrt(variance + eps))


def rope_table(cfg, T, dtype):  # LlamaRotaryEmbedding (rope_type "default"), float32, then cast
    dim = cfg.head_dim
    inv_freq = 1.0 / (cfg.theta ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))
    pos = torch.arange(T, dtype=torch.int64)[None, :].float()
    freqs = (inv_freq[None, :, None].float() @ pos[:, None, :]).transpose(1, 2)  # (1, T, dim/2)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos().to(dtype), emb.sin().to(dtype)


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def repeat_kv(h, n_rep):
    b, nkv, s, d = h.shape
    if n_rep == 1:
        return h
    return h[:, :, None, :, :].expand(b, nkv, n_rep, s, d).reshape(b, nkv * n_rep, s, d)


def forward(cfg, P, tokens):
    """Logits (B,T,V) of LlamaForCausalLM for tokens (B,T); P maps Hugging
    Face names to tensors."""
    B, T = tokens.shape
    dt = P["model.embed_tokens.weight"].dtype
    HS, NH, KV = cfg.head_dim, cfg.heads, cfg.kv_heads
    cos, sin = rope_table(cfg, T, dt)
    cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    mask = torch.ones(T, T, dtype=torch.bool).tril()
    x = P["model.embed_tokens.weight"][tokens]
    for l in range(cfg.layers):
        p = f"model.layers.{l}."
        h = rms_norm(x, P[p + "input_layernorm.weight"], cfg.eps)
        q = F.linear(h, P[p + "self_attn.q_proj.weight"]).view(B, T, NH, HS).transpose(1, 2)
        k = F.linear(h, P[p + "self_attn.k_proj.weight"]).view(B, T, KV, HS).transpose(1, 2)
        v = F.linear(h, P[p + "self_attn.v_proj.weight"]).view(B, T, KV, HS).transpose(1, 2)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        k, v = repeat_kv(k, NH // KV), repeat_kv(v, NH // KV)
        att = (q @ k.transpose(2, 3)) * HS ** -0.5
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, NH * HS)
        x = x + F.linear(y, P[p + "self_attn.o_proj.weight"])
        h = rms_norm(x, P[p + "post_attention_layernorm.weight"], cfg.eps)
        g, u = F.linear(h, P[p + "mlp.gate_proj.weight"]), F.linear(h, P[p + "mlp.up_proj.weight"])
        x = x + F.linear(F.silu(g) * u, P[p + "mlp.down_proj.weight"])
    x = rms_norm(x, P["model.norm.weight"], cfg.eps)
    head = P["model.embed_tokens.weight"] if cfg.tied else P["lm_head.weight"]
    return F.linear(x, head)


def load_dir(d):
    with open(os.path.join(d, "config.json")) as f:
        c = json.load(f)
    assert c.get("model_type") == "llama", c.get("model_type")
    P = {n: t.to(torch.float64) for n, t in read_safetensors(os.path.join(d, "model.safetensors")).items()}
    return Config(c), c, P


# ---------------------------------------------------------------- commands

def fixture(_):
    L, C, NH, KV, F_, T, V, B = 2, 48, 6, 2, 40, 16, 64, 2  # GQA 3:1, non-power-of-two widths
    cfgd = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": C,
            "num_hidden_layers": L, "num_attention_heads": NH, "num_key_value_heads": KV,
            "intermediate_size": F_, "vocab_size": V, "max_position_embeddings": T, "rms_norm_eps": 1e-5,
            "rope_theta": 500.0, "tie_word_embeddings": False, "hidden_act": "silu",
            "attention_bias": False, "mlp_bias": False, "torch_dtype": "float32"}
    cfg = Config(cfgd)
    HS = C // NH
    torch.manual_seed(20240521)
    P = {}

    def param(name, *shape, std, mean=0.0):
        P[name] = (torch.randn(*shape, dtype=torch.float32) * std + mean).to(torch.float64).requires_grad_(True)

    # Weights larger than Llama's 0.02 so that every term of every gradient
    # matters; norm weights near 1.
    param("model.embed_tokens.weight", V, C, std=0.5)
    for l in range(L):
        p = f"model.layers.{l}."
        param(p + "input_layernorm.weight", C, std=0.2, mean=1.0)
        param(p + "self_attn.q_proj.weight", NH * HS, C, std=0.25)
        param(p + "self_attn.k_proj.weight", KV * HS, C, std=0.25)
        param(p + "self_attn.v_proj.weight", KV * HS, C, std=0.25)
        param(p + "self_attn.o_proj.weight", C, NH * HS, std=0.2)
        param(p + "post_attention_layernorm.weight", C, std=0.2, mean=1.0)
        param(p + "mlp.gate_proj.weight", F_, C, std=0.25)
        param(p + "mlp.up_proj.weight", F_, C, std=0.25)
        param(p + "mlp.down_proj.weight", C, F_, std=0.15)
    param("model.norm.weight", C, std=0.2, mean=1.0)
    param("lm_head.weight", V, C, std=0.3)
    inputs = torch.randint(0, V, (B, T), dtype=torch.int64)
    targets = torch.randint(0, V, (B, T), dtype=torch.int64)
    logits = forward(cfg, P, inputs)
    loss = F.cross_entropy(logits.view(-1, V), targets.view(-1))
    loss.backward()

    d = os.path.join(ROOT, "hf", "testdata", "llama_hf")
    os.makedirs(d, exist_ok=True)
    write_safetensors(os.path.join(d, "model.safetensors"), {n: t for n, t in P.items()}, {"format": "pt"})
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfgd, f, indent=2)
        f.write("\n")
    fx = {"grad." + n: t.grad for n, t in P.items()}
    fx.update({"inputs": inputs, "targets": targets, "logits": logits, "loss": loss.reshape(1)})
    out = os.path.join(ROOT, "hf", "testdata", "llama_fixture.safetensors")
    write_safetensors(out, fx, {"torch": torch.__version__, "micro_batch": str(B)})
    # The directory loads back into the same model.
    cfg2, _, P2 = load_dir(d)
    err = (forward(cfg2, P2, inputs) - logits).abs().max().item()
    print(f"wrote {d} and {out}: loss {loss.item():.6f}, reload error {err:.3g}")


def logits(a):
    cfg, _, P = load_dir(a.model)
    tokens = torch.tensor([[int(x) for x in a.tokens.split(",")]], dtype=torch.int64)
    with torch.no_grad():
        out = forward(cfg, P, tokens)[0]
    with open(os.path.join(a.model, "model.safetensors"), "rb") as f:
        sha = hashlib.sha256(f.read()).hexdigest()
    write_safetensors(a.out, {"logits": out}, {"model_sha256": sha, "torch": torch.__version__})
    print(f"wrote {a.out}: logits {list(out.shape)}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("fixture").set_defaults(fn=fixture)
    c = sub.add_parser("logits")
    c.add_argument("--model", required=True)
    c.add_argument("--tokens", required=True)
    c.add_argument("--out", required=True)
    c.set_defaults(fn=logits)
    a = ap.parse_args()
    torch.set_num_threads(1)
    a.fn(a)


if __name__ == "__main__":
    main()
