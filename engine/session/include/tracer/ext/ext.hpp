// tracer's extension points in one include: stages written in C++ (Stage and its roles, the
// options and specs they declare, the kernel forms a stage offers for in-kernel placement) and
// the process-wide stage registry with the built-in stages. Installed, but outside the stable
// API of tracer/tracer.hpp: these change with any minor version (docs/embedding.md). Out-of-tree
// stages that must keep working across versions use the C ABI of tracer/plugin.h.
#pragma once

#include "tracer/ext/kernel_form.hpp"
#include "tracer/ext/stage.hpp"
#include "tracer/ext/stage_options.hpp"
#include "tracer/ext/stages.hpp"
#include "tracer/tracer.hpp"

// The API: exported by libtracer.so, whose other symbols are hidden (engine/CMakeLists.txt).
#pragma GCC visibility push(default)

#pragma GCC visibility pop
