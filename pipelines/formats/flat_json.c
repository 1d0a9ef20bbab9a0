/* Flat JSON objects into Arrow column buffers, in C: the JSON decoder's fast path for value schemas whose
 * fields are all booleans, integers, doubles or strings.
 *
 * `decode(data, offsets, large, validity, start, n, kinds, names)` reads the n values of an Arrow binary array
 * (its buffers: data, int32 or int64 offsets, an optional validity bitmap, and the array's offset `start`) and
 * returns (deferred, count, columns): one byte per record saying whether it was left to the full decoder, how
 * many were, and per field the buffers of its Arrow column (validity bitmap, values; for strings int32 offsets
 * and data). A record is decoded here only when this code is certain of the full decoder's answer: a JSON object
 * of declared keys (and undeclared ones with scalar values), each once, with values of the field's JSON type,
 * numbers in range, strings of valid UTF-8 and valid escapes, nothing after the object. Anything else (a
 * tombstone, a byte order mark, nesting, a repeated key, a mismatch, an overflow, a lone surrogate, ...) is
 * deferred: the full decoder (cohort/pipelines/decode.py) decodes or refuses it with its reason. Deferred rows
 * and null values hold zeros, so equal columns have equal bytes.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#define MAX_UNKNOWN_KEYS 16
#define MAX_NUMBER_TEXT 63

typedef enum { T_ABSENT, T_NULL, T_TRUE, T_FALSE, T_INT, T_NUM, T_STR } TokenType;

typedef struct {
    TokenType type;
    const uint8_t *start; /* strings: the content between the quotes */
    Py_ssize_t len;
    int escaped;  /* a string holding a backslash */
    int nonascii; /* a string holding a byte >= 0x80 */
} Token;

typedef struct {
    char kind; /* 'b' bool, '1' '2' '4' '8' signed integers of that many bytes, 'd' double, 's' string */
    const char *name;
    Py_ssize_t name_len;
    PyObject *validity, *values, *data; /* bytes objects, filled in place, returned to the caller */
    uint8_t *validity_bits, *value_bytes, *data_bytes;
    Py_ssize_t data_len;
    union {
        int64_t i;
        double d;
    } scratch; /* the record's value, before the record is accepted */
    Py_ssize_t scratch_len; /* strings: bytes written at data_bytes + data_len */
} Column;

