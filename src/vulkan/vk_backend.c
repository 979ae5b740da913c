/* The vk backend: exact f32 attention on any Vulkan device (vk_device.c), host memory only.
 *
 * A call gathers q, k, v from their strided host layout into a mapped staging buffer, dense
 * [bh, token, DMAX] with rows zero-padded to the kernel's head-dim family, copies them into
 * device-local buffers, runs the kernel (shaders/attn_f32.comp) and copies out and lse back,
 * scattering them into the caller's layout. Heads whose q, k or v would reach float32 denormals
 * in the kernel are normalised by exact powers of two on the way in (vk_range.c) and their output
 * scaled back on the way out, so no driver's denormal flushing changes a result. Problems larger
 * than one storage-buffer binding are run in pieces of whole batch-heads. A context keeps the buffers (grow-only), the
 * command buffer, fence, descriptor set and timestamp queries: a repeated call of one size allocates nothing. Without a
 * context they are made for the call and freed before it returns.
 *
 * Masks and grouped-query heads (jattn_mask, kv_heads): each key/value head is staged once per piece
 * and read by the query heads of its group (pieces hold whole groups); key lengths, the boolean key
 * mask, each query row's key window (causal, blocks, segments: jattn_call_key_window) with each
 * query tile's union and intersection of them, and the key bias rows go into the keys buffer
 * (keys_layout), from which the kernels walk only the key tiles a query tile's windows touch. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "vk_internal.h"

enum { BUF_Q, BUF_K, BUF_V, BUF_OUT, BUF_LSE, BUF_KEYS, BUF_COUNT };

typedef struct vk_buf {
    VkBuffer buf;
    VkDeviceMemory mem;
    VkDeviceSize size;
    void *map; /* staging only */
} vk_buf;

typedef struct vk_ctx_state {
    VkCommandPool pool;
    VkCommandBuffer cmd;
    VkFence fence;
    VkDescriptorPool descriptor_pool;
    VkDescriptorSet set;
    VkQueryPool queries; /* two timestamps per piece; VK_NULL_HANDLE when the queue has none */
    vk_buf dev[BUF_COUNT];
    vk_buf stage; /* in: q, k, v, keys; out: out, lse */
    double last_kernel_seconds;
    long allocations; /* Vulkan buffers allocated so far (tests: a repeated call allocates none) */
} vk_ctx_state;

#define FAIL(status, ...) jattn_fail(status, "backend: vk: " __VA_ARGS__)

/* ---- select ------------------------------------------------------------------------------ */

static uint64_t padded_dim(int m) { return (uint64_t)jattn_vk_modules[m].dmax; }

/* The words of the keys buffer (shaders/attn_common.glsl), in order: kv_end [batch]; the boolean key
 * mask, [batch][words_per_row] bits; per batch-head the softmax scale (float bits), then the output's
 * power-of-two exponent (int32, read by the host only); with windows (causal, blocks, segments) each
 * query row's key window [lo, hi) ([window_rows][seq_q][2]), then each query tile's union and
 * intersection of its rows' windows ([window_rows][query_tiles][4]); with a key bias its rows
 * ([bias_rows_b][bias_rows_h][seq_kv] floats). It depends on the mask's structure only (a plan's). */
typedef struct keys_layout {
    uint64_t words_per_row, scales, out_exp, windows, ranges, bias, words;
    int64_t window_rows;              /* 0: no windows; 1: one set for every batch; batch: segments per batch */
    int64_t query_tiles;              /* ceil(seq_q / the module's rows) */
    int64_t bias_rows_b, bias_rows_h; /* staged bias rows: batch or 1, heads or 1 (0, 0: no bias) */
} keys_layout;

static void layout_keys(const jattn_problem *p, const jattn_mask_shape *ms, int64_t rows, keys_layout *kl) {
    const uint64_t bh = (uint64_t)p->batch * (uint64_t)p->heads;
    kl->words_per_row = ms->mask ? ((uint64_t)p->seq_kv + 31) / 32 : 0;
    kl->scales = (uint64_t)p->batch * (1 + kl->words_per_row);
    kl->out_exp = kl->scales + bh;
    const int windowed = ms->causal != JATTN_CAUSAL_NONE || ms->num_blocks || ms->num_segments;
    kl->window_rows = !windowed ? 0 : ms->num_segments && ms->segments_stride ? p->batch : 1;
    kl->query_tiles = (p->seq_q + rows - 1) / rows;
    kl->windows = kl->out_exp + bh;
    kl->ranges = kl->windows + 2 * (uint64_t)kl->window_rows * (uint64_t)p->seq_q;
    kl->bias = kl->ranges + 4 * (uint64_t)kl->window_rows * (uint64_t)kl->query_tiles;
    kl->bias_rows_b = !ms->key_bias ? 0 : ms->bias_batch_stride ? p->batch : 1;
    kl->bias_rows_h = !ms->key_bias ? 0 : ms->bias_head_stride ? p->heads : 1;
    kl->words = kl->bias + (uint64_t)kl->bias_rows_b * (uint64_t)kl->bias_rows_h * (uint64_t)p->seq_kv;
}

/* Every mask part and grouped-query heads (the forward; the vk backend has no backward). */
#define VK_FEATURES                                                                                     \
    (JATTN_FEATURE_KEY_PADDING | JATTN_FEATURE_CAUSAL | JATTN_FEATURE_BLOCKS | JATTN_FEATURE_SEGMENTS | \
     JATTN_FEATURE_KEY_BIAS | JATTN_FEATURE_GQA)

