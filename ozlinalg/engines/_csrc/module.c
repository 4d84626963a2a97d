/* The Python module of the compiled kernels: argument checking and the call.
 *
 * Built once per x86-64 ISA level (the build names the module and sets -march):
 * _kernels_x86_64 (baseline), _kernels_x86_64_v3 (AVX2, FMA), _kernels_x86_64_v4
 * (AVX-512). ozlinalg.engines.kernels picks the best one the CPU runs. The same
 * source gives the same bits at every level (no contraction, no fast-math).
 *
 * Each kernel of kernels.def becomes a function ``name(*args)``. Its signature string
 * lists one token per argument: ``d`` a float, ``i`` an integer, ``b`` a truth value,
 * or an array as <type codes><ndim><r|w> (``dl2r``: a float64 or int64 2-D array,
 * read only; ``b3w``: a writable int8 3-D array). Type codes are those of the buffer
 * protocol: d float64, f float32, b int8, i int32, l int64, H uint16, ? bool. Any
 * strides are accepted; the GIL is released for the call.
 */
#include "ozk.h"

#ifndef OZK_MODNAME
#define OZK_MODNAME _kernels_x86_64
#endif
#ifndef OZK_ISA
#define OZK_ISA "x86-64"
#endif
#define OZK_CAT2(a, b) a##b
#define OZK_CAT(a, b) OZK_CAT2(a, b)
#define OZK_STR2(a) #a
#define OZK_STR(a) OZK_STR2(a)

#define OZK_MAXARGS 20

#define OZK(name, sig, doc) int k_##name(ozval *v, int nt);
#include "kernels.def"
#undef OZK

static _Thread_local int ozk_threads = 1;

static int
type_code(const char *fmt, Py_ssize_t itemsize)
{
    if (fmt == NULL)
        return itemsize == 1 ? 'B' : 0;
    while (*fmt == '@' || *fmt == '=' || *fmt == '<' || *fmt == '|')
        fmt++;
    if (fmt[0] == 0 || fmt[1] != 0)
        return 0;
    switch (fmt[0]) {
    case 'd': return itemsize == 8 ? 'd' : 0;
    case 'f': return itemsize == 4 ? 'f' : 0;
    case 'b': return itemsize == 1 ? 'b' : 0;
    case 'i': return itemsize == 4 ? 'i' : 0;
    case 'l': case 'q': return itemsize == 8 ? 'l' : 0;
    case 'H': return itemsize == 2 ? 'H' : 0;
    case '?': return itemsize == 1 ? '?' : 0;
    default: return 0;
    }
}

static int
parse_array(PyObject *obj, const char *tok, size_t len, ozarr *out, Py_buffer *view,
            const char *kname, int pos)
{
    size_t t = 0;
    while (t < len && !(tok[t] >= '1' && tok[t] <= '9'))
        t++;
    int ndim = tok[t] - '0';
    int writable = tok[t + 1] == 'w';
    int flags = PyBUF_RECORDS_RO | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(obj, view, flags) < 0) {
        PyErr_Format(PyExc_TypeError, "ozlinalg kernel %s: argument %d must be a %sarray",
                     kname, pos, writable ? "writable " : "");
        return -1;
    }
    int code = type_code(view->format, view->itemsize);
    int ok = 0;
    for (size_t c = 0; c < t; c++)
        if (tok[c] == code)
            ok = 1;
    if (!ok || view->ndim != ndim) {
        char want[16]; /* the type codes (PyErr_Format has no %.*s before Python 3.12) */
        snprintf(want, sizeof want, "%.*s", (int)t, tok);
        PyErr_Format(PyExc_TypeError,
                     "ozlinalg kernel %s: argument %d must be a %d-D array of type '%s', "
                     "got %d-D '%s'", kname, pos, ndim, want, view->ndim,
                     view->format ? view->format : "B");
        PyBuffer_Release(view);
        return -1;
    }
    out->p = (char *)view->buf;
    out->ndim = ndim;
    out->t = (char)code;
    for (int d = 0; d < OZK_MAXDIM; d++) {
        out->n[d] = 1;
        out->s[d] = 1;
    }
    for (int d = 0; d < ndim; d++) {
        Py_ssize_t st = view->strides[d];
        out->n[d] = view->shape[d];
        if (view->shape[d] > 1) {
            if (st % view->itemsize) {
                PyErr_Format(PyExc_ValueError,
                             "ozlinalg kernel %s: argument %d has a stride that is not a "
                             "multiple of its item size", kname, pos);
                PyBuffer_Release(view);
                return -1;
            }
            out->s[d] = st / view->itemsize;
        }
    }
    return 0;
}