static inline const uint8_t *skip_ws(const uint8_t *p, const uint8_t *end) {
    while (p < end && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')) p++;
    return p;
}

static inline int is_digit(uint8_t c) { return c >= '0' && c <= '9'; }

/* Bytes a string holds as they are (not a quote, a backslash, a control character or a byte >= 0x80). */
static uint8_t PLAIN[256];

static void init_plain(void) {
    for (int c = 0; c < 256; c++) PLAIN[c] = c >= 0x20 && c < 0x80 && c != '"' && c != '\\';
}

/* After the opening quote: the position after the closing one, or NULL (unterminated, a raw control char). */
static const uint8_t *scan_string(const uint8_t *p, const uint8_t *end, Token *t) {
    t->start = p;
    t->escaped = 0;
    t->nonascii = 0;
    while (p < end) {
        while (p < end && PLAIN[*p]) p++; /* the common bytes, one table look-up each */
        if (p >= end) break;
        uint8_t c = *p;
        if (c == '"') {
            t->len = p - t->start;
            t->type = T_STR;
            return p + 1;
        }
        if (c == '\\') {
            t->escaped = 1;
            if (end - p < 2) return NULL;
            p += 2;
            continue;
        }
        if (c < 0x20) return NULL;
        if (c >= 0x80) t->nonascii = 1;
        p++;
    }
    return NULL;
}

/* A number per RFC 8259's grammar: the position after it, or NULL. */
static const uint8_t *scan_number(const uint8_t *p, const uint8_t *end, Token *t) {
    const uint8_t *q = p;
    t->start = p;
    t->type = T_INT;
    if (q < end && *q == '-') q++;
    if (q >= end) return NULL;
    if (*q == '0') {
        q++;
    } else if (*q >= '1' && *q <= '9') {
        while (q < end && is_digit(*q)) q++;
    } else {
        return NULL;
    }
    if (q < end && *q == '.') {
        q++;
        if (q >= end || !is_digit(*q)) return NULL;
        while (q < end && is_digit(*q)) q++;
        t->type = T_NUM;
    }
    if (q < end && (*q == 'e' || *q == 'E')) {
        q++;
        if (q < end && (*q == '+' || *q == '-')) q++;
        if (q >= end || !is_digit(*q)) return NULL;
        while (q < end && is_digit(*q)) q++;
        t->type = T_NUM;
    }
    t->len = q - p;
    return q;
}

/* A scalar value (string, number, true, false, null): the position after it, or NULL (anything else). */
static const uint8_t *scan_scalar(const uint8_t *p, const uint8_t *end, Token *t) {
    if (p >= end) return NULL;
    switch (*p) {
        case '"':
            return scan_string(p + 1, end, t);
        case 't':
            if (end - p >= 4 && memcmp(p, "true", 4) == 0) {
                t->type = T_TRUE;
                return p + 4;
            }
            return NULL;
        case 'f':
            if (end - p >= 5 && memcmp(p, "false", 5) == 0) {
                t->type = T_FALSE;
                return p + 5;
            }
            return NULL;
        case 'n':
            if (end - p >= 4 && memcmp(p, "null", 4) == 0) {
                t->type = T_NULL;
                return p + 4;
            }
            return NULL;
        default:
            if (*p == '-' || is_digit(*p)) return scan_number(p, end, t);
            return NULL;
    }
}

/* Strict UTF-8 (no overlong forms, no surrogates, nothing past U+10FFFF), as Python's decoder. */
static int valid_utf8(const uint8_t *s, Py_ssize_t n) {
    Py_ssize_t i = 0;
    while (i < n) {
        uint8_t c = s[i];
        if (c < 0x80) {
            i++;
        } else if (c >= 0xC2 && c <= 0xDF) {
            if (n - i < 2 || (s[i + 1] & 0xC0) != 0x80) return 0;
            i += 2;
        } else if (c >= 0xE0 && c <= 0xEF) {
            if (n - i < 3 || (s[i + 1] & 0xC0) != 0x80 || (s[i + 2] & 0xC0) != 0x80) return 0;
            if (c == 0xE0 && s[i + 1] < 0xA0) return 0;
            if (c == 0xED && s[i + 1] >= 0xA0) return 0;
            i += 3;
        } else if (c >= 0xF0 && c <= 0xF4) {
            if (n - i < 4 || (s[i + 1] & 0xC0) != 0x80 || (s[i + 2] & 0xC0) != 0x80 || (s[i + 3] & 0xC0) != 0x80)
                return 0;
            if (c == 0xF0 && s[i + 1] < 0x90) return 0;
            if (c == 0xF4 && s[i + 1] >= 0x90) return 0;
            i += 4;
        } else {
            return 0;
        }
    }
    return 1;
}

static int hex4(const uint8_t *s, uint32_t *out) {
    uint32_t v = 0;
    for (int k = 0; k < 4; k++) {
        uint8_t c = s[k];
        v <<= 4;
        if (c >= '0' && c <= '9') v |= (uint32_t)(c - '0');
        else if (c >= 'a' && c <= 'f') v |= (uint32_t)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F') v |= (uint32_t)(c - 'A' + 10);
        else return 0;
    }
    *out = v;
    return 1;
}

/* A string's content (valid UTF-8) with its escapes resolved, written to `out` (NULL: only checked): the bytes
 * written, or -1 for an invalid escape or a lone surrogate (which UTF-8 cannot hold). */
static Py_ssize_t unescape(const uint8_t *s, Py_ssize_t n, uint8_t *out) {
    Py_ssize_t i = 0, w = 0;
    while (i < n) {
        uint8_t c = s[i];
        if (c != '\\') {
            if (out) out[w] = c;
            w++;
            i++;
            continue;
        }
        if (n - i < 2) return -1;
        uint8_t e = s[i + 1];
        uint8_t simple = 0;
        switch (e) {
            case '"': simple = '"'; break;
            case '\\': simple = '\\'; break;
            case '/': simple = '/'; break;
            case 'b': simple = '\b'; break;
            case 'f': simple = '\f'; break;
            case 'n': simple = '\n'; break;
            case 'r': simple = '\r'; break;
            case 't': simple = '\t'; break;
            case 'u': break;
            default: return -1;
        }
        if (e != 'u') {
            if (out) out[w] = simple;
            w++;
            i += 2;
            continue;
        }
        uint32_t cp;
        if (n - i < 6 || !hex4(s + i + 2, &cp)) return -1;
        i += 6;
        if (cp >= 0xDC00 && cp <= 0xDFFF) return -1;
        if (cp >= 0xD800 && cp <= 0xDBFF) {
            uint32_t low;
            if (n - i < 6 || s[i] != '\\' || s[i + 1] != 'u' || !hex4(s + i + 2, &low)) return -1;
            if (low < 0xDC00 || low > 0xDFFF) return -1;
            cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
            i += 6;
        }
        uint8_t buf[4];
        int k;
        if (cp < 0x80) {
            buf[0] = (uint8_t)cp;
            k = 1;
        } else if (cp < 0x800) {
            buf[0] = (uint8_t)(0xC0 | (cp >> 6));
            buf[1] = (uint8_t)(0x80 | (cp & 0x3F));
            k = 2;
        } else if (cp < 0x10000) {
            buf[0] = (uint8_t)(0xE0 | (cp >> 12));
            buf[1] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
            buf[2] = (uint8_t)(0x80 | (cp & 0x3F));
            k = 3;
        } else {
            buf[0] = (uint8_t)(0xF0 | (cp >> 18));
            buf[1] = (uint8_t)(0x80 | ((cp >> 12) & 0x3F));
            buf[2] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
            buf[3] = (uint8_t)(0x80 | (cp & 0x3F));
            k = 4;
        }
        if (out) memcpy(out + w, buf, (size_t)k);
        w += k;
    }
    return w;
}

/* A string token checked (and, with `out`, written): its decoded length, or -1. */
static Py_ssize_t string_value(const Token *t, uint8_t *out) {
    if (t->nonascii && !valid_utf8(t->start, t->len)) return -1;
    if (!t->escaped) {
        if (out) memcpy(out, t->start, (size_t)t->len);
        return t->len;
    }
    return unescape(t->start, t->len, out);
}

/* An integer token's value if it fits in int64 (1), or 0. "-0" is 0. */
static int int_value(const Token *t, int64_t *out) {
    const uint8_t *p = t->start, *end = t->start + t->len;
    int negative = *p == '-';
    if (negative) p++;
    if (end - p > 19) return 0;
    uint64_t v = 0;
    for (; p < end; p++) v = v * 10 + (uint64_t)(*p - '0'); /* at most 19 digits: no overflow of uint64 */
    if (negative) {
        if (v > (uint64_t)INT64_MAX + 1) return 0;
        *out = v == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)v;
    } else {
        if (v > (uint64_t)INT64_MAX) return 0;
        *out = (int64_t)v;
    }
    return 1;
}

