/* cli/cmd.h - the nprobe program's subcommand table and shared helpers.
 * Each subcommand lives in its own cmd_*.c, handles its own --help (stdout)
 * and returns the process exit code: 0 ok, 1 differences found, 2 usage or
 * input error. Errors go to stderr as "nprobe: <what>". Only cli/ decides
 * exit codes and prints; the libraries return statuses. */
#ifndef NPROBE_CLI_CMD_H
#define NPROBE_CLI_CMD_H

#include <stddef.h>

#include "nprobe/common.h"

enum { NP_EXIT_OK = 0, NP_EXIT_DIFF = 1, NP_EXIT_USAGE = 2 };

/* argv[0] is the subcommand's name. */
typedef int (*np_cmd_fn)(int argc, char **argv);

typedef struct np_cmd {
    const char *name;
    np_cmd_fn fn;
    const char *desc;
} np_cmd;

int np_cmd_train(int argc, char **argv);
int np_cmd_dump(int argc, char **argv);
int np_cmd_compare(int argc, char **argv);
int np_cmd_config_check(int argc, char **argv);
int np_cmd_ls(int argc, char **argv);
int np_cmd_show(int argc, char **argv);
int np_cmd_replay(int argc, char **argv);
int np_cmd_monitor(int argc, char **argv);
int np_cmd_triage(int argc, char **argv);
int np_cmd_profile(int argc, char **argv);
int np_cmd_promote(int argc, char **argv);
/* `nprobe compare --replicas DUMP` (cmd_compare_replicas.c) */
int np_cmd_compare_replicas(int argc, char **argv);

/* Print "nprobe: <message>\n" to stderr. */
void np_cli_error(const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 1, 2)))
#endif
    ;
/* printf to stdout for lines that carry user data (leaf, call and module
 * names, reasons quoting them, paths): control characters other than
 * newline and tab are printed as \xNN, so a name cannot drive the
 * terminal. (np_cli_error does the same on stderr.) */
void np_cli_printf(const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 1, 2)))
#endif
    ;
/* "  report: PATH" on stdout, every control character of PATH (newline
 * included: -o is user data) printed as \xNN. */
void np_cli_report_line(const char *path);
/* Print an np_error as "nprobe: [file[:line[:col]]: ][key: ]text". */
void np_cli_report(const np_error *err);
/* The step files below `path` and a checker already walking them
 * (np_dumpio_find, np_dumpio_checker_start), for ls and show: 0, both the
 * caller's to free; else the error reported, nothing to free, and the exit
 * code (NP_EXIT_USAGE). */
struct np_dumpio_ref;
struct np_dumpio_checker;
int np_cli_find_checked(struct np_dumpio_ref **refs, size_t *n, struct np_dumpio_checker **chk,
                        const char *path);
/* 1 if arg is -h or --help. */
int np_cli_is_help(const char *arg);
/* Parse a whole base-10 integer in [lo, hi]; 0 on success. On failure prints
 * "nprobe: <opt>: expected an integer in [lo, hi], got 'text'". */
int np_cli_parse_int(const char *opt, const char *text, long lo, long hi, long *out);
/* 1 when stderr is a terminal (progress indicators are shown only then). */
int np_cli_stderr_is_tty(void);
/* Ignore SIGXFSZ: a file size limit then fails the write with EFBIG,
 * reported as an error, instead of killing nprobe. Only for commands that
 * write files themselves (an ignored signal stays ignored across exec, and
 * `nprobe dump`'s training command must not inherit that). */
void np_cli_ignore_sigxfsz(void);
/* Before a command runs: SIGINT/SIGTERM/SIGHUP remove the temporaries and
 * reservations of the files being written (np_out_remove_live), then end
 * the process as the signal would. */
void np_cli_clean_on_signal(void);

/* ---- the probe inside `nprobe train` (implemented in probe_attach.c) ---- */
struct np_ctx;
typedef struct np_cli_probe np_cli_probe;

typedef struct np_cli_run_meta {
    const char *framework;  /* "nprobe-runtime" */
    const char *device;     /* "cpu", "npu-sim" */
    const char *precision;  /* "fp32", "bf16", "fp16" */
    int rank, world_size;
} np_cli_run_meta;

/* Open the probe from `config_path`, validate it (nothing is written on a bad
 * config) and register it on ctx's hook. On error prints the message and
 * returns NP_EXIT_USAGE with *out = NULL. */
