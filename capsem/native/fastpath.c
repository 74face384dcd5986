/* capsem's compiled fast path: the reading of ordinary Server-Sent Events in one native pass.
 *
 * `frame_plain(buf, start, end, ident, event_type, kind)` reads buf[start:end] (LF line ends only,
 * `end` just after a blank line) when it is made of ordinary events only: blank lines, then for
 * each event an optional `event: NAME` line, one `data: VALUE` line and at least one blank line.
 * It returns the list of their `event_type(NAME or None, VALUE, ident)` (values decoded from UTF-8
 * with "replace", as the Python framer decodes them), or None when anything else is there: the
 * Python framer (addons/framing.py) then reads the text line by line, the reference this code must
 * agree with byte for byte.
 *
 * With kind == 1 (Anthropic Messages), an event whose data is exactly a text delta
 * (`{"type":"content_block_delta","index":N,"delta":{"type":"text_delta","text":"..."}}`, keys in
 * that order, JSON blanks anywhere between tokens, nothing else) is not built as an event: its text
 * is decoded here and consecutive texts are returned as one Python list of str in place of their
 * events (an empty text, which means nothing, is left out). Anything not exactly that shape (an
 * escape in a key, another key, a lone surrogate, a control character, invalid UTF-8) is returned
 * as an ordinary event, for the Python reader to decide.
 *
 * With kind 2 (OpenAI Chat), 3 (OpenAI Responses) or 4 (Gemini), and `state` the reader's (id,
 * model) for 2 and 4, a chunk that holds nothing but text is read here too (see "the other
 * providers' text chunks" below): the runs are a list of str (2), [(item id, content index), str...]
 * (3), and [texts, thoughts, the last usageMetadata's raw JSON or None, the last finishReason or
 * None] (4); each provider's wire reader applies them (`native_run`).
 *
 * `delta_fields(text)` is `capsem.stream_scrub._DELTA_RE.findall(text)`: the (key, raw JSON string
 * value) of every delta field of a streamed body, found left to right without overlap, as the
 * regular expression finds them (a test compares both on generated text). `delta_channels(text)` is
 * what `scrub_deltas` makes of those: the non-empty values, each decoded as `json.loads` decodes
 * it (one it refuses is left out), listed per key in order. `delta_places(text, keys)` says where
 * the raw values of the same fields lie, for the keys in `keys`: (key, start, end), in order,
 * without decoding them (the values are `delta_channels`' lists, in the same order);
 * `delta_split(text)` is (the text with each of those raw values turned to blanks, at most
 * `BLANK_KEEP` of them, `delta_channels`), in one walk (the text itself when it has none).
 *
 * `note_ends(noted, ends, times, started, limit)` is `StreamRead.feed_held`'s loop
 * (addons/recorder/streams.py): for each chunk whose decoded end is past the last noted one, while
 * `noted` holds fewer than `limit`, it appends (end, max(0, round((at - started) * 1000))), rounding
 * half to even as Python's `round` does.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#define FASTPATH_VERSION 14

typedef struct {
    char *buf;
    Py_ssize_t len, cap;
} Out;

static int out_put(Out *o, const char *p, Py_ssize_t n) {
    if (o->len + n > o->cap) {
        Py_ssize_t cap = o->cap ? o->cap : 256;
        while (cap < o->len + n) cap *= 2;
        char *b = PyMem_Realloc(o->buf, cap);
        if (b == NULL) return -1;
        o->buf = b;
        o->cap = cap;
    }
    memcpy(o->buf + o->len, p, n);
    o->len += n;
    return 0;
}

static inline const char *skip_ws(const char *p, const char *e) {
    while (p < e && (*p == ' ' || *p == '\t')) p++;
    return p;
}

static inline const char *lit(const char *p, const char *e, const char *s, Py_ssize_t n) {
    if (e - p < n || memcmp(p, s, n) != 0) return NULL;
    return p + n;
}

/* The value of the four hex digits at text[p:p + 4] (ASCII ones, as JSON's), or -1. */
static inline long hex4(int kind, const void *data, Py_ssize_t p) {
    long value = 0;
    for (Py_ssize_t k = p; k < p + 4; k++) {
        Py_UCS4 h = PyUnicode_READ(kind, data, k);
        if (h >= '0' && h <= '9') value = value * 16 + (long)(h - '0');
        else if (h >= 'a' && h <= 'f') value = value * 16 + (long)(h - 'a' + 10);
        else if (h >= 'A' && h <= 'F') value = value * 16 + (long)(h - 'A' + 10);
        else return -1;
    }
    return value;
}

