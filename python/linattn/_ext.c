/* linattn._ext: the C API over the CPython buffer protocol.
 *
 * compute() runs one library call on positional arguments: run() serves
 * the Python layer's forward and delta calls, step() is linattn.step
 * itself, keywords included, because a Python frame in front of it cost
 * a quarter of a small decode step. Names ('elu1') and flags are resolved
 * here. numpy arrays are read through the buffer protocol, torch tensors
 * through their pointer, shape and strides. Shapes become the config's
 * dimensions and strides its strides, so nothing is copied and the library
 * cannot address memory outside the arrays. The GIL is released while
 * computing. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "linattn.h"

enum { RUN_FORWARD, RUN_STEP, RUN_DELTA_FORWARD, RUN_DELTA_STEP };
enum { LAYOUT_BHTD, LAYOUT_BTHD };

/* One array in the library's axis order: batch, head, token, feature.
 * Axes the array does not have are size 1 with stride 0. */
typedef struct {
    Py_buffer buf;
    int held; /* 1: a buffer to release; 2: a torch tensor, read in place */
    int dt; /* the element type: a linattn_dtype, or DT_INT32/64 below; isz its bytes */
    int isz;
    int64_t n[4];
    int64_t st[4]; /* in elements */
    Py_ssize_t tshape[8], tstrides[8];
} view;

static void release(view *v)
{
    if (v->held == 1)
        PyBuffer_Release(&v->buf);
    v->held = 0;
}

/* Torch tensors do not export buffers. Reading their pointer, shape and
 * strides here costs a fraction of tensor.numpy(), which matters for a
 * decode step. torch is never imported from here: a tensor means it is. */
static PyObject *torch_tensor, *torch_float32, *torch_bfloat16, *torch_float16, *torch_int32,
    *torch_int64, *torch_empty_like, *torch_contiguous, *torch_grad_enabled;
static PyObject *s_is_cpu, *s_dtype, *s_shape, *s_is_contiguous, *s_stride, *s_data_ptr,
    *s_device;

/* Five attribute reads per tensor were most of a torch step's overhead.
 * On a plain torch.Tensor they go straight to torch's descriptors instead,
 * skipping the lookup by name and the bound method; the same getters and
 * methods run, __torch_function__ modes included. The descriptors are
 * read again whenever the class changes (its version tag moves). */
static struct {
    unsigned int tag; /* torch.Tensor's tp_version_tag when read; 0: not read */
    PyObject *is_cpu, *dtype, *shape, *is_contiguous, *stride, *data_ptr;
} desc;

/* 0 while the class has no valid tag (it gets one at its next lookup). */
static unsigned int version_tag(PyTypeObject *tp)
{
#ifdef Py_TPFLAGS_VALID_VERSION_TAG
    if (!PyType_HasFeature(tp, Py_TPFLAGS_VALID_VERSION_TAG))
        return 0;
#endif
    return tp->tp_version_tag;
}

/* 1 when desc holds torch.Tensor's current descriptors. */
static int descriptors_current(void)
{
    PyTypeObject *tp = (PyTypeObject *)torch_tensor;
    if (desc.tag != 0 && version_tag(tp) == desc.tag)
        return 1;
    PyObject **const slot[] = {&desc.is_cpu, &desc.dtype, &desc.shape, &desc.is_contiguous,
                               &desc.stride, &desc.data_ptr};
    PyObject *const name[] = {s_is_cpu, s_dtype, s_shape, s_is_contiguous, s_stride,
                              s_data_ptr};
    desc.tag = 0;
    for (int i = 0; i < 6; i++) {
        Py_CLEAR(*slot[i]);
        *slot[i] = PyObject_GetAttr(torch_tensor, name[i]);
        PyTypeObject *want = i < 3 ? &PyGetSetDescr_Type : &PyMethodDescr_Type;
        if (*slot[i] == NULL || !Py_IS_TYPE(*slot[i], want)) {
            PyErr_Clear();
            return 0; /* replaced by something else: take the attributes by name */
        }
    }
    desc.tag = version_tag(tp); /* the lookups above gave it one */
    return 1;
}

/* 1 when obj is a torch.Tensor, 0 when not, -1 on error. */
static int is_tensor(PyObject *obj)
{
    if (torch_tensor == NULL) {
        PyObject *name = PyUnicode_FromString("torch");
        if (name == NULL)
            return -1;
        PyObject *torch = PyImport_GetModule(name);
        Py_DECREF(name);
        if (torch == NULL)
            return PyErr_Occurred() ? -1 : 0;
        torch_tensor = PyObject_GetAttrString(torch, "Tensor");
        torch_float32 = PyObject_GetAttrString(torch, "float32");
        torch_bfloat16 = PyObject_GetAttrString(torch, "bfloat16");
        torch_float16 = PyObject_GetAttrString(torch, "float16");
        torch_int32 = PyObject_GetAttrString(torch, "int32");
        torch_int64 = PyObject_GetAttrString(torch, "int64");
        torch_empty_like = PyObject_GetAttrString(torch, "empty_like");
        torch_contiguous = PyObject_GetAttrString(torch, "contiguous_format");
        torch_grad_enabled = PyObject_GetAttrString(torch, "is_grad_enabled");
        Py_DECREF(torch);
        if (torch_tensor == NULL || torch_float32 == NULL || torch_bfloat16 == NULL ||
            torch_float16 == NULL || torch_int32 == NULL || torch_int64 == NULL ||
            torch_empty_like == NULL || torch_contiguous == NULL || torch_grad_enabled == NULL ||
            !PyType_Check(torch_tensor)) {
            Py_CLEAR(torch_tensor);
            Py_CLEAR(torch_float32);
            Py_CLEAR(torch_bfloat16);
            Py_CLEAR(torch_float16);
            Py_CLEAR(torch_int32);
            Py_CLEAR(torch_int64);
            Py_CLEAR(torch_empty_like);
            Py_CLEAR(torch_contiguous);
            Py_CLEAR(torch_grad_enabled);
            return -1;
        }
    }
    if (Py_IS_TYPE(obj, (PyTypeObject *)torch_tensor))
        return 1;
    return PyObject_IsInstance(obj, torch_tensor);
}

/* The element types an argument takes, as a bit set. The index arrays'
 * integer types are view element types of this file only. */
enum { DT_INT32 = 16, DT_INT64 = 17 };
enum {
    T_F32 = 1u << LINATTN_F32,
    T_ANY = T_F32 | 1u << LINATTN_BF16 | 1u << LINATTN_F16, /* q, k, v, beta, o */
    T_STATE = T_F32 | 1u << LINATTN_BF16,                    /* s */
    T_I32 = 1u << DT_INT32,                                  /* slot indices */
    T_I64 = 1u << DT_INT64                                   /* cu_seqlens */
};

static const char *dtype_str(int t)
{
    return t == LINATTN_BF16 ? "bfloat16" : t == LINATTN_F16 ? "float16"
           : t == DT_INT32   ? "int32"    : t == DT_INT64   ? "int64" : "float32";
}

/* "float32, bfloat16 or float16" for a type set. */
static const char *types_str(unsigned types)
{
    return types == T_ANY ? "float32, bfloat16 or float16"
           : types == T_STATE ? "float32 or bfloat16"
           : types == T_I32   ? "int32"
           : types == T_I64   ? "int64"
                              : "float32";
}

/* Fills v->buf from a CPU float32, bfloat16 or float16 tensor as a buffer
 * would be filled, and v->dt, v->isz from its dtype (acquire() decides
 * which types the argument takes). */
