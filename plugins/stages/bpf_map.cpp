#include "bpf_map.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstring>

#include "tracer/common/edit_distance.hpp"

namespace tracer::stages {
namespace {

bool readable(const bpf::SchemaField& f) {
  const bool integer = f.kind == bpf::FieldKind::kSigned || f.kind == bpf::FieldKind::kUnsigned ||
                       f.kind == bpf::FieldKind::kPointer;
  return (integer && (f.size == 1 || f.size == 2 || f.size == 4 || f.size == 8)) ||
         f.kind == bpf::FieldKind::kString;
}

/// A field of a key or value as a cell (integers by size and sign, bitfields extracted, char
/// arrays as text up to their NUL).
Cell read_cell(const bpf::SchemaField& f, std::span<const std::byte> bytes) {
  if (f.offset + f.size > bytes.size())
    return {};
  const std::byte* p = bytes.data() + f.offset;
  if (f.kind == bpf::FieldKind::kString) {
    const auto* s = reinterpret_cast<const char*>(p);
    return std::string(s, ::strnlen(s, f.size));
  }
  std::uint64_t v = 0;
  std::memcpy(&v, p, f.size);  // little-endian: the low bytes
  if (f.bit_size != 0)
    v = (v >> f.bit_offset) & ((std::uint64_t{1} << f.bit_size) - 1);
  if (f.kind != bpf::FieldKind::kSigned)
    return v;
  const unsigned bits = f.bit_size != 0 ? f.bit_size : f.size * 8;
  if (bits < 64 && (v >> (bits - 1) & 1U) != 0)
    v |= ~std::uint64_t{0} << bits;  // sign-extend
  return static_cast<std::int64_t>(v);
}

double score_of(const Cell& c) {
  if (const auto* i = std::get_if<std::int64_t>(&c))
    return static_cast<double>(*i);
  if (const auto* u = std::get_if<std::uint64_t>(&c))
    return static_cast<double>(*u);
  return 0;
}

std::string names_of(const bpf::StructSchema& s) {
  std::string out;
  for (const auto& f : s.fields)
    out += fmt::format("{}{} ({})", out.empty() ? "" : ", ", f.name, f.type_name);
  return out;
}

}  // namespace

StageSpec BpfMap::spec() {
  StageSpec s{.name = "bpf-map",
              .summary =
                  "read a BPF map the recipe's program fills (in-kernel aggregation) "
                  "at each interval and at the end",
              .options = {},
              .needs = {.kinds = 0}};  // no event reaches user space for it
  s.options = {
      {.name = "map",
       .type = OptionSpec::Type::kString,
       .required = true,
       .help = "the map of the recipe's BPF object: map = \"counts\""},
      {.name = "keys",
       .type = OptionSpec::Type::kStringList,
       .required = false,
       .help = "key fields to show (default: every field of the key's BTF type)"},
      {.name = "values",
       .type = OptionSpec::Type::kStringList,
       .required = false,
       .help = "value fields to show (default: every integer field of the value)"},
      {.name = "sort",
       .type = OptionSpec::Type::kString,
       .required = false,
       .help = "value field the rows are ordered by, largest first (default: the first)"},
      {.name = "clear",
       .type = OptionSpec::Type::kBool,
       .required = false,
       .help = "delete (arrays: zero) what each read saw, so each `every` table covers its "
               "interval (default false: running totals)"},
      {.name = "top",
       .type = OptionSpec::Type::kInt,
       .required = false,
       .help = "keep the N largest rows"},
      {.name = "every",
       .type = OptionSpec::Type::kDuration,
       .required = false,
       .help = "read the map at this interval (e.g. \"1s\"), and at the end"},
  };
  return s;
}

void BpfMap::configure(const ConfigValue& options, Diagnostics& diags) {
  const StageSpec s = spec();
  stage_name_ = s.name;
  StageOptions opts(s, options, diags);
  map_ = opts.string("map").value_or("");
  map_where_ = opts.where("map");
  key_names_ = opts.list("keys");
  value_names_ = opts.list("values");
  if (auto v = opts.string("sort"))
    sort_.emplace(*v, opts.where("sort"));
  clear_ = opts.boolean("clear").value_or(false);
  top_ = opts.integer("top");
  if (top_ && *top_ <= 0) {
    diags.add(opts.where("top"), "option 'top' must be a positive integer");
    top_.reset();
  }
  every_ = opts.duration("every");
}

void BpfMap::bind(BindContext& ctx, Diagnostics& diags) {
  maps_ = ctx.maps;
  keys_.clear();
  values_.clear();
  if (maps_ == nullptr || map_.empty())
    return;  // no map source (tracer replay): nothing to check the name against
  auto schema = maps_->schema(map_);
  if (!schema) {
    // The object's own maps: libbpf's internal ones (".rodata", "obj.bss") are no C names.
    auto names = maps_->map_names();
    std::erase_if(names, [](const std::string& n) { return n.find('.') != std::string::npos; });
    std::string hint = schema.error().hint;
    if (!names.empty()) {
      // The nearest name ("did you mean", when one is near), then all of them.
      const auto near = detail::nearest(map_, names);
      hint = fmt::format("{}maps: {}",
                         near.empty() ? "" : fmt::format("did you mean '{}'? ", near.front()),
                         fmt::join(names, ", "));
    }
    diags.add(map_where_, schema.error().message, hint);
    return;
  }
  const auto pick = [&](const bpf::StructSchema& from,
                        const std::vector<std::pair<std::string, SourceRegion>>& wanted, bool key,
                        std::vector<Column>& out) {
    if (wanted.empty()) {
      for (const auto& f : from.fields) {
        if (readable(f))
          out.push_back({f, key});
      }
      return;
    }
    for (const auto& [name, where] : wanted) {
      const auto* f = from.field(name);
      if (f == nullptr) {
        diags.add(where,
                  fmt::format("map '{}' has no {} field '{}'", map_, key ? "key" : "value", name),
                  fmt::format("{} fields: {}", key ? "key" : "value", names_of(from)));
      } else if (!readable(*f)) {
        diags.add(where,
                  fmt::format("field '{}' of map '{}' is a {} ({}): only integers and char arrays "
                              "can be shown",
                              name, map_, bpf::field_kind_name(f->kind), f->type_name));
      } else {
        out.push_back({*f, key});
      }
    }
  };
  pick(schema->key, key_names_, true, keys_);
  pick(schema->value, value_names_, false, values_);
  if (values_.empty() && value_names_.empty()) {
    diags.add(map_where_, fmt::format("map '{}' has no integer value field to show", map_),
              fmt::format("value fields: {}", names_of(schema->value)));
  }
  sort_column_ = 0;
  if (sort_) {
    bool found = false;
    for (std::size_t i = 0; i < values_.size(); ++i) {
      if (values_[i].field.name == sort_->first) {
        sort_column_ = i;
        found = true;
      }
    }
    if (!found)
      diags.add(sort_->second,
                fmt::format("'{}' is not one of the value fields shown", sort_->first),
                fmt::format("value fields: {}", names_of(schema->value)));
  }
}

void BpfMap::snapshot(Table& out, bool reset) {
  out.stage = stage_name_;
  out.title = fmt::format("map {}", map_);
  out.key_names.clear();
  out.value_names.clear();
  for (const auto& c : keys_)
    out.key_names.push_back(c.field.name);
  for (const auto& c : values_)
    out.value_names.push_back(c.field.name);
  out.rows.clear();
  if (maps_ == nullptr)
    return;
  auto snap = maps_->read(map_, clear_ && reset);
  if (!snap) {
    out.note = fmt::format("reading map '{}' failed: {}", map_, snap.error().message);
    return;
  }
  std::vector<double> scores;
  out.rows.reserve(snap->entries.size());
  scores.reserve(snap->entries.size());
  for (const auto& [key, value] : snap->entries) {
    TableRow row;
    for (const auto& c : keys_)
      row.keys.push_back(read_cell(c.field, key));
    for (const auto& c : values_)
      row.values.push_back(read_cell(c.field, value));
    scores.push_back(row.values.empty() ? 0 : score_of(row.values[sort_column_]));
    out.rows.push_back(std::move(row));
  }
  order(out, scores);
}

}  // namespace tracer::stages