static jattn_status vk_select(const jattn_problem *p, const jattn_exec *e, jattn_plan *plan) {
    vk_device *d = vk_device_get();
    if (d->status != JATTN_OK) return jattn_fail(d->status, "%s", d->why);
    if (e->backend == JATTN_BACKEND_AUTO && d->is_cpu)
        return FAIL(JATTN_ERROR_BACKEND_UNAVAILABLE,
                    "the Vulkan device (%s) is a software device; auto leaves it to the cpu backend "
                    "(--backend vk runs on it)",
                    d->props.deviceName);
    if (e->memory != JATTN_MEMORY_HOST)
        return FAIL(JATTN_ERROR_UNSUPPORTED, "exec.memory: the vk backend takes host memory only (JATTN_MEMORY_HOST)");
    if (e->precision != JATTN_PRECISION_F32)
        return FAIL(JATTN_ERROR_UNSUPPORTED, "exec.precision: the vk backend computes f32 only");
    const jattn_status refused = jattn_refuse_features(plan, VK_FEATURES, "the vk backend");
    if (refused != JATTN_OK) return refused;
    const int m = vk_module_for(d, p->head_dim);
    if (m < 0)
        return FAIL(JATTN_ERROR_UNSUPPORTED, "head_dim: %lld, the vk backend supports up to %d", (long long)p->head_dim,
                    JATTN_VK_MAX_HEAD_DIM);
    const uint64_t dp = padded_dim(m);
    const int64_t longest = p->seq_q > p->seq_kv ? p->seq_q : p->seq_kv;
    if ((uint64_t)longest > d->max_binding / (dp * 4))
        return FAIL(JATTN_ERROR_UNSUPPORTED,
                    "%s: %lld tokens of one head (%llu floats each) exceed the device's storage-buffer binding of "
                    "%llu bytes (pieces are whole heads)",
                    p->seq_q >= p->seq_kv ? "seq_q" : "seq_kv", (long long)longest, (unsigned long long)dp,
                    (unsigned long long)d->max_binding);
    keys_layout kl;
    layout_keys(p, &plan->mask, jattn_vk_modules[m].rows, &kl);
    if (kl.words > d->max_binding / 4)
        return FAIL(JATTN_ERROR_UNSUPPORTED,
                    "batch: %lld batches of key lengths, masks, windows, key bias and scales (%llu bytes) exceed the "
                    "device's storage-buffer binding of %llu bytes",
                    (long long)p->batch, (unsigned long long)kl.words * 4, (unsigned long long)d->max_binding);
    if ((uint64_t)(p->seq_q + jattn_vk_modules[m].rows - 1) / (uint64_t)jattn_vk_modules[m].rows >
        d->props.limits.maxComputeWorkGroupCount[0])
        return FAIL(JATTN_ERROR_UNSUPPORTED, "seq_q: %lld needs more workgroups than the device dispatches (%u)",
                    (long long)p->seq_q, d->props.limits.maxComputeWorkGroupCount[0]);
    plan->kernel = &jattn_vk_modules[m]; /* the module (vk_spirv_module) forward() runs */
    plan->threads = 1;
    plan->selection.kernel = vk_kernel_name(m);
    plan->selection.isa = d->isa;
    return JATTN_OK;
}

static size_t vk_workspace_size(const jattn_problem *p, const jattn_exec *e, const jattn_plan *plan) {
    (void)p;
    (void)e;
    (void)plan;
    return 0; /* buffers live in Vulkan memory, kept by the context */
}

/* ---- buffers and per-context state ------------------------------------------------------- */

static int memory_type(const vk_device *d, uint32_t bits, VkMemoryPropertyFlags need, VkMemoryPropertyFlags want) {
    int fallback = -1;
    for (uint32_t i = 0; i < d->mem.memoryTypeCount; i++) {
        const VkMemoryPropertyFlags f = d->mem.memoryTypes[i].propertyFlags;
        if (!(bits & (1u << i)) || (f & need) != need) continue;
        if ((f & want) == want) return (int)i;
        if (fallback < 0) fallback = (int)i;
    }
    return fallback;
}

static void buf_free(const vk_device *d, vk_buf *b) {
    if (b->map) d->f.vkUnmapMemory(d->device, b->mem);
    if (b->buf) d->f.vkDestroyBuffer(d->device, b->buf, NULL);
    if (b->mem) d->f.vkFreeMemory(d->device, b->mem, NULL);
    memset(b, 0, sizeof *b);
}

/* Grows b to hold `size` bytes (grow-only; contents are not kept). */
static jattn_status buf_reserve(const vk_device *d, vk_buf *b, VkDeviceSize size, VkBufferUsageFlags usage,
                                int host_visible) {
    if (size < 256) size = 256;
    if (b->buf && b->size >= size) return JATTN_OK;
    buf_free(d, b);
    VkBufferCreateInfo bci;
    memset(&bci, 0, sizeof bci);
    bci.sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO;
    bci.size = size;
    bci.usage = usage;
    bci.sharingMode = VK_SHARING_MODE_EXCLUSIVE;
    if (d->f.vkCreateBuffer(d->device, &bci, NULL, &b->buf) != VK_SUCCESS)
        return FAIL(JATTN_ERROR_OUT_OF_MEMORY, "vkCreateBuffer of %llu bytes failed", (unsigned long long)size);
    VkMemoryRequirements req;
    d->f.vkGetBufferMemoryRequirements(d->device, b->buf, &req);
    const int type = host_visible
                         ? memory_type(d, req.memoryTypeBits,
                                       VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT,
                                       VK_MEMORY_PROPERTY_HOST_CACHED_BIT)
                         : memory_type(d, req.memoryTypeBits, 0, VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT);
    if (type < 0) {
        buf_free(d, b);
        return FAIL(JATTN_ERROR_BACKEND_UNAVAILABLE, "no %s memory type for a storage buffer",
                    host_visible ? "host-visible coherent" : "device");
    }
    VkMemoryAllocateInfo mai;
    memset(&mai, 0, sizeof mai);
    mai.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO;
    mai.allocationSize = req.size;
    mai.memoryTypeIndex = (uint32_t)type;
    if (d->f.vkAllocateMemory(d->device, &mai, NULL, &b->mem) != VK_SUCCESS) {
        buf_free(d, b);
        return FAIL(JATTN_ERROR_OUT_OF_MEMORY, "vkAllocateMemory of %llu bytes failed", (unsigned long long)req.size);
    }
    if (d->f.vkBindBufferMemory(d->device, b->buf, b->mem, 0) != VK_SUCCESS ||
        (host_visible && d->f.vkMapMemory(d->device, b->mem, 0, VK_WHOLE_SIZE, 0, &b->map) != VK_SUCCESS)) {
        buf_free(d, b);
        return FAIL(JATTN_ERROR_OUT_OF_MEMORY, "binding or mapping %llu bytes failed", (unsigned long long)size);
    }
    b->size = size;
    return JATTN_OK;
}

