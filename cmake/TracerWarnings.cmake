# tracer_warnings(target): the project's warning set; -Werror when TRACER_WERROR is on (CI).
function(tracer_warnings target)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Wshadow -Wnon-virtual-dtor
                                           -Wimplicit-fallthrough)
  if(TRACER_WERROR)
    target_compile_options(${target} PRIVATE -Werror)
  endif()
endfunction()
