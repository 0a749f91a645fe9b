/* chat.c — chat templates without Jinja: the model's tokenizer.chat_template is recognised by
 * markers and one of the built-in formats writes the conversation.
 *
 *   llama3  (template contains "<|start_header_id|>"):
 *       <|begin_of_text|><|start_header_id|>ROLE<|end_header_id|>\n\nCONTENT<|eot_id|> ...
 *       generation prompt: <|start_header_id|>assistant<|end_header_id|>\n\n
 *       (Meta's template strips each content's surrounding whitespace.)
 *   chatml  (template contains "<|im_start|>"): <|im_start|>ROLE\nCONTENT<|im_end|>\n ...
 *       generation prompt: <|im_start|>assistant\n. When the template writes a default system
 *       message for conversations without one (Qwen2/2.5: "You are a helpful assistant" or
 *       "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."), so does this.
 *   phi3    (template contains "<|user|>" and "<|end|>"):
 *       [<s>]<|system|>\nCONTENT<|end|>\n<|user|>\nCONTENT<|end|>\n<|assistant|>\nCONTENT<|end|>\n
 *       generation prompt: <|assistant|>\n. <s> first when the template writes bos_token.
 *   mistral (template contains "[INST]" and "[/INST]", with no space after "[INST]" and no
 *       "[SYSTEM_PROMPT]": Mistral NeMo's, Ministral 8B's):
 *       <s>[INST]USER[/INST]ASSISTANT</s>[INST]SYSTEM\n\nUSER[/INST]
 *       the system message (first only) goes before the last message when that is the user's
 *       (else nowhere), then user and assistant must alternate from a user; no generation
 *       prompt ([/INST] ends the user's turn). Mistral 7B's "[INST] " and Small 3's
 *       [SYSTEM_PROMPT] formats are not built in.
 * A format may also be named ("llama3", "chatml", "phi3", "mistral") for models whose GGUF has
 * no template.
 */
#include "tokenizer/internal.h"

#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

typedef enum chat_kind { CHAT_NONE, CHAT_LLAMA3, CHAT_CHATML, CHAT_PHI3, CHAT_MISTRAL } chat_kind;

/* The special token that opens a message in each format (also what recognises a template). */
static const char *const OPENER[] = {[CHAT_LLAMA3] = "<|start_header_id|>",
                                     [CHAT_CHATML] = "<|im_start|>",
                                     [CHAT_PHI3] = "<|user|>",
                                     [CHAT_MISTRAL] = "[INST]"};

static chat_kind detect(const char *t) {
    if (!t) return CHAT_NONE;
    if (strstr(t, OPENER[CHAT_LLAMA3]) && strstr(t, "<|end_header_id|>")) return CHAT_LLAMA3;
    if (strstr(t, OPENER[CHAT_CHATML])) return CHAT_CHATML;
    if (strstr(t, OPENER[CHAT_PHI3]) && strstr(t, "<|end|>")) return CHAT_PHI3;
    if (strstr(t, OPENER[CHAT_MISTRAL]) && strstr(t, "[/INST]") && !strstr(t, "[INST] ") &&
        !strstr(t, "[SYSTEM_PROMPT]"))
        return CHAT_MISTRAL;
    /* llama.cpp's --mistral-format conversion stores the template's name, not its text */
    if (!strcmp(t, "mistral-v3-tekken")) return CHAT_MISTRAL;
    return CHAT_NONE;
}

/* The template text tmpl stands for: a format name, a template's text, or NULL for the
 * vocabulary's own. */
static chat_kind resolve(const skv_vocab *v, const char *tmpl, skv_err *err) {
    if (tmpl) {
        if (!strcmp(tmpl, "llama3")) return CHAT_LLAMA3;
        if (!strcmp(tmpl, "chatml")) return CHAT_CHATML;
        if (!strcmp(tmpl, "phi3")) return CHAT_PHI3;
        if (!strcmp(tmpl, "mistral")) return CHAT_MISTRAL;
    } else {
        tmpl = v->chat_template;
        if (!tmpl) {
            skv_err_set(err, SKV_ERR_UNSUPPORTED,
                        "the model has no chat template (tokenizer.chat_template is missing); "
                        "name one of the built-in formats: llama3, chatml, phi3, mistral");
            return CHAT_NONE;
        }
    }
    chat_kind k = detect(tmpl);
    if (k == CHAT_NONE)
        skv_err_set(err, SKV_ERR_UNSUPPORTED,
                    "chat template not recognised (built in: llama3, chatml, phi3, mistral; the "
                    "template "
                    "starts '%.60s')",
                    tmpl);
    return k;
}

const char *skv_chat_template_name(const skv_vocab *v, const char *tmpl, skv_err *err) {
    if (!v && !tmpl) {
        skv_err_set(err, SKV_ERR_INVALID_ARG, "no vocabulary and no template given");
        return NULL;
    }
    switch (resolve(v, tmpl, err)) {
    case CHAT_LLAMA3:
        return "llama3";
    case CHAT_CHATML:
        return "chatml";
    case CHAT_PHI3:
        return "phi3";
    case CHAT_MISTRAL:
        return "mistral";
    default:
        return NULL;
    }
}

