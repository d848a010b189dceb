/*
 * pydb_test.h - test hooks of the storage core (vfs.c): slow reads and
 * fault injection on the file operations.  Not API: for the tests,
 * benchmarks/crashtest.c and the binding's test door only.  pydb_int.h
 * includes it, so existing users need no change; a file that needs only
 * the hooks can include pydb.h and this header.
 *
 * Depends on: nothing (declarations only; defined in vfs.c).
 */
#ifndef PYDB_TEST_H
#define PYDB_TEST_H

/* Test hook: every pread of the core sleeps `usec` microseconds first
 * (0 restores the POSIX table).  Not thread-safe; tests only. */
void pydb__test_set_read_delay(unsigned usec);

/* Test hook (fault injection): make the n-th (1-based) write-side file
 * operation (pwrite, fsync, fdatasync, ftruncate, rename, unlink) fail with
 * `eno`; with `short_write` = 1, an n-th pwrite writes less than asked and
 * the next one fails with `eno`; with `short_write` = 2 the process exits
 * (_exit(137), a crash point) instead of doing the n-th operation.
 * n = 0 restores the POSIX table; n < 0 only counts.  Not thread-safe to
 * switch; tests only. */
void pydb__test_fail_io(long n, int eno, int short_write);
long pydb__test_io_count(void);        /* operations counted so far      */
const char *pydb__test_io_fired(void); /* name of the failed op, or NULL  */

#endif
