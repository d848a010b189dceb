/*
 * _pydb_module.c - the module pydb._pydb: state, multi-phase init
 * (PEP 489), the exception classes and the one error mapping.
 *
 * The binding of the pydb core (csrc/): argument parsing, GIL release,
 * Python objects.  One file per Python object, see _pydb_module.h.  The
 * exception classes are defined in Python (pydb/errors.py) and looked up
 * at module execution; they live in the module state.
 */
#include "_pydb_module.h"
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* The base chain first: our types and the Python classes built on them
 * (pydb.Database, pydb.Record) find the module in a step or two, reading
 * only, where PyType_GetModuleByDef() walks a subclass's MRO under the
 * interpreter's type lock on 3.13t (a tenth of a read by key with two
 * threads reading); other layouts take that walk. */
module_state *state_of_type(PyTypeObject *tp)
{
    PyObject *m;
    for (PyTypeObject *t = tp; t; t = t->tp_base) {
        if (!PyType_HasFeature(t, Py_TPFLAGS_HEAPTYPE)) continue;
        m = ((PyHeapTypeObject *)t)->ht_module;
        if (m && PyModule_GetDef(m) == &pydb_module)
            return (module_state *)PyModule_GetState(m);
    }
    m = PyType_GetModuleByDef(tp, &pydb_module);
    return m ? (module_state *)PyModule_GetState(m) : NULL;
}

static pthread_mutex_t binding_mutex = PTHREAD_MUTEX_INITIALIZER;

void binding_lock(void) { pthread_mutex_lock(&binding_mutex); }
void binding_unlock(void) { pthread_mutex_unlock(&binding_mutex); }

atomic_uint guard_fork_gen;

/* The child of a fork(): only the forking thread runs on, so the binding
 * lock another thread held stays held unless made anew, and the
 * operations other threads had in flight are gone (guard_adopt). */
static void forked_child(void)
{
    pthread_mutex_init(&binding_mutex, NULL);
    atomic_fetch_add(&guard_fork_gen, 1);
}

static pthread_once_t forked_once = PTHREAD_ONCE_INIT;

static void forked_install(void)
{
    pthread_atfork(NULL, NULL, forked_child);
}

#ifdef Py_GIL_DISABLED
static _Thread_local guard_pins *pins_top;   /* innermost pinned scope */

guard_pins guard_pins_begin_(guard_pins *self)
{
    guard_pins p = {{NULL}, 0, pins_top};
    pins_top = self;
    return p;
}

/* The pins this thread holds on `g` (its pinned scopes). */
static int own_pins(const handle_guard *g)
{
    int n = 0;
    for (const guard_pins *p = pins_top; p; p = p->prev)
        for (int i = 0; i < p->n; i++) n += p->g[i] == g;
    return n;
}
#endif

#ifdef Py_GIL_DISABLED
int guard_slot_(void)
{
    static atomic_int next;
    static _Thread_local int slot = -1;
    if (slot < 0)
        slot = (int)((unsigned)atomic_fetch_add(&next, 1) % GUARD_SLOTS);
    return slot;
}
#endif

void guard_init(handle_guard *g)
{
    for (int i = 0; i < GUARD_SLOTS; i++) atomic_store(&g->active[i].n, 0);
    atomic_store(&g->closing, 0);
    atomic_store(&g->closed, 0);
    atomic_store(&g->closer, 0);
    atomic_store(&g->gen, atomic_load(&guard_fork_gen));
}

int guard_close_begin(handle_guard *g)
{
    unsigned long me = PyThread_get_thread_ident();
    guard_current(g);   /* a close in flight at a fork: not this child's */
    if (!atomic_exchange(&g->closing, 1)) {
        atomic_store(&g->closer, me);
        return 1;
    }
    /* a second close(): returns when the handle is closed (a caller may
     * then move or remove its files), not while the first one still
     * waits for the collector's step (found by a review) */
    if (atomic_load(&g->closer) == me) return 0;
    Py_BEGIN_ALLOW_THREADS
    while (!atomic_load(&g->closed)) usleep(200);
    Py_END_ALLOW_THREADS
    return 0;
}

void guard_closed(handle_guard *g)
{
    atomic_store(&g->closed, 1);
}

