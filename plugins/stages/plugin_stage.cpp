#include "plugin_stage.hpp"

#include <dlfcn.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <filesystem>
#include <utility>

#include "tracer/stage_options.hpp"
#include "tracer/stages.hpp"

namespace tracer::stages {

namespace fs = std::filesystem;

struct PluginLibrary {
  void* handle = nullptr;
  PluginLibrary() = default;
  PluginLibrary(const PluginLibrary&) = delete;
  PluginLibrary& operator=(const PluginLibrary&) = delete;
  ~PluginLibrary() {
    if (handle != nullptr)
      ::dlclose(handle);
  }
};

namespace {

/// The end of a descriptor field: a plugin's `size` must reach it for tracer to read it.
#define TRACER_END_OF(field)                   \
  (offsetof(tracer_plugin_descriptor, field) + \
   sizeof(static_cast<tracer_plugin_descriptor*>(nullptr)->field))

/// Why `path` may not be loaded by a root process, or nullopt.
std::optional<std::string> unsafe_file(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0)
    return fmt::format("cannot read '{}'", path);
  if (!S_ISREG(st.st_mode))
    return fmt::format("'{}' is not a regular file", path);
  if (st.st_uid != 0 && st.st_uid != ::geteuid())
    return fmt::format("'{}' belongs to uid {}, neither root nor the user tracer runs as", path,
                       st.st_uid);
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0)
    return fmt::format("'{}' is writable by its group or by others", path);
  return std::nullopt;
}

/// A recipe option as the text a plugin gets (numbers in decimal, booleans true/false, a list
/// joined by ','), or nullopt for a table.
std::optional<std::string> option_text(const ConfigValue& v) {
  if (const auto* s = v.string())
    return *s;
  if (const auto* b = std::get_if<bool>(&v.value))
    return *b ? "true" : "false";
  if (const auto* i = std::get_if<std::int64_t>(&v.value))
    return std::to_string(*i);
  if (const auto* d = std::get_if<double>(&v.value))
    return fmt::format("{}", *d);
  if (const auto* a = v.array()) {
    std::string out;
    for (const auto& e : *a) {
      auto t = option_text(e);
      if (!t)
        return std::nullopt;
      out += (out.empty() ? "" : ",") + *t;
    }
    return out;
  }
  return std::nullopt;
}

Cell to_cell(const tracer_value& v) {
  switch (v.type) {
    case TRACER_VALUE_INT:
      return v.i;
    case TRACER_VALUE_UINT:
      return v.u;
    case TRACER_VALUE_DOUBLE:
      return v.d;
    case TRACER_VALUE_STRING:
      return v.str == nullptr ? std::string() : std::string(v.str, v.len);
    default:
      return std::monostate{};
  }
}

/// A loaded plugin: its library and its checked descriptor.
struct Loaded {
  std::shared_ptr<PluginLibrary> lib;
  const tracer_plugin_descriptor* desc = nullptr;
};

/// Loads the shared object at `path` and checks its descriptor (the ABI's major version, the
/// functions every stage needs). @return it, or why not (a message for the recipe).
Result<Loaded> load_plugin(const std::string& path) {
  auto lib = std::make_shared<PluginLibrary>();
  lib->handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (lib->handle == nullptr) {
    const char* err = ::dlerror();
    return fail(ENOEXEC,
                fmt::format("cannot load plugin '{}': {}", path, err ? err : "dlopen failed"),
                "build it as a shared object (-shared -fPIC) for this machine");
  }
  void* sym = ::dlsym(lib->handle, TRACER_PLUGIN_ENTRY);
  if (sym == nullptr) {
    return fail(ENOENT,
                fmt::format("plugin '{}' has no entry point '{}'", path, TRACER_PLUGIN_ENTRY),
                "export it: extern \"C\" const tracer_plugin_descriptor* "
                "tracer_plugin_entry(void)");
  }
  const tracer_plugin_descriptor* d = nullptr;
  try {
    d = reinterpret_cast<tracer_plugin_entry_fn>(sym)();
  } catch (...) {
    d = nullptr;
  }
  if (d == nullptr || !PluginStage::covers(d->size, TRACER_END_OF(abi_minor)))
    return fail(EINVAL, fmt::format("plugin '{}': its entry point gave no descriptor", path));
  if (d->abi_major != TRACER_PLUGIN_ABI_MAJOR) {
    return fail(EINVAL,
                fmt::format("plugin '{}' is built for the plugin ABI {}.{}; this tracer speaks "
                            "{}.{}",
                            path, d->abi_major, d->abi_minor, TRACER_PLUGIN_ABI_MAJOR,
                            TRACER_PLUGIN_ABI_MINOR),
                fmt::format("rebuild it against tracer/plugin.h of this tracer (ABI major {})",
                            TRACER_PLUGIN_ABI_MAJOR));
  }
  if (!PluginStage::covers(d->size, TRACER_END_OF(destroy)) || d->create == nullptr ||
      d->fields == nullptr || d->on_events == nullptr || d->destroy == nullptr) {
    return fail(EINVAL,
                fmt::format("plugin '{}': its descriptor lacks create, fields, on_events or "
                            "destroy",
                            path));
  }
  return Loaded{.lib = std::move(lib), .desc = d};
}

