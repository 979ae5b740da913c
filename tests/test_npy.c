/* The .npy reader and writer (kit/npy.h).
 *
 *  - Round trip: arrays of random shapes (0 to NPY_MAX_DIMS dimensions, zero extents included)
 *    holding random bit patterns (NaN payloads included) are written, then read back from the
 *    file and from memory: shape and bits equal; the file is a version 1.0 '<f4' C-order .npy
 *    whose data starts at a multiple of 64 bytes.
 *  - Every malformed class, generated here: each rejected, from memory and from a file, with
 *    the status and a one-line message naming the problem.
 *  - Versions 2.0 and 3.0 and numpy's spellings of the header are accepted.
 *  - Random mutations of valid files (bytes changed, truncated, extended) never crash and never
 *    yield an array inconsistent with its shape.
 *  - The byte reader (bool and uint8 key masks) beside the float32 one.
 *  - The writer: an unwritable destination fails and leaves nothing; a finished file replaces
 *    an old one whole; an aborted writer leaves nothing. */
#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"
#include "npy.h"

static char tmpdir[256];
static jt_tally tally;

static void check(int ok, const char *what, const char *detail) {
    jt_tally_add(&tally, ok);
    if (!ok) printf("FAIL %s%s%s\n", what, detail ? ": " : "", detail ? detail : "");
}

/* ---- building .npy bytes ---- */

typedef struct bytes {
    unsigned char *p;
    size_t n;
} bytes;

/* magic + version + header-length field (2 bytes for major 1, 4 otherwise) + header text +
 * padding to 64 + data_bytes of data (a counting pattern). header_len_override >= 0 replaces
 * the length field. */
static bytes make_npy(const char *magic6, int major, int minor, const char *dict, size_t data_bytes,
                      long long header_len_override) {
    size_t len_bytes = major == 1 ? 2 : 4, pre = 8 + len_bytes, dict_len = strlen(dict);
    size_t total_head = (pre + dict_len + 1 + 63) / 64 * 64, header_len = total_head - pre;
    bytes b;
    b.n = total_head + data_bytes;
    b.p = malloc(b.n ? b.n : 1);
    memcpy(b.p, magic6, 6);
    b.p[6] = (unsigned char)major;
    b.p[7] = (unsigned char)minor;
    unsigned long long hl = header_len_override >= 0 ? (unsigned long long)header_len_override : header_len;
    for (size_t i = 0; i < len_bytes; i++) b.p[8 + i] = (unsigned char)(hl >> (8 * i));
    memcpy(b.p + pre, dict, dict_len);
    memset(b.p + pre + dict_len, ' ', header_len - dict_len - 1);
    b.p[total_head - 1] = '\n';
    for (size_t i = 0; i < data_bytes; i++) b.p[total_head + i] = (unsigned char)i;
    return b;
}

static const char npy_magic6[] = "\x93NUMPY";
#define GOOD_DICT "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }"

static int write_file(const char *path, const unsigned char *p, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    int ok = fwrite(p, 1, n, f) == n;
    return (fclose(f) == 0 && ok) ? 0 : -1;
}

static int one_line(const char *s) { return s[0] != '\0' && strchr(s, '\n') == NULL; }

static int zeroed(const npy_array *a) {
    static const npy_array zero;
    return memcmp(a, &zero, sizeof zero) == 0;
}

/* Reads b from memory and from a file: both must give `want` and a message containing `needle`. */
static void expect_reject(const char *what, bytes b, npy_status want, const char *needle) {
    char err[256], detail[600], path[400];
    npy_array a;
    npy_status st = npy_read_f32_mem(b.p, b.n, &a, err, sizeof err);
    snprintf(detail, sizeof detail, "memory: status %d, message '%s', want %d and '%s'", st, err, want, needle);
    check(st == want && strstr(err, needle) && one_line(err) && zeroed(&a), what, detail);
    if (st == NPY_OK) npy_free(&a);

    snprintf(path, sizeof path, "%s/case.npy", tmpdir);
    if (write_file(path, b.p, b.n) != 0) {
        check(0, what, "cannot write the test file");
    } else {
        st = npy_read_f32(path, &a, err, sizeof err);
        snprintf(detail, sizeof detail, "file: status %d, message '%s', want %d and '%s'", st, err, want, needle);
        check(st == want && strstr(err, needle) && one_line(err) && zeroed(&a), what, detail);
        if (st == NPY_OK) npy_free(&a);
        remove(path);
    }
    free(b.p);
}

