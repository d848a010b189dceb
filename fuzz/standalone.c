/*
 * standalone.c - a main() for the fuzz targets without libFuzzer: feeds
 * every file named on the command line, and every file in every folder
 * named there (recursively), to LLVMFuzzerTestOneInput once.  A gcc build
 * with ASan/UBSan replays a corpus (seeds, regression inputs) as a plain
 * test (libgit2's fuzzers/standalone_driver.c does the same).
 *
 *   fuzz_mst-standalone DIR_OR_FILE...
 *
 * Prints one line per folder or file given and a total; exits 0 when
 * every input ran (a crash ends the process as it would under libFuzzer),
 * 2 for a path that cannot be read.
 *
 * Depends on: fuzz.h (the target's entry point).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "fuzz.h"
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static int run_file(const char *path, size_t *count)
{
    FILE *f = fopen(path, "rb");
    uint8_t *buf = NULL;
    long n;

    if (!f) {
        perror(path);
        return 2;
    }
    if (fseek(f, 0, SEEK_END) != 0 || (n = ftell(f)) < 0 ||
        fseek(f, 0, SEEK_SET) != 0) {
        perror(path);
        fclose(f);
        return 2;
    }
    /* malloc of exactly n bytes (1 for an empty file, never read), so ASan
     * sees a read past the input as libFuzzer would */
    buf = malloc(n > 0 ? (size_t)n : 1);
    if (!buf || fread(buf, 1, (size_t)n, f) != (size_t)n) {
        perror(path);
        free(buf);
        fclose(f);
        return 2;
    }
    fclose(f);
    LLVMFuzzerTestOneInput(buf, (size_t)n);
    free(buf);
    (*count)++;
    return 0;
}

static int cmp_names(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int run_path(const char *path, size_t *count)
{
    struct stat st;
    DIR *d;
    struct dirent *e;
    char **names = NULL;
    size_t n = 0, cap = 0;
    int rc = 0;

    if (stat(path, &st) != 0) {
        perror(path);
        return 2;
    }
    if (!S_ISDIR(st.st_mode)) return run_file(path, count);
    d = opendir(path);
    if (!d) {
        perror(path);
        return 2;
    }
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') continue;
        if (n == cap) {
            char **nv = realloc(names, (cap = cap ? cap * 2 : 64) * sizeof *nv);
            if (!nv) abort();
            names = nv;
        }
        if (asprintf(&names[n], "%s/%s", path, e->d_name) < 0) abort();
        n++;
    }
    closedir(d);
    /* in name order, so a run is reproducible */
    qsort(names, n, sizeof *names, cmp_names);
    for (size_t i = 0; i < n; i++) {
        if (rc == 0) rc = run_path(names[i], count);
        free(names[i]);
    }
    free(names);
    return rc;
}

int main(int argc, char **argv)
{
    size_t total = 0;

    if (argc < 2) {
        fprintf(stderr, "usage: %s DIR_OR_FILE...\n", argv[0]);
        return 2;
    }
    for (int i = 1; i < argc; i++) {
        size_t count = 0;
        int rc = run_path(argv[i], &count);
        printf("%s: %zu inputs\n", argv[i], count);
        total += count;
        if (rc) return rc;
    }
    printf("ran %zu inputs\n", total);
    return 0;
}
