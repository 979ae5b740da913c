/* .npy reading (hostile-input safe) and atomic writing; see npy.h for the format and contract.
 *
 * Reading goes in three steps, each bounded by the bytes actually present:
 *   1. the preamble: magic, version, header length (header must end inside the input);
 *   2. the header dict, parsed by a small strict parser of the Python literal subset numpy
 *      writes (strings, True/False, tuples of integers), keys exactly descr/fortran_order/shape;
 *   3. the data: its length must equal prod(shape) * 4 (float32) or * 1 (bool, uint8), computed
 *      with overflow checks, before anything is allocated. */
#include "npy.h"

#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const unsigned char npy_magic[6] = {0x93, 'N', 'U', 'M', 'P', 'Y'};
enum {
    MAGIC_BYTES = 6,
    VERSION_BYTES = 2,
    DATA_ALIGN = 64 /* the writer pads the header so the data starts at a multiple of this */
};

/* What a reader accepts: float32 ('<f4'), or bytes (bool '|b1' and uint8 '|u1'). */
typedef enum elem_kind { KIND_F32, KIND_BYTES } elem_kind;

static size_t elem_bytes(elem_kind kind) { return kind == KIND_F32 ? 4 : 1; }
/* Longest preamble: magic, version, 4-byte header length (versions 2.0 and 3.0). */
#define PREAMBLE_MAX (MAGIC_BYTES + VERSION_BYTES + 4)

static npy_status fail(npy_status st, char *err, size_t errlen, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 4, 5)))
#endif
    ;

static npy_status fail(npy_status st, char *err, size_t errlen, const char *fmt, ...) {
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return st;
}

/* A printable excerpt of untrusted bytes for a message: at most 24 characters, anything
 * outside printable ASCII (and the quote) shown as '?'. */
static void excerpt(const unsigned char *s, size_t n, char *buf, size_t cap) {
    size_t j = 0, limit = 24;
    for (size_t i = 0; i < n && i < limit && j + 1 < cap; i++)
        buf[j++] = (s[i] >= 0x20 && s[i] < 0x7f && s[i] != '\'') ? (char)s[i] : '?';
    if (n > limit && j + 4 < cap) buf[j++] = '.', buf[j++] = '.', buf[j++] = '.';
    buf[j] = '\0';
}

/* "(2, 3, 4)" as numpy prints a shape tuple ("(3,)" for one dimension, "()" for none). */
void npy_format_shape(const int64_t *shape, int ndim, char *buf, size_t cap) {
    size_t j = 0;
    j += (size_t)snprintf(buf + j, cap - j, "(");
    for (int d = 0; d < ndim && j < cap; d++)
        j += (size_t)snprintf(buf + j, cap - j, d ? ", %lld" : "%lld", (long long)shape[d]);
    if (j < cap) snprintf(buf + j, cap - j, ndim == 1 ? ",)" : ")");
}

static int host_is_little_endian(void) {
    const uint16_t one = 1;
    unsigned char b;
    memcpy(&b, &one, 1);
    return b == 1;
}

static void swap_bytes_f32(float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        unsigned char b[4], t;
        memcpy(b, &x[i], 4);
        t = b[0], b[0] = b[3], b[3] = t;
        t = b[1], b[1] = b[2], b[2] = t;
        memcpy(&x[i], b, 4);
    }
}

/* ---- step 1: preamble ----------------------------------------------------------------- */

/* `b` holds the first `avail` bytes of an input of `total` bytes. On success *data_offset is
 * where the data starts and *header_len the header's length (it starts at data_offset -
 * header_len). */
