/* See sp_threads_transport.h. */
#include "sp_threads_transport.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

typedef struct posted {
    const float *send;
    const int64_t *count, *off; /* alltoallv */
    int64_t exchange_count;     /* exchange_start */
    int to;
    float *recv;
    int64_t recv_count;
    int from;
} posted;

typedef struct rank_state {
    spt_world *world;
    int rank;
    void *stream;
} rank_state;

struct spt_world {
    int ranks;
    spt_mover mover;
    pthread_barrier_t barrier;
    posted *post;          /* [ranks] */
    unsigned char *gather; /* allgather staging */
    size_t gather_bytes;
    pthread_mutex_t lock;
    rank_state *state; /* [ranks] */
};

static int mem_copy(spt_world *w, void *dst, const void *src, size_t bytes) {
    if (!bytes) return 0;
    if (w->mover.copy) return w->mover.copy(dst, src, bytes);
    memcpy(dst, src, bytes);
    return 0;
}

static jattn_status failed(const char *what) {
    (void)what;
    return JATTN_ERROR_TRANSPORT;
}

static rank_state *me(sp_collectives *c) { return c->state; }

static jattn_status threads_allgather(sp_collectives *c, const void *mine, void *all, size_t bytes) {
    spt_world *w = me(c)->world;
    pthread_mutex_lock(&w->lock);
    if (w->gather_bytes < bytes * (size_t)w->ranks) {
        unsigned char *g = realloc(w->gather, bytes * (size_t)w->ranks);
        if (g) {
            w->gather = g;
            w->gather_bytes = bytes * (size_t)w->ranks;
        }
    }
    pthread_mutex_unlock(&w->lock);
    pthread_barrier_wait(&w->barrier); /* every rank has grown the buffer */
    int ok = w->gather_bytes >= bytes * (size_t)w->ranks;
    if (ok) memcpy(w->gather + (size_t)c->rank * bytes, mine, bytes);
    pthread_barrier_wait(&w->barrier);
    if (ok) memcpy(all, w->gather, bytes * (size_t)w->ranks);
    pthread_barrier_wait(&w->barrier); /* nobody writes the next gather before everyone read */
    return ok ? JATTN_OK : failed("allgather");
}

static jattn_status threads_alltoallv(sp_collectives *c, const float *send, const int64_t *send_count,
                                      const int64_t *send_off, float *recv, const int64_t *recv_count,
                                      const int64_t *recv_off) {
    rank_state *r = me(c);
    spt_world *w = r->world;
    int bad = w->mover.sync && w->mover.sync(r->stream);
    posted *p = &w->post[c->rank];
    p->send = send;
    p->count = send_count;
    p->off = send_off;
    pthread_barrier_wait(&w->barrier);
    for (int s = 0; s < w->ranks; s++) {
        const posted *from = &w->post[s];
        if (from->count[c->rank] != recv_count[s]) bad = 1; /* the ranks disagree on a block's size */
        if (!bad)
            bad =
                mem_copy(w, recv + recv_off[s], from->send + from->off[c->rank], (size_t)recv_count[s] * sizeof(float));
    }
    pthread_barrier_wait(&w->barrier);
    return bad ? failed("alltoallv") : JATTN_OK;
}

static jattn_status threads_exchange_start(sp_collectives *c, const float *send, int64_t send_count, int to,
                                           float *recv, int64_t recv_count, int from) {
    rank_state *r = me(c);
    spt_world *w = r->world;
    posted *p = &w->post[c->rank];
    if (w->mover.sync && w->mover.sync(r->stream)) return failed("sync");
    p->send = send;
    p->exchange_count = send_count;
    p->to = to;
    p->recv = recv;
    p->recv_count = recv_count;
    p->from = from;
    return JATTN_OK;
}

static jattn_status threads_exchange_wait(sp_collectives *c) {
    spt_world *w = me(c)->world;
    const posted *p = &w->post[c->rank], *src = &w->post[p->from];
    pthread_barrier_wait(&w->barrier);
    int bad = src->to != c->rank || src->exchange_count != p->recv_count;
    if (!bad) bad = mem_copy(w, p->recv, src->send, (size_t)p->recv_count * sizeof(float));
    pthread_barrier_wait(&w->barrier);
    return bad ? failed("exchange") : JATTN_OK;
}

spt_world *spt_world_create(int ranks, spt_mover mover) {
    spt_world *w = calloc(1, sizeof *w);
    if (!w) return NULL;
    w->ranks = ranks;
    w->mover = mover;
    w->post = calloc((size_t)ranks, sizeof *w->post);
    w->state = calloc((size_t)ranks, sizeof *w->state);
    if (!w->post || !w->state || pthread_barrier_init(&w->barrier, NULL, (unsigned)ranks) != 0) {
        free(w->post);
        free(w->state);
        free(w);
        return NULL;
    }
    pthread_mutex_init(&w->lock, NULL);
    return w;
}

void spt_world_free(spt_world *w) {
    if (!w) return;
    pthread_barrier_destroy(&w->barrier);
    pthread_mutex_destroy(&w->lock);
    free(w->post);
    free(w->state);
    free(w->gather);
    free(w);
}

void spt_world_collectives(spt_world *w, int rank, void *stream, sp_collectives *c) {
    rank_state *r = &w->state[rank];
    r->world = w;
    r->rank = rank;
    r->stream = stream;
    static const sp_collectives threads = {.name = "threads",
                                           .memory = JATTN_MEMORY_HOST,
                                           .max_message = INT64_MAX,
                                           .allgather = threads_allgather,
                                           .alltoallv = threads_alltoallv,
                                           .exchange_start = threads_exchange_start,
                                           .exchange_wait = threads_exchange_wait};
    *c = threads;
    c->rank = rank;
    c->size = w->ranks;
    c->memory = w->mover.memory;
    c->state = r;
}

typedef struct thread_arg {
    void (*fn)(int, void *);
    void *arg;
    int rank;
} thread_arg;

static void *thread_main(void *p) {
    thread_arg *a = p;
    a->fn(a->rank, a->arg);
    return NULL;
}

int spt_run_ranks(int ranks, void (*fn)(int rank, void *arg), void *arg) {
    pthread_t *t = calloc((size_t)ranks, sizeof *t);
    thread_arg *a = calloc((size_t)ranks, sizeof *a);
    if (!t || !a) {
        free(t);
        free(a);
        return -1;
    }
    /* A rank that cannot start leaves its peers at a barrier: fail loudly instead of waiting. */
    for (int r = 0; r < ranks; r++) {
        a[r] = (thread_arg){fn, arg, r};
        if (pthread_create(&t[r], NULL, thread_main, &a[r]) != 0) abort();
    }
    for (int r = 0; r < ranks; r++) pthread_join(t[r], NULL);
    free(t);
    free(a);
    return 0;
}