/* buf_reserve, counting each allocation in the context state. */
static jattn_status state_reserve(const vk_device *d, vk_ctx_state *s, vk_buf *b, VkDeviceSize size,
                                  VkBufferUsageFlags usage, int host_visible) {
    const VkBuffer before = b->buf;
    jattn_status st = buf_reserve(d, b, size, usage, host_visible);
    if (st == JATTN_OK && b->buf != before) s->allocations++;
    return st;
}

static void state_free(const vk_device *d, vk_ctx_state *s) {
    if (!s) return;
    for (int i = 0; i < BUF_COUNT; i++) buf_free(d, &s->dev[i]);
    buf_free(d, &s->stage);
    if (s->queries) d->f.vkDestroyQueryPool(d->device, s->queries, NULL);
    if (s->descriptor_pool) d->f.vkDestroyDescriptorPool(d->device, s->descriptor_pool, NULL);
    if (s->fence) d->f.vkDestroyFence(d->device, s->fence, NULL);
    if (s->pool) d->f.vkDestroyCommandPool(d->device, s->pool, NULL); /* frees the command buffer */
    free(s);
}

static jattn_status state_create(const vk_device *d, vk_ctx_state **out) {
    vk_ctx_state *s = calloc(1, sizeof *s);
    if (!s) return FAIL(JATTN_ERROR_OUT_OF_MEMORY, "context state: allocation failed");
    VkCommandPoolCreateInfo cpci;
    memset(&cpci, 0, sizeof cpci);
    cpci.sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO;
    cpci.flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT;
    cpci.queueFamilyIndex = d->queue_family;
    VkCommandBufferAllocateInfo cbai;
    memset(&cbai, 0, sizeof cbai);
    cbai.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO;
    cbai.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
    cbai.commandBufferCount = 1;
    VkFenceCreateInfo fci;
    memset(&fci, 0, sizeof fci);
    fci.sType = VK_STRUCTURE_TYPE_FENCE_CREATE_INFO;
    VkDescriptorPoolSize ps = {VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, BUF_COUNT};
    VkDescriptorPoolCreateInfo dpci;
    memset(&dpci, 0, sizeof dpci);
    dpci.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO;
    dpci.maxSets = 1;
    dpci.poolSizeCount = 1;
    dpci.pPoolSizes = &ps;
    VkDescriptorSetAllocateInfo dsai;
    memset(&dsai, 0, sizeof dsai);
    dsai.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO;
    dsai.descriptorSetCount = 1;
    dsai.pSetLayouts = &d->set_layout;
    int ok = d->f.vkCreateCommandPool(d->device, &cpci, NULL, &s->pool) == VK_SUCCESS;
    cbai.commandPool = s->pool;
    ok = ok && d->f.vkAllocateCommandBuffers(d->device, &cbai, &s->cmd) == VK_SUCCESS;
    ok = ok && d->f.vkCreateFence(d->device, &fci, NULL, &s->fence) == VK_SUCCESS;
    ok = ok && d->f.vkCreateDescriptorPool(d->device, &dpci, NULL, &s->descriptor_pool) == VK_SUCCESS;
    dsai.descriptorPool = s->descriptor_pool;
    ok = ok && d->f.vkAllocateDescriptorSets(d->device, &dsai, &s->set) == VK_SUCCESS;
    if (ok && d->timestamps) {
        VkQueryPoolCreateInfo qci;
        memset(&qci, 0, sizeof qci);
        qci.sType = VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO;
        qci.queryType = VK_QUERY_TYPE_TIMESTAMP;
        qci.queryCount = 2;
        ok = d->f.vkCreateQueryPool(d->device, &qci, NULL, &s->queries) == VK_SUCCESS;
    }
    if (!ok) {
        state_free(d, s);
        return FAIL(JATTN_ERROR_OUT_OF_MEMORY, "creating the command pool, fence or descriptor set failed");
    }
    *out = s;
    return JATTN_OK;
}

static void vk_release_ctx(jattn_ctx *ctx) {
    vk_ctx_state *s = ctx->backend_state[JATTN_BACKEND_VK];
    if (!s) return;
    state_free(vk_device_get(), s);
    ctx->backend_state[JATTN_BACKEND_VK] = NULL;
}

long jattn_vk_ctx_allocations(const jattn_ctx *ctx) {
    const vk_ctx_state *s = ctx ? ctx->backend_state[JATTN_BACKEND_VK] : NULL;
    return s ? s->allocations : 0;
}

double jattn_vk_last_kernel_seconds(const jattn_ctx *ctx) {
    const vk_ctx_state *s = ctx ? ctx->backend_state[JATTN_BACKEND_VK] : NULL;
    return s ? s->last_kernel_seconds : 0.0;
}

/* ---- gather / scatter between the caller's layout and the dense staging layout ------------ */

/* Rows [0, rows) of head (b, h) of a strided tensor into dst [*, dp], zero-padded past head_dim.
 * @return the largest |x| copied (NaN ignored; Inf if there is one), read from the source: dst
 *         may be write-combined memory, which is never read. The maximum is taken on the bits
 *         (|x| as an int32 orders as |x| does; NaN bits, above Inf's, count as 0): a loop the
 *         compiler vectorises, about a third of the copy's time (a float compare-select loop
 *         took more than the copy itself). */
static float gather_head(float *dst, const float *src, int64_t rows, int64_t token_stride, int64_t head_dim,
                         int64_t dp) {
    int32_t m = 0;
    for (int64_t i = 0; i < rows; i++) {
        const float *s = src + i * token_stride;
        memcpy(dst + i * dp, s, (size_t)head_dim * sizeof(float));
        if (dp > head_dim) memset(dst + i * dp + head_dim, 0, (size_t)(dp - head_dim) * sizeof(float));
        for (int64_t j = 0; j < head_dim; j++) {
            uint32_t u;
            memcpy(&u, s + j, sizeof u);
            int32_t a = (int32_t)(u & 0x7fffffffu);
            a = a > 0x7f800000 ? 0 : a;
            m = a > m ? a : m;
        }
    }
    float f;
    memcpy(&f, &m, sizeof f);
    return f;
}