static npy_status parse_preamble(const unsigned char *b, size_t avail, uint64_t total, size_t *header_off,
                                 size_t *header_len, char *err, size_t errlen) {
    size_t have = avail < MAGIC_BYTES ? avail : MAGIC_BYTES;
    if (memcmp(b, npy_magic, have) != 0)
        return fail(NPY_ERR_FORMAT, err, errlen, "not a .npy file (the magic string \\x93NUMPY is missing)");
    if (avail < MAGIC_BYTES + VERSION_BYTES)
        return fail(NPY_ERR_FORMAT, err, errlen, "truncated: %llu bytes, shorter than the .npy preamble",
                    (unsigned long long)total);
    unsigned major = b[MAGIC_BYTES], minor = b[MAGIC_BYTES + 1];
    if (!(major >= 1 && major <= 3 && minor == 0))
        return fail(NPY_ERR_FORMAT, err, errlen, "unsupported .npy version %u.%u (1.0, 2.0 and 3.0 are read)", major,
                    minor);
    size_t len_bytes = major == 1 ? 2 : 4, off = MAGIC_BYTES + VERSION_BYTES + len_bytes;
    if (avail < off)
        return fail(NPY_ERR_FORMAT, err, errlen, "truncated: %llu bytes, shorter than the .npy %u.0 preamble",
                    (unsigned long long)total, major);
    uint64_t len = 0;
    for (size_t i = 0; i < len_bytes; i++) len |= (uint64_t)b[MAGIC_BYTES + VERSION_BYTES + i] << (8 * i);
    if (len > NPY_MAX_HEADER_BYTES)
        return fail(NPY_ERR_FORMAT, err, errlen, "header length %llu exceeds the limit of %u bytes",
                    (unsigned long long)len, (unsigned)NPY_MAX_HEADER_BYTES);
    if (len > total - off)
        return fail(NPY_ERR_FORMAT, err, errlen, "header length %llu runs past the end of the input (%llu bytes)",
                    (unsigned long long)len, (unsigned long long)total);
    *header_off = off;
    *header_len = (size_t)len;
    return NPY_OK;
}

/* ---- step 2: the header dict ---------------------------------------------------------- */

typedef struct parser {
    const unsigned char *s;
    size_t n, i;
    char *err;
    size_t errlen;
} parser;

typedef struct header {
    int have_descr, have_fortran, have_shape;
    const unsigned char *descr; /* the descr string (not terminated) */
    size_t descr_len;
    int fortran_order;
    int ndim;
    int64_t shape[NPY_MAX_DIMS];
} header;

