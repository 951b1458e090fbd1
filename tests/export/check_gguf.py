#!/usr/bin/env python3
"""check_gguf.py GGUF HF_DIR — an independent reading (Python standard library only) of a
GGUF that `COMPILE … INTO MODEL … FORMAT GGUF` wrote, against the Hugging Face directory
`COMPILE … INTO MODEL` wrote from the same container (test_export.c shows that directory
re-encodes to the container's payload hashes, so it stands for the container here).

Checks: the GGUF v3 header and alignment; the llama hyper-parameters against config.json;
the tokenizer metadata against tokenizer.json (every token by id and type; a byte-level
BPE's every merge, or a SentencePiece BPE's scores = -(merge rank); bos/eos); every tensor under llama.cpp's name with ggml's reversed dimensions and
type, aligned, and its bytes equal to the safetensors tensor after the documented
transforms: q_proj / k_proj rows permuted as convert_hf_to_gguf.py's LlamaModel.permute,
16-bit vectors widened to F32. Prints `ok: …` and exits 0, else names the first
difference and exits 1.
"""
import json
import os
import struct
import sys

GGML = {0: ("F32", 4), 1: ("F16", 2), 30: ("BF16", 2)}


class Reader:
    def __init__(self, data):
        self.d, self.o = data, 0

    def take(self, fmt):
        v = struct.unpack_from("<" + fmt, self.d, self.o)
        self.o += struct.calcsize("<" + fmt)
        return v[0] if len(v) == 1 else v

    def string(self):
        n = self.take("Q")
        s = self.d[self.o:self.o + n].decode("utf-8")
        self.o += n
        return s

    def value(self, t):
        scalar = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q",
                  11: "q", 12: "d"}
        if t in scalar:
            return self.take(scalar[t])
        if t == 8:
            return self.string()
        if t == 9:
            et, n = self.take("I"), self.take("Q")
            return [self.value(et) for _ in range(n)]
        raise ValueError("unknown value type %d at offset %d" % (t, self.o))


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


def safetensors(path):
    with open(path, "rb") as f:
        raw = f.read()
    n = struct.unpack_from("<Q", raw, 0)[0]
    head = json.loads(raw[8:8 + n])
    head.pop("__metadata__", None)
    base = 8 + n
    return {k: (v["dtype"], v["shape"], raw[base + v["data_offsets"][0]:base + v["data_offsets"][1]])
            for k, v in head.items()}


def gguf_name(hf):
    fixed = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
             "lm_head.weight": "output.weight"}
    if hf in fixed:
        return fixed[hf]
    parts = hf.split(".")
    if parts[:2] != ["model", "layers"]:
        return None
    sub = {"input_layernorm": "attn_norm", "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k",
           "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output",
           "post_attention_layernorm": "ffn_norm", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
           "mlp.down_proj": "ffn_down"}[".".join(parts[3:-1])]
    return "blk.%s.%s.weight" % (parts[2], sub)