const char *skv_chat_template_opener(const skv_vocab *v, const char *tmpl) {
    if (!v && !tmpl) return NULL;
    chat_kind k = resolve(v, tmpl, NULL);
    return k == CHAT_NONE ? NULL : OPENER[k];
}

/* An output buffer that counts what does not fit, and (when skip is set) where the messages'
 * contents lie in it. */
typedef struct obuf {
    char *p;
    size_t cap, n;
    size_t (*skip)[2]; /* [n_messages] [begin, end) of each content, ascending */
    int n_skip;
} obuf;

static void put(obuf *o, const char *s, size_t len) {
    if (o->n < o->cap) {
        size_t k = o->cap - o->n < len ? o->cap - o->n : len;
        memcpy(o->p + o->n, s, k);
    }
    o->n += len;
}

static void puts_(obuf *o, const char *s) {
    put(o, s, strlen(s));
}

/* A message's content: text, whose special-token text skv_chat_tokenize leaves as text. */
static void put_content(obuf *o, const char *s, size_t len) {
    if (o->skip) {
        o->skip[o->n_skip][0] = o->n;
        o->skip[o->n_skip++][1] = o->n + len;
    }
    put(o, s, len);
}

/* A content without leading and trailing whitespace (Jinja's |trim). */
static void put_trimmed(obuf *o, const char *s) {
    size_t a = 0, b = strlen(s);
    while (a < b && strchr(" \t\n\r\f\v", s[a])) a++;
    while (b > a && strchr(" \t\n\r\f\v", s[b - 1])) b--;
    put_content(o, s + a, b - a);
}

/* One message: pre ROLE mid CONTENT end (Llama 3 trims the content). */
static void put_turn(obuf *o, const char *pre, const skv_chat_message *m, const char *mid,
                     bool trim, const char *end) {
    puts_(o, pre);
    puts_(o, m->role);
    puts_(o, mid);
    if (trim)
        put_trimmed(o, m->content);
    else
        put_content(o, m->content, strlen(m->content));
    puts_(o, end);
}

static bool known_role(const char *r) {
    return !strcmp(r, "system") || !strcmp(r, "user") || !strcmp(r, "assistant");
}

/* The conversation into o (its size counted past o->cap); false with err filled on bad
 * arguments. */
static bool render(const skv_vocab *v, const char *tmpl, const skv_chat_message *msg, int n,
                   bool add_gen, obuf *o_, skv_err *err);

int skv_chat_format(const skv_vocab *v, const char *tmpl, const skv_chat_message *msg, int n,
                    bool add_gen, char *buf, int buf_size, skv_err *err) {
    const char *bad = buf_size < 0           ? "a negative buffer size"
                      : !buf && buf_size > 0 ? "buf is NULL with a buffer size above 0"
                                             : NULL;
    if (bad) {
        skv_err_set(err, SKV_ERR_INVALID_ARG, "skv_chat_format: %s (n_messages %d, buf_size %d)",
                    bad, n, buf_size);
        return INT_MIN;
    }
    obuf o = {buf, (size_t)buf_size, 0, NULL, 0};
    if (!render(v, tmpl, msg, n, add_gen, &o, err)) return INT_MIN;
    if (o.n > INT_MAX - 1) {
        skv_err_set(err, SKV_ERR_INVALID_ARG, "the formatted conversation is too long");
        return INT_MIN;
    }
    if (o.n > (size_t)buf_size) return -(int)o.n;
    if (o.n < (size_t)buf_size) buf[o.n] = '\0';
    return (int)o.n;
}

int skv_chat_tokenize(const skv_vocab *v, const char *tmpl, const skv_chat_message *msg, int n,
                      bool add_gen, int32_t *tokens, int n_max, skv_err *err) {
    if (!v || n_max < 0 || (!tokens && n_max > 0)) {
        skv_err_set(err, SKV_ERR_INVALID_ARG, "skv_chat_tokenize: %s (n_max %d)",
                    !v          ? "no vocabulary"
                    : n_max < 0 ? "a negative n_max"
                                : "tokens is NULL",
                    n_max);
        return INT_MIN;
    }
    obuf o = {NULL, 0, 0, NULL, 0};
    if (!render(v, tmpl, msg, n, add_gen, &o, err)) return INT_MIN; /* its size */
    if (o.n > INT_MAX - 1) {
        skv_err_set(err, SKV_ERR_INVALID_ARG, "the formatted conversation is too long");
        return INT_MIN;
    }
    const size_t len = o.n;
    o = (obuf){malloc(len + 1), len, 0, malloc(((size_t)n + 1) * sizeof *o.skip), 0};
    int r = INT_MIN;
    if (!o.p || !o.skip) {
        skv_err_set(err, SKV_ERR_NOMEM, "out of memory for a conversation of %zu bytes", len);
    } else if (render(v, tmpl, msg, n, add_gen, &o, err)) {
        r = skv_tokenize_skipping(v, o.p, len, (const size_t(*)[2])o.skip, o.n_skip, tokens, n_max);
        if (r == INT_MIN) skv_err_set(err, SKV_ERR_NOMEM, "the conversation does not encode");
    }
    free(o.p);
    free(o.skip);
    return r;
}

