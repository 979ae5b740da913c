/* jattn_parallel.h: sequence-parallel attention (libjattn_parallel), on top of jattn.h.
 *
 * One attention spread over P ranks (GPUs or processes) by its sequence, for problems that
 * outgrow one device. Declared here, defined in the library libjattn_parallel, which sits on
 * libjattn's public API (link `-ljattn_parallel -ljattn`; pkg-config jattn-parallel; CMake
 * find_package(jattn COMPONENTS parallel), target jattn::parallel or jattn::parallel_static),
 * which links MPI and NCCL when they were found at build time. libjattn itself depends on
 * neither. Without a transport built, the calls below exist and return
 * JATTN_ERROR_BACKEND_UNAVAILABLE for it, saying so.
 *
 * Sharding. Rank r holds query tokens [o_r, o_r + S_r) of the whole sequence, o_r = S_0 + ... +
 * S_{r-1}: its q [B, H, S_r, D], and k, v [B, H, Skv_r, D] (key tokens sharded by their own
 * lengths) or k, v [B, H, Skv, D] whole on every rank (cross-attention to replicated text
 * tokens), all through the strides of `whole`. It receives its shard of the output,
 * out [B, H, S_r, D] (whole.out strides), and of the log-sum-exp, lse [B, H, S_r] contiguous.
 * Shards may have any lengths >= 1 (S need not divide by P); the length arrays are the same
 * on every rank.
 *
 * Algorithms (both compute every query row against every key of the whole problem):
 *  - Ulysses: all-to-all from sequence shards to head shards (rank r gets H/P heads, the
 *    first H mod P ranks one more; a rank with none idles), one local attention over the whole
 *    sequence, all-to-all back. Each output row is the single-device computation of its head.
 *    Moves q, k, v and out once: 4 (P-1)/P^2 of B*H*S*D floats per rank.
 *  - Ring: K/V shards travel around the ring in P-1 steps, each transfer overlapped with the
 *    attention of the shard in hand (on the GPU, on a second stream); the partial outputs are
 *    merged by their log-sum-exp in float32 (max-subtracted weights). Moves 2 (P-1)/P of the
 *    B*H*S*D floats of K and V per rank. With k, v replicated nothing moves: each rank attends
 *    its queries to the whole k, v in one call.
 *  - AUTO: ring when k, v are replicated; else Ulysses when P divides H; else ring.
 * The assembled output meets the f32 gate of the single-device call (docs/DESIGN.md §2).
 *
 * Communicators are the caller's: jattn opens none, never changes the device a rank selected,
 * and calls the collectives of the communicator it is given, in the same order on every rank
 * (a call is collective: every rank of the communicator makes it, with agreeing arguments).
 *  - MPI (host memory, exec.memory = JATTN_MEMORY_HOST, any host backend; also cuda on host
 *    pointers): handle is the address of the caller's MPI_Comm (`MPI_Comm comm; ... &comm`),
 *    an intra-communicator of P processes, MPI initialised. During a call the communicator's
 *    error handler is MPI_ERRORS_RETURN (the caller's is restored before returning); ring
 *    messages use tag 31415.
 *  - NCCL (device memory, exec.memory = JATTN_MEMORY_DEVICE, backend cuda): handle is the
 *    address of the caller's ncclComm_t, whose device must be the current device; the work is
 *    queued on exec.cuda_stream. The call synchronises once, on a stream of its own: the
 *    agreement check below brings every rank's descriptor to the host. So it cannot be
 *    captured in a CUDA graph.
 *
 * Errors. Before any data moves, every rank validates its own arguments, then one all-gather
 * of a small fixed-size descriptor per rank (its shapes, shard arrays, algorithm and the status
 * of its own validation) lets every rank decide the same thing: every rank of the communicator
 * returns the same status and the same message ("rank 2: q: NULL"; "ranks disagree: seq_q is
 * 256 on rank 0, 255 on rank 1"), and none waits for a peer that has given up. A NULL or
 * MPI_COMM_NULL communicator fails on the rank that passes it, which cannot reach its peers:
 * the ranks of the communicator the others hold see a communicator of the wrong size. Failures
 * of MPI or NCCL itself during the data movement return JATTN_ERROR_TRANSPORT on the ranks that
 * see them; nothing is written to out or lse on failures found before any data moves.
 */
#ifndef JATTN_PARALLEL_H
#define JATTN_PARALLEL_H

#include "jattn.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum jattn_sp_algorithm {
    JATTN_SP_AUTO = 0,    /* chosen by shape (above) */
    JATTN_SP_ULYSSES = 1, /* all-to-all over heads */
    JATTN_SP_RING = 2     /* K/V around a ring, partial outputs merged by their lse */
} jattn_sp_algorithm;

typedef enum jattn_sp_transport {
    JATTN_SP_MPI = 1, /* host memory; handle: MPI_Comm * */
    JATTN_SP_NCCL = 2 /* device memory; handle: ncclComm_t * */
} jattn_sp_transport;

/* The caller's communicator, named without including mpi.h or nccl.h. */
typedef struct jattn_sp_comm {
    jattn_sp_transport transport;
    const void *handle; /* &the caller's MPI_Comm, or &the caller's ncclComm_t */
} jattn_sp_comm;

