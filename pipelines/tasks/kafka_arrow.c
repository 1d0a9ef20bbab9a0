/* Kafka messages into Arrow column buffers, in C: the reading tasks' hot loop without a Python object per record.
 *
 * The module drives the librdkafka that confluent-kafka already loaded (its bundled copy: `load(path)` resolves
 * the few functions used here with dlsym, so nothing links against a system librdkafka, whose version may differ).
 * A `Consumer` is assigned at one partition and offset; `consume(max, timeout_ms)` takes up to `max` messages from
 * its queue (the GIL released while librdkafka waits; it returns early once an error or end-of-partition message
 * is among them: `gather`) and returns the error-free ones as the buffers of Arrow columns (offsets, timestamps,
 * keys, values; headers of the few messages that carry any), and the others as (offset, error code, reason) for
 * the caller to judge. Everything past the buffers (retries, the span's end,
 * which errors are fatal) stays in Python: cohort/pipelines/native_reader.py.
 *
 * Only librdkafka's public, stable ABI is used (rd_kafka_message_t's layout has not changed since 0.8), declared
 * here so that building needs no librdkafka headers.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <dlfcn.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

typedef struct rd_kafka_s rd_kafka_t;
typedef struct rd_kafka_conf_s rd_kafka_conf_t;
typedef struct rd_kafka_queue_s rd_kafka_queue_t;
typedef struct rd_kafka_headers_s rd_kafka_headers_t;
typedef struct rd_kafka_topic_s rd_kafka_topic_t;

typedef struct rd_kafka_message_s {
    int err;
    rd_kafka_topic_t *rkt;
    int32_t partition;
    void *payload;
    size_t len;
    void *key;
    size_t key_len;
    int64_t offset;
    void *_private;
} rd_kafka_message_t;

typedef struct rd_kafka_topic_partition_s {
    char *topic;
    int32_t partition;
    int64_t offset;
    void *metadata;
    size_t metadata_size;
    void *opaque;
    int err;
    void *_private;
} rd_kafka_topic_partition_t;

typedef struct rd_kafka_topic_partition_list_s {
    int cnt;
    int size;
    rd_kafka_topic_partition_t *elems;
} rd_kafka_topic_partition_list_t;

#define RD_KAFKA_CONSUMER 1
#define RD_KAFKA_CONF_OK 0

static struct {
    rd_kafka_conf_t *(*conf_new)(void);
    int (*conf_set)(rd_kafka_conf_t *, const char *, const char *, char *, size_t);
    void (*conf_destroy)(rd_kafka_conf_t *);
    rd_kafka_t *(*new_)(int, rd_kafka_conf_t *, char *, size_t);
    int (*poll_set_consumer)(rd_kafka_t *);
    rd_kafka_topic_partition_list_t *(*list_new)(int);
    rd_kafka_topic_partition_t *(*list_add)(rd_kafka_topic_partition_list_t *, const char *, int32_t);
    void (*list_destroy)(rd_kafka_topic_partition_list_t *);
    int (*assign)(rd_kafka_t *, const rd_kafka_topic_partition_list_t *);
    rd_kafka_queue_t *(*queue_get_consumer)(rd_kafka_t *);
    void (*queue_destroy)(rd_kafka_queue_t *);
    ssize_t (*consume_batch_queue)(rd_kafka_queue_t *, int, rd_kafka_message_t **, size_t);
    void (*message_destroy)(rd_kafka_message_t *);
    int64_t (*message_timestamp)(const rd_kafka_message_t *, int *);
    int (*message_headers)(const rd_kafka_message_t *, rd_kafka_headers_t **);
    int (*header_get_all)(const rd_kafka_headers_t *, size_t, const char **, const void **, size_t *);
    const char *(*err2str)(int);
    int (*consumer_close)(rd_kafka_t *);
    void (*destroy)(rd_kafka_t *);
    const char *(*version_str)(void);
} rk;

static void *library = NULL;

static PyObject *load(PyObject *self, PyObject *args) {
    const char *path;
    if (!PyArg_ParseTuple(args, "s", &path)) return NULL;
    if (library != NULL) Py_RETURN_NONE;
    void *handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (handle == NULL) return PyErr_Format(PyExc_OSError, "cannot load %s: %s", path, dlerror());
    struct {
        const char *name;
        void **slot;
    } symbols[] = {
        {"rd_kafka_conf_new", (void **)&rk.conf_new},
        {"rd_kafka_conf_set", (void **)&rk.conf_set},
        {"rd_kafka_conf_destroy", (void **)&rk.conf_destroy},
        {"rd_kafka_new", (void **)&rk.new_},
        {"rd_kafka_poll_set_consumer", (void **)&rk.poll_set_consumer},
        {"rd_kafka_topic_partition_list_new", (void **)&rk.list_new},
        {"rd_kafka_topic_partition_list_add", (void **)&rk.list_add},
        {"rd_kafka_topic_partition_list_destroy", (void **)&rk.list_destroy},
        {"rd_kafka_assign", (void **)&rk.assign},
        {"rd_kafka_queue_get_consumer", (void **)&rk.queue_get_consumer},
        {"rd_kafka_queue_destroy", (void **)&rk.queue_destroy},
        {"rd_kafka_consume_batch_queue", (void **)&rk.consume_batch_queue},
        {"rd_kafka_message_destroy", (void **)&rk.message_destroy},
        {"rd_kafka_message_timestamp", (void **)&rk.message_timestamp},
        {"rd_kafka_message_headers", (void **)&rk.message_headers},
        {"rd_kafka_header_get_all", (void **)&rk.header_get_all},
        {"rd_kafka_err2str", (void **)&rk.err2str},
        {"rd_kafka_consumer_close", (void **)&rk.consumer_close},
        {"rd_kafka_destroy", (void **)&rk.destroy},
        {"rd_kafka_version_str", (void **)&rk.version_str},
    };
    for (size_t i = 0; i < sizeof(symbols) / sizeof(symbols[0]); i++) {
        *symbols[i].slot = dlsym(handle, symbols[i].name);
        if (*symbols[i].slot == NULL) {
            dlclose(handle);
            return PyErr_Format(PyExc_OSError, "%s has no %s", path, symbols[i].name);
        }
    }
    library = handle;
    Py_RETURN_NONE;
}

static PyObject *version(PyObject *self, PyObject *unused) {
    if (library == NULL) return PyErr_Format(PyExc_RuntimeError, "librdkafka is not loaded");
    return PyUnicode_FromString(rk.version_str());
}

typedef struct {
    PyObject_HEAD rd_kafka_t *handle;
    rd_kafka_queue_t *queue;
    rd_kafka_message_t **messages;
    size_t capacity;
} Consumer;

static void consumer_release(Consumer *self) {
    if (self->queue != NULL) {
        rk.queue_destroy(self->queue);
        self->queue = NULL;
    }
    if (self->handle != NULL) {
        rd_kafka_t *handle = self->handle;
        self->handle = NULL;
        Py_BEGIN_ALLOW_THREADS
        rk.consumer_close(handle);
        rk.destroy(handle);
        Py_END_ALLOW_THREADS
    }
}

static void Consumer_dealloc(Consumer *self) {
    consumer_release(self);
    PyMem_Free(self->messages);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* Consumer(config: list[tuple[str, str]], topic: str, partition: int, offset: int) */