static bool render(const skv_vocab *v, const char *tmpl, const skv_chat_message *msg, int n,
                   bool add_gen, obuf *o_, skv_err *err) {
    const char *bad = !v && !tmpl     ? "no vocabulary and no template given"
                      : n < 0         ? "a negative message count"
                      : !msg && n > 0 ? "messages is NULL"
                                      : NULL;
    if (bad) {
        skv_err_set(err, SKV_ERR_INVALID_ARG, "chat: %s (n_messages %d)", bad, n);
        return false;
    }
    chat_kind kind = resolve(v, tmpl, err);
    if (kind == CHAT_NONE) return false;
    for (int i = 0; i < n; i++) {
        if (!msg[i].role || !msg[i].content) {
            skv_err_set(err, SKV_ERR_INVALID_ARG, "chat message %d has no role or no content", i);
            return false;
        }
        if (!known_role(msg[i].role)) {
            skv_err_set(err, SKV_ERR_INVALID_ARG,
                        "chat message %d has role '%.40s' (expected system, user or assistant)", i,
                        msg[i].role);
            return false;
        }
    }
    /* Variants of a format are read from the template's text (a default system message, BOS);
     * a format given by name is the plain one (Phi-3's with BOS). */
    const char *t = tmpl ? tmpl : v->chat_template;
    if (tmpl && detect(tmpl) == CHAT_NONE) t = kind == CHAT_PHI3 ? "{{ bos_token }}" : "";
    obuf *o = o_;
    switch (kind) {
    case CHAT_LLAMA3:
        puts_(o, "<|begin_of_text|>");
        for (int i = 0; i < n; i++)
            put_turn(o, "<|start_header_id|>", &msg[i], "<|end_header_id|>\n\n", true,
                     "<|eot_id|>");
        if (add_gen) puts_(o, "<|start_header_id|>assistant<|end_header_id|>\n\n");
        break;
    case CHAT_CHATML: {
        const char *def = NULL;
        if (strstr(t, "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."))
            def = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.";
        else if (strstr(t, "You are a helpful assistant"))
            def = "You are a helpful assistant";
        if (def && (n == 0 || strcmp(msg[0].role, "system") != 0)) {
            puts_(o, "<|im_start|>system\n");
            puts_(o, def);
            puts_(o, "<|im_end|>\n");
        }
        for (int i = 0; i < n; i++)
            put_turn(o, "<|im_start|>", &msg[i], "\n", false, "<|im_end|>\n");
        if (add_gen) puts_(o, "<|im_start|>assistant\n");
        break;
    }
    case CHAT_PHI3:
        if (strstr(t, "bos_token")) { /* without a vocabulary, Phi-3's own BOS */
            const char *bos = v ? skv_vocab_piece(v, v->bos) : "<s>";
            if (bos) puts_(o, bos);
        }
        for (int i = 0; i < n; i++) put_turn(o, "<|", &msg[i], "|>\n", false, "<|end|>\n");
        if (add_gen) puts_(o, "<|assistant|>\n");
        break;
    case CHAT_MISTRAL: {
        /* Mistral NeMo's template: an optional system message first, then user and assistant in
         * turns from a user (it raises otherwise, and so does this) */
        const bool sys = n > 0 && !strcmp(msg[0].role, "system");
        for (int i = sys; i < n; i++) {
            const bool user = !strcmp(msg[i].role, "user");
            if (!user && strcmp(msg[i].role, "assistant")) {
                skv_err_set(err, SKV_ERR_INVALID_ARG,
                            "chat message %d is a system message: the mistral format takes one, "
                            "first",
                            i);
                return false;
            }
            if (user != ((i - sys) % 2 == 0)) {
                skv_err_set(err, SKV_ERR_INVALID_ARG,
                            "chat message %d: after the optional system message, the mistral "
                            "format needs user and assistant in turns, from a user",
                            i);
                return false;
            }
        }
        puts_(o, "<s>");
        for (int i = sys; i < n; i++) {
            if (!strcmp(msg[i].role, "user")) {
                puts_(o, "[INST]");
                if (sys && i == n - 1) { /* the template's loop.last: the last message */
                    put_content(o, msg[0].content, strlen(msg[0].content));
                    puts_(o, "\n\n");
                }
                put_content(o, msg[i].content, strlen(msg[i].content));
                puts_(o, "[/INST]");
            } else {
                put_content(o, msg[i].content, strlen(msg[i].content));
                puts_(o, "</s>");
            }
        }
        break;
    }
    default:
        return false; /* not reached: resolve refused it */
    }
    return true;
}