typedef struct jattn_sp_problem {
    /* batch, heads, head_dim, scale, dtype as jattn_problem; seq_q and seq_kv are the WHOLE
     * sequence's lengths; the strides q, k, v, out address this rank's shard tensors. */
    jattn_problem whole;
    int ranks;                    /* P >= 1: the communicator's size */
    const int64_t *seq_q_shards;  /* [P] query tokens of each rank, >= 1, summing to seq_q */
    const int64_t *seq_kv_shards; /* [P] key tokens of each rank, >= 1, summing to seq_kv; or NULL:
                                     k and v are whole on every rank (cross-attention) */
    jattn_sp_algorithm algorithm;
} jattn_sp_problem;

/* @return the problem of rank `rank` for FLUX-style shards: q, k, v head-major
 *         [B, H, S_r, D], out token-major [B, S_r, H*D], float32, default scale, algorithm AUTO,
 *         seq_q and seq_kv the sums of the arrays. With seq_kv_shards NULL (k, v replicated)
 *         seq_kv is seq_q and k, v are [B, H, seq_q, D]; for another length set whole.seq_kv and
 *         whole.k, whole.v. Nothing is checked here: the calls that use it validate it. */
JATTN_API jattn_sp_problem jattn_sp_problem_flux(int64_t batch, int64_t heads, int64_t head_dim, int ranks,
                                                 const int64_t *seq_q_shards, const int64_t *seq_kv_shards, int rank);

/* Splits seq tokens over `ranks` as evenly as possible: shards[r] = seq / ranks, plus one for
 * the first seq % ranks ranks.
 * @return JATTN_OK and shards[0..ranks) filled; JATTN_ERROR_NULL_POINTER, or
 *         JATTN_ERROR_INVALID_DIMENSION when ranks < 1 or seq < ranks (a shard would be empty). */
JATTN_API jattn_status jattn_sp_even_shards(int64_t seq, int ranks, int64_t *shards);

/* What a sequence-parallel call runs on this rank. Strings have static storage. */
typedef struct jattn_sp_selection {
    jattn_sp_algorithm algorithm; /* ULYSSES or RING, never AUTO */
    const char *algorithm_name;   /* "ulysses", "ring" */
    const char *transport_name;   /* "mpi", "nccl" */
    int rank, ranks;
    int64_t heads;         /* heads this rank attends: its head group (Ulysses), H (ring) */
    int attention_calls;   /* jattn_forward calls this rank makes: 1 (Ulysses, or ring with
                              replicated k, v; 0 for a Ulysses rank without heads), P (ring) */
    jattn_selection local; /* backend and kernel of this rank's attention calls (of its
                              largest one where they differ) */
} jattn_sp_selection;

/* This rank's part of a sequence-parallel call: validates this rank's arguments (not the
 * agreement between ranks, which only jattn_sp_forward checks) without communicating.
 * @return JATTN_OK and `*selection` filled; otherwise the status of the first problem found on
 *         this rank, jattn_last_error() saying why, `*selection` untouched. */
JATTN_API jattn_status jattn_sp_select(const jattn_sp_problem *problem, const jattn_exec *exec,
                                       const jattn_sp_comm *comm, jattn_sp_selection *selection);

/* @return JATTN_OK and `*bytes` = the workspace this rank's jattn_sp_forward needs (host memory
 *         for MPI, device memory for NCCL): its communication buffers, partial outputs and the
 *         local attention's own workspace; otherwise the status jattn_sp_select would give.
 *         Ranks of different shard lengths may need different sizes. No communication. */
JATTN_API jattn_status jattn_sp_workspace_size(const jattn_sp_problem *problem, const jattn_exec *exec,
                                               const jattn_sp_comm *comm, size_t *bytes);

/* A context for repeated sequence-parallel calls: small host scratch (every rank's
 * descriptor), a grow-only host workspace when none is given, and on the GPU a second stream,
 * two events and a device buffer of P descriptors, made on the current device at the first
 * device call (one context per device, used by one thread at a time). With a context and a
 * workspace, calls allocate nothing. A NULL context makes the call create and free them. */
typedef struct jattn_sp_ctx jattn_sp_ctx;

/* @return JATTN_OK and `*ctx` a new context; JATTN_ERROR_NULL_POINTER or JATTN_ERROR_OUT_OF_MEMORY. */
JATTN_API jattn_status jattn_sp_ctx_create(jattn_sp_ctx **ctx);
/* Frees a context and everything it holds. Accepts NULL. */
JATTN_API void jattn_sp_ctx_free(jattn_sp_ctx *ctx);

/* The sequence-parallel forward: a collective call of every rank of `comm`, each passing its
 * shards (see above). exec as for jattn_forward; exec->workspace, when given, is this rank's
 * jattn_sp_workspace_size bytes (host memory for MPI, device memory for NCCL); without one
 * it comes from ctx (host) or the stream-ordered pool (device). lse may be NULL.
 * @return JATTN_OK on every rank, or on every rank of the communicator the same status and
 *         message (see Errors above); JATTN_ERROR_TRANSPORT when MPI or NCCL fails. */
JATTN_API jattn_status jattn_sp_forward(jattn_sp_ctx *ctx, const jattn_sp_problem *problem, const jattn_exec *exec,
                                        const jattn_sp_comm *comm, const void *q, const void *k, const void *v,
                                        void *out, float *lse);

#ifdef __cplusplus
}
#endif
#endif /* JATTN_PARALLEL_H */
