"""data.py -- vocabulary, tokenizer and synthetic task generators for the sparsekv retrieval model.

Vocabulary (354 tokens, written as a llama2.c tokenizer.bin by export.py):
  0 <unk>, 1 <s>, 2 </s>, 3..258 the byte-fallback tokens <0x00>..<0xFF>,
  259 the space piece (U+2581, written ' ' in tokenizer.bin), 260..353 the printable ASCII
  characters '!'..'~' (one piece each).
There are no multi-character pieces, so SentencePiece BPE (src/tokenizer.c) never merges:
encoding is BOS, then U+2581 for the dummy prefix, then one token per character (space ->
U+2581, printable ASCII -> its piece, any other byte -> its <0xXX> token).  `encode` below
reproduces `sparsekv tokenize` exactly (tests/python/test_train_smoke.py checks it).

Tasks (every prompt starts with BOS; the answer follows the question; see docs/MODEL_*.md):
  passkey   the prompt of eval/passkey.c, byte for byte: intro, the filler sentences cycled in
            order, the needle " The pass key is NNNNN. Remember it." before filler round(d * n),
            " What is the pass key? The pass key is"; answer " NNNNN."
  kv        "Here is a list of keys and values. Remember them." then n pairs " abc: NNNNN."
            (distinct 3-letter keys), " What is the value of abc? The value of abc is";
            answer " NNNNN." The asked pair is pair round(d * (n - 1)).
  multikey  passkey filler with 2-4 needles " The magic number for NAME is NNNNN." (distinct
            names); the asked one at depth d, the others at random places;
            " What is the magic number for NAME? The magic number for NAME is"; answer " NNNNN."
  text      simple generated stories (plain continuation; no answer span).
  repeat    "Copy: s |" with a random [a-z0-9]{4,16} string s, repeated to the end (induction).
Training-only forms with a target at every lookup (make_multi_sample; stage 2 of the preset):
  kvq       the kv prompt, then 1-8 questions in a row, each followed by its answer
  mkq       the multikey prompt, then every needle asked in a random order
  kvrep     n pairs "abc: NNNNN. ", "Again:", the same pairs in a random order
"""
import random

UNK, BOS, EOS = 0, 1, 2
BYTE0 = 3
SPACE_ID = 259
CHAR0 = 260  # '!' (0x21) .. '~' (0x7e)
VOCAB_SIZE = CHAR0 + (0x7E - 0x21 + 1)  # 354


def pieces():
    """(piece bytes as in tokenizer.bin, score) for every id."""
    out = [(b"<unk>", 0.0), (b"\n<s>\n", 0.0), (b"\n</s>\n", 0.0)]
    for b in range(256):
        out.append((("<0x%02X>" % b).encode(), 0.0))
    out.append((b" ", -1.0))
    for c in range(0x21, 0x7F):
        out.append((bytes([c]), -1.0))
    assert len(out) == VOCAB_SIZE
    return out


def encode(text, bos=True):
    """Token ids of text, equal to sparsekv's SentencePiece encoder on this vocabulary."""
    ids = [BOS] if bos else []
    ids.append(SPACE_ID)  # add_dummy_prefix
    for b in text.encode("utf-8"):
        if b == 0x20:
            ids.append(SPACE_ID)
        elif 0x21 <= b <= 0x7E:
            ids.append(CHAR0 + b - 0x21)
        else:
            ids.append(BYTE0 + b)
    return ids


def encode_cont(text):
    """Ids of text appended to an encoded prompt (no BOS, no dummy prefix)."""
    return encode(text, bos=False)[1:]


def decode(ids):
    out = bytearray()
    for t in ids:
        if t == SPACE_ID:
            out.append(0x20)
        elif CHAR0 <= t < VOCAB_SIZE:
            out.append(0x21 + t - CHAR0)
        elif BYTE0 <= t < BYTE0 + 256:
            out.append(t - BYTE0)
    s = out.decode("utf-8", "replace")
    return s[1:] if s.startswith(" ") else s


