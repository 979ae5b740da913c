/* Fuzz harness: the .npy reader (kit/npy.h) on arbitrary bytes.
 *
 * Properties: npy_read_f32_mem never reads outside the bytes given (the sanitizers see every
 * access; the input buffer is exactly `size` bytes); it returns NPY_OK, NPY_ERR_FORMAT or
 * NPY_ERR_NOMEM; on failure the message is one non-empty line and the array is zeroed; on
 * success the shape is valid, count = prod(shape), and the array survives a round trip
 * through npy_encode_header and the reader bit for bit. npy_read_u8_mem (bool and uint8 arrays)
 * runs on the same bytes under the same contract. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "npy.h"

#define REQUIRE(cond)                                                                      \
    do {                                                                                   \
        if (!(cond)) {                                                                     \
            fprintf(stderr, "fuzz_npy: property broken: %s (line %d)\n", #cond, __LINE__); \
            abort();                                                                       \
        }                                                                                  \
    } while (0)

static int zeroed(const npy_array *a) {
    static const npy_array zero;
    return memcmp(a, &zero, sizeof zero) == 0;
}

static int float_reader(const uint8_t *data, size_t size) {
    npy_array a;
    char err[256];
    memset(err, 'x', sizeof err);
    npy_status st = npy_read_f32_mem(data, size, &a, err, sizeof err);
    REQUIRE(st == NPY_OK || st == NPY_ERR_FORMAT || st == NPY_ERR_NOMEM);
    if (st != NPY_OK) {
        REQUIRE(memchr(err, '\0', sizeof err) != NULL);
        REQUIRE(err[0] != '\0' && strchr(err, '\n') == NULL);
        REQUIRE(zeroed(&a));
        return 0;
    }
    REQUIRE(a.ndim >= 0 && a.ndim <= NPY_MAX_DIMS);
    /* count = prod(shape); a zero dimension makes it 0 whatever the others (which may then
     * be huge: their product alone would overflow). */
    int64_t count = 1;
    int has_zero = 0;
    for (int i = 0; i < a.ndim; i++) {
        REQUIRE(a.shape[i] >= 0);
        has_zero |= a.shape[i] == 0;
    }
    for (int i = 0; i < a.ndim && !has_zero; i++) REQUIRE(!__builtin_mul_overflow(count, a.shape[i], &count));
    if (has_zero) count = 0;
    REQUIRE(count == a.count);
    REQUIRE((a.count == 0) == (a.data == NULL));
    REQUIRE((uint64_t)a.count * 4u <= size);
    /* Round trip: header + data re-read gives the same array bit for bit. */
    unsigned char header[4096];
    size_t hlen = npy_encode_header(a.shape, a.ndim, header, sizeof header);
    REQUIRE(hlen > 0 && hlen % 64 == 0);
    size_t total = hlen + (size_t)a.count * 4u;
    unsigned char *copy = malloc(total);
    if (copy) {
        memcpy(copy, header, hlen);
        if (a.count) memcpy(copy + hlen, a.data, (size_t)a.count * 4u);
        npy_array b;
        REQUIRE(npy_read_f32_mem(copy, total, &b, err, sizeof err) == NPY_OK);
        REQUIRE(b.ndim == a.ndim && b.count == a.count);
        REQUIRE(memcmp(b.shape, a.shape, (size_t)a.ndim * sizeof a.shape[0]) == 0);
        REQUIRE(a.count == 0 || memcmp(b.data, a.data, (size_t)a.count * 4u) == 0);
        npy_free(&b);
        free(copy);
    }
    npy_free(&a);
    REQUIRE(zeroed(&a));
    return 0;
}

/* The byte reader (bool / uint8 key masks) on the same input: the same failure contract, and
 * on success one byte per element inside the input, read back exactly. */
static void bytes_reader(const uint8_t *data, size_t size) {
    npy_array a;
    char err[256];
    memset(err, 'x', sizeof err);
    npy_status st = npy_read_u8_mem(data, size, &a, err, sizeof err);
    REQUIRE(st == NPY_OK || st == NPY_ERR_FORMAT || st == NPY_ERR_NOMEM);
    if (st != NPY_OK) {
        REQUIRE(memchr(err, '\0', sizeof err) != NULL);
        REQUIRE(err[0] != '\0' && strchr(err, '\n') == NULL);
        REQUIRE(zeroed(&a));
        return;
    }
    REQUIRE(a.data == NULL && (a.count == 0) == (a.bytes == NULL));
    REQUIRE((uint64_t)a.count <= size);
    REQUIRE(a.count == 0 || memcmp(a.bytes, data + size - (size_t)a.count, (size_t)a.count) == 0);
    npy_free(&a);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    bytes_reader(data, size);
    return float_reader(data, size);
}
