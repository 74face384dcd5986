/* capsem's compiled scrubber path: the skipping part of `scrub_named_values`' loop, in C.
 *
 * `named_next(text, hits, pos, verdicts, ends, look_back)` is the part of the loop over name words
 * in capsem/secret_names.py (`scrub_named_values`, the reference this code must agree with) that
 * decides nothing: it takes the first of `hits` (the sorted places where a name word starts, as
 * Hyperscan finds them) at or after `pos`, the name around it (the run of `[A-Za-z0-9_.-]`
 * characters), and skips it when the Python loop would only move past it:
 *
 * - `verdicts[name]` is 0 (neither a secret name nor a word that announces a token);
 * - `verdicts[name]` is 1 (announces a token) or 2 (a secret name), the name does not start with
 *   `-`, blanks and a plain word follow it (`_PROSE_AFTER_RE`), no command that assigns after
 *   blanks ends within `look_back` characters before it (`ends`, the sorted ends of those
 *   commands, as `_Assigning` finds them), and, for a secret name, no `,` is within 60 characters
 *   (where a CSV header could be) or the CSV pass would find no header there at its first checks;
 * - `verdicts[name]` is 1 and no random-looking token can follow it: `_random_token_after` finds no
 *   run of 20 or more token characters where its gap (`_CONTEXT_GAP_RE`) ends (`key)`, `keys, `);
 * - `verdicts[name]` is 2, the name does not start with `-`, `_named_value` surely finds no value
 *   (no separator, quote or backslash after the name, no `<` before it, and no `:` or `=` where
 *   `paired_value_span` looks back to: `token)`, `(self.flow_key,`), no random-looking token can
 *   follow it, and the CSV pass would find nothing (as above).
 *
 * It returns (hit, start, end) of the first name it does not skip, for the Python loop to decide,
 * or None when none is left. A name not in `verdicts`, or `ends` None where they are needed, is
 * returned too (the Python loop learns the verdict and computes the ends). Within one call (no
 * Python code runs, so `verdicts` does not change) the verdicts found are remembered by the name's
 * place in the text: a name met again (`token` in prose, `max_tokens` in JSON) is compared in
 * place, without a str or a dict lookup.
 *
 * `decoded_view(text)` is capsem/escapes.py's `python_view` (the reference) in one pass: the text as
 * the scrubber reads it, JSON's and URLs' escapes decoded, with where the shorter decodes are.
 * `ascii_view(text)` is the text with each non-ASCII character read as `\x7f` (escapes.py's).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#define SCRUBPATH_VERSION 10


static inline int is_name_char(Py_UCS4 c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '.' ||
           c == '-';
}

static inline int is_ascii_alpha(Py_UCS4 c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }

/* Python's `re` \w on a str: alphanumeric as str.isalnum() says, or `_` */
static inline int is_word(Py_UCS4 c) { return c == '_' || Py_UNICODE_ISALNUM(c); }

typedef struct {
    int kind;
    const void *data;
    Py_ssize_t len;
} Text;

static inline Py_UCS4 at(const Text *t, Py_ssize_t i) { return PyUnicode_READ(t->kind, t->data, i); }

/* the first item of the sorted list of ints `hits` at or after `pos` (-1: none, -2: error); `*index`
 * is where the last one was (-1 at first: bisected), for a `pos` no smaller than the last one's */
static Py_ssize_t next_hit(PyObject *hits, Py_ssize_t pos, Py_ssize_t *index) {
    Py_ssize_t lo = *index, n = PyList_GET_SIZE(hits);
    if (lo < 0) {
        Py_ssize_t hi = n;
        lo = 0;
        while (lo < hi) { /* bisect_left */
            Py_ssize_t mid = (lo + hi) / 2;
            Py_ssize_t v = PyLong_AsSsize_t(PyList_GET_ITEM(hits, mid));
            if (v == -1 && PyErr_Occurred()) return -2;
            if (v < pos) lo = mid + 1;
            else hi = mid;
        }
    }
    for (; lo < n; lo++) { /* past the hits before `pos`, in order */
        Py_ssize_t v = PyLong_AsSsize_t(PyList_GET_ITEM(hits, lo));
        if (v == -1 && PyErr_Occurred()) return -2;
        if (v >= pos) {
            *index = lo;
            return v;
        }
    }
    *index = n;
    return -1;
}

