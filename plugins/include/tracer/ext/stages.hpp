// The built-in stages (the stages layer, plugins/stages/): their table, and the process-wide
// registry the CLI and tracer::Session use by default.
#pragma once

#include <span>
#include <string_view>

#include "tracer/ext/stage.hpp"

// The API: exported by libtracer.so, whose other symbols are hidden (engine/CMakeLists.txt).
#pragma GCC visibility push(default)

namespace tracer {

/// The table of built-in stages (plugins/stages/all_stages.cpp).
[[nodiscard]] std::span<const StageEntry> builtin_stages() noexcept;

/// A fresh registry of the built-in stages.
[[nodiscard]] StageRegistry builtin_stage_registry();

/// The process-wide registry: the built-ins, plus what embedders add with register_stage().
[[nodiscard]] StageRegistry& stage_registry();

/// register_stage on the process-wide registry (A1 libbpf_register_prog_handler).
void register_stage(StageSpec spec, StageFactory factory);

/// A stage plugin (tracer/plugin.h) in the search path: what its descriptor says, or why it
/// cannot be loaded.
struct PluginInfo {
  std::string path{};
  std::string name{}, summary{};
  std::uint32_t abi_major = 0, abi_minor = 0;
  std::string problem{};  // empty: it loads
};
/// The shared objects (*.so) in the directories of TRACER_PLUGIN_PATH (':'-separated), each
/// loaded to read its descriptor (`tracer list stages`).
[[nodiscard]] std::vector<PluginInfo> find_plugins();

/// How many plugin threads were abandoned inside a call that ran past its budget. While one is,
/// the process must end with _exit (after flushing its output): exit handlers and the dynamic
/// loader's own teardown could wait for it (a constructor stuck in dlopen holds the loader's
/// lock) — the CLI does.
[[nodiscard]] int abandoned_plugin_threads() noexcept;

}  // namespace tracer

#pragma GCC visibility pop