static int Consumer_init(Consumer *self, PyObject *args, PyObject *kwargs) {
    PyObject *config;
    const char *topic;
    int partition;
    long long offset;
    char errstr[512];
    if (!PyArg_ParseTuple(args, "O!siL", &PyList_Type, &config, &topic, &partition, &offset)) return -1;
    if (library == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "librdkafka is not loaded");
        return -1;
    }
    if (self->handle != NULL) {
        PyErr_SetString(PyExc_RuntimeError, "the consumer is already open");
        return -1;
    }
    rd_kafka_conf_t *conf = rk.conf_new();
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(config); i++) {
        const char *name, *value;
        if (!PyArg_ParseTuple(PyList_GET_ITEM(config, i), "ss", &name, &value)) {
            rk.conf_destroy(conf);
            return -1;
        }
        if (rk.conf_set(conf, name, value, errstr, sizeof(errstr)) != RD_KAFKA_CONF_OK) {
            rk.conf_destroy(conf);
            PyErr_Format(PyExc_ValueError, "%s", errstr);
            return -1;
        }
    }
    rd_kafka_t *handle = rk.new_(RD_KAFKA_CONSUMER, conf, errstr, sizeof(errstr)); /* takes conf on success */
    if (handle == NULL) {
        rk.conf_destroy(conf);
        PyErr_Format(PyExc_ValueError, "%s", errstr);
        return -1;
    }
    self->handle = handle;
    rk.poll_set_consumer(handle);
    rd_kafka_topic_partition_list_t *assignment = rk.list_new(1);
    rk.list_add(assignment, topic, partition)->offset = offset;
    int err = rk.assign(handle, assignment);
    rk.list_destroy(assignment);
    if (err != 0) {
        PyErr_Format(PyExc_RuntimeError, "assigning %s-%d at offset %lld: %s", topic, partition, offset, rk.err2str(err));
        consumer_release(self);
        return -1;
    }
    self->queue = rk.queue_get_consumer(handle);
    return 0;
}