# ---- task text (must equal eval/passkey.c and eval/tasks.c) ---------------------------------
PASSKEY_INTRO = ("There is an important piece of information hidden inside a lot of irrelevant "
                 "text. Find it and remember it. I will ask you about it.")
FILLERS = [" The grass is green.", " The sky is blue.", " The sun is yellow.", " Here we go.",
           " There and back again."]
PASSKEY_QUESTION = " What is the pass key? The pass key is"
KV_INTRO = "Here is a list of keys and values. Remember them."
MK_NAMES = ["apple", "river", "tiger", "cloud", "stone", "house", "candle", "garden", "silver",
            "rabbit", "forest", "window", "pepper", "castle", "dragon", "orange", "violet",
            "summer", "winter", "button", "mirror", "rocket", "pencil", "anchor"]


def round_half_even(x):
    return int(round(x))  # Python's round is half-to-even, like skv_round_half_even


def passkey_text(key, depth, n_filler):
    before = round_half_even(depth * n_filler)
    parts = [PASSKEY_INTRO]
    for i in range(n_filler + 1):
        if i == before:
            parts.append(" The pass key is %s. Remember it." % key)
        if i < n_filler:
            parts.append(FILLERS[i % 5])
    parts.append(PASSKEY_QUESTION)
    return "".join(parts)


def kv_text(keys, values, asked):
    parts = [KV_INTRO]
    for k, v in zip(keys, values):
        parts.append(" %s: %s." % (k, v))
    parts.append(" What is the value of %s? The value of %s is" % (keys[asked], keys[asked]))
    return "".join(parts)


def multikey_text(names, values, slots, asked, n_filler):
    """Needle j goes before filler slots[j] (several may share a slot: in index order)."""
    parts = [PASSKEY_INTRO]
    for i in range(n_filler + 1):
        for j in range(len(names)):
            if slots[j] == i:
                parts.append(" The magic number for %s is %s." % (names[j], values[j]))
        if i < n_filler:
            parts.append(FILLERS[i % 5])
    parts.append(" What is the magic number for %s? The magic number for %s is" %
                 (names[asked], names[asked]))
    return "".join(parts)


# ---- plain text ----------------------------------------------------------------------------
_NAMES = ["Tom", "Lily", "Ben", "Mia", "Sam", "Anna", "Max", "Lucy", "Jack", "Emma"]
_ANIMALS = ["cat", "dog", "bird", "fox", "frog", "duck", "horse", "bear", "fish", "mouse"]
_ADJ = ["big", "small", "red", "happy", "old", "little", "green", "funny", "quiet", "shiny"]
_PLACES = ["park", "forest", "garden", "house", "river", "school", "beach", "hill", "shop", "farm"]
_THINGS = ["ball", "box", "kite", "cake", "hat", "book", "toy", "stick", "cup", "flower"]
_VERBS = ["saw", "found", "liked", "wanted", "took", "made", "lost", "shared", "held", "painted"]
_FEEL = ["happy", "sad", "tired", "excited", "scared", "proud", "hungry", "surprised"]


def story_sentence(rng, who):
    t = rng.randrange(8)
    if t == 0:
        return "%s went to the %s." % (who, rng.choice(_PLACES))
    if t == 1:
        return "%s %s a %s %s." % (who, rng.choice(_VERBS), rng.choice(_ADJ), rng.choice(_THINGS))
    if t == 2:
        return "%s was very %s." % (who, rng.choice(_FEEL))
    if t == 3:
        return "The %s %s was in the %s." % (rng.choice(_ADJ), rng.choice(_ANIMALS),
                                            rng.choice(_PLACES))
    if t == 4:
        return '"I like the %s," said %s.' % (rng.choice(_THINGS), who)
    if t == 5:
        return "%s and the %s played with the %s." % (who, rng.choice(_ANIMALS),
                                                       rng.choice(_THINGS))
    if t == 6:
        return "Then %s saw %d %ss." % (who, rng.randrange(2, 10), rng.choice(_ANIMALS))
    return "At the end of the day, %s went home." % who