static npy_status perr(parser *p, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

static npy_status perr(parser *p, const char *fmt, ...) {
    if (p->err && p->errlen) {
        int k = snprintf(p->err, p->errlen, "header: ");
        if (k >= 0 && (size_t)k < p->errlen) {
            va_list ap;
            va_start(ap, fmt);
            vsnprintf(p->err + k, p->errlen - (size_t)k, fmt, ap);
            va_end(ap);
        }
    }
    return NPY_ERR_FORMAT;
}

static int is_space(unsigned char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

static void skip_space(parser *p) {
    while (p->i < p->n && is_space(p->s[p->i])) p->i++;
}

static int at(parser *p, unsigned char c) { return p->i < p->n && p->s[p->i] == c; }

/* What stands at the cursor, for messages. */
static const char *here(parser *p, char *buf, size_t cap) {
    if (p->i >= p->n) return "the end of the header";
    excerpt(p->s + p->i, p->n - p->i, buf, cap);
    return buf;
}

static npy_status expect(parser *p, unsigned char c) {
    skip_space(p);
    if (at(p, c)) {
        p->i++;
        return NPY_OK;
    }
    char buf[32];
    return perr(p, "expected '%c' at byte %zu, found '%s'", c, p->i, here(p, buf, sizeof buf));
}

/* A quoted string without escapes: '...' or "...". */
static npy_status parse_string(parser *p, const unsigned char **str, size_t *len) {
    skip_space(p);
    if (!(at(p, '\'') || at(p, '"'))) {
        char buf[32];
        return perr(p, "expected a quoted string at byte %zu, found '%s'", p->i, here(p, buf, sizeof buf));
    }
    unsigned char quote = p->s[p->i++];
    size_t start = p->i;
    while (p->i < p->n && p->s[p->i] != quote) {
        unsigned char c = p->s[p->i];
        if (c == '\\') return perr(p, "escape sequences in strings are not supported (byte %zu)", p->i);
        if (c == '\n' || c < 0x20) return perr(p, "unterminated string starting at byte %zu", start - 1);
        p->i++;
    }
    if (p->i >= p->n) return perr(p, "unterminated string starting at byte %zu", start - 1);
    *str = p->s + start;
    *len = p->i - start;
    p->i++;
    return NPY_OK;
}

static int is_word_char(unsigned char c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == '.' ||
           c == '+' || c == '-';
}

/* A bare word (a number or a keyword): the longest run of word characters. */
static size_t word_length(parser *p) {
    size_t j = p->i;
    while (j < p->n && is_word_char(p->s[j])) j++;
    return j - p->i;
}

static npy_status parse_bool(parser *p, int *value) {
    skip_space(p);
    size_t w = word_length(p);
    if (w == 4 && memcmp(p->s + p->i, "True", 4) == 0) {
        *value = 1;
    } else if (w == 5 && memcmp(p->s + p->i, "False", 5) == 0) {
        *value = 0;
    } else {
        char buf[32];
        return perr(p, "fortran_order must be True or False, found '%s'", here(p, buf, sizeof buf));
    }
    p->i += w;
    return NPY_OK;
}

/* One dimension: decimal digits only, at most INT64_MAX. */
static npy_status parse_dim(parser *p, int64_t *dim) {
    skip_space(p);
    size_t w = word_length(p);
    const unsigned char *t = p->s + p->i;
    char buf[32];
    excerpt(t, w, buf, sizeof buf);
    if (w == 0) return perr(p, "shape: expected a dimension at byte %zu, found '%s'", p->i, here(p, buf, sizeof buf));
    if (t[0] == '-') {
        int digits = w > 1;
        for (size_t k = 1; k < w; k++) digits &= t[k] >= '0' && t[k] <= '9';
        if (digits) return perr(p, "shape: dimension %s is negative", buf);
    }
    int64_t v = 0;
    for (size_t k = 0; k < w; k++) {
        if (!(t[k] >= '0' && t[k] <= '9')) return perr(p, "shape: dimension '%s' is not a non-negative integer", buf);
        int digit = t[k] - '0';
        if (v > (INT64_MAX - digit) / 10) return perr(p, "shape: dimension %s is too large", buf);
        v = v * 10 + digit;
    }
    p->i += w;
    *dim = v;
    return NPY_OK;
}

/* A tuple of dimensions: "()", "(n,)", "(a, b)", "(a, b,)". "(n)" is an integer in Python,
 * not a tuple, and is rejected as numpy rejects it. */
static npy_status parse_shape(parser *p, header *h) {
    skip_space(p);
    if (!at(p, '(')) {
        char buf[32];
        return perr(p, "shape must be a tuple such as (24, 1536, 128), found '%s'", here(p, buf, sizeof buf));
    }
    p->i++;
    h->ndim = 0;
    int trailing_comma = 0;
    for (;;) {
        skip_space(p);
        if (at(p, ')')) break;
        if (h->ndim == NPY_MAX_DIMS) return perr(p, "shape: more than %d dimensions", NPY_MAX_DIMS);
        npy_status st = parse_dim(p, &h->shape[h->ndim]);
        if (st != NPY_OK) return st;
        h->ndim++;
        skip_space(p);
        trailing_comma = 0;
        if (at(p, ',')) {
            p->i++;
            trailing_comma = 1;
            continue;
        }
        if (!at(p, ')')) {
            char buf[32];
            return perr(p, "shape: expected ',' or ')' at byte %zu, found '%s'", p->i, here(p, buf, sizeof buf));
        }
    }
    p->i++;
    if (h->ndim == 1 && !trailing_comma)
        return perr(p, "shape (%lld) is not a tuple; one dimension is written (%lld,)", (long long)h->shape[0],
                    (long long)h->shape[0]);
    return NPY_OK;
}

static int key_is(const unsigned char *k, size_t n, const char *name) {
    return n == strlen(name) && memcmp(k, name, n) == 0;
}

static npy_status parse_header_dict(const unsigned char *s, size_t n, header *h, char *err, size_t errlen) {
    parser p = {s, n, 0, err, errlen};
    memset(h, 0, sizeof *h);
    npy_status st = expect(&p, '{');
    if (st != NPY_OK) return st;
    for (;;) {
        skip_space(&p);
        if (at(&p, '}')) break;
        const unsigned char *key;
        size_t key_len;
        if ((st = parse_string(&p, &key, &key_len)) != NPY_OK) return st;
        if ((st = expect(&p, ':')) != NPY_OK) return st;
        int *seen;
        if (key_is(key, key_len, "descr")) {
            seen = &h->have_descr;
            if (*seen) return perr(&p, "key 'descr' appears twice");
            st = parse_string(&p, &h->descr, &h->descr_len);
        } else if (key_is(key, key_len, "fortran_order")) {
            seen = &h->have_fortran;
            if (*seen) return perr(&p, "key 'fortran_order' appears twice");
            st = parse_bool(&p, &h->fortran_order);
        } else if (key_is(key, key_len, "shape")) {
            seen = &h->have_shape;
            if (*seen) return perr(&p, "key 'shape' appears twice");
            st = parse_shape(&p, h);
        } else {
            char buf[32];
            excerpt(key, key_len, buf, sizeof buf);
            return perr(&p, "unknown key '%s' (expected descr, fortran_order, shape)", buf);
        }
        if (st != NPY_OK) return st;
        *seen = 1;
        skip_space(&p);
        if (at(&p, ',')) {
            p.i++;
            continue;
        }
        if (!at(&p, '}')) {
            char buf[32];
            return perr(&p, "expected ',' or '}' at byte %zu, found '%s'", p.i, here(&p, buf, sizeof buf));
        }
    }
    p.i++;
    skip_space(&p);
    if (p.i != p.n) {
        char buf[32];
        return perr(&p, "unexpected '%s' after the dict (byte %zu)", here(&p, buf, sizeof buf), p.i);
    }
    const char *missing = !h->have_descr     ? "descr"
                          : !h->have_fortran ? "fortran_order"
                          : !h->have_shape   ? "shape"
                                             : NULL;
    if (missing) return perr(&p, "missing key '%s'", missing);
    return NPY_OK;
}

/* ---- step 3: checks of the parsed header against the data ------------------------------- */

/* Checks dtype and order, computes the element count and the data bytes. */
static npy_status check_header(const header *h, elem_kind kind, int64_t *count, size_t *bytes, char *err,
                               size_t errlen) {
    const int dtype_ok = kind == KIND_F32
                             ? key_is(h->descr, h->descr_len, "<f4")
                             : key_is(h->descr, h->descr_len, "|b1") || key_is(h->descr, h->descr_len, "|u1");
    if (!dtype_ok) {
        char buf[32];
        excerpt(h->descr, h->descr_len, buf, sizeof buf);
        return fail(NPY_ERR_FORMAT, err, errlen,
                    kind == KIND_F32 ? "dtype '%s' is not little-endian float32 ('<f4')"
                                     : "dtype '%s' is neither bool ('|b1') nor uint8 ('|u1')",
                    buf);
    }
    const size_t size = elem_bytes(kind);
    if (h->fortran_order)
        return fail(NPY_ERR_FORMAT, err, errlen, "fortran_order True is not supported (C order only)");
    int64_t c = 1;
    int zero = 0;
    for (int d = 0; d < h->ndim; d++) zero |= h->shape[d] == 0;
    char shape_text[NPY_MAX_DIMS * 22 + 4];
    npy_format_shape(h->shape, h->ndim, shape_text, sizeof shape_text);
    if (zero) {
        c = 0;
    } else {
        for (int d = 0; d < h->ndim; d++) {
            if (c > INT64_MAX / h->shape[d])
                return fail(NPY_ERR_FORMAT, err, errlen, "shape %s: the element count overflows", shape_text);
            c *= h->shape[d];
        }
    }
    if ((uint64_t)c > (uint64_t)PTRDIFF_MAX / size || (uint64_t)c > SIZE_MAX / size)
        return fail(NPY_ERR_FORMAT, err, errlen, "shape %s: the byte count overflows", shape_text);
    *count = c;
    *bytes = (size_t)c * size;
    return NPY_OK;
}

static npy_status check_data_length(const header *h, size_t need, uint64_t have, char *err, size_t errlen) {
    if (have == need) return NPY_OK;
    char shape_text[NPY_MAX_DIMS * 22 + 4];
    npy_format_shape(h->shape, h->ndim, shape_text, sizeof shape_text);
    if (have < need)
        return fail(NPY_ERR_FORMAT, err, errlen, "data truncated: %llu bytes where shape %s needs %llu",
                    (unsigned long long)have, shape_text, (unsigned long long)need);
    return fail(NPY_ERR_FORMAT, err, errlen, "%llu trailing bytes after the %llu data bytes of shape %s",
                (unsigned long long)(have - need), (unsigned long long)need, shape_text);
}

/* Allocates the array's data (out->data for float32, out->bytes for bytes); *dst is where the
 * data bytes go. */
static npy_status allocate(const header *h, elem_kind kind, int64_t count, size_t bytes, npy_array *out, void **dst,
                           char *err, size_t errlen) {
    out->ndim = h->ndim;
    memcpy(out->shape, h->shape, sizeof out->shape);
    out->count = count;
    out->data = NULL;
    out->bytes = NULL;
    *dst = NULL;
    if (count == 0) return NPY_OK;
    size_t rounded = (bytes + DATA_ALIGN - 1) / DATA_ALIGN * DATA_ALIGN;
    void *p = rounded < bytes ? NULL : aligned_alloc(DATA_ALIGN, rounded);
    if (!p) {
        memset(out, 0, sizeof *out);
        return fail(NPY_ERR_NOMEM, err, errlen, "out of memory for %zu data bytes", bytes);
    }
    if (kind == KIND_F32)
        out->data = p;
    else
        out->bytes = p;
    *dst = p;
    return NPY_OK;
}

void npy_free(npy_array *a) {
    if (!a) return;
    free(a->data);
    free(a->bytes);
    memset(a, 0, sizeof *a);
}

static npy_status read_mem(const void *bytes, size_t n, elem_kind kind, npy_array *out, char *err, size_t errlen) {
    const unsigned char *b = bytes;
    memset(out, 0, sizeof *out);
    if (!b && n) return fail(NPY_ERR_FORMAT, err, errlen, "no input bytes");
    if (!b) b = (const unsigned char *)"";
    size_t off = 0, len = 0;
    npy_status st = parse_preamble(b, n, n, &off, &len, err, errlen);
    if (st != NPY_OK) return st;
    header h;
    if ((st = parse_header_dict(b + off, len, &h, err, errlen)) != NPY_OK) return st;
    int64_t count;
    size_t need;
    if ((st = check_header(&h, kind, &count, &need, err, errlen)) != NPY_OK) return st;
    size_t data_off = off + len;
    if ((st = check_data_length(&h, need, n - data_off, err, errlen)) != NPY_OK) return st;
    void *dst;
    if ((st = allocate(&h, kind, count, need, out, &dst, err, errlen)) != NPY_OK) return st;
    if (need) memcpy(dst, b + data_off, need);
    if (kind == KIND_F32 && !host_is_little_endian()) swap_bytes_f32(out->data, count);
    return NPY_OK;
}

npy_status npy_read_f32_mem(const void *bytes, size_t n, npy_array *out, char *err, size_t errlen) {
    return read_mem(bytes, n, KIND_F32, out, err, errlen);
}

npy_status npy_read_u8_mem(const void *bytes, size_t n, npy_array *out, char *err, size_t errlen) {
    return read_mem(bytes, n, KIND_BYTES, out, err, errlen);
}

static npy_status read_file(const char *path, elem_kind kind, npy_array *out, char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    FILE *f = fopen(path, "rb");
    if (!f) return fail(NPY_ERR_IO, err, errlen, "cannot open: %s", strerror(errno));
    struct stat sb;
    npy_status st = NPY_OK;
    unsigned char *hbuf = NULL;
    if (fstat(fileno(f), &sb) != 0) {
        st = fail(NPY_ERR_IO, err, errlen, "cannot stat: %s", strerror(errno));
        goto done;
    }
    if (S_ISDIR(sb.st_mode)) {
        st = fail(NPY_ERR_IO, err, errlen, "is a directory");
        goto done;
    }
    if (!S_ISREG(sb.st_mode)) {
        st = fail(NPY_ERR_IO, err, errlen, "not a regular file");
        goto done;
    }
    uint64_t total = (uint64_t)sb.st_size;
    unsigned char pre[PREAMBLE_MAX];
    size_t want = total < PREAMBLE_MAX ? (size_t)total : PREAMBLE_MAX;
    size_t got = fread(pre, 1, want, f);
    if (got != want) {
        st = fail(NPY_ERR_IO, err, errlen, "read error: %s", ferror(f) ? strerror(errno) : "file shrank while reading");
        goto done;
    }
    size_t off = 0, len = 0;
    if ((st = parse_preamble(pre, got, total, &off, &len, err, errlen)) != NPY_OK) goto done;
    /* The header starts inside pre (off <= PREAMBLE_MAX); read it whole. */
    if (!(hbuf = malloc(len ? len : 1))) {
        st = fail(NPY_ERR_NOMEM, err, errlen, "out of memory for a %zu-byte header", len);
        goto done;
    }
    size_t in_pre = got - off;
    if (in_pre > len) in_pre = len;
    memcpy(hbuf, pre + off, in_pre);
    if (fread(hbuf + in_pre, 1, len - in_pre, f) != len - in_pre) {
        st = fail(NPY_ERR_IO, err, errlen, "read error in the header: %s",
                  ferror(f) ? strerror(errno) : "file shrank while reading");
        goto done;
    }
    header h;
    if ((st = parse_header_dict(hbuf, len, &h, err, errlen)) != NPY_OK) goto done;
    int64_t count;
    size_t need;
    if ((st = check_header(&h, kind, &count, &need, err, errlen)) != NPY_OK) goto done;
    uint64_t data_off = off + len;
    if ((st = check_data_length(&h, need, total - data_off, err, errlen)) != NPY_OK) goto done;
    void *dst;
    if ((st = allocate(&h, kind, count, need, out, &dst, err, errlen)) != NPY_OK) goto done;
    /* The header was read from the stream up to data_off (got may exceed off + len when the
     * header is short; re-position to be exact). */
    if (fseeko(f, (off_t)data_off, SEEK_SET) != 0) {
        st = fail(NPY_ERR_IO, err, errlen, "cannot seek to the data: %s", strerror(errno));
        goto done;
    }
    if (need && fread(dst, 1, need, f) != need) {
        st = fail(NPY_ERR_IO, err, errlen, "read error in the data: %s",
                  ferror(f) ? strerror(errno) : "file shrank while reading");
        goto done;
    }
    if (fgetc(f) != EOF) {
        st = fail(NPY_ERR_IO, err, errlen, "file grew while reading");
        goto done;
    }
    if (kind == KIND_F32 && !host_is_little_endian()) swap_bytes_f32(out->data, count);
done:
    if (st != NPY_OK) npy_free(out);
    free(hbuf);
    fclose(f);
    return st;
}

npy_status npy_read_f32(const char *path, npy_array *out, char *err, size_t errlen) {
    return read_file(path, KIND_F32, out, err, errlen);
}

npy_status npy_read_u8(const char *path, npy_array *out, char *err, size_t errlen) {
    return read_file(path, KIND_BYTES, out, err, errlen);
}

/* ---- writing ------------------------------------------------------------------------- */

size_t npy_encode_header(const int64_t *shape, int ndim, unsigned char *buf, size_t cap) {
    if (ndim < 0 || ndim > NPY_MAX_DIMS) return 0;
    for (int d = 0; d < ndim; d++)
        if (shape[d] < 0) return 0;
    char shape_text[NPY_MAX_DIMS * 22 + 4], dict[NPY_MAX_DIMS * 22 + 96];
    npy_format_shape(shape, ndim, shape_text, sizeof shape_text);
    int dict_len = snprintf(dict, sizeof dict, "{'descr': '<f4', 'fortran_order': False, 'shape': %s, }", shape_text);
    if (dict_len < 0 || (size_t)dict_len >= sizeof dict) return 0;
    const size_t pre = MAGIC_BYTES + VERSION_BYTES + 2; /* version 1.0: 2-byte length */
    size_t total = pre + (size_t)dict_len + 1;          /* + '\n' */
    total = (total + DATA_ALIGN - 1) / DATA_ALIGN * DATA_ALIGN;
    if (total > cap) return 0;
    size_t header_len = total - pre; /* < 65536: the dict is at most a few hundred bytes */
    memcpy(buf, npy_magic, MAGIC_BYTES);
    buf[MAGIC_BYTES] = 1;
    buf[MAGIC_BYTES + 1] = 0;
    buf[MAGIC_BYTES + 2] = (unsigned char)(header_len & 0xff);
    buf[MAGIC_BYTES + 3] = (unsigned char)(header_len >> 8);
    memcpy(buf + pre, dict, (size_t)dict_len);
    memset(buf + pre + dict_len, ' ', total - pre - (size_t)dict_len - 1);
    buf[total - 1] = '\n';
    return total;
}

static void writer_close(npy_writer *w, int remove_tmp) {
    if (w->f) fclose(w->f);
    if (remove_tmp && w->tmp_path) remove(w->tmp_path);
    free(w->tmp_path);
    free(w->path);
    memset(w, 0, sizeof *w);
}

npy_status npy_writer_open(npy_writer *w, const char *path, char *err, size_t errlen) {
    memset(w, 0, sizeof *w);
    struct stat sb;
    if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) return fail(NPY_ERR_IO, err, errlen, "is a directory");
    static const char suffix[] = ".tmp-XXXXXX";
    size_t n = strlen(path);
    w->path = malloc(n + 1);
    w->tmp_path = malloc(n + sizeof suffix);
    if (!w->path || !w->tmp_path) {
        writer_close(w, 0);
        return fail(NPY_ERR_NOMEM, err, errlen, "out of memory");
    }
    memcpy(w->path, path, n + 1);
    memcpy(w->tmp_path, path, n);
    memcpy(w->tmp_path + n, suffix, sizeof suffix);
    int fd = mkstemp(w->tmp_path);
    if (fd < 0) {
        int e = errno;
        free(w->tmp_path);
        w->tmp_path = NULL;
        writer_close(w, 0);
        return fail(NPY_ERR_IO, err, errlen, "cannot create the file: %s", strerror(e));
    }
    /* mkstemp creates the file 0600; give the output the permissions a plain fopen would. */
    mode_t mask = umask(0);
    umask(mask);
    if (fchmod(fd, (mode_t)(0666 & ~mask)) != 0 || !(w->f = fdopen(fd, "wb"))) {
        int e = errno;
        if (!w->f) close(fd);
        writer_close(w, 1);
        return fail(NPY_ERR_IO, err, errlen, "cannot create the file: %s", strerror(e));
    }
    return NPY_OK;
}

npy_status npy_writer_commit(npy_writer *w, const int64_t *shape, int ndim, const float *data, char *err,
                             size_t errlen) {
    if (!w->f) return fail(NPY_ERR_IO, err, errlen, "writer is not open");
    unsigned char head[DATA_ALIGN * 8];
    size_t head_len = npy_encode_header(shape, ndim, head, sizeof head);
    if (!head_len) {
        writer_close(w, 1);
        return fail(NPY_ERR_FORMAT, err, errlen, "invalid shape for a .npy file");
    }
    int64_t count = 1;
    for (int d = 0; d < ndim; d++) count *= shape[d]; /* the caller's array: its count fits */
    int ok = fwrite(head, 1, head_len, w->f) == head_len;
    if (host_is_little_endian()) {
        ok = ok && (count == 0 || fwrite(data, sizeof(float), (size_t)count, w->f) == (size_t)count);
    } else {
        for (int64_t i = 0; ok && i < count; i++) {
            float x = data[i];
            swap_bytes_f32(&x, 1);
            ok = fwrite(&x, sizeof x, 1, w->f) == 1;
        }
    }
    ok = ok && fflush(w->f) == 0 && fsync(fileno(w->f)) == 0;
    int e = errno;
    int closed = fclose(w->f) == 0;
    w->f = NULL;
    if (!ok || !closed) {
        if (ok) e = errno;
        writer_close(w, 1);
        return fail(NPY_ERR_IO, err, errlen, "write failed: %s", strerror(e));
    }
    if (rename(w->tmp_path, w->path) != 0) {
        e = errno;
        writer_close(w, 1);
        return fail(NPY_ERR_IO, err, errlen, "cannot rename the finished file into place: %s", strerror(e));
    }
    writer_close(w, 0);
    return NPY_OK;
}

void npy_writer_abort(npy_writer *w) { writer_close(w, 1); }

npy_status npy_write_f32(const char *path, const int64_t *shape, int ndim, const float *data, char *err,
                         size_t errlen) {
    npy_writer w;
    npy_status st = npy_writer_open(&w, path, err, errlen);
    if (st != NPY_OK) return st;
    return npy_writer_commit(&w, shape, ndim, data, err, errlen);
}