static void set_bit(uint8_t *bitmap, Py_ssize_t i) { bitmap[i >> 3] |= (uint8_t)(1u << (i & 7)); }

/* The error text of a message: librdkafka puts it in the payload when there is one. */
static PyObject *message_reason(const rd_kafka_message_t *m) {
    if (m->payload != NULL && m->len > 0)
        return PyUnicode_DecodeUTF8((const char *)m->payload, (Py_ssize_t)m->len, "replace");
    return PyUnicode_FromString(rk.err2str(m->err));
}

/* The headers of a message as [(name bytes, value bytes or None)], or NULL with no exception when it has none. */
static PyObject *message_headers(const rd_kafka_message_t *m) {
    rd_kafka_headers_t *headers = NULL;
    if (rk.message_headers(m, &headers) != 0 || headers == NULL) return NULL;
    PyObject *list = PyList_New(0);
    if (list == NULL) return NULL;
    const char *name;
    const void *value;
    size_t size;
    for (size_t i = 0; rk.header_get_all(headers, i, &name, &value, &size) == 0; i++) {
        PyObject *pair = value == NULL ? Py_BuildValue("(y#O)", name, (Py_ssize_t)strlen(name), Py_None)
                                       : Py_BuildValue("(y#y#)", name, (Py_ssize_t)strlen(name), value, (Py_ssize_t)size);
        if (pair == NULL || PyList_Append(list, pair) != 0) {
            Py_XDECREF(pair);
            Py_DECREF(list);
            return NULL;
        }
        Py_DECREF(pair);
    }
    if (PyList_GET_SIZE(list) == 0) {
        Py_DECREF(list);
        return NULL;
    }
    return list;
}

/* A bytes object of `size` bytes to fill through `data`; zeroed when `zeroed` (bitmaps are set bit by bit). */
static PyObject *new_bytes(Py_ssize_t size, char **data, int zeroed) {
    PyObject *bytes = PyBytes_FromStringAndSize(NULL, size);
    if (bytes != NULL) {
        *data = PyBytes_AS_STRING(bytes);
        if (zeroed) memset(*data, 0, (size_t)size);
    }
    return bytes;
}

/* One Arrow binary column (validity bitmap, int64 offsets, data) from the keys or the values of `good`. */
static PyObject *binary_column(rd_kafka_message_t **good, Py_ssize_t n, int keys) {
    Py_ssize_t total = 0;
    for (Py_ssize_t i = 0; i < n; i++) total += (Py_ssize_t)(keys ? good[i]->key_len : good[i]->len);
    char *valid = NULL, *offsets = NULL, *data = NULL;
    PyObject *valid_b = new_bytes((n + 7) / 8, &valid, 1);
    PyObject *offsets_b = new_bytes((n + 1) * (Py_ssize_t)sizeof(int64_t), &offsets, 0);
    PyObject *data_b = new_bytes(total, &data, 0);
    if (valid_b == NULL || offsets_b == NULL || data_b == NULL) {
        Py_XDECREF(valid_b);
        Py_XDECREF(offsets_b);
        Py_XDECREF(data_b);
        return NULL;
    }
    int64_t *ends = (int64_t *)offsets;
    int64_t at = 0;
    Py_ssize_t nulls = 0;
    ends[0] = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        const void *bytes = keys ? good[i]->key : good[i]->payload;
        size_t len = keys ? good[i]->key_len : good[i]->len;
        if (bytes == NULL) {
            nulls++;
        } else {
            set_bit((uint8_t *)valid, i);
            memcpy(data + at, bytes, len);
            at += (int64_t)len;
        }
        ends[i + 1] = at;
    }
    return Py_BuildValue("(NnNN)", valid_b, nulls, offsets_b, data_b);
}

