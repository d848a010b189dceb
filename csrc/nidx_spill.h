/*
 * nidx_spill.h - sorted runs of the bulk build (nidx_spill.c): when the
 * build's accumulator passes its memory budget, its terms are written,
 * in key order, to a run file in the index directory; at the end the
 * runs are merged, streaming, into the one segment the build publishes.
 *
 * A run (build-PID-N.tmp, this process' temporary; never named by a
 * MANIFEST): per term in key order, LEB128 varints: key length, then the
 * key bytes, posting count, the MFN of the last posting, the length of
 * the posting bytes, then the postings as varints, without a skip table
 * (pydb__nseg_put_varints; the first posting's MFN delta is its MFN).
 * The runs of one build cover ascending, disjoint MFN ranges (a run ends
 * between two records), so a term's postings in the merged segment are
 * its lists of every run in run order, where only the first MFN delta of
 * each list after the first changes: the merge copies posting bytes
 * without decoding them, but for a segment's list of more than
 * NIDX_SKIP postings, gathered in memory, decoded and written behind its
 * skip table; it writes the bytes the in-memory build writes.
 *
 * Depends on: nidx_seg.h (the segment layout and encoder parts),
 * nidx_writer.h (the accumulator's sorted walk), util.h (vfs, buffers).
 */
#ifndef PYDB_NIDX_SPILL_H
#define PYDB_NIDX_SPILL_H

#include "nidx_writer.h"

/* Bytes of each file buffer of the spill and the merge: one per run
 * read, one for the segment and one for its dictionary being written. */
#define NIDX_SPILL_BUF (64 * 1024)

/* Runs merged at once: once the build holds this many runs of one size
 * (level), it merges them into one run of the next level, so it never
 * holds more than NIDX_MERGE_WAY runs per level (each level's runs
 * NIDX_MERGE_WAY times larger than the level's below), and no posting
 * is copied more than once per level. */
#define NIDX_MERGE_WAY 64

/* Write the terms of the accumulator, sorted, to a new run file at path
 * (created exclusively, not synced: a run never outlives its build).
 * PYDB_EIO (errno ENOSPC...; the file is removed), PYDB_ENOMEM. */
int pydb__nrun_write(nidx_acc *a, const char *path, pydb_error *err);

/* Merge runs[n] (in the order they were written) into the segment file
 * out_path (created exclusively, no tombstones, fsynced), using
 * dict_path as a temporary for the dictionary (removed before
 * returning); with dict_path NULL, into one run at out_path instead (not
 * synced).  Memory: n + 2 buffers of NIDX_SPILL_BUF bytes, the current
 * key of each run, 8 bytes per 32 terms (the block index) and the
 * largest list three times: its bytes gathered, its postings decoded
 * (16 bytes each) and its bytes written again into the segment's
 * buffer.
 * PYDB_EIO (out_path is removed), PYDB_ECORRUPT (a run is damaged),
 * PYDB_ENOMEM. */
int pydb__nrun_merge(const char *const *runs, size_t n, const char *out_path,
                     const char *dict_path, pydb_error *err);

/* A temporary file of a build (build-PID-N.tmp) or of a merge
 * (merge-PID-N.tmp) in the index directory: its process id, else 0. */
int pydb__nidx_temp_pid(const char *name);
/* 1 if `name` is such a temporary and its process is gone (no such
 * process, or a zombie: pydb__shm_process_gone), so nothing writes or
 * reads it any more. */
int pydb__nidx_temp_dead(const char *name);

#endif
