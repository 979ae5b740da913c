/* backward_v4_records.cuh: the tile records of the backward v4 (backward_v4_sm90_fa3_f16x2.cu; designed for the
 * backward v2, removed: src/cuda/JOURNAL.md), written by its pre-pass (backward_v4_split_f16x2.cu). Internal to
 * src/cuda; internal linkage.
 *
 * Each of q * scale, dout, k and v is cut into tiles of 64 rows (tokens) of one head; a tile is
 * one record of kBytes bytes, records of a tensor stored [B*H][tiles] (tiles = ceil(S / 64)):
 *   [0, kImage)            hi image: fp16 hi of x * 2^e, element (row r, d) at
 *                          swizzled_offset_f16(r, d, 64) (sm90_wgmma_ptx.cuh: 64-column blocks of
 *                          head_dim, 128-byte rows, 16-byte chunks XOR-swizzled by r % 8), the layout
 *                          of kernel v6's K and V tile images; a K-major wgmma B (or A) operand over
 *                          head_dim, and with imm-trans-b the MN-major B operand over the rows
 *   [kImage, 2 kImage)     lo image: fp16 of x * 2^e - hi, same layout
 *   [2 kImage, +16)        info: float 2^-e, then three zero words
 *   [2 kImage + 16, +512)  row data, 64 entries of 8 bytes: q records: float lse of row r at word r
 *                          (natural log; -inf and rows past seq_q as +inf, so that P = 0), words
 *                          64..127 zero; dout records: float2 (Dl hi, Dl lo) of row r, Dl = dO.O - dlse
 *                          summed in float64 (rows past seq_q: 0); k, v records: zeros. The backward
 *                          v4 bulk-copies a record's images into one shared-memory slot and its info
 *                          and row data (kBwdExtras) into another.
 * e is one power of two for the whole tile (f16x2_split.cuh: its largest finite magnitude to
 * [2^14, 2^15)): a scale common to the tile's rows and to its head_dim columns, so that every one of
 * the backward's five products can contract over either index with the tile's scale factored out.
 * Rows past the sequence are zeros. */
#ifndef JATTN_BACKWARD_V4_RECORDS_CUH
#define JATTN_BACKWARD_V4_RECORDS_CUH

#include <stdint.h>

namespace {

constexpr int kBwdTile = 64;    /* rows of a record */
constexpr int kBwdTarget = 14;  /* the tile's largest magnitude to [2^14, 2^15) */
constexpr int kBwdExtras = 528; /* info (16) + row data (512) */
constexpr int kBwdRowData = 16; /* byte offset of the row data inside the extras */

template <int D>
struct BwdRecord {
    static constexpr int kImage = kBwdTile * D * 2; /* one fp16 part */
    static constexpr int kImages = 2 * kImage;      /* hi + lo */
    static constexpr int kBytes = kImages + kBwdExtras;
    static_assert(kBytes % 16 == 0, "bulk copies move multiples of 16 bytes");
};

/* Byte offsets of the four tensors' records in the workspace (tq, tk: query and key tiles): q and dout records
 * of the bh query heads, k and v records of the bhk key/value heads (bhk = bh without grouped heads). */
struct BwdRecordLayout {
    int64_t q, dout, k, v, bytes;
};

inline BwdRecordLayout bwd_record_layout(int64_t bh, int64_t bhk, int64_t seq_q, int64_t seq_kv, int64_t head_dim) {
    const int64_t rec = 2 * kBwdTile * head_dim * 2 + kBwdExtras;
    const int64_t tq = (seq_q + kBwdTile - 1) / kBwdTile, tk = (seq_kv + kBwdTile - 1) / kBwdTile;
    BwdRecordLayout l;
    l.q = 0;
    l.dout = l.q + bh * tq * rec;
    l.k = l.dout + bh * tq * rec;
    l.v = l.k + bhk * tk * rec;
    l.bytes = l.v + bhk * tk * rec;
    return l;
}

} /* namespace */

#endif /* JATTN_BACKWARD_V4_RECORDS_CUH */