static int put_utf8(Out *o, unsigned int cp) {
    char b[4];
    Py_ssize_t n;
    if (cp < 0x80) { b[0] = (char)cp; n = 1; }
    else if (cp < 0x800) { b[0] = (char)(0xC0 | (cp >> 6)); b[1] = (char)(0x80 | (cp & 0x3F)); n = 2; }
    else if (cp < 0x10000) {
        b[0] = (char)(0xE0 | (cp >> 12)); b[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        b[2] = (char)(0x80 | (cp & 0x3F)); n = 3;
    } else {
        b[0] = (char)(0xF0 | (cp >> 18)); b[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
        b[2] = (char)(0x80 | ((cp >> 6) & 0x3F)); b[3] = (char)(0x80 | (cp & 0x3F)); n = 4;
    }
    return out_put(o, b, n);
}

/* Whether none of the 8 bytes at p is a quote, a backslash, a control character or non-ASCII
 * (a string's plain run, 8 bytes a step). */
static inline int plain8(const char *p) {
    uint64_t v, ones = 0x0101010101010101ULL, highs = 0x8080808080808080ULL;
    memcpy(&v, p, 8);
    uint64_t q = v ^ (ones * '"'), b = v ^ (ones * '\\');
    uint64_t bad = (v & highs) | ((v - ones * 0x20) & ~v & highs) | ((q - ones) & ~q & highs) | ((b - ones) & ~b & highs);
    return bad == 0;
}

/* A JSON string from p (just after its opening quote) into o (UTF-8); returns the byte after the
 * closing quote, NULL when it is not a string msgspec reads the same way (see the module doc), or
 * (const char *)1 on a memory error. */
static const char *json_string(const char *p, const char *e, Out *o) {
    o->len = 0;
    while (p < e) {
        const char *run = p;
        while (e - p >= 8 && plain8(p)) p += 8;
        while (p < e && *p != '"' && *p != '\\' && (unsigned char)*p >= 0x20) p++;
        if (p > run && out_put(o, run, p - run) < 0) return (const char *)1;
        if (p >= e || (unsigned char)*p < 0x20) return NULL;
        if (*p == '"') return p + 1;
        /* an escape */
        if (e - p < 2) return NULL;
        char c = p[1];
        char one;
        switch (c) {
        case '"': one = '"'; break;
        case '\\': one = '\\'; break;
        case '/': one = '/'; break;
        case 'b': one = '\b'; break;
        case 'f': one = '\f'; break;
        case 'n': one = '\n'; break;
        case 'r': one = '\r'; break;
        case 't': one = '\t'; break;
        case 'u': {
            if (e - p < 6) return NULL;
            int cp = (int)hex4(PyUnicode_1BYTE_KIND, p + 2, 0);
            if (cp < 0) return NULL;
            p += 6;
            if (cp >= 0xD800 && cp <= 0xDBFF) { /* a pair, or the reference decides */
                if (e - p < 6 || p[0] != '\\' || p[1] != 'u') return NULL;
                int lo = (int)hex4(PyUnicode_1BYTE_KIND, p + 2, 0);
                if (lo < 0xDC00 || lo > 0xDFFF) return NULL;
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                p += 6;
            } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
                return NULL;
            }
            if (put_utf8(o, (unsigned int)cp) < 0) return (const char *)1;
            continue;
        }
        default: return NULL;
        }
        if (out_put(o, &one, 1) < 0) return (const char *)1;
        p += 2;
    }
    return NULL;
}

#define WS() (p = skip_ws(p, e))

/* The text of an Anthropic text delta held in data[p:e], as a new str; Py_None (borrowed) when
 * the data is not exactly that shape; NULL with an exception set on a memory error. */
static PyObject *anthropic_text(const char *p, const char *e, Out *o) {
    PyObject *none = Py_None;
#define LIT(s) do { p = lit(p, e, s, (Py_ssize_t)sizeof(s) - 1); if (p == NULL) return none; } while (0)
    WS(); LIT("{"); WS(); LIT("\"type\""); WS(); LIT(":"); WS(); LIT("\"content_block_delta\""); WS();
    LIT(","); WS(); LIT("\"index\""); WS(); LIT(":"); WS();
    const char *digits = p;
    while (p < e && *p >= '0' && *p <= '9') p++;
    if (p == digits || p - digits > 18 || (p - digits > 1 && *digits == '0')) return none;
    WS(); LIT(","); WS(); LIT("\"delta\""); WS(); LIT(":"); WS(); LIT("{"); WS(); LIT("\"type\""); WS();
    LIT(":"); WS(); LIT("\"text_delta\""); WS(); LIT(","); WS(); LIT("\"text\""); WS(); LIT(":"); WS();
    LIT("\"");
    p = json_string(p, e, o);
    if (p == (const char *)1) return PyErr_NoMemory();
    if (p == NULL) return none;
    WS(); LIT("}"); WS(); LIT("}"); WS();
    if (p != e) return none;
    PyObject *text = PyUnicode_DecodeUTF8(o->buf ? o->buf : "", o->len, "strict");
    if (text == NULL) { /* invalid UTF-8: the reference decides */
        if (!PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) return NULL;
        PyErr_Clear();
        return none;
    }
    return text;
}

/* ---- the other providers' text chunks (kinds 2: OpenAI Chat, 3: OpenAI Responses, 4: Gemini) ----
 *
 * A chunk is read whole by a small strict JSON reader: it takes only what msgspec and json both
 * read the same way (no escape in a key, no lone surrogate, no control character, valid UTF-8,
 * numbers of at most 24 characters, at most 64 levels) and fails on anything else; the chunk is
 * then handed back as an ordinary event. A chunk is taken here only when it holds nothing but
 * text (see `chat_chunk`, `responses_chunk`, `gemini_chunk`) and, for Chat and Gemini, its id and
 * model are those the reader last said (`Meta`): the caller passes the reader's (id, model), and
 * after each chunk handed back this code follows what the reader will have made of it (its id and
 * model, or "not known": then every later chunk of the call is handed back). */

#define J_DEPTH 64
#define J_MAXTEXT 8

typedef struct {
    const char *s; /* a JSON string's content (between its quotes) */
    Py_ssize_t n;
    int escaped;
} Span;

/* Length of the valid UTF-8 sequence at p (its first byte >= 0x80), 0 when invalid (Python's
 * strict decoder's rules: no overlong form, no surrogate, nothing above U+10FFFF). */
static inline int utf8_seq(const unsigned char *p, const unsigned char *e) {
    unsigned char c = p[0];
    if (c >= 0xC2 && c <= 0xDF) return (e - p >= 2 && (p[1] & 0xC0) == 0x80) ? 2 : 0;
    if (c >= 0xE0 && c <= 0xEF) {
        if (e - p < 3 || (p[2] & 0xC0) != 0x80) return 0;
        unsigned char lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
        return (p[1] >= lo && p[1] <= hi) ? 3 : 0;
    }
    if (c >= 0xF0 && c <= 0xF4) {
        if (e - p < 4 || (p[2] & 0xC0) != 0x80 || (p[3] & 0xC0) != 0x80) return 0;
        unsigned char lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
        return (p[1] >= lo && p[1] <= hi) ? 4 : 0;
    }
    return 0;
}

/* A JSON string at *pp (its opening quote): its content span; *pp moves past it. -1 when it is
 * not one this reader takes. */
static int j_string(const char **pp, const char *e, Span *out) {
    const char *p = *pp + 1;
    out->s = p;
    out->escaped = 0;
    for (;;) {
        while (e - p >= 8 && plain8(p)) p += 8;
        while (p < e && *p != '"' && *p != '\\' && (unsigned char)*p >= 0x20 && (unsigned char)*p < 0x80) p++;
        if (p >= e) return -1;
        unsigned char c = (unsigned char)*p;
        if (c == '"') break;
        if (c < 0x20) return -1;
        if (c == '\\') {
            out->escaped = 1;
            if (e - p < 2) return -1;
            char x = p[1];
            if (x == 'u') {
                if (e - p < 6) return -1;
                int cp = (int)hex4(PyUnicode_1BYTE_KIND, p + 2, 0);
                if (cp < 0 || (cp >= 0xDC00 && cp <= 0xDFFF)) return -1;
                p += 6;
                if (cp >= 0xD800 && cp <= 0xDBFF) { /* only a whole pair */
                    if (e - p < 6 || p[0] != '\\' || p[1] != 'u') return -1;
                    int lo = (int)hex4(PyUnicode_1BYTE_KIND, p + 2, 0);
                    if (lo < 0xDC00 || lo > 0xDFFF) return -1;
                    p += 6;
                }
                continue;
            }
            if (!strchr("\"\\/bfnrt", x) || x == 0) return -1;
            p += 2;
            continue;
        }
        int n = utf8_seq((const unsigned char *)p, (const unsigned char *)e);
        if (n == 0) return -1;
        p += n;
    }
    out->n = p - out->s;
    *pp = p + 1;
    return 0;
}

static int j_number(const char **pp, const char *e) {
    const char *p = *pp, *first = p;
    if (p < e && *p == '-') p++;
    if (p >= e) return -1;
    if (*p == '0') p++;
    else if (*p >= '1' && *p <= '9') while (p < e && *p >= '0' && *p <= '9') p++;
    else return -1;
    if (p < e && *p == '.') {
        const char *d = ++p;
        while (p < e && *p >= '0' && *p <= '9') p++;
        if (p == d) return -1;
    }
    if (p < e && (*p == 'e' || *p == 'E')) {
        p++;
        if (p < e && (*p == '+' || *p == '-')) p++;
        const char *d = p;
        while (p < e && *p >= '0' && *p <= '9') p++;
        if (p == d) return -1;
    }
    if (p - first > 24) return -1;
    *pp = p;
    return 0;
}

static int j_skip(const char **pp, const char *e, int depth);

/* The next key of an object: *pp just after `{` (first) or after a value; returns 1 with the key
 * and *pp just after its colon and blanks, 0 after the closing `}`, -1 on anything else (a key
 * with an escape included: it might spell a key this reader looks for). */
static int j_key(const char **pp, const char *e, int *first, Span *key) {
    const char *p = skip_ws(*pp, e);
    if (p >= e) return -1;
    if (*first) {
        *first = 0;
        if (*p == '}') { *pp = p + 1; return 0; }
    } else {
        if (*p == '}') { *pp = p + 1; return 0; }
        if (*p != ',') return -1;
        p = skip_ws(p + 1, e);
    }
    if (p >= e || *p != '"' || j_string(&p, e, key) < 0 || key->escaped) return -1;
    p = skip_ws(p, e);
    if (p >= e || *p != ':') return -1;
    *pp = skip_ws(p + 1, e);
    return 1;
}

/* Array items: *pp just after `[` (first) or after an item; 1 with *pp at the next item, 0 after `]`. */
static int j_item(const char **pp, const char *e, int *first) {
    const char *p = skip_ws(*pp, e);
    if (p >= e) return -1;
    if (*p == ']') { *pp = p + 1; return 0; }
    if (*first) *first = 0;
    else {
        if (*p != ',') return -1;
        p = skip_ws(p + 1, e);
    }
    *pp = p;
    return 1;
}

static int j_skip(const char **pp, const char *e, int depth) {
    const char *p = skip_ws(*pp, e);
    if (p >= e || depth > J_DEPTH) return -1;
    Span s;
    int first = 1, r;
    switch (*p) {
    case '"':
        if (j_string(&p, e, &s) < 0) return -1;
        break;
    case '{':
        p++;
        while ((r = j_key(&p, e, &first, &s)) == 1)
            if (j_skip(&p, e, depth + 1) < 0) return -1;
        if (r < 0) return -1;
        break;
    case '[':
        p++;
        while ((r = j_item(&p, e, &first)) == 1)
            if (j_skip(&p, e, depth + 1) < 0) return -1;
        if (r < 0) return -1;
        break;
    case 't': if ((p = lit(p, e, "true", 4)) == NULL) return -1; break;
    case 'f': if ((p = lit(p, e, "false", 5)) == NULL) return -1; break;
    case 'n': if ((p = lit(p, e, "null", 4)) == NULL) return -1; break;
    default:
        if (j_number(&p, e) < 0) return -1;
    }
    *pp = p;
    return 0;
}

#define KEY_IS(k, word) ((k).n == (Py_ssize_t)sizeof(word) - 1 && memcmp((k).s, word, sizeof(word) - 1) == 0)
#define IS_NULL(p, e) ((e) - (p) >= 4 && memcmp(p, "null", 4) == 0)

/* What a chunk holds, as far as the readers' fast paths care. */
typedef struct {
    int plain;    /* nothing but text (and, for Gemini, a usage report) */
    int meta_ok;  /* the reader's (id, model) after it is (id, model) below */
    int id_kind, model_kind; /* 0: absent or null, 1: a string, 2: anything else */
    Span id, model;
    int ntext;
    Span text[J_MAXTEXT];
    int thought[J_MAXTEXT];
    const char *usage; /* Gemini: the raw usageMetadata object */
    Py_ssize_t usage_n;
    int has_finish;    /* Gemini: a finishReason string (empty or not) */
    Span finish;
    long long index;  /* Responses: content_index */
} Chunk;

/* A value that is null, or a string kept in *span (kind 1), or anything else (kind 2). */
static int j_meta_value(const char **pp, const char *e, int *kind, Span *span) {
    const char *p = *pp;
    if (*kind != -1) return -1; /* said twice */
    if (p < e && *p == '"') {
        *kind = 1;
        return j_string(pp, e, span);
    }
    *kind = IS_NULL(p, e) ? 0 : 2;
    return j_skip(pp, e, 1);
}

/* `null` or the empty string: what a reader takes for "nothing" in a finish reason; 1 if so. */
static int j_nothing(const char **pp, const char *e) {
    const char *p = *pp;
    int nothing = IS_NULL(p, e) || (e - p >= 2 && p[0] == '"' && p[1] == '"');
    return j_skip(pp, e, 1) < 0 ? -1 : nothing;
}

static int add_text(Chunk *c, Span s, int thought) {
    if (c->ntext >= J_MAXTEXT) { c->plain = 0; return 0; }
    c->text[c->ntext] = s;
    c->thought[c->ntext++] = thought;
    return 0;
}

/* The delta of Chat's choice 0: `content` a string or null; reasoning, refusal and tool calls null. */
static int chat_delta(const char **pp, const char *e, Chunk *c) {
    const char *p = *pp + 1;
    int first = 1, r, seen = 0;
    Span k, s;
    while ((r = j_key(&p, e, &first, &k)) == 1) {
        if (KEY_IS(k, "content")) {
            if (seen & 1) return -1;
            seen |= 1;
            if (p < e && *p == '"') {
                if (j_string(&p, e, &s) < 0) return -1;
                add_text(c, s, 0);
                continue;
            }
            if (!IS_NULL(p, e)) c->plain = 0;
        } else if (KEY_IS(k, "reasoning_content") || KEY_IS(k, "reasoning") || KEY_IS(k, "refusal") ||
                   KEY_IS(k, "tool_calls")) {
            if (!IS_NULL(p, e)) c->plain = 0;
        }
        if (j_skip(&p, e, 3) < 0) return -1;
    }
    *pp = p;
    return r;
}

static int chat_choice(const char **pp, const char *e, Chunk *c) {
    const char *p = *pp + 1;
    int first = 1, r, seen = 0;
    Span k;
    while ((r = j_key(&p, e, &first, &k)) == 1) {
        if (KEY_IS(k, "index")) {
            if (seen & 1) return -1;
            seen |= 1;
            if (!(e - p >= 1 && *p == '0' && (e - p == 1 || !strchr("0123456789.eE", p[1])))) c->plain = 0;
        } else if (KEY_IS(k, "delta")) {
            if (seen & 2) return -1;
            seen |= 2;
            if (p < e && *p == '{') {
                if (chat_delta(&p, e, c) < 0) return -1;
                continue;
            }
            if (!IS_NULL(p, e)) c->plain = 0;
        } else if (KEY_IS(k, "finish_reason")) {
            if (seen & 4) return -1;
            seen |= 4;
            int nothing = j_nothing(&p, e);
            if (nothing < 0) return -1;
            if (!nothing) c->plain = 0;
            continue;
        }
        if (j_skip(&p, e, 2) < 0) return -1;
    }
    if (!(seen & 1)) c->plain = 0;
    *pp = p;
    return r;
}

/* An OpenAI Chat chunk: 0 when read (see Chunk), -1 when not. */
static int chat_chunk(const char *p, const char *e, Chunk *c) {
    int first = 1, r, seen = 0;
    Span k, s;
    p = skip_ws(p, e);
    if (p >= e || *p != '{') return -1;
    p++;
    while ((r = j_key(&p, e, &first, &k)) == 1) {
        if (KEY_IS(k, "id")) {
            if (j_meta_value(&p, e, &c->id_kind, &c->id) < 0) return -1;
            continue;
        } else if (KEY_IS(k, "model")) {
            if (j_meta_value(&p, e, &c->model_kind, &c->model) < 0) return -1;
            continue;
        } else if (KEY_IS(k, "choices")) {
            if (seen & 1) return -1;
            seen |= 1;
            if (p < e && *p == '[') { /* exactly one choice, an object */
                const char *q = p + 1;
                int f = 1;
                if (j_item(&q, e, &f) == 1 && *q == '{') {
                    if (chat_choice(&q, e, c) < 0) return -1;
                    if (j_item(&q, e, &f) == 0) { p = q; continue; }
                }
            }
            c->plain = 0;
        } else if (KEY_IS(k, "usage")) {
            if (seen & 2) return -1;
            seen |= 2;
            if (!IS_NULL(p, e)) c->plain = 0;
        } else if (KEY_IS(k, "error")) {
            c->plain = c->meta_ok = 0;
        } else if (KEY_IS(k, "object")) {
            if (seen & 4) return -1;
            seen |= 4;
            if (p < e && *p == '"') {
                if (j_string(&p, e, &s) < 0) return -1;
                if (s.escaped || (s.n == 5 && memcmp(s.s, "error", 5) == 0)) c->plain = c->meta_ok = 0;
                continue;
            }
            if (!IS_NULL(p, e)) c->plain = 0;
        }
        if (j_skip(&p, e, 1) < 0) return -1;
    }
    if (r < 0 || skip_ws(p, e) != e) return -1;
    if (!(seen & 1)) c->plain = 0;
    return 0;
}

/* An OpenAI Responses output_text.delta with a non-empty item_id and a plain content_index. */
static int responses_chunk(const char *p, const char *e, Chunk *c) {
    int first = 1, r, seen = 0;
    Span k, s;
    p = skip_ws(p, e);
    if (p >= e || *p != '{') return -1;
    p++;
    while ((r = j_key(&p, e, &first, &k)) == 1) {
        int bit = KEY_IS(k, "type") ? 1 : KEY_IS(k, "item_id") ? 2 : KEY_IS(k, "content_index") ? 4
                  : KEY_IS(k, "delta") ? 8 : 0;  /* fmt: skip */
        if (bit & seen) return -1;
        seen |= bit;
        if (bit == 1) {
            if (p >= e || *p != '"' || j_string(&p, e, &s) < 0) return -1;
            if (!KEY_IS(s, "response.output_text.delta")) return -1;
            continue;
        }
        if (bit == 2) {
            if (p >= e || *p != '"' || j_string(&p, e, &c->id) < 0 || c->id.n == 0) return -1;
            continue;
        }
        if (bit == 4) {
            const char *d = p;
            long long v = 0;
            while (p < e && *p >= '0' && *p <= '9') v = v * 10 + (*p++ - '0');
            if (p == d || p - d > 18 || (p - d > 1 && *d == '0') || (p < e && strchr(".eE", *p) && *p))
                return -1;
            c->index = v;
            continue;
        }
        if (bit == 8) {
            if (p >= e || *p != '"' || j_string(&p, e, &s) < 0) return -1;
            add_text(c, s, 0);
            continue;
        }
        if (j_skip(&p, e, 1) < 0) return -1;
    }
    if (r < 0 || skip_ws(p, e) != e || seen != 15) return -1;
    return 0;
}

static int gemini_part(const char **pp, const char *e, Chunk *c) {
    const char *p = *pp + 1;
    int first = 1, r, seen = 0, thought = 0, has_text = 0;
    Span k, text;
    while ((r = j_key(&p, e, &first, &k)) == 1) {
        if (KEY_IS(k, "text")) {
            if (seen & 1) return -1;
            seen |= 1;
            if (p < e && *p == '"') {
                if (j_string(&p, e, &text) < 0) return -1;
                has_text = 1;
                continue;
            }
            if (!IS_NULL(p, e)) c->plain = 0;
        } else if (KEY_IS(k, "thought")) {
            if (seen & 2) return -1;
            seen |= 2;
            if (lit(p, e, "true", 4)) thought = 1;
            else if (!lit(p, e, "false", 5) && !IS_NULL(p, e)) c->plain = 0;
        } else if (KEY_IS(k, "functionCall")) {
            if (!IS_NULL(p, e)) c->plain = 0;
        }
        if (j_skip(&p, e, 5) < 0) return -1;
    }
    if (r < 0) return -1;
    if (has_text) add_text(c, text, thought);
    *pp = p;
    return 0;
}

static int gemini_candidate(const char **pp, const char *e, Chunk *c) {
    const char *p = *pp + 1;
    int first = 1, r, seen = 0;
    Span k, k2;
    while ((r = j_key(&p, e, &first, &k)) == 1) {
        if (KEY_IS(k, "content")) {
            if (seen & 1) return -1;
            seen |= 1;
            if (p < e && *p == '{') {
                int f2 = 1, r2, parts = 0;
                p++;
                while ((r2 = j_key(&p, e, &f2, &k2)) == 1) {
                    if (KEY_IS(k2, "parts")) {
                        if (parts++) return -1;
                        if (p < e && *p == '[') {
                            int f3 = 1, r3;
                            p++;
                            while ((r3 = j_item(&p, e, &f3)) == 1) {
                                if (*p == '{') {
                                    if (gemini_part(&p, e, c) < 0) return -1;
                                } else {
                                    c->plain = 0;
                                    if (j_skip(&p, e, 4) < 0) return -1;
                                }
                            }
                            if (r3 < 0) return -1;
                            continue;
                        }
                        if (!IS_NULL(p, e)) c->plain = 0;
                    }
                    if (j_skip(&p, e, 3) < 0) return -1;
                }
                if (r2 < 0) return -1;
                continue;
            }
            if (!IS_NULL(p, e)) c->plain = 0;
        } else if (KEY_IS(k, "finishReason")) { /* a string: Stop and Done(final=False), in any order */
            if (seen & 2) return -1;
            seen |= 2;
            if (p < e && *p == '"') {
                if (j_string(&p, e, &c->finish) < 0) return -1;
                c->has_finish = 1;
                continue;
            }
            if (!IS_NULL(p, e)) c->plain = 0;
        }
        if (j_skip(&p, e, 2) < 0) return -1;
    }
    *pp = p;
    return r;
}

/* A Gemini GenerateContentResponse chunk: 0 when read (see Chunk), -1 when not. */
static int gemini_chunk(const char *p, const char *e, Chunk *c) {
    int first = 1, r, seen = 0;
    Span k;
    p = skip_ws(p, e);
    if (p >= e || *p != '{') return -1;
    p++;
    while ((r = j_key(&p, e, &first, &k)) == 1) {
        if (KEY_IS(k, "responseId")) {
            if (j_meta_value(&p, e, &c->id_kind, &c->id) < 0) return -1;
            continue;
        } else if (KEY_IS(k, "modelVersion")) {
            if (j_meta_value(&p, e, &c->model_kind, &c->model) < 0) return -1;
            continue;
        } else if (KEY_IS(k, "candidates")) {
            if (seen & 1) return -1;
            seen |= 1;
            if (p < e && *p == '[') { /* exactly one candidate, an object */
                const char *q = p + 1;
                int f = 1;
                if (j_item(&q, e, &f) == 1 && *q == '{') {
                    if (gemini_candidate(&q, e, c) < 0) return -1;
                    if (j_item(&q, e, &f) == 0) { p = q; continue; }
                }
            }
            c->plain = 0;
        } else if (KEY_IS(k, "usageMetadata")) {
            if (seen & 2) return -1;
            seen |= 2;
            if (p < e && *p == '{') {
                const char *start = p;
                if (j_skip(&p, e, 1) < 0) return -1;
                c->usage = start;
                c->usage_n = p - start;
                continue;
            }
            if (!IS_NULL(p, e)) c->plain = 0;
        } else if (KEY_IS(k, "error") || KEY_IS(k, "response")) {
            if (!IS_NULL(p, e)) c->plain = c->meta_ok = 0;
        }
        if (j_skip(&p, e, 1) < 0) return -1;
    }
    if (r < 0 || skip_ws(p, e) != e) return -1;
    if (!(seen & 1)) c->plain = 0;
    return 0;
}

/* The reader's (id, model) as this call follows it. */
typedef struct {
    int known;
    int kind[2]; /* 0: None, 1: a str (its UTF-8 in val), 2: anything else */
    Out val[2];
} MetaState;

static int meta_from_python(MetaState *m, PyObject *state) {
    m->known = 0;
    if (state == NULL || !PyTuple_Check(state) || PyTuple_GET_SIZE(state) != 2) return 0;
    for (int i = 0; i < 2; i++) {
        PyObject *v = PyTuple_GET_ITEM(state, i);
        m->val[i].len = 0;
        if (v == Py_None) m->kind[i] = 0;
        else if (PyUnicode_Check(v)) {
            Py_ssize_t n;
            const char *s = PyUnicode_AsUTF8AndSize(v, &n);
            if (s == NULL) { /* a lone surrogate: never equal to what this code reads */
                if (!PyErr_ExceptionMatches(PyExc_UnicodeEncodeError)) return -1;
                PyErr_Clear();
                m->kind[i] = 2;
                continue;
            }
            m->kind[i] = 1;
            if (out_put(&m->val[i], s, n) < 0) { PyErr_NoMemory(); return -1; }
        } else m->kind[i] = 2;
    }
    m->known = 1;
    return 0;
}

/* A string span's decoded UTF-8 (into o when it has escapes); 0, or -1 on a memory error. */
static int span_bytes(Span s, Out *o, const char **b, Py_ssize_t *n) {
    if (!s.escaped) { *b = s.s; *n = s.n; return 0; }
    const char *end = json_string(s.s, s.s + s.n + 1, o);
    if (end == (const char *)1) { PyErr_NoMemory(); return -1; }
    *b = o->buf ? o->buf : "";
    *n = o->len;
    return 0;
}

/* Whether the chunk's (id, model) is the state's; 1/0, -1 on a memory error. */
static int meta_same(MetaState *m, Chunk *c, Out *tmp) {
    if (!m->known) return 0;
    int kinds[2] = {c->id_kind < 0 ? 0 : c->id_kind, c->model_kind < 0 ? 0 : c->model_kind};
    Span spans[2] = {c->id, c->model};
    for (int i = 0; i < 2; i++) {
        if (kinds[i] == 2 || kinds[i] != m->kind[i]) return 0;
        if (kinds[i] == 1) {
            const char *b;
            Py_ssize_t n;
            if (span_bytes(spans[i], tmp, &b, &n) < 0) return -1;
            if (n != m->val[i].len || memcmp(b, m->val[i].buf ? m->val[i].buf : "", n) != 0) return 0;
        }
    }
    return 1;
}

/* After a chunk handed back: what the reader's (id, model) will be. 0, or -1 on a memory error. */
static int meta_follow(MetaState *m, Chunk *c, int read, Out *tmp) {
    if (!read || !c->meta_ok) { m->known = 0; return 0; }
    int kinds[2] = {c->id_kind < 0 ? 0 : c->id_kind, c->model_kind < 0 ? 0 : c->model_kind};
    Span spans[2] = {c->id, c->model};
    for (int i = 0; i < 2; i++) {
        m->kind[i] = kinds[i];
        m->val[i].len = 0;
        if (kinds[i] == 1) {
            const char *b;
            Py_ssize_t n;
            if (span_bytes(spans[i], tmp, &b, &n) < 0) return -1;
            if (out_put(&m->val[i], b, n) < 0) { PyErr_NoMemory(); return -1; }
        }
    }
    m->known = 1;
    return 0;
}

/* A text span as a new str; NULL with an exception on a memory error. */
static PyObject *span_str(Span s, Out *o) {
    if (!s.escaped) return PyUnicode_DecodeUTF8(s.s, s.n, "strict");
    const char *end = json_string(s.s, s.s + s.n + 1, o);
    if (end == (const char *)1) return PyErr_NoMemory();
    return PyUnicode_DecodeUTF8(o->buf ? o->buf : "", o->len, "strict");
}

/* `crlf_to_lf(data)`: data with each CRLF made LF when every CR in it is followed by an LF (what
 * SSEDecoder.feed does with `translate` after a regex search for a lone CR, in one pass), or None
 * when one is not (a lone CR, or a CR ending the data): the framer then does it its own way. */
static PyObject *crlf_to_lf(PyObject *self, PyObject *arg) {
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0) return NULL;
    const char *p = view.buf, *e = p + view.len;
    PyObject *out = PyBytes_FromStringAndSize(NULL, view.len);
    if (out == NULL) { PyBuffer_Release(&view); return NULL; }
    char *start = PyBytes_AS_STRING(out), *o = start;
    while (p < e) {
        const char *cr = memchr(p, '\r', (size_t)(e - p));
        if (cr == NULL) {
            memcpy(o, p, (size_t)(e - p));
            o += e - p;
            break;
        }
        if (cr + 1 >= e || cr[1] != '\n') {
            Py_DECREF(out);
            PyBuffer_Release(&view);
            Py_RETURN_NONE;
        }
        memcpy(o, p, (size_t)(cr - p));
        o += cr - p;
        p = cr + 1;
    }
    PyBuffer_Release(&view);
    if (_PyBytes_Resize(&out, o - start) < 0) return NULL;
    return out;
}

