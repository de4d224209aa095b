// Minimal CSV reading for the planner's inputs (routing traces, measured kernel times):
// comma-separated fields, double-quoted fields may hold commas and "" for a quote.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace epserve::planner {

// Splits one line into fields. InvalidArgument on an unterminated quote.
StatusOr<std::vector<std::string>> SplitCsvLine(std::string_view line);

// Splits text into lines (\n or \r\n), dropping empty lines.
std::vector<std::string_view> SplitLines(std::string_view text);

}  // namespace epserve::planner
