#!/usr/bin/env python3
"""The reference renderer for test_serve_jinja: Debian's python3-jinja2 configured as Hugging
Face's apply_chat_template configures it (sandboxed, trim_blocks, lstrip_blocks, tojson as
json.dumps without HTML escaping, raise_exception).

usage: jinja_ref.py TOKENIZER_CONFIG_OR_TEMPLATE CONVERSATIONS.json
Prints a JSON array, one {"text": …} or {"error": …} per conversation; bos_token and
eos_token come from the tokenizer config (empty for a bare template file).
"""
import json
import sys

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def token(v):
    return v.get("content", "") if isinstance(v, dict) else (v or "")


src, convs = sys.argv[1], json.load(open(sys.argv[2]))
if src.endswith(".json"):
    cfg = json.load(open(src))
    template, bos, eos = cfg["chat_template"], token(cfg.get("bos_token")), token(cfg.get("eos_token"))
else:
    template, bos, eos = open(src).read(), "", ""
env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
env.filters["tojson"] = tojson
env.globals["raise_exception"] = raise_exception
t = env.from_string(template)
out = []
for c in convs:
    vars_ = {k: v for k, v in c.items() if k != "only"}
    vars_.update(bos_token=bos, eos_token=eos)
    try:
        out.append({"text": t.render(**vars_)})
    except Exception as e:      # the template raised, or a type error: both sides must fail
        out.append({"error": str(e)})
print(json.dumps(out))