/* Gemini: the last usage and finish reason of the run being built, made objects when it ends. */
typedef struct {
    const char *usage;
    Py_ssize_t usage_n;
    int has_reason;
    Span reason;
} Pending;

/* The run's pending usage and finish reason into its items 2 and 3; 0, or -1 on an error. */
static int gemini_close(PyObject *run, Pending *pending, Out *o) {
    if (run != NULL && pending->usage != NULL) {
        PyObject *usage = PyBytes_FromStringAndSize(pending->usage, pending->usage_n);
        if (usage == NULL) return -1;
        PyList_SetItem(run, 2, usage); /* steals it */
    }
    if (run != NULL && pending->has_reason) {
        PyObject *reason = span_str(pending->reason, o);
        if (reason == NULL) return -1;
        PyList_SetItem(run, 3, reason);
    }
    pending->usage = NULL;
    pending->has_reason = 0;
    return 0;
}

/* Take a text chunk of kind 2-4 into the run being built (see frame_plain); 1 when taken, 0 when
 * it must be handed back after all, -1 on an error. */
static int take_chunk(int kind, Chunk *c, PyObject *events, PyObject **run, Out *runkey, long long *runidx,
                      Out *o, Pending *pending) {
    PyObject *strs[J_MAXTEXT] = {NULL};
    int taken = 0, n = c->ntext;
    for (int i = 0; i < n; i++) {
        strs[i] = span_str(c->text[i], o);
        if (strs[i] == NULL) {
            if (!PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) goto done_err;
            PyErr_Clear();
            goto done; /* the reference decides */
        }
    }
    taken = 1;
    if (kind == 2) {
        for (int i = 0; i < n; i++) {
            if (PyUnicode_GET_LENGTH(strs[i]) == 0) continue;
            if (*run == NULL) {
                *run = PyList_New(0);
                if (*run == NULL || PyList_Append(events, *run) < 0) goto done_err;
                Py_DECREF(*run); /* the events list holds it */
            }
            if (PyList_Append(*run, strs[i]) < 0) goto done_err;
        }
    } else if (kind == 3) {
        if (n != 1 || PyUnicode_GET_LENGTH(strs[0]) == 0) goto done;
        const char *b;
        Py_ssize_t bn;
        if (span_bytes(c->id, o, &b, &bn) < 0) goto done_err;
        if (*run == NULL || c->index != *runidx || bn != runkey->len || memcmp(b, runkey->buf, bn) != 0) {
            runkey->len = 0;
            if (out_put(runkey, b, bn) < 0) { PyErr_NoMemory(); goto done_err; }
            *runidx = c->index;
            PyObject *item = PyUnicode_DecodeUTF8(runkey->buf, runkey->len, "strict");
            PyObject *key = item == NULL ? NULL : Py_BuildValue("(NL)", item, c->index);
            if (key == NULL) goto done_err;
            *run = PyList_New(1);
            if (*run == NULL) { Py_DECREF(key); goto done_err; }
            PyList_SET_ITEM(*run, 0, key);
            if (PyList_Append(events, *run) < 0) { Py_CLEAR(*run); goto done_err; }
            Py_DECREF(*run); /* the events list holds it */
        }
        if (PyList_Append(*run, strs[0]) < 0) goto done_err;
    } else { /* Gemini: [texts, thoughts, the last usage's raw JSON or None, the last finish reason or None] */
        int reason = c->has_finish && c->finish.n > 0; /* an escaped string is never empty */
        int any = c->usage != NULL || reason;
        for (int i = 0; i < n; i++) any |= PyUnicode_GET_LENGTH(strs[i]) != 0;
        if (!any) goto done;
        if (*run == NULL) {
            *run = Py_BuildValue("[NNOO]", PyList_New(0), PyList_New(0), Py_None, Py_None);
            if (*run == NULL || PyList_Append(events, *run) < 0) goto done_err;
            Py_DECREF(*run);
        }
        for (int i = 0; i < n; i++) {
            if (PyUnicode_GET_LENGTH(strs[i]) == 0) continue;
            if (PyList_Append(PyList_GET_ITEM(*run, c->thought[i] ? 1 : 0), strs[i]) < 0) goto done_err;
        }
        if (c->usage != NULL) {
            pending->usage = c->usage;
            pending->usage_n = c->usage_n;
        }
        if (reason) {
            pending->has_reason = 1;
            pending->reason = c->finish;
        }
    }
done:
    for (int i = 0; i < n; i++) Py_XDECREF(strs[i]);
    return taken;
done_err:
    for (int i = 0; i < n; i++) Py_XDECREF(strs[i]);
    return -1;
}

