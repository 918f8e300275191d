#!/usr/bin/python3
"""An independent Qwen2MoeForCausalLM forward in plain Python (float64, the
standard library only: no torch, no numpy), written from Hugging Face's
definition (transformers' modeling_qwen2_moe.py), to hold Trellis's MoE
export to:

  Qwen2MoeRMSNorm            w * x / sqrt(mean(x^2) + eps)
  Qwen2MoeAttention          q, k, v with biases (qkv_bias), rotate_half RoPE
                             (inv_freq = theta^(-2i/head_dim), emb = cat(freqs,
                             freqs)), repeat_kv for grouped-query attention,
                             softmax(q k^T / sqrt(head_dim)) causal, o_proj
  Qwen2MoeDecoderLayer       layer i sparse iff i not in mlp_only_layers,
                             num_experts > 0 and (i+1) % decoder_sparse_step == 0
  Qwen2MoeSparseMoeBlock     p = softmax(gate(x)); top-k of p (torch.topk,
                             descending); if norm_topk_prob: p /= sum; out =
                             sum_j p_j * experts[e_j](x) + sigmoid(shared_expert_gate(x))
                             * shared_expert(x)
  Qwen2MoeMLP                down(silu(gate(x)) * up(x))
  Qwen2MoeForCausalLM        lm_head (or embed_tokens when tied)

  logits --model DIR --tokens 1,2,3 --out FILE
            reads a Hugging Face qwen2_moe directory (what `trellis export`
            writes for an MoE model), runs it on the token ids and writes
            their (T, V) logits to FILE (F32), with the SHA-256 of the
            model.safetensors they came from and the smallest routing
            margin (the last chosen expert's probability minus the best
            unchosen one's, over every token and layer) in its metadata.
            hf's TestMoEExportMatchesReference holds Trellis's logits to
            them within 1e-5; a margin near 0 would make the choice of
            experts depend on rounding.

Differences from the Hugging Face code, all of precision: float64
throughout, the RoPE table too.

Run: python3 scripts/py_qwen2moe.py logits --model DIR --tokens 1,2 --out F
(or go test ./hf -run TestMoEExportMatchesReference -torch).
"""
import argparse
import hashlib
import json
import math
import os
import struct


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
        raw, dt = data[lo:hi], info["dtype"]
        if dt == "F32":
            vals = list(struct.unpack("<%df" % ((hi - lo) // 4), raw))
        elif dt == "F16":
            vals = list(struct.unpack("<%de" % ((hi - lo) // 2), raw))
        elif dt == "BF16":
            vals = [struct.unpack("<f", b"\0\0" + raw[i:i + 2])[0] for i in range(0, len(raw), 2)]
        else:
            raise SystemExit(f"{name}: dtype {dt}")
        shape = info["shape"]
        if len(shape) == 2:
            r, c = shape
            vals = [vals[i * c:(i + 1) * c] for i in range(r)]
        out[name] = vals
    return out


def write_safetensors(path, tensors, metadata):
    header = {"__metadata__": metadata}
    data = b""
    for name in sorted(tensors):
        shape, vals = tensors[name]
        raw = struct.pack("<%df" % len(vals), *vals)
        header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    hjson = json.dumps(header, separators=(",", ":")).encode()
    hjson += b" " * (-len(hjson) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hjson)))
        f.write(hjson)
        f.write(data)


def linear(x, w, b=None):
    y = [sum(wi * xi for wi, xi in zip(row, x)) for row in w]
    return [a + c for a, c in zip(y, b)] if b is not None else y


def rms_norm(x, w, eps):
    r = 1.0 / math.sqrt(sum(v * v for v in x) / len(x) + eps)
    return [wi * v * r for wi, v in zip(w, x)]


def silu(v):
    return v / (1.0 + math.exp(-v))


def softmax(v):
    m = max(v)
    e = [math.exp(a - m) for a in v]
    s = sum(e)
    return [a / s for a in e]


def mlp(x, P, p):
    if len(P[p + "gate_proj.weight"]) == 0:  # an empty (width 0) MLP's output is 0
        return [0.0] * len(x)
    g, u = linear(x, P[p + "gate_proj.weight"]), linear(x, P[p + "up_proj.weight"])
    return linear([silu(a) * b for a, b in zip(g, u)], P[p + "down_proj.weight"])


def rope(v, pos, theta):
    d = len(v)
    half = d // 2
    out = list(v)
    for i in range(half):
        a = pos * theta ** (-2.0 * i / d)
        c, s = math.cos(a), math.sin(a)
        out[i] = v[i] * c - v[i + half] * s
        out[i + half] = v[i + half] * c + v[i] * s
    return out


class Model:
    def __init__(self, d, P):
        assert d["model_type"] == "qwen2_moe", d["model_type"]
        assert d.get("hidden_act", "silu") == "silu"
        assert not d.get("use_sliding_window", False)
        assert d.get("rope_scaling") is None, "default RoPE only"
        self.C, self.L, self.NH = d["hidden_size"], d["num_hidden_layers"], d["num_attention_heads"]
        self.KV = d.get("num_key_value_heads", 16)
        self.HS = d.get("head_dim") or self.C // self.NH
        self.eps, self.theta = d.get("rms_norm_eps", 1e-6), d.get("rope_theta", 10000.0)
        self.tied = d.get("tie_word_embeddings", False)
        self.bias = d.get("qkv_bias", True)
        self.E, self.K = d["num_experts"], d["num_experts_per_tok"]
        self.norm_topk = d.get("norm_topk_prob", False)
        self.step, self.only = d.get("decoder_sparse_step", 1), d.get("mlp_only_layers") or []
        self.P = P
        self.margin = float("inf")

    def sparse(self, i):
        return i not in self.only and self.E > 0 and (i + 1) % self.step == 0

    def moe(self, x, p):
        P = self.P
        probs = softmax(linear(x, P[p + "gate.weight"]))
        order = sorted(range(self.E), key=lambda e: -probs[e])
        chosen = order[:self.K]
        if self.K < self.E:
            self.margin = min(self.margin, probs[chosen[-1]] - probs[order[self.K]])
        g = [probs[e] for e in chosen]
        if self.norm_topk:
            s = sum(g)
            g = [a / s for a in g]
        out = [0.0] * len(x)
        for ge, e in zip(g, chosen):
            y = mlp(x, P, f"{p}experts.{e}.")
            out = [o + ge * a for o, a in zip(out, y)]
        sh = mlp(x, P, p + "shared_expert.")
        sg = 1.0 / (1.0 + math.exp(-linear(x, P[p + "shared_expert_gate.weight"])[0]))
        return [o + sg * a for o, a in zip(out, sh)]

    def logits(self, tokens):
        P, HS, NH, KV = self.P, self.HS, self.NH, self.KV
        xs = [list(P["model.embed_tokens.weight"][t]) for t in tokens]
        for l in range(self.L):
            p = f"model.layers.{l}."
            ks, vs, ys = [], [], []
            for pos, x in enumerate(xs):
                h = rms_norm(x, P[p + "input_layernorm.weight"], self.eps)
                b = (lambda n: P[p + f"self_attn.{n}_proj.bias"]) if self.bias else (lambda n: None)
                q = linear(h, P[p + "self_attn.q_proj.weight"], b("q"))
                k = linear(h, P[p + "self_attn.k_proj.weight"], b("k"))
                v = linear(h, P[p + "self_attn.v_proj.weight"], b("v"))
                qh = [rope(q[i * HS:(i + 1) * HS], pos, self.theta) for i in range(NH)]
                ks.append([rope(k[i * HS:(i + 1) * HS], pos, self.theta) for i in range(KV)])
                vs.append([v[i * HS:(i + 1) * HS] for i in range(KV)])
                y = []
                for i in range(NH):
                    j = i // (NH // KV)  # repeat_kv
                    s = softmax([sum(a * c for a, c in zip(qh[i], ks[t][j])) / math.sqrt(HS) for t in range(pos + 1)])
                    y += [sum(s[t] * vs[t][j][d] for t in range(pos + 1)) for d in range(HS)]
                ys.append(y)
            for pos in range(len(xs)):
                x = [a + c for a, c in zip(xs[pos], linear(ys[pos], P[p + "self_attn.o_proj.weight"]))]
                h = rms_norm(x, P[p + "post_attention_layernorm.weight"], self.eps)
                m = self.moe(h, p + "mlp.") if self.sparse(l) else mlp(h, P, p + "mlp.")
                xs[pos] = [a + c for a, c in zip(x, m)]
        head = P["model.embed_tokens.weight"] if self.tied else P["lm_head.weight"]
        return [linear(rms_norm(x, P["model.norm.weight"], self.eps), head) for x in xs]


def logits(a):
    with open(os.path.join(a.model, "config.json")) as f:
        d = json.load(f)
    path = os.path.join(a.model, "model.safetensors")
    m = Model(d, read_safetensors(path))
    tokens = [int(x) for x in a.tokens.split(",")]
    out = m.logits(tokens)
    with open(path, "rb") as f:
        sha = hashlib.sha256(f.read()).hexdigest()
    flat = [v for row in out for v in row]
    write_safetensors(a.out, {"logits": ([len(out), len(out[0])], flat)},
                      {"model_sha256": sha, "torch": "none (scripts/py_qwen2moe.py, float64)", "min_margin": repr(m.margin)})
    print(f"wrote {a.out}: logits [{len(out)}, {len(out[0])}], smallest routing margin {m.margin:.3g}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("logits")
    c.add_argument("--model", required=True)
    c.add_argument("--tokens", required=True)
    c.add_argument("--out", required=True)
    c.set_defaults(fn=logits)
    a = ap.parse_args()
    a.fn(a)


if __name__ == "__main__":
    main()