def permute(data, rows, heads):
    """convert_hf_to_gguf.py: reshape(heads, 2, rows/heads/2, ...).swapaxes(1, 2)."""
    rb, d = len(data) // rows, rows // heads
    out = bytearray()
    for h in range(heads):
        for i in range(d // 2):
            for j in range(2):
                r = h * d + j * (d // 2) + i
                out += data[r * rb:(r + 1) * rb]
    return bytes(out)


def widen(dtype, data):
    if dtype == "BF16":
        return b"".join(struct.pack("<I", v << 16) for v in struct.unpack("<%dH" % (len(data) // 2), data))
    vals = struct.unpack("<%de" % (len(data) // 2), data)
    return struct.pack("<%df" % len(vals), *vals)


def main():
    gg, hf = sys.argv[1], sys.argv[2]
    cfg = json.load(open(os.path.join(hf, "config.json")))
    tj = json.load(open(os.path.join(hf, "tokenizer.json")))
    st = safetensors(os.path.join(hf, "model.safetensors"))
    data = open(gg, "rb").read()
    r = Reader(data)
    if r.take("4s") != b"GGUF" or r.take("I") != 3:
        fail("not a GGUF v3 file")
    nt, nkv = r.take("Q"), r.take("Q")
    kv = {}
    for _ in range(nkv):
        k = r.string()
        kv[k] = r.value(r.take("I"))
    align = kv.get("general.alignment", 32)
    want = {"general.architecture": "llama", "llama.embedding_length": cfg["hidden_size"],
            "llama.block_count": cfg["num_hidden_layers"],
            "llama.feed_forward_length": cfg["intermediate_size"],
            "llama.attention.head_count": cfg["num_attention_heads"],
            "llama.attention.head_count_kv": cfg.get("num_key_value_heads", cfg["num_attention_heads"]),
            "llama.vocab_size": cfg["vocab_size"]}
    for k, v in want.items():
        if kv.get(k) != v:
            fail("metadata %s = %r, want %r" % (k, kv.get(k), v))
    for k, v in (("llama.attention.layer_norm_rms_epsilon", cfg["rms_norm_eps"]),
                 ("llama.rope.freq_base", cfg.get("rope_theta", 10000.0))):
        if abs(kv.get(k, -1) - v) > 1e-6 * max(1.0, abs(v)):
            fail("metadata %s = %r, want %r" % (k, kv.get(k), v))
    # tokenizer: gpt2 (byte-level BPE, merges) or llama (SentencePiece BPE, scores)
    spm = bool(tj["model"].get("byte_fallback"))
    if kv.get("tokenizer.ggml.model") != ("llama" if spm else "gpt2"):
        fail("tokenizer.ggml.model %r" % kv.get("tokenizer.ggml.model"))
    inv = {i: t for t, i in tj["model"]["vocab"].items()}
    special = {}
    for a in tj.get("added_tokens", []):
        inv[a["id"]] = a["content"]
        special[a["id"]] = 3 if a.get("special") else 4
        if spm and a["content"] == tj["model"].get("unk_token"):
            special[a["id"]] = 2
    toks, types = kv["tokenizer.ggml.tokens"], kv["tokenizer.ggml.token_type"]
    if len(toks) != cfg["vocab_size"] or len(types) != len(toks):
        fail("%d tokens / %d types for vocab %d" % (len(toks), len(types), cfg["vocab_size"]))
    for i, t in enumerate(toks):
        w = inv.get(i, "[PAD%d]" % i)
        byte = spm and len(w) == 6 and w.startswith("<0x") and w.endswith(">")
        wt = special.get(i, 6 if byte else 1 if i in inv else 5)
        if t != w or types[i] != wt:
            fail("token %d is %r (type %d), tokenizer.json says %r (type %d)" % (i, t, types[i], w, wt))
    merges = [m if isinstance(m, str) else " ".join(m) for m in tj["model"]["merges"]]
    if spm:
        # the result of merge r scores -(r + 1) (its first merge), every other token 0
        ids = {t: i for i, t in enumerate(toks)}
        want_s = [0.0] * len(toks)
        for rank, m in enumerate(merges):
            i = ids[m.replace(" ", "", 1)]
            if want_s[i] == 0.0:
                want_s[i] = -float(rank + 1)
        got_s = kv.get("tokenizer.ggml.scores")
        if got_s is None or any(abs(a - b) > 1e-3 * max(1.0, abs(b)) for a, b in zip(got_s, want_s)):
            fail("scores differ from the merge ranks of tokenizer.json")
        if "tokenizer.ggml.merges" in kv or kv.get("tokenizer.ggml.add_space_prefix") is not True:
            fail("a llama tokenizer has scores, no merges, and add_space_prefix")
    elif kv["tokenizer.ggml.merges"] != merges:
        fail("merges differ from tokenizer.json")
    eos = cfg["eos_token_id"] if isinstance(cfg["eos_token_id"], int) else cfg["eos_token_id"][0]
    if kv.get("tokenizer.ggml.bos_token_id") != cfg["bos_token_id"] or kv.get("tokenizer.ggml.eos_token_id") != eos:
        fail("bos/eos %r/%r" % (kv.get("tokenizer.ggml.bos_token_id"), kv.get("tokenizer.ggml.eos_token_id")))
    # tensors
    infos = {}
    for _ in range(nt):
        name = r.string()
        nd = r.take("I")
        ne = [r.take("Q") for _ in range(nd)]
        infos[name] = (ne, r.take("I"), r.take("Q"))
    start = (r.o + align - 1) // align * align
    if len(infos) != len(st):
        fail("%d tensors in the GGUF, %d in model.safetensors" % (len(infos), len(st)))
    heads = {"attn_q": cfg["num_attention_heads"],
             "attn_k": cfg.get("num_key_value_heads", cfg["num_attention_heads"])}
    for hn, (dt, shape, raw) in st.items():
        gn = gguf_name(hn)
        if gn not in infos:
            fail("%s: no GGUF tensor %s" % (hn, gn))
        ne, gt, off = infos[gn]
        if ne != list(reversed(shape)):
            fail("%s: ne %r for shape %r" % (gn, ne, shape))
        if off % align:
            fail("%s: offset %d not aligned to %d" % (gn, off, align))
        want_raw, want_t = raw, dt
        kind = gn.split(".")[-2]
        if kind in heads:
            want_raw = permute(raw, shape[0], heads[kind])
        if len(shape) == 1 and dt != "F32":
            want_raw, want_t = widen(dt, raw), "F32"
        if GGML.get(gt, ("?",))[0] != want_t:
            fail("%s: ggml type %d, want %s" % (gn, gt, want_t))
        got = data[start + off:start + off + len(want_raw)]
        if got != want_raw:
            fail("%s: bytes differ from %s%s" % (gn, hn, " (permuted)" if kind in heads else ""))
    print("ok: GGUF v3, %d metadata keys, %d tensors equal to %s (q/k permuted, vectors F32), "
          "%d tokens, %s tokenizer, %d merges" % (nkv, nt, os.path.join(hf, "model.safetensors"), len(toks),
                                                  "llama" if spm else "gpt2", len(merges)))


if __name__ == "__main__":
    main()