/* Counts of an older fork generation (guard_current) zeroed, once; and
 * a close() another thread had begun and not ended at the fork (that
 * thread does not exist in the child, which waited for it for ever, a
 * service developer's trial found) forgotten: the child's close() does
 * it (what it had done, releasing the handle, happens once).  A close
 * names its thread (`closer`, set right after `closing`: a fork between
 * the two leaves none, a close of the parent's too); every close adopts
 * first (guard_close_begin, the Index's), so the child's own close is
 * never one of an older generation (a review found an Index's close in
 * the child undone when it was), and a close that ended is `closed`. */
void guard_adopt(handle_guard *g)
{
    unsigned now;
    binding_lock();
    now = atomic_load(&guard_fork_gen);
    if (atomic_load(&g->gen) != now) {
        for (int i = 0; i < GUARD_SLOTS; i++) atomic_store(&g->active[i].n, 0);
        if (atomic_load(&g->closing) && !atomic_load(&g->closed) &&
            atomic_load(&g->closer) != PyThread_get_thread_ident()) {
            atomic_store(&g->closer, 0);
            atomic_store(&g->closing, 0);
        }
        atomic_store_explicit(&g->gen, now, memory_order_release);
    }
    binding_unlock();
}

/* Each slot is changed only by its threads, each change seq_cst; a pin
 * adds to its slot before it reads `closing`, and close() sets `closing`
 * before it reads the slots, so for every slot either close() sees the
 * pin or the pin sees `closing` (the argument of one counter, slot by
 * slot). */
int guard_active(handle_guard *g)
{
    int n = 0;
    for (int i = 0; i < GUARD_SLOTS; i++) n += atomic_load(&g->active[i].n);
    return n;
}

int guard_pin(guard_pins *pins, handle_guard *g)
{
    int k;
    if (!pins) return atomic_load(&g->closing) ? -1 : 0;
    for (int i = 0; i < pins->n; i++)
        if (pins->g[i] == g) return atomic_load(&g->closing) ? -1 : 0;
    if (pins->n == PINS_MAX) Py_FatalError("pydb: more than PINS_MAX pins");
    k = guard_slot_();
    guard_current(g);
    atomic_fetch_add(&g->active[k].n, 1);
    if (atomic_load(&g->closing)) {
        atomic_fetch_sub(&g->active[k].n, 1);
        return -1;
    }
    pins->g[pins->n++] = g;
    return 0;
}

void guard_pins_release(guard_pins *pins)
{
    int k = guard_slot_();
    for (int i = 0; i < pins->n; i++)
        atomic_fetch_sub(&pins->g[i]->active[k].n, 1);
    pins->n = 0;
#ifdef Py_GIL_DISABLED
    pins_top = pins->prev;
#endif
}

void guard_wait_idle(handle_guard *g)
{
    int own = 0;
#ifdef Py_GIL_DISABLED
    own = own_pins(g);
#endif
    guard_current(g);
    Py_BEGIN_ALLOW_THREADS
    while (guard_active(g) > own) usleep(50);
    Py_END_ALLOW_THREADS
}

/* ------------------------------------------------------------- errors */

/* Raise `exc` with args built by Py_BuildValue(fmt, ...), if that works. */
static PyObject *raise_with(PyObject *exc, PyObject *args)
{
    if (args) {
        PyErr_SetObject(exc, args);
        Py_DECREF(args);
    }
    return NULL;
}

/*
 * The one mapping from core return codes to exceptions (GIL held):
 *
 *   PYDB_ENOMEM        MemoryError
 *   PYDB_EINVAL        ValueError(message) -- not in the pydb.Error tree: a
 *                      bad argument is a caller's bug, as everywhere in
 *                      Python; the binding checks arguments (TypeError /
 *                      ValueError) before the core sees them, so this is
 *                      for the checks only the core can make
 *   PYDB_ENOTFOUND     NotFoundError(message)            (KeyError)
 *   PYDB_ECORRUPT      CorruptionError(path, offset, message)
 *   PYDB_EUNSUPPORTED  UnsupportedError(errno, message, path)  (OSError)
 *   PYDB_EIO           DatabaseNotFoundError for ENOENT, DatabaseExistsError
 *                      for EEXIST, else DiskError: (errno, message, path)
 *   PYDB_ESYNTAX       SearchSyntaxError(message, offset)
 *   PYDB_EFST          FSTError(path, line, message)
 *   PYDB_EREADONLY     ReadOnlyError(message)
 *   PYDB_ELOCKED       LockTimeoutError(EAGAIN, message, path)
 *   PYDB_ECLOSED       ClosedError(message): a wait ended by close()
 *   PYDB_ETOOBIG       RecordTooLargeError(message)      (ValueError)
 *   PYDB_EWOULDBLOCK   SystemError: pydb_read_nowait()'s "not cached" is
 *                      handled by its caller (Database.read() retries with
 *                      the GIL released); reaching here is a binding bug
 *   PYDB_ENEWINDEX     handled by the transaction's begin (the Database
 *                      attaches the index built meanwhile and begins
 *                      again: _pydb_transaction.c); after its tries,
 *                      pydb.Error as below
 *   anything else      pydb.Error("pydb error <rc>: message")
 */