int np_cli_probe_attach(np_cli_probe **out, struct np_ctx *ctx,
                        const char *config_path, const np_cli_run_meta *meta);
/* Close the probe (finishing the last step), print the dump summary to
 * stderr, free. Returns 0, or NP_EXIT_USAGE if the dump failed. NULL is a
 * no-op returning 0. */
int np_cli_probe_detach(np_cli_probe *p);
/* Tensor parallel over `tp` ranks of `world` (tp <= 1: none) and `mb`
 * micro-batches (<= 1: none): the dump's mesh ("tp", or ("dp", "tp") with
 * world / tp data-parallel groups, then "mb") and a second observer (after
 * the probe) that records each leaf's placement (np_mesh_placement_mb ->
 * np_probe_place); sp: sequence parallel. */
int np_cli_probe_layout(np_cli_probe *p, int tp, int sp, int mb, int rank, int world);
/* A pipeline of pp stages with mb micro-batches, beside tensor parallelism
 * over tp ranks (<= 1: none; sp: sequence parallel) with data parallel over
 * the rest of the world (rank = (s * dp + d) * tp + t): the mesh ("pp"[,
 * "dp"][, "tp"][, "mb"]) and every leaf placed with its stage
 * (np_mesh_placement_pp). */
int np_cli_probe_layout_pp(np_cli_probe *p, int pp, int tp, int sp, int mb, int rank, int world);
/* After np_cli_probe_layout: a vocabulary-parallel run over `vocab` tokens
 * (np_mesh_placement_vp places the word embedding's slices). */
void np_cli_probe_vocab(np_cli_probe *p, int64_t vocab);
/* A layout without a probe (np_cli_probe_layout* store the mesh only), as
 * the monitor's dump of kept calls takes it (anomaly_calls under --tp and
 * --pp: the run's mesh and placements, as its own tensor dump's). */
np_cli_probe *np_cli_layout_new(void);
const struct np_mon_layout *np_cli_layout_mon(const np_cli_probe *p);
void np_cli_layout_free(np_cli_probe *p);

/* The monitor in `nprobe train` (cli/monitor_attach.c): a config whose
 * task is "monitor" attaches it to the context and the trainer. */
struct np_monitor;
struct np_trainer;
int np_cli_monitor_wanted(const char *config_path);
/* The per-op precision overrides (NPROBE_FP32_OPS, then the dump config's
 * "fp32_ops") as one comma-separated list in buf; an exit code (fp32_ops.c). */
int np_cli_fp32_ops(char *buf, size_t cap, const char *dump_config);
int np_cli_monitor_attach(struct np_monitor **out, struct np_ctx *ctx, struct np_trainer *tr,
                          const char *config_path, int rank, int world);
int np_cli_monitor_detach(struct np_monitor *m);
/* nprobe triage's op from the calls the monitor kept at the anomaly of
 * step S on rank R (DIR/anomaly_calls/stepS/rankR/dump.h5, replayed):
 * printed as "op: CALL (in MODULE; ...)", preferring a call inside module
 * `mod`; 0 when one was named, -1 when none (no such dump, none exceeds). */
int np_cli_triage_kept_op(const char *dir, int64_t step, int rank, const char *mod);
/* The /calls rows of dump file `path`, read as they are (no check of the
 * file beyond HDF5's); NULL with *n_out 0 when there are none or on error. */
struct np_call_rec *np_cli_dump_calls(const char *path, size_t *n_out);

/* The profile task inside `nprobe train` (cli/profile_attach.c): --profile
 * DIR (every step) and/or a config.json with "task": "profile" (its
 * dump_path and schedule; DIR, when given too, wins). */
typedef struct np_cli_profiler np_cli_profiler;
int np_cli_profile_wanted(const char *config_path);
int np_cli_profile_attach(np_cli_profiler **out, struct np_ctx *ctx, const char *dir,
                          const char *config_path, int rank, int world);
/* Close the trace, print its summary to stderr; NULL ok. */
int np_cli_profile_detach(np_cli_profiler *p);
/* --fault slow_*: the slow path on rank fault_rank (-1: every rank); other
 * names are no-ops. */
