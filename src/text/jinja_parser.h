// Jinja parser: tokens -> Template (jinja_ast.h). Unknown or unsupported tags, filters and tests
// are errors here, at parse time, naming origin:line:column.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "base/status.h"
#include "text/jinja_ast.h"

namespace epserve::text::jinja {

StatusOr<std::unique_ptr<Template>> ParseTemplate(std::string_view source, std::string origin,
                                                  const LexOptions& options);

}  // namespace epserve::text::jinja
