/* capsem's compiled ledger path: `Ledger.rows`' loop over a batch's rows, in C.
 *
 * `chain_rows(prefix, rows, start, key, chain, table, shape, out, sha256)` does for rows[start:]
 * what the Python loop in capsem/store/ledger.py does (the reference this code must agree with):
 * each row's digest is SHA-256(prefix ‖ the row's values msgpack-encoded as `encoded` encodes
 * them: a bool as its integer, an integral float below 2**63 as an integer, everything else as
 * msgspec encodes it), the chain moves to SHA-256(chain ‖ digest), and
 * (table, row[key] or None, shape, digest, chain) is appended to `out`. The hashing is hashlib's
 * (`sha256` is `hashlib.sha256`): only the encoding and the loop's steps are done here.
 *
 * It stops before a row holding a value it does not encode (a type other than None, bool, int,
 * float, str and bytes; an int past 64 bits; a str that is not valid UTF-8, such as one with a
 * lone surrogate) and returns (chain, index of that row), for the Python loop to take that row;
 * (chain, len(rows)) when it did them all.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <string.h>

#define LEDGERPATH_VERSION 1

typedef struct {
    unsigned char *data;
    Py_ssize_t len, cap;
} Buf;

static int buf_room(Buf *b, Py_ssize_t n) {
    if (b->len + n <= b->cap) return 0;
    Py_ssize_t cap = b->cap ? b->cap : 1024;
    while (cap < b->len + n) cap *= 2;
    unsigned char *data = PyMem_Realloc(b->data, (size_t)cap);
    if (data == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    b->data = data;
    b->cap = cap;
    return 0;
}

static int put(Buf *b, const void *p, Py_ssize_t n) {
    if (buf_room(b, n) < 0) return -1;
    memcpy(b->data + b->len, p, (size_t)n);
    b->len += n;
    return 0;
}

/* A tag byte followed by `n` big-endian bytes of `v`. */
static int put_tagged(Buf *b, unsigned char tag, unsigned long long v, int n) {
    unsigned char out[9];
    out[0] = tag;
    for (int i = 0; i < n; i++) out[1 + i] = (unsigned char)(v >> (8 * (n - 1 - i)));
    return put(b, out, 1 + n);
}

static int put_int(Buf *b, long long v) {
    if (v >= 0) {
        unsigned long long u = (unsigned long long)v;
        if (u <= 0x7f) return put_tagged(b, (unsigned char)u, 0, 0);
        if (u <= 0xff) return put_tagged(b, 0xcc, u, 1);
        if (u <= 0xffff) return put_tagged(b, 0xcd, u, 2);
        if (u <= 0xffffffffULL) return put_tagged(b, 0xce, u, 4);
        return put_tagged(b, 0xcf, u, 8);
    }
    if (v >= -32) return put_tagged(b, (unsigned char)(v & 0xff), 0, 0);
    if (v >= -128) return put_tagged(b, 0xd0, (unsigned long long)v & 0xff, 1);
    if (v >= -32768) return put_tagged(b, 0xd1, (unsigned long long)v & 0xffff, 2);
    if (v >= -2147483648LL) return put_tagged(b, 0xd2, (unsigned long long)v & 0xffffffffULL, 4);
    return put_tagged(b, 0xd3, (unsigned long long)v, 8);
}

static int put_sized(Buf *b, unsigned char fix, unsigned char tag8, unsigned char tag16, unsigned char tag32,
                     const void *p, Py_ssize_t n) {
    int r;
    if (fix && n < 32) r = put_tagged(b, (unsigned char)(fix | n), 0, 0);
    else if (tag8 && n <= 0xff) r = put_tagged(b, tag8, (unsigned long long)n, 1);
    else if (n <= 0xffff) r = put_tagged(b, tag16, (unsigned long long)n, 2);
    else r = put_tagged(b, tag32, (unsigned long long)n, 4);
    return r < 0 ? -1 : put(b, p, n);
}

/* 1: encoded; 0: a value this code does not encode (the Python loop takes the row); -1: error. */
static int put_value(Buf *b, PyObject *v) {
    if (v == Py_None) return put_tagged(b, 0xc0, 0, 0) < 0 ? -1 : 1;
    if (v == Py_True || v == Py_False) return put_int(b, v == Py_True) < 0 ? -1 : 1;
    if (PyLong_CheckExact(v)) {
        int overflow;
        long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
        if (overflow > 0) { /* uint64 still */
            unsigned long long u = PyLong_AsUnsignedLongLong(v);
            if (u == (unsigned long long)-1 && PyErr_Occurred()) {
                PyErr_Clear();
                return 0;
            }
            return put_tagged(b, 0xcf, u, 8) < 0 ? -1 : 1;
        }
        if (overflow < 0) return 0;
        if (x == -1 && PyErr_Occurred()) return -1;
        return put_int(b, x) < 0 ? -1 : 1;
    }
    if (PyFloat_CheckExact(v)) {
        double d = PyFloat_AS_DOUBLE(v);
        if (isfinite(d) && d == floor(d) && fabs(d) < 9223372036854775808.0)
            return put_int(b, (long long)d) < 0 ? -1 : 1;
        unsigned long long u;
        memcpy(&u, &d, 8);
        return put_tagged(b, 0xcb, u, 8) < 0 ? -1 : 1;
    }
    if (PyUnicode_CheckExact(v)) {
        Py_ssize_t n;
        const char *s = PyUnicode_AsUTF8AndSize(v, &n);
        if (s == NULL) {
            PyErr_Clear(); /* a lone surrogate: msgspec refuses it too, the Python loop says how */
            return 0;
        }
        return put_sized(b, 0xa0, 0xd9, 0xda, 0xdb, s, n) < 0 ? -1 : 1;
    }
    if (PyBytes_CheckExact(v))
        return put_sized(b, 0, 0xc4, 0xc5, 0xc6, PyBytes_AS_STRING(v), PyBytes_GET_SIZE(v)) < 0 ? -1 : 1;
    return 0;
}