std::vector<std::string> plugin_dirs() {
  std::vector<std::string> out;
  const char* env = std::getenv("TRACER_PLUGIN_PATH");
  std::string_view dirs(env != nullptr ? env : "");
  while (!dirs.empty()) {
    const auto colon = dirs.find(':');
    if (const auto dir = dirs.substr(0, colon); !dir.empty())
      out.emplace_back(dir);
    dirs = colon == std::string_view::npos ? std::string_view() : dirs.substr(colon + 1);
  }
  return out;
}

}  // namespace

Result<std::string> find_plugin(const std::string& name, const std::string& recipe) {
  std::vector<fs::path> candidates;
  if (name.find('/') != std::string::npos) {
    const fs::path p(name);
    candidates.push_back(p.is_absolute() ? p : fs::path(recipe).parent_path() / p);
  } else {
    for (const auto& dir : plugin_dirs())
      candidates.push_back(fs::path(dir) / name);
  }
  for (const auto& c : candidates) {
    std::error_code ec;
    if (!fs::exists(c, ec))
      continue;
    const std::string path = c.lexically_normal().string();
    if (auto why = unsafe_file(path))
      return fail(
          EACCES, *why,
          "a plugin must be owned by root (or you) and writable by no one else: chmod go-w");
    return path;
  }
  return fail(ENOENT, fmt::format("no plugin '{}'", name),
              name.find('/') != std::string::npos
                  ? std::string("a relative path is taken from the recipe's directory")
                  : std::string("a bare name is searched in TRACER_PLUGIN_PATH (dirs separated by "
                                "':'); write ./NAME for the recipe's directory"));
}

PluginStage::PluginStage() = default;

PluginStage::~PluginStage() {
  if (self_ != nullptr && desc_ != nullptr && desc_->destroy != nullptr) {
    try {
      desc_->destroy(self_);
    } catch (...) {  // NOLINT(bugprone-empty-catch): nothing to do at destruction
    }
  }
}

StageSpec PluginStage::spec() {
  return {.name = "plugin",
          .summary = "a stage from a shared object through tracer's C ABI (tracer/plugin.h)",
          .options = {{.name = "plugin",
                       .type = OptionSpec::Type::kString,
                       .required = true,
                       .help = "the shared object: ./lib.so (the recipe's directory) or a name "
                               "in TRACER_PLUGIN_PATH"}},
          .needs = {},
          .open_options = true};
}

