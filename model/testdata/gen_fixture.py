#!/usr/bin/python3
"""Builds model/testdata/gpt_fixture.safetensors, the PyTorch reference for
model.TestMatchesPyTorch.

A tiny GPT-2 (L=2, C=32, NH=4, T=16, V=64, B=2, no dropout) with random
fp32 weights is run forward and backward in float64 with PyTorch; the file
holds the weights (F32, Trellis names and (out, in) linear layout), the
batch (I32), the logits and the mean cross-entropy loss, and the gradient of
the loss with respect to every parameter ("grad." + name), all computed in
float64 and stored as F32.

Run with Debian's PyTorch (python3-torch, 1.13):

    /usr/bin/python3 model/testdata/gen_fixture.py

The safetensors format is written by hand: an 8-byte little-endian header
length, a JSON header {name: {dtype, shape, data_offsets}}, the raw data.
"""
import json
import math
import os
import struct

import torch
import torch.nn.functional as F

L, C, NH, T, V, B = 2, 32, 4, 16, 64, 2
HS = C // NH

torch.manual_seed(20240520)
params = {}  # name -> float64 leaf tensor holding fp32-representable values


def param(name, *shape, std, mean=0.0):
    t = torch.randn(*shape, dtype=torch.float32) * std + mean
    t = t.to(torch.float64).requires_grad_(True)
    params[name] = t
    return t


# Weights larger than GPT-2's 0.02 so that every term of every gradient
# matters; LayerNorm weights near 1, biases non-zero.
param("wte", V, C, std=0.5)
param("wpe", T, C, std=0.5)
for l in range(L):
    p = f"h.{l}."
    param(p + "ln_1.weight", C, std=0.2, mean=1.0)
    param(p + "ln_1.bias", C, std=0.2)
    param(p + "attn.c_attn.weight", 3 * C, C, std=0.25)
    param(p + "attn.c_attn.bias", 3 * C, std=0.1)
    param(p + "attn.c_proj.weight", C, C, std=0.2)
    param(p + "attn.c_proj.bias", C, std=0.1)
    param(p + "ln_2.weight", C, std=0.2, mean=1.0)
    param(p + "ln_2.bias", C, std=0.2)
    param(p + "mlp.c_fc.weight", 4 * C, C, std=0.2)
    param(p + "mlp.c_fc.bias", 4 * C, std=0.1)
    param(p + "mlp.c_proj.weight", C, 4 * C, std=0.1)
    param(p + "mlp.c_proj.bias", C, std=0.1)
param("ln_f.weight", C, std=0.2, mean=1.0)
param("ln_f.bias", C, std=0.2)

inputs = torch.randint(0, V, (B, T), dtype=torch.int64)
targets = torch.randint(0, V, (B, T), dtype=torch.int64)


def forward(x_tokens):
    P = params
    x = P["wte"][x_tokens] + P["wpe"][:T]
    mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
    for l in range(L):
        p = f"h.{l}."
        h = F.layer_norm(x, (C,), P[p + "ln_1.weight"], P[p + "ln_1.bias"], eps=1e-5)
        qkv = F.linear(h, P[p + "attn.c_attn.weight"], P[p + "attn.c_attn.bias"])
        q, k, v = qkv.split(C, dim=2)
        q = q.view(B, T, NH, HS).transpose(1, 2)
        k = k.view(B, T, NH, HS).transpose(1, 2)
        v = v.view(B, T, NH, HS).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) / math.sqrt(HS)
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        x = x + F.linear(y, P[p + "attn.c_proj.weight"], P[p + "attn.c_proj.bias"])
        h = F.layer_norm(x, (C,), P[p + "ln_2.weight"], P[p + "ln_2.bias"], eps=1e-5)
        h = F.gelu(F.linear(h, P[p + "mlp.c_fc.weight"], P[p + "mlp.c_fc.bias"]), approximate="tanh")
        x = x + F.linear(h, P[p + "mlp.c_proj.weight"], P[p + "mlp.c_proj.bias"])
    x = F.layer_norm(x, (C,), P["ln_f.weight"], P["ln_f.bias"], eps=1e-5)
    return x @ P["wte"].T  # tied LM head


logits = forward(inputs)
loss = F.cross_entropy(logits.view(-1, V), targets.view(-1))
loss.backward()

tensors = {}  # name -> (dtype, shape, bytes)


def put(name, t, dtype="F32"):
    t = t.detach().contiguous()
    if dtype == "F32":
        raw = t.to(torch.float32).numpy().astype("<f4").tobytes()
    else:
        raw = t.to(torch.int32).numpy().astype("<i4").tobytes()
    tensors[name] = (dtype, list(t.shape), raw)


for name, t in params.items():
    put(name, t)
    put("grad." + name, t.grad)
put("inputs", inputs, "I32")
put("targets", targets, "I32")
put("logits", logits)
put("loss", loss.reshape(1))

header = {"__metadata__": {"config": json.dumps({"layers": L, "hidden": C, "heads": NH, "seq_len": T, "vocab": V, "micro_batch": B}),
                           "torch": torch.__version__}}
data = b""
for name in sorted(tensors):
    dtype, shape, raw = tensors[name]
    header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
    data += raw
hjson = json.dumps(header, separators=(",", ":")).encode()
hjson += b" " * (-len(hjson) % 8)  # pad to 8 bytes, as the reference writer does
out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "gpt_fixture.safetensors")
with open(out, "wb") as f:
    f.write(struct.pack("<Q", len(hjson)))
    f.write(hjson)
    f.write(data)
print(f"wrote {out}: loss {loss.item():.6f}, {len(tensors)} tensors, {8 + len(hjson) + len(data)} bytes")