static PyObject *frame_plain(PyObject *self, PyObject *args) {
    Py_buffer view;
    Py_ssize_t start, end;
    PyObject *ident, *event_type, *state = Py_None;
    int kind;
    if (!PyArg_ParseTuple(args, "y*nnOOi|O", &view, &start, &end, &ident, &event_type, &kind, &state)) return NULL;
    if (start < 0 || end > view.len || start > end) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "range out of the buffer");
        return NULL;
    }
    const char *base = view.buf;
    const char *p = base + start, *e = base + end;
    Out o = {NULL, 0, 0}, runkey = {NULL, 0, 0};
    long long runidx = -1;
    MetaState meta = {0, {0, 0}, {{NULL, 0, 0}, {NULL, 0, 0}}};
    Pending pending = {NULL, 0, 0, {NULL, 0, 0}};
    PyObject *events = PyList_New(0), *run = NULL;
    if (events == NULL) goto fail;
    if ((kind == 2 || kind == 4) && meta_from_python(&meta, state) < 0) goto fail;
    while (p < e && *p == '\n') p++;
    while (p < e) {
        const char *name = NULL, *name_end = NULL;
        if (e - p >= 7 && memcmp(p, "event: ", 7) == 0) {
            name = p + 7;
            name_end = memchr(name, '\n', e - name);
            if (name_end == NULL) goto not_plain;
            p = name_end + 1;
        }
        if (e - p < 6 || memcmp(p, "data: ", 6) != 0) goto not_plain;
        const char *data = p + 6;
        const char *data_end = memchr(data, '\n', e - data);
        if (data_end == NULL || data_end + 1 >= e || data_end[1] != '\n') goto not_plain;
        p = data_end + 2;
        while (p < e && *p == '\n') p++;
        if (kind == 1) {
            PyObject *text = anthropic_text(data, data_end, &o);
            if (text == NULL) goto fail;
            if (text != Py_None) {
                if (PyUnicode_GET_LENGTH(text) == 0) {
                    Py_DECREF(text);
                    continue;
                }
                if (run == NULL) {
                    run = PyList_New(0);
                    if (run == NULL || PyList_Append(events, run) < 0) { Py_DECREF(text); goto fail; }
                    Py_DECREF(run); /* the events list holds it */
                }
                int bad = PyList_Append(run, text);
                Py_DECREF(text);
                if (bad < 0) goto fail;
                continue;
            }
        } else if (kind >= 2 && kind <= 4) {
            Chunk c;
            memset(&c, 0, sizeof c);
            c.plain = c.meta_ok = 1;
            c.id_kind = c.model_kind = -1;
            int read = (kind == 2 ? chat_chunk : kind == 3 ? responses_chunk : gemini_chunk)(data, data_end, &c) == 0;
            int take = read && c.plain;
            if (take && kind != 3) {
                take = meta_same(&meta, &c, &o);
                if (take < 0) goto fail;
            }
            if (take) {
                take = take_chunk(kind, &c, events, &run, &runkey, &runidx, &o, &pending);
                if (take < 0) goto fail;
                if (take) continue;
            }
            if (kind != 3 && meta_follow(&meta, &c, read, &o) < 0) goto fail;
        }
        if (kind == 4 && gemini_close(run, &pending, &o) < 0) goto fail;
        run = NULL;
        PyObject *name_obj = Py_None;
        if (name != NULL) {
            name_obj = PyUnicode_DecodeUTF8(name, name_end - name, "replace");
            if (name_obj == NULL) goto fail;
        } else {
            Py_INCREF(name_obj);
        }
        PyObject *data_obj = PyUnicode_DecodeUTF8(data, data_end - data, "replace");
        if (data_obj == NULL) { Py_DECREF(name_obj); goto fail; }
        PyObject *ev = PyObject_CallFunctionObjArgs(event_type, name_obj, data_obj, ident, NULL);
        Py_DECREF(name_obj);
        Py_DECREF(data_obj);
        if (ev == NULL) goto fail;
        int bad = PyList_Append(events, ev);
        Py_DECREF(ev);
        if (bad < 0) goto fail;
    }
    if (kind == 4 && gemini_close(run, &pending, &o) < 0) goto fail;
    PyMem_Free(o.buf);
    PyMem_Free(runkey.buf);
    PyMem_Free(meta.val[0].buf);
    PyMem_Free(meta.val[1].buf);
    PyBuffer_Release(&view);
    return events;