/* `_PROSE_AFTER_RE.match(text, pos)`: `[ \t]+(?!(?:is|was|IS|Is|Was)\b)[A-Za-z]{1,19}\b(?![\w.\-/+~=])` */
static int prose_after(const Text *t, Py_ssize_t p) {
    if (p >= t->len || (at(t, p) != ' ' && at(t, p) != '\t')) return 0;
    while (p < t->len && (at(t, p) == ' ' || at(t, p) == '\t')) p++;
    Py_ssize_t q = p;
    while (q < t->len && is_ascii_alpha(at(t, q))) q++;
    Py_ssize_t n = q - p;
    if (n < 1 || n > 19) return 0;
    if (q < t->len) {
        Py_UCS4 c = at(t, q);
        if (is_word(c) || c == '.' || c == '-' || c == '/' || c == '+' || c == '~' || c == '=') return 0;
    }
    if (n == 2 || n == 3) {
        char w[4] = {0};
        for (Py_ssize_t k = 0; k < n; k++) w[k] = (char)at(t, p + k);
        if (!strcmp(w, "is") || !strcmp(w, "was") || !strcmp(w, "IS") || !strcmp(w, "Is") || !strcmp(w, "Was"))
            return 0;
    }
    return 1;
}

/* whether the closest end in `ends` at or before `start` is within `look_back` (-1: error) */
static int end_near(PyObject *ends, Py_ssize_t start, Py_ssize_t look_back) {
    Py_ssize_t lo = 0, hi = PyList_GET_SIZE(ends);
    while (lo < hi) { /* bisect_right */
        Py_ssize_t mid = (lo + hi) / 2;
        Py_ssize_t v = PyLong_AsSsize_t(PyList_GET_ITEM(ends, mid));
        if (v == -1 && PyErr_Occurred()) return -1;
        if (start < v) hi = mid;
        else lo = mid + 1;
    }
    if (lo == 0) return 0;
    Py_ssize_t v = PyLong_AsSsize_t(PyList_GET_ITEM(ends, lo - 1));
    if (v == -1 && PyErr_Occurred()) return -1;
    return v >= start - look_back;
}

static int comma_near(const Text *t, Py_ssize_t start, Py_ssize_t end) {
    Py_ssize_t a = start - 60 > 0 ? start - 60 : 0, b = end + 60 < t->len ? end + 60 : t->len;
    if (t->kind == PyUnicode_1BYTE_KIND) return a < b && memchr((const char *)t->data + a, ',', (size_t)(b - a)) != NULL;
    for (Py_ssize_t i = a; i < b; i++)
        if (at(t, i) == ',') return 1;
    return 0;
}

/* whether `csv_column_spans(text, start, …)` (capsem/credential_places.py) returns at its first
 * two checks, finding nothing: `_FIELD_REST_RE` (`[\w .\-/]{0,40}?[ \t]*(?:[,\r\n\\"]|$)`) does not
 * match at `start`, or no `,`, LF or `"` is in the 42 characters before it (when there are 42), or
 * no `,` in the 300 after it */
static int csv_cannot(const Text *t, Py_ssize_t start) {
    int field = 0;
    for (Py_ssize_t k = 0; k <= 40 && !field; k++) {
        Py_ssize_t p = start + k;
        if (k > 0) {
            Py_UCS4 c = at(t, p - 1);
            if (!(is_word(c) || c == ' ' || c == '.' || c == '-' || c == '/')) break;
        }
        while (p < t->len && (at(t, p) == ' ' || at(t, p) == '\t')) p++;
        if (p == t->len) field = 1;
        else {
            Py_UCS4 c = at(t, p);
            field = c == ',' || c == '\r' || c == '\n' || c == '\\' || c == '"';
        }
    }
    if (!field) return 1;
    Py_ssize_t low = start - 42 > 0 ? start - 42 : 0;
    int edge = 0;
    for (Py_ssize_t i = low; i < start && !edge; i++) {
        Py_UCS4 c = at(t, i);
        edge = c == ',' || c == '\n' || c == '"';
    }
    if (!edge && low > 0) return 1;
    Py_ssize_t high = start + 300 < t->len ? start + 300 : t->len;
    if (t->kind == PyUnicode_1BYTE_KIND)
        return !(start < high && memchr((const char *)t->data + start, ',', (size_t)(high - start)) != NULL);
    for (Py_ssize_t i = start; i < high; i++)
        if (at(t, i) == ',') return 0;
    return 1;
}

