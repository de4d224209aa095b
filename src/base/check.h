// CHECK(cond) << "message": aborts with file:line on a violated invariant (our bug).
// Never use it for user input; that is what Status is for.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <sstream>

namespace epserve::internal {

class CheckFailure {
 public:
  CheckFailure(const char* file, int line, const char* cond) {
    stream_ << file << ":" << line << ": CHECK failed: " << cond << " ";
  }
  [[noreturn]] ~CheckFailure() {
    std::fprintf(stderr, "%s\n", stream_.str().c_str());
    std::fflush(stderr);
    std::abort();
  }
  std::ostream& stream() { return stream_; }

 private:
  std::ostringstream stream_;
};

struct Voidify {
  void operator&(std::ostream&) {}
};

}  // namespace epserve::internal

#define CHECK(cond)                                     \
  (cond) ? (void)0                                      \
         : ::epserve::internal::Voidify() &             \
               ::epserve::internal::CheckFailure(__FILE__, __LINE__, #cond).stream()

#ifdef NDEBUG
#define DCHECK(cond) \
  while (false) CHECK(cond)
#else
#define DCHECK(cond) CHECK(cond)
#endif