PyObject *set_error(module_state *st, int rc, const pydb_error *e)
{
    const char *path = e->path[0] ? e->path : NULL;

    switch (rc) {
    case PYDB_ENOMEM:
        return PyErr_NoMemory();
    case PYDB_EINVAL:
        PyErr_SetString(PyExc_ValueError, e->message);
        return NULL;
    case PYDB_ENOTFOUND:
        return raise_with(st->NotFoundError,
                          Py_BuildValue("(s)", e->message));
    case PYDB_ECORRUPT:
        return raise_with(st->CorruptionError,
                          Py_BuildValue("(zLs)", path, (long long)e->offset,
                                        e->message));
    case PYDB_EUNSUPPORTED:
        return raise_with(st->UnsupportedError,
                          Py_BuildValue("(isz)", e->sys_errno, e->message,
                                        path));
    case PYDB_EIO:
        return raise_with(e->sys_errno == ENOENT ? st->DatabaseNotFoundError
                          : e->sys_errno == EEXIST ? st->DatabaseExistsError
                                                   : st->DiskError,
                          Py_BuildValue("(isz)", e->sys_errno, e->message,
                                        path));
    case PYDB_ESYNTAX:
        return raise_with(st->SearchSyntaxError,
                          Py_BuildValue("(sL)", e->message,
                                        (long long)e->offset));
    case PYDB_EFST:
        return raise_with(st->FSTError,
                          Py_BuildValue("(zLs)", path, (long long)e->offset,
                                        e->message));
    case PYDB_EREADONLY:
        PyErr_SetString(st->ReadOnlyError, e->message);
        return NULL;
    case PYDB_ELOCKED:
        return raise_with(st->LockTimeoutError,
                          Py_BuildValue("(isz)", EAGAIN, e->message, path));
    case PYDB_ECLOSED:
        PyErr_SetString(st->ClosedError, e->message);
        return NULL;
    case PYDB_ETOOBIG:
        PyErr_SetString(st->RecordTooLargeError, e->message);
        return NULL;
    case PYDB_EWOULDBLOCK:
        PyErr_Format(PyExc_SystemError, "pydb binding: PYDB_EWOULDBLOCK "
                     "escaped its caller (%s)", e->message);
        return NULL;
    default:
        PyErr_Format(st->Error, "pydb error %d: %s", rc, e->message);
        return NULL;
    }
}

/* ------------------------------------------------ waits in slices
 * (_pydb_module.h) */

static int64_t monotonic_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void lock_wait_start(lock_wait *w, module_state *st, int ms)
{
    w->total = ms;
    w->end = monotonic_ms() + ms;
    w->slice_end = 0;
    w->sliced = PyThread_get_thread_ident() == st->main_thread;
}

int lock_wait_slice(lock_wait *w)
{
    int64_t now = monotonic_ms(), left = w->end - now;
    int ms = left < 0 ? 0 : left > LOCK_SLICE_MS && w->sliced ? LOCK_SLICE_MS
                                                             : (int)left;
    w->slice_end = now + ms;
    return ms;
}

int lock_wait_again(lock_wait *w, int rc, pydb_error *e)
{
    int64_t now = monotonic_ms();
    if (rc != PYDB_ELOCKED || now < w->slice_end) return 0;
    if (now >= w->end) {
        size_t n = strlen(e->message);
        if (w->total > 0 && n + 32 < sizeof e->message)
            snprintf(e->message + n, sizeof e->message - n,
                     " (waited %d ms)", w->total);
        return 0;
    }
    return PyErr_CheckSignals() < 0 ? -1 : 1;
}

/* ------------------------------------------------------------- module */