static inline int is_token_char(Py_UCS4 c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '+' || c == '/' ||
           c == '_' || c == '-' || c == '.' || c == '~';
}

static inline int is_blank(const Text *t, Py_ssize_t p) { return p < t->len && (at(t, p) == ' ' || at(t, p) == '\t'); }

/* past `(?:\\*[quotes])?` at p: backslashes, then one of `quotes`, or nothing */
static Py_ssize_t past_quote(const Text *t, Py_ssize_t p, const char *quotes) {
    Py_ssize_t q = p;
    while (q < t->len && at(t, q) == '\\') q++;
    return q < t->len && at(t, q) < 128 && at(t, q) != 0 && strchr(quotes, (int)at(t, q)) ? q + 1 : p;
}

/* whether `_random_token_after(text, end)` (capsem/secret_names.py) surely finds nothing: 1 when
 * `LONG_TOKEN_RE` cannot match where `_CONTEXT_GAP_RE`
 * (`(?:\\*["'])?[ \t]*(?:(?::=|[:=]|->|=>|(?:is|was)(?=[ \t]))[ \t]*)?(?:\\*["'`(])?`, case-less)
 * ends, 0 when it may (or a non-ASCII character could fold to `is`/`was`: Python decides) */
static int no_token_after(const Text *t, Py_ssize_t p) {
    p = past_quote(t, p, "\"'");
    while (is_blank(t, p)) p++;
    for (Py_ssize_t k = p; k < p + 4 && k < t->len; k++)
        if (at(t, k) >= 128) return 0;
    Py_UCS4 a = p < t->len ? at(t, p) : 0, b = p + 1 < t->len ? at(t, p + 1) : 0;
    Py_UCS4 c = p + 2 < t->len ? at(t, p + 2) : 0;
    Py_ssize_t sep = 0;
    if ((a == ':' && b == '=') || (a == '-' && b == '>') || (a == '=' && b == '>')) sep = 2;
    else if (a == ':' || a == '=') sep = 1;
    else if ((a | 32) == 'i' && (b | 32) == 's' && is_blank(t, p + 2)) sep = 2;
    else if ((a | 32) == 'w' && (b | 32) == 'a' && (c | 32) == 's' && is_blank(t, p + 3)) sep = 3;
    if (sep) {
        p += sep;
        while (is_blank(t, p)) p++;
    }
    p = past_quote(t, p, "\"'`(");
    if (p > 0 && is_token_char(at(t, p - 1))) return 1; /* the token's look-behind */
    Py_ssize_t q = p;
    while (q < t->len && q - p < 20 && is_token_char(at(t, q))) q++;
    return q - p < 20;
}

/* whether `_named_value(text, start, end, …)` surely returns (None, end) for a secret name: its
 * `_NAMED_RE` needs a separator, a quote or a backslash right after the name, and before that an
 * element (`<` before the name) or a paired value (a `:` or `=` where `paired_value_span` looks
 * back to, past blanks, quotes and backslashes) could be found instead */
static int no_value_follows(const Text *t, Py_ssize_t start, Py_ssize_t end) {
    if (end < t->len) {
        Py_UCS4 c = at(t, end);
        if (c == '"' || c == '\'' || c == '\\' || c == ' ' || c == '\t' || c == ':' || c == '=') return 0;
    }
    if (start == 0) return 1;
    Py_UCS4 before = at(t, start - 1);
    if (before == '<') return 0;
    if (before == '"' || before == '\'' || before == ' ' || before == '\t' || before == ':' || before == '=' ||
        before == '\\') {
        Py_ssize_t b = start - 1;
        while (b > 0) {
            Py_UCS4 c = at(t, b);
            if (c != '\\' && c != '"' && c != '\'' && c != ' ' && c != '\t') break;
            b--;
        }
        if (at(t, b) == ':' || at(t, b) == '=') return 0;
    }
    return 1;
}

#define NAME_SLOTS 64 /* a power of two */