not_plain:
    PyMem_Free(o.buf);
    PyMem_Free(runkey.buf);
    PyMem_Free(meta.val[0].buf);
    PyMem_Free(meta.val[1].buf);
    PyBuffer_Release(&view);
    Py_DECREF(events);
    Py_RETURN_NONE;
fail:
    PyMem_Free(o.buf);
    PyMem_Free(runkey.buf);
    PyMem_Free(meta.val[0].buf);
    PyMem_Free(meta.val[1].buf);
    PyBuffer_Release(&view);
    Py_XDECREF(events);
    return NULL;
}

static const char *const DELTA_KEYS[] = {"text", "thinking", "partial_json", "delta", "content", "arguments",
                                         "reasoning_content", "reasoning", "refusal", "response"};
#define N_DELTA_KEYS 10
#define MAX_DELTA_KEY 17
static PyObject *delta_key_objs[N_DELTA_KEYS];

/* Which delta key text[i:j] spells (-1: none). */
static int delta_key(int kind, const void *data, Py_ssize_t i, Py_ssize_t j) {
    char name[MAX_DELTA_KEY + 1];
    Py_ssize_t n = j - i;
    if (n < 4 || n > MAX_DELTA_KEY) return -1;
    for (Py_ssize_t k = 0; k < n; k++) {
        Py_UCS4 c = PyUnicode_READ(kind, data, i + k);
        if (c < 'a' || c > 'z') {
            if (c != '_') return -1;
        }
        name[k] = (char)c;
    }
    name[n] = 0;
    for (int k = 0; k < N_DELTA_KEYS; k++)
        if (strcmp(name, DELTA_KEYS[k]) == 0) return k;
    return -1;
}

