#!/usr/bin/python3
"""Load a Hugging Face GPT-2 directory (model.safetensors + config.json, as
`trellis export` writes it) into a PyTorch GPT-2 written from Hugging Face's
naming and layout, with no transformers package and no network, and print or
save its logits for given token ids.

The module below is GPT2LMHeadModel's computation spelled out: Conv1D
(y = x @ W + b, W stored (in, out)), pre-LN blocks, GELU tanh ("gelu_new"),
attention scaled by 1/sqrt(head size), the LM head tied to wte. Every tensor
of the file must be consumed and every parameter loaded (strict), so a
naming or shape mistake in the export fails here.

    /usr/bin/python3 scripts/hf_gpt2.py --model DIR --tokens 1,2,3
    /usr/bin/python3 scripts/hf_gpt2.py --model DIR --tokens 1,2,3 --out logits.safetensors

--out writes the (T, V) logits as a safetensors file with the SHA-256 of the
model.safetensors it came from in its metadata (hf/testdata uses it).
"""
import argparse, hashlib, json, math, os, struct
import torch
import torch.nn.functional as F

DTYPES = {"F32": torch.float32, "BF16": torch.bfloat16, "F16": torch.float16}


def read_safetensors(path):
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + n])
    data = raw[8 + n :]
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        a, b = info["data_offsets"]
        t = torch.frombuffer(bytearray(data[a:b]), dtype=DTYPES[info["dtype"]])
        out[name] = t.reshape(info["shape"]).to(torch.float32)
    return out


def write_safetensors(path, tensors, meta):
    header, blobs, off = {"__metadata__": meta}, [], 0
    for name in sorted(tensors):
        b = tensors[name].contiguous().numpy().astype("<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(tensors[name].shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    js = json.dumps(header, separators=(",", ":")).encode()
    js += b" " * (-len(js) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(js)) + js + b"".join(blobs))


class Conv1D(torch.nn.Module):
    def __init__(self, nin, nout):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.empty(nin, nout))
        self.bias = torch.nn.Parameter(torch.empty(nout))

    def forward(self, x):
        return x @ self.weight + self.bias


class Attention(torch.nn.Module):
    def __init__(self, C, NH):
        super().__init__()
        self.NH = NH
        self.c_attn = Conv1D(C, 3 * C)
        self.c_proj = Conv1D(C, C)

    def forward(self, x):
        T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=1)
        q, k, v = (t.view(T, self.NH, C // self.NH).transpose(0, 1) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(C // self.NH)
        mask = torch.ones(T, T, dtype=torch.bool).tril()
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        return self.c_proj((att @ v).transpose(0, 1).reshape(T, C))


class MLP(torch.nn.Module):
    def __init__(self, C):
        super().__init__()
        self.c_fc = Conv1D(C, 4 * C)
        self.c_proj = Conv1D(4 * C, C)

    def forward(self, x):
        return self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))


class Block(torch.nn.Module):
    def __init__(self, C, NH, eps):
        super().__init__()
        self.ln_1 = torch.nn.LayerNorm(C, eps=eps)
        self.attn = Attention(C, NH)
        self.ln_2 = torch.nn.LayerNorm(C, eps=eps)
        self.mlp = MLP(C)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class Transformer(torch.nn.Module):
    def __init__(self, cfg):
        super().__init__()
        C, eps = cfg["n_embd"], cfg.get("layer_norm_epsilon", 1e-5)
        self.wte = torch.nn.Embedding(cfg["vocab_size"], C)
        self.wpe = torch.nn.Embedding(cfg["n_positions"], C)
        self.h = torch.nn.ModuleList(Block(C, cfg["n_head"], eps) for _ in range(cfg["n_layer"]))
        self.ln_f = torch.nn.LayerNorm(C, eps=eps)


class GPT2LMHead(torch.nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.transformer = Transformer(cfg)

    def forward(self, idx):
        t = self.transformer
        x = t.wte(idx) + t.wpe(torch.arange(len(idx)))
        for b in t.h:
            x = b(x)
        return t.ln_f(x) @ t.wte.weight.t()  # lm_head tied to wte


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--tokens", required=True, help="comma-separated token ids")
    ap.add_argument("--out", help="write the logits here (safetensors) instead of printing a summary")
    ap.add_argument("--json", action="store_true", help="print every logit as JSON (positions × vocabulary floats) instead of a summary")
    a = ap.parse_args()
    with open(os.path.join(a.model, "config.json")) as f:
        cfg = json.load(f)
    path = os.path.join(a.model, "model.safetensors")
    sd = read_safetensors(path)
    sd.pop("lm_head.weight", None)
    m = GPT2LMHead(cfg)
    m.load_state_dict(sd, strict=True)
    idx = torch.tensor([int(s) for s in a.tokens.split(",")])
    with torch.no_grad():
        logits = m(idx)
    if a.out:
        with open(path, "rb") as f:
            digest = hashlib.sha256(f.read()).hexdigest()
        write_safetensors(a.out, {"logits": logits, "tokens": idx.to(torch.float32)},
                          {"model_sha256": digest, "torch": torch.__version__})
    elif a.json:
        print(json.dumps(logits.tolist()))
    else:
        print(summarize(logits.tolist()))


def summarize(rows, k=3):
    """A few lines for people: per position the k largest logits with
    their token ids, and the mean and spread of the row (a GPT-2 row is
    50,257 floats: the whole list, --json, is 30 KB and more)."""
    out = ["%d positions x %d logits (--json prints them all, --out saves them)" % (len(rows), len(rows[0]) if rows else 0)]
    for i, r in enumerate(rows):
        top = sorted(range(len(r)), key=lambda j: -r[j])[:k]
        mean = sum(r) / len(r)
        sd = (sum((x - mean) ** 2 for x in r) / len(r)) ** 0.5
        out.append("  %3d: top %s; mean %.4g, sd %.4g" % (i, ", ".join("%d (%.4f)" % (j, r[j]) for j in top), mean, sd))
    return "\n".join(out)


if __name__ == "__main__":
    main()