static int module_exec(PyObject *m)
{
    module_state *st = PyModule_GetState(m);
    PyObject *errors;
#define GET_EXC(name)                                                   \
    do {                                                                \
        st->name = PyObject_GetAttrString(errors, #name);               \
        if (!st->name) goto fail;                                       \
    } while (0)

    pthread_once(&forked_once, forked_install);
    if (record_exec(m, st) < 0 || database_exec(m, st) < 0 ||
        index_exec(m, st) < 0 || check_exec(m, st) < 0 ||
        search_exec(m, st) < 0 || transaction_exec(m, st) < 0 ||
        snapshot_exec(m, st) < 0 ||
        builder_exec(m, st) < 0 || iso_exec(m, st) < 0 ||
        testing_exec(m, st) < 0)
        return -1;
    if (PyModule_AddIntConstant(m, "OPEN_WRITE", PYDB_OPEN_WRITE) < 0 ||
        PyModule_AddIntConstant(m, "OPEN_NOSYNC", PYDB_OPEN_NOSYNC) < 0)
        return -1;
    {   /* the main thread, which runs Python's signal handlers */
        PyObject *th = PyImport_ImportModule("threading");
        PyObject *main = th ? PyObject_CallMethod(th, "main_thread", NULL)
                            : NULL;
        PyObject *ident = main ? PyObject_GetAttrString(main, "ident") : NULL;
        st->main_thread = ident ? PyLong_AsUnsignedLong(ident) : 0;
        Py_XDECREF(ident);
        Py_XDECREF(main);
        Py_XDECREF(th);
        if (PyErr_Occurred()) return -1;
    }
    errors = PyImport_ImportModule("pydb.errors");
    if (!errors) return -1;
    GET_EXC(Error);
    GET_EXC(CorruptionError);
    GET_EXC(NotFoundError);
    GET_EXC(DiskError);
    GET_EXC(DatabaseNotFoundError);
    GET_EXC(UnsupportedError);
    GET_EXC(RecordTooLargeError);
    GET_EXC(ClosedError);
    GET_EXC(SearchSyntaxError);
    GET_EXC(FSTError);
    GET_EXC(ReadOnlyError);
    GET_EXC(LockTimeoutError);
    GET_EXC(DatabaseExistsError);
    GET_EXC(FieldDecodeError);
    GET_EXC(FieldEncodeError);
    Py_DECREF(errors);
    return 0;
fail:
    Py_DECREF(errors);
    return -1;
#undef GET_EXC
}

#define STATE_MEMBERS(X)                                                \
    X(database_type) X(record_type) X(record_class) X(iter_type)        \
    X(field_type) X(index_type) X(checkrun_type) X(txn_type)            \
    X(snapshot_type) X(tag_ints) X(charmap_decoding) X(charmaps)         \
    X(Error) X(CorruptionError) X(NotFoundError) X(DiskError)           \
    X(DatabaseNotFoundError) X(UnsupportedError) X(RecordTooLargeError) \
    X(ClosedError) X(SearchSyntaxError) X(FSTError) X(ReadOnlyError)    \
    X(LockTimeoutError) X(DatabaseExistsError) X(FieldDecodeError)     \
    X(FieldEncodeError)

static int module_traverse(PyObject *m, visitproc visit, void *arg)
{
    module_state *st = PyModule_GetState(m);
#define VISIT(name) Py_VISIT(st->name);
    STATE_MEMBERS(VISIT)
#undef VISIT
    return 0;
}

static int module_clear(PyObject *m)
{
    module_state *st = PyModule_GetState(m);
    record_clear(st);
#define CLEAR(name) Py_CLEAR(st->name);
    STATE_MEMBERS(CLEAR)
#undef CLEAR
    return 0;
}

static void module_free(void *m) { module_clear((PyObject *)m); }

static PyModuleDef_Slot module_slots[] = {
    {Py_mod_exec, module_exec},
#ifdef Py_mod_gil
    /* Free-threaded CPython (PEP 703, 3.13t) keeps the GIL off when this
     * module is imported: the binding does not rely on the GIL for its
     * own state (the pins and the binding lock of _pydb_module.h, the
     * atomics of the Transaction and the RecordIterator), and the core
     * never calls Python.  docs/free-threaded.md. */
    {Py_mod_gil, Py_MOD_GIL_NOT_USED},
#endif
    {0, NULL}};

struct PyModuleDef pydb_module = {
    PyModuleDef_HEAD_INIT, "pydb._pydb",
    "Binding of the pydb C core (use the pydb package, not this module).",
    sizeof(module_state), NULL, module_slots, module_traverse,
    module_clear, module_free};

PyMODINIT_FUNC PyInit__pydb(void);  /* the only exported symbol */
PyMODINIT_FUNC PyInit__pydb(void) { return PyModuleDef_Init(&pydb_module); }
