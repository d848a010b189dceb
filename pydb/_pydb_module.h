/*
 * _pydb_module.h - what every file of the binding (pydb/_pydb_*.c) shares:
 * the module state, the one error mapping and the one GIL release.
 *
 * The binding is laid out as CPython's Modules/_sqlite: one file per
 * Python object plus the module file.
 *
 *   _pydb_module.c       module state, init (PEP 489), exception classes,
 *                        set_error(): core return code -> exception;
 *                        lock_wait: waits in slices (signals run)
 *   _pydb_database.c     Database and its RecordIterator; _create()
 *   _pydb_record.c       Record, Field; fields_add(): Python fields ->
 *                        pydb_field (the one field converter)
 *   _pydb_transaction.c  Transaction; _txn_begin()
 *   _pydb_snapshot.c     Snapshot (one pinned commit), its index views
 *   _pydb_builder.c      _build(): the bulk builder
 *   _pydb_index.c        Index (native, ISIS, in-memory); _fst_parse(),
 *                        _index_build(), _attach_native_index()
 *   _pydb_search.c       _search()
 *   _pydb_check.c        CheckRun; _check_kinds()
 *   _pydb_testing.c      pydb._pydb._testing: test and benchmark hooks only
 *
 * Each file adds its types and functions to the module from an exec hook
 * (<file>_exec below) called by module_exec() in _pydb_module.c.
 *
 * GIL rules (docs/conventions.md):
 *   - arguments are parsed and copied into C memory first;
 *   - every core call that may touch a file runs inside UNLOCKED(), which
 *     counts the operation in the handles' guards and releases the GIL;
 *     nothing inside UNLOCKED() calls the Python C API;
 *   - close() marks the handle closing, then waits (GIL released) until no
 *     operation is in flight before freeing the core handle.
 */
#ifndef PYDB_BINDING_MODULE_H
#define PYDB_BINDING_MODULE_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdatomic.h>
#include "pydb.h"   /* the public API only; _pydb_testing.c alone adds
                       csrc/pydb_test.h */

typedef struct {
    PyTypeObject *database_type;
    PyTypeObject *record_type;      /* base Record type                   */
    PyTypeObject *record_class;     /* class instantiated (pydb.Record)   */
    int record_untracked;           /* 1: instances of record_class are
                                       not tracked by the collector
                                       (_set_record_class)               */
    PyTypeObject *iter_type;        /* RecordIterator                     */
    PyTypeObject *field_type;       /* structseq Field(tag, value) + raw  */
    int field_fast;                 /* 1: field_new() may build Fields
                                       itself, field_dealloc() free them
                                       (checked at exec)                 */
    int field_lazy;                 /* 1: a Field may hold no raw bytes
                                       (an ASCII value equal to them):
                                       Field.raw builds them (exec)      */
    PyObject *tag_ints;             /* tuple: the int of each tag below
                                       TAG_INTS (_pydb_record.c)         */
    PyObject *charmap_decoding;     /* pydb.encoding.charmap_decoding    */
    PyObject *charmaps;             /* dict: encoding name -> its result
                                       (_pydb_record.c: decoder_init)    */
    PyTypeObject *index_type;
    PyTypeObject *checkrun_type;
    PyTypeObject *txn_type;         /* Transaction                        */
    PyTypeObject *snapshot_type;    /* Snapshot                           */
    unsigned long main_thread;      /* threading.main_thread().ident at
                                       exec: the thread whose waits for
                                       the writer lock are made in slices
                                       (lock_wait)                       */
    PyObject *Error, *CorruptionError, *NotFoundError, *DiskError,
        *DatabaseNotFoundError, *UnsupportedError, *RecordTooLargeError,
        *ClosedError, *SearchSyntaxError, *FSTError, *ReadOnlyError,
        *LockTimeoutError, *DatabaseExistsError,
        *FieldDecodeError,  /* a value that does not decode (record.c) */
        *FieldEncodeError;  /* a str value that does not encode (ditto) */
} module_state;

extern struct PyModuleDef pydb_module;

/* The module state of a heap type defined by this module (NULL + exception
 * if the type is not ours). */
