/* compare/tol_lowp.c - tolerances of the 8-bit formats (a run of precision
 * mxfp8 or hif8, a float8 tensor), derived from their unit roundoff
 * (docs/COMPARE.md, "8-bit formats"). */
#include <math.h>
#include <string.h>

#include "internal.h"

/* Unit roundoff 2^-4 of E4M3 (MxFP8's elements) and of HiF8 in its 3-bit
 * band; E5M2's 2^-3. 0 for any other name. */
double np_cmp_lowp_unit_roundoff(const char *d)
{
    if (!d)
        return 0;
    if (!strcmp(d, "mxfp8") || !strcmp(d, "hif8") || !strcmp(d, "float8_e4m3fn") || !strcmp(d, "hifloat8"))
        return 0x1p-4;
    if (!strcmp(d, "float8_e5m2"))
        return 0x1p-3;
    return 0;
}

/* Error above 6u, warning above 2u, the cosines that go with those L2
 * errors (1 - r^2/2). A clean GPT step measured 1.35u at most (MxFP8
 * 0.085, HiF8 0.077: the attention's backward; bf16 runs show 1.9u): the
 * error level keeps a 4x margin, and is below a doubled output (a block
 * scale off by one, relative error 1) and a saturating layer. */
np_cmp_tolerance np_cmp_tolerance_lowp(const char *d)
{
    double u = np_cmp_lowp_unit_roundoff(d);
    double r = 6.0 * u, w = 2.0 * u;
    return (np_cmp_tolerance){1e-4, r, w, 1.0 - r * r / 2.0, 1.0 - w * w / 2.0};
}

/* Saturation a clean run reaches: HiF8 scales each tensor so its largest
 * magnitude stays below 16 (no element saturates); an MX block saturates
 * the elements of (448, 512) x its scale, in practice its largest element
 * when that lands in the top 19% (log2(512/448)) of its binade: about
 * 0.6% of the elements (0.19 / 32); measured 0.7-1.0% on the GPT. The
 * error level is 8x the expected share. */
#define MX_SATURATION_LEVEL 5.0

int cmp_lowp_row(const char *leaf, const char *role, double value, const char *precision,
                 np_cmp_verdict *verdict, double *severity, const char **fmt, double *level)
{
    const char *key = strrchr(leaf, '.');
    if (!role || strcmp(role, "kwargs") || !key)
        return 0;
    if (!strcmp(key + 1, "fp32_override")) {
        *verdict = NP_VERDICT_PASS;
        *severity = 0;
        *level = NAN;
        *fmt = "this call ran in float32 inside autocast (a per-op precision override, fp32_ops); "
               "the other run did not";
        return 1;
    }
    if (strncmp(key + 1, "lowp_", 5))
        return 0;
    key++;
    *verdict = NP_VERDICT_PASS;
    *severity = 0;
    *level = NAN;
    *fmt = "a quantization statistic of the low-precision run (docs/FORMAT.md); the other run "
           "has none";
    if (!strstr(key, "_saturation"))
        return 1;
    double lim = precision && !strcmp(precision, "hif8") ? 0.0 : MX_SATURATION_LEVEL;
    *level = lim;
    if (value > lim) {
        *verdict = NP_VERDICT_ERROR;
        *severity = lim > 0 ? value / lim : INFINITY;
        *fmt = strstr(key, "_x_") ? "saturating GEMM input: %.3g percent of the input's elements pass the "
                                    "format's largest value after scaling (a clean run: at most %.3g percent)"
                                  : "saturating GEMM weight: %.3g percent of the weight's elements pass the "
                                    "format's largest value after scaling (a clean run: at most %.3g percent)";
    }
    return 1;
}