/* ---- forward ------------------------------------------------------------------------------ */

typedef struct piece_plan {
    int64_t dp;        /* floats per staged row (the module's DMAX) */
    int64_t group;     /* query heads per key/value head */
    int64_t heads_max; /* query batch-heads per piece: whole groups (or a divisor of a group too large) */
    int64_t kv_max;    /* key/value batch-heads per piece */
    keys_layout keys;
    VkDeviceSize q_bytes, kv_bytes, out_bytes, lse_bytes, keys_bytes; /* per piece (keys: the call's) */
    VkDeviceSize off_q, off_k, off_v, off_keys, off_out, off_lse, stage_bytes;
} piece_plan;

static VkDeviceSize align_up(VkDeviceSize x) { return (x + 255) & ~(VkDeviceSize)255; }

/* Pieces of whole groups of query heads with their key/value heads (each k, v head staged once per
 * piece and read by its group), as many as one binding holds of q and of k, v, and one dispatch
 * covers; a group whose q alone exceeds a binding runs in pieces of a divisor of it. */
static void plan_pieces(const vk_device *d, const jattn_problem *p, const jattn_plan *plan, int m, piece_plan *pl) {
    pl->dp = (int64_t)padded_dim(m);
    const uint64_t row_bytes = (uint64_t)pl->dp * 4, mb = d->max_binding;
    const uint64_t ymax = d->props.limits.maxComputeWorkGroupCount[1];
    const uint64_t q_head = row_bytes * (uint64_t)p->seq_q, kv_head = row_bytes * (uint64_t)p->seq_kv; /* > 0 */
    const int64_t group = p->heads / p->kv_heads;
    pl->group = group;
    uint64_t groups = mb / q_head / (uint64_t)group; /* >= 1 head of each fits: select checked */
    if (groups > mb / kv_head) groups = mb / kv_head;
    if (groups > ymax / (uint64_t)group) groups = ymax / (uint64_t)group;
    if (groups > (uint64_t)(p->batch * p->kv_heads)) groups = (uint64_t)(p->batch * p->kv_heads);
    if (groups >= 1) {
        pl->heads_max = (int64_t)groups * group;
        pl->kv_max = (int64_t)groups;
    } else {
        int64_t n = group;
        while (n > 1 && (group % n != 0 || (uint64_t)n * q_head > mb || (uint64_t)n > ymax)) n--;
        pl->heads_max = n;
        pl->kv_max = 1;
    }
    pl->q_bytes = (VkDeviceSize)pl->heads_max * (VkDeviceSize)p->seq_q * row_bytes;
    pl->kv_bytes = (VkDeviceSize)pl->kv_max * (VkDeviceSize)p->seq_kv * row_bytes;
    pl->out_bytes = pl->q_bytes;
    pl->lse_bytes = (VkDeviceSize)pl->heads_max * (VkDeviceSize)p->seq_q * 4;
    layout_keys(p, &plan->mask, jattn_vk_modules[m].rows, &pl->keys);
    pl->keys_bytes = (VkDeviceSize)pl->keys.words * 4;
    pl->off_q = 0;
    pl->off_k = align_up(pl->off_q + pl->q_bytes);
    pl->off_v = align_up(pl->off_k + pl->kv_bytes);
    pl->off_keys = align_up(pl->off_v + pl->kv_bytes);
    pl->off_out = align_up(pl->off_keys + pl->keys_bytes);
    pl->off_lse = align_up(pl->off_out + pl->out_bytes);
    pl->stage_bytes = align_up(pl->off_lse + pl->lse_bytes);
}

static jattn_status reserve_all(const vk_device *d, vk_ctx_state *s, const piece_plan *pl) {
    const VkBufferUsageFlags in = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT;
    const VkBufferUsageFlags out = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT;
    const VkDeviceSize sizes[BUF_COUNT] = {pl->q_bytes,   pl->kv_bytes,  pl->kv_bytes,
                                           pl->out_bytes, pl->lse_bytes, pl->keys_bytes};
    const VkBufferUsageFlags usage[BUF_COUNT] = {in, in, in, out, out, in};
    for (int i = 0; i < BUF_COUNT; i++) {
        jattn_status st = state_reserve(d, s, &s->dev[i], sizes[i], usage[i], 0);
        if (st != JATTN_OK) return st;
    }
    return state_reserve(d, s, &s->stage, pl->stage_bytes,
                         VK_BUFFER_USAGE_TRANSFER_SRC_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT, 1);
}

static void update_descriptors(const vk_device *d, vk_ctx_state *s) {
    VkDescriptorBufferInfo info[BUF_COUNT];
    VkWriteDescriptorSet w[BUF_COUNT];
    memset(w, 0, sizeof w);
    for (int i = 0; i < BUF_COUNT; i++) {
        info[i].buffer = s->dev[i].buf;
        info[i].offset = 0;
        info[i].range = VK_WHOLE_SIZE;
        w[i].sType = VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET;
        w[i].dstSet = s->set;
        w[i].dstBinding = (uint32_t)i;
        w[i].descriptorCount = 1;
        w[i].descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
        w[i].pBufferInfo = &info[i];
    }
    d->f.vkUpdateDescriptorSets(d->device, BUF_COUNT, w, 0, NULL);
}

static void memory_barrier(const vk_device *d, VkCommandBuffer cmd, VkPipelineStageFlags src, VkAccessFlags src_access,
                           VkPipelineStageFlags dst, VkAccessFlags dst_access) {
    VkMemoryBarrier mb;
    memset(&mb, 0, sizeof mb);
    mb.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER;
    mb.srcAccessMask = src_access;
    mb.dstAccessMask = dst_access;
    d->f.vkCmdPipelineBarrier(cmd, src, dst, 0, 1, &mb, 0, NULL, 0, NULL);
}

