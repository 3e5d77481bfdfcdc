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
