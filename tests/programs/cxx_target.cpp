// Test target for C++ names in uprobe specs: for N = argv[1] (default 1), calls
//   shop::Cache::get(int)                 N times
//   shop::Cache::get(std::string const&)  2N times
//   shop::Cache::size() const             3N times
//   shop::Cache::operator()(int)          4N times
//   shop::util::hash(int)                 5N times
//   int shop::twice<int>(int)             6N times
// noipa keeps one out-of-line copy of each, called every time (noinline alone lets GCC merge
// calls of a function it proves pure).
#include <cstdlib>
#include <string>

namespace shop {

class Cache {
 public:
  int get(int key);
  int get(const std::string& key);
  [[nodiscard]] int size() const;
  int operator()(int key);

 private:
  int hits_ = 0;
};

__attribute__((noipa)) int Cache::get(int key) {
  return hits_ += key;
}
__attribute__((noipa)) int Cache::get(const std::string& key) {
  return hits_ += static_cast<int>(key.size());
}
__attribute__((noipa)) int Cache::size() const {
  return hits_;
}
__attribute__((noipa)) int Cache::operator()(int key) {
  return get(key) - key;  // get(int) here too: counted as 4N calls of get(int) more
}

namespace util {
__attribute__((noipa)) int hash(int v) {
  return v * 31;
}
}  // namespace util

template <typename T>
__attribute__((noipa)) T twice(T v) {
  return v + v;
}
template int twice<int>(int);

}  // namespace shop

int main(int argc, char** argv) {
  const int n = argc > 1 ? std::atoi(argv[1]) : 1;
  shop::Cache cache;
  const std::string key = "k";
  volatile int sink = 0;
  for (int i = 0; i < n; ++i) {
    sink = sink + cache.get(i);
    for (int j = 0; j < 2; ++j)
      sink = sink + cache.get(key);
    for (int j = 0; j < 3; ++j)
      sink = sink + cache.size();
    for (int j = 0; j < 4; ++j)
      sink = sink + cache(i);
    for (int j = 0; j < 5; ++j)
      sink = sink + shop::util::hash(i);
    for (int j = 0; j < 6; ++j)
      sink = sink + shop::twice(i);
  }
  return sink == 12345 ? 1 : 0;
}