static Py_ssize_t delta_key_len[N_DELTA_KEYS];

/* Which delta key one-byte text d[p:] starts with, closed by a quote (-1: none): `delta_key` of
 * the quoted word there, without walking to its closing quote first. */
static inline int delta_key_at(const char *d, Py_ssize_t p, Py_ssize_t n) {
    if (p >= n) return -1;
    switch (d[p]) {
    case 'a': case 'c': case 'd': case 'p': case 'r': case 't': break;
    default: return -1;
    }
    for (int k = 0; k < N_DELTA_KEYS; k++) {
        Py_ssize_t len = delta_key_len[k];
        if (p + len < n && d[p] == DELTA_KEYS[k][0] && d[p + len] == '"' && memcmp(d + p, DELTA_KEYS[k], (size_t)len) == 0)
            return k;
    }
    return -1;
}

/* Where the first `a` or `b` of d[p:n] is (n: none). JSON's quotes and escapes are a few bytes
 * apart, where a `memchr` call and its set-up cost more than the search, and two `memchr`s would
 * each start again at every escape: sixteen bytes at a time, inline (SSE2, on every x86-64), else
 * eight (a byte equal to either is a zero byte of the XOR). */
#define ZERO_BYTE(v) (((v) - 0x0101010101010101ULL) & ~(v) & 0x8080808080808080ULL)
static inline Py_ssize_t find_either(const char *d, Py_ssize_t p, Py_ssize_t n, char a, char b) {
#if defined(__SSE2__)
    const __m128i va = _mm_set1_epi8(a), vb = _mm_set1_epi8(b);
    for (; p + 16 <= n; p += 16) {
        __m128i w = _mm_loadu_si128((const __m128i *)(d + p));
        unsigned mask = (unsigned)_mm_movemask_epi8(_mm_or_si128(_mm_cmpeq_epi8(w, va), _mm_cmpeq_epi8(w, vb)));
        if (mask) return p + __builtin_ctz(mask);
    }
#else
    const uint64_t wa = 0x0101010101010101ULL * (unsigned char)a, wb = 0x0101010101010101ULL * (unsigned char)b;
    for (; p + 8 <= n; p += 8) {
        uint64_t w;
        memcpy(&w, d + p, 8);
        if (ZERO_BYTE(w ^ wa) || ZERO_BYTE(w ^ wb)) break;
    }
#endif
    while (p < n && d[p] != a && d[p] != b) p++;
    return p;
}

/* The next delta field at or after *pos: its key, and its raw value text[*start:*end]; *pos moves
 * past it. 0 when there is none. The regular expression's search, step by step. */
static inline int next_field_of(const int kind, const void *data, Py_ssize_t n, Py_ssize_t *pos, int *key,
                                Py_ssize_t *start, Py_ssize_t *end) {
    Py_ssize_t i = *pos;
    for (; i < n; i++) {
        Py_ssize_t j; /* the key's closing quote */
        int k;
        if (kind == PyUnicode_1BYTE_KIND) { /* (most bodies) the next quote, sixteen bytes at a time */
            i = find_either((const char *)data, i, n, '"', '"');
            if (i >= n) break;
            k = delta_key_at((const char *)data, i + 1, n); /* most quotes start no key: one look */
            if (k < 0) continue;
            j = i + 1 + delta_key_len[k];
        } else {
            if (PyUnicode_READ(kind, data, i) != '"') continue;
            j = i + 1;
            while (j < n && j - i <= MAX_DELTA_KEY + 1 && PyUnicode_READ(kind, data, j) != '"') j++;
            k = (j < n) ? delta_key(kind, data, i + 1, j) : -1;
            if (k < 0) continue;
        }
        Py_ssize_t p = j + 1;
        while (p < n && (PyUnicode_READ(kind, data, p) == ' ' || PyUnicode_READ(kind, data, p) == '\t')) p++;
        if (p >= n || PyUnicode_READ(kind, data, p) != ':') continue;
        p++;
        while (p < n && (PyUnicode_READ(kind, data, p) == ' ' || PyUnicode_READ(kind, data, p) == '\t')) p++;
        if (p >= n || PyUnicode_READ(kind, data, p) != '"') continue;
        Py_ssize_t first = ++p, last = -1;
        if (kind == PyUnicode_1BYTE_KIND) { /* the same walk, sixteen bytes at a time: the closing quote or an escape */
            const char *d = (const char *)data;
            while (p < n) {
                p = find_either(d, p, n, '"', '\\');
                if (p >= n) break;
                if (d[p] == '"') {
                    last = p;
                    break;
                }
                if (p + 1 >= n || d[p + 1] == '\n') break; /* `.` takes no newline */
                p += 2;
            }
            p = n; /* (the loop below is for the other kinds) */
        }
        while (p < n) {
            Py_UCS4 c = PyUnicode_READ(kind, data, p);
            if (c == '"') { last = p; break; }
            if (c == '\\') {
                if (p + 1 >= n || PyUnicode_READ(kind, data, p + 1) == '\n') break; /* `.` takes no newline */
                p += 2;
                continue;
            }
            p++;
        }
        if (last < 0) continue;
        *key = k;
        *start = first;
        *end = last;
        *pos = last + 1;
        return 1;
    }
    *pos = n;
    return 0;
}

static int next_field(int kind, const void *data, Py_ssize_t n, Py_ssize_t *pos, int *key, Py_ssize_t *start,
                      Py_ssize_t *end) {
    switch (kind) { /* one copy of the loop per kind, each with its reads made plain */
    case PyUnicode_1BYTE_KIND: return next_field_of(PyUnicode_1BYTE_KIND, data, n, pos, key, start, end);
    case PyUnicode_2BYTE_KIND: return next_field_of(PyUnicode_2BYTE_KIND, data, n, pos, key, start, end);
    default: return next_field_of(PyUnicode_4BYTE_KIND, data, n, pos, key, start, end);
    }
}

static PyObject *delta_fields(PyObject *self, PyObject *arg) {
    if (!PyUnicode_Check(arg)) {
        PyErr_SetString(PyExc_TypeError, "delta_fields() takes a str");
        return NULL;
    }
    int kind = PyUnicode_KIND(arg), key;
    const void *data = PyUnicode_DATA(arg);
    Py_ssize_t n = PyUnicode_GET_LENGTH(arg), pos = 0, start, end;
    PyObject *found = PyList_New(0);
    if (found == NULL) return NULL;
    while (next_field(kind, data, n, &pos, &key, &start, &end)) {
        PyObject *value = PyUnicode_Substring(arg, start, end);
        PyObject *pair = value == NULL ? NULL : PyTuple_Pack(2, delta_key_objs[key], value);
        Py_XDECREF(value);
        if (pair == NULL || PyList_Append(found, pair) < 0) {
            Py_XDECREF(pair);
            Py_DECREF(found);
            return NULL;
        }
        Py_DECREF(pair);
    }
    return found;
}

