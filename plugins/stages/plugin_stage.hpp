// plugin: a stage from a shared object, through the C ABI of tracer/plugin.h. The recipe names
// it (`[[stage]] plugin = "./libmystage.so"`, or `use = "plugin"`); its other options go to the
// plugin as text. What the plugin cannot do (a wrong ABI version, a missing entry point, a load
// failure, a refused option, an exception from a setup call) is a recipe error at the stage;
// what it fails at while running (an error code, an exception) is counted, never a crash of the
// host.
//
// Trust: the shared object is opened once (O_NOFOLLOW), checked on that descriptor (it and every
// directory above it owned by root or the user tracer started as, writable by no one else) and
// loaded from it (/proc/self/fd/N): never by a search of the dynamic loader.
//
// Time: every call into the plugin (its constructors and entry point at load too) runs on a
// thread of the stage's own while the caller waits at most `budget` (default 250 ms). A call
// over budget turns the stage off with the reason, its thread is abandoned (never joined: it may
// be stuck in the plugin forever) and what the stage then misses is counted; the run ends with
// an error saying so. So no plugin holds a stop or the host's executor longer than its budget.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "tracer/ext/stage.hpp"
#include "tracer/plugin.h"

namespace tracer::stages {

/// What a plugin's calls touch, shared with the plugin's thread (which may outlive the stage).
struct PluginCore;
/// The thread a plugin's calls run on.
class PluginThread;

class PluginStage : public Stage, public Aggregation {
 public:
  static constexpr std::chrono::milliseconds kDefaultBudget{250};
  static constexpr std::chrono::milliseconds kMaxBudget{400};  // a stop's 0.5 s, with room

  PluginStage();
  ~PluginStage() override;
  PluginStage(const PluginStage&) = delete;
  PluginStage& operator=(const PluginStage&) = delete;
  [[nodiscard]] static StageSpec spec();

  void configure(const ConfigValue& options, Diagnostics& diags) override;
  [[nodiscard]] bool rebinds() const noexcept override { return false; }
  void bind(BindContext& ctx, Diagnostics& diags) override;
  void on_events(std::span<Event* const> events) noexcept override;
  void counters(std::vector<std::pair<std::string, std::uint64_t>>& out) const override;
  /// Throws a runtime Error when a call ran past its budget (the run then ends with it).
  void stop() override;
  [[nodiscard]] Aggregation* aggregation() noexcept override { return this; }
  [[nodiscard]] std::optional<std::chrono::nanoseconds> every() const noexcept override {
    return std::nullopt;
  }
  void snapshot(Table& out, bool reset) override;

  /// The descriptor fields tracer reads of a plugin built with `size` bytes of it.
  [[nodiscard]] static bool covers(std::uint32_t size, std::size_t end_of_field) noexcept {
    return size >= end_of_field;
  }

 private:
  /// Runs `job` on the plugin's thread within the budget. False when it ran over: the stage is
  /// then off (`timed_out_` names the call) and the thread abandoned.
  bool call(void (*job)(PluginCore&), const char* what) noexcept;
  /// Records a failed call (`what`) and the plugin's reason; after an exception, the stage is
  /// off.
  void failed(const char* what, bool exception) noexcept;

  std::shared_ptr<PluginCore> core_;
  std::unique_ptr<PluginThread> thread_;
  std::chrono::milliseconds budget_ = kDefaultBudget;
  std::string name_;
  SourceRegion where_;
  std::vector<std::string> key_names_, value_names_;
  bool off_ = false;       // an exception crossed the boundary or a call ran over: no more calls
  std::string timed_out_;  // the call that ran over its budget ("" if none)
  std::uint64_t failures_ = 0, exceptions_ = 0, missed_ = 0, timeouts_ = 0;
  std::string last_error_;
};

/// The file a recipe's `plugin` names: a path with a '/' relative to the recipe's directory
/// (`recipe` is the recipe file's path), a bare name searched in TRACER_PLUGIN_PATH
/// (':'-separated). Never the dynamic loader's search. @return the path (absolute, or as found
/// in a TRACER_PLUGIN_PATH directory), or why not.
[[nodiscard]] Result<std::string> find_plugin(const std::string& name, const std::string& recipe);

}  // namespace tracer::stages
