# The layer rules of docs/architecture.md, checked on every build (cmake -P, from the target
# tracer_layer_check):
# - a file includes public headers ("tracer/...") of its own layer and of the layers below it
#   only;
# - private headers are private: a layer's private headers are its files outside include/, and
#   only that layer's files include them (a public header includes none). The exceptions are
#   files the build generates and the shipped BPF programs' shared headers (bpf/progs/*.h).
# Each layer's target already exposes only its own include/ directory and its own folder, so a
# higher layer's header or another layer's private one does not resolve; this check names the
# include that tries, with the rule it breaks.
#
#   cmake -DTRACER_SOURCE_DIR=<repo> -P cmake/check_layers.cmake
cmake_minimum_required(VERSION 3.25)
if(NOT TRACER_SOURCE_DIR)
  message(FATAL_ERROR "check_layers: pass -DTRACER_SOURCE_DIR=<repository root>")
endif()

# Layers, lowest first: a directory, its name, the layers it may include.
set(layer_names common perf tracefs bpf symbols model perfdata recipe core pipeline stages kernel session
                exporter cli)
set(dir_common engine/common)
set(dir_perf engine/perf)
set(dir_tracefs engine/tracefs)
set(dir_bpf bpf)
set(dir_symbols engine/symbols)
set(dir_model engine/model)
set(dir_perfdata engine/perfdata)
set(dir_recipe engine/recipe)
set(dir_core engine/core)
set(dir_pipeline engine/pipeline)
set(dir_stages plugins)
set(dir_kernel engine/kernel)
set(dir_session engine/session)
set(dir_exporter engine/exporter)
set(dir_cli cmd)
set(allow_common common)
set(allow_perf common perf)
set(allow_tracefs common tracefs)
set(allow_bpf common perf bpf)
set(allow_symbols common symbols)
set(allow_model common perf tracefs bpf model)
set(allow_perfdata common perf tracefs bpf symbols model perfdata)
set(allow_recipe common perf tracefs bpf symbols model recipe)
set(allow_core common perf tracefs bpf symbols model perfdata core)
set(allow_pipeline common perf tracefs bpf symbols model recipe pipeline)
set(allow_stages common perf tracefs bpf symbols model perfdata recipe pipeline stages)
set(allow_kernel common perf tracefs bpf symbols model perfdata recipe core pipeline stages kernel)
set(allow_session common perf tracefs bpf symbols model perfdata recipe core pipeline stages kernel
    session)
set(allow_exporter common perf tracefs bpf symbols model perfdata recipe core pipeline stages kernel
    session exporter)
set(allow_cli common perf tracefs bpf symbols model perfdata recipe core pipeline stages kernel
    session exporter cli)

# The layer whose public header a "tracer/..." include names, or "" for none.
function(layer_of include out)
  set(layer "")
  if(include MATCHES "^tracer/(common|perf|tracefs|bpf|symbols|perfdata|kernel|exporter)/")
    set(layer ${CMAKE_MATCH_1})
  elseif(include MATCHES "^tracer/([a-z_]+)\\.hpp$")
    # Top-level public headers: the layer whose include/ directory holds them.
    foreach(candidate common model recipe core pipeline stages session)
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
set(private_violations "")
foreach(layer IN LISTS layer_names)
  set(layer_dir "${TRACER_SOURCE_DIR}/${dir_${layer}}")
  file(GLOB_RECURSE files "${layer_dir}/*.cpp" "${layer_dir}/*.hpp" "${layer_dir}/*.h")
  foreach(file IN LISTS files)
    file(RELATIVE_PATH rel "${TRACER_SOURCE_DIR}" "${file}")
    if(rel MATCHES "^bpf/progs/")
      continue()  # BPF C: built by clang for the kernel, not part of a layer's C++
    endif()
    get_filename_component(file_dir "${file}" DIRECTORY)
    string(FIND "${rel}/" "/include/" public_at)
    file(STRINGS "${file}" lines REGEX "^[ \t]*#[ \t]*include[ \t]+\"")
    foreach(line IN LISTS lines)
      string(REGEX REPLACE "^[ \t]*#[ \t]*include[ \t]+\"([^\"]+)\".*" "\\1" include "${line}")
      if(include MATCHES "^tracer/")
        layer_of("${include}" target)
        if(target STREQUAL "" OR target IN_LIST allow_${layer})
          continue()
        endif()
        string(APPEND violations
               "  ${rel}: layer '${layer}' includes \"${include}\" of layer '${target}'\n")
        continue()
      endif()
      # A private header: the layer's own (beside the file or under the layer's directory), a
      # file the build generates (*.inc, *.skel.h, *.pb.h), or the shipped BPF programs' shared headers
      # (bpf/progs/*.h: the structs the programs write and user space reads) above bpf.
      if(include MATCHES "\\.(inc|skel\\.h|pb\\.h)$")
        continue()  # generated: *.inc, BPF skeletons, protoc's messages (the otlp stage's)
      endif()
      if(NOT public_at EQUAL -1)
        string(APPEND private_violations
               "  ${rel}: a public header includes the private header \"${include}\"\n")
        continue()
      endif()
      if(EXISTS "${file_dir}/${include}" OR EXISTS "${layer_dir}/${include}")
        continue()
      endif()
      if(EXISTS "${TRACER_SOURCE_DIR}/bpf/progs/${include}" AND "bpf" IN_LIST allow_${layer})
        continue()
      endif()
      string(APPEND private_violations
             "  ${rel}: layer '${layer}' includes \"${include}\", which is no header of its own\n")
    endforeach()
  endforeach()
endforeach()

set(report "")
if(violations)
  string(APPEND report
         "a layer includes a header of a layer above it (order: ${layer_names}; "
         "docs/architecture.md):\n${violations}"
         "Move the shared code down to the lowest layer that needs it, or pass what the lower "
         "layer needs in as a parameter.\n")
endif()
if(private_violations)
  string(APPEND report
         "private headers are private (a layer's private headers are its files outside its "
         "include/ directory):\n${private_violations}"
         "Give what other layers need a public header in the owning layer's include/tracer/, or "
         "move the code to the layer that uses it.\n")
endif()
if(report)
  message(FATAL_ERROR "layering: ${report}")
endif()