def story_text(rng, n_chars):
    parts, n = [], 0
    while n < n_chars:
        who = rng.choice(_NAMES)
        s = "Once upon a time, there was a %s %s named %s." % (
            rng.choice(_ADJ), rng.choice(_ANIMALS), who)
        while n + len(s) < n_chars and rng.random() > 0.12:
            parts.append(s)
            n += len(s) + 1
            s = story_sentence(rng, who)
        parts.append(s)
        n += len(s) + 1
    return " ".join(parts)


# ---- samples -------------------------------------------------------------------------------
def _key(rng):
    return "%05d" % rng.randrange(10000, 100000)


def _fit(build, lo, hi, max_tokens):
    """Largest n in [lo, hi] with len(encode(build(n))) <= max_tokens (monotone in n)."""
    if len(encode(build(lo))) > max_tokens:
        return lo  # the shortest prompt (the caller's budget is too small for more)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if len(encode(build(mid))) <= max_tokens:
            lo = mid
        else:
            hi = mid
    return lo


def make_sample(rng, task, max_len, depth=None, full=False):
    """(ids, answer_start) with len(ids) <= max_len + 1; answer_start = index of the first answer
    token (None for plain text). full: the prompt fills the budget (else half the samples are
    shorter); depth None: uniform in [0, 1)."""
    ans_room = 8  # " NNNNN." + EOS
    budget = max_len + 1 - ans_room
    r = rng.random()
    target = rng.randint(min(budget, max(230, budget // 3)), budget) if (r < 0.5 and not full) else budget
    d = rng.random()
    depth = d if depth is None else depth
    if task == "passkey":
        key = _key(rng)
        n = _fit(lambda nf: passkey_text(key, depth, nf), 0, 2000, target)
        text, ans = passkey_text(key, depth, n), key
    elif task == "kv":
        def build(n):
            keys = _kv_keys(n)
            return kv_text(keys, ["00000"] * n, round_half_even(depth * (n - 1)))
        n = _fit(build, 1, 200, target)
        keys = _kv_keys(n, rng)
        vals = [_key(rng) for _ in range(n)]
        asked = round_half_even(depth * (n - 1))
        text, ans = kv_text(keys, vals, asked), vals[asked]
    elif task == "multikey":
        k = rng.randint(2, 4)
        names = rng.sample(MK_NAMES, k)
        vals = [_key(rng) for _ in range(k)]
        u = [rng.random() for _ in range(k)]
        asked = rng.randrange(k)
        while k > 2 and len(encode(multikey_text(names[:k], vals, [0] * k, 0, 0))) > target:
            k -= 1  # fewer needles when the budget is small
        names, vals, u, asked = names[:k], vals[:k], u[:k], min(asked, k - 1)
        u[asked] = depth

        def build(nf):
            slots = [round_half_even(x * nf) for x in u]
            return multikey_text(names, vals, slots, asked, nf)
        n = _fit(build, 0, 2000, target)
        text, ans = build(n), vals[asked]
    elif task == "repeat":
        # a random block "Copy: s |" repeated to the end: every token after the first block is
        # predictable only by looking back one period (an induction head), the mechanism all
        # three retrieval tasks build on. Short blocks (many periods per sample) matter: with
        # 4-16 characters a 4-layer model formed the head in ~300 steps of 32 x 128 tokens,
        # with 8-32 it had not after 700
        k = rng.randint(4, 16)
        s = "".join(rng.choice("abcdefghijklmnopqrstuvwxyz0123456789") for _ in range(k))
        ids = encode(("Copy: " + s + " |") * (target // (k + 8) + 2))
        return ids[: max_len + 1], None
    else:
        text = story_text(rng, target)
        ids = encode(text)[: max_len + 1]
        return ids, None
    ids = encode(text)
    a = len(ids)
    ids = ids + encode_cont(" %s." % ans) + [EOS]
    return ids[: max_len + 1], a


def _questions_sample(prompt, answers, questions):
    """ids and answer starts of a prompt that ends with the first question, then answers[0],
    then each later question with its answer. Every answer is a training target, so one sample
    teaches the lookup several times (the dense supervision of multi-query associative recall)."""
    ids = encode(prompt)
    starts = []
    for j, q in enumerate(questions):
        if j > 0:
            ids += encode_cont(q)
        starts.append(len(ids))
        ids += encode_cont(" %s." % answers[j])
    return ids + [EOS], starts


# the tasks of make_multi_sample (with an optional ":N")
MULTI_TASKS = ("kvq", "kvq1", "mkq", "kvrep", "kvrepl")


def make_multi_sample(rng, task, max_len):
    task, _, kl = task.partition(":")
    if task not in MULTI_TASKS:
        raise ValueError("not a multi-question task: %r" % task)
    return _make_multi_sample(rng, task, max_len, int(kl) if kl else 3)


def _make_multi_sample(rng, task, max_len, key_len):
    """Training-only variants of kv and multikey that ask several questions in a row: "kvq"
    (1-8 questions over the pairs) and "mkq" (every needle asked, in random order). The first
    question is asked at a uniform depth and has the evaluation prompt's exact form. "kvrep"
    lists the pairs twice. A suffix ":N" gives kvq/kvrep keys of N letters (default 3; at most
    26**N pairs then).
    Returns (ids, [answer starts]) with len(ids) <= max_len + 1."""
    budget = max_len + 1
    if task in ("kvq", "kvq1"):
        # kvq1: 1-2 questions, so that the list is as long as the evaluation's (~70-76 pairs
        # at 1,024 tokens, where kvq's 1-8 questions leave ~45-75)
        q = rng.randint(1, 8 if task == "kvq" else 2)
        per_q = len(encode_cont(" What is the value of abc? The value of abc is 00000."))
        # (kvq counts the first question twice; kvq1 does not, so that its lists are full)
        room = budget - 1 - per_q * q if task == "kvq" else budget - 9 - per_q * (q - 1)
        while q > 1 and room < 60:
            q -= 1
            room += per_q

        def build(n):
            keys = _kv_keys(n)
            return kv_text(keys, ["00000"] * n, 0)
        n = min(26 ** key_len, max(q, _fit(build, 1, 200, room)))
        keys = _kv_keys(n, rng, key_len)
        vals = [_key(rng) for _ in range(n)]
        first = round_half_even(rng.random() * (n - 1))
        rest = rng.sample([i for i in range(n) if i != first], min(q - 1, n - 1))
        asked = [first] + rest
        qs = [" What is the value of %s? The value of %s is" % (keys[i], keys[i]) for i in asked]
        ids, starts = _questions_sample(kv_text(keys, vals, first), [vals[i] for i in asked], qs)
    elif task in ("kvrep", "kvrepl"):
        # the pairs, then " Again:" and the same pairs in a random order: every repeated value
        # is found by matching its key and ':' (4 tokens) in the first listing, the associative
        # recall that kv asks for, with a target in every pair of the second half
        # (no intro: at 128 tokens it would leave room for 2 pairs). kvrepl: a listing of
        # 60-100% of what fits alone, then as many of its pairs as fit after it, so that lists
        # are as long as the evaluation's (kvrep's two listings hold ~38 pairs each at 1,024)
        per = len(encode_cont(" abc: 00000."))
        room = budget - 1 - len(encode("Again:"))
        if task == "kvrep":
            n = max(2, room // (2 * per))
        else:
            n = max(2, int(room // per * rng.uniform(0.6, 1.0)))
        n = min(n, 26 ** key_len)
        keys = _kv_keys(n, rng, key_len)
        vals = [_key(rng) for _ in range(n)]
        ids = encode("".join("%s: %s. " % kv for kv in zip(keys, vals)) + "Again:")
        starts = []
        for i in rng.sample(range(n), n):
            if task == "kvrepl" and len(ids) + per > budget - 1:
                break
            ids += encode_cont(" %s:" % keys[i])
            starts.append(len(ids))
            ids += encode_cont(" %s." % vals[i])
        ids.append(EOS)
    else:  # mkq (make_multi_sample checked the name)
        k = rng.randint(2, 4)
        names = rng.sample(MK_NAMES, k)
        vals = [_key(rng) for _ in range(k)]
        u = [rng.random() for _ in range(k)]

        def question(i):
            return " What is the magic number for %s? The magic number for %s is" % (names[i],
                                                                                   names[i])

        def build(nf):
            slots = [round_half_even(x * nf) for x in u[:k]]
            return multikey_text(names[:k], vals, slots, order[0], nf)
        while k > 1:  # fewer needles when the budget is small
            order = list(range(k))
            tail = sum(len(encode_cont(question(i) + " 00000.")) for i in order[1:])
            if len(encode(build(0))) + 8 + tail <= budget - 1:
                break
            k -= 1
        order = rng.sample(range(k), k)
        qs = [question(i) for i in order]
        tail = sum(len(encode_cont(x + " 00000.")) for x in qs[1:])
        n = _fit(build, 0, 2000, budget - 1 - 8 - tail)
        ids, starts = _questions_sample(build(n), [vals[i] for i in order], qs)
    return ids[:budget], [a for a in starts if a + 6 < budget]


def _kv_keys(n, rng=None, key_len=3):
    if rng is None:
        return ["abc"] * n  # all keys have 3 letters: the length only depends on n
    seen, keys = set(), []
    while len(keys) < n:
        k = "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(key_len))
        if k not in seen:
            seen.add(k)
            keys.append(k)
    return keys


# task mixtures by name (train.py's phases name one)
MIXES = {
    "repeat": (["repeat"], [1.0]),
    "tasks": (["passkey", "kv", "multikey", "text", "repeat"], [0.25, 0.25, 0.2, 0.1, 0.2]),
    "recall": (["kvq", "mkq", "passkey", "text", "repeat"], [0.45, 0.25, 0.1, 0.1, 0.1]),
    "recall2": (["kvrep", "kvq", "mkq", "passkey", "text"], [0.3, 0.3, 0.2, 0.1, 0.1]),
    "induct": (["repeat", "kvrep"], [0.5, 0.5]),
    "recall4": (["kvrep", "kvq", "mkq", "passkey", "text", "repeat"],
                [0.25, 0.25, 0.15, 0.2, 0.1, 0.05]),
    "recall_k1": (["kvrep:1", "kvq:1", "passkey", "text", "repeat"], [0.4, 0.3, 0.1, 0.1, 0.1]),
    "recall_k2": (["kvrep:2", "kvq:2", "mkq", "passkey", "text"], [0.4, 0.3, 0.1, 0.1, 0.1]),
    "recall_kv": (["kvrep", "kvq", "mkq", "passkey", "text"], [0.4, 0.4, 0.1, 0.05, 0.05]),
    "recall_kvq": (["kvrep", "kvq", "mkq", "passkey", "text"], [0.2, 0.6, 0.1, 0.05, 0.05]),
    "recall_long": (["kvrep", "kvq1", "mkq", "passkey", "text"], [0.3, 0.3, 0.2, 0.1, 0.1]),
    "recall_replong": (["kvrepl", "kvq", "mkq", "passkey", "text"], [0.3, 0.3, 0.2, 0.1, 0.1]),
}


def make_batch(rng, batch, max_len, mix="tasks"):
    """Lists of (ids, answer_start or [answer starts]) samples, tasks drawn from the named
    mixture."""
    tasks, weights = MIXES[mix]
    out = []
    for _ in range(batch):
        t = rng.choices(tasks, weights)[0]
        out.append(make_multi_sample(rng, t, max_len) if t.split(":")[0] in MULTI_TASKS
                   else make_sample(rng, t, max_len))
    return out