/* One-byte text[start:end]: 1 if it holds a control character; `*high` set if it holds a
 * character past ASCII (one loop with no exit: the compiler makes it wide). */
static inline int control_in(const unsigned char *d, Py_ssize_t start, Py_ssize_t end, int *high) {
    unsigned char low = 0, all = 0;
    for (Py_ssize_t p = start; p < end; p++) {
        low |= (unsigned char)(d[p] < 0x20);
        all |= d[p];
    }
    *high = (all & 0x80) != 0;
    return low != 0;
}

/* The character a one-character escape (`\n`, `\"`…) stands for, or -1 (`\u` and bad ones). */
static inline int short_escape(Py_UCS4 e) {
    switch (e) {
    case '"': case '\\': case '/': return (int)e;
    case 'b': return '\b';
    case 'f': return '\f';
    case 'n': return '\n';
    case 'r': return '\r';
    case 't': return '\t';
    default: return -1;
    }
}

/* `json_unescape` of one-byte text with no `\u` escape, at `memchr`'s speed: a new str, Py_None
 * (borrowed) where json.loads raises, NULL with no error set when a `\u` escape is there (the
 * caller reads it character by character), NULL with an error set when memory ran out. */
static PyObject *json_unescape_bytes(const unsigned char *d, Py_ssize_t start, Py_ssize_t end) {
    int high;
    if (control_in(d, start, end, &high)) return Py_None;
    Py_ssize_t length = 0, p = start;
    for (;;) { /* measure, and refuse a bad escape */
        const unsigned char *b = memchr(d + p, '\\', (size_t)(end - p));
        if (b == NULL) break;
        Py_ssize_t at = b - d;
        if (at + 1 >= end) return Py_None;
        if (d[at + 1] == 'u') return NULL;
        if (short_escape(d[at + 1]) < 0) return Py_None;
        length += at - p + 1;
        p = at + 2;
    }
    length += end - p;
    PyObject *out = PyUnicode_New(length, high ? 0xff : 0x7f);
    if (out == NULL) return NULL; /* (the error is set) */
    Py_UCS1 *o = PyUnicode_1BYTE_DATA(out);
    p = start;
    for (;;) {
        const unsigned char *b = memchr(d + p, '\\', (size_t)(end - p));
        Py_ssize_t at = b == NULL ? end : b - d;
        memcpy(o, d + p, (size_t)(at - p));
        o += at - p;
        if (b == NULL) break;
        *o++ = (Py_UCS1)short_escape(d[at + 1]);
        p = at + 2;
    }
    return out;
}

/* `json.loads('"' + text[start:end] + '"')` for a raw value holding a backslash: a new str, or
 * Py_None (borrowed) where json.loads raises (a bad escape, a control character). */
static PyObject *json_unescape(int kind, const void *data, Py_ssize_t start, Py_ssize_t end) {
    if (kind == PyUnicode_1BYTE_KIND) {
        PyObject *fast = json_unescape_bytes(data, start, end);
        if (fast != NULL || PyErr_Occurred()) return fast;
    }
    Py_UCS4 *buf = PyMem_Malloc(sizeof(Py_UCS4) * (size_t)(end - start + 1));
    if (buf == NULL) return PyErr_NoMemory();
    Py_ssize_t n = 0, p = start;
    while (p < end) {
        Py_UCS4 c = PyUnicode_READ(kind, data, p);
        if (c < 0x20) goto bad;
        if (c != '\\') { buf[n++] = c; p++; continue; }
        if (p + 1 >= end) goto bad;
        Py_UCS4 e = PyUnicode_READ(kind, data, p + 1);
        switch (e) {
        case '"': case '\\': case '/': buf[n++] = e; p += 2; continue;
        case 'b': buf[n++] = '\b'; p += 2; continue;
        case 'f': buf[n++] = '\f'; p += 2; continue;
        case 'n': buf[n++] = '\n'; p += 2; continue;
        case 'r': buf[n++] = '\r'; p += 2; continue;
        case 't': buf[n++] = '\t'; p += 2; continue;
        case 'u': break;
        default: goto bad;
        }
        long cp = p + 6 <= end ? hex4(kind, data, p + 2) : -1;
        if (cp < 0) goto bad;
        p += 6;
        if (cp >= 0xD800 && cp <= 0xDBFF && p + 6 <= end && PyUnicode_READ(kind, data, p) == '\\' &&
            PyUnicode_READ(kind, data, p + 1) == 'u') { /* json joins a pair; a lone half stays */
            long lo = hex4(kind, data, p + 2);
            if (lo >= 0xDC00 && lo <= 0xDFFF) {
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                p += 6;
            }
        }
        buf[n++] = (Py_UCS4)cp;
    }
    PyObject *out = PyUnicode_FromKindAndData(PyUnicode_4BYTE_KIND, buf, n);
    PyMem_Free(buf);
    return out;
bad:
    PyMem_Free(buf);
    return Py_None;
}

/* The decoded value of the delta field text[start:end]: a new str, or Py_None (borrowed) where
 * json.loads refuses it or it is empty (what scrub_deltas leaves out); NULL on an error. */
static PyObject *field_value(PyObject *text, int kind, const void *data, Py_ssize_t start, Py_ssize_t end) {
    if (end == start) return Py_None;
    int escaped = 0;
    if (kind == PyUnicode_1BYTE_KIND) {
        escaped = memchr((const char *)data + start, '\\', (size_t)(end - start)) != NULL;
    } else {
        for (Py_ssize_t p = start; p < end; p++)
            if (PyUnicode_READ(kind, data, p) == '\\') { escaped = 1; break; }
    }
    PyObject *value = escaped ? json_unescape(kind, data, start, end) : PyUnicode_Substring(text, start, end);
    if (value != NULL && value != Py_None && PyUnicode_GET_LENGTH(value) == 0) {
        Py_DECREF(value);
        return Py_None;
    }
    return value;
}

/* Where `channels_of` writes the text with its delta values blanked: `buf` (room for the whole
 * text, of its kind) holds `w` characters, the text's up to `last` with each value before it
 * turned to at most `BLANK_KEEP` blanks (`capsem.stream_scrub.BLANK_KEEP`). */
#define BLANK_KEEP 64
typedef struct {
    char *buf;
    Py_ssize_t w, last;
} Blanked;

/* Copy the text up to `upto` into `b`, then `blanks` blanks, and go on from `from`. */
static void blank_to(Blanked *b, int kind, const void *data, Py_ssize_t upto, Py_ssize_t blanks,
                     Py_ssize_t from) {
    memcpy(b->buf + b->w * kind, (const char *)data + b->last * kind, (size_t)(upto - b->last) * (size_t)kind);
    b->w += upto - b->last;
    if (kind == PyUnicode_1BYTE_KIND) memset(b->buf + b->w, ' ', (size_t)blanks);
    else for (Py_ssize_t k = 0; k < blanks; k++) PyUnicode_WRITE(kind, b->buf, b->w + k, ' ');
    b->w += blanks;
    b->last = from;
}

/* `delta_channels(text) -> dict[key, list[str]]`: the decoded non-empty values of every delta
 * field, per key, in order (what scrub_deltas joins); a value json.loads refuses is left out. */
/* The channels of `text` (see `delta_channels`); with `blank`, the text with each value listed
 * turned to blanks is written there. NULL on an error. */
static PyObject *channels_of(PyObject *text, Blanked *blank) {
    int kind = PyUnicode_KIND(text), key;
    const void *data = PyUnicode_DATA(text);
    Py_ssize_t n = PyUnicode_GET_LENGTH(text), pos = 0, start, end;
    PyObject *channels = PyDict_New(), *lists[N_DELTA_KEYS] = {NULL};
    if (channels == NULL) return NULL;
    while (next_field(kind, data, n, &pos, &key, &start, &end)) {
        PyObject *value = field_value(text, kind, data, start, end);
        if (value == NULL) goto fail;
        if (value == Py_None) continue;
        if (lists[key] == NULL) {
            lists[key] = PyList_New(0);
            if (lists[key] == NULL || PyDict_SetItem(channels, delta_key_objs[key], lists[key]) < 0) {
                Py_DECREF(value);
                goto fail;
            }
            Py_DECREF(lists[key]); /* the dict holds it */
        }
        int bad = PyList_Append(lists[key], value);
        Py_DECREF(value);
        if (bad < 0) goto fail;
        if (blank != NULL)
            blank_to(blank, kind, data, start, end - start < BLANK_KEEP ? end - start : BLANK_KEEP, end);
    }
    if (blank != NULL) blank_to(blank, kind, data, n, 0, n);
    return channels;
fail:
    Py_DECREF(channels);
    return NULL;
}

