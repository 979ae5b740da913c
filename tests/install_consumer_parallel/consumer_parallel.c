/* A consumer of the installed libjattn_parallel: every rank holds its shard of a FLUX-layout
 * problem, jattn_sp_forward runs it with each algorithm over MPI_COMM_WORLD, and rank 0 checks
 * the gathered output against the ref backend's whole-problem output.
 * Run as `mpirun -np P consumer_parallel LABEL`; exit 0 when every algorithm matches. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include <jattn_parallel.h>
#include <mpi.h>

enum { B = 1, H = 4, S = 64, D = 32, MAX_RANKS = 16 };

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank = 0, size = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int64_t shards[MAX_RANKS];
    if (size > MAX_RANKS || jattn_sp_even_shards(S, size, shards) != JATTN_OK) MPI_Abort(MPI_COMM_WORLD, 2);
    static float q[B * H * S * D], k[B * H * S * D], v[B * H * S * D], ref[B * S * H * D], out[B * S * H * D],
        whole[B * S * H * D];
    unsigned x = 12345;
    for (int i = 0; i < B * H * S * D; i++) {
        x = x * 1664525u + 1013904223u, q[i] = (float)(x >> 8) / 16777216.0f - 0.5f;
        x = x * 1664525u + 1013904223u, k[i] = (float)(x >> 8) / 16777216.0f - 0.5f;
        x = x * 1664525u + 1013904223u, v[i] = (float)(x >> 8) / 16777216.0f - 0.5f;
    }
    int64_t first = 0;
    for (int r = 0; r < rank; r++) first += shards[r];
    MPI_Comm comm = MPI_COMM_WORLD;
    const jattn_sp_comm c = {JATTN_SP_MPI, &comm};
    const jattn_sp_algorithm algorithms[2] = {JATTN_SP_RING, JATTN_SP_ULYSSES};
    int ok = 1;
    for (int a = 0; a < 2; a++) {
        jattn_sp_problem sp = jattn_sp_problem_flux(B, H, D, size, shards, shards, rank);
        sp.whole.q = sp.whole.k = sp.whole.v = jattn_strides_head_major(H, S, D); /* views into the whole */
        sp.algorithm = algorithms[a];
        jattn_exec e = {0};
        e.backend = JATTN_BACKEND_CPU;
        e.threads = 1;
        jattn_status st = jattn_sp_forward(NULL, &sp, &e, &c, q + first * D, k + first * D, v + first * D, out, NULL);
        if (st != JATTN_OK) {
            printf("rank %d: %s: %s\n", rank, jattn_status_name(st), jattn_last_error());
            ok = 0;
            break;
        }
        int counts[MAX_RANKS], offs[MAX_RANKS];
        for (int r = 0, off = 0; r < size; r++) {
            counts[r] = (int)(shards[r] * H * D);
            offs[r] = off;
            off += counts[r];
        }
        MPI_Gatherv(out, counts[rank], MPI_FLOAT, whole, counts, offs, MPI_FLOAT, 0, MPI_COMM_WORLD);
        if (rank == 0) {
            jattn_problem p = jattn_problem_flux(B, H, S, S, D);
            jattn_exec r = {0};
            r.backend = JATTN_BACKEND_REF;
            if (jattn_forward(NULL, &p, &r, q, k, v, ref, NULL) != JATTN_OK) ok = 0;
            double d2 = 0, r2 = 0;
            for (int i = 0; i < B * S * H * D; i++)
                d2 += (whole[i] - ref[i]) * (double)(whole[i] - ref[i]), r2 += (double)ref[i] * ref[i];
            const double rel = sqrt(d2 / r2);
            printf("%s: %d ranks, %s: rel_l2 %.3g vs ref: %s\n", argc > 1 ? argv[1] : "consumer_parallel", size,
                   a ? "ulysses" : "ring", rel, rel <= 2e-6 ? "OK" : "FAIL");
            if (!(rel <= 2e-6)) ok = 0;
        }
    }
    MPI_Bcast(&ok, 1, MPI_INT, 0, MPI_COMM_WORLD);
    MPI_Finalize();
    return ok ? 0 : 1;
}