/* a verdict `named_next` found in `verdicts` during one call, for the name at text[start:start+len] */
typedef struct {
    Py_ssize_t start, len;
    long verdict;
} KnownName;

/* FNV-1a over a name's characters */
static inline uint32_t name_hash(const Text *t, Py_ssize_t start, Py_ssize_t end) {
    uint32_t h = 2166136261u;
    for (Py_ssize_t i = start; i < end; i++) h = (h ^ (uint32_t)at(t, i)) * 16777619u;
    return h;
}

/* the verdict of the name text[start:end]: from `slots` when met before in this call, else from
 * `verdicts` (-1: not there; -2: an error) */
static long verdict_of(PyObject *text, const Text *t, Py_ssize_t start, Py_ssize_t end, PyObject *verdicts,
                       KnownName *slots) {
    Py_ssize_t len = end - start;
    KnownName *slot = &slots[name_hash(t, start, end) & (NAME_SLOTS - 1)];
    if (slot->len == len &&
        memcmp((const char *)t->data + slot->start * t->kind, (const char *)t->data + start * t->kind,
               (size_t)(len * t->kind)) == 0)
        return slot->verdict;
    PyObject *name = PyUnicode_Substring(text, start, end);
    if (name == NULL) return -2;
    PyObject *verdict = PyDict_GetItemWithError(verdicts, name);
    Py_DECREF(name);
    if (verdict == NULL) return PyErr_Occurred() ? -2 : -1;
    long v = PyLong_AsLong(verdict);
    if (v == -1 && PyErr_Occurred()) return -2;
    if (v >= 0) *slot = (KnownName){start, len, v};
    return v;
}

static PyObject *named_next(PyObject *self, PyObject *args) {
    PyObject *text, *hits, *verdicts, *ends;
    Py_ssize_t pos, look_back;
    if (!PyArg_ParseTuple(args, "UO!nO!On", &text, &PyList_Type, &hits, &pos, &PyDict_Type, &verdicts, &ends,
                          &look_back))
        return NULL;
    if (ends != Py_None && !PyList_Check(ends)) {
        PyErr_SetString(PyExc_TypeError, "ends must be a list or None");
        return NULL;
    }
    Text t = {PyUnicode_KIND(text), PyUnicode_DATA(text), PyUnicode_GET_LENGTH(text)};
    if (pos < 0) pos = 0;
    KnownName slots[NAME_SLOTS];
    for (int i = 0; i < NAME_SLOTS; i++) slots[i].len = -1;
    Py_ssize_t index = -1;
    for (;;) {
        Py_ssize_t hit = next_hit(hits, pos, &index);
        if (hit == -2) return NULL;
        if (hit < 0 || hit >= t.len) Py_RETURN_NONE;
        Py_ssize_t start = hit, end = hit;
        while (start > 0 && is_name_char(at(&t, start - 1))) start--;
        while (end < t.len && is_name_char(at(&t, end))) end++;
        long v = verdict_of(text, &t, start, end, verdicts, slots);
        if (v == -2) return NULL;
        int skip = 0;
        if (v == 0 || (v == 1 && no_token_after(&t, end))) {
            skip = 1;
        } else if ((v == 1 || v == 2) && at(&t, start) != '-' && ends != Py_None && prose_after(&t, end)) {
            int near = end_near(ends, start, look_back);
            if (near < 0) return NULL;
            skip = !near && !(v == 2 && comma_near(&t, start, end) && !csv_cannot(&t, start));
        } else if (v == 2 && at(&t, start) != '-' && no_value_follows(&t, start, end) && no_token_after(&t, end)) {
            skip = !(comma_near(&t, start, end) && !csv_cannot(&t, start));
        }
        if (!skip) return Py_BuildValue("(nnn)", hit, start, end);
        pos = end;
    }
}

/* `word_places(text, words)`: the sorted positions in `text` where one of `words` (a tuple of up to
 * MAX_WORDS strs of lower-case ASCII letters, three or more each) starts, ASCII letters in either case
 * (once per word that starts there): what Hyperscan's case-less scan of the text's UTF-8 finds
 * (`LiteralPlaces.places`, the reference), without a Python call per place. A non-ASCII character
 * never equals a letter: no case folding beyond ASCII, as Hyperscan's. One-byte text is read 16
 * bytes at a time (SSE2): where a word's first three letters stand, then the rest. */