module_state *state_of_type(PyTypeObject *tp);

/* Raise the exception for core error `rc` with detail `e`; returns NULL.
 * The only place where core return codes become exceptions (see the table
 * in _pydb_module.c). */
PyObject *set_error(module_state *st, int rc, const pydb_error *e);

/* ------------------------------------------------ waits in slices
 *
 * A call that waits in the core with the GIL released (the writer lock:
 * another thread's transaction, another process; a collection's steps)
 * runs no Python signal handler meanwhile: a Ctrl-C or SIGTERM waited for
 * the whole timeout (10 s by default).  So in the main thread, the one
 * that runs the handlers, the wait is made in slices of LOCK_SLICE_MS
 * (other threads wait in one piece: a call of the group commit keeps its
 * place in the queue): a slice that ends with PYDB_ELOCKED at its end is
 * followed, with the GIL, by PyErr_CheckSignals() (a handler's exception
 * ends the wait) and the next slice, until the caller's timeout.
 * LOCK_SLICE_MS is longer than a writer stands back for another process's
 * collector (GC_FIRST_MS, csrc/wal.c: 250 ms), so each slice gets its
 * tries.  An ELOCKED before its slice's end (this thread's own open
 * transaction) is the answer.  Used by _pydb_transaction.c (writes) and
 * Database.collect (_pydb_database.c). */
#define LOCK_SLICE_MS 500

typedef struct {
    int64_t end;       /* the caller's deadline, ms (monotonic) */
    int64_t slice_end; /* the current slice's */
    int total;         /* the caller's timeout, ms */
    int sliced;        /* the main thread's wait */
} lock_wait;

/* Begin a wait of at most `ms` milliseconds (the caller's timeout). */
void lock_wait_start(lock_wait *w, module_state *st, int ms);
/* The timeout to give the core's next call (ms). */
int lock_wait_slice(lock_wait *w);
/* After a call that answered rc: 1 to call again (a slice ran out and
 * the caller's time did not; signal handlers ran), 0 when rc is the
 * answer (a timeout's message then names the caller's whole wait), -1
 * when a handler raised (the exception is set).  With the GIL. */
int lock_wait_again(lock_wait *w, int rc, pydb_error *e);

/* ------------------------------------------- search results (_pydb_search.c) */

/* The MFNs of a search as bytes, 4 native-endian bytes per MFN: what
 * _search() and Snapshot._search() return (pydb/search.py reads them
 * into an array('i'), making no Python int per hit). */
PyObject *mfn_bytes(const int32_t *mfns, size_t n);
/* A PYDB_ESYNTAX error of the core (byte offsets into `encoded`, the
 * expression as encoded with `encoding`) in characters: its offset, and
 * the first "at position N" of its message (csrc/search_parse.c names
 * the '(' a missing ')' would close so, before it quotes the token it
 * found, whose text is the user's), for SearchSyntaxError. */
void search_error_in_chars(pydb_error *e, PyObject *encoded,
                           const char *encoding);

/* ------------------------------------------------------- handle guard */

/* The in-flight state of a core handle (pydb_db, pydb_index) owned by a
 * Python object.  `closing` is set once, by the close() that wins the
 * atomic exchange (two threads may call close() at once on a free-threaded
 * build); `active` is changed by UNLOCKED() with the GIL released and, on
 * a free-threaded build, by the pins below. */
#ifdef Py_GIL_DISABLED
#define GUARD_SLOTS 16
#define GUARD_LINE 64   /* bytes: a cache line */
#else
#define GUARD_SLOTS 1
#define GUARD_LINE sizeof(atomic_int)
#endif
typedef struct {
    /* operations running with the GIL released, and (free-threaded)
     * scopes that pinned the handle: counted in the slot of the thread
     * that runs them (guard_slot_), summed by guard_active().  On a
     * free-threaded build each slot, and `closing`, has a cache line of
     * its own, apart from the object's header too, so that two threads
     * reading at once (a pin and its release per read by key) do not
     * write one line: on 3.13t a shared counter cost a fifth of such a
     * read with two threads.  About 1 KiB per handle there. */
#ifdef Py_GIL_DISABLED
    char lead_[GUARD_LINE];
#endif
    union {
        atomic_int n;
        char line_[GUARD_LINE];
    } active[GUARD_SLOTS];
    union {
        struct {
            atomic_int closing; /* close() has begun: no new operation */
            atomic_uint gen;    /* the fork generation the counts are of
                                   (guard_current)                      */
            atomic_int closed;  /* that close() has ended               */
            atomic_ulong closer; /* the thread whose close() runs        */
        };
        char line_[GUARD_LINE];
    };
} handle_guard;

