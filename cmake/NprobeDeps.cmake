# All third-party lookups in one place. Every dependency is a Debian package
# (scripts/install-deps.sh installs them); nothing is vendored. Each lookup
# names its Debian package: the configure (a CMake build, or `pip install .`
# through scikit-build-core) stops after all of them with one message that
# lists every missing package and the apt-get line that installs them.
set(NP_MISSING "")
set(NP_MISSING_DEBS "")
# np_need(<found-var> <what> <debian-package>...): record <what> as missing
# unless <found-var> is true.
macro(np_need found what)
  if(NOT ${found})
    string(REPLACE ";" " " _np_debs "${ARGN}")
    list(APPEND NP_MISSING "  ${what}: Debian package ${_np_debs}")
    list(APPEND NP_MISSING_DEBS ${ARGN})
  endif()
endmacro()
# np_pkg(<prefix> <pkg-config module> <debian-package>...): a pkg-config
# module as the imported target PkgConfig::<prefix>.
macro(np_pkg prefix module)
  if(PKG_CONFIG_FOUND)
    pkg_check_modules(${prefix} QUIET IMPORTED_TARGET ${module})
  endif()
  np_need(${prefix}_FOUND "${module} (pkg-config module ${module}.pc)" ${ARGN})
endmacro()

find_package(PkgConfig QUIET)
np_need(PKG_CONFIG_FOUND "pkg-config" pkg-config)
find_package(HDF5 COMPONENTS C)
np_need(HDF5_FOUND "HDF5 (C library)" libhdf5-dev)
find_package(OpenMP COMPONENTS C)
np_need(OpenMP_C_FOUND "OpenMP for C (GCC's libgomp)" gcc)
find_package(ZLIB)
np_need(ZLIB_FOUND "zlib" zlib1g-dev)
find_package(Threads REQUIRED)
np_pkg(JANSSON jansson libjansson-dev)
# Debian 13's xlsxwriter.pc requires minizip's .pc, which its libxlsxwriter-dev
# does not depend on: libminizip-dev is named with it
np_pkg(XLSXWRITER xlsxwriter libxlsxwriter-dev libminizip-dev)
np_pkg(LIBZIP libzip libzip-dev)
# ISA-L's igzip deflates the xlsx report's large sheets (compare/xlsx_sheet.c)
np_pkg(ISAL libisal libisal-dev)
np_pkg(OPENBLAS openblas libopenblas-dev)
find_library(NP_LIBM m)
np_need(NP_LIBM "the C math library (libm)" libc6-dev)
if(NP_MISSING)
  list(REMOVE_DUPLICATES NP_MISSING_DEBS)
  string(REPLACE ";" "\n" _np_what "${NP_MISSING}")
  string(REPLACE ";" " " _np_debs "${NP_MISSING_DEBS}")
  message(FATAL_ERROR "nprobe: missing build dependencies (Debian's -dev packages):\n"
    "${_np_what}\n"
    "Install them with\n"
    "  sudo apt-get install ${_np_debs}\n"
    "or run scripts/install-deps.sh, which installs every package the build, "
    "the tests and the demo need.")
endif()

# Include hygiene for <zip.h>: nprobe's `#include <zip.h>` (compare/xlsx_sheet.c,
# configcheck/) means libzip's. Where libxlsxwriter is built on the system
# minizip (Debian 13), its .pc requires minizip, whose Cflags add the bare
# -I/usr/include/minizip, and minizip's own zip.h then shadows libzip's in
# every target that links PkgConfig::XLSXWRITER (`zip_t` unknown).
# libxlsxwriter's headers reach minizip as <minizip/zip.h>, so no directory of
# its include path that holds a zip.h is needed: those (libzip's own excepted)
# are dropped, and a compile check proves both headers still mean what they
# should together (docs/DEVELOPING.md, "Debian 12 and 13").
get_target_property(_np_xlsx_inc PkgConfig::XLSXWRITER INTERFACE_INCLUDE_DIRECTORIES)
if(_np_xlsx_inc)
  set(_np_kept)
  foreach(_np_dir IN LISTS _np_xlsx_inc)
    if(EXISTS "${_np_dir}/zip.h" AND NOT _np_dir IN_LIST LIBZIP_INCLUDE_DIRS)
      message(STATUS "xlsxwriter: ${_np_dir} left off the include path (its zip.h would shadow libzip's)")
    else()
      list(APPEND _np_kept "${_np_dir}")
    endif()
  endforeach()
  set_target_properties(PkgConfig::XLSXWRITER PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "${_np_kept}")
endif()
include(CheckCSourceCompiles)
set(CMAKE_REQUIRED_LIBRARIES PkgConfig::XLSXWRITER PkgConfig::LIBZIP)
set(CMAKE_REQUIRED_QUIET ON)
check_c_source_compiles("
#include <xlsxwriter.h>
#include <zip.h>
#ifndef LIBZIP_VERSION
#error zip.h is not libzip's
#endif
int main(void) { zip_t *z = zip_open(\"x\", ZIP_RDONLY, 0); (void)z; return lxw_version() == 0; }"
  NP_LIBZIP_AND_XLSXWRITER_HEADERS)
unset(CMAKE_REQUIRED_LIBRARIES)
unset(CMAKE_REQUIRED_QUIET)
if(NOT NP_LIBZIP_AND_XLSXWRITER_HEADERS)
  message(FATAL_ERROR "<zip.h> beside <xlsxwriter.h> is not libzip's header (zip_t, zip_open): "
    "another zip.h (minizip's?) shadows it; see the configure log under CMakeFiles/ and docs/DEVELOPING.md")
endif()

# The Python of the tests, samples and benchmarks: the project's venv
# (scripts/setup-venv.sh: torch 2.13, transformers, msprobe, pinned in
# python/requirements/dev.lock) when it exists, else Debian's python3.
if(NOT NP_PYTHON)
  if(EXISTS ${CMAKE_SOURCE_DIR}/.venv/bin/python)
    set(NP_PYTHON ${CMAKE_SOURCE_DIR}/.venv/bin/python CACHE FILEPATH "Python used by tests and samples")
  elseif(EXISTS /usr/bin/python3)
    set(NP_PYTHON /usr/bin/python3 CACHE FILEPATH "Python used by tests and samples")
  else()
    find_program(NP_PYTHON python3)
  endif()
endif()

# MPI (Open MPI from Debian) for `mpirun -n K nprobe train` and
# `mpirun -n P nprobe compare`; linked into the program only (cli/mpi.c).
# NP_MPI=OFF, or no MPI found, builds a single-process nprobe.
option(NP_MPI "Build the data-parallel train and compare over MPI when MPI is found" ON)
if(NP_MPI)
  find_package(MPI COMPONENTS C)
endif()
if(NP_MPI AND MPI_C_FOUND)
  set(NP_HAVE_MPI ON)
  find_program(NP_MPIEXEC NAMES mpirun mpiexec HINTS ${MPI_HOME}/bin)
else()
  set(NP_HAVE_MPI OFF)
endif()
