// std::thread whose body may not end in std::terminate: an exception that escapes it prints
//   epserve: internal error in <name>: <what>
// and ends the process with exit code 2, as the top-level handler in tools/main.cc does for the
// main thread. A server must not go on with one of its threads silently dead (its requests
// would hang), and an abort's core dump says less than one line naming the thread.
// Threads that can report an error to someone (the engine loop fails its requests) catch their
// own exceptions first; this is the last line for the rest.
#pragma once

#include <string>
#include <thread>
#include <utility>

namespace epserve {

// Prints the line above for the exception being handled (call only inside a catch block) and
// exits with code 2 without unwinding (other threads may be using what unwinding destroys).
[[noreturn]] void DieOnEscapedException(const std::string& thread_name);

template <class F>
std::thread GuardedThread(std::string name, F body) {
  return std::thread([name = std::move(name), body = std::move(body)]() mutable {
    try {
      body();
    } catch (...) {
      DieOnEscapedException(name);
    }
  });
}

}  // namespace epserve