static void expect_accept(const char *what, bytes b, int ndim, const int64_t *shape) {
    char err[256], detail[400];
    npy_array a;
    npy_status st = npy_read_f32_mem(b.p, b.n, &a, err, sizeof err);
    int ok = st == NPY_OK && a.ndim == ndim && memcmp(a.shape, shape, (size_t)ndim * sizeof *shape) == 0;
    snprintf(detail, sizeof detail, "status %d, message '%s'", st, st == NPY_OK ? "" : err);
    check(ok, what, detail);
    if (st == NPY_OK) npy_free(&a);
    free(b.p);
}

#define REJECT(what, dict, data_bytes, needle) \
    expect_reject(what, make_npy(npy_magic6, 1, 0, dict, data_bytes, -1), NPY_ERR_FORMAT, needle)

static void malformed_classes(void) {
    /* Preamble. */
    expect_reject("wrong magic", make_npy("\x93NUMPZ", 1, 0, GOOD_DICT, 24, -1), NPY_ERR_FORMAT, "magic");
    expect_reject("not npy at all", make_npy("PK\x03\x04\x14\x00", 1, 0, GOOD_DICT, 24, -1), NPY_ERR_FORMAT, "magic");
    bytes b = make_npy(npy_magic6, 1, 0, GOOD_DICT, 24, -1);
    b.n = 7;
    expect_reject("truncated preamble", b, NPY_ERR_FORMAT, "truncated");
    b = make_npy(npy_magic6, 2, 0, GOOD_DICT, 24, -1);
    b.n = 10;
    expect_reject("truncated 2.0 length field", b, NPY_ERR_FORMAT, "truncated");
    expect_reject("empty input", (bytes){calloc(1, 1), 0}, NPY_ERR_FORMAT, "truncated");
    expect_reject("version 4.0", make_npy(npy_magic6, 4, 0, GOOD_DICT, 24, -1), NPY_ERR_FORMAT, "version 4.0");
    expect_reject("version 0.0", make_npy(npy_magic6, 0, 0, GOOD_DICT, 24, -1), NPY_ERR_FORMAT, "version 0.0");
    expect_reject("version 1.1", make_npy(npy_magic6, 1, 1, GOOD_DICT, 24, -1), NPY_ERR_FORMAT, "version 1.1");
    expect_reject("header length past the end", make_npy(npy_magic6, 1, 0, GOOD_DICT, 24, 5000), NPY_ERR_FORMAT,
                  "runs past the end");
    expect_reject("header length huge (2.0)", make_npy(npy_magic6, 2, 0, GOOD_DICT, 24, 0xFFFFFFFFll), NPY_ERR_FORMAT,
                  "exceeds the limit");

    /* The dict. */
    REJECT("header not a dict", "[1, 2, 3]", 24, "expected '{'");
    REJECT("empty header", "", 24, "expected '{'");
    REJECT("dict not closed", "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), ", 24, "expected");
    REJECT("text after the dict", GOOD_DICT " x", 24, "after the dict");
    REJECT("key without quotes", "{descr: '<f4', 'fortran_order': False, 'shape': (2, 3)}", 24, "quoted string");
    REJECT("missing colon", "{'descr' '<f4', 'fortran_order': False, 'shape': (2, 3)}", 24, "expected ':'");
    REJECT("unterminated string", "{'descr': '<f4, 'fortran_order': False, 'shape': (2, 3)}", 24, "expected");
    REJECT("escape in string", "{'descr': '<f\\x34', 'fortran_order': False, 'shape': (2, 3)}", 24, "escape");
    REJECT("missing shape", "{'descr': '<f4', 'fortran_order': False}", 24, "missing key 'shape'");
    REJECT("missing descr", "{'fortran_order': False, 'shape': (2, 3)}", 24, "missing key 'descr'");
    REJECT("missing fortran_order", "{'descr': '<f4', 'shape': (2, 3)}", 24, "missing key 'fortran_order'");
    REJECT("unknown key", "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), 'extra': 1}", 24,
           "unknown key 'extra'");
    REJECT("duplicate key", "{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (2, 3)}", 24,
           "appears twice");

    /* dtype and order. */
    static const char *const dtypes[] = {">f4", "<f8", "|u1", "<f2", "<i4", "f4", "float32", "<c8", "=f4", ""};
    for (size_t i = 0; i < sizeof dtypes / sizeof dtypes[0]; i++) {
        char dict[160], what[64], needle[64];
        snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': (2, 3), }", dtypes[i]);
        snprintf(what, sizeof what, "dtype '%s'", dtypes[i]);
        snprintf(needle, sizeof needle, "dtype '%s' is not little-endian float32", dtypes[i]);
        REJECT(what, dict, 24, needle);
    }
    REJECT("structured dtype", "{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (2, 3), }", 24,
           "quoted string");
    REJECT("fortran_order True", "{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }", 24,
           "fortran_order True");
    REJECT("fortran_order 0", "{'descr': '<f4', 'fortran_order': 0, 'shape': (2, 3), }", 24, "True or False");

    /* Shapes. */
    REJECT("negative dimension", "{'descr': '<f4', 'fortran_order': False, 'shape': (-2, 3), }", 24, "negative");
    REJECT("non-integer dimension", "{'descr': '<f4', 'fortran_order': False, 'shape': (2.5, 3), }", 24,
           "not a non-negative integer");
    REJECT("dimension with L suffix", "{'descr': '<f4', 'fortran_order': False, 'shape': (2L, 3), }", 24,
           "not a non-negative integer");
    REJECT("string dimension", "{'descr': '<f4', 'fortran_order': False, 'shape': ('2', 3), }", 24,
           "expected a dimension");
    REJECT("too many dimensions", "{'descr': '<f4', 'fortran_order': False, 'shape': (1,1,1,1,1,1,1,1,1), }", 4,
           "more than 8 dimensions");
    REJECT("one dimension without comma", "{'descr': '<f4', 'fortran_order': False, 'shape': (6), }", 24,
           "not a tuple");
    REJECT("shape as a list", "{'descr': '<f4', 'fortran_order': False, 'shape': [2, 3], }", 24, "must be a tuple");
    REJECT("shape not closed", "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3 }", 24, "expected ',' or ')'");
    REJECT("dimension too large", "{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,), }", 24,
           "too large");
    REJECT("element count overflows",
           "{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296, 4), }", 24,
           "element count overflows");
    REJECT("byte count overflows", "{'descr': '<f4', 'fortran_order': False, 'shape': (4611686018427387904,), }", 24,
           "byte count overflows");

    /* Data length. */
    REJECT("data truncated", GOOD_DICT, 20, "data truncated: 20 bytes where shape (2, 3) needs 24");
    REJECT("no data", GOOD_DICT, 0, "data truncated: 0 bytes");
    REJECT("trailing bytes", GOOD_DICT, 28, "4 trailing bytes");
    REJECT("huge shape, little data", "{'descr': '<f4', 'fortran_order': False, 'shape': (100000, 100000, 1000), }", 64,
           "data truncated");

    /* Files that are not files. */
    char err[256];
    npy_array a;
    char path[400];
    snprintf(path, sizeof path, "%s/does-not-exist.npy", tmpdir);
    npy_status st = npy_read_f32(path, &a, err, sizeof err);
    check(st == NPY_ERR_IO && strstr(err, "cannot open") && zeroed(&a), "missing file", err);
    st = npy_read_f32(tmpdir, &a, err, sizeof err);
    check(st == NPY_ERR_IO && strstr(err, "directory") && zeroed(&a), "directory", err);
}

