#!/usr/bin/env python3
"""check_gguf.py GGUF HF_DIR — an independent reading (Python standard library only) of a
GGUF that `COMPILE … INTO MODEL … FORMAT GGUF` wrote, against the Hugging Face directory
`COMPILE … INTO MODEL` wrote from the same container (test_export.c shows that directory
re-encodes to the container's payload hashes, so it stands for the container here).

Checks: the GGUF v3 header and alignment; the architecture named for the checkpoint's
model_type (llama for llama / mistral / mixtral, qwen2, phi3, olmo2, gpt2, gemma2) and its
hyper-parameters against config.json; the tokenizer metadata against tokenizer.json (every
token by id and type; a byte-level BPE's pre-tokenizer and every merge, or a SentencePiece
BPE's scores = -(merge rank); bos/eos); every tensor under llama.cpp's name with ggml's
reversed dimensions and type, aligned, and its bytes equal to the checkpoint's tensors after
convert_hf_to_gguf.py's transforms: llama's q_proj / k_proj rows permuted as
LlamaModel.permute, GPT-2's Conv1D weights transposed, Mixtral's experts stacked into
ffn_*_exps, a tied model's embedding written again as output where the architecture wants
one, Gemma 2's norm weights w written as 1 + w, 16-bit vectors widened to F32. Prints `ok: …` and exits 0, else names the first
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


ARCH = {"llama": "llama", "mistral": "llama", "mixtral": "llama", "qwen2": "qwen2", "phi3": "phi3",
        "olmo2": "olmo2", "gpt2": "gpt2", "gemma2": "gemma2"}
OUTPUT_REQUIRED = ("phi3", "olmo2", "gpt2")


def gguf_name(arch, hf):
    """(llama.cpp name, slot in a stacked tensor or None, transform) of a checkpoint tensor."""
    fixed = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
             "lm_head.weight": "output.weight", "transformer.wte.weight": "token_embd.weight",
             "transformer.wpe.weight": "position_embd.weight",
             "transformer.ln_f.weight": "output_norm.weight", "transformer.ln_f.bias": "output_norm.bias"}
    if hf in fixed:
        return fixed[hf], None, None
    parts = hf.split(".")
    kind = parts[-1]
    if parts[:2] == ["transformer", "h"]:
        sub = {"ln_1": "attn_norm", "attn.c_attn": "attn_qkv", "attn.c_proj": "attn_output",
               "ln_2": "ffn_norm", "mlp.c_fc": "ffn_up", "mlp.c_proj": "ffn_down"}[".".join(parts[3:-1])]
        # Conv1D [in, out] -> [out, in]
        return "blk.%s.%s.%s" % (parts[2], sub, kind), None, "T" if kind == "weight" else None
    if parts[:2] != ["model", "layers"]:
        return None, None, None
    inner = ".".join(parts[3:-1])
    if inner.startswith("block_sparse_moe.experts."):
        e, w = parts[5], parts[6]
        return "blk.%s.%s.weight" % (parts[2], {"w1": "ffn_gate_exps", "w3": "ffn_up_exps",
                                                 "w2": "ffn_down_exps"}[w]), int(e), None
    sub = {"input_layernorm": "attn_norm", "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k",
           "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output",
           "self_attn.qkv_proj": "attn_qkv", "self_attn.q_norm": "attn_q_norm",
           "self_attn.k_norm": "attn_k_norm",
           "post_attention_layernorm": "post_attention_norm" if arch in ("olmo2", "gemma2") else "ffn_norm",
           "pre_feedforward_layernorm": "ffn_norm",
           "post_feedforward_layernorm": "post_ffw_norm", "mlp.gate_proj": "ffn_gate",
           "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down", "mlp.gate_up_proj": "ffn_up",
           "block_sparse_moe.gate": "ffn_gate_inp"}[inner]
    perm = arch == "llama" and kind == "weight" and sub in ("attn_q", "attn_k")
    return "blk.%s.%s.%s" % (parts[2], sub, kind), None, sub if perm else None


def transpose(data, shape, size):
    rows, cols = shape
    return b"".join(data[(r * cols + c) * size:(r * cols + c + 1) * size]
                    for c in range(cols) for r in range(rows))


def template_bos(tj):
    pp = tj.get("post_processor") or {}
    for p in pp.get("processors", [pp]):
        if p.get("type") == "TemplateProcessing" and "SpecialToken" in p["single"][0]:
            return p["special_tokens"][p["single"][0]["SpecialToken"]["id"]]["ids"][0]
    return None


def pre_type(tj):
    pt = tj.get("pre_tokenizer") or {}
    if pt.get("type") == "ByteLevel":
        return "gpt-2"
    rx = pt["pretokenizers"][0]["pattern"]["Regex"]
    return "llama-bpe" if "\\p{N}{1,3}" in rx else "qwen2"


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
    arch = ARCH.get(cfg["model_type"])
    if kv.get("general.architecture") != arch:
        fail("general.architecture %r for model_type %r" % (kv.get("general.architecture"), cfg["model_type"]))

    def hp(*names, default=None):
        for n in names:
            if cfg.get(n) is not None:
                return cfg[n]
        return default

    heads = hp("num_attention_heads", "n_head")
    want = {"embedding_length": hp("hidden_size", "n_embd"), "block_count": hp("num_hidden_layers", "n_layer"),
            "feed_forward_length": hp("intermediate_size", "n_inner", default=4 * hp("hidden_size", "n_embd")),
            "attention.head_count": heads, "attention.head_count_kv": hp("num_key_value_heads", default=heads),
            "vocab_size": cfg["vocab_size"]}
    if "num_local_experts" in cfg:
        want.update({"expert_count": cfg["num_local_experts"], "expert_used_count": cfg["num_experts_per_tok"]})
    if arch == "phi3":
        want["attention.sliding_window"] = 0
    if arch == "gemma2":
        want["attention.sliding_window"] = cfg["sliding_window"]
    for k, v in want.items():
        if kv.get(arch + "." + k) != v:
            fail("metadata %s.%s = %r, want %r" % (arch, k, kv.get(arch + "." + k), v))
    floats = [("attention.layer_norm_epsilon", cfg.get("layer_norm_epsilon"))] if arch == "gpt2" else \
        [("attention.layer_norm_rms_epsilon", cfg["rms_norm_eps"]), ("rope.freq_base", cfg.get("rope_theta", 10000.0))]
    if arch == "gemma2":
        floats += [("attn_logit_softcapping", cfg["attn_logit_softcapping"]),
                   ("final_logit_softcapping", cfg["final_logit_softcapping"])]
    for k, v in floats:
        got = kv.get(arch + "." + k, -1)
        if abs(got - v) > 1e-6 * max(1.0, abs(v)):
            fail("metadata %s.%s = %r, want %r" % (arch, k, got, v))
    # tokenizer: gpt2 (byte-level BPE, merges) or llama (SentencePiece BPE, scores)
    spm = bool(tj["model"].get("byte_fallback"))
    if kv.get("tokenizer.ggml.model") != ("llama" if spm else "gpt2"):
        fail("tokenizer.ggml.model %r" % kv.get("tokenizer.ggml.model"))
    if not spm and kv.get("tokenizer.ggml.pre") != pre_type(tj):
        fail("tokenizer.ggml.pre %r, tokenizer.json's pre-tokenizer is %r" % (kv.get("tokenizer.ggml.pre"), pre_type(tj)))
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
    bos = cfg["bos_token_id"] if cfg.get("bos_token_id") is not None else template_bos(tj)
    if kv.get("tokenizer.ggml.bos_token_id") != bos or kv.get("tokenizer.ggml.eos_token_id") != eos:
        fail("bos/eos %r/%r" % (kv.get("tokenizer.ggml.bos_token_id"), kv.get("tokenizer.ggml.eos_token_id")))
    # tensors
    infos = {}
    for _ in range(nt):
        name = r.string()
        nd = r.take("I")
        ne = [r.take("Q") for _ in range(nd)]
        infos[name] = (ne, r.take("I"), r.take("Q"))
    start = (r.o + align - 1) // align * align
    # what each GGUF tensor must hold: its checkpoint parts (stacked experts by slot)
    size = {"F32": 4, "F16": 2, "BF16": 2}
    expect = {}
    for hn, (dt, shape, raw) in st.items():
        gn, slot, xf = gguf_name(arch, hn)
        if gn is None:
            fail("%s: no llama.cpp tensor for it" % hn)
        if xf in ("attn_q", "attn_k"):
            raw = permute(raw, shape[0], heads if xf == "attn_q" else hp("num_key_value_heads", default=heads))
        elif xf == "T" and len(shape) == 2:
            raw, shape = transpose(raw, shape, size[dt]), [shape[1], shape[0]]
        expect.setdefault(gn, {})[slot] = (dt, shape, raw, hn)
    if arch in OUTPUT_REQUIRED and "output.weight" not in expect:
        expect["output.weight"] = dict(expect["token_embd.weight"])
    if len(infos) != len(expect):
        fail("%d tensors in the GGUF, %d expected from model.safetensors" % (len(infos), len(expect)))
    for gn, parts in expect.items():
        if gn not in infos:
            fail("no GGUF tensor %s (from %s)" % (gn, ", ".join(p[3] for p in parts.values())))
        slots = sorted(parts, key=lambda k: -1 if k is None else k)
        dt, shape = parts[slots[0]][0], list(parts[slots[0]][1])
        if slots != [None]:
            if slots != list(range(len(slots))):
                fail("%s: experts %r" % (gn, slots))
            shape = [len(slots)] + shape
        want_raw = b"".join(parts[k][2] for k in slots)
        ne, gt, off = infos[gn]
        if ne != list(reversed(shape)):
            fail("%s: ne %r for shape %r" % (gn, ne, shape))
        if off % align:
            fail("%s: offset %d not aligned to %d" % (gn, off, align))
        want_t = dt
        if len(shape) == 1 and dt != "F32":
            want_raw, want_t = widen(dt, want_raw), "F32"
        if arch == "gemma2" and gn.endswith("norm.weight"):
            vals = struct.unpack("<%df" % (len(want_raw) // 4), want_raw)
            want_raw = struct.pack("<%df" % len(vals), *[v + 1.0 for v in vals])
        if GGML.get(gt, ("?",))[0] != want_t:
            fail("%s: ggml type %d, want %s" % (gn, gt, want_t))
        got = data[start + off:start + off + len(want_raw)]
        if got != want_raw:
            fail("%s: bytes differ from %s" % (gn, ", ".join(p[3] for p in parts.values())))
    print("ok: GGUF v3 %s, %d metadata keys, %d tensors equal to %s (as convert_hf_to_gguf.py lays them "
          "out), %d tokens, %s tokenizer, %d merges" % (arch, nkv, nt, os.path.join(hf, "model.safetensors"),
                                                        len(toks), "llama" if spm else "gpt2", len(merges)))


if __name__ == "__main__":
    main()
