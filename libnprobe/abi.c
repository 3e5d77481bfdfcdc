/* libnprobe/abi.c - what a program that loads libnprobe asks first: the
 * library's version and the ABI level of its structs (nprobe/probe.h). */
#include "nprobe/probe.h"

const char *np_lib_version(void)
{
    return NP_VERSION_STRING;
}

int np_lib_abi(void)
{
    return NP_LIB_ABI;
}
