/* nprobe/monfile.h - the monitor file's HDF5 row types (the writer in
 * probe/monfile.c, nprobe/probe.h's np_monitor_file_*, and the reader in
 * monitor/monitor_read.c share them). Each returns a new type: H5Tclose it. */
#ifndef NPROBE_MONFILE_H
#define NPROBE_MONFILE_H

#include <hdf5.h>

#include "nprobe/probe.h"

#define NP_MONITOR_FILE_FORMAT "nprobe-monitor"
#define NP_MONITOR_FILE_VERSION 1

/* /steps: one row per finished step: the records and keys that cover it */
typedef struct np_monitor_step {
    int64_t step;
    int64_t records;  /* /records rows up to and including this step */
    int64_t keys;     /* /keys rows at the end of this step */
} np_monitor_step;

hid_t np_monfile_type_record(void);
hid_t np_monfile_type_key(void);
hid_t np_monfile_type_step(void);

#endif