void PluginStage::configure(const ConfigValue& options, Diagnostics& diags) {
  StageOptions opts(spec(), options, diags);
  where_ = options.where;
  const auto name = opts.string("plugin");
  if (!name)
    return;
  const SourceRegion at = opts.where("plugin");
  auto path = find_plugin(*name, at.path);
  if (!path) {
    diags.add(at, path.error().message, path.error().hint, {.option = "plugin"});
    return;
  }
  auto loaded = load_plugin(*path);
  if (!loaded) {
    diags.add(at, loaded.error().message, loaded.error().hint, {.option = "plugin"});
    return;
  }
  auto [lib, d] = std::move(*loaded);
  // Its own options, as text.
  std::vector<std::string> keys, values;
  if (const ConfigTable* t = options.table()) {
    for (const auto& [key, v] : *t) {
      if (key == "plugin" || key == "use")
        continue;
      auto text = option_text(v);
      if (!text) {
        diags.add(v.where, fmt::format("plugin option '{}' must be a value or a list", key));
        continue;
      }
      keys.push_back(key);
      values.push_back(std::move(*text));
    }
  }
  std::vector<const char*> kp, vp;
  for (std::size_t i = 0; i < keys.size(); ++i) {
    kp.push_back(keys[i].c_str());
    vp.push_back(values[i].c_str());
  }
  const char* error = nullptr;
  void* self = nullptr;
  try {
    self = d->create(kp.data(), vp.data(), static_cast<std::uint32_t>(kp.size()), &error);
  } catch (...) {
    error = "an exception was thrown from create";
  }
  name_ = d->name != nullptr ? d->name : "plugin";
  if (self == nullptr) {
    diags.add(where_, fmt::format("plugin '{}' refused its options: {}", name_,
                                  error != nullptr ? error : "no reason given"));
    return;
  }
  lib_ = std::move(lib);
  desc_ = d;
  desc_size_ = d->size;
  self_ = self;
}

void PluginStage::bind(BindContext& ctx, Diagnostics& diags) {
  if (self_ == nullptr)
    return;
  const char* const* names = nullptr;
  std::uint32_t n = 0;
  int rc = 1;
  try {
    rc = desc_->fields(self_, &names, &n);
  } catch (...) {
    rc = 1;
  }
  if (rc != 0 || (n != 0 && names == nullptr)) {
    diags.add(where_, fmt::format("plugin '{}' did not name its fields", name_));
    return;
  }
  for (std::uint32_t i = 0; i < n; ++i) {
    if (auto f = ctx.schema.bind(names[i] != nullptr ? names[i] : "", where_, diags))
      fields_.push_back(*f);
  }
  if (covers(desc_size_, TRACER_END_OF(columns)) && desc_->columns != nullptr) {
    const char* const* k = nullptr;
    const char* const* v = nullptr;
    std::uint32_t nk = 0, nv = 0;
    if (desc_->columns(self_, &k, &nk, &v, &nv) == 0) {
      for (std::uint32_t i = 0; i < nk && k != nullptr; ++i)
        key_names_.emplace_back(k[i] != nullptr ? k[i] : "");
      for (std::uint32_t i = 0; i < nv && v != nullptr; ++i)
        value_names_.emplace_back(v[i] != nullptr ? v[i] : "");
    }
  }
}

void PluginStage::failed(const char* what, bool exception) noexcept {
  if (exception) {
    ++exceptions_;
    off_ = true;
  } else {
    ++failures_;
  }
  try {
    const char* why = nullptr;
    if (!exception && covers(desc_size_, TRACER_END_OF(last_error)) && desc_->last_error != nullptr)
      why = desc_->last_error(self_);
    last_error_ = fmt::format("{}: {}", what,
                              exception        ? "an exception crossed the plugin boundary"
                              : why != nullptr ? why
                                               : "failed");
  } catch (...) {  // NOLINT(bugprone-empty-catch): the counts say it
  }
}

