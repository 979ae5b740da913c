/* tf32_tiny_values.h: the scaling of V blocks whose values TF32 cannot split exactly, shared
 * by the tensor-core kernels (attention_v2_mma.cu; attention_v3_sm90_tf32x3.cu until its removal).
 *
 * A TF32 number keeps 11 significant bits only down to 2^-126 (below, its subnormal grid is
 * 2^-136), so the big + small split of a value below ~2^-115 loses bits, and a denormal v
 * comes out quantised. A block of V whose values all lie below 2^-63 (exponent field < 64:
 * the two top bits of the field clear) is multiplied by 2^62 (exactly) before its split, and
 * its product by 2^-62 after: gradual underflow as in fp32. Scaled values stay below 2^-1. */
#ifndef JATTN_TF32_TINY_VALUES_H
#define JATTN_TF32_TINY_VALUES_H

#define JATTN_TINY_EXPONENT_BITS 0x60000000u /* all clear in every value: the block is tiny */
#define JATTN_TINY_SCALE 0x1p62f
#define JATTN_TINY_UNSCALE 0x1p-62f

#endif