static int tensor_view(PyObject *obj, const char *name, unsigned types, view *v)
{
    const int fast = Py_IS_TYPE(obj, (PyTypeObject *)torch_tensor) && descriptors_current();
#define GET(d, s) \
    (fast ? Py_TYPE(d)->tp_descr_get(d, obj, torch_tensor) : PyObject_GetAttr(obj, s))
#define CALL(d, s) \
    (fast ? PyObject_Vectorcall(d, &obj, 1, NULL) : PyObject_CallMethodNoArgs(obj, s))
    PyObject *cpu = GET(desc.is_cpu, s_is_cpu);
    if (cpu == NULL)
        return -1;
    const int on_cpu = cpu == Py_True ? 1 : PyObject_IsTrue(cpu);
    Py_DECREF(cpu);
    if (on_cpu != 1) {
        PyObject *dev = PyObject_GetAttr(obj, s_device);
        if (dev != NULL)
            PyErr_Format(PyExc_ValueError, "%s: tensor on %S; linattn computes on CPU tensors",
                         name, dev);
        Py_XDECREF(dev);
        return -1;
    }
    PyObject *dtype = GET(desc.dtype, s_dtype);
    if (dtype == NULL)
        return -1;
    if (dtype == torch_float32) {
        v->dt = LINATTN_F32, v->isz = 4;
    } else if (dtype == torch_bfloat16) {
        v->dt = LINATTN_BF16, v->isz = 2;
    } else if (dtype == torch_float16) {
        v->dt = LINATTN_F16, v->isz = 2;
    } else if ((types & T_I32) && dtype == torch_int32) {
        v->dt = DT_INT32, v->isz = 4;
    } else if ((types & T_I64) && dtype == torch_int64) {
        v->dt = DT_INT64, v->isz = 8;
    } else {
        PyErr_Format(PyExc_TypeError, "%s: dtype %S; linattn takes %s", name, dtype,
                     types_str(types));
        Py_DECREF(dtype);
        return -1;
    }
    Py_DECREF(dtype);
    /* is_contiguous() is cheaper than stride(), and a contiguous tensor's
     * strides follow from its shape (torch ignores the strides of size-1
     * dimensions, as the library does). */
    PyObject *shape = GET(desc.shape, s_shape);
    int contiguous = -1;
    if (shape != NULL) {
        PyObject *c = CALL(desc.is_contiguous, s_is_contiguous);
        contiguous = c ? PyObject_IsTrue(c) : -1;
        Py_XDECREF(c);
    }
    PyObject *strides = contiguous == 0 ? CALL(desc.stride, s_stride) : NULL;
    PyObject *ptr = contiguous == 1 || strides ? CALL(desc.data_ptr, s_data_ptr) : NULL;
#undef GET
#undef CALL
    int rc = -1;
    if (ptr == NULL) {
        /* sparse and other layouts have no strides */
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError, "%s: expected a strided (dense) tensor", name);
        goto out;
    }
    if (!PyTuple_Check(shape) ||
        (strides && (!PyTuple_Check(strides) ||
                     PyTuple_GET_SIZE(shape) != PyTuple_GET_SIZE(strides)))) {
        PyErr_Format(PyExc_TypeError, "%s: tensor without shape and strides", name);
        goto out;
    }
    const Py_ssize_t nd = PyTuple_GET_SIZE(shape);
    if (nd > 8) {
        PyErr_Format(PyExc_ValueError, "%s: %zd dimensions", name, nd);
        goto out;
    }
    Py_ssize_t packed = 1; /* the stride of dimension i when contiguous */
    for (Py_ssize_t i = nd - 1; i >= 0; i--) {
        v->tshape[i] = PyLong_AsSsize_t(PyTuple_GET_ITEM(shape, i));
        v->tstrides[i] = strides ? PyLong_AsSsize_t(PyTuple_GET_ITEM(strides, i)) : packed;
        if (PyErr_Occurred())
            goto out;
        const Py_ssize_t n = v->tshape[i] > 1 ? v->tshape[i] : 1;
        if (v->tstrides[i] > PY_SSIZE_T_MAX / 4 || v->tstrides[i] < PY_SSIZE_T_MIN / 4 ||
            (!strides && i > 0 && packed > PY_SSIZE_T_MAX / 4 / n)) {
            PyErr_Format(PyExc_ValueError, "%s: stride out of range", name);
            goto out;
        }
        packed *= n;
        v->tstrides[i] *= v->isz;
    }
    v->buf.buf = PyLong_AsVoidPtr(ptr);
    if (PyErr_Occurred())
        goto out;
    v->buf.ndim = (int)nd;
    v->buf.shape = v->tshape;
    v->buf.strides = v->tstrides;
    v->buf.itemsize = v->isz;
    v->buf.format = NULL; /* v->dt says */
    v->held = 2;
    rc = 0;
out:
    Py_XDECREF(shape);
    Py_XDECREF(strides);
    Py_XDECREF(ptr);
    return rc;
}

static const char *dtype_name(const char *fmt)
{
    if (fmt == NULL)
        return "bytes";
    if (*fmt == '<' || *fmt == '=' || *fmt == '@' || *fmt == '>' || *fmt == '!')
        fmt++;
    switch (*fmt) {
    case 'd': return "float64";
    case 'e': return "float16";
    case 'f': return "float32";
    case 'b': return "int8";
    case 'B': return "uint8";
    case 'h': return "int16";
    case 'i': return "int32";
    case 'l': case 'q': return "int64";
    case '?': return "bool";
    default: return fmt;
    }
}

/* "bhtd"-style axis letters, one per buffer dimension, in the buffer's order;
 * types: the element types taken (numpy arrays: float32 'f' and float16 'e';
 * torch tensors also bfloat16). */
static int acquire_t(PyObject *obj, const char *name, const char *axes, const char *shape,
                     int writable, unsigned types, view *v)
{
    v->held = 0; /* the rest is filled below before it is read */
    const int flags = PyBUF_STRIDES | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0);
    if (!PyObject_CheckBuffer(obj)) {
        const int t = is_tensor(obj);
        if (t < 0)
            return -1;
        if (t == 0) {
            PyErr_Format(PyExc_TypeError,
                         "%s: expected a %s numpy array or CPU torch tensor, got %.100s",
                         name, types_str(types), Py_TYPE(obj)->tp_name);
            return -1;
        }
        if (tensor_view(obj, name, types, v) != 0)
            return -1;
        if (!(types >> v->dt & 1u)) {
            PyErr_Format(PyExc_TypeError, "%s: dtype %s; linattn takes %s here", name,
                         dtype_str(v->dt), types_str(types));
            v->held = 0;
            return -1;
        }
    } else if (PyObject_GetBuffer(obj, &v->buf, flags) != 0) {
        PyErr_Clear();
        if (writable && PyObject_GetBuffer(obj, &v->buf, PyBUF_STRIDES) == 0) {
            PyBuffer_Release(&v->buf);
            PyErr_Format(PyExc_ValueError, "%s: the array is read-only; outputs must be writable",
                         name);
        } else {
            PyErr_Format(PyExc_TypeError,
                         "%s: expected a %s numpy array or CPU torch tensor, got %.100s",
                         name, types_str(types), Py_TYPE(obj)->tp_name);
        }
        return -1;
    } else {
        v->held = 1;
        /* native-order float32 'f' or float16 'e', one letter */
        const char *fmt = v->buf.format;
        const char *f = fmt && (fmt[0] == '<' || fmt[0] == '=' || fmt[0] == '@') ? fmt + 1 : fmt;
        const int one = f && f[0] && f[1] == 0;
        if (one && f[0] == 'f' && v->buf.itemsize == 4)
            v->dt = LINATTN_F32, v->isz = 4;
        else if (one && f[0] == 'e' && v->buf.itemsize == 2)
            v->dt = LINATTN_F16, v->isz = 2;
        else
            v->isz = 0;
        if (v->isz == 0 || !(types >> v->dt & 1u)) {
            PyErr_Format(PyExc_TypeError, "%s: dtype %s; linattn takes %s here", name,
                         v->isz ? dtype_str(v->dt) : dtype_name(fmt), types_str(types));
            goto fail;
        }
    }
    const int nd = (int)strlen(axes);
    if (v->buf.ndim != nd) {
        PyErr_Format(PyExc_ValueError, "%s: expected %d dimensions %s, got %d", name, nd, shape,
                     v->buf.ndim);
        goto fail;
    }
    for (int a = 0; a < 4; a++) {
        v->n[a] = 1;
        v->st[a] = 0;
    }
    for (int i = 0; i < nd; i++) {
        const int a = axes[i] == 'b' ? 0 : axes[i] == 'h' ? 1 : axes[i] == 't' ? 2 : 3;
        const Py_ssize_t bytes = v->buf.strides[i];
        if (bytes % v->isz != 0) {
            PyErr_Format(PyExc_ValueError,
                         "%s: stride %zd bytes of dimension %d is not a whole number of elements",
                         name, bytes, i);
            goto fail;
        }
        v->n[a] = v->buf.shape[i];
        v->st[a] = bytes / v->isz;
    }
    /* The kernels read a feature row as consecutive floats. */
    if (axes[nd - 1] == 'd' && v->n[3] > 1 && v->st[3] != 1) {
        PyErr_Format(PyExc_ValueError,
                     "%s: the last dimension must be contiguous (its stride is %lld elements); "
                     "other dimensions may have any stride",
                     name, (long long)v->st[3]);
        goto fail;
    }
    return 0;
