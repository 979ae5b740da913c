/* .npy files of little-endian float32, C order: reading that is safe on hostile input, and
 * writing that never leaves a half-written file under the final name.
 *
 * Format (numpy's NEP 1): the magic "\x93NUMPY", a major and a minor version byte (1.0, 2.0
 * and 3.0 are read; 1.0 is written), the header length (2 bytes little-endian for 1.0, 4 for
 * 2.0 and 3.0), the header: a Python dict literal such as
 *     {'descr': '<f4', 'fortran_order': False, 'shape': (24, 1536, 128), }
 * padded with spaces and ended by '\n', then the data: exactly prod(shape) elements.
 *
 * The float32 reader accepts only descr '<f4' (the byte reader '|b1' and '|u1'), fortran_order False, a shape tuple of
 * at most NPY_MAX_DIMS non-negative integers whose byte count fits in memory, and exactly the bytes the shape says.
 * Every other input is rejected with a one-line message (no path in it; the caller prefixes one). No input makes it
 * read outside the bytes given or allocate more than the data the input really holds. */
#ifndef JATTN_NPY_H
#define JATTN_NPY_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define NPY_MAX_DIMS 8
/* Header lengths above this are rejected (numpy itself refuses headers over 10000 bytes). */
#define NPY_MAX_HEADER_BYTES (1u << 20)

typedef enum npy_status {
    NPY_OK = 0,
    NPY_ERR_FORMAT = 1, /* the bytes are not a float32 .npy this reader accepts */
    NPY_ERR_IO = 2,     /* the file cannot be opened, read, written or renamed */
    NPY_ERR_NOMEM = 3   /* an allocation failed */
} npy_status;

typedef struct npy_array {
    int ndim;
    int64_t shape[NPY_MAX_DIMS];
    int64_t count;        /* prod(shape) */
    float *data;          /* float32 arrays: count elements, 64-byte aligned; NULL when count is 0 */
    unsigned char *bytes; /* bool / uint8 arrays (npy_read_u8*): count bytes; NULL otherwise */
    /* Free either with npy_free. */
} npy_array;

/* Reads a .npy held in memory (n bytes). On success fills *out (caller frees with npy_free).
 * @return NPY_OK; otherwise NPY_ERR_FORMAT or NPY_ERR_NOMEM with the reason in err, *out
 *         zeroed. */
npy_status npy_read_f32_mem(const void *bytes, size_t n, npy_array *out, char *err, size_t errlen);

/* Reads a .npy file (a regular file). Same checks as npy_read_f32_mem; the file's size is
 * checked against the header before the data is allocated.
 * @return NPY_OK, NPY_ERR_FORMAT, NPY_ERR_IO (cannot open or read; err says why) or
 *         NPY_ERR_NOMEM; on failure *out is zeroed. */
npy_status npy_read_f32(const char *path, npy_array *out, char *err, size_t errlen);

/* The same two readers for arrays of bytes: descr bool '|b1' or uint8 '|u1' (a key mask),
 * into out->bytes; every other check as for float32. */
npy_status npy_read_u8_mem(const void *bytes, size_t n, npy_array *out, char *err, size_t errlen);
npy_status npy_read_u8(const char *path, npy_array *out, char *err, size_t errlen);

/* Formats a shape as numpy prints it: "(2, 3, 4)", "(3,)", "()". */
void npy_format_shape(const int64_t *shape, int ndim, char *buf, size_t cap);

/* Frees the data of an array and zeroes it. Accepts an array already freed or zeroed. */
void npy_free(npy_array *a);

/* Writes the version 1.0 header of a '<f4' C-order array of `shape` into buf (cap bytes),
 * padded with spaces and '\n' so that the data starts at a multiple of 64 bytes.
 * @return the header's total length (the data offset), or 0 when it does not fit in cap or
 *         the shape is invalid (ndim outside 0..NPY_MAX_DIMS, a negative dimension). */
size_t npy_encode_header(const int64_t *shape, int ndim, unsigned char *buf, size_t cap);

/* An output file in the making: the data goes to a temporary file in the same directory,
 * renamed onto the final path only when everything is written. */
typedef struct npy_writer {
    char *path;     /* final path */
    char *tmp_path; /* temporary file, NULL when none is open */
    FILE *f;
} npy_writer;

/* Creates the temporary file next to `path` (so an unwritable destination fails before any
 * work is done). @return NPY_OK, or NPY_ERR_IO / NPY_ERR_NOMEM with err set (nothing created). */
npy_status npy_writer_open(npy_writer *w, const char *path, char *err, size_t errlen);

/* Writes the array, flushes it to disk and renames it onto the final path. On any failure the
 * temporary file is removed and the final path is left as it was.
 * @return NPY_OK, or NPY_ERR_IO / NPY_ERR_FORMAT (invalid shape) with err set. The writer is
 *         closed either way. */
npy_status npy_writer_commit(npy_writer *w, const int64_t *shape, int ndim, const float *data, char *err,
                             size_t errlen);

/* Removes the temporary file, if any, and closes the writer. Safe on a closed writer. */
void npy_writer_abort(npy_writer *w);

/* npy_writer_open then npy_writer_commit. */
npy_status npy_write_f32(const char *path, const int64_t *shape, int ndim, const float *data, char *err, size_t errlen);

#endif
