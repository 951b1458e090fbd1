// tokdiff.mjs — lql's tokenizer against @huggingface/tokenizers on generated strings.
//
//   node tools/tokdiff.mjs TOKDUMP SEED COUNT DIR...
//
// For each DIR (tokenizer.json + tokenizer_config.json) it generates COUNT strings from
// SEED (words, contractions, digit runs, white space of every kind, scripts from Latin to
// Hangul, combining marks, emoji sequences, symbols, and the file's own added tokens),
// encodes them with and without special tokens and decodes them (kept, skip_special) with
// both, and prints the count that differ. Strings holding U+FEFF or U+0085 are counted on
// their own: there the JS library departs from the Rust crate on purpose-built tokenizers
// (TOKENIZER.md) and lql follows Rust. The first differences are printed in full.
// The package must be importable: scripts/tokdiff installs it into a scratch directory.
import { Tokenizer } from "@huggingface/tokenizers";
import { execFileSync } from "child_process";
import fs from "fs";
import os from "os";
import path from "path";

const [tokdump, seedArg, countArg, ...dirs] = process.argv.slice(2);
if (!tokdump || !dirs.length) {
  console.error("usage: node tools/tokdiff.mjs TOKDUMP SEED COUNT DIR...");
  process.exit(2);
}

function generator(seed, specials) {
  let s = (BigInt(seed) * 0x9e3779b97f4a7c15n + 1n) & ((1n << 64n) - 1n);
  const rnd = () => {   // xorshift64
    s ^= (s << 13n) & ((1n << 64n) - 1n); s ^= s >> 7n; s ^= (s << 17n) & ((1n << 64n) - 1n);
    return Number(s % 1000000007n) / 1000000007;
  };
  const ri = (n) => Math.floor(rnd() * n);
  const pick = (a) => a[ri(a.length)];
  const ranges = [[0x20, 0x7e], [0xa0, 0xff], [0x100, 0x17f], [0x300, 0x36f], [0x370, 0x3ff],
    [0x400, 0x4ff], [0x590, 0x5ff], [0x600, 0x6ff], [0x900, 0x97f], [0xe00, 0xe7f],
    [0x1100, 0x11ff], [0x2000, 0x206f], [0x2070, 0x209f], [0x20a0, 0x20cf], [0x2150, 0x218f],
    [0x2200, 0x22ff], [0x2460, 0x24ff], [0x3000, 0x303f], [0x3040, 0x30ff], [0x4e00, 0x9fff],
    [0xac00, 0xd7a3], [0xe000, 0xe0ff], [0xfe00, 0xfe0f], [0xff00, 0xffef], [0x1d400, 0x1d7ff],
    [0x1f300, 0x1faff], [0x20000, 0x2a6df], [0x1, 0x1f], [0x7f, 0x9f], [0xfeff, 0xfeff],
    [0x1f1e6, 0x1f1ff], [0xe0000, 0xe007f], [0x10000, 0x1007f], [0x1f3fb, 0x1f3ff]];
  const words = ["the", "The", "THE", "hello", "don't", "I'm", "we'll", "they've", "she'd",
    "you're", "it's", "DON'T", "WE'LL", "Paris", "café", "naïve", "東京", "Straße", "İstanbul",
    "ǅ", "ﬁ", "Ω", "K", "Å", "ŉ", "x²", "½", "Ⅻ", "٣٤٥", "１２３", "𝔘𝔫𝔦", "a", "I", "\t", "\n",
    "\r\n", "\u00a0", "\u3000", "\u200b", "\u2028", "’s", "’ll", "'S", "'T", "'Re", "'VE",
    "''", "'s'", "...", "--", "->", "{{", "}}", "&&", "/*", "\\", "\"", "```", "<0x0A>", "▁",
    "▁▁", "Ġ", "Ċ", "<s>", "</s>", "<unk>", "<|endoftext|>", "<|eot", "<|", "|>"];
  const marks = ["e\u0301", "a\u0308\u0301", "\u1100\u1161\u11a8", "👨\u200d👩\u200d👧", "👍🏽",
    "🇯🇵", "❤\ufe0f", "\u0301", "한", "ﾊﾟ", "㍿", "Ⓐ", "①", "ﬀ", "ẞ", "ς", "Σ"];
  const punct = [..."!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~«»—–…¿¡。、！？"];
  const cp = () => {
    const r = pick(ranges);
    const c = r[0] + ri(r[1] - r[0] + 1);
    return String.fromCodePoint(c >= 0xd800 && c <= 0xdfff ? 0x41 : c);
  };
  const piece = () => {
    const k = ri(12);
    if (k < 3) return pick(words);
    if (k < 5) return Array.from({ length: 1 + ri(6) }, cp).join("");
    if (k < 6) return Array.from({ length: 1 + ri(18) }, () => String(ri(10))).join("");
    if (k < 7) return pick([" ", "  ", "   ", "\t", "\n", "\n\n", " \n", "\n ", "\r", " \t ", "    "]);
    if (k < 8 && specials.length) return pick(specials);
    if (k < 9) return pick(words).repeat(1 + ri(5));
    if (k < 10) return Array.from({ length: 1 + ri(8) },
      () => (ri(2) ? String.fromCharCode(65 + ri(26)) : "") + String.fromCharCode(97 + ri(26))).join("");
    if (k < 11) return pick(marks);
    return pick(punct);
  };
  return () => Array.from({ length: 1 + ri(14) }, () => (rnd() < 0.35 ? " " : "") + piece()).join("");
}

const hex = (t) => Buffer.from(t, "utf8").toString("hex");
let failed = 0;
for (const dir of dirs) {
  const tj = JSON.parse(fs.readFileSync(path.join(dir, "tokenizer.json"), "utf8"));
  const cfgPath = path.join(dir, "tokenizer_config.json");
  const tc = fs.existsSync(cfgPath) ? JSON.parse(fs.readFileSync(cfgPath, "utf8")) : {};
  tc.clean_up_tokenization_spaces ??= false;   // lql's reading of a missing key (TOKENIZER.md)
  const tok = new Tokenizer(tj, tc);
  const gen = generator(+seedArg || 1, (tj.added_tokens || []).map((t) => t.content).slice(0, 64));
  const strings = Array.from({ length: +countArg || 1000 }, gen);
  const file = path.join(os.tmpdir(), `tokdiff-${process.pid}.json`);
  fs.writeFileSync(file, JSON.stringify(strings));
  const got = execFileSync(tokdump, [dir, file], { maxBuffer: 1 << 30 }).toString().split("\n");
  fs.unlinkSync(file);
  let differ = 0, known = 0, shown = 0;
  strings.forEach((text, i) => {
    const ids = tok.encode(text).ids;
    const dec = (o) => (ids.length ? hex(tok.decode(ids, o)) : "");
    const want = `${ids.join(",")}|${dec({})}|${dec({ skip_special_tokens: true })}|` +
      `${tok.encode(text, { add_special_tokens: false }).ids.join(",")}|`;
    if (got[i] === want) return;
    if (/[\ufeff\u0085]/u.test(text)) { known++; return; }
    differ++;
    if (shown++ < 3)
      console.log(`  ${JSON.stringify(text)}\n    lql ${got[i]}\n    ref ${want}`);
  });
  console.log(`${dir}: ${strings.length} strings, ${differ} differ` +
    (known ? ` (and ${known} holding U+FEFF or U+0085, where lql follows Rust)` : ""));
  failed += differ;
}
process.exit(failed ? 1 : 0);