static void accepted_spellings(void) {
    const int64_t s23[2] = {2, 3}, s6[1] = {6}, s0[1] = {0};
    expect_accept("version 2.0", make_npy(npy_magic6, 2, 0, GOOD_DICT, 24, -1), 2, s23);
    expect_accept("version 3.0", make_npy(npy_magic6, 3, 0, GOOD_DICT, 24, -1), 2, s23);
    expect_accept(
        "keys in another order, double quotes, no trailing comma",
        make_npy(npy_magic6, 1, 0, "{\"shape\": (2,3), \"fortran_order\": False, \"descr\": \"<f4\"}", 24, -1), 2, s23);
    expect_accept("one dimension",
                  make_npy(npy_magic6, 1, 0, "{'descr': '<f4', 'fortran_order': False, 'shape': (6,), }", 24, -1), 1,
                  s6);
    expect_accept("zero dimensions (a scalar)",
                  make_npy(npy_magic6, 1, 0, "{'descr': '<f4', 'fortran_order': False, 'shape': (), }", 4, -1), 0, s6);
    expect_accept("an empty array",
                  make_npy(npy_magic6, 1, 0, "{'descr': '<f4', 'fortran_order': False, 'shape': (0,), }", 0, -1), 1,
                  s0);
    expect_accept(
        "newlines and tabs inside the dict",
        make_npy(npy_magic6, 1, 0, "{'descr':\t'<f4',\n 'fortran_order': False,\n 'shape': (2,\n 3)}", 24, -1), 2, s23);
}