/* The push constants of the kernels (shaders/attn_common.glsl says what each is). */
typedef struct push_constants {
    uint32_t seq_q, seq_kv, heads, bh0, batch, words_per_row, flags;
    uint32_t scales; /* the word of keys[] where the per-head softmax scales start */
    uint32_t group, kv_bh0;
    uint32_t windows, ranges, window_batch;
    uint32_t bias, bias_b, bias_h;
} push_constants;
_Static_assert(sizeof(push_constants) == JATTN_VK_PUSH_BYTES, "push constants: vk_internal.h's size");

enum { FLAG_MASK = 1, FLAG_LSE = 2, FLAG_WINDOWS = 4, FLAG_BIAS = 8 }; /* push_constants.flags */

/* Records and runs one piece: query batch-heads [bh0, bh0 + n), key/value batch-heads
 * [kv_bh0, kv_bh0 + nkv). */
static jattn_status run_piece(const vk_device *d, vk_ctx_state *s, VkPipeline pipeline, uint32_t rows,
                              const piece_plan *pl, const push_constants *pc, int64_t n, int64_t nkv, int64_t slices,
                              double *kernel_seconds) {
    VkCommandBuffer cmd = s->cmd;
    VkCommandBufferBeginInfo bi;
    memset(&bi, 0, sizeof bi);
    bi.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO;
    bi.flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT;
    if (d->f.vkBeginCommandBuffer(cmd, &bi) != VK_SUCCESS)
        return FAIL(JATTN_ERROR_OUT_OF_MEMORY, "vkBeginCommandBuffer failed");
    const VkDeviceSize q_bytes = (VkDeviceSize)n * pc->seq_q * (VkDeviceSize)pl->dp * 4;
    const VkDeviceSize kv_bytes = (VkDeviceSize)nkv * pc->seq_kv * (VkDeviceSize)pl->dp * 4;
    const VkDeviceSize lse_bytes = (VkDeviceSize)n * pc->seq_q * 4;
    VkBufferCopy c;
    c.srcOffset = pl->off_q, c.dstOffset = 0, c.size = q_bytes;
    d->f.vkCmdCopyBuffer(cmd, s->stage.buf, s->dev[BUF_Q].buf, 1, &c);
    c.srcOffset = pl->off_k, c.size = kv_bytes;
    d->f.vkCmdCopyBuffer(cmd, s->stage.buf, s->dev[BUF_K].buf, 1, &c);
    c.srcOffset = pl->off_v;
    d->f.vkCmdCopyBuffer(cmd, s->stage.buf, s->dev[BUF_V].buf, 1, &c);
    c.srcOffset = pl->off_keys, c.size = pl->keys_bytes;
    d->f.vkCmdCopyBuffer(cmd, s->stage.buf, s->dev[BUF_KEYS].buf, 1, &c);
    memory_barrier(d, cmd, VK_PIPELINE_STAGE_TRANSFER_BIT, VK_ACCESS_TRANSFER_WRITE_BIT,
                   VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_ACCESS_SHADER_READ_BIT);
    if (s->queries) {
        d->f.vkCmdResetQueryPool(cmd, s->queries, 0, 2);
        d->f.vkCmdWriteTimestamp(cmd, VK_PIPELINE_STAGE_TRANSFER_BIT, s->queries, 0);
    }
    d->f.vkCmdBindPipeline(cmd, VK_PIPELINE_BIND_POINT_COMPUTE, pipeline);
    d->f.vkCmdBindDescriptorSets(cmd, VK_PIPELINE_BIND_POINT_COMPUTE, d->pipeline_layout, 0, 1, &s->set, 0, NULL);
    d->f.vkCmdPushConstants(cmd, d->pipeline_layout, VK_SHADER_STAGE_COMPUTE_BIT, 0, sizeof *pc, pc);
    d->f.vkCmdDispatch(cmd, (pc->seq_q + rows - 1) / rows, (uint32_t)n, (uint32_t)slices);
    if (s->queries) d->f.vkCmdWriteTimestamp(cmd, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, s->queries, 1);
    memory_barrier(d, cmd, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_ACCESS_SHADER_WRITE_BIT,
                   VK_PIPELINE_STAGE_TRANSFER_BIT, VK_ACCESS_TRANSFER_READ_BIT);
    c.srcOffset = 0, c.dstOffset = pl->off_out, c.size = q_bytes;
    d->f.vkCmdCopyBuffer(cmd, s->dev[BUF_OUT].buf, s->stage.buf, 1, &c);
    if (pc->flags & FLAG_LSE) {
        c.dstOffset = pl->off_lse, c.size = lse_bytes;
        d->f.vkCmdCopyBuffer(cmd, s->dev[BUF_LSE].buf, s->stage.buf, 1, &c);
    }
    memory_barrier(d, cmd, VK_PIPELINE_STAGE_TRANSFER_BIT, VK_ACCESS_TRANSFER_WRITE_BIT, VK_PIPELINE_STAGE_HOST_BIT,
                   VK_ACCESS_HOST_READ_BIT);
    if (d->f.vkEndCommandBuffer(cmd) != VK_SUCCESS) return FAIL(JATTN_ERROR_OUT_OF_MEMORY, "vkEndCommandBuffer failed");

    VkSubmitInfo si;
    memset(&si, 0, sizeof si);
    si.sType = VK_STRUCTURE_TYPE_SUBMIT_INFO;
    si.commandBufferCount = 1;
    si.pCommandBuffers = &cmd;
    vk_device_lock(); /* the queue is shared by every context */
    VkResult r = d->f.vkQueueSubmit(d->queue, 1, &si, s->fence);
    vk_device_unlock();
    if (r != VK_SUCCESS) return FAIL(JATTN_ERROR_BACKEND_UNAVAILABLE, "vkQueueSubmit failed (VkResult %d)", (int)r);
    r = d->f.vkWaitForFences(d->device, 1, &s->fence, VK_TRUE, UINT64_MAX);
    d->f.vkResetFences(d->device, 1, &s->fence);
    if (r != VK_SUCCESS)
        return FAIL(JATTN_ERROR_BACKEND_UNAVAILABLE, "vkWaitForFences failed (VkResult %d): device lost?", (int)r);
    if (s->queries) {
        uint64_t t[2];
        if (d->f.vkGetQueryPoolResults(d->device, s->queries, 0, 2, sizeof t, t, sizeof t[0],
                                       VK_QUERY_RESULT_64_BIT | VK_QUERY_RESULT_WAIT_BIT) == VK_SUCCESS)
            *kernel_seconds += (double)(t[1] - t[0]) * (double)d->props.limits.timestampPeriod * 1e-9;
    }
    return JATTN_OK;
}

