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
 * `delta_fields(text)` is `capsem.stream_scrub._DELTA_RE.findall(text)`: the (key, raw JSON string
 * value) of every delta field of a streamed body, found left to right without overlap, as the
 * regular expression finds them (a test compares both on generated text). `delta_channels(text)` is
 * what `scrub_deltas` makes of those: the non-empty values, each decoded as `json.loads` decodes
 * it (one it refuses is left out), listed per key in order.
 *
 * `note_ends(noted, ends, times, started, limit)` is `StreamRead.feed_held`'s loop
 * (addons/recorder/streams.py): for each chunk whose decoded end is past the last noted one, while
 * `noted` holds fewer than `limit`, it appends (end, max(0, round((at - started) * 1000))), rounding
 * half to even as Python's `round` does.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <string.h>

#define FASTPATH_VERSION 4

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

static int hexval(const char *p) {
    int v = 0;
    for (int i = 0; i < 4; i++) {
        char c = p[i];
        v <<= 4;
        if (c >= '0' && c <= '9') v |= c - '0';
        else if (c >= 'a' && c <= 'f') v |= c - 'a' + 10;
        else if (c >= 'A' && c <= 'F') v |= c - 'A' + 10;
        else return -1;
    }
    return v;
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

/* A JSON string from p (just after its opening quote) into o (UTF-8); returns the byte after the
 * closing quote, NULL when it is not a string msgspec reads the same way (see the module doc), or
 * (const char *)1 on a memory error. */
static const char *json_string(const char *p, const char *e, Out *o) {
    o->len = 0;
    while (p < e) {
        const char *run = p;
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
            int cp = hexval(p + 2);
            if (cp < 0) return NULL;
            p += 6;
            if (cp >= 0xD800 && cp <= 0xDBFF) { /* a pair, or the reference decides */
                if (e - p < 6 || p[0] != '\\' || p[1] != 'u') return NULL;
                int lo = hexval(p + 2);
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

static PyObject *frame_plain(PyObject *self, PyObject *args) {
    Py_buffer view;
    Py_ssize_t start, end;
    PyObject *ident, *event_type;
    int kind;
    if (!PyArg_ParseTuple(args, "y*nnOOi", &view, &start, &end, &ident, &event_type, &kind)) return NULL;
    if (start < 0 || end > view.len || start > end) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "range out of the buffer");
        return NULL;
    }
    const char *base = view.buf;
    const char *p = base + start, *e = base + end;
    Out o = {NULL, 0, 0};
    PyObject *events = PyList_New(0), *run = NULL;
    if (events == NULL) goto fail;
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
        }
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
    PyMem_Free(o.buf);
    PyBuffer_Release(&view);
    return events;
not_plain:
    PyMem_Free(o.buf);
    PyBuffer_Release(&view);
    Py_DECREF(events);
    Py_RETURN_NONE;
fail:
    PyMem_Free(o.buf);
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

/* The next delta field at or after *pos: its key, and its raw value text[*start:*end]; *pos moves
 * past it. 0 when there is none. The regular expression's search, step by step. */
static inline int next_field_of(const int kind, const void *data, Py_ssize_t n, Py_ssize_t *pos, int *key,
                                Py_ssize_t *start, Py_ssize_t *end) {
    Py_ssize_t i = *pos;
    for (; i < n; i++) {
        if (kind == PyUnicode_1BYTE_KIND) { /* (most bodies) the next quote at memchr's speed */
            const char *q = memchr((const char *)data + i, '"', (size_t)(n - i));
            if (q == NULL) break;
            i = q - (const char *)data;
        } else if (PyUnicode_READ(kind, data, i) != '"') {
            continue;
        }
        Py_ssize_t j = i + 1; /* the key's closing quote */
        while (j < n && j - i <= MAX_DELTA_KEY + 1 && PyUnicode_READ(kind, data, j) != '"') j++;
        int k = (j < n) ? delta_key(kind, data, i + 1, j) : -1;
        if (k < 0) continue;
        Py_ssize_t p = j + 1;
        while (p < n && (PyUnicode_READ(kind, data, p) == ' ' || PyUnicode_READ(kind, data, p) == '\t')) p++;
        if (p >= n || PyUnicode_READ(kind, data, p) != ':') continue;
        p++;
        while (p < n && (PyUnicode_READ(kind, data, p) == ' ' || PyUnicode_READ(kind, data, p) == '\t')) p++;
        if (p >= n || PyUnicode_READ(kind, data, p) != '"') continue;
        Py_ssize_t first = ++p, last = -1;
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

/* `json.loads('"' + text[start:end] + '"')` for a raw value holding a backslash: a new str, or
 * Py_None (borrowed) where json.loads raises (a bad escape, a control character). */
static PyObject *json_unescape(int kind, const void *data, Py_ssize_t start, Py_ssize_t end) {
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
        Py_UCS4 cp = 0;
        if (p + 6 > end) goto bad;
        for (int k = 2; k < 6; k++) {
            Py_UCS4 h = PyUnicode_READ(kind, data, p + k);
            cp <<= 4;
            if (h >= '0' && h <= '9') cp |= h - '0';
            else if (h >= 'a' && h <= 'f') cp |= h - 'a' + 10;
            else if (h >= 'A' && h <= 'F') cp |= h - 'A' + 10;
            else goto bad;
        }
        p += 6;
        if (cp >= 0xD800 && cp <= 0xDBFF && p + 6 <= end && PyUnicode_READ(kind, data, p) == '\\' &&
            PyUnicode_READ(kind, data, p + 1) == 'u') { /* json joins a pair; a lone half stays */
            Py_UCS4 lo = 0;
            int ok = 1;
            for (int k = 2; k < 6; k++) {
                Py_UCS4 h = PyUnicode_READ(kind, data, p + k);
                lo <<= 4;
                if (h >= '0' && h <= '9') lo |= h - '0';
                else if (h >= 'a' && h <= 'f') lo |= h - 'a' + 10;
                else if (h >= 'A' && h <= 'F') lo |= h - 'A' + 10;
                else { ok = 0; break; }
            }
            if (ok && lo >= 0xDC00 && lo <= 0xDFFF) {
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                p += 6;
            }
        }
        buf[n++] = cp;
    }
    PyObject *out = PyUnicode_FromKindAndData(PyUnicode_4BYTE_KIND, buf, n);
    PyMem_Free(buf);
    return out;
bad:
    PyMem_Free(buf);
    return Py_None;
}

/* `delta_channels(text) -> dict[key, list[str]]`: the decoded non-empty values of every delta
 * field, per key, in order (what scrub_deltas joins); a value json.loads refuses is left out. */
static PyObject *delta_channels(PyObject *self, PyObject *arg) {
    if (!PyUnicode_Check(arg)) {
        PyErr_SetString(PyExc_TypeError, "delta_channels() takes a str");
        return NULL;
    }
    int kind = PyUnicode_KIND(arg), key;
    const void *data = PyUnicode_DATA(arg);
    Py_ssize_t n = PyUnicode_GET_LENGTH(arg), pos = 0, start, end;
    PyObject *channels = PyDict_New(), *lists[N_DELTA_KEYS] = {NULL};
    if (channels == NULL) return NULL;
    while (next_field(kind, data, n, &pos, &key, &start, &end)) {
        if (end == start) continue;
        int escaped = 0;
        if (kind == PyUnicode_1BYTE_KIND) {
            escaped = memchr((const char *)data + start, '\\', (size_t)(end - start)) != NULL;
        } else {
            for (Py_ssize_t p = start; p < end; p++)
                if (PyUnicode_READ(kind, data, p) == '\\') { escaped = 1; break; }
        }
        PyObject *value = escaped ? json_unescape(kind, data, start, end) : PyUnicode_Substring(arg, start, end);
        if (value == NULL) goto fail;
        if (value == Py_None) continue;
        if (PyUnicode_GET_LENGTH(value) == 0) { Py_DECREF(value); continue; }
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
    }
    return channels;
fail:
    Py_DECREF(channels);
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
    {"frame_plain", frame_plain, METH_VARARGS,
     "frame_plain(buf, start, end, ident, event_type, kind) -> list | None: see the module doc."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_fastpath", "capsem's compiled fast path.", -1,
                                    methods};

PyMODINIT_FUNC PyInit__fastpath(void) {
    for (int k = 0; k < N_DELTA_KEYS; k++) {
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
