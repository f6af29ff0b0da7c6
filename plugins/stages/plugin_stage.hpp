// plugin: a stage from a shared object, through the C ABI of tracer/plugin.h. The recipe names
// it (`[[stage]] plugin = "./libmystage.so"`, or `use = "plugin"`); its other options go to the
// plugin as text. What the plugin cannot do (a wrong ABI version, a missing entry point, a load
// failure, a refused option) is a recipe error at the stage; what it fails at while running (an
// error code, an exception) is counted, never a crash of the host.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "tracer/plugin.h"
#include "tracer/stage.hpp"

namespace tracer::stages {

/// A loaded shared object and its descriptor (dlclose when the last stage of it goes).
struct PluginLibrary;

class PluginStage : public Stage, public Aggregation {
 public:
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
  /// Records a failed call (`what`) and the plugin's reason; after an exception, the stage is
  /// off.
  void failed(const char* what, bool exception) noexcept;

  std::shared_ptr<PluginLibrary> lib_;
  const tracer_plugin_descriptor* desc_ = nullptr;
  std::uint32_t desc_size_ = 0;
  void* self_ = nullptr;
  std::string name_;
  SourceRegion where_;
  std::vector<FieldRef> fields_;
  std::vector<std::string> key_names_, value_names_;
  bool off_ = false;  // an exception crossed the boundary: no more calls but destroy
  std::uint64_t failures_ = 0, exceptions_ = 0, missed_ = 0;
  std::string last_error_;
  std::vector<const tracer_event*> batch_;
};

/// The file a recipe's `plugin` names: a path with a '/' relative to the recipe's directory, a
/// bare name searched in TRACER_PLUGIN_PATH (':'-separated). It must be a regular file owned by
/// root or by the user tracer runs as and writable by no one else (tracer runs as root: a
/// library someone else can replace is someone else's code). @return the path, or why not.
[[nodiscard]] Result<std::string> find_plugin(const std::string& name, const std::string& recipe);

}  // namespace tracer::stages
