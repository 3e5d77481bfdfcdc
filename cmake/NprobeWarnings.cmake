# Warning, numerics and sanitizer flags, applied per target (never globally).
# np_target_flags(<target>) gives a target nprobe's flags.
function(np_target_flags tgt)
  target_compile_options(${tgt} PRIVATE
    -Wall -Wextra -Wpedantic -Wshadow -Wformat=2 -Wstrict-prototypes
    -Wmissing-prototypes -Wno-unused-parameter
    -ffp-contract=off)
  if(NP_WERROR)
    target_compile_options(${tgt} PRIVATE -Werror)
  endif()
  target_compile_definitions(${tgt} PRIVATE _POSIX_C_SOURCE=200809L)
  if(NP_SANITIZE)
    target_compile_options(${tgt} PRIVATE -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined)
    target_link_options(${tgt} PRIVATE -fsanitize=address,undefined)
  endif()
endfunction()

# The hot kernels keep their speed however the build is optimised. Debian and
# most distributions build at -O2 (CMAKE_BUILD_TYPE=RelWithDebInfo, or None
# with CFLAGS="-g -O2 ..."), where GCC 12 vectorises only with its "very
# cheap" cost model: the probe's statistics, crc32, GELU/softmax, the
# layer-norm sums, the gemm packing and compare's metrics then ran up to
# twice as slow (docs/PERFORMANCE.md). The libraries that hold hot code get
# -O3 in every optimised build: a target's options come after CMAKE_C_FLAGS
# and CMAKE_C_FLAGS_<CONFIG> on the command line, so it wins over the
# distribution's -O2. The optimisation level in force is the last -O option
# of those flags (GCC's rule): -O1/-O2/-O3/-O get the hot -O3; a build
# without optimisation (Debug, None without -O, -O0, DEB_BUILD_OPTIONS=noopt)
# and one optimised for size or debugging (-Os, -Oz, -Og) are left as they
# are. Results are bit-identical at -O2 and -O3: -ffp-contract=off and no
# fast-math (GCC reorders no floating-point sum without
# -fassociative-math); scripts/bench/bench_o2.sh checks it.
option(NP_HOT_O3 "Compile the hot kernels at -O3 in optimised builds" ON)
set(_np_cflags "${CMAKE_C_FLAGS}")
if(CMAKE_BUILD_TYPE)
  string(TOUPPER "${CMAKE_BUILD_TYPE}" _np_bt)
  string(APPEND _np_cflags " ${CMAKE_C_FLAGS_${_np_bt}}")
endif()
string(REGEX MATCHALL "(^| )-O[^ ]*" _np_olevels "${_np_cflags}")
list(LENGTH _np_olevels _np_n)
set(NP_HOT_FLAGS "")
if(NP_HOT_O3 AND _np_n GREATER 0)
  list(GET _np_olevels -1 _np_last)
  string(STRIP "${_np_last}" _np_last)
  if(_np_last MATCHES "^-O([1-9][0-9]*)?$")
    set(NP_HOT_FLAGS -O3)
  endif()
endif()
# np_hot_kernels(<target>): -O3 for a library holding hot code (after
# np_target_flags).
function(np_hot_kernels tgt)
  if(NP_HOT_FLAGS)
    target_compile_options(${tgt} PRIVATE ${NP_HOT_FLAGS})
  endif()
endfunction()