static PyObject *delta_channels(PyObject *self, PyObject *arg) {
    if (!PyUnicode_Check(arg)) {
        PyErr_SetString(PyExc_TypeError, "delta_channels() takes a str");
        return NULL;
    }
    return channels_of(arg, NULL);
}

/* `delta_split(text) -> (blanked, channels)`: see the module doc. */
static PyObject *delta_split(PyObject *self, PyObject *arg) {
    if (!PyUnicode_Check(arg)) {
        PyErr_SetString(PyExc_TypeError, "delta_split() takes a str");
        return NULL;
    }
    int kind = PyUnicode_KIND(arg);
    Py_ssize_t n = PyUnicode_GET_LENGTH(arg);
    PyObject *channels, *blanked = NULL, *result;
    Blanked blank = {PyMem_Malloc((size_t)(n ? n : 1) * (size_t)kind), 0, 0};
    if (blank.buf == NULL) return PyErr_NoMemory();
    channels = channels_of(arg, &blank);
    if (channels != NULL && PyDict_GET_SIZE(channels)) { /* the narrowest str that holds what is left */
        blanked = PyUnicode_FromKindAndData(kind, blank.buf, blank.w);
        if (blanked == NULL) Py_CLEAR(channels);
    }
    PyMem_Free(blank.buf);
    if (channels == NULL) {
        Py_XDECREF(blanked);
        return NULL;
    }
    if (!PyDict_GET_SIZE(channels)) { /* nothing to blank: the text itself */
        Py_XDECREF(blanked);
        blanked = Py_NewRef(arg);
    }
    result = PyTuple_Pack(2, blanked, channels);
    Py_DECREF(blanked);
    Py_DECREF(channels);
    return result;
}

/* Whether `json.loads` refuses the raw value text[start:end] (as `json_unescape` reads it: a
 * control character, a bad or cut escape), without decoding it. */
static int json_refused(int kind, const void *data, Py_ssize_t start, Py_ssize_t end) {
    if (kind == PyUnicode_1BYTE_KIND) { /* the same at `memchr`'s speed */
        const unsigned char *d = data;
        int high;
        if (control_in(d, start, end, &high)) return 1;
        for (Py_ssize_t p = start;;) {
            const unsigned char *b = memchr(d + p, '\\', (size_t)(end - p));
            if (b == NULL) return 0;
            p = b - d;
            if (p + 1 >= end) return 1;
            if (d[p + 1] != 'u') {
                if (short_escape(d[p + 1]) < 0) return 1;
                p += 2;
                continue;
            }
            if (p + 6 > end || hex4(PyUnicode_1BYTE_KIND, d, p + 2) < 0) return 1;
            p += 6;
        }
    }
    for (Py_ssize_t p = start; p < end; p++) {
        Py_UCS4 c = PyUnicode_READ(kind, data, p);
        if (c < 0x20) return 1;
        if (c != '\\') continue;
        if (p + 1 >= end) return 1;
        switch (PyUnicode_READ(kind, data, p + 1)) {
        case '"': case '\\': case '/': case 'b': case 'f': case 'n': case 'r': case 't': p++; continue;
        case 'u': break;
        default: return 1;
        }
        if (p + 6 > end || hex4(kind, data, p + 2) < 0) return 1;
        p += 5;
    }
    return 0;
}

/* `delta_places(text, keys) -> list[(key, start, end)]`: for each delta field whose key is in
 * `keys`, in order, where its raw value lies, of the values `delta_channels` lists (empty and
 * refused values left out). */
static PyObject *delta_places(PyObject *self, PyObject *args) {
    PyObject *text, *keys;
    if (!PyArg_ParseTuple(args, "UO", &text, &keys)) return NULL;
    int wanted[N_DELTA_KEYS];
    for (int k = 0; k < N_DELTA_KEYS; k++)
        if ((wanted[k] = PySequence_Contains(keys, delta_key_objs[k])) < 0) return NULL;
    int kind = PyUnicode_KIND(text), key;
    const void *data = PyUnicode_DATA(text);
    Py_ssize_t n = PyUnicode_GET_LENGTH(text), pos = 0, start, end;
    PyObject *found = PyList_New(0);
    if (found == NULL) return NULL;
    while (next_field(kind, data, n, &pos, &key, &start, &end)) {
        if (!wanted[key] || end == start) continue;
        int escaped = 0;
        if (kind == PyUnicode_1BYTE_KIND) {
            escaped = memchr((const char *)data + start, '\\', (size_t)(end - start)) != NULL;
        } else {
            for (Py_ssize_t p = start; p < end && !escaped; p++) escaped = PyUnicode_READ(kind, data, p) == '\\';
        }
        if (escaped && json_refused(kind, data, start, end)) continue;
        PyObject *row = Py_BuildValue("(Onn)", delta_key_objs[key], start, end);
        if (row == NULL || PyList_Append(found, row) < 0) {
            Py_XDECREF(row);
            goto fail;
        }
        Py_DECREF(row);
    }
    return found;
fail:
    Py_DECREF(found);
    return NULL;
}

static PyObject *note_ends(PyObject *self, PyObject *args) {
    PyObject *noted, *ends, *times;
    double started;
    Py_ssize_t limit;
    if (!PyArg_ParseTuple(args, "O!O!O!dn", &PyList_Type, &noted, &PyList_Type, &ends, &PyList_Type, &times,
                          &started, &limit))
        return NULL;
    Py_ssize_t n = PyList_GET_SIZE(ends);
    if (PyList_GET_SIZE(times) != n) {
        PyErr_SetString(PyExc_ValueError, "ends and times differ in length");
        return NULL;
    }
    long long last = -1;
    Py_ssize_t count = PyList_GET_SIZE(noted);
    if (count) {
        PyObject *tail = PyList_GET_ITEM(noted, count - 1);
        if (!PyTuple_Check(tail) || PyTuple_GET_SIZE(tail) < 1) {
            PyErr_SetString(PyExc_TypeError, "noted holds (end, ms) tuples");
            return NULL;
        }
        last = PyLong_AsLongLong(PyTuple_GET_ITEM(tail, 0));
        if (last == -1 && PyErr_Occurred()) return NULL;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        long long end = PyLong_AsLongLong(PyList_GET_ITEM(ends, i));
        if (end == -1 && PyErr_Occurred()) return NULL;
        if (end <= last || count >= limit) continue;
        double at = PyFloat_AsDouble(PyList_GET_ITEM(times, i));
        if (at == -1.0 && PyErr_Occurred()) return NULL;
        double ms = nearbyint((at - started) * 1000); /* the default rounding: half to even */
        PyObject *pair = Py_BuildValue("(LL)", end, ms > 0 ? (long long)ms : 0LL);
        if (pair == NULL || PyList_Append(noted, pair) < 0) {
            Py_XDECREF(pair);
            return NULL;
        }
        Py_DECREF(pair);
        last = end;
        count++;
    }
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"note_ends", note_ends, METH_VARARGS, "note_ends(noted, ends, times, started, limit): see the module doc."},
    {"delta_fields", delta_fields, METH_O, "delta_fields(text) -> list[(key, raw value)]: see the module doc."},
    {"delta_channels", delta_channels, METH_O, "delta_channels(text) -> dict[key, list[str]]: see the module doc."},
    {"delta_split", delta_split, METH_O, "delta_split(text) -> (blanked text, dict[key, list[str]]): see the module doc."},
    {"delta_places", delta_places, METH_VARARGS, "delta_places(text, keys) -> list[(key, start, end)]: see the module doc."},
    {"crlf_to_lf", crlf_to_lf, METH_O, "crlf_to_lf(data) -> bytes | None: see crlf_to_lf in fastpath.c."},
    {"frame_plain", frame_plain, METH_VARARGS,
     "frame_plain(buf, start, end, ident, event_type, kind) -> list | None: see the module doc."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_fastpath", "capsem's compiled fast path.", -1,
                                    methods};

PyMODINIT_FUNC PyInit__fastpath(void) {
    for (int k = 0; k < N_DELTA_KEYS; k++) {
        delta_key_len[k] = (Py_ssize_t)strlen(DELTA_KEYS[k]);
        if (delta_key_objs[k] == NULL) {
            delta_key_objs[k] = PyUnicode_InternFromString(DELTA_KEYS[k]);
            if (delta_key_objs[k] == NULL) return NULL;
        }
    }
    PyObject *m = PyModule_Create(&module);
    if (m != NULL && PyModule_AddIntConstant(m, "VERSION", FASTPATH_VERSION) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