fail:
    release(v);
    return -1;
}

/* A float32-only argument (g, z, A_log, dt_bias, and everything of the four
 * float32 calls). */
static int acquire(PyObject *obj, const char *name, const char *axes, const char *shape,
                   int writable, view *v)
{
    return acquire_t(obj, name, axes, shape, writable, T_F32, v);
}

/* State buffers have no strides in the API: they must be packed. */
static int acquire_packed(PyObject *obj, const char *name, const char *shape, int nd,
                          const int64_t *want, unsigned types, view *v)
{
    /* no contiguous-row check: packed below */
    static const char axes[][5] = {"", "x", "xx", "xxx", "xxxx"};
    if (acquire_t(obj, name, axes[nd], shape, 1, types, v) != 0)
        return -1;
    int64_t expect = 1;
    for (int i = nd - 1; i >= 0; i--) {
        if (v->buf.shape[i] != want[i]) {
            /* want has nd entries (1 for A_log, 4 for s): print those only */
            char dims[96] = "";
            size_t len = 0;
            for (int j = 0; j < nd && len < sizeof dims; j++)
                len += (size_t)snprintf(dims + len, sizeof dims - len, "%s%lld", j ? ", " : "",
                                        (long long)want[j]);
            PyErr_Format(PyExc_ValueError, "%s: expected shape %s = (%s), dimension %d is %zd",
                         name, shape, dims, i, v->buf.shape[i]);
            goto fail;
        }
        if (want[i] > 1 && v->buf.strides[i] != expect * v->isz) {
            PyErr_Format(PyExc_ValueError, "%s: must be C-contiguous", name);
            goto fail;
        }
        expect *= want[i];
    }
    return 0;
fail:
    release(v);
    return -1;
}

static int same(const view *v, const char *name, const char *what, int axis, int64_t want)
{
    if (v->n[axis] == want)
        return 0;
    PyErr_Format(PyExc_ValueError, "%s: %s is %lld, expected %lld", name, what,
                 (long long)v->n[axis], (long long)want);
    return -1;
}

/* -1 when obj is not a buffer. */
static int ndim_of(PyObject *obj)
{
    Py_buffer b;
    if (obj != Py_None && !PyObject_CheckBuffer(obj) && is_tensor(obj) == 1) {
        PyObject *shape = PyObject_GetAttr(obj, s_shape);
        const Py_ssize_t nd = shape && PyTuple_Check(shape) ? PyTuple_GET_SIZE(shape) : -1;
        Py_XDECREF(shape);
        PyErr_Clear();
        return (int)nd;
    }
    if (obj == Py_None || PyObject_GetBuffer(obj, &b, PyBUF_STRIDES) != 0) {
        PyErr_Clear();
        return -1;
    }
    const int nd = b.ndim;
    PyBuffer_Release(&b);
    return nd;
}

static linattn_strides strides_of(const view *v)
{
    return (linattn_strides){v->st[0], v->st[1], v->st[2]};
}

static int as_long(PyObject *o, const char *name, long long lo, long long hi, long long *out)
{
    const long long x = PyLong_AsLongLong(o);
    if (x == -1 && PyErr_Occurred())
        return -1;
    if (x < lo || x > hi) {
        PyErr_Format(PyExc_ValueError, "%s = %lld is out of range", name, x);
        return -1;
    }
    *out = x;
    return 0;
}

static PyObject *raise_status(linattn_status st)
{
    PyObject *type = st == LINATTN_E_NOMEM ? PyExc_MemoryError
                     : st == LINATTN_E_ISA ? PyExc_RuntimeError
                                           : PyExc_ValueError;
    PyErr_SetString(type, linattn_last_error());
    return NULL;
}

/* A keyword's names and values. Python interns the string literals of
 * the keyword defaults, so a pointer comparison usually decides. */
typedef struct {
    const char *name;
    int value;
    PyObject *str; /* interned at import */
} choice;

static choice layouts[] = {{"bhtd", LAYOUT_BHTD, NULL}, {"bthd", LAYOUT_BTHD, NULL},
                           {NULL, 0, NULL}};
static choice gates[] = {{"none", LINATTN_GATE_NONE, NULL}, {"head", LINATTN_GATE_HEAD, NULL},
                         {"token", LINATTN_GATE_TOKEN, NULL},
                         {"channel", LINATTN_GATE_CHANNEL, NULL}, {NULL, 0, NULL}};
static choice phis[] = {{"elu1", LINATTN_PHI_ELU1, NULL}, {"relu", LINATTN_PHI_RELU, NULL},
                        {"identity", LINATTN_PHI_IDENTITY, NULL}, {NULL, 0, NULL}};
static choice algos[] = {{"auto", LINATTN_ALGO_AUTO, NULL}, {"chunked", LINATTN_ALGO_CHUNKED, NULL},
                         {"recurrent", LINATTN_ALGO_RECURRENT, NULL}, {NULL, 0, NULL}};
static choice head_maps[] = {{"grouped", LINATTN_HEADS_GROUPED, NULL},
                             {"tiled", LINATTN_HEADS_TILED, NULL}, {NULL, 0, NULL}};
static choice gate_acts[] = {{"none", LINATTN_GATE_ACT_NONE, NULL},
                             {"softplus", LINATTN_GATE_ACT_SOFTPLUS, NULL},
                             {"bounded_sigmoid", LINATTN_GATE_ACT_BOUNDED_SIGMOID, NULL},
                             {NULL, 0, NULL}};
static choice beta_acts[] = {{"none", LINATTN_BETA_ACT_NONE, NULL},
                             {"sigmoid", LINATTN_BETA_ACT_SIGMOID, NULL},
                             {"sigmoid2", LINATTN_BETA_ACT_SIGMOID2, NULL}, {NULL, 0, NULL}};
static choice *const all_choices[] = {layouts, gates, phis, algos, head_maps, gate_acts,
                                      beta_acts};

static int choose(PyObject *o, const char *what, const choice *c, long long *out)
{
    for (const choice *p = c; p->name; p++) {
        if (o == p->str) {
            *out = p->value;
            return 0;
        }
    }
    if (PyUnicode_Check(o)) {
        for (const choice *p = c; p->name; p++) {
            if (PyUnicode_CompareWithASCIIString(o, p->name) == 0) {
                *out = p->value;
                return 0;
            }
        }
    }
    char names[96] = "";
    size_t len = 0;
    for (const choice *p = c; p->name && len < sizeof names; p++)
        len += (size_t)snprintf(names + len, sizeof names - len, "%s'%s'", p == c ? "" : ", ",
                                p->name);
    PyErr_Format(PyExc_ValueError, "%s=%R: expected one of %s", what, o, names);
    return -1;
}

/* A flag as int() reads it: True, False, 0, 1 (the library rejects others). */
static int flag(PyObject *o, const char *name, long long *out)
{
    if (o == Py_True || o == Py_False) {
        *out = o == Py_True;
        return 0;
    }
    PyObject *n = PyNumber_Long(o);
    if (n == NULL)
        return -1;
    const int rc = as_long(n, name, INT_MIN, INT_MAX, out);
    Py_DECREF(n);
    return rc;
}

/* The arguments of compute(), in order. */
enum {
    A_KIND, A_LAYOUT, A_Q, A_K, A_V, A_G, A_BETA, A_O, A_S, A_Z, A_GATE, A_PHI, A_ALGO,
    A_CAUSAL, A_NORMALIZE, A_EPS, A_SCALE, A_CHUNK, A_THREADS, A_HEAD_MAP, A_L2, A_ZC,
    A_GATE_ACT, A_LOWER, A_BETA_ACT, A_ALOG, A_DTBIAS, N_ARGS
};

/* One call of the library on N_ARGS arguments: kind, layout, q, k, v, g,
 * beta, o, s, z, gate, phi, algo, causal, normalize, eps, scale, chunk,
 * num_threads, head_map, qk_l2norm, z_compensated, gate_act,
 * gate_lower_bound, beta_act, A_log, dt_bias; layout, gate, phi, algo,
 * head_map, gate_act and beta_act by name, gate None meaning: from g's
 * number of dimensions. q, k, v, beta and o may be float32, bfloat16 or
 * float16 and s float32 or bfloat16: such a call, or one with an
 * activation, goes through linattn_run, which takes the types; a float32
 * call without one goes to the four float32 entry points as before.
 * 0, or -1 with an exception set. */
/* The serving form (run_pool): index arrays (int32 numpy arrays or None),
 * cu_seqlens (int64 or None) and the pool's order. */