void PluginStage::on_events(std::span<Event* const> events) noexcept {
  if (self_ == nullptr)
    return;
  if (off_) {
    missed_ += events.size();
    return;
  }
  batch_.clear();
  for (Event* e : events)
    batch_.push_back(reinterpret_cast<const tracer_event*>(e));
  const tracer_host host{
      .size = sizeof(tracer_host),
      .ctx = this,
      .read =
          [](void* ctx, const tracer_event* event, std::uint32_t index, tracer_value* out) {
            const auto* st = static_cast<const PluginStage*>(ctx);
            if (out == nullptr || index >= st->fields_.size())
              return 1;
            *out = {};
            const Value v = st->fields_[index].read(*reinterpret_cast<const Event*>(event));
            if (const auto* i = std::get_if<std::int64_t>(&v)) {
              out->type = TRACER_VALUE_INT;
              out->i = *i;
            } else if (const auto* u = std::get_if<std::uint64_t>(&v)) {
              out->type = TRACER_VALUE_UINT;
              out->u = *u;
            } else if (const auto* d = std::get_if<double>(&v)) {
              out->type = TRACER_VALUE_DOUBLE;
              out->d = *d;
            } else if (const auto* s = std::get_if<std::string_view>(&v)) {
              out->type = TRACER_VALUE_STRING;
              out->str = s->data();
              out->len = s->size();
            }
            return 0;
          },
      .drop =
          [](void* /*ctx*/, const tracer_event* event) {
            // The plugin was handed these events to drop (they are this stage's batch).
            const_cast<Event*>(reinterpret_cast<const Event*>(event))->drop();
          },
  };
  try {
    if (desc_->on_events(self_, &host, batch_.data(), static_cast<std::uint32_t>(batch_.size())) !=
        0)
      failed("on_events", false);
  } catch (...) {
    failed("on_events", true);
  }
}

void PluginStage::snapshot(Table& out, bool reset) {
  out.stage = name_;
  out.title = name_;
  out.key_names = key_names_;
  out.value_names = value_names_;
  out.note = last_error_;  // the plugin's last failure, if any (its counters count them)
  if (self_ == nullptr || off_ || !covers(desc_size_, TRACER_END_OF(snapshot)) ||
      desc_->snapshot == nullptr)
    return;
  struct Sink {
    Table* table;
    std::size_t keys, values;
  } sink{&out, key_names_.size(), value_names_.size()};
  const tracer_rows rows{
      .size = sizeof(tracer_rows),
      .ctx = &sink,
      .row =
          [](void* ctx, const tracer_value* keys, std::uint32_t n_keys, const tracer_value* values,
             std::uint32_t n_values) {
            auto* s = static_cast<Sink*>(ctx);
            // A row with other columns than the plugin named is refused (the outputs line
            // cells up with names).
            if ((n_keys != 0 && keys == nullptr) || (n_values != 0 && values == nullptr) ||
                n_keys != s->keys || n_values != s->values)
              return 1;
            TableRow row;
            for (std::uint32_t i = 0; i < n_keys; ++i)
              row.keys.push_back(to_cell(keys[i]));
            for (std::uint32_t i = 0; i < n_values; ++i)
              row.values.push_back(to_cell(values[i]));
            s->table->rows.push_back(std::move(row));
            return 0;
          },
  };
  try {
    if (desc_->snapshot(self_, &rows, reset ? 1 : 0) != 0)
      failed("snapshot", false);
  } catch (...) {
    failed("snapshot", true);
  }
}

void PluginStage::counters(std::vector<std::pair<std::string, std::uint64_t>>& out) const {
  out.emplace_back("failures", failures_);
  out.emplace_back("exceptions", exceptions_);
  if (missed_ != 0)
    out.emplace_back("missed", missed_);
}

}  // namespace tracer::stages

namespace tracer {

std::vector<PluginInfo> find_plugins() {
  std::vector<PluginInfo> out;
  for (const auto& dir : stages::plugin_dirs()) {
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
      if (e.path().extension() != ".so")
        continue;
      PluginInfo info{.path = e.path().string()};
      if (auto found = stages::find_plugin(e.path().filename().string(), {}); !found) {
        info.problem = found.error().message;
      } else if (auto loaded = stages::load_plugin(*found); !loaded) {
        info.problem = loaded.error().message;
      } else {
        const auto* d = loaded->desc;
        info.name = d->name != nullptr ? d->name : "";
        info.summary = d->summary != nullptr ? d->summary : "";
        info.abi_major = d->abi_major;
        info.abi_minor = d->abi_minor;
      }
      out.push_back(std::move(info));
    }
  }
  std::sort(out.begin(), out.end(),
            [](const PluginInfo& a, const PluginInfo& b) { return a.path < b.path; });
  return out;
}

}  // namespace tracer