#define MAX_WORDS 16

typedef struct {
    const char *chars[MAX_WORDS];
    Py_ssize_t lengths[MAX_WORDS];
    Py_ssize_t count;
} Words;

/* letter `w` (lower case) at text[i], in either case (`| 32` maps only `W` and `w` to `w`) */
static inline int letter_at(const Text *t, Py_ssize_t i, char w) { return (at(t, i) | 32) == (Py_UCS4)w; }

/* append `i` to `out` once per word that starts at text[i]; -1 on error */
static int add_words_at(const Text *t, const Words *words, Py_ssize_t i, PyObject *out) {
    for (Py_ssize_t k = 0; k < words->count; k++) {
        Py_ssize_t n = words->lengths[k], j = 0;
        if (i + n > t->len) continue;
        while (j < n && letter_at(t, i + j, words->chars[k][j])) j++;
        if (j < n) continue;
        PyObject *place = PyLong_FromSsize_t(i);
        if (place == NULL) return -1;
        int bad = PyList_Append(out, place);
        Py_DECREF(place);
        if (bad < 0) return -1;
    }
    return 0;
}

static PyObject *word_places(PyObject *module, PyObject *args) {
    PyObject *text, *tuple;
    if (!PyArg_ParseTuple(args, "UO!", &text, &PyTuple_Type, &tuple)) return NULL;
    Words words = {.count = PyTuple_GET_SIZE(tuple)};
    if (words.count < 1 || words.count > MAX_WORDS) {
        PyErr_SetString(PyExc_ValueError, "word_places: 1 to 16 words");
        return NULL;
    }
    for (Py_ssize_t k = 0; k < words.count; k++) {
        PyObject *word = PyTuple_GET_ITEM(tuple, k);
        if (!PyUnicode_Check(word) || !PyUnicode_IS_ASCII(word) || PyUnicode_GET_LENGTH(word) < 3) {
            PyErr_SetString(PyExc_ValueError, "word_places: words of three or more lower-case ASCII letters");
            return NULL;
        }
        words.chars[k] = (const char *)PyUnicode_1BYTE_DATA(word);
        words.lengths[k] = PyUnicode_GET_LENGTH(word);
        for (Py_ssize_t j = 0; j < words.lengths[k]; j++)
            if (words.chars[k][j] < 'a' || words.chars[k][j] > 'z') {
                PyErr_SetString(PyExc_ValueError, "word_places: words of three or more lower-case ASCII letters");
                return NULL;
            }
    }
    Text t = {PyUnicode_KIND(text), PyUnicode_DATA(text), PyUnicode_GET_LENGTH(text)};
    PyObject *out = PyList_New(0);
    if (out == NULL) return NULL;
    Py_ssize_t i = 0;
#if defined(__SSE2__)
    if (t.kind == PyUnicode_1BYTE_KIND) {
        const Py_UCS1 *p = (const Py_UCS1 *)t.data;
        const __m128i lower = _mm_set1_epi8(32);
        __m128i first[MAX_WORDS], second[MAX_WORDS], third[MAX_WORDS];
        for (Py_ssize_t k = 0; k < words.count; k++) {
            first[k] = _mm_set1_epi8(words.chars[k][0]);
            second[k] = _mm_set1_epi8(words.chars[k][1]);
            third[k] = _mm_set1_epi8(words.chars[k][2]);
        }
        for (; i + 18 <= t.len; i += 16) {
            __m128i a = _mm_or_si128(_mm_loadu_si128((const __m128i *)(p + i)), lower);
            __m128i b = _mm_or_si128(_mm_loadu_si128((const __m128i *)(p + i + 1)), lower);
            __m128i c = _mm_or_si128(_mm_loadu_si128((const __m128i *)(p + i + 2)), lower);
            __m128i any = _mm_setzero_si128();
            for (Py_ssize_t k = 0; k < words.count; k++)
                any = _mm_or_si128(any, _mm_and_si128(_mm_and_si128(_mm_cmpeq_epi8(a, first[k]), _mm_cmpeq_epi8(b, second[k])),
                                                      _mm_cmpeq_epi8(c, third[k])));
            unsigned mask = (unsigned)_mm_movemask_epi8(any);
            while (mask) {
                if (add_words_at(&t, &words, i + __builtin_ctz(mask), out) < 0) goto error;
                mask &= mask - 1;
            }
        }
    }
#endif
    for (; i < t.len; i++) {
        Py_UCS4 c = at(&t, i) | 32;
        for (Py_ssize_t k = 0; k < words.count; k++)
            if (c == (Py_UCS4)words.chars[k][0]) {
                if (add_words_at(&t, &words, i, out) < 0) goto error;
                break;
            }
    }
    return out;
error:
    Py_DECREF(out);
    return NULL;
}

