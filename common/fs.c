/* common/fs.c - file-system helpers shared by the dump writer and the CLI. */
#include <errno.h>
#include <string.h>
#include <sys/stat.h>

#include "nprobe/common.h"

int np_mkdirs(const char *path)
{
    char buf[4096];
    size_t n = strlen(path);
    if (n == 0 || n >= sizeof buf) {
        errno = n ? ENAMETOOLONG : ENOENT;
        return -1;
    }
    memcpy(buf, path, n + 1);
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        int r = mkdir(buf, 0777);
        *p = '/';
        if (r != 0 && errno != EEXIST)
            return -1;
    }
    if (mkdir(buf, 0777) != 0 && errno != EEXIST)
        return -1;
    /* EEXIST also for a file of that name: it must be a directory */
    struct stat sb;
    if (stat(buf, &sb) != 0)
        return -1;
    if (!S_ISDIR(sb.st_mode)) {
        errno = ENOTDIR;
        return -1;
    }
    return 0;
}
