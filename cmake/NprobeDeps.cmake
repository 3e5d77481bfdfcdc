# All third-party lookups in one place. Every dependency is a Debian package
# (scripts/install-deps.sh installs them); nothing is vendored.
find_package(PkgConfig REQUIRED)
find_package(HDF5 REQUIRED COMPONENTS C)
find_package(OpenMP REQUIRED COMPONENTS C)
find_package(ZLIB REQUIRED)
find_package(Threads REQUIRED)
pkg_check_modules(JANSSON REQUIRED IMPORTED_TARGET jansson)
pkg_check_modules(XLSXWRITER REQUIRED IMPORTED_TARGET xlsxwriter)
pkg_check_modules(LIBZIP REQUIRED IMPORTED_TARGET libzip)
# ISA-L's igzip deflates the xlsx report's large sheets (compare/xlsx_sheet.c)
pkg_check_modules(ISAL REQUIRED IMPORTED_TARGET libisal)
pkg_check_modules(OPENBLAS REQUIRED IMPORTED_TARGET openblas)
find_library(NP_LIBM m REQUIRED)

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