typedef struct {
    PyObject *rd, *wr, *snap, *cu;
    int vfirst;
    int decode; /* in_place(): rd is one slot per sequence, exactly; scale None = K^-1/2 */
    long long repeat; /* run_pool_loop(): linattn_run this many times (else once) */
} pool_args;

/* A C-contiguous 1-d or 2-d integer array (numpy, or a torch tensor read in
 * place: converting a decode step's slot tensor cost more than the step's
 * Python layer) of `itemsize` bytes; *count gets its number of entries. */
static int acquire_index(PyObject *obj, const char *name, int itemsize, view *v,
                         Py_ssize_t *count)
{
    v->held = 0;
    const int t = PyObject_CheckBuffer(obj) ? 0 : is_tensor(obj);
    if (t < 0)
        return -1;
    if (t == 1) {
        if (tensor_view(obj, name, itemsize == 4 ? T_I32 : T_I64, v) != 0)
            return -1;
    } else {
        if (PyObject_GetBuffer(obj, &v->buf, PyBUF_STRIDES | PyBUF_FORMAT) != 0)
            return -1;
        v->held = 1;
        const char *f = v->buf.format ? v->buf.format : "B";
        if (*f == '<' || *f == '=' || *f == '@')
            f++;
        if (strchr("bhilqBHILQ", *f) == NULL || f[1] != 0 || v->buf.itemsize != itemsize) {
            PyErr_Format(PyExc_TypeError, "%s: expected int%d, got %s", name, itemsize * 8,
                         dtype_name(v->buf.format));
            goto fail;
        }
    }
    if (v->buf.ndim != 1 && v->buf.ndim != 2) {
        PyErr_Format(PyExc_ValueError, "%s: expected 1 or 2 dimensions, got %d", name,
                     v->buf.ndim);
        goto fail;
    }
    Py_ssize_t n = 1;
    for (int i = v->buf.ndim - 1; i >= 0; i--) {
        if (v->buf.shape[i] > 1 && v->buf.strides[i] != n * itemsize) {
            PyErr_Format(PyExc_ValueError, "%s: must be C-contiguous", name);
            goto fail;
        }
        n *= v->buf.shape[i];
    }
    *count = n;
    return 0;
fail:
    release(v);
    return -1;
}

