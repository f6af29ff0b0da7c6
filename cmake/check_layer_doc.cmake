# docs/architecture.md's layer table against cmake/layers.cmake: the same layers in the same
# order, each with its folder and the layers it builds on (ctest
# Layers.TheDocumentedGraphIsTheBuildsOne).
#
#   cmake -DTRACER_SOURCE_DIR=<repo> -P cmake/check_layer_doc.cmake
cmake_minimum_required(VERSION 3.25)
if(NOT TRACER_SOURCE_DIR)
  message(FATAL_ERROR "check_layer_doc: pass -DTRACER_SOURCE_DIR=<repository root>")
endif()
include(${TRACER_SOURCE_DIR}/cmake/layers.cmake)

set(doc ${TRACER_SOURCE_DIR}/docs/architecture.md)
# The table's rows: "| `tracer_<name>` | `<folder>/` | <builds on> | ...".
# (Read whole and split at the newlines: a row's ';' would split a CMake list.)
file(READ ${doc} text)
string(REPLACE ";" "," text "${text}")
string(REPLACE "\n" ";" lines "${text}")
set(rows)
foreach(line IN LISTS lines)
  if(line MATCHES "^\\| `tracer_[a-z_]+` \\|")
    list(APPEND rows "${line}")
  endif()
endforeach()
set(documented)
set(problems "")
foreach(row IN LISTS rows)
  if(NOT row MATCHES "^\\| `tracer_([a-z_]+)` \\| `([^`]*)/` \\| ([^|]*) \\|")
    string(APPEND problems "  a row this check cannot read (layer | `folder/` | builds on): ${row}\n")
    continue()
  endif()
  set(name ${CMAKE_MATCH_1})
  set(folder ${CMAKE_MATCH_2})
  string(STRIP "${CMAKE_MATCH_3}" on_text)
  list(APPEND documented ${name})
  if(NOT DEFINED TRACER_LAYER_DIR_${name})
    string(APPEND problems "  '${name}' is documented but is no layer of cmake/layers.cmake\n")
    continue()
  endif()
  if(NOT folder STREQUAL TRACER_LAYER_DIR_${name})
    string(APPEND problems
           "  '${name}': the folder is ${TRACER_LAYER_DIR_${name}}/, the table says ${folder}/\n")
  endif()
  string(REGEX MATCHALL "`[a-z_]+`" on_doc "${on_text}")
  list(TRANSFORM on_doc REPLACE "`" "")
  list(SORT on_doc)
  set(on_build ${TRACER_LAYER_ON_${name}})
  list(SORT on_build)
  if(NOT "${on_doc}" STREQUAL "${on_build}")
    string(APPEND problems
           "  '${name}' builds on [${on_build}], the table says [${on_doc}]\n")
  endif()
endforeach()
if(NOT "${documented}" STREQUAL "${TRACER_LAYERS}")
  string(APPEND problems
         "  the layers, lowest first, are [${TRACER_LAYERS}]; the table has [${documented}]\n")
endif()
if(problems)
  message(FATAL_ERROR "docs/architecture.md's layer table is not cmake/layers.cmake's graph:\n"
                      "${problems}Write the table from cmake/layers.cmake (or change both).")
endif()
message(STATUS "docs/architecture.md's layer table is cmake/layers.cmake's graph "
               "(${TRACER_LAYERS})")