/* ASCII hex digit's value, or -1 (`[0-9a-fA-F]` of a str pattern: ASCII only) */
static inline int hexval(Py_UCS4 c) {
    if (c >= '0' && c <= '9') return (int)(c - '0');
    if (c >= 'a' && c <= 'f') return (int)(c - 'a' + 10);
    if (c >= 'A' && c <= 'F') return (int)(c - 'A' + 10);
    return -1;
}

/* `_UNRESERVED`: an ASCII letter or digit, `-`, `.`, `_`, `~` */
static inline int unreserved(Py_UCS4 c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '.' ||
           c == '_' || c == '~';
}

/* Where the first backslash or `%` at or after `i` is (`n`: none). One-byte text: `memchr` for each,
 * `next` keeping where each was found (still the first while `i` has not passed it). */
static inline Py_ssize_t special_Py_UCS1(const Py_UCS1 *p, Py_ssize_t i, Py_ssize_t n, Py_ssize_t *next) {
    static const int wanted[2] = {'\\', '%'};
    for (int k = 0; k < 2; k++) {
        if (next[k] < i) {
            const Py_UCS1 *q = memchr(p + i, wanted[k], (size_t)(n - i));
            next[k] = q == NULL ? n : q - p;
        }
    }
    return next[0] < next[1] ? next[0] : next[1];
}

/* Two-byte text: four characters at a time (a lane equal to either is a zero lane of the XOR). */
#define ZERO_LANE16(v) (((v) - 0x0001000100010001ULL) & ~(v) & 0x8000800080008000ULL)
static inline Py_ssize_t special_Py_UCS2(const Py_UCS2 *p, Py_ssize_t i, Py_ssize_t n, Py_ssize_t *next) {
    (void)next;
    for (; i + 4 <= n; i += 4) {
        uint64_t w;
        memcpy(&w, p + i, 8);
        if (ZERO_LANE16(w ^ 0x005C005C005C005CULL) || ZERO_LANE16(w ^ 0x0025002500250025ULL)) break;
    }
    while (i < n && p[i] != '\\' && p[i] != '%') i++;
    return i;
}

static inline Py_ssize_t special_Py_UCS4(const Py_UCS4 *p, Py_ssize_t i, Py_ssize_t n, Py_ssize_t *next) {
    (void)next;
    while (i < n && p[i] != '\\' && p[i] != '%') i++;
    return i;
}

/* The escape at `p[i]` (a backslash or `%`), as `text.replace("\\n", "\r\n")` and then
 * `_JSON_ESCAPE_RE` and `_PERCENT_RE` read it: how many characters it spans (0: none starts here),
 * and in `rep` what it becomes (`*nrep` -1: it stays as it is). */