/* The process's fork generation: 0, one more in each fork()ed child
 * (_pydb_module.c).  The operations another thread had in flight at the
 * fork do not exist in the child, and it must not wait for them: a
 * guard whose counts are of an older generation is zeroed before its
 * first use in the child (guard_adopt, under the binding lock). */
extern atomic_uint guard_fork_gen;
void guard_adopt(handle_guard *g);

static inline void guard_current(handle_guard *g)
{
    if (atomic_load_explicit(&g->gen, memory_order_acquire) !=
        atomic_load_explicit(&guard_fork_gen, memory_order_relaxed))
        guard_adopt(g);
}

/* The calling thread's slot of every guard (fixed for the thread). */
#ifdef Py_GIL_DISABLED
int guard_slot_(void);
#else
static inline int guard_slot_(void) { return 0; }
#endif

/* A new guard: open, nothing in flight. */
void guard_init(handle_guard *g);

/* close() of the handle `g` guards: 1 if this call is to close it (the
 * first), else 0 once the first close() has ended (closed()), waiting
 * for it with the GIL released, or at once when that close() is this
 * thread's own (a finalizer it ran). */
int guard_close_begin(handle_guard *g);
void guard_closed(handle_guard *g);

/* Operations in flight and pins on `g`, all threads: a sum of slots read
 * one by one, not a snapshot.  Read after `closing` is set (as close()
 * does) it never misses a pin that then goes on to use the handle; a pin
 * backing off, or a guard counted without a pin, may still come and go. */
int guard_active(handle_guard *g);

/* ------------------------------------------------------- pins (PEP 703)
 *
 * With the GIL, "check that the handle is open, then enter UNLOCKED()"
 * cannot interleave with close(): both run with the GIL held.  Without it
 * (Py_GIL_DISABLED), another thread's close() could pass its wait between
 * the check and the enter, or while a GIL-held fast path (read()'s
 * pydb_read_nowait) uses the handle, and free it.  So on a free-threaded
 * build the *_check_open() functions pin the handle: they count the
 * calling scope in `active` first, then look at `closing` (both seq_cst:
 * either close() sees the pin and waits, or the check sees `closing`).
 * The pin is dropped when the scope that declared PIN_SCOPE returns
 * (__attribute__((cleanup))), so every exit path drops it.
 *
 * Every function that calls a *_check_open() declares PIN_SCOPE first; on
 * a GIL build PIN_SCOPE declares nothing and PINS_ is NULL.  close() from
 * inside a pinned scope of the same thread (a finalizer run by an
 * allocation) does not wait for that thread's own pins. */
#define PINS_MAX 4
typedef struct guard_pins {
    handle_guard *g[PINS_MAX];
    int n;
    struct guard_pins *prev;    /* the thread's enclosing pinned scope */
} guard_pins;

/* Count `g` in `pins` (free-threaded; nothing when pins is NULL) and then
 * report whether it is closing: 0 open, -1 closing (not pinned then). */
int guard_pin(guard_pins *pins, handle_guard *g);
void guard_pins_release(guard_pins *pins);

#ifdef Py_GIL_DISABLED
/* An empty scope whose address `self` becomes the thread's innermost. */
guard_pins guard_pins_begin_(guard_pins *self);
#define PIN_SCOPE                                                       \
    guard_pins pins_ __attribute__((cleanup(guard_pins_release))) =     \
        guard_pins_begin_(&pins_)
#define PINS_ (&pins_)
#else
#define PIN_SCOPE enum { PIN_SCOPE_NONE_ }
#define PINS_ ((guard_pins *)NULL)
#endif