static PyObject *
ozk_call(const char *kname, const char *sig, ozkernel fn, PyObject *const *args,
         Py_ssize_t nargs)
{
    ozval v[OZK_MAXARGS];
    Py_buffer views[OZK_MAXARGS];
    int nviews = 0;
    int pos = 0;
    const char *p = sig;
    PyObject *res = NULL;
    while (*p) {
        while (*p == ' ')
            p++;
        if (!*p)
            break;
        const char *tok = p;
        while (*p && *p != ' ')
            p++;
        size_t len = (size_t)(p - tok);
        if (pos >= nargs || pos >= OZK_MAXARGS) {
            PyErr_Format(PyExc_TypeError, "ozlinalg kernel %s: too few arguments (%zd)",
                         kname, nargs);
            goto done;
        }
        PyObject *obj = args[pos];
        if (len == 1 && tok[0] == 'd') {
            v[pos].d = PyFloat_AsDouble(obj);
            if (v[pos].d == -1.0 && PyErr_Occurred())
                goto done;
        } else if (len == 1 && tok[0] == 'i') {
            v[pos].i = PyLong_AsLongLong(obj);
            if (v[pos].i == -1 && PyErr_Occurred())
                goto done;
        } else if (len == 1 && tok[0] == 'b') {
            int t = PyObject_IsTrue(obj);
            if (t < 0)
                goto done;
            v[pos].i = t;
        } else {
            if (parse_array(obj, tok, len, &v[pos].a, &views[nviews], kname, pos) < 0)
                goto done;
            nviews++;
        }
        pos++;
    }
    if (pos != nargs) {
        PyErr_Format(PyExc_TypeError, "ozlinalg kernel %s takes %d arguments, got %zd",
                     kname, pos, nargs);
        goto done;
    }
    int nt = ozk_threads;
    int st;
    Py_BEGIN_ALLOW_THREADS
    st = fn(v, nt);
    Py_END_ALLOW_THREADS
    if (st == OZK_NOMEM) {
        PyErr_NoMemory();
        goto done;
    }
    if (st == OZK_BADLAYOUT) {
        PyErr_Format(PyExc_ValueError, "ozlinalg kernel %s: an array's memory layout is not "
                     "one the kernel takes (see its caller in ozlinalg.engines.onednn)", kname);
        goto done;
    }
    if (st == OZK_UNIMPLEMENTED) {
        PyErr_Format(PyExc_NotImplementedError, "ozlinalg kernel %s is not built", kname);
        goto done;
    }
    if (st != 0) {
        PyErr_Format(PyExc_RuntimeError, "ozlinalg kernel %s failed (%d)", kname, st);
        goto done;
    }
    res = Py_None;
    Py_INCREF(res);
done:
    for (int k = 0; k < nviews; k++)
        PyBuffer_Release(&views[k]);
    return res;
}

#define OZK(name, sig, doc)                                                              \
    static PyObject *py_##name(PyObject *m, PyObject *const *a, Py_ssize_t n)            \
    {                                                                                   \
        (void)m;                                                                        \
        return ozk_call(#name, sig, k_##name, a, n);                                    \
    }
#include "kernels.def"
#undef OZK

static PyObject *
py_set_threads(PyObject *m, PyObject *arg)
{
    (void)m;
    long n = PyLong_AsLong(arg);
    if (n == -1 && PyErr_Occurred())
        return NULL;
    ozk_threads = (int)(n < 1 ? 1 : (n > 1024 ? 1024 : n));
    Py_RETURN_NONE;
}

static PyObject *
py_threads(PyObject *m, PyObject *unused)
{
    (void)m;
    (void)unused;
    return PyLong_FromLong(ozk_threads);
}

static PyObject *
py_cpu_level(PyObject *m, PyObject *unused)
{
    (void)m;
    (void)unused;
    __builtin_cpu_init();
    int level = 1;
    if (__builtin_cpu_supports("x86-64-v2"))
        level = 2;
    if (level == 2 && __builtin_cpu_supports("x86-64-v3"))
        level = 3;
    if (level == 3 && __builtin_cpu_supports("x86-64-v4"))
        level = 4;
    return PyLong_FromLong(level);
}

static PyObject *
py_openmp(PyObject *m, PyObject *unused)
{
    (void)m;
    (void)unused;
#if defined(_OPENMP)
    Py_RETURN_TRUE;
#else
    Py_RETURN_FALSE;
#endif
}

static PyMethodDef methods[] = {
#define OZK(name, sig, doc) \
    {#name, (PyCFunction)(void (*)(void))py_##name, METH_FASTCALL, #name "(" sig ")\n\n" doc},
#include "kernels.def"
#undef OZK
    {"set_threads", py_set_threads, METH_O,
     "set_threads(n)\n\nOpenMP threads of the kernels called next from this thread."},
    {"threads", py_threads, METH_NOARGS,
     "threads()\n\nThe count set_threads last set in this thread (1 before)."},
    {"cpu_level", py_cpu_level, METH_NOARGS,
     "cpu_level()\n\nThe x86-64 ISA level (1-4) this CPU and OS support."},
    {"openmp", py_openmp, METH_NOARGS, "openmp()\n\nWhether the module was built with OpenMP."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef moddef = {
    PyModuleDef_HEAD_INIT, OZK_STR(OZK_MODNAME),
    "Compiled passes of the CPU INT8 engine (ozlinalg.engines.kernels).", -1, methods,
    NULL, NULL, NULL, NULL};

PyMODINIT_FUNC
OZK_CAT(PyInit_, OZK_MODNAME)(void)
{
    PyObject *mod = PyModule_Create(&moddef);
    if (mod == NULL)
        return NULL;
    if (PyModule_AddStringConstant(mod, "isa", OZK_ISA) < 0) {
        Py_DECREF(mod);
        return NULL;
    }
    return mod;
}