/* A number token as a double, as the full decoder reads it (an integer is converted from its exact value, so
 * "-0" is +0.0), or 0 when it is out of range, underflows or is too long to be certain of here. */
static int double_value(const Token *t, double *out) {
    int64_t i;
    if (t->type == T_INT && int_value(t, &i)) {
        *out = (double)i;
        return 1;
    }
    if (t->len > MAX_NUMBER_TEXT) return 0;
    char text[MAX_NUMBER_TEXT + 1];
    memcpy(text, t->start, (size_t)t->len);
    text[t->len] = '\0';
    char *stop = NULL;
    double d = PyOS_string_to_double(text, &stop, NULL); /* correctly rounded, locale-independent */
    if (d == -1.0 && PyErr_Occurred()) {
        PyErr_Clear();
        return 0;
    }
    if (stop != text + t->len || isinf(d) || isnan(d)) return 0;
    if (d == 0.0 || fabs(d) < DBL_MIN) {
        for (Py_ssize_t k = 0; k < t->len; k++) { /* a zero written as zero only: no underflow */
            uint8_t c = (uint8_t)text[k];
            if (c == 'e' || c == 'E') break;
            if (c >= '1' && c <= '9') return 0;
        }
    }
    *out = d;
    return 1;
}

static const int64_t INT_BOUNDS[5][2] = {
    {0, 0}, {INT8_MIN, INT8_MAX}, {INT16_MIN, INT16_MAX}, {0, 0}, {INT32_MIN, INT32_MAX},
};