static PyObject *digest_name;

/* sha256(data).digest() */
static PyObject *hash_of(PyObject *sha256, const unsigned char *data, Py_ssize_t n) {
    PyObject *bytes = PyMemoryView_FromMemory((char *)data, n, PyBUF_READ); /* (no copy) */
    if (bytes == NULL) return NULL;
    PyObject *h = PyObject_CallOneArg(sha256, bytes);
    Py_DECREF(bytes);
    if (h == NULL) return NULL;
    PyObject *digest = PyObject_CallMethodNoArgs(h, digest_name);
    Py_DECREF(h);
    if (digest != NULL && (!PyBytes_CheckExact(digest) || PyBytes_GET_SIZE(digest) != 32)) {
        Py_DECREF(digest);
        PyErr_SetString(PyExc_ValueError, "chain_rows: sha256 must give 32-byte digests");
        return NULL;
    }
    return digest;
}

static PyObject *chain_rows(PyObject *self, PyObject *args) {
    PyObject *prefix, *rows, *chain, *table, *shape, *out, *sha256;
    Py_ssize_t start, key;
    if (!PyArg_ParseTuple(args, "O!O!nnO!OOO!O", &PyBytes_Type, &prefix, &PyList_Type, &rows, &start, &key,
                          &PyBytes_Type, &chain, &table, &shape, &PyList_Type, &out, &sha256))
        return NULL;
    if (PyBytes_GET_SIZE(chain) != 32) {
        PyErr_SetString(PyExc_ValueError, "chain_rows: the chain is 32 bytes");
        return NULL;
    }
    Buf b = {NULL, 0, 0};
    unsigned char link[64];
    memcpy(link, PyBytes_AS_STRING(chain), 32);
    Py_ssize_t i = start, n = PyList_GET_SIZE(rows);
    for (; i < n; i++) {
        PyObject *row = PyList_GET_ITEM(rows, i);
        if (!PyTuple_CheckExact(row)) break;
        Py_ssize_t width = PyTuple_GET_SIZE(row);
        if (key >= width) break;
        b.len = 0;
        if (put(&b, PyBytes_AS_STRING(prefix), PyBytes_GET_SIZE(prefix)) < 0) goto fail;
        if (width < 16 ? put_tagged(&b, (unsigned char)(0x90 | width), 0, 0) < 0
                       : put_tagged(&b, width <= 0xffff ? 0xdc : 0xdd, (unsigned long long)width,
                                    width <= 0xffff ? 2 : 4) < 0)
            goto fail;
        int ok = 1;
        for (Py_ssize_t j = 0; j < width && ok == 1; j++) ok = put_value(&b, PyTuple_GET_ITEM(row, j));
        if (ok < 0) goto fail;
        if (ok == 0) break;
        PyObject *digest = hash_of(sha256, b.data, b.len);
        if (digest == NULL) goto fail;
        memcpy(link + 32, PyBytes_AS_STRING(digest), 32);
        PyObject *next = hash_of(sha256, link, 64);
        if (next == NULL) {
            Py_DECREF(digest);
            goto fail;
        }
        memcpy(link, PyBytes_AS_STRING(next), 32);
        PyObject *entry = PyTuple_Pack(5, table, key < 0 ? Py_None : PyTuple_GET_ITEM(row, key), shape, digest, next);
        Py_DECREF(digest);
        Py_DECREF(next);
        if (entry == NULL) goto fail;
        int bad = PyList_Append(out, entry);
        Py_DECREF(entry);
        if (bad < 0) goto fail;
    }
    PyMem_Free(b.data);
    return Py_BuildValue("(y#n)", (const char *)link, (Py_ssize_t)32, i);
fail:
    PyMem_Free(b.data);
    return NULL;
}

static PyMethodDef methods[] = {
    {"chain_rows", chain_rows, METH_VARARGS,
     "chain_rows(prefix, rows, start, key, chain, table, shape, out, sha256) -> (chain, stopped at): see the "
     "module doc."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_ledgerpath", "capsem's compiled ledger path.", -1,
                                    methods};

PyMODINIT_FUNC PyInit__ledgerpath(void) {
    digest_name = PyUnicode_InternFromString("digest");
    if (digest_name == NULL) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m != NULL && PyModule_AddIntConstant(m, "VERSION", LEDGERPATH_VERSION) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