static long long elapsed_ms(const struct timespec *since) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (long long)(now.tv_sec - since->tv_sec) * 1000 + (now.tv_nsec - since->tv_nsec) / 1000000;
}

/* Up to `max` messages into self->messages within `timeout_ms`, as rd_kafka_consume_batch_queue takes them, except
 * that it returns as soon as an error or end-of-partition message is among them. rd_kafka_consume_batch_queue waits
 * until it has `max` messages or the timeout passed: a span whose last offsets hold no record (a control marker,
 * aborted or compacted records) gets fewer messages than its offsets, and its end-of-partition would wait out the
 * whole timeout. So: take what is queued, then wait for one more message, and again, until one of the three. Called
 * without the GIL. */
static ssize_t gather(Consumer *self, size_t max, int timeout_ms) {
    struct timespec start;
    clock_gettime(CLOCK_MONOTONIC, &start);
    size_t got = 0;
    for (;;) {
        ssize_t n = rk.consume_batch_queue(self->queue, 0, self->messages + got, max - got); /* what is queued */
        if (n < 0) return got ? (ssize_t)got : n;
        int ended = 0;
        for (size_t i = got; i < got + (size_t)n; i++) ended |= self->messages[i]->err != 0;
        got += (size_t)n;
        long long left = (long long)timeout_ms - elapsed_ms(&start);
        if (got == max || ended || left <= 0) return (ssize_t)got;
        n = rk.consume_batch_queue(self->queue, (int)left, self->messages + got, 1); /* the next message */
        if (n <= 0) return got ? (ssize_t)got : n; /* timed out, or failed */
        if (self->messages[got++]->err != 0 || got == max) return (ssize_t)got;
    }
}

/* consume(max_messages, timeout_ms) -> (rows, offsets, (timestamp validity, nulls, timestamps), keys, values,
 * headers: [(row, [(name, value)])], errors: [(offset, code, reason)]); keys and values as binary_column. */