#define ESCAPE_AT(T)                                                                                           \
    static Py_ssize_t escape_at_##T(const T *p, Py_ssize_t n, Py_ssize_t i, Py_UCS4 *rep, int *nrep) {        \
        *nrep = -1;                                                                                            \
        if (p[i] == '%') {                                                                                     \
            if (i + 2 >= n || hexval(p[i + 1]) < 0 || hexval(p[i + 2]) < 0) return 0;                          \
            Py_UCS4 c = (Py_UCS4)(hexval(p[i + 1]) * 16 + hexval(p[i + 2]));                                   \
            if (unreserved(c)) rep[0] = c, *nrep = 1;                                                          \
            return 3;                                                                                          \
        }                                                                                                      \
        if (i + 1 >= n) return 0;                                                                              \
        switch (p[i + 1]) {                                                                                    \
        case 'n': rep[0] = '\r', rep[1] = '\n', *nrep = 2; return 2;                                           \
        case 'r': rep[0] = '\r', rep[1] = '\r', *nrep = 2; return 2;                                           \
        case 't': rep[0] = ' ', rep[1] = '\t', *nrep = 2; return 2;                                            \
        case 'f': rep[0] = ' ', rep[1] = '\f', *nrep = 2; return 2;                                            \
        case 'b': rep[0] = ' ', rep[1] = ' ', *nrep = 2; return 2;                                             \
        case '/': rep[0] = '/', *nrep = 1; return 2;                                                           \
        case 'u': break;                                                                                       \
        default: return 0;                                                                                     \
        }                                                                                                      \
        if (i + 5 >= n) return 0;                                                                              \
        long code = 0;                                                                                         \
        for (Py_ssize_t k = i + 2; k < i + 6; k++) {                                                           \
            int h = hexval(p[k]);                                                                              \
            if (h < 0) return 0;                                                                               \
            code = code * 16 + h;                                                                              \
        }                                                                                                      \
        Py_ssize_t len = 6;                                                                                    \
        if (i + 11 < n && p[i + 6] == '\\' && p[i + 7] == 'u' && (p[i + 8] == 'd' || p[i + 8] == 'D') &&       \
            ((p[i + 9] >= 'c' && p[i + 9] <= 'f') || (p[i + 9] >= 'C' && p[i + 9] <= 'F')) &&                  \
            hexval(p[i + 10]) >= 0 && hexval(p[i + 11]) >= 0)                                                 \
            len = 12;                                                                                          \
        if (code >= 0xD800 && code < 0xDC00) {                                                                 \
            if (len == 12) rep[0] = 0x7f, *nrep = 1; /* a surrogate pair: one character */                    \
        } else if (!((code < 0x20 && code != 9 && code != 10 && code != 13) || code == 0x22 || code == 0x5C ||  \
                     (code >= 0xDC00 && code < 0xE000))) {                                                     \
            rep[0] = code < 0x80 ? (Py_UCS4)code : 0x7f, *nrep = 1;                                            \
        }                                                                                                      \
        return len;                                                                                            \
    }

/* The view of `p[0:n]`: its length, -1 on error; `*changed` set when it differs from the text.
 * With `out`, it is written there and the places and shifts of its shorter decodes appended (see
 * escapes.py); without, only measured (one pass to size the str, one to fill it: no buffer between). */
#define DECODE(T)                                                                                              \
    ESCAPE_AT(T)                                                                                               \
    static Py_ssize_t decode_##T(const T *p, Py_ssize_t n, T *out, PyObject *places, PyObject *shifts,       \
                                 int *changed) {                                                               \
        Py_ssize_t i = 0, o = 0, shift = 0, next[2] = {-1, -1};                                                \
        while (i < n) {                                                                                        \
            Py_ssize_t j = special_##T(p, i, n, next);                                                         \
            if (out) memcpy(out + o, p + i, (size_t)(j - i) * sizeof(T));                                      \
            o += j - i;                                                                                        \
            i = j;                                                                                             \
            if (i >= n) break;                                                                                 \
            Py_UCS4 rep[2];                                                                                    \
            int nrep;                                                                                          \
            Py_ssize_t len = escape_at_##T(p, n, i, rep, &nrep);                                               \
            if (len == 0) { /* nothing starts here: on to the next character */                               \
                if (out) out[o] = p[i];                                                                        \
                o++, i++;                                                                                      \
                continue;                                                                                      \
            }                                                                                                  \
            if (nrep < 0) { /* an escape that stays as it is */                                                \
                if (out) memcpy(out + o, p + i, (size_t)len * sizeof(T));                                      \
                o += len, i += len;                                                                            \
                continue;                                                                                      \
            }                                                                                                  \
            *changed = 1;                                                                                      \
            if (out && nrep < len) { /* a shorter decode: its place and the shift after it */                  \
                shift += len - nrep;                                                                           \
                PyObject *place = PyLong_FromSsize_t(o), *after = PyLong_FromSsize_t(shift);                   \
                int bad = place == NULL || after == NULL || PyList_Append(places, place) < 0 ||                \
                          PyList_Append(shifts, after) < 0;                                                    \
                Py_XDECREF(place);                                                                             \
                Py_XDECREF(after);                                                                             \
                if (bad) return -1;                                                                            \
            }                                                                                                  \
            for (int k = 0; out && k < nrep; k++) out[o + k] = (T)rep[k];                                      \
            o += nrep;                                                                                         \
            i += len;                                                                                          \
        }                                                                                                      \
        return o;                                                                                              \
    }

