#include "base/guarded_thread.h"

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <new>

namespace epserve {

void DieOnEscapedException(const std::string& thread_name) {
  std::string what = "an unknown exception";
  try {
    throw;
  } catch (const std::bad_alloc&) {
    what = "out of memory";
  } catch (const std::exception& e) {
    what = e.what();
  } catch (...) {
  }
  std::fflush(stdout);
  std::fprintf(stderr, "epserve: internal error in %s: %s\n", thread_name.c_str(), what.c_str());
  std::fflush(stderr);
  std::_Exit(2);
}

}  // namespace epserve