static int compute(PyObject *const *args, const pool_args *pa)
{
    long long kind, layout, gate = -1, phi, algo, causal, normalize, chunk, threads, head_map,
              l2, zc, gate_act, beta_act;
    if (as_long(args[A_KIND], "kind", 0, 3, &kind) ||
        choose(args[A_LAYOUT], "layout", layouts, &layout) ||
        (args[A_GATE] != Py_None && choose(args[A_GATE], "gate", gates, &gate)) ||
        choose(args[A_PHI], "phi", phis, &phi) || choose(args[A_ALGO], "algo", algos, &algo) ||
        flag(args[A_CAUSAL], "causal", &causal) ||
        flag(args[A_NORMALIZE], "normalize", &normalize) ||
        as_long(args[A_CHUNK], "chunk", LLONG_MIN, LLONG_MAX, &chunk) ||
        as_long(args[A_THREADS], "num_threads", INT_MIN, INT_MAX, &threads) ||
        choose(args[A_HEAD_MAP], "head_map", head_maps, &head_map) ||
        flag(args[A_L2], "qk_l2norm", &l2) || flag(args[A_ZC], "z_compensated", &zc) ||
        choose(args[A_GATE_ACT], "gate_act", gate_acts, &gate_act) ||
        choose(args[A_BETA_ACT], "beta_act", beta_acts, &beta_act))
        return -1;
    const double lower = args[A_LOWER] == Py_None ? 0.0 : PyFloat_AsDouble(args[A_LOWER]);
    const int default_scale = pa && pa->decode && args[A_SCALE] == Py_None;
    const double eps = PyFloat_AsDouble(args[A_EPS]);
    double scale = default_scale ? 0.0 : PyFloat_AsDouble(args[A_SCALE]);
    if (PyErr_Occurred())
        return -1;

    const int step = kind == RUN_STEP || kind == RUN_DELTA_STEP;
    const int delta = kind == RUN_DELTA_FORWARD || kind == RUN_DELTA_STEP;
    PyObject *const g_obj = args[A_G], *const beta_obj = args[A_BETA];
    PyObject *const s_obj = args[A_S], *const z_obj = args[A_Z];
    const int bthd = !step && layout == LAYOUT_BTHD;

    if (gate == -1) {
        /* forward: [H], [B,H] head; [B,H,T] token; [B,H,T,dk] channel.
         * step: [H] head; [B,H] token; [B,H,dk] channel. */
        const int gnd = ndim_of(g_obj);
        if (gnd < 0)
            /* acquire() says why */
            gate = g_obj == Py_None ? LINATTN_GATE_NONE : LINATTN_GATE_TOKEN;
        else if (step)
            gate = gnd == 1 ? LINATTN_GATE_HEAD : gnd == 2 ? LINATTN_GATE_TOKEN
                 : gnd == 3 ? LINATTN_GATE_CHANNEL : -1;
        else
            gate = gnd == 1 || gnd == 2 ? LINATTN_GATE_HEAD : gnd == 3 ? LINATTN_GATE_TOKEN
                 : gnd == 4 ? LINATTN_GATE_CHANNEL : -1;
        if (gate == -1) {
            PyErr_Format(PyExc_ValueError, "g: %d dimensions match no gate kind", gnd);
            return -1;
        }
    } else if (gate == LINATTN_GATE_NONE && g_obj != Py_None) {
        PyErr_SetString(PyExc_ValueError, "g is given but gate is 'none'");
        return -1;
    }

    const char *qk_axes = step ? "bhd" : bthd ? "bthd" : "bhtd";
    const char *qk_shape = step ? "[B, H, K]" : bthd ? "[B, T, H, K]" : "[B, H, T, K]";
    const char *v_shape = step ? "[B, H, V]" : bthd ? "[B, T, H, V]" : "[B, H, T, V]";
    const char *bt_axes = step ? "bh" : bthd ? "bth" : "bht";
    const char *bt_shape = step ? "[B, H]" : bthd ? "[B, T, H]" : "[B, H, T]";

    /* Only held is read before acquire() fills a view. */
    view q, k, v, g, beta, o, s, z, alog, dtb;
    q.held = k.held = v.held = g.held = beta.held = o.held = s.held = z.held = 0;
    alog.held = dtb.held = 0;
    int ret = -1;
    linattn_state_pool pool = {0};
    view ib[4];
    Py_ssize_t ib_n[4] = {0, 0, 0, 0};
    ib[0].held = ib[1].held = ib[2].held = ib[3].held = 0;
    if (acquire_t(args[A_Q], "q", qk_axes, qk_shape, 0, T_ANY, &q) ||
        acquire_t(args[A_K], "k", qk_axes, qk_shape, 0, T_ANY, &k) ||
        acquire_t(args[A_V], "v", qk_axes, v_shape, 0, T_ANY, &v) ||
        acquire_t(args[A_O], "o", qk_axes, v_shape, 1, T_ANY, &o))
        goto done;
    const int64_t B = q.n[0], Hq = q.n[1], T = q.n[2], dk = q.n[3];
    if (default_scale)
        scale = pow((double)dk, -0.5); /* fla's default, as Python's K ** -0.5 */
    const int64_t H = v.n[1], dv = v.n[3];
    if (same(&k, "k", "batch", 0, B) || same(&k, "k", "heads", 1, Hq) ||
        same(&k, "k", "tokens", 2, T) || same(&k, "k", "K", 3, dk) ||
        same(&v, "v", "batch", 0, B) || same(&v, "v", "tokens", 2, T) ||
        same(&o, "o", "batch", 0, B) || same(&o, "o", "heads", 1, H) ||
        same(&o, "o", "tokens", 2, T) || same(&o, "o", "V", 3, dv))
        goto done;

    if (g_obj != Py_None && gate != LINATTN_GATE_NONE) {
        const char *axes, *shape;
        int gnd = -1;
        if (gate == LINATTN_GATE_HEAD) {
            gnd = step ? 1 : ndim_of(g_obj);
            axes = gnd == 2 ? "bh" : "h";
            shape = gnd == 2 ? "[B, H]" : "[H]";
        } else if (gate == LINATTN_GATE_TOKEN) {
            axes = bt_axes;
            shape = bt_shape;
        } else {
            axes = qk_axes;
            shape = step ? "[B, H, K]" : bthd ? "[B, T, H, K]" : "[B, H, T, K]";
        }
        if (acquire(g_obj, "g", axes, shape, 0, &g))
            goto done;
        if ((gnd != 1 && same(&g, "g", "batch", 0, B)) || same(&g, "g", "heads", 1, H) ||
            (gate != LINATTN_GATE_HEAD && same(&g, "g", "tokens", 2, T)) ||
            (gate == LINATTN_GATE_CHANNEL && same(&g, "g", "K", 3, dk)))
            goto done;
    }
    if (delta && beta_obj != Py_None) {
        if (acquire_t(beta_obj, "beta", bt_axes, bt_shape, 0, T_ANY, &beta) ||
            same(&beta, "beta", "batch", 0, B) || same(&beta, "beta", "heads", 1, H) ||
            same(&beta, "beta", "tokens", 2, T))
            goto done;
    }
    if (pa && s_obj != Py_None) {
        /* the pool: [slots, H, K, V] (V-first: [slots, H, V, K]), any strides */
        if (acquire_t(s_obj, "initial_state", "xxxx", "[slots, H, K, V]", 1, T_STATE, &s))
            goto done;
        const Py_ssize_t *sh = s.buf.shape, *sb = s.buf.strides;
        const int64_t r = pa->vfirst ? dv : dk, c = pa->vfirst ? dk : dv;
        if (sh[1] != H || sh[2] != r || sh[3] != c) {
            PyErr_Format(PyExc_ValueError,
                         "initial_state: expected a pool [slots, %lld, %lld, %lld] (%s), got "
                         "[%zd, %zd, %zd, %zd]",
                         (long long)H, (long long)r, (long long)c,
                         pa->vfirst ? "V-first" : "K-first", sh[0], sh[1], sh[2], sh[3]);
            goto done;
        }
        const Py_ssize_t e = s.isz;
        for (int i = 0; i < 4; i++)
            if (sb[i] % e) {
                PyErr_SetString(PyExc_ValueError,
                                "initial_state: strides must be whole elements");
                goto done;
            }
        pool.slots = sh[0];
        pool.slot = sb[0] / e, pool.head = sb[1] / e;
        pool.row = (pa->vfirst ? sb[3] : sb[2]) / e;
        pool.col = (pa->vfirst ? sb[2] : sb[3]) / e;
    } else if (s_obj != Py_None) {
        const int64_t want[4] = {B, H, dk, dv};
        if (acquire_packed(s_obj, "s", "[B, H, K, V]", 4, want, T_STATE, &s))
            goto done;
    }
    if (pa && z_obj != Py_None) {
        if (acquire(z_obj, "z", "xxx", "[slots, H, K]", 1, &z))
            goto done;
        const Py_ssize_t *sh = z.buf.shape, *sb = z.buf.strides;
        if (sh[0] != pool.slots || sh[1] != H || sh[2] != dk * (zc == 1 ? 2 : 1) ||
            (sh[2] > 1 && sb[2] != 4) || sb[0] % 4 || sb[1] % 4) {
            PyErr_Format(PyExc_ValueError, "z: expected [%lld, %lld, %lld] with contiguous rows",
                         (long long)pool.slots, (long long)H, (long long)dk);
            goto done;
        }
        pool.z_slot = sb[0] / 4, pool.z_head = sb[1] / 4;
    } else if (z_obj != Py_None) {
        /* Compensated: per (b, h), dk sums, then dk rounding errors. */
        const int64_t plain[3] = {B, H, dk}, compensated[4] = {B, H, 2, dk};
        if (zc == 1 ? acquire_packed(z_obj, "z", "[B, H, 2, K]", 4, compensated, T_F32, &z)
                    : acquire_packed(z_obj, "z", "[B, H, K]", 3, plain, T_F32, &z))
            goto done;
    }
    /* The gate activation's parameters: A_log [H]; dt_bias [H], or with a
     * channel gate [H, K] or fla's flat [H * K]; float32, C-contiguous. */
    if (args[A_ALOG] != Py_None) {
        const int64_t want[1] = {H};
        if (acquire_packed(args[A_ALOG], "A_log", "[H]", 1, want, T_F32, &alog))
            goto done;
    }
    if (args[A_DTBIAS] != Py_None) {
        const int chan = gate == LINATTN_GATE_CHANNEL;
        const int nd = ndim_of(args[A_DTBIAS]);
        const int64_t flat[1] = {chan ? H * dk : H}, two[2] = {H, dk};
        if (chan && nd == 2 ? acquire_packed(args[A_DTBIAS], "dt_bias", "[H, K]", 2, two, T_F32,
                                             &dtb)
                            : acquire_packed(args[A_DTBIAS], "dt_bias",
                                             chan ? "[H * K]" : "[H]", 1, flat, T_F32, &dtb))
            goto done;
    }

    linattn_config cfg;
    if (step)
        linattn_config_init_step(&cfg, B, H, dk, dv);
    else
        linattn_config_init(&cfg, B, H, T, dk, dv);
    cfg.phi = (linattn_phi)phi;
    cfg.gate = (linattn_gate)gate;
    cfg.algo = (linattn_algo)algo;
    cfg.causal = (int)causal;
    cfg.normalize = (int)normalize;
    cfg.eps = (float)eps;
    cfg.scale = (float)scale;
    cfg.chunk = chunk;
    cfg.num_threads = (int)threads;
    cfg.qk_heads = Hq == H ? 0 : Hq;
    cfg.head_map = (linattn_head_map)head_map;
    cfg.qk_l2norm = (int)l2;
    cfg.z_compensated = (int)zc;
    cfg.q = strides_of(&q);
    cfg.k = strides_of(&k);
    cfg.v = strides_of(&v);
    cfg.o = strides_of(&o);
    if (g.held)
        cfg.g = strides_of(&g);
    if (beta.held)
        cfg.beta = strides_of(&beta);
    cfg.dtype.q = q.dt, cfg.dtype.k = k.dt, cfg.dtype.v = v.dt, cfg.dtype.o = o.dt;
    cfg.dtype.beta = beta.held ? beta.dt : LINATTN_F32;
    cfg.dtype.s = s.held ? s.dt : LINATTN_F32;
    cfg.gate_act = (linattn_gate_act)gate_act;
    cfg.gate_lower_bound = (float)lower;
    cfg.beta_act = (linattn_beta_act)beta_act;
    /* linattn_run takes the types and activations; the four float32
     * calls, a little cheaper for a decode step, refuse them. */
    const int typed = q.dt || k.dt || v.dt || o.dt || cfg.dtype.beta || cfg.dtype.s ||
                      gate_act || beta_act || alog.held || dtb.held;

    const void *gp = g.held ? g.buf.buf : NULL, *bp = beta.held ? beta.buf.buf : NULL;
    void *sp = s.held ? s.buf.buf : NULL, *zp = z.held ? z.buf.buf : NULL;
    linattn_status st;
    int64_t nseq = B;
    if (pa) {
        PyObject *const objs[4] = {pa->rd, pa->wr, pa->snap, pa->cu};
        static const char *const names[4] = {"read slots", "write slots", "snapshot slots",
                                             "cu_seqlens"};
        for (int i = 0; i < 4; i++)
            if (objs[i] != Py_None &&
                acquire_index(objs[i], names[i], i == 3 ? 8 : 4, &ib[i], &ib_n[i]))
                goto done;
        nseq = ib[3].held ? (int64_t)ib_n[3] - 1 : B;
        /* in_place(): one slot per sequence, or without slots a state per
         * sequence, as the Python layer requires */
        if (pa->decode && (ib[0].held ? ib[0].buf.ndim != 1 || ib_n[0] != nseq
                                      : pool.slots != nseq)) {
            PyErr_Format(PyExc_ValueError, "%s: expected %lld", ib[0].held
                         ? "ssm_state_indices" : "initial_state: slots", (long long)nseq);
            goto done;
        }
        const int64_t snaps = ib[2].held && ib[2].buf.ndim == 2 ? ib[2].buf.shape[1] : 1;
        const int64_t per_seq[3] = {1, 1, snaps};
        for (int i = 0; i < 3; i++)
            if (ib[i].held && ib_n[i] < nseq * per_seq[i]) {
                PyErr_Format(PyExc_ValueError, "%s: %zd entries for %lld sequences", names[i],
                             ib_n[i], (long long)nseq);
                goto done;
            }
        pool.read_slots = ib[0].held ? ib[0].buf.buf : NULL;
        pool.write_slots = ib[1].held ? ib[1].buf.buf : NULL;
        if (ib[2].held) {
            pool.snapshot_slots = ib[2].buf.buf;
            pool.snapshots = snaps;
        }
    }
    if (pa || typed) {
        linattn_operands ops;
        linattn_operands_init(&ops);
        ops.q = q.buf.buf, ops.k = k.buf.buf, ops.v = v.buf.buf, ops.g = (const float *)gp;
        ops.beta = bp;
        ops.o = o.buf.buf, ops.s = sp, ops.z = zp;
        ops.pool = pa && sp ? &pool : NULL;
        ops.A_log = alog.held ? alog.buf.buf : NULL;
        ops.dt_bias = dtb.held ? dtb.buf.buf : NULL;
        if (ib[3].held)
            ops.cu_seqlens = ib[3].buf.buf, ops.num_seqs = nseq;
        const long long repeat = pa && pa->repeat > 1 ? pa->repeat : 1;
        Py_BEGIN_ALLOW_THREADS
        st = linattn_run((linattn_op)kind, &cfg, &ops);
        for (long long i = 1; i < repeat && st == LINATTN_OK; i++)
            st = linattn_run((linattn_op)kind, &cfg, &ops);
        Py_END_ALLOW_THREADS
    } else {
    Py_BEGIN_ALLOW_THREADS
    switch (kind) {
    case RUN_FORWARD:
        st = linattn_forward(&cfg, q.buf.buf, k.buf.buf, v.buf.buf, gp, o.buf.buf, sp, zp);
        break;
    case RUN_STEP:
        st = linattn_step(&cfg, q.buf.buf, k.buf.buf, v.buf.buf, gp, o.buf.buf, sp, zp);
        break;
    case RUN_DELTA_FORWARD:
        st = linattn_delta_forward(&cfg, q.buf.buf, k.buf.buf, v.buf.buf, gp, bp, o.buf.buf, sp);
        break;
    default:
        st = linattn_delta_step(&cfg, q.buf.buf, k.buf.buf, v.buf.buf, gp, bp, o.buf.buf, sp);
        break;
    }
    Py_END_ALLOW_THREADS
    }
    if (st != LINATTN_OK) {
        raise_status(st);
        goto done;
    }
    ret = 0;
done:
    for (int i = 0; i < 4; i++)
        release(&ib[i]);
    release(&q);
    release(&k);
    release(&v);
    release(&g);
    release(&beta);
    release(&o);
    release(&s);
    release(&z);
    release(&alog);
    release(&dtb);
    return ret;
}

