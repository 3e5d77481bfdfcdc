/* placeholder: replaced as configcheck/ is built */
#include "nprobe/configcheck.h"

np_status np_cc_pack_run(const char *zip_path, const np_run_info *run, np_error *err)
{
    (void)run;
    return np_error_set(err, NP_ERR_UNSUPPORTED, zip_path, NULL,
                        "config_check packs are not available in this build yet");
}
