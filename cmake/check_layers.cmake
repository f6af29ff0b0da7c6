# The layer rules of docs/architecture.md, checked on every build (cmake -P, from the target
# tracer_layer_check), on the graph of cmake/layers.cmake:
# - a file includes public headers ("tracer/...") of its own layer and of the layers it reaches
#   (builds on, directly or through another) only;
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

# The layers, their folders and what each may include (every layer it reaches):
# cmake/layers.cmake, the one place the graph is written.
include(${TRACER_SOURCE_DIR}/cmake/layers.cmake)
set(layer_names ${TRACER_LAYERS})
foreach(layer IN LISTS layer_names)
  set(dir_${layer} ${TRACER_LAYER_DIR_${layer}})
  tracer_layer_reach(${layer} allow_${layer})
endforeach()

# The layer whose public header a "tracer/..." include names, or "" for none.
function(layer_of include out)
  set(layer "")
  # The layer whose include/ directory holds the header ("tracer/perf/ring.hpp",
  # "tracer/session.hpp").
  foreach(candidate IN LISTS layer_names)
    if(EXISTS "${TRACER_SOURCE_DIR}/${dir_${candidate}}/include/${include}")
      set(layer ${candidate})
    endif()
  endforeach()
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
         "a layer includes a header of a layer it does not build on (the graph: "
         "cmake/layers.cmake, lowest first: ${layer_names}):\n${violations}"
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