/* The keys buffer of a call (keys_layout): kv_end, the mask bits, the windows and each query tile's
 * union and intersection of them (from jattn_call_key_window: the one definition of the windows),
 * the key bias rows. The scales and exponents are written per piece. */
static void fill_keys(const jattn_call *c, const keys_layout *kl, int64_t rows, uint32_t *keys) {
    const jattn_problem *p = c->problem;
    for (int64_t b = 0; b < p->batch; b++) keys[b] = (uint32_t)(c->kv_len ? c->kv_len[b] : p->seq_kv);
    if (kl->words_per_row) {
        const int64_t wpr = (int64_t)kl->words_per_row;
        uint32_t *bits = keys + p->batch;
        memset(bits, 0, (size_t)(p->batch * wpr) * sizeof *bits);
        for (int64_t b = 0; b < p->batch; b++) {
            const uint8_t *row = c->mask + b * c->mask_stride;
            for (int64_t j = 0; j < p->seq_kv; j++)
                if (row[j]) bits[b * wpr + j / 32] |= 1u << (j % 32);
        }
    }
    for (int64_t w = 0; w < kl->window_rows; w++) {
        uint32_t *win = keys + kl->windows + 2 * w * p->seq_q, *range = keys + kl->ranges + 4 * w * kl->query_tiles;
        for (int64_t x = 0; x < kl->query_tiles; x++) {
            const int64_t i1 = (x + 1) * rows < p->seq_q ? (x + 1) * rows : p->seq_q;
            int64_t ulo = p->seq_kv, uhi = 0, ilo = 0, ihi = p->seq_kv;
            for (int64_t i = x * rows; i < i1; i++) {
                int64_t lo, hi;
                jattn_call_key_window(c, w, i, &lo, &hi);
                win[2 * i] = (uint32_t)lo, win[2 * i + 1] = (uint32_t)hi;
                if (lo < hi) ulo = lo < ulo ? lo : ulo, uhi = hi > uhi ? hi : uhi;
                ilo = lo > ilo ? lo : ilo, ihi = hi < ihi ? hi : ihi;
            }
            if (ulo >= uhi) ulo = uhi = 0; /* no row of the tile attends a key */
            range[4 * x] = (uint32_t)ulo, range[4 * x + 1] = (uint32_t)uhi;
            range[4 * x + 2] = (uint32_t)ilo, range[4 * x + 3] = (uint32_t)(ihi > ilo ? ihi : ilo);
        }
    }
    for (int64_t bb = 0; bb < kl->bias_rows_b; bb++)
        for (int64_t hh = 0; hh < kl->bias_rows_h; hh++)
            memcpy(keys + kl->bias + (bb * kl->bias_rows_h + hh) * p->seq_kv,
                   c->key_bias + bb * c->bias_batch_stride + hh * c->bias_head_stride,
                   (size_t)p->seq_kv * sizeof(float));
}

/* Non-finite v under windows. A boundary tile's rows share its v rows while their windows differ, so
 * a NaN or Inf in v[j][d] would reach, through a weight of 0, rows that do not attend key j. Such
 * elements are staged as 0 and put back into the outputs by the host: element d of every out row
 * that attends key j becomes non-finite (jattn.h), every other row stays exact. Rare: a scan of v for
 * NaN (Inf shows in its maximum) during the gather of a windowed call. */
typedef struct bad_v {
    int64_t kv_bh, j, d; /* key/value batch-head, key, dim */
    float value;
} bad_v;

typedef struct bad_v_list {
    bad_v *at;
    int64_t n, cap;
} bad_v_list;

static int has_nan(const float *src, int64_t rows, int64_t token_stride, int64_t head_dim) {
    int nan = 0;
    for (int64_t i = 0; i < rows; i++)
        for (int64_t d = 0; d < head_dim; d++) nan |= isnan(src[i * token_stride + d]) != 0;
    return nan;
}

/* Zeroes the staged non-finite elements of one v head; records them when `list` is given.
 * @return the largest finite |v| (the maximum the range plan takes), or -1 when out of memory. */
static float zero_nonfinite(float *dst, const float *src, int64_t rows, int64_t token_stride, int64_t head_dim,
                            int64_t dp, int64_t kv_bh, bad_v_list *list) {
    float m = 0.0f;
    for (int64_t j = 0; j < rows; j++)
        for (int64_t d = 0; d < head_dim; d++) {
            const float x = src[j * token_stride + d];
            if (isfinite(x)) {
                m = fabsf(x) > m ? fabsf(x) : m;
                continue;
            }
            dst[j * dp + d] = 0.0f;
            if (!list) continue;
            if (list->n == list->cap) {
                const int64_t cap = list->cap ? 2 * list->cap : 64;
                bad_v *at = realloc(list->at, (size_t)cap * sizeof *at);
                if (!at) return -1.0f;
                list->at = at, list->cap = cap;
            }
            list->at[list->n++] = (bad_v){kv_bh, j, d, x};
        }
    return m;
}

/* Element d of out row i after v[j][d] = x (non-finite) joins it: NaN, or Inf of one sign. */
static float join_nonfinite(float o, float x) {
    if (isnan(o) || isnan(x) || (isinf(o) && o != x)) return NAN;
    return x;
}

/* Puts the recorded non-finite v elements of the piece's key/value heads back into the rows of query
 * batch-heads [bh0, bh0 + n) that attend their keys. */
