/* The forward task of the cpu backend's flash attention (cpu_kernels.h, task): part of one
 * instruction set's instance, included by cpu_flash_template.h after the micro-kernels
 * (cpu_microkernels_template.h) it runs. */
#ifndef JK_NQV
#error "included by cpu_flash_template.h, which defines what this part needs"
#endif

/* out rows of a query block with no key to attend: 0, and lse -inf. */
static void JK(write_unattended)(const cpu_flash_args *a, int64_t b, int64_t h, int64_t q0, int nq) {
    float *out = a->out + b * a->os.batch + h * a->os.head + q0 * a->os.token;
    for (int i = 0; i < nq; i++) memset(out + i * a->os.token, 0, (size_t)a->D * sizeof *out);
    if (a->lse)
        for (int i = 0; i < nq; i++) a->lse[(b * a->H + h) * a->Sq + q0 + i] = -INFINITY;
}

/* ---- the task: a group of query blocks of one (b, h), all the keys they attend -----------
 * nblk (1..CPU_GROUP_MAX) query blocks of at most QB queries each, each with its own state, walk
 * the key blocks together: for each key block, every block of the group in turn. A K/V block
 * (BK rows of K and of V, 2 BK D floats) is then read from memory or L3 once per group and
 * reused from L2 by the group's other blocks, where a lone block streams all of the head's K and
 * V (4.7 MB at S = 4608, D = 128: more than L2). Each block's arithmetic is exactly the lone
 * block's (the same key blocks in the same order into its own running state), so the bits do not
 * depend on the group size.
 * reads  q rows of (b, h) [B, H, Sq, D] and the k, v rows [B, Hkv, Skv, D] of its key/value head
 *        hk = h / (H / Hkv) that the blocks attend (never another row), at any strides;
 * writes out rows [B, H, Sq, D] of the blocks and lse [B, H, Sq] (when requested).
 * Masks (cpu_kernels.h, cpu_key_blocks): list mode walks the keys the padding leaves; grid mode
 * walks each block's cells of [ilo, ihi) (members sharing ilo walk them together, each taking the
 * keys below its own ihi: a prefix), adds the key bias to the scores as a pair (add_bias), and in a
 * key block that holds keys past some row's window sets those scores to -inf (mask_block) before a
 * SAFE softmax; rows whose window holds no attended key get out 0 and lse -inf.
 * Workspace: cpu_fwd_workspace_layout (cpu_kernels.h); a key block whose rows are not
 * consecutive (a key mask, or -inf biases) is packed into its pk, pv once for the group, so
 * masked rows are never read. */
typedef struct JK(fwd_block) {
    float *qt, *ot, *otl, *m, *ml, *l, *ll, *alpha;
    int64_t q0;
    int nq, plain;
    /* grid mode: the windows (cpu_query_windows), their smallest end over the rows, and which rows
     * met an attended key */
    int64_t ilo, ihi, min_hi;
    int64_t lane_hi[JK_QB];
    unsigned char seen[JK_QB];
} JK(fwd_block);

/* One query block against one key block: n rows kb, vb at row strides ks, vs; bh, bl the key
 * bias of those rows in dot-product units (bias_pair; NULL: no bias); rows their key indices when
 * some lie past a row's window (NULL: every row attends every key of the block), and pz the [BK][D]
 * scratch of such a block whose V rows hold an Inf or NaN (rows_nonfinite). */
