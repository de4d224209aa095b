// Renders a parsed jinja::Template: jinja2's scoping (a for-loop iteration and a macro call are
// scopes; `if` is not; a namespace is the way to carry state out of a loop), loop variables,
// macros, loop controls, and the globals transformers adds (raise_exception, strftime_now) next
// to jinja2's (range, namespace, dict).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "text/jinja_ast.h"

namespace epserve::text::jinja {

struct RenderOptions {
  // strftime_now() formats this instant (seconds since 1970, UTC) instead of the local time now.
  std::optional<int64_t> fixed_time_epoch;
  int max_call_depth = 64;  // macro recursion limit
};

// `variables` become the template's top-level names (shadowing the globals). Errors are
// "origin:line:col: message".
StatusOr<std::string> Render(const Template& tpl, const Dict& variables,
                             const RenderOptions& options);

}  // namespace epserve::text::jinja