/* run(kind, layout, q, ...): compute() for the Python layer; returns None. */
static PyObject *run(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (nargs != N_ARGS) {
        PyErr_Format(PyExc_TypeError, "run() takes %d positional arguments", N_ARGS);
        return NULL;
    }
    if (compute(args, NULL) != 0)
        return NULL;
    Py_RETURN_NONE;
}

/* The serving arguments after compute()'s N_ARGS (run_pool's and
 * run_pool_loop's): read, write, snapshot slots, cu_seqlens, v_first. */
static pool_args pool_args_at(PyObject *const *args, long long repeat)
{
    return (pool_args){args[N_ARGS], args[N_ARGS + 1], args[N_ARGS + 2], args[N_ARGS + 3],
                       PyObject_IsTrue(args[N_ARGS + 4]), 0, repeat};
}

/* time.perf_counter (a new reference), the clock of the timing loops; NULL
 * with an exception set. */
static PyObject *perf_counter(void)
{
    PyObject *time = PyImport_ImportModule("time");
    PyObject *clock = time ? PyObject_GetAttrString(time, "perf_counter") : NULL;
    Py_XDECREF(time);
    return clock;
}

/* run_pool(kind, layout, q, ..., z_compensated, read, write, snapshots,
 * cu_seqlens, v_first): linattn_run with s as a state pool [slots, H, K, V]
 * ([slots, H, V, K] V-first) of any strides, z [slots, H, K]; index arrays
 * int32 (snapshots [N, K]), cu_seqlens int64, each None or C-contiguous. */
static PyObject *run_pool(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (nargs != N_ARGS + 5) {
        PyErr_Format(PyExc_TypeError, "run_pool() takes %d positional arguments", N_ARGS + 5);
        return NULL;
    }
    const pool_args pa = pool_args_at(args, 1);
    if (compute(args, &pa) != 0)
        return NULL;
    Py_RETURN_NONE;
}

/* run_pool_loop(n, *run_pool's arguments): seconds for n bare linattn_run
 * calls on arguments read once: what a decode step costs in C, against
 * which the benchmarks measure the Python layers. */
static PyObject *run_pool_loop(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    long long n;
    if (nargs != N_ARGS + 6) {
        PyErr_Format(PyExc_TypeError, "run_pool_loop() takes %d positional arguments",
                     N_ARGS + 6);
        return NULL;
    }
    if (as_long(args[0], "n", 1, LLONG_MAX, &n))
        return NULL;
    args++;
    const pool_args pa = pool_args_at(args, n);
    PyObject *clock = perf_counter();
    if (clock == NULL)
        return NULL;
    PyObject *t0 = PyObject_CallNoArgs(clock), *ret = NULL;
    if (t0 && compute(args, &pa) == 0) {
        PyObject *t1 = PyObject_CallNoArgs(clock);
        if (t1)
            ret = PyFloat_FromDouble(PyFloat_AsDouble(t1) - PyFloat_AsDouble(t0));
        Py_XDECREF(t1);
    }
    Py_XDECREF(t0);
    Py_DECREF(clock);
    return ret;
}

/* Constants of in_place()'s call, made once. */
static PyObject *k_bthd, *k_identity, *k_grouped, *k_eps, *k_zero, *k_memory_format,
    *s_requires_grad, *np_empty;

/* A new output like v (fla's o = empty_like(v)) of q's kind: a C-contiguous
 * tensor, or a numpy array; None when q and v are not both one or the other,
 * NULL with an exception set on failure. */
static PyObject *output_like(PyObject *q, PyObject *v)
{
    const int tq = is_tensor(q), tv = tq < 0 ? -1 : is_tensor(v);
    if (tv < 0)
        return NULL;
    if (tq && tv) {
        PyObject *const argv[2] = {v, torch_contiguous};
        return PyObject_Vectorcall(torch_empty_like, argv, 1, k_memory_format);
    }
    if (tq || tv || !PyObject_CheckBuffer(q) || !PyObject_CheckBuffer(v))
        Py_RETURN_NONE;
    if (np_empty == NULL) {
        PyObject *np = PyImport_ImportModule("numpy");
        if (np == NULL)
            return NULL;
        np_empty = PyObject_GetAttrString(np, "empty");
        Py_DECREF(np);
        if (np_empty == NULL)
            return NULL;
    }
    /* np.empty(v.shape, v.dtype): C order, as the layer's, and a third of
     * np.empty_like(v, order='C')'s cost */
    PyObject *const argv[2] = {PyObject_GetAttr(v, s_shape), PyObject_GetAttr(v, s_dtype)};
    PyObject *o = argv[0] && argv[1] ? PyObject_Vectorcall(np_empty, argv, 2, NULL) : NULL;
    Py_XDECREF(argv[0]);
    Py_XDECREF(argv[1]);
    return o;
}

/* 1 when one of the tensors needs a gradient and autograd is on, 0 when
 * not, -1 on error. */
static int needs_grad(PyObject *const *xs, int n)
{
    int enabled = -2; /* not asked yet: numpy-only calls never ask */
    for (int i = 0; i < n; i++) {
        const int t = xs[i] == Py_None ? 0 : is_tensor(xs[i]);
        if (t <= 0) {
            if (t < 0)
                return -1;
            continue;
        }
        if (enabled == -2) {
            PyObject *on = PyObject_CallNoArgs(torch_grad_enabled);
            enabled = on ? PyObject_IsTrue(on) : -1;
            Py_XDECREF(on);
        }
        if (enabled != 1)
            return enabled;
        PyObject *r = PyObject_GetAttr(xs[i], s_requires_grad);
        const int yes = r ? PyObject_IsTrue(r) : -1;
        Py_XDECREF(r);
        if (yes != 0)
            return yes;
    }
    return 0;
}