/* Room for `extra` more bytes of string data past the column's end (the buffer grows by doubling): 1, or 0 with
 * MemoryError set. */
static int reserve(Column *c, Py_ssize_t extra) {
    Py_ssize_t capacity = PyBytes_GET_SIZE(c->data);
    if (c->data_len + extra <= capacity) return 1;
    Py_ssize_t wanted = capacity > 0 ? capacity : 4096;
    while (wanted < c->data_len + extra) wanted *= 2;
    if (_PyBytes_Resize(&c->data, wanted) < 0) return 0;
    c->data_bytes = (uint8_t *)PyBytes_AS_STRING(c->data);
    return 1;
}

/* Whether a declared field's token converts (1), does not (0: the record is deferred) or memory ran out (-1,
 * MemoryError set); its value goes to the column's scratch (strings: written past the column's data). */
static int convert(Column *c, const Token *t) {
    if (t->type == T_ABSENT || t->type == T_NULL) return 1;
    switch (c->kind) {
        case 'b':
            if (t->type != T_TRUE && t->type != T_FALSE) return 0;
            c->scratch.i = t->type == T_TRUE;
            return 1;
        case '1':
        case '2':
        case '4':
        case '8': {
            int64_t v;
            if (t->type != T_INT || !int_value(t, &v)) return 0;
            if (c->kind != '8') {
                const int64_t *bounds = INT_BOUNDS[c->kind - '0'];
                if (v < bounds[0] || v > bounds[1]) return 0;
            }
            c->scratch.i = v;
            return 1;
        }
        case 'd':
            if (t->type != T_INT && t->type != T_NUM) return 0;
            return double_value(t, &c->scratch.d);
        case 's': {
            if (t->type != T_STR) return 0;
            if (!reserve(c, t->len)) return -1; /* a decoded string is never longer than its token */
            Py_ssize_t written = string_value(t, c->data_bytes + c->data_len);
            if (written < 0) return 0;
            c->scratch_len = written;
            return 1;
        }
        default:
            return 0;
    }
}

/* Writes row `row` of a column: its scratch value when the token holds one, null otherwise. */
static void commit(Column *c, const Token *t, Py_ssize_t row) {
    int present = t->type != T_ABSENT && t->type != T_NULL;
    if (c->kind == 's') {
        if (present) c->data_len += c->scratch_len;
        ((int32_t *)c->value_bytes)[row + 1] = (int32_t)c->data_len;
    }
    if (!present) return;
    c->validity_bits[row >> 3] |= (uint8_t)(1u << (row & 7));
    switch (c->kind) {
        case 'b':
            if (c->scratch.i) c->value_bytes[row >> 3] |= (uint8_t)(1u << (row & 7));
            break;
        case '1':
            ((int8_t *)c->value_bytes)[row] = (int8_t)c->scratch.i;
            break;
        case '2':
            ((int16_t *)c->value_bytes)[row] = (int16_t)c->scratch.i;
            break;
        case '4':
            ((int32_t *)c->value_bytes)[row] = (int32_t)c->scratch.i;
            break;
        case '8':
            ((int64_t *)c->value_bytes)[row] = c->scratch.i;
            break;
        case 'd':
            ((double *)c->value_bytes)[row] = c->scratch.d;
            break;
    }
}

static void commit_null(Column *c, Py_ssize_t row) {
    if (c->kind == 's') ((int32_t *)c->value_bytes)[row + 1] = (int32_t)c->data_len;
}

