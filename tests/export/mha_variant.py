#!/usr/bin/env python3
"""mha_variant.py SRC DST — a copy of the Hugging Face checkpoint SRC with multi-head
attention: num_key_value_heads set to num_attention_heads and every k_proj / v_proj
(and k_norm, when the model norms the whole k projection) regrown to the query width with
seeded normal(0, 0.2) weights (norms 1 ± 0.1). Python standard library only, deterministic.
test_export.c uses it for OLMo 2, whose llama.cpp architecture sizes k and its norm by
the hidden size (no grouped-query attention) while the olmo2 fixture has 2 kv heads.
"""
import json
import os
import random
import shutil
import struct
import sys


def main():
    src, dst = sys.argv[1], sys.argv[2]
    shutil.copytree(src, dst)
    cfg = json.load(open(os.path.join(src, "config.json")))
    width = cfg["num_attention_heads"] * cfg.get("head_dim", cfg["hidden_size"] // cfg["num_attention_heads"])
    cfg["num_key_value_heads"] = cfg["num_attention_heads"]
    with open(os.path.join(dst, "config.json"), "w") as f:
        json.dump(cfg, f, indent=1)
    raw = open(os.path.join(src, "model.safetensors"), "rb").read()
    n = struct.unpack_from("<Q", raw, 0)[0]
    head = json.loads(raw[8:8 + n])
    meta = head.pop("__metadata__", None)
    rng = random.Random(1)
    out, blobs, off = {}, [], 0
    for name, v in head.items():
        data, shape = raw[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]], v["shape"]
        if v["dtype"] != "F32" and name.endswith(("k_proj.weight", "v_proj.weight", "k_norm.weight")):
            sys.exit("mha_variant: %s is %s; only F32 checkpoints are regrown" % (name, v["dtype"]))
        if name.endswith(("k_proj.weight", "v_proj.weight")):
            shape = [width, shape[1]]
            data = struct.pack("<%df" % (width * shape[1]), *[rng.gauss(0, 0.2) for _ in range(width * shape[1])])
        elif name.endswith("k_norm.weight") and shape[0] != width:
            shape = [width]
            data = struct.pack("<%df" % width, *[1 + rng.gauss(0, 0.1) for _ in range(width)])
        out[name] = {"dtype": v["dtype"], "shape": shape, "data_offsets": [off, off + len(data)]}
        off += len(data)
        blobs.append(data)
    if meta is not None:
        out["__metadata__"] = meta
    text = json.dumps(out).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(os.path.join(dst, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


if __name__ == "__main__":
    main()