static PyObject *Consumer_consume(Consumer *self, PyObject *args) {
    Py_ssize_t max_messages;
    int timeout_ms;
    if (!PyArg_ParseTuple(args, "ni", &max_messages, &timeout_ms)) return NULL;
    if (self->handle == NULL) return PyErr_Format(PyExc_RuntimeError, "the consumer is closed");
    if (max_messages < 1) return PyErr_Format(PyExc_ValueError, "max_messages must be >= 1");
    if ((size_t)max_messages > self->capacity) {
        rd_kafka_message_t **grown = PyMem_Realloc(self->messages, (size_t)max_messages * sizeof(*grown));
        if (grown == NULL) return PyErr_NoMemory();
        self->messages = grown;
        self->capacity = (size_t)max_messages;
    }
    ssize_t got;
    Py_BEGIN_ALLOW_THREADS
    got = gather(self, (size_t)max_messages, timeout_ms);
    Py_END_ALLOW_THREADS
    if (got < 0) return PyErr_Format(PyExc_RuntimeError, "consuming failed (librdkafka returned %zd)", got);

    PyObject *result = NULL, *errors = PyList_New(0), *headers = PyList_New(0);
    PyObject *offsets_b = NULL, *stamps_valid_b = NULL, *stamps_b = NULL, *keys = NULL, *values = NULL;
    rd_kafka_message_t **good = PyMem_Malloc(((size_t)got + 1) * sizeof(*good));
    if (errors == NULL || headers == NULL || good == NULL) goto done;
    Py_ssize_t n = 0;
    for (ssize_t i = 0; i < got; i++) {
        rd_kafka_message_t *m = self->messages[i];
        if (m->err == 0) {
            good[n++] = m;
            continue;
        }
        PyObject *reason = message_reason(m);
        PyObject *error = reason == NULL ? NULL : Py_BuildValue("(LiN)", (long long)m->offset, m->err, reason);
        if (error == NULL || PyList_Append(errors, error) != 0) {
            Py_XDECREF(error);
            goto done;
        }
        Py_DECREF(error);
    }
    char *offsets = NULL, *stamps_valid = NULL, *stamps = NULL;
    offsets_b = new_bytes(n * (Py_ssize_t)sizeof(int64_t), &offsets, 0);
    stamps_valid_b = new_bytes((n + 7) / 8, &stamps_valid, 1);
    stamps_b = new_bytes(n * (Py_ssize_t)sizeof(int64_t), &stamps, 1);
    if (offsets_b == NULL || stamps_valid_b == NULL || stamps_b == NULL) goto done;
    Py_ssize_t stamp_nulls = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        ((int64_t *)offsets)[i] = good[i]->offset;
        int kind;
        int64_t stamp = rk.message_timestamp(good[i], &kind);
        if (stamp < 0) {
            stamp_nulls++;
        } else {
            ((int64_t *)stamps)[i] = stamp;
            set_bit((uint8_t *)stamps_valid, i);
        }
        PyObject *found = message_headers(good[i]);
        if (found == NULL && PyErr_Occurred()) goto done;
        if (found != NULL) {
            PyObject *row = Py_BuildValue("(nN)", i, found);
            if (row == NULL || PyList_Append(headers, row) != 0) {
                Py_XDECREF(row);
                goto done;
            }
            Py_DECREF(row);
        }
    }
    keys = binary_column(good, n, 1);
    values = binary_column(good, n, 0);
    if (keys == NULL || values == NULL) goto done;
    result = Py_BuildValue("(nN(NnN)NNOO)", n, offsets_b, stamps_valid_b, stamp_nulls, stamps_b, keys, values, headers,
                           errors);
    offsets_b = stamps_valid_b = stamps_b = keys = values = NULL; /* stolen by Py_BuildValue's N */
done:
    for (ssize_t i = 0; i < got; i++) rk.message_destroy(self->messages[i]);
    PyMem_Free(good);
    Py_XDECREF(offsets_b);
    Py_XDECREF(stamps_valid_b);
    Py_XDECREF(stamps_b);
    Py_XDECREF(keys);
    Py_XDECREF(values);
    Py_XDECREF(headers);
    Py_XDECREF(errors);
    return result;
}

static PyObject *Consumer_close(Consumer *self, PyObject *unused) {
    consumer_release(self);
    Py_RETURN_NONE;
}

static PyMethodDef Consumer_methods[] = {
    {"consume", (PyCFunction)Consumer_consume, METH_VARARGS, "Up to max_messages messages as Arrow buffers."},
    {"close", (PyCFunction)Consumer_close, METH_NOARGS, "Close the consumer (idempotent)."},
    {NULL},
};

static PyTypeObject ConsumerType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "cohort.pipelines.tasks._kafka_arrow.Consumer",
    .tp_basicsize = sizeof(Consumer),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A librdkafka consumer assigned at one partition and offset, read into Arrow buffers.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Consumer_init,
    .tp_dealloc = (destructor)Consumer_dealloc,
    .tp_methods = Consumer_methods,
};

static PyMethodDef module_methods[] = {
    {"load", load, METH_VARARGS, "Resolve librdkafka's functions from the shared library at `path`."},
    {"version", version, METH_NOARGS, "The loaded librdkafka's version."},
    {NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_kafka_arrow", "Kafka messages into Arrow buffers (librdkafka, in C).", -1, module_methods,
};

PyMODINIT_FUNC PyInit__kafka_arrow(void) {
    if (PyType_Ready(&ConsumerType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) return NULL;
    Py_INCREF(&ConsumerType);
    if (PyModule_AddObject(m, "Consumer", (PyObject *)&ConsumerType) < 0) {
        Py_DECREF(&ConsumerType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