static void JK(task_block)(const cpu_flash_args *a, const JK(fwd_block) * s, int n, const float *kb, ptrdiff_t ks,
                           const float *vb, ptrdiff_t vs, float *st, float *sl, const float *bh, const float *bl,
                           const int64_t *rows, float *pz) {
    const int64_t D = a->D;
    const int exact = D <= JK_EXACT_D;
    const float *qt = s->qt;
    int j = 0;
    if (s->plain) {
        for (; j + JK_SJP <= n; j += JK_SJP) /* sl = 0 is not written, softmax_block_plain never reads it */
            JK(scores_rows_plain)(JK_SJP, D, kb + j * ks, ks, qt, st + j * JK_QB, NULL);
        if (j < n) JK(scores_plain)(n - j, D, kb + j * ks, ks, qt, st + j * JK_QB, sl + j * JK_QB);
        j = n;
    } else if (D > JK_EXACT_D)
        for (; j + JK_SJ <= n; j += JK_SJ)
            JK(scores_rows)(JK_SJ, D, kb + j * ks, ks, qt, st + j * JK_QB, sl + j * JK_QB);
    for (; j < n; j += JK_SJ)
        JK(scores)(n - j < JK_SJ ? n - j : JK_SJ, D, kb + j * ks, ks, qt, st + j * JK_QB, sl + j * JK_QB);
    if (bh) JK(add_bias)(n, s->plain, st, sl, bh, bl);
    if (rows) {
        JK(mask_block)(n, rows, s->nq, s->lane_hi, st, sl);
        JK(softmax_block_masked)
        (n, !s->plain || bh, a->scale_log2e, st, sl, s->m, s->ml, s->l, s->ll, s->alpha);
    } else if (s->plain && !bh)
        JK(softmax_block_plain)(n, a->scale_log2e, st, s->m, s->ml, s->l, s->ll, s->alpha);
    else
        JK(softmax_block)(n, a->scale_log2e, st, sl, s->m, s->ml, s->l, s->ll, s->alpha);
    const float *vp = vb; /* V rows as P V reads them: with Inf and NaN as 0 where a masked row would read them */
    ptrdiff_t vps = vs;
    const int fix = rows && JK(rows_nonfinite)(n, D, vb, vs);
    if (fix) {
        JK(copy_finite)(n, D, vb, vs, pz);
        vp = pz, vps = (ptrdiff_t)D;
    }
    if (exact)
        JK(pv_exact)((int)D, n, vp, vps, st, s->alpha, s->ot, s->otl);
    else {
        int64_t d = 0;
        for (; d + JK_DR <= D; d += JK_DR) JK(pv_rows)(JK_DR, n, vp + d, vps, st, s->alpha, s->ot + d * JK_QB);
        if (d < D) JK(pv)((int)(D - d), n, vp + d, vps, st, s->alpha, s->ot + d * JK_QB);
    }
    if (fix) JK(add_nonfinite)(n, rows, D, vb, vs, st, s->nq, s->lane_hi, s->ot);
}

/* The largest |k|^2 over the keys a grid-mode block walks (the attended keys of [ilo, ihi)). */
static double JK(walked_key_norm2)(const cpu_flash_args *a, int64_t b, int64_t h, int64_t ilo, int64_t ihi) {
    const float *norm = a->k_norm_keys + (b * a->Hkv + cpu_kv_head(a, h)) * a->Skv;
    const float *bias = cpu_bias_row(a, b, h);
    const int64_t end = a->kv_len && a->kv_len[b] < ihi ? a->kv_len[b] : ihi;
    float best = 0.0f;
    if (!a->mask && !bias)
        for (int64_t j = ilo; j < end; j++) best = norm[j] > best ? norm[j] : best;
    else
        for (int64_t j = ilo; j < end; j++)
            if (cpu_key_listed(a, b, bias, j) && norm[j] > best) best = norm[j];
    return (double)best;
}