/* in_place(kind, q, k, v, g, gate, beta, scale, pool, slots, v_first,
 * qk_l2norm, algo, gate_act, gate_lower_bound, beta_act, A_log, dt_bias):
 * a serving engine's decode call of the fla-style functions (bthd inputs,
 * the state pool updated in place, one int32 slot per sequence, or slots
 * None and a state per sequence, as transformers' cache passes it), with the
 * Python layer's part done here, where it costs a fraction: returns o, or
 * None when the call needs that layer (an operand to convert or copy, a
 * tensor that needs a gradient, or any fault, which the layer then finds
 * and names in its own words). Nothing is written unless o is returned. */
static PyObject *in_place(PyObject *self, PyObject *const *a, Py_ssize_t nargs)
{
    (void)self;
    if (nargs != 18) {
        PyErr_SetString(PyExc_TypeError, "in_place() takes 18 positional arguments");
        return NULL;
    }
    if (a[8] == Py_None) /* no pool: the layer says what is missing */
        Py_RETURN_NONE;
    PyObject *const graded[5] = {a[1], a[2], a[3], a[4], a[6]}; /* q k v g beta */
    if (needs_grad(graded, 5) != 0) {
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    PyObject *o = output_like(a[1], a[3]);
    if (o == NULL || o == Py_None) {
        PyErr_Clear();
        Py_XDECREF(o);
        Py_RETURN_NONE;
    }
    PyObject *const args[N_ARGS] = {
        [A_KIND] = a[0], [A_LAYOUT] = k_bthd, [A_Q] = a[1], [A_K] = a[2], [A_V] = a[3],
        [A_G] = a[4], [A_BETA] = a[6], [A_O] = o, [A_S] = a[8], [A_Z] = Py_None,
        [A_GATE] = a[5], [A_PHI] = k_identity, [A_ALGO] = a[12], [A_CAUSAL] = Py_True,
        [A_NORMALIZE] = Py_False, [A_EPS] = k_eps, [A_SCALE] = a[7], [A_CHUNK] = k_zero,
        [A_THREADS] = k_zero, [A_HEAD_MAP] = k_grouped, [A_L2] = a[11], [A_ZC] = Py_False,
        [A_GATE_ACT] = a[13], [A_LOWER] = a[14], [A_BETA_ACT] = a[15], [A_ALOG] = a[16],
        [A_DTBIAS] = a[17]};
    const int vfirst = PyObject_IsTrue(a[10]);
    const pool_args pa = {a[9], Py_None, Py_None, Py_None, vfirst, 1, 1};
    if (vfirst < 0 || compute(args, &pa) != 0) {
        PyErr_Clear();
        Py_DECREF(o);
        Py_RETURN_NONE;
    }
    return o;
}

/* linattn.step itself. A Python function in front of run() cost as much
 * as a quarter of a decode step's time, so the keywords are read here:
 * step_keywords[i] names argument i of compute(), NULL where step() has
 * no such keyword. step_defaults holds the defaults. */
static const char *const step_names[N_ARGS] = {
    [A_Q] = "q", [A_K] = "k", [A_V] = "v", [A_G] = "g", [A_O] = "o", [A_S] = "s", [A_Z] = "z",
    [A_GATE] = "gate", [A_PHI] = "phi", [A_ALGO] = "algo", [A_CAUSAL] = "causal",
    [A_NORMALIZE] = "normalize", [A_EPS] = "eps", [A_SCALE] = "scale", [A_CHUNK] = "chunk",
    [A_THREADS] = "num_threads", [A_HEAD_MAP] = "head_map", [A_L2] = "qk_l2norm",
    [A_ZC] = "z_compensated", [A_GATE_ACT] = "gate_act", [A_LOWER] = "gate_lower_bound",
    [A_ALOG] = "A_log", [A_DTBIAS] = "dt_bias",
};
static PyObject *step_keywords[N_ARGS], *step_defaults[N_ARGS];
static PyObject *make_output; /* _api._out(q, v): an output of q's kind */

static int step_init(void)
{
    for (int i = 0; i < N_ARGS; i++)
        if (step_names[i] && !(step_keywords[i] = PyUnicode_InternFromString(step_names[i])))
            return -1;
    PyObject **const d = step_defaults;
    d[A_KIND] = PyLong_FromLong(RUN_STEP);
    d[A_LAYOUT] = Py_NewRef(layouts[LAYOUT_BHTD].str);
    d[A_G] = Py_NewRef(Py_None);
    d[A_BETA] = Py_NewRef(Py_None);
    d[A_O] = Py_NewRef(Py_None);
    d[A_Z] = Py_NewRef(Py_None);
    d[A_GATE] = Py_NewRef(Py_None);
    d[A_PHI] = Py_NewRef(phis[LINATTN_PHI_ELU1].str);
    d[A_ALGO] = Py_NewRef(algos[LINATTN_ALGO_AUTO].str);
    d[A_CAUSAL] = Py_NewRef(Py_True);
    d[A_NORMALIZE] = Py_NewRef(Py_True);
    d[A_EPS] = PyFloat_FromDouble(1e-6);
    d[A_SCALE] = PyFloat_FromDouble(1.0);
    d[A_CHUNK] = PyLong_FromLong(0);
    d[A_THREADS] = PyLong_FromLong(0);
    d[A_HEAD_MAP] = Py_NewRef(head_maps[LINATTN_HEADS_GROUPED].str);
    d[A_L2] = Py_NewRef(Py_False);
    d[A_ZC] = Py_NewRef(Py_False);
    d[A_GATE_ACT] = Py_NewRef(gate_acts[LINATTN_GATE_ACT_NONE].str);
    d[A_LOWER] = Py_NewRef(Py_None);
    d[A_BETA_ACT] = Py_NewRef(beta_acts[LINATTN_BETA_ACT_NONE].str);
    d[A_ALOG] = Py_NewRef(Py_None);
    d[A_DTBIAS] = Py_NewRef(Py_None);
    for (int i = 0; i < N_ARGS; i++)
        if (i != A_Q && i != A_K && i != A_V && i != A_S && d[i] == NULL)
            return -1;
    return 0;
}

static PyObject *step(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    (void)self;
    static const int positional[] = {A_Q, A_K, A_V, A_G};
    const Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if (nargs > 4) {
        PyErr_Format(PyExc_TypeError, "step() takes from 3 to 4 positional arguments but %zd "
                     "were given", nargs);
        return NULL;
    }
    PyObject *a[N_ARGS];
    memcpy(a, step_defaults, sizeof a);
    int given[N_ARGS] = {0};
    for (Py_ssize_t i = 0; i < nargs; i++) {
        a[positional[i]] = args[i];
        given[positional[i]] = 1;
    }
    const Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    for (Py_ssize_t i = 0; i < nkw; i++) {
        PyObject *key = PyTuple_GET_ITEM(kwnames, i);
        int slot = -1;
        for (int j = 0; j < N_ARGS && slot < 0; j++)
            if (key == step_keywords[j])
                slot = j;
        for (int j = 0; j < N_ARGS && slot < 0; j++)
            if (step_keywords[j] && PyUnicode_Compare(key, step_keywords[j]) == 0)
                slot = j;
        if (slot < 0) {
            PyErr_Format(PyExc_TypeError, "step() got an unexpected keyword argument '%S'", key);
            return NULL;
        }
        if (given[slot]) {
            PyErr_Format(PyExc_TypeError, "step() got multiple values for argument '%S'", key);
            return NULL;
        }
        a[slot] = args[nargs + i];
        given[slot] = 1;
    }
    static const int required[] = {A_Q, A_K, A_V, A_S};
    for (int i = 0; i < 4; i++) {
        if (!given[required[i]]) {
            PyErr_Format(PyExc_TypeError, "step() missing required argument '%s'",
                         step_names[required[i]]);
            return NULL;
        }
    }
    PyObject *o;
    if (a[A_O] != Py_None) {
        o = Py_NewRef(a[A_O]);
    } else {
        if (make_output == NULL) {
            PyErr_SetString(PyExc_RuntimeError, "linattn._api was not imported");
            return NULL;
        }
        o = PyObject_CallFunctionObjArgs(make_output, a[A_Q], a[A_V], NULL);
        if (o == NULL)
            return NULL;
        a[A_O] = o;
    }
    if (compute(a, NULL) != 0)
        Py_CLEAR(o);
    return o;
}

static PyObject *set_output_maker(PyObject *self, PyObject *fn)
{
    (void)self;
    Py_XSETREF(make_output, Py_NewRef(fn));
    Py_RETURN_NONE;
}

static PyObject *isa_name(PyObject *self, PyObject *arg)
{
    (void)self;
    const long i = PyLong_AsLong(arg);
    if (i == -1 && PyErr_Occurred())
        return NULL;
    return PyUnicode_FromString(linattn_isa_name((linattn_isa)i));
}

static PyObject *get_isa(PyObject *self, PyObject *unused)
{
    (void)self;
    (void)unused;
    return PyLong_FromLong((long)linattn_get_isa());
}

static PyObject *tuning_name(PyObject *self, PyObject *unused)
{
    (void)self;
    (void)unused;
    return PyUnicode_FromString(linattn_tuning_name());
}

static PyObject *set_isa(PyObject *self, PyObject *arg)
{
    (void)self;
    const long i = PyLong_AsLong(arg);
    if (i == -1 && PyErr_Occurred())
        return NULL;
    const linattn_status st = linattn_set_isa((linattn_isa)i);
    if (st != LINATTN_OK)
        return raise_status(st);
    Py_RETURN_NONE;
}

static PyObject *isa_available(PyObject *self, PyObject *arg)
{
    (void)self;
    const long i = PyLong_AsLong(arg);
    if (i == -1 && PyErr_Occurred())
        return NULL;
    return PyBool_FromLong(linattn_isa_available((linattn_isa)i));
}

static PyObject *version(PyObject *self, PyObject *unused)
{
    (void)self;
    (void)unused;
    return PyUnicode_FromString(linattn_version());
}

static PyObject *last_error(PyObject *self, PyObject *unused)
{
    (void)self;
    (void)unused;
    return PyUnicode_FromString(linattn_last_error());
}

/* The C call alone on a prepared decode step, for bench_overhead.py:
 * step_loop(q, k, v, o, s, z, n) runs linattn_step n times (contiguous
 * [B, H, D] buffers, elu1, normalised, no gate) and returns seconds. */
static PyObject *step_loop(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (nargs != 7) {
        PyErr_SetString(PyExc_TypeError, "step_loop(q, k, v, o, s, z, n)");
        return NULL;
    }
    long long n;
    if (as_long(args[6], "n", 1, LLONG_MAX, &n))
        return NULL;
    view q, k, v, o, s, z;
    PyObject *ret = NULL;
    if (acquire(args[0], "q", "bhd", "[B, H, K]", 0, &q))
        return NULL;
    if (acquire(args[1], "k", "bhd", "[B, H, K]", 0, &k))
        goto k_fail;
    if (acquire(args[2], "v", "bhd", "[B, H, V]", 0, &v))
        goto v_fail;
    if (acquire(args[3], "o", "bhd", "[B, H, V]", 1, &o))
        goto o_fail;
    const int64_t ws[4] = {q.n[0], q.n[1], q.n[3], v.n[3]};
    if (acquire_packed(args[4], "s", "[B, H, K, V]", 4, ws, T_F32, &s))
        goto s_fail;
    if (acquire_packed(args[5], "z", "[B, H, K]", 3, ws, T_F32, &z))
        goto z_fail;
    linattn_config cfg;
    linattn_config_init_step(&cfg, q.n[0], q.n[1], q.n[3], v.n[3]);
    cfg.num_threads = 1;
    linattn_status st = LINATTN_OK;
    PyObject *clock = perf_counter();
    if (clock == NULL)
        goto fail;
    PyObject *t0 = PyObject_CallNoArgs(clock);
    for (long long i = 0; i < n && st == LINATTN_OK; i++)
        st = linattn_step(&cfg, q.buf.buf, k.buf.buf, v.buf.buf, NULL, o.buf.buf, s.buf.buf,
                          z.buf.buf);
    PyObject *t1 = PyObject_CallNoArgs(clock);
    Py_DECREF(clock);
    if (st != LINATTN_OK) {
        raise_status(st);
    } else if (t0 && t1) {
        ret = PyFloat_FromDouble(PyFloat_AsDouble(t1) - PyFloat_AsDouble(t0));
    }
    Py_XDECREF(t0);
    Py_XDECREF(t1);
fail:
    release(&z);
z_fail:
    release(&s);
s_fail:
    release(&o);
o_fail:
    release(&v);
v_fail:
    release(&k);
k_fail:
    release(&q);
    return ret;
}

PyDoc_STRVAR(step_doc,
"step($module, q, k, v, g=None, *, s, z=None, o=None, gate=None, phi='elu1',\n"
"     algo='auto', causal=True, normalize=True, eps=1e-06, scale=1.0, chunk=0,\n"
"     num_threads=0, head_map='grouped', qk_l2norm=False, z_compensated=False,\n"
"     gate_act='none', gate_lower_bound=None, A_log=None, dt_bias=None)\n"
"--\n"
"\n"
"One decode token per (batch, head) (linattn_step); returns o.\n"
"\n"
"q, k [B, Hk, K], v [B, H, V], any strides with a contiguous last\n"
"dimension; g: [H] ('head'), [B, H] ('token'), [B, H, K] ('channel').\n"
"s [B, H, K, V] (and z [B, H, K] when normalising) are updated in place.\n"
"z_compensated=True keeps z accurate over long runs of steps: z is then\n"
"[B, H, 2, K], the sums z[:, :, 0] and the rounding error they have not\n"
"absorbed z[:, :, 1], both carried from step to step (the normaliser is\n"
"their sum; zeros to start). q, k, v, o may be float32, bfloat16 or\n"
"float16 and s float32 or bfloat16 (torch; numpy: float16). gate_act\n"
"'softplus' or 'bounded_sigmoid': g holds raw gate projections, activated\n"
"with A_log [H] and dt_bias. Other keywords as for forward().");

static PyMethodDef methods[] = {
    {"run", (PyCFunction)(void (*)(void))run, METH_FASTCALL, "Run one linattn entry point."},
    {"run_pool", (PyCFunction)(void (*)(void))run_pool, METH_FASTCALL,
     "linattn_run with a state pool, slots and packed sequences."},
    {"run_pool_loop", (PyCFunction)(void (*)(void))run_pool_loop, METH_FASTCALL,
     "Time n bare linattn_run calls of one run_pool call."},
    {"in_place", (PyCFunction)(void (*)(void))in_place, METH_FASTCALL,
     "The fla-style functions' decode into a pool in place; o, or None for the general path."},
    {"step", (PyCFunction)(void (*)(void))step, METH_FASTCALL | METH_KEYWORDS, step_doc},
    {"set_output_maker", set_output_maker, METH_O,
     "The function step() calls as f(q, v) for an output when o is None."},
    {"step_loop", (PyCFunction)(void (*)(void))step_loop, METH_FASTCALL,
     "Time n bare linattn_step calls."},
    {"isa_name", isa_name, METH_O, "Name of an ISA number."},
    {"get_isa", get_isa, METH_NOARGS, "The active ISA number."},
    {"tuning_name", tuning_name, METH_NOARGS, "The machine whose tuning data is in use."},
    {"set_isa", set_isa, METH_O, "Make an ISA number active."},
    {"isa_available", isa_available, METH_O, "Whether an ISA number can run here."},
    {"version", version, METH_NOARGS, "The C library's version."},
    {"last_error", last_error, METH_NOARGS, "Why the last call on this thread failed."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "linattn._ext", "linattn's C API over the buffer protocol.", -1,
    methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__ext(void)
{
    if (!(s_is_cpu = PyUnicode_InternFromString("is_cpu")) ||
        !(s_dtype = PyUnicode_InternFromString("dtype")) ||
        !(s_shape = PyUnicode_InternFromString("shape")) ||
        !(s_is_contiguous = PyUnicode_InternFromString("is_contiguous")) ||
        !(s_stride = PyUnicode_InternFromString("stride")) ||
        !(s_data_ptr = PyUnicode_InternFromString("data_ptr")) ||
        !(s_device = PyUnicode_InternFromString("device")) ||
        !(s_requires_grad = PyUnicode_InternFromString("requires_grad")) ||
        !(k_bthd = PyUnicode_InternFromString("bthd")) ||
        !(k_identity = PyUnicode_InternFromString("identity")) ||
        !(k_grouped = PyUnicode_InternFromString("grouped")) ||
        !(k_eps = PyFloat_FromDouble(1e-10)) || !(k_zero = PyLong_FromLong(0)) ||
        !(k_memory_format = Py_BuildValue("(s)", "memory_format")))
        return NULL;
    for (size_t i = 0; i < sizeof all_choices / sizeof *all_choices; i++)
        for (choice *p = all_choices[i]; p->name; p++)
            if (!(p->str = PyUnicode_InternFromString(p->name)))
                return NULL;
    if (step_init() != 0)
        return NULL;
    return PyModule_Create(&module);
}
