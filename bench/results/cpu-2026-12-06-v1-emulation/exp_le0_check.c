#include <math.h>
#include <stdio.h>
#include <stdlib.h>
static double exp_le0(double x) {
    if (!(x >= -745.2)) return x != x ? x : 0.0;
    const double n = rint(x * 1.4426950408889634);
    double r = fma(-n, 6.93147180369123816490e-01, x);
    r = fma(-n, 1.90821492927058770002e-10, r);
    double e = 1.0 / 479001600.0;
    e = fma(e, r, 1.0 / 39916800.0);
    e = fma(e, r, 1.0 / 3628800.0);
    e = fma(e, r, 1.0 / 362880.0);
    e = fma(e, r, 1.0 / 40320.0);
    e = fma(e, r, 1.0 / 5040.0);
    e = fma(e, r, 1.0 / 720.0);
    e = fma(e, r, 1.0 / 120.0);
    e = fma(e, r, 1.0 / 24.0);
    e = fma(e, r, 1.0 / 6.0);
    e = fma(e, r, 0.5);
    e = fma(e, r, 1.0);
    e = fma(e, r, 1.0);
    return scalbn(e, (int)n);
}
int main(void) {
    double worst = 0, wx = 0;
    long bad = 0;
    srand(1);
    for (long i = 0; i < 20000000; i++) {
        double x = -(double)rand() / RAND_MAX * (i % 3 == 0 ? 1.0 : i % 3 == 1 ? 100.0 : 740.0);
        double a = exp_le0(x), b = exp(x);
        if (b < 2.3e-308) continue; /* subnormal results: relative error meaningless */
        double rel = fabs(a - b) / b;
        if (rel > worst) worst = rel, wx = x;
        if ((float)a != (float)b) bad++;
    }
    printf("worst rel %.3g at x=%.17g (2^%.1f); float roundings differing: %ld of 2e7\n", worst, wx, log2(worst), bad);
    printf("exp_le0(0)=%.17g  (-inf)=%g  (nan)=%g (-745.3)=%g (-745.1)=%g vs %g\n", exp_le0(0), exp_le0(-INFINITY),
           exp_le0(NAN), exp_le0(-745.3), exp_le0(-745.1), exp(-745.1));
}