/* ---- round trip ---- */

static void round_trip(jt_rng *r) {
    enum { TRIALS = 60, MAX_COUNT = 4096 };
    for (int trial = 0; trial < TRIALS; trial++) {
        int ndim = (int)(jt_next(r) % (NPY_MAX_DIMS + 1));
        int64_t shape[NPY_MAX_DIMS], count = 1;
        for (int d = 0; d < ndim; d++) {
            int64_t cap = MAX_COUNT / (count ? count : 1);
            shape[d] = (jt_next(r) % 16 == 0) ? 0 : 1 + (int64_t)(jt_next(r) % (uint64_t)(cap < 7 ? cap : 7));
            count *= shape[d];
        }
        float *x = malloc((size_t)(count ? count : 1) * sizeof *x);
        for (int64_t i = 0; i < count; i++) {
            uint32_t bits = (uint32_t)jt_next(r);
            memcpy(&x[i], &bits, sizeof bits);
        }
        char path[400], err[256], what[64];
        snprintf(path, sizeof path, "%s/rt_%d.npy", tmpdir, trial);
        snprintf(what, sizeof what, "round trip %d (ndim %d, %lld elements)", trial, ndim, (long long)count);
        npy_status st = npy_write_f32(path, shape, ndim, x, err, sizeof err);
        check(st == NPY_OK, what, err);
        npy_array a;
        st = npy_read_f32(path, &a, err, sizeof err);
        int ok = st == NPY_OK && a.ndim == ndim && a.count == count &&
                 memcmp(a.shape, shape, (size_t)ndim * sizeof *shape) == 0 &&
                 (count == 0 || memcmp(a.data, x, (size_t)count * sizeof *x) == 0);
        check(ok, what, st == NPY_OK ? "file read back differs" : err);
        if (st == NPY_OK) npy_free(&a);

        /* The bytes: version 1.0, '<f4', C order, data at a multiple of 64, and the memory reader. */
        FILE *f = fopen(path, "rb");
        unsigned char buf[MAX_COUNT * 4 + 512];
        size_t n = f ? fread(buf, 1, sizeof buf, f) : 0;
        if (f) fclose(f);
        size_t header_len = n >= 10 ? (size_t)buf[8] | (size_t)buf[9] << 8 : 0;
        size_t data_off = 10 + header_len;
        char dict_start[] = "{'descr': '<f4', 'fortran_order': False, 'shape': (";
        ok = n >= 10 && memcmp(buf, npy_magic6, 6) == 0 && buf[6] == 1 && buf[7] == 0 && data_off % 64 == 0 &&
             data_off <= n && n - data_off == (size_t)count * 4 && buf[data_off - 1] == '\n' &&
             memcmp(buf + 10, dict_start, strlen(dict_start)) == 0;
        check(ok, what, "file layout is not numpy's version 1.0");
        st = npy_read_f32_mem(buf, n, &a, err, sizeof err);
        ok = st == NPY_OK && a.count == count && (count == 0 || memcmp(a.data, x, (size_t)count * sizeof *x) == 0);
        check(ok, what, st == NPY_OK ? "memory read differs" : err);
        if (st == NPY_OK) npy_free(&a);
        remove(path);
        free(x);
    }
}

/* ---- mutations ---- */