static void restore_nonfinite(const jattn_call *c, const bad_v_list *list, int64_t bh0, int64_t n) {
    const jattn_problem *p = c->problem;
    const int64_t group = p->heads / p->kv_heads;
    for (int64_t r = 0; r < list->n; r++) {
        const bad_v *e = &list->at[r];
        const int64_t b = e->kv_bh / p->kv_heads, hk = e->kv_bh % p->kv_heads;
        for (int64_t h = hk * group; h < (hk + 1) * group; h++) {
            const int64_t bh = b * p->heads + h;
            const float *bias = jattn_call_bias_row(c, b, h);
            if (bh < bh0 || bh >= bh0 + n || !jattn_call_attends(c, b, e->j) || (bias && bias[e->j] == -INFINITY))
                continue;
            for (int64_t i = 0; i < p->seq_q; i++) {
                int64_t lo, hi;
                jattn_call_key_window(c, b, i, &lo, &hi);
                if (e->j < lo || e->j >= hi) continue;
                float *o = c->out + b * p->out.batch + h * p->out.head + i * p->out.token + e->d;
                *o = join_nonfinite(*o, e->value);
            }
        }
    }
}

/* The host arrays of a call, per piece: the largest |q| of each query head and |k|, |v| of each
 * key/value head, the range plans, the v heads holding NaN or Inf (windows only), their elements. */
typedef struct host_arrays {
    float *max_q, *max_k, *max_v;
    vk_head_range *range;
    unsigned char *v_bad;
    bad_v_list bad;
} host_arrays;

/* The forward's pieces: gather, dispatch, scatter (buffers reserved, descriptors written). */
static jattn_status forward_pieces(const jattn_call *call, const vk_device *d, vk_ctx_state *s, VkPipeline pipeline,
                                   int m, const piece_plan *pl, host_arrays *ha) {
    const jattn_problem *p = call->problem;
    const keys_layout *kl = &pl->keys;
    const int64_t rows = jattn_vk_modules[m].rows;
    float *max_q = ha->max_q, *max_k = ha->max_k, *max_v = ha->max_v;
    vk_head_range *range = ha->range;
    unsigned char *v_bad = ha->v_bad;
    bad_v_list *bad = &ha->bad;
    jattn_status st = JATTN_OK;

    uint8_t *stage = s->stage.map;
    uint32_t *keys = (uint32_t *)(stage + pl->off_keys);
    fill_keys(call, kl, rows, keys);

    const int64_t dp = pl->dp, H = p->heads, Hkv = p->kv_heads, D = p->head_dim, group = pl->group;
    const int64_t bh_total = p->batch * H;
    const int windowed = kl->window_rows > 0;
    float *head_scale = (float *)(keys + kl->scales);
    int32_t *out_exp = (int32_t *)(keys + kl->out_exp);
    const int64_t slices = dp > JATTN_VK_DIMS_PER_GROUP ? dp / JATTN_VK_DIMS_PER_GROUP : 1;
    const float *q = call->q, *k = call->k, *v = call->v;
    float *sq = (float *)(stage + pl->off_q), *sk = (float *)(stage + pl->off_k), *sv = (float *)(stage + pl->off_v);
    const float *so = (const float *)(stage + pl->off_out), *sl = (const float *)(stage + pl->off_lse);
    const int threads = jattn_resolve_threads(0);
    double kernel_seconds = 0.0;
    (void)threads;
    for (int64_t bh0 = 0; bh0 < bh_total && st == JATTN_OK; bh0 += pl->heads_max) {
        const int64_t n = bh_total - bh0 < pl->heads_max ? bh_total - bh0 : pl->heads_max;
        const int64_t kv_bh0 = bh0 / group, nkv = (bh0 + n - 1) / group - kv_bh0 + 1;
        /* the piece's key/value heads and query heads, one task each */
        JATTN_PARALLEL_FOR_DYNAMIC(1, threads)
        for (int64_t t = 0; t < nkv + n; t++) {
            if (t < nkv) {
                const int64_t b = (kv_bh0 + t) / Hkv, hk = (kv_bh0 + t) % Hkv;
                const int64_t kv_rows = call->kv_len ? call->kv_len[b] : p->seq_kv; /* later keys are never read */
                const float *kh = k + b * p->k.batch + hk * p->k.head, *vh = v + b * p->v.batch + hk * p->v.head;
                max_k[t] = gather_head(sk + t * p->seq_kv * dp, kh, kv_rows, p->k.token, D, dp);
                max_v[t] = gather_head(sv + t * p->seq_kv * dp, vh, kv_rows, p->v.token, D, dp);
                v_bad[t] = windowed && (isinf(max_v[t]) || has_nan(vh, kv_rows, p->v.token, D));
            } else {
                const int64_t i = t - nkv, b = (bh0 + i) / H, h = (bh0 + i) % H;
                max_q[i] = gather_head(sq + i * p->seq_q * dp, q + b * p->q.batch + h * p->q.head, p->seq_q, p->q.token,
                                       D, dp);
            }
        }
        bad->n = 0;
        for (int64_t t = 0; t < nkv && st == JATTN_OK; t++) { /* rare: see bad_v */
            if (!v_bad[t]) continue;
            const int64_t b = (kv_bh0 + t) / Hkv, hk = (kv_bh0 + t) % Hkv;
            max_v[t] = zero_nonfinite(sv + t * p->seq_kv * dp, v + b * p->v.batch + hk * p->v.head,
                                      call->kv_len ? call->kv_len[b] : p->seq_kv, p->v.token, D, dp, kv_bh0 + t, bad);
            if (max_v[t] < 0.0f) st = FAIL(JATTN_ERROR_OUT_OF_MEMORY, "the list of non-finite v elements");
        }
        if (st != JATTN_OK) break;
        /* no float32 denormal reaches the kernel (vk_range.c): per key/value head, its group's plan */
        JATTN_PARALLEL_FOR_DYNAMIC(1, threads)
        for (int64_t t = 0; t < nkv; t++) {
            const int64_t x = kv_bh0 + t, b = x / Hkv, hk = x % Hkv;
            const int64_t i0 = (x * group > bh0 ? x * group : bh0) - bh0;
            const int64_t i1 = ((x + 1) * group < bh0 + n ? (x + 1) * group : bh0 + n) - bh0;
            const int64_t kv_rows = call->kv_len ? call->kv_len[b] : p->seq_kv;
            const float *kh = k + b * p->k.batch + hk * p->k.head, *vh = v + b * p->v.batch + hk * p->v.head;
            float *dk = sk + t * p->seq_kv * dp, *dv = sv + t * p->seq_kv * dp;
            vk_range_plan_group(max_q + i0, i1 - i0, max_k[t], max_v[t], call->scale, range + i0);
            if (range[i0].k_shift) vk_copy_scaled(dk, kh, kv_rows, p->k.token, D, dp, range[i0].k_shift);
            if (range[i0].v_shift) {
                vk_copy_scaled(dv, vh, kv_rows, p->v.token, D, dp, range[i0].v_shift);
                if (v_bad[t]) zero_nonfinite(dv, vh, kv_rows, p->v.token, D, dp, x, NULL);
            }
            for (int64_t i = i0; i < i1; i++) {
                const int64_t qb = (bh0 + i) / H, qh = (bh0 + i) % H;
                if (range[i].q_shift)
                    vk_copy_scaled(sq + i * p->seq_q * dp, q + qb * p->q.batch + qh * p->q.head, p->seq_q, p->q.token,
                                   D, dp, range[i].q_shift);
                head_scale[bh0 + i] = range[i].scale;
                out_exp[bh0 + i] = range[i].v_shift;
            }
        }
        push_constants pc = {.seq_q = (uint32_t)p->seq_q,
                             .seq_kv = (uint32_t)p->seq_kv,
                             .heads = (uint32_t)H,
                             .bh0 = (uint32_t)bh0,
                             .batch = (uint32_t)p->batch,
                             .words_per_row = (uint32_t)kl->words_per_row,
                             .flags = (call->mask ? FLAG_MASK : 0u) | (call->lse ? FLAG_LSE : 0u) |
                                      (windowed ? FLAG_WINDOWS : 0u) | (kl->bias_rows_b ? FLAG_BIAS : 0u),
                             .scales = (uint32_t)kl->scales,
                             .group = (uint32_t)group,
                             .kv_bh0 = (uint32_t)kv_bh0,
                             .windows = (uint32_t)kl->windows,
                             .ranges = (uint32_t)kl->ranges,
                             .window_batch = kl->window_rows > 1 ? 1u : 0u,
                             .bias = (uint32_t)kl->bias,
                             .bias_b = (uint32_t)(kl->bias_rows_b > 1 ? kl->bias_rows_h * p->seq_kv : 0),
                             .bias_h = (uint32_t)(kl->bias_rows_h > 1 ? p->seq_kv : 0)};
        st = run_piece(d, s, pipeline, (uint32_t)rows, pl, &pc, n, nkv, slices, &kernel_seconds);
        if (st != JATTN_OK) break;
        float *out = call->out;
        JATTN_PARALLEL_FOR_DYNAMIC(1, threads)
        for (int64_t i = 0; i < n; i++) {
            const int64_t b = (bh0 + i) / H, h = (bh0 + i) % H;
            float *dst = out + b * p->out.batch + h * p->out.head;
            const float *src = so + i * p->seq_q * dp;
            if (out_exp[bh0 + i] == 0) {
                for (int64_t t = 0; t < p->seq_q; t++)
                    memcpy(dst + t * p->out.token, src + t * dp, (size_t)D * sizeof(float));
            } else { /* v was scaled up by 2^e (vk_range.c): one rounding, gradual underflow kept */
                const double f = ldexp(1.0, -out_exp[bh0 + i]);
                for (int64_t t = 0; t < p->seq_q; t++)
                    for (int64_t j = 0; j < D; j++) dst[t * p->out.token + j] = (float)((double)src[t * dp + j] * f);
            }
        }
        if (bad->n) restore_nonfinite(call, bad, bh0, n);
        if (call->lse) memcpy(call->lse + bh0 * p->seq_q, sl, (size_t)(n * p->seq_q) * sizeof(float));
    }
    s->last_kernel_seconds = kernel_seconds;
    return st;
}