static void JK(task)(const cpu_flash_args *a, int64_t b, int64_t h, const cpu_qblock *qb, int nblk, float *ws) {
    const int64_t D = a->D;
    const int exact = D <= JK_EXACT_D;
    const int64_t hk = cpu_kv_head(a, h);
    cpu_key_blocks keys;
    int64_t rows[JK_BK];
    int n = 0;
    JK(fwd_block) blk[CPU_GROUP_MAX];
    for (int g = 0; g < nblk; g++) {
        blk[g].q0 = qb[g].q0;
        blk[g].nq = qb[g].nq;
    }
    if (!a->grid) {
        cpu_key_blocks_init(&keys, a, b);
        n = cpu_key_blocks_next(&keys, JK_BK, rows);
        if (n == 0) {
            for (int g = 0; g < nblk; g++) JK(write_unattended)(a, b, h, blk[g].q0, blk[g].nq);
            return;
        }
    } else
        for (int g = 0; g < nblk; g++) {
            JK(fwd_block) *s = &blk[g];
            cpu_query_windows(a, b, s->q0, s->nq, s->lane_hi, &s->ilo, &s->ihi);
            s->min_hi = s->ihi;
            for (int i = 0; i < s->nq; i++) {
                if (s->lane_hi[i] < s->min_hi) s->min_hi = s->lane_hi[i];
                s->seen[i] = 0;
            }
        }
    const cpu_fwd_layout w = cpu_fwd_workspace_layout(JK_QB, JK_BK, D, nblk, a->grid);
    float *st = ws + w.st, *sl = ws + w.sl, *pk = ws + w.pk, *pv = ws + w.pv;
    float *pz = a->grid ? ws + w.pz : NULL;
    double kn_before = 0.0; /* grid mode: max |k|^2 over the walked keys of the block before */
    for (int g = 0; g < nblk; g++) {
        JK(fwd_block) *s = &blk[g];
        float *state = ws + w.block + g * w.block_floats;
        s->qt = state + w.qt, s->ot = state + w.ot;
        s->m = state + w.m, s->ml = state + w.ml, s->l = state + w.l, s->ll = state + w.ll, s->alpha = state + w.alpha;
        s->otl = state + w.otl; /* D <= JK_EXACT_D only: the low parts of Ot (pv_exact) */
        /* Pack Qt = Q^T, lanes past the last query zero. */
        const float *q = a->q + b * a->qs.batch + h * a->qs.head + s->q0 * a->qs.token;
        JK(pack_qt)(s->nq, D, q, (ptrdiff_t)a->qs.token, s->qt);
        /* The a-priori bound of this block's logits in exp2 units: |c q.k| <= c max|q| max|k|.
         * Below JK_PLAIN_LOGIT_BOUND the plain dot product's rounding (rms ~ u * bound / sqrt(2),
         * any D) is no larger than the compensated kernel's on the gate's hardest inputs (logits
         * of std 8 in natural units), so the plain kernel runs (NOTES.md §3); NaN/inf norms never do.
         * max|k| over the keys the block walks: those of (b, hk) the padding leaves (list mode), or
         * those of its window range (grid mode). */
        double kn;
        if (!a->grid)
            kn = a->k_norm2[b * a->Hkv + hk];
        else if (g > 0 && s->ilo == blk[g - 1].ilo && s->ihi >= blk[g - 1].ihi) /* the keys before's and more */
            kn = fmax(kn_before, JK(walked_key_norm2)(a, b, h, blk[g - 1].ihi, s->ihi));
        else
            kn = JK(walked_key_norm2)(a, b, h, s->ilo, s->ihi);
        kn_before = kn;
        const double qk = sqrt(JK(qt_max_norm2)(s->nq, D, s->qt, q, (ptrdiff_t)a->qs.token) * kn);
        s->plain = D > JK_EXACT_D && qk <= JK_PLAIN_QK_MAX && fabs((double)a->scale_log2e) * qk <= JK_PLAIN_LOGIT_BOUND;
        for (int i = 0; i < JK_QB; i++) {
            s->m[i] = -INFINITY;
            s->ml[i] = s->l[i] = s->ll[i] = 0.0f;
        }
        memset(s->ot, 0, (size_t)(D * JK_QB) * sizeof *s->ot);
        if (exact) memset(s->otl, 0, (size_t)(D * JK_QB) * sizeof *s->otl);
    }

    const float *kh = a->k + b * a->ks.batch + hk * a->ks.head;
    const float *vh = a->v + b * a->vs.batch + hk * a->vs.head;
    if (!a->grid)
        for (; n > 0; n = cpu_key_blocks_next(&keys, JK_BK, rows)) {
            /* The block's K and V rows in place when consecutive (always, without a mask), else packed. */
            ptrdiff_t ks = (ptrdiff_t)a->ks.token, vs = (ptrdiff_t)a->vs.token;
            const float *kb = kh + rows[0] * ks, *vb = vh + rows[0] * vs;
            if (rows[n - 1] - rows[0] != n - 1) {
                JK(pack_rows)(n, rows, D, kh, ks, pk);
                JK(pack_rows)(n, rows, D, vh, vs, pv);
                kb = pk, vb = pv, ks = vs = (ptrdiff_t)D;
            }
#if JK_NQV == 1
            JK(prefetch_rows)(n, D, vb, vs);
            if (keys.next < keys.end) {
                const int64_t next = keys.end - keys.next;
                JK(prefetch_rows)(next < JK_BK ? next : JK_BK, D, kh + keys.next * a->ks.token, (ptrdiff_t)a->ks.token);
            }
#endif
            /* the next key block's rows (when consecutive: without a mask), a share per block */
            const int64_t nn = keys.mask ? 0 : keys.end - keys.next < JK_BK ? keys.end - keys.next : JK_BK;
            const int64_t next = nn > 0 ? keys.next : 0; /* no pointer past the rows when there is none */
            const float *kn = kh + next * a->ks.token, *vn = vh + next * a->vs.token;
            for (int g = 0; g < nblk; g++) {
                if (JK_NQV > 1 && nn > 0) {
                    const int64_t r0 = nn * g / nblk, r1 = nn * (g + 1) / nblk;
                    JK(prefetch_rows_l2)(r0, r1, D, kn, (ptrdiff_t)a->ks.token);
                    JK(prefetch_rows_l2)(r0, r1, D, vn, (ptrdiff_t)a->vs.token);
                }
                JK(task_block)(a, &blk[g], n, kb, ks, vb, vs, st, sl, NULL, NULL, NULL, NULL);
            }
        }
    else {
        const float *bias = cpu_bias_row(a, b, h);
        JK_ALIGNED float bh[JK_BK], bl[JK_BK];
        /* members sharing a window start walk its cells together (the blocks of one segment) */
        for (int g0 = 0, g1; g0 < nblk; g0 = g1) {
            int64_t top = blk[g0].ihi;
            for (g1 = g0 + 1; g1 < nblk && blk[g1].ilo == blk[g0].ilo; g1++)
                if (blk[g1].ihi > top) top = blk[g1].ihi;
            if (top <= blk[g0].ilo) continue;
            cpu_key_blocks_init_grid(&keys, a, b, h, blk[g0].ilo, top, JK_BK);
            for (n = cpu_key_blocks_next(&keys, JK_BK, rows); n > 0; n = cpu_key_blocks_next(&keys, JK_BK, rows)) {
                ptrdiff_t ks = (ptrdiff_t)a->ks.token, vs = (ptrdiff_t)a->vs.token;
                const float *kb = kh + rows[0] * ks, *vb = vh + rows[0] * vs;
                if (rows[n - 1] - rows[0] != n - 1) {
                    JK(pack_rows)(n, rows, D, kh, ks, pk);
                    JK(pack_rows)(n, rows, D, vh, vs, pv);
                    kb = pk, vb = pv, ks = vs = (ptrdiff_t)D;
                }
                if (bias) JK(bias_pair)(n, rows, bias, a->scale, bh, bl);
                /* the next cell's rows (without a key mask), a share per block */
                const int64_t nn = keys.mask ? 0 : keys.end - keys.next < JK_BK ? keys.end - keys.next : JK_BK;
                const int64_t next = nn > 0 ? keys.next : 0;
                const float *kn = kh + next * a->ks.token, *vn = vh + next * a->vs.token;
                for (int g = g0; g < g1; g++) {
                    JK(fwd_block) *s = &blk[g];
                    if (nn > 0) {
                        const int64_t r0 = nn * (g - g0) / (g1 - g0), r1 = nn * (g - g0 + 1) / (g1 - g0);
                        JK(prefetch_rows_l2)(r0, r1, D, kn, (ptrdiff_t)a->ks.token);
                        JK(prefetch_rows_l2)(r0, r1, D, vn, (ptrdiff_t)a->vs.token);
                    }
                    int ng = n; /* the member's keys: those below its ihi, a prefix */
                    while (ng > 0 && rows[ng - 1] >= s->ihi) ng--;
                    if (ng == 0) continue;
                    for (int i = 0; i < s->nq; i++) s->seen[i] |= rows[0] < s->lane_hi[i];
                    const int64_t *masked = rows[ng - 1] >= s->min_hi ? rows : NULL;
                    JK(task_block)(a, s, ng, kb, ks, vb, vs, st, sl, bias ? bh : NULL, bias ? bl : NULL, masked, pz);
                }
            }
        }
    }

    for (int g = 0; g < nblk; g++) {
        const JK(fwd_block) *s = &blk[g];
        /* out[q][d] = Ot[d][q] / l[q]: the normalisation and the transpose in one write. */
        float *out = a->out + b * a->os.batch + h * a->os.head + s->q0 * a->os.token;
        if (exact) /* the pairs (ot + otl) / (l + ll), one rounding: within ~1 ulp of the float64 sums */
            for (int i = 0; i < s->nq; i++) {
                const double l = (double)s->l[i] + s->ll[i];
                float *o = out + i * a->os.token;
                for (int64_t d = 0; d < D; d++)
                    o[d] = (float)(((double)s->ot[d * JK_QB + i] + s->otl[d * JK_QB + i]) / l);
            }
        else
            JK(write_out_pair)(s->nq, D, s->ot, s->l, s->ll, out, (ptrdiff_t)a->os.token);
        if (a->lse) {
            float *lse = a->lse + (b * a->H + h) * a->Sq + s->q0;
            for (int i = 0; i < s->nq; i++)
                lse[i] = (float)(((double)s->m[i] + s->ml[i]) * a->scale + log((double)s->l[i] + s->ll[i]));
        }
        if (a->grid) /* rows whose window holds no attended key */
            for (int i = 0; i < s->nq; i++)
                if (!s->seen[i]) JK(write_unattended)(a, b, h, s->q0 + i, 1);
    }
}