/* One record into `tokens` (one per column): 1 when it is an object this code is certain of, 0 otherwise. */
static int parse_object(const uint8_t *p, const uint8_t *end, Column *cols, Py_ssize_t ncols, Token *tokens) {
    const uint8_t *unknown[MAX_UNKNOWN_KEYS];
    Py_ssize_t unknown_len[MAX_UNKNOWN_KEYS];
    int nunknown = 0;
    Py_ssize_t expected = 0; /* the field most likely next: keys usually come in the schema's order */
    for (Py_ssize_t k = 0; k < ncols; k++) tokens[k].type = T_ABSENT;
    p = skip_ws(p, end);
    if (p >= end || *p != '{') return 0;
    p = skip_ws(p + 1, end);
    if (p < end && *p == '}') return skip_ws(p + 1, end) == end;
    for (;;) {
        Token key;
        if (p >= end || *p != '"') return 0;
        p = scan_string(p + 1, end, &key);
        if (p == NULL || key.escaped) return 0;
        Py_ssize_t field = -1;
        for (Py_ssize_t k = 0; k < ncols; k++) {
            Py_ssize_t candidate = (expected + k) % ncols;
            Column *c = &cols[candidate];
            if (c->name_len == key.len && memcmp(c->name, key.start, (size_t)key.len) == 0) {
                field = candidate;
                break;
            }
        }
        if (field < 0) {
            if (key.nonascii || nunknown == MAX_UNKNOWN_KEYS) return 0;
            for (int k = 0; k < nunknown; k++)
                if (unknown_len[k] == key.len && memcmp(unknown[k], key.start, (size_t)key.len) == 0) return 0;
            unknown[nunknown] = key.start;
            unknown_len[nunknown++] = key.len;
        } else if (tokens[field].type != T_ABSENT) {
            return 0; /* a repeated key: the full decoder names it */
        }
        p = skip_ws(p, end);
        if (p >= end || *p != ':') return 0;
        p = skip_ws(p + 1, end);
        Token value;
        p = scan_scalar(p, end, &value);
        if (p == NULL) return 0;
        if (field >= 0) {
            tokens[field] = value;
            expected = (field + 1) % ncols;
        } else if (value.type == T_STR && (value.escaped || value.nonascii) && string_value(&value, NULL) < 0) {
            return 0;
        }
        p = skip_ws(p, end);
        if (p >= end) return 0;
        if (*p == '}') return skip_ws(p + 1, end) == end;
        if (*p != ',') return 0;
        p = skip_ws(p + 1, end);
    }
}

static int new_bytes(PyObject **obj, uint8_t **bytes, Py_ssize_t size) {
    *obj = PyBytes_FromStringAndSize(NULL, size);
    if (*obj == NULL) return 0;
    *bytes = (uint8_t *)PyBytes_AS_STRING(*obj);
    memset(*bytes, 0, (size_t)size);
    return 1;
}

static Py_ssize_t value_width(char kind) {
    switch (kind) {
        case '1': return 1;
        case '2': return 2;
        case '4': return 4;
        case '8':
        case 'd': return 8;
        default: return 0;
    }
}

static void release(Column *cols, Py_ssize_t ncols) {
    for (Py_ssize_t k = 0; k < ncols; k++) {
        Py_XDECREF(cols[k].validity);
        Py_XDECREF(cols[k].values);
        Py_XDECREF(cols[k].data);
    }
    PyMem_Free(cols);
}

