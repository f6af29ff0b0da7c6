# The layer rule of docs/architecture.md, checked on every build (cmake -P, from the target
# tracer_layers): a source file includes project headers of its own layer and of the layers
# below it only. Public headers are split per layer already (each layer's target exposes its own
# include/ directory), so a public header of a higher layer does not even resolve; this check
# covers the private headers every layer reaches through the engine/ root ("core/...",
# "common/...") and the public headers the include path still finds.
#
#   cmake -DTRACER_SOURCE_DIR=<repo> -P cmake/check_layers.cmake
cmake_minimum_required(VERSION 3.25)
if(NOT TRACER_SOURCE_DIR)
  message(FATAL_ERROR "check_layers: pass -DTRACER_SOURCE_DIR=<repository root>")
endif()

# Layers, lowest first: a directory, its name, the layers it may include.
set(layer_names common perf tracefs bpf symbols model perfdata core stages kernel session cli)
set(dir_common engine/common)
set(dir_perf engine/perf)
set(dir_tracefs engine/tracefs)
set(dir_bpf bpf)
set(dir_symbols engine/symbols)
set(dir_model engine/model)
set(dir_perfdata engine/perfdata)
set(dir_core engine/core)
set(dir_stages plugins)
set(dir_kernel engine/kernel)
set(dir_session engine/session)
set(dir_cli cmd)
set(allow_common common)
set(allow_perf common perf)
set(allow_tracefs common tracefs)
set(allow_bpf common perf bpf)
set(allow_symbols common symbols)
set(allow_model common perf tracefs bpf model)
set(allow_perfdata common perf tracefs bpf symbols model perfdata)
set(allow_core common perf tracefs bpf symbols model perfdata core)
set(allow_stages common perf tracefs bpf symbols model perfdata core stages)
set(allow_kernel common perf tracefs bpf symbols model perfdata core stages kernel)
set(allow_session common perf tracefs bpf symbols model perfdata core stages kernel session)
set(allow_cli common perf tracefs bpf symbols model perfdata core stages kernel session cli)

# The layer a quoted include belongs to, or "" for a header outside the project's layers.
function(layer_of include out)
  set(layer "")
  if(include MATCHES "^tracer/(perf|tracefs|bpf|symbols|perfdata|kernel)/")
    set(layer ${CMAKE_MATCH_1})
  elseif(include MATCHES "^(common|model|core|perf|tracefs|bpf|symbols|perfdata|kernel|session)/")
    set(layer ${CMAKE_MATCH_1})
  elseif(include MATCHES "^plugins/")
    set(layer stages)
  elseif(include MATCHES "^tracer/([a-z_]+)\\.hpp$")
    # Top-level public headers: the layer whose include/ directory holds them.
    foreach(candidate common model core stages session)
      if(EXISTS "${TRACER_SOURCE_DIR}/${dir_${candidate}}/include/tracer/${CMAKE_MATCH_1}.hpp")
        set(layer ${candidate})
      endif()
    endforeach()
    if(layer STREQUAL "" AND EXISTS "${TRACER_SOURCE_DIR}/engine/core/include/${include}")
      set(layer core)
    endif()
  endif()
  set(${out} "${layer}" PARENT_SCOPE)
endfunction()

set(violations "")
foreach(layer IN LISTS layer_names)
  file(GLOB_RECURSE files "${TRACER_SOURCE_DIR}/${dir_${layer}}/*.cpp"
       "${TRACER_SOURCE_DIR}/${dir_${layer}}/*.hpp" "${TRACER_SOURCE_DIR}/${dir_${layer}}/*.h")
  foreach(file IN LISTS files)
    file(STRINGS "${file}" lines REGEX "^[ \t]*#[ \t]*include[ \t]+\"")
    foreach(line IN LISTS lines)
      string(REGEX REPLACE "^[ \t]*#[ \t]*include[ \t]+\"([^\"]+)\".*" "\\1" include "${line}")
      layer_of("${include}" target)
      if(target STREQUAL "" OR target IN_LIST allow_${layer})
        continue()
      endif()
      file(RELATIVE_PATH rel "${TRACER_SOURCE_DIR}" "${file}")
      string(APPEND violations
             "  ${rel}: layer '${layer}' includes \"${include}\" of layer '${target}'\n")
    endforeach()
  endforeach()
endforeach()

if(violations)
  message(FATAL_ERROR
          "layering: a layer includes a header of a layer above it (order: ${layer_names}; "
          "docs/architecture.md):\n${violations}"
          "Move the shared code down to the lowest layer that needs it, or pass what the lower "
          "layer needs in as a parameter.")
endif()
