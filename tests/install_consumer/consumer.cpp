// The same check as consumer.c from C++ (built when the consumer project finds a C++
// compiler): jattn.h included by a C++ program, a context owned by a unique_ptr and reused
// over two calls, std::vector buffers; the default backend against the ref backend.
#include <jattn.h>

#include <cmath>
#include <cstdio>
#include <memory>
#include <vector>

namespace {

struct ctx_free {
    void operator()(jattn_ctx *c) const { jattn_ctx_free(c); }
};
using ctx_ptr = std::unique_ptr<jattn_ctx, ctx_free>;

bool check(jattn_status st, const char *what) {
    if (st == JATTN_OK) return true;
    std::fprintf(stderr, "consumer_cxx: %s: %s: %s\n", what, jattn_status_name(st), jattn_last_error());
    return false;
}

} // namespace

int main() {
    const jattn_problem p = jattn_problem_flux(1, 3, 70, 90, 64);
    std::vector<float> q(3 * 70 * 64), k(3 * 90 * 64), v(3 * 90 * 64), out(q.size()), ref(q.size());
    unsigned long long s = 0x2545F4914F6CDD1Dull;
    for (std::vector<float> *x : {&q, &k, &v})
        for (float &e : *x) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            e = static_cast<float>(static_cast<double>(s >> 11) / 9007199254740992.0 * 2.0 - 1.0);
        }
    jattn_ctx *raw = nullptr;
    if (!check(jattn_ctx_create(&raw), "jattn_ctx_create")) return 1;
    ctx_ptr ctx(raw);
    for (int call = 0; call < 2; ++call)
        if (!check(jattn_forward(ctx.get(), &p, nullptr, q.data(), k.data(), v.data(), out.data(), nullptr),
                   "jattn_forward"))
            return 1;
    jattn_exec e{};
    e.backend = JATTN_BACKEND_REF;
    if (!check(jattn_forward(nullptr, &p, &e, q.data(), k.data(), v.data(), ref.data(), nullptr), "ref")) return 1;
    double diff2 = 0, ref2 = 0;
    for (size_t i = 0; i < out.size(); ++i) {
        const double d = static_cast<double>(out[i]) - ref[i];
        diff2 += d * d;
        ref2 += static_cast<double>(ref[i]) * ref[i];
    }
    const double rel_l2 = std::sqrt(diff2 / ref2);
    const bool ok = rel_l2 <= 2e-6; // JATTN_GATE_F32_REL_L2 (kit/metrics.h; not installed)
    std::printf("consumer_cxx: jattn %s from C++: rel_l2 %.3g vs ref: %s\n", jattn_version_string(), rel_l2,
                ok ? "OK" : "FAIL");
    return ok ? 0 : 1;
}
