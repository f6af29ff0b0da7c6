// Private to bpf/: captures what libbpf prints while opening or loading an object, so that the
// text ends up in a Failure instead of on stderr.
#pragma once

#include <mutex>
#include <string>

namespace tracer::bpf::detail {

/// While alive, libbpf's messages (warnings and info; debug too when `debug`) from this thread
/// are appended to `sink`. libbpf_set_print() is process-wide, so captures are serialized.
class PrintCapture {
 public:
  explicit PrintCapture(std::string& sink, bool debug = false);
  ~PrintCapture();
  PrintCapture(const PrintCapture&) = delete;
  PrintCapture& operator=(const PrintCapture&) = delete;

 private:
  std::unique_lock<std::mutex> lock_;
  void* previous_ = nullptr;  // libbpf_print_fn_t
};

}  // namespace tracer::bpf::detail