/* The binding's lock: a pthread mutex for the few short changes of shared
 * binding state that the GIL used to serialise (the database's list of
 * snapshots, the claims that release a snapshot or free an index once,
 * attaching the commit hook).  Held for a few plain C statements only: no
 * Python call, no wait, no nesting.  A pthread mutex rather than
 * Py_BEGIN_CRITICAL_SECTION so that ThreadSanitizer (pydb instrumented,
 * CPython not) sees it; taken rarely, so one for the module. */
void binding_lock(void);
void binding_unlock(void);

/* A core handle pointer read without a pin or the binding lock (the
 * `closed` properties), and its clearing by close(): relaxed atomic
 * accesses, so that the read is no data race on a free-threaded build. */
#define HANDLE_LOAD(p) __atomic_load_n(&(p), __ATOMIC_RELAXED)
#define HANDLE_CLEAR(p) __atomic_store_n(&(p), NULL, __ATOMIC_RELAXED)

/* Wait, with the GIL released, until no operation counted in `g` is in
 * flight.  Called by close() (after setting g->closing) and never from
 * inside UNLOCKED(). */
void guard_wait_idle(handle_guard *g);

static inline void guard_enter_(handle_guard *a, handle_guard *b)
{
    int k = guard_slot_();
    if (a) {
        guard_current(a);
        atomic_fetch_add(&a->active[k].n, 1);
    }
    if (b) {
        guard_current(b);
        atomic_fetch_add(&b->active[k].n, 1);
    }
}

static inline void guard_leave_(handle_guard *a, handle_guard *b)
{
    int k = guard_slot_();
    if (b) atomic_fetch_sub(&b->active[k].n, 1);
    if (a) atomic_fetch_sub(&a->active[k].n, 1);
}

/* UNLOCKED(g1, g2, stmt): the one GIL release of the binding.  Runs `stmt`
 * with the GIL released, counted as in flight on the handle guards g1 and
 * g2 (either may be NULL: work on no handle, or on one), so that close()
 * of those handles waits for it.  The caller has checked that the handles
 * are open, with the GIL held, just before.
 *
 * `stmt` is plain C: no Python C-API call (not even a macro such as
 * PyBytes_AS_STRING: take pointers before), and no return, break or goto
 * out of it.  Results are kept in C locals and turned into Python objects
 * or exceptions (set_error) after UNLOCKED(). */
#define UNLOCKED(g1, g2, ...)                                          \
    do {                                                               \
        handle_guard *unlocked_g1_ = (g1), *unlocked_g2_ = (g2);       \
        guard_enter_(unlocked_g1_, unlocked_g2_);                      \
        Py_BEGIN_ALLOW_THREADS                                         \
        __VA_ARGS__;                                                   \
        guard_leave_(unlocked_g1_, unlocked_g2_);                      \
        Py_END_ALLOW_THREADS                                           \
    } while (0)

/* *s, a str every Record of a database refers to (its encoding, error
 * handler, master file path, code page table), made shared: on a free-threaded build
 * interned, which makes it immortal (CPython 3.13), so that threads
 * creating Records at once do not all write its reference count (one
 * cache line bounced between cores per Record); the cost is one str per
 * distinct value kept for the life of the process.  Nothing on a GIL
 * build. */
static inline void shared_str(PyObject **s)
{
#ifdef Py_GIL_DISABLED
    PyUnicode_InternInPlace(s);
#else
    (void)s;
#endif
}

/* ------------------------------------------------------- exec hooks */
int record_exec(PyObject *m, module_state *st);
int database_exec(PyObject *m, module_state *st);
int transaction_exec(PyObject *m, module_state *st);
int snapshot_exec(PyObject *m, module_state *st);
int builder_exec(PyObject *m, module_state *st);
int index_exec(PyObject *m, module_state *st);
int search_exec(PyObject *m, module_state *st);
int check_exec(PyObject *m, module_state *st);
int iso_exec(PyObject *m, module_state *st);
int testing_exec(PyObject *m, module_state *st);

/* Called by module_clear() before the state's references are dropped:
 * what a file keeps outside the state for this module (the Field free
 * list, _pydb_record.c). */
void record_clear(module_state *st);

#endif