static jattn_status vk_forward(const jattn_call *call, const jattn_plan *plan) {
    vk_device *d = vk_device_get();
    const int m = (int)((const vk_spirv_module *)plan->kernel - jattn_vk_modules);
    VkPipeline pipeline;
    jattn_status st = vk_device_pipeline(d, m, &pipeline);
    if (st != JATTN_OK) return st;

    vk_ctx_state *s = call->ctx ? call->ctx->backend_state[JATTN_BACKEND_VK] : NULL;
    vk_ctx_state *owned = NULL;
    if (!s) {
        st = state_create(d, &s);
        if (st != JATTN_OK) return st;
        if (call->ctx)
            call->ctx->backend_state[JATTN_BACKEND_VK] = s;
        else
            owned = s;
    }
    piece_plan pl;
    plan_pieces(d, call->problem, plan, m, &pl);
    host_arrays ha;
    memset(&ha, 0, sizeof ha);
    ha.max_q = malloc((size_t)(pl.heads_max + 2 * pl.kv_max) * sizeof *ha.max_q);
    ha.range = malloc((size_t)pl.heads_max * sizeof *ha.range);
    ha.v_bad = calloc((size_t)pl.kv_max, 1);
    if (!ha.max_q || !ha.range || !ha.v_bad)
        st = FAIL(JATTN_ERROR_OUT_OF_MEMORY, "host arrays of %lld heads", (long long)pl.heads_max);
    if (st == JATTN_OK) st = reserve_all(d, s, &pl);
    if (st == JATTN_OK) {
        ha.max_k = ha.max_q + pl.heads_max;
        ha.max_v = ha.max_k + pl.kv_max;
        update_descriptors(d, s);
        st = forward_pieces(call, d, s, pipeline, m, &pl, &ha);
    }
    free(ha.bad.at);
    free(ha.v_bad);
    free(ha.range);
    free(ha.max_q);
    state_free(d, owned);
    return st;
}

const jattn_backend_ops jattn_backend_vk = {
    .id = JATTN_BACKEND_VK,
    .is_gpu = 1,
    .workspace_memory = JATTN_MEMORY_HOST,
    .select = vk_select,
    .workspace_size = vk_workspace_size,
    .forward = vk_forward,
    .release_ctx = vk_release_ctx,
    /* no backward yet: jattn_backward answers UNSUPPORTED for vk */
};