static void mutations(jt_rng *r) {
    enum { TRIALS = 3000 };
    const int64_t shape[3] = {2, 5, 3};
    float x[30];
    for (int i = 0; i < 30; i++) x[i] = (float)i;
    unsigned char good[256 + sizeof x];
    size_t head = npy_encode_header(shape, 3, good, sizeof good);
    check(head > 10 && head % 64 == 0, "encode header", "expected a header padded to 64 bytes");
    memcpy(good + head, x, sizeof x);
    const size_t n_good = head + sizeof x;
    int accepted = 0;
    for (int t = 0; t < TRIALS; t++) {
        unsigned char buf[sizeof good + 64];
        memcpy(buf, good, n_good);
        size_t n = n_good;
        int kind = (int)(jt_next(r) % 4);
        if (kind == 0) { /* change 1 to 4 bytes of the preamble and header */
            for (int k = 1 + (int)(jt_next(r) % 4); k > 0; k--) buf[jt_next(r) % head] = (unsigned char)jt_next(r);
        } else if (kind == 1) { /* truncate */
            n = (size_t)(jt_next(r) % n_good);
        } else if (kind == 2) { /* extend */
            n += 1 + (size_t)(jt_next(r) % 64);
            for (size_t i = n_good; i < n; i++) buf[i] = (unsigned char)jt_next(r);
        } else { /* a printable character anywhere in the dict */
            buf[10 + jt_next(r) % (head - 10)] = (unsigned char)(0x20 + jt_next(r) % 95);
        }
        unsigned char *exact = malloc(n ? n : 1); /* exactly n bytes, so an over-read is visible to sanitizers */
        memcpy(exact, buf, n);
        npy_array a;
        char err[256];
        npy_status st = npy_read_f32_mem(exact, n, &a, err, sizeof err);
        int ok;
        if (st == NPY_OK) {
            int64_t count = 1;
            for (int d = 0; d < a.ndim; d++) count *= a.shape[d];
            ok = a.count == count && (size_t)count * 4 <= n && (count == 0) == (a.data == NULL);
            accepted++;
            npy_free(&a);
        } else {
            ok = st == NPY_ERR_FORMAT && one_line(err) && zeroed(&a);
        }
        if (!ok) {
            char what[64];
            snprintf(what, sizeof what, "mutation %d (kind %d)", t, kind);
            check(0, what, st == NPY_OK ? "inconsistent array" : err);
        }
        free(exact);
    }
    check(accepted > 0 && accepted < TRIALS, "mutations: some accepted, most rejected", NULL);
    printf("mutations: %d of %d accepted (harmless changes such as spaces or the padding)\n", accepted, TRIALS);
}

/* ---- the writer ---- */

static int dir_entries(const char *dir) {
    DIR *d = opendir(dir);
    int n = 0;
    if (!d) return -1;
    for (struct dirent *e; (e = readdir(d));)
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) n++;
    closedir(d);
    return n;
}

