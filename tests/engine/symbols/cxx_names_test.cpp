// C++ names in uprobe specs (engine/symbols/cxx_names.cpp): demangled names matched with or
// without a signature, with wildcards, in tests/programs/cxx_target.cpp.
#include <gtest/gtest.h>

#include <cerrno>
#include <string>
#include <vector>

#include "tracer/symbols/uprobe_target.hpp"

namespace tracer::symbols {
namespace {

const std::string kTarget = TRACER_CXX_TARGET;

std::vector<std::string> names(const std::string& pattern) {
  auto m = match_functions(kTarget, pattern);
  EXPECT_TRUE(m.has_value()) << pattern << ": " << (m ? "" : m.error().describe());
  std::vector<std::string> out;
  if (m) {
    for (const auto& f : *m)
      out.push_back(f.demangled);
  }
  return out;
}

using V = std::vector<std::string>;
constexpr const char* kGetString =
    "shop::Cache::get(std::__cxx11::basic_string<char, std::char_traits<char>, "
    "std::allocator<char> > const&)";

TEST(CxxNames, TheNameWithoutItsParameters) {
  EXPECT_EQ(cxx_function_name("shop::Cache::get(int)"), "shop::Cache::get");
  EXPECT_EQ(cxx_function_name("shop::Cache::size() const"), "shop::Cache::size");
  EXPECT_EQ(cxx_function_name("int shop::twice<int>(int)"), "shop::twice<int>");
  EXPECT_EQ(cxx_function_name("shop::Cache::operator()(int)"), "shop::Cache::operator()");
  EXPECT_EQ(cxx_function_name("std::ostream& operator<<(std::ostream&, X const&)"), "operator<<");
  EXPECT_EQ(cxx_function_name("(anonymous namespace)::helper(int)"),
            "(anonymous namespace)::helper");
  EXPECT_EQ(cxx_function_name("f::{lambda(int)#1}::operator()(int) const"),
            "f::{lambda(int)#1}::operator()");
  EXPECT_EQ(cxx_function_name("main"), "main");
}

TEST(CxxNames, OverloadsSignaturesAndWildcards) {
  EXPECT_EQ(names("shop::Cache::get"), (V{"shop::Cache::get(int)", kGetString}));
  EXPECT_EQ(names("shop::Cache::get(int)"), (V{"shop::Cache::get(int)"}));
  EXPECT_EQ(names("shop::Cache::size() const"), (V{"shop::Cache::size() const"}));
  EXPECT_EQ(names("shop::Cache::*"),
            (V{"shop::Cache::get(int)", kGetString, "shop::Cache::operator()(int)",
               "shop::Cache::size() const"}));
  EXPECT_EQ(names("shop::*"), (V{"int shop::twice<int>(int)", "shop::Cache::get(int)", kGetString,
                                 "shop::Cache::operator()(int)", "shop::Cache::size() const",
                                 "shop::util::hash(int)"}));
  EXPECT_EQ(names("shop::twice<int>"), (V{"int shop::twice<int>(int)"}));
  EXPECT_EQ(names("shop::Cache::get(?nt)"), (V{"shop::Cache::get(int)"}));
  EXPECT_EQ(names("main"), (V{"main"}));  // a C name matches itself
}

TEST(CxxNames, AMissingNameSuggestsTheNearDemangledOnes) {
  auto m = match_functions(kTarget, "shop::Cache::gte");
  ASSERT_FALSE(m.has_value());
  EXPECT_EQ(m.error().errno_value(), ENOENT);
  EXPECT_NE(m.error().message.find("no function matches 'shop::Cache::gte'"), std::string::npos)
      << m.error().describe();
  EXPECT_NE(m.error().hint.find("shop::Cache::get"), std::string::npos) << m.error().hint;
}

TEST(CxxNames, SpecsSplitOutsideTheDoubleColons) {
  auto overloads = parse_uprobe_spec(kTarget + ":shop::Cache::get", std::nullopt);
  ASSERT_TRUE(overloads.has_value()) << overloads.error().describe();
  EXPECT_EQ(overloads->path, kTarget);
  ASSERT_EQ(overloads->sites.size(), 2U);
  EXPECT_EQ(overloads->sites[0].symbol, "shop::Cache::get(int)");
  EXPECT_NE(overloads->sites[0].offset, overloads->sites[1].offset);
  // The mangled name, the bpftrace form and the signature name one place.
  auto mangled = parse_uprobe_spec(kTarget + ":_ZN4shop5Cache3getEi", std::nullopt);
  auto bpftrace = parse_uprobe_spec(kTarget + ":cpp:shop::Cache::get(int)", std::nullopt);
  auto signature = parse_uprobe_spec(kTarget + ":shop::Cache::get(int)", std::nullopt);
  for (const auto* t : {&mangled, &bpftrace, &signature}) {
    ASSERT_TRUE(t->has_value()) << t->error().describe();
    ASSERT_EQ((*t)->sites.size(), 1U);
    EXPECT_EQ((*t)->sites[0].offset, overloads->sites[0].offset);
  }
  auto missing = parse_uprobe_spec(kTarget + ":shop::Cache::gte", std::nullopt);
  ASSERT_FALSE(missing.has_value());
  EXPECT_NE(missing.error().hint.find("shop::Cache::get"), std::string::npos);
}

TEST(CxxNames, APatternOfTooManyFunctionsIsRefusedWithTheListCommand) {
  auto lib = resolve_binary("libstdc++", std::nullopt);
  ASSERT_TRUE(lib.has_value()) << lib.error().describe();
  auto all = parse_uprobe_spec(lib->string() + ":std::*", std::nullopt);
  ASSERT_FALSE(all.has_value());
  EXPECT_EQ(all.error().errno_value(), EINVAL);
  EXPECT_NE(all.error().message.find("at most 256 per probe"), std::string::npos)
      << all.error().describe();
  EXPECT_NE(all.error().hint.find("tracer list uprobes"), std::string::npos);
}

}  // namespace
}  // namespace tracer::symbols