static PyObject *decode(PyObject *self, PyObject *args) {
    Py_buffer data, offsets;
    int large;
    PyObject *validity_obj, *names;
    Py_ssize_t start, n;
    const char *kinds;
    Py_ssize_t ncols;
    if (!PyArg_ParseTuple(args, "y*y*pOnny#O!", &data, &offsets, &large, &validity_obj, &start, &n, &kinds, &ncols,
                          &PyTuple_Type, &names))
        return NULL;
    Py_buffer validity = {0};
    PyObject *result = NULL, *deferred = NULL, *columns = NULL;
    Column *cols = NULL;
    Token *tokens = NULL;
    int have_validity = validity_obj != Py_None;
    if (have_validity && PyObject_GetBuffer(validity_obj, &validity, PyBUF_SIMPLE) < 0) goto done;
    Py_ssize_t width = large ? 8 : 4;
    if (n < 0 || start < 0 || offsets.len < (start + n + 1) * width ||
        (have_validity && validity.len * 8 < start + n) || PyTuple_GET_SIZE(names) != ncols || ncols < 1) {
        PyErr_SetString(PyExc_ValueError, "inconsistent Arrow buffers or field list");
        goto done;
    }
    const uint8_t *base = (const uint8_t *)data.buf;
    const uint8_t *offs = (const uint8_t *)offsets.buf;
#define OFFSET(i) (large ? ((const int64_t *)offs)[i] : (int64_t)((const int32_t *)offs)[i])
    int64_t first = OFFSET(start), last = OFFSET(start + n);
    if (first < 0 || last < first || last > data.len || last - first > INT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "inconsistent Arrow offsets (or over 2 GiB of values)");
        goto done;
    }
    cols = PyMem_Calloc((size_t)ncols, sizeof(Column));
    tokens = PyMem_Calloc((size_t)ncols, sizeof(Token));
    if (cols == NULL || tokens == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    Py_ssize_t bitmap = (n + 7) / 8;
    for (Py_ssize_t k = 0; k < ncols; k++) {
        Column *c = &cols[k];
        PyObject *name = PyTuple_GET_ITEM(names, k);
        if (!PyBytes_Check(name) || !strchr("b1248ds", kinds[k]) || kinds[k] == '\0') {
            PyErr_SetString(PyExc_ValueError, "fields are bytes names with kinds among b1248ds");
            goto done;
        }
        c->kind = kinds[k];
        c->name = PyBytes_AS_STRING(name);
        c->name_len = PyBytes_GET_SIZE(name);
        if (!new_bytes(&c->validity, &c->validity_bits, bitmap)) goto done;
        Py_ssize_t size = c->kind == 'b' ? bitmap : c->kind == 's' ? (n + 1) * 4 : n * value_width(c->kind);
        if (!new_bytes(&c->values, &c->value_bytes, size)) goto done;
        if (c->kind == 's') {
            c->data = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(last - first < 4096 ? last - first : 4096));
            if (c->data == NULL) goto done;
            c->data_bytes = (uint8_t *)PyBytes_AS_STRING(c->data);
        }
    }
    uint8_t *flags;
    if (!new_bytes(&deferred, &flags, n)) goto done;
    Py_ssize_t count = 0;
    for (Py_ssize_t row = 0; row < n; row++) {
        Py_ssize_t at = start + row;
        int64_t lo = OFFSET(at), hi = OFFSET(at + 1);
        int accepted = (!have_validity || (((const uint8_t *)validity.buf)[at >> 3] >> (at & 7)) & 1) && lo <= hi &&
                       lo >= first && hi <= last && parse_object(base + lo, base + hi, cols, ncols, tokens);
        for (Py_ssize_t k = 0; accepted == 1 && k < ncols; k++) accepted = convert(&cols[k], &tokens[k]);
        if (accepted < 0) goto done;
        if (accepted) {
            for (Py_ssize_t k = 0; k < ncols; k++) commit(&cols[k], &tokens[k], row);
        } else {
            flags[row] = 1;
            count++;
            for (Py_ssize_t k = 0; k < ncols; k++) commit_null(&cols[k], row);
        }
    }
#undef OFFSET
    columns = PyList_New(ncols);
    if (columns == NULL) goto done;
    for (Py_ssize_t k = 0; k < ncols; k++) {
        Column *c = &cols[k];
        PyObject *item;
        if (c->kind == 's') {
            if (_PyBytes_Resize(&c->data, c->data_len) < 0) goto done;
            item = PyTuple_Pack(3, c->validity, c->values, c->data);
        } else {
            item = PyTuple_Pack(3, c->validity, c->values, Py_None);
        }
        if (item == NULL) goto done;
        PyList_SET_ITEM(columns, k, item);
    }
    result = Py_BuildValue("(OnO)", deferred, count, columns);
done:
    Py_XDECREF(deferred);
    Py_XDECREF(columns);
    if (cols) release(cols, ncols);
    PyMem_Free(tokens);
    if (have_validity && validity.obj) PyBuffer_Release(&validity);
    PyBuffer_Release(&data);
    PyBuffer_Release(&offsets);
    return result;
}

static PyMethodDef module_methods[] = {
    {"decode", decode, METH_VARARGS, "Flat JSON values of an Arrow binary array into Arrow column buffers."},
    {NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_flat_json", "Flat JSON objects into Arrow column buffers (the decoder's fast path).",
    -1, module_methods,
};

PyMODINIT_FUNC PyInit__flat_json(void) {
    init_plain();
    return PyModule_Create(&module);
}