static void writer(void) {
    char path[400], err[256], sub[300];
    const int64_t shape[2] = {3, 4};
    float x[12], y[12];
    for (int i = 0; i < 12; i++) x[i] = (float)i, y[i] = -(float)i;
    snprintf(sub, sizeof sub, "%s/w", tmpdir);
    mkdir(sub, 0700);

    /* Unwritable destinations: nothing is left. */
    snprintf(path, sizeof path, "%s/no-such-dir/out.npy", sub);
    npy_status st = npy_write_f32(path, shape, 2, x, err, sizeof err);
    check(st == NPY_ERR_IO && one_line(err), "write into a missing directory fails", err);
    check(dir_entries(sub) == 0, "write into a missing directory leaves nothing", NULL);
    st = npy_write_f32(sub, shape, 2, x, err, sizeof err);
    check(st == NPY_ERR_IO && strstr(err, "directory"), "write onto a directory fails", err);
    check(dir_entries(sub) == 0, "write onto a directory leaves nothing", NULL);

    /* A finished file replaces an old one; the temporary is gone. */
    snprintf(path, sizeof path, "%s/out.npy", sub);
    check(npy_write_f32(path, shape, 2, x, err, sizeof err) == NPY_OK, "first write", err);
    check(npy_write_f32(path, shape, 2, y, err, sizeof err) == NPY_OK, "overwrite", err);
    npy_array a;
    st = npy_read_f32(path, &a, err, sizeof err);
    check(st == NPY_OK && a.count == 12 && memcmp(a.data, y, sizeof y) == 0, "overwrite replaces the data", err);
    if (st == NPY_OK) npy_free(&a);
    check(dir_entries(sub) == 1, "no temporary file is left after a write", NULL);
    /* Permissions as a plain fopen would give (not mkstemp's 0600). */
    mode_t mask = umask(0);
    umask(mask);
    struct stat sb;
    check(stat(path, &sb) == 0 && (sb.st_mode & 0777) == (0666 & ~mask), "output has the umask's permissions", NULL);

    /* Aborted writer: the old file stays as it was and no temporary remains. */
    npy_writer w;
    check(npy_writer_open(&w, path, err, sizeof err) == NPY_OK, "writer open", err);
    check(dir_entries(sub) == 2, "the temporary exists while writing", NULL);
    npy_writer_abort(&w);
    npy_writer_abort(&w); /* twice is safe */
    check(dir_entries(sub) == 1, "abort removes the temporary", NULL);
    st = npy_read_f32(path, &a, err, sizeof err);
    check(st == NPY_OK && a.count == 12 && memcmp(a.data, y, sizeof y) == 0, "abort leaves the old file", err);
    if (st == NPY_OK) npy_free(&a);

    /* An invalid shape fails at commit and leaves nothing new. */
    const int64_t bad[1] = {-1};
    check(npy_writer_open(&w, path, err, sizeof err) == NPY_OK, "writer open", err);
    st = npy_writer_commit(&w, bad, 1, x, err, sizeof err);
    check(st == NPY_ERR_FORMAT, "commit with a negative dimension fails", err);
    check(dir_entries(sub) == 1, "failed commit removes the temporary", NULL);
    remove(path);
    rmdir(sub);
}

/* The byte reader (key masks): bool and uint8 accepted with their bytes, float32 refused by it,
 * bool refused by the float32 reader, and the byte count checked against the shape. */
static void byte_arrays(void) {
    static const char *const accepted[] = {"{'descr': '|b1', 'fortran_order': False, 'shape': (2, 3), }",
                                           "{'descr': '|u1', 'fortran_order': False, 'shape': (6,), }"};
    char err[256];
    for (int i = 0; i < 2; i++) {
        bytes b = make_npy(npy_magic6, 1, 0, accepted[i], 6, -1);
        npy_array a;
        npy_status st = npy_read_u8_mem(b.p, b.n, &a, err, sizeof err);
        check(st == NPY_OK && a.count == 6 && a.bytes && !a.data && memcmp(a.bytes, b.p + b.n - 6, 6) == 0,
              "byte reader accepts bool and uint8", st == NPY_OK ? NULL : err);
        npy_free(&a);
        st = npy_read_f32_mem(b.p, b.n, &a, err, sizeof err);
        check(st == NPY_ERR_FORMAT && strstr(err, "is not little-endian float32") && zeroed(&a),
              "float32 reader refuses a byte array", err);
        free(b.p);
        b = make_npy(npy_magic6, 1, 0, accepted[i], 5, -1);
        st = npy_read_u8_mem(b.p, b.n, &a, err, sizeof err);
        check(st == NPY_ERR_FORMAT && strstr(err, "data truncated") && zeroed(&a), "byte reader: truncated data", err);
        free(b.p);
    }
    bytes b = make_npy(npy_magic6, 1, 0, GOOD_DICT, 24, -1);
    npy_array a;
    npy_status st = npy_read_u8_mem(b.p, b.n, &a, err, sizeof err);
    check(st == NPY_ERR_FORMAT && strstr(err, "neither bool ('|b1') nor uint8 ('|u1')") && zeroed(&a),
          "byte reader refuses float32", err);
    free(b.p);
}

int main(void) {
    jt_rng r;
    jt_rng_init(&r, jt_seed());
    const char *base = getenv("TMPDIR");
    snprintf(tmpdir, sizeof tmpdir, "%s/test_npy.XXXXXX", base && *base ? base : "/tmp");
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    malformed_classes();
    accepted_spellings();
    round_trip(&r);
    mutations(&r);
    byte_arrays();
    writer();
    rmdir(tmpdir);
    return jt_tally_finish(&tally, "test_npy");
}