DECODE(Py_UCS1)
DECODE(Py_UCS2)
DECODE(Py_UCS4)

static Py_ssize_t decode(int kind, const void *data, Py_ssize_t n, void *out, PyObject *places, PyObject *shifts,
                         int *changed) {
    if (kind == PyUnicode_1BYTE_KIND) return decode_Py_UCS1(data, n, out, places, shifts, changed);
    if (kind == PyUnicode_2BYTE_KIND) return decode_Py_UCS2(data, n, out, places, shifts, changed);
    return decode_Py_UCS4(data, n, out, places, shifts, changed);
}

/* `decoded_view(text) -> (view, places, shifts) | None`: see the module doc. The view holds every
 * character of the text but its escapes (ASCII), and decodes to ASCII: its kind is the text's. */
static PyObject *decoded_view(PyObject *self, PyObject *text) {
    (void)self;
    if (!PyUnicode_Check(text)) {
        PyErr_SetString(PyExc_TypeError, "decoded_view(text): text must be a str");
        return NULL;
    }
    int kind = PyUnicode_KIND(text), changed = 0;
    const void *data = PyUnicode_DATA(text);
    Py_ssize_t n = PyUnicode_GET_LENGTH(text);
    Py_ssize_t length = decode(kind, data, n, NULL, NULL, NULL, &changed);
    if (!changed) Py_RETURN_NONE;
    PyObject *view = PyUnicode_New(length, PyUnicode_MAX_CHAR_VALUE(text));
    PyObject *places = PyList_New(0), *shifts = PyList_New(0), *result = NULL;
    if (view != NULL && places != NULL && shifts != NULL &&
        decode(kind, data, n, PyUnicode_DATA(view), places, shifts, &changed) == length) {
        PyObject *place_tuple = PyList_AsTuple(places), *shift_tuple = PyList_AsTuple(shifts);
        if (place_tuple != NULL && shift_tuple != NULL) result = PyTuple_Pack(3, view, place_tuple, shift_tuple);
        Py_XDECREF(place_tuple);
        Py_XDECREF(shift_tuple);
    }
    Py_XDECREF(view);
    Py_XDECREF(places);
    Py_XDECREF(shifts);
    return result;
}

/* `ascii_view(text) -> str`: see the module doc (the text itself when it is ASCII). */
static PyObject *ascii_view(PyObject *self, PyObject *text) {
    (void)self;
    if (!PyUnicode_Check(text)) {
        PyErr_SetString(PyExc_TypeError, "ascii_view(text): text must be a str");
        return NULL;
    }
    if (PyUnicode_IS_ASCII(text)) return Py_NewRef(text);
    int kind = PyUnicode_KIND(text);
    const void *data = PyUnicode_DATA(text);
    Py_ssize_t n = PyUnicode_GET_LENGTH(text);
    PyObject *view = PyUnicode_New(n, 0x7f);
    if (view == NULL) return NULL;
    Py_UCS1 *out = PyUnicode_1BYTE_DATA(view);
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_UCS4 c = PyUnicode_READ(kind, data, i);
        out[i] = c < 0x80 ? (Py_UCS1)c : 0x7f;
    }
    return view;
}

static PyMethodDef methods[] = {
    {"ascii_view", ascii_view, METH_O, "ascii_view(text) -> str: see the module doc."},
    {"decoded_view", decoded_view, METH_O,
     "decoded_view(text) -> (view, places, shifts) | None: see the module doc."},
    {"word_places", word_places, METH_VARARGS, "word_places(text, words) -> list of int: see word_places."},
    {"named_next", named_next, METH_VARARGS,
     "named_next(text, hits, pos, verdicts, ends, look_back) -> (hit, start, end) | None: see the module doc."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_scrubpath", "capsem's compiled scrubber path.", -1,
                                    methods};

PyMODINIT_FUNC PyInit__scrubpath(void) {
    PyObject *m = PyModule_Create(&module);
    if (m != NULL && PyModule_AddIntConstant(m, "VERSION", SCRUBPATH_VERSION) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