int np_cli_slow_fault_apply(struct np_ctx *ctx, const char *fault, int fault_rank, int rank);
void np_cli_list_slow_faults(void);
/* Both for `nprobe train`: the profiler when --profile DIR or dump_cfg
 * (a "task": "profile" config; *prof_cfg receives it, else NULL) asks for
 * it, then --fault slow_*; and at the end: detach, the first failing exit
 * code kept. */
int np_cli_profile_setup(np_cli_profiler **prof, const char **prof_cfg, struct np_ctx *ctx,
                         const char *dir, const char *dump_cfg, const char *fault, int fault_rank,
                         int rank, int world);
int np_cli_profile_end(np_cli_profiler *p, int code);

/* `nprobe profile --format html`: profile.html of analysed traces
 * (cli/profile_html.c); data is an np_cli_profile_page. */
struct np_prof_rank;
typedef struct np_cli_profile_page {
    const struct np_prof_rank *r;
    size_t n;
    long top;
} np_cli_profile_page;
void np_cli_profile_html(FILE *f, const void *data);

/* ---- MPI (cli/mpi.c; every function works in a build without MPI) ---- */
/* Start MPI when the process was launched by mpirun/mpiexec: *rank and
 * *world from MPI_COMM_WORLD. Returns 1 under MPI, 0 for a plain process
 * (rank 0 of 1, also in a build without MPI), -1 when MPI_Init failed. */
int np_cli_mpi_start(int *rank, int *world);
/* np_cli_mpi_start for a program whose messages are few and small (compare
 * spreading its pairs): under Open MPI the point-to-point layer defaults to
 * ob1 (unless OMPI_MCA_pml is set), which starts much faster than UCX. */
int np_cli_mpi_start_light(int *rank, int *world);
/* MPI_Finalize once, if started. */
void np_cli_mpi_end(void);
/* np_allgather_fn (nprobe/dist.h) over MPI_COMM_WORLD. */
int np_cli_mpi_allgather(void *recv, const void *send, size_t bytes, void *user);
/* np_p2p_fn (nprobe/dist.h) over MPI_COMM_WORLD: MPI_Send, MPI_Recv of
 * exactly `bytes` (-1 without MPI). */
int np_cli_mpi_send(void *buf, size_t bytes, int peer, int tag, void *user);
int np_cli_mpi_recv(void *buf, size_t bytes, int peer, int tag, void *user);
/* Max of v over the ranks (v itself without MPI). */
int np_cli_mpi_max_int(int v);
/* 1 when this program was built with MPI. */
int np_cli_mpi_available(void);
/* Rank 0's *v to every rank. */
void np_cli_mpi_bcast_ll(long long *v);
/* Every rank's `bytes` of `send` (each its own count, 0 allowed),
 * concatenated in rank order, into *all (malloc'd, *total bytes) on every
 * rank. -1 on every rank when one of them lacks the memory. */
int np_cli_mpi_allgather_bytes(void **all, size_t *total, const void *send, size_t bytes);

/* ---- compare (cmd_compare.c, compare_mpi.c) ---- */
struct np_cmp_result;
struct np_cmp_options;
/* Write the reports of every pair of r into outdir (formats: bit 0 xlsx,
 * 1 csv, 2 json), printing each pair unless quiet; first (may be NULL,
 * cap bytes) receives the file name of the first report written ("" when
 * none). 0, or NP_EXIT_USAGE when a report could not be written. */
int np_cli_compare_reports(const struct np_cmp_result *r, const char *outdir, int formats,
                           int quiet, long long now, char *first, size_t cap);
/* OUTDIR/compare_report_{YYYYmmddHHMMSS}.html of a comparison given as one
 * digest per pair and the focus pair in full (np_cmp_write_html_digests);
 * path (cap bytes) receives the file written. 0, or -1 (said on stderr). */
struct np_cmp_pair_digest;
struct np_cmp_pair;
int np_cli_compare_html(const struct np_cmp_result *r, const struct np_cmp_pair_digest *d,
                        size_t n, const struct np_cmp_pair *focus, const char *focus_report,
                        const char *outdir, long long now, char *path, size_t cap);
/* `mpirun -n P nprobe compare`: the (step, rank) pairs spread over the P
 * processes, one merged summary from rank 0. Returns the exit code. */
int np_cli_compare_mpi(const char *bench, const char *cmp, const char *outdir, int formats,
                       int quiet, const struct np_cmp_options *o, int rank, int world);

#endif
