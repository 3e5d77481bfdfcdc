/* tests/runtime/test_rt_faults.c - the fault catalog. For each fault, npu-sim
 * with the fault against npu-sim without it on the tiny all-ops graph: every
 * event before the faulted op's call is bit-identical, the first differing
 * event is the faulted op (forward, or backward for backward-only faults) and
 * its outputs differ by far more than accumulation noise (relative error >
 * 1e-3 or non-finite); faults flagged beats_bf16_noise exceed 5e-2. Also:
 * npu-sim fp32 without a fault is within 1e-5 (relative) of cpu at every
 * event, and the catalog lookups work. */
#include <math.h>

#include "check.h"
#include "rt_graph.h"

static int starts_with_one_of(const char *name, const char *ops)
{
    char buf[256];
    snprintf(buf, sizeof buf, "%s", ops);
    for (char *tok = strtok(buf, ", "); tok; tok = strtok(NULL, ", ")) {
        size_t l = strlen(tok);
        if (strncmp(name, tok, l) == 0 && name[l] == '.')
            return 1;
    }
    return 0;
}

int main(void)
{
    /* catalog */
    CHECK(np_fault_count() >= 7);
    CHECK_EQ_INT(np_fault_from_name("none"), NP_FAULT_NONE);
    CHECK_EQ_INT(np_fault_from_name("attn_scale"), NP_FAULT_ATTN_SCALE);
    CHECK_EQ_INT(np_fault_from_name("nope"), -1);
    int n_bwd_only = 0, n_bf16 = 0;
    for (int i = 0; i < np_fault_count(); i++) {
        const np_fault_info *f = np_fault_get(i);
        CHECK(f && (int)f->id == i && f->name && f->description && *f->description);
        if (i && strcmp(f->pass, "backward") == 0)
            n_bwd_only++;
        n_bf16 += f->beats_bf16_noise;
    }
    CHECK(n_bwd_only >= 1);
    CHECK(n_bf16 >= 4);
    CHECK(np_fault_get(np_fault_count()) == NULL);

    /* npu-sim without fault vs cpu, fp32 */
    recorder cpu = {0}, base = {0};
    CHECK(graph_run(NP_DEVICE_CPU, NP_FLOAT32, NP_FAULT_NONE, 3, &cpu) == NP_OK);
    CHECK(graph_run(NP_DEVICE_NPU_SIM, NP_FLOAT32, NP_FAULT_NONE, 3, &base) == NP_OK);
    CHECK_EQ_INT(cpu.n, base.n);
    double worst = 0;
    int differs = 0;
    for (int i = 0; i < cpu.n && i < base.n; i++) {
        CHECK_STREQ(base.ev[i].name, cpu.ev[i].name);
        double e = rel_err(base.ev[i].vals, cpu.ev[i].vals, cpu.ev[i].n);
        CHECK_MSG(e <= 1e-5, "%s: npu-sim vs cpu relative error %g", cpu.ev[i].name, e);
        worst = fmax(worst, e);
        differs |= memcmp(base.ev[i].vals, cpu.ev[i].vals, sizeof(float) * (size_t)cpu.ev[i].n) != 0;
    }
    CHECK_MSG(differs, "npu-sim should differ from cpu at accumulation-order level somewhere");
    fprintf(stderr, "npu-sim vs cpu fp32: worst relative error %.3g\n", worst);

    /* the faults, with the fault set on cpu having no effect */
    for (int f = 1; f < np_fault_count(); f++) {
        const np_fault_info *fi = np_fault_get(f);
        recorder cf = {0}, rf = {0};
        CHECK(graph_run(NP_DEVICE_CPU, NP_FLOAT32, (np_fault)f, 3, &cf) == NP_OK);
        int cpu_same = cf.n == cpu.n;
        for (int i = 0; cpu_same && i < cpu.n; i++)
            cpu_same = memcmp(cf.ev[i].vals, cpu.ev[i].vals, sizeof(float) * (size_t)cpu.ev[i].n) == 0;
        CHECK_MSG(cpu_same, "%s: a fault must not act on the cpu device", fi->name);
        graph_run(NP_DEVICE_NPU_SIM, NP_FLOAT32, (np_fault)f, 3, &rf);
        int first = -1;
        for (int i = 0; i < rf.n && i < base.n; i++) {
            if (strcmp(rf.ev[i].name, base.ev[i].name) != 0 || rf.ev[i].n != base.ev[i].n ||
                memcmp(rf.ev[i].vals, base.ev[i].vals, sizeof(float) * (size_t)rf.ev[i].n) != 0) {
                first = i;
                break;
            }
        }
        CHECK_MSG(first >= 0, "%s: no event changed", fi->name);
        if (first >= 0) {
            const char *nm = rf.ev[first].name;
            int bwd = strstr(nm, ".backward") != NULL;
            CHECK_MSG(starts_with_one_of(nm, fi->op), "%s: first differing event %s is not %s", fi->name, nm, fi->op);
            CHECK_MSG(bwd == (strcmp(fi->pass, "backward") == 0), "%s: first differing event %s, pass %s",
                      fi->name, nm, fi->pass);
            double e = rel_err(rf.ev[first].vals, base.ev[first].vals, base.ev[first].n);
            double emax = 0;
            for (int64_t k = 0; k < base.ev[first].n; k++) {
                double b = base.ev[first].vals[k], a = rf.ev[first].vals[k];
                double d = isfinite(a) ? fabs(a - b) / fmax(fabs(b), 1e-6) : 1e30;
                emax = fmax(emax, d);
            }
            fprintf(stderr, "%-24s first change at %s: relative error %.3g (norm), %.3g (max elementwise)\n",
                    fi->name, nm, e, emax);
            CHECK_MSG(e > 1e-3 || emax > 1e-3, "%s: error %g too small to detect", fi->name, e);
            if (fi->beats_bf16_noise)
                CHECK_MSG(e > 5e-2, "%s: flagged beats_bf16_noise but norm error is %g", fi->name, e);
        }
        rec_free(&cf);
        rec_free(&rf);
    }
    rec_free(&cpu);
    rec_free(&base);
    return check_report();
}
