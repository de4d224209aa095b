// Importers for the two foreign trace forms: per-prompt CSV files and JSONL rows.
#include <algorithm>
#include <cctype>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "base/json.h"
#include "placement/trace_io.h"

namespace epserve::placement {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

constexpr char kCsvHeader[] = "Layer ID,Batch Number,Token,Activated Expert IDs";

std::string Where(const std::string& file, int64_t line) {
  return file + ":" + std::to_string(line);
}

// The expert lists of one imported sequence, by layer in order of appearance.
struct SequenceRows {
  std::vector<int> layer_ids;
  std::vector<std::vector<uint16_t>> experts;  // [layer][token * top_k + k]
};

// Splits one CSV record into fields (RFC 4180 quoting). Reads further lines while a quoted
// field is open; `line_no` advances accordingly.
StatusOr<std::vector<std::string>> SplitCsvRecord(std::istream& in, std::string line,
                                                  const std::string& file, int64_t* line_no) {
  std::vector<std::string> fields(1);
  const int64_t start = *line_no;
  bool quoted = false;
  for (size_t i = 0;; ++i) {
    if (i == line.size()) {
      if (!quoted) break;
      std::string next;
      if (!std::getline(in, next)) {
        return Status::DataLoss(Where(file, start) + ": unterminated quoted field");
      }
      ++*line_no;
      if (!next.empty() && next.back() == '\r') next.pop_back();
      fields.back().push_back('\n');
      line = next;
      i = static_cast<size_t>(-1);
      continue;
    }
    const char c = line[i];
    if (quoted) {
      if (c == '"' && i + 1 < line.size() && line[i + 1] == '"') {
        fields.back().push_back('"');
        ++i;
      } else if (c == '"') {
        quoted = false;
      } else {
        fields.back().push_back(c);
      }
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      fields.emplace_back();
    } else {
      fields.back().push_back(c);
    }
  }
  return fields;
}

bool ParseInt(const std::string& s, int64_t* out) {
  size_t i = 0;
  while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
  size_t j = s.size();
  while (j > i && std::isspace(static_cast<unsigned char>(s[j - 1]))) --j;
  if (i == j) return false;
  int64_t v = 0;
  for (size_t p = i; p < j; ++p) {
    if (!std::isdigit(static_cast<unsigned char>(s[p]))) return false;
    v = v * 10 + (s[p] - '0');
    if (v > (int64_t{1} << 40)) return false;
  }
  *out = v;
  return true;
}

// Parses "[8, 11, 29]".
StatusOr<std::vector<int64_t>> ParseIdList(const std::string& s) {
  const size_t open = s.find('[');
  const size_t close = s.rfind(']');
  if (open == std::string::npos || close == std::string::npos || close < open) {
    return Status::DataLoss("expert list \"" + s + "\" is not of the form [a, b, ...]");
  }
  std::vector<int64_t> ids;
  size_t p = open + 1;
  while (p < close) {
    size_t q = s.find(',', p);
    if (q == std::string::npos || q > close) q = close;
    int64_t v;
    if (!ParseInt(s.substr(p, q - p), &v)) {
      return Status::DataLoss("expert list \"" + s + "\" holds a non-integer");
    }
    ids.push_back(v);
    p = q + 1;
  }
  return ids;
}

// Checks one token's expert ids and appends them. `top_k` is set from the first row if 0.
Status AppendIds(const std::vector<int64_t>& ids, int num_experts, int* top_k,
                 std::vector<uint16_t>* out) {
  if (*top_k == 0) *top_k = static_cast<int>(ids.size());
  if (static_cast<int>(ids.size()) != *top_k) {
    return Status::DataLoss("expected " + std::to_string(*top_k) + " experts, got " +
                            std::to_string(ids.size()));
  }
  for (size_t i = 0; i < ids.size(); ++i) {
    const int64_t limit = num_experts > 0 ? num_experts : 65535;
    if (ids[i] < 0 || ids[i] >= limit) {
      return Status::DataLoss("expert id " + std::to_string(ids[i]) + " is not below " +
                              std::to_string(limit));
    }
    for (size_t j = 0; j < i; ++j) {
      if (ids[j] == ids[i]) {
        return Status::DataLoss("expert " + std::to_string(ids[i]) + " listed twice");
      }
    }
    out->push_back(static_cast<uint16_t>(ids[i]));
  }
  return Status::Ok();
}

StatusOr<SequenceRows> ReadCsvFile(const std::string& file, int num_experts, int* top_k) {
  std::ifstream in(file);
  if (!in) return Status::IoError(file + ": cannot open");
  std::string line;
  int64_t line_no = 1;
  if (!std::getline(in, line)) return Status::DataLoss(Where(file, 1) + ": empty file");
  if (line.rfind("\xEF\xBB\xBF", 0) == 0) line.erase(0, 3);
  if (!line.empty() && line.back() == '\r') line.pop_back();
  if (line != kCsvHeader) {
    return Status::DataLoss(Where(file, 1) + ": expected the header \"" + kCsvHeader + "\"");
  }
  SequenceRows rows;
  while (std::getline(in, line)) {
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) continue;
    const int64_t row_line = line_no;
    ASSIGN_OR_RETURN(std::vector<std::string> fields, SplitCsvRecord(in, line, file, &line_no));
    if (fields.size() != 4) {
      return Status::DataLoss(Where(file, row_line) + ": expected 4 fields, got " +
                              std::to_string(fields.size()));
    }
    int64_t layer, batch;
    if (!ParseInt(fields[0], &layer) || layer > 1000000) {
      return Status::DataLoss(Where(file, row_line) + ": bad layer id \"" + fields[0] + "\"");
    }
    if (!ParseInt(fields[1], &batch)) {
      return Status::DataLoss(Where(file, row_line) + ": bad batch number \"" + fields[1] + "\"");
    }
    if (rows.layer_ids.empty() || rows.layer_ids.back() != layer) {
      if (std::find(rows.layer_ids.begin(), rows.layer_ids.end(), layer) != rows.layer_ids.end()) {
        return Status::DataLoss(Where(file, row_line) + ": layer " + std::to_string(layer) +
                                " appears again after other layers (rows must be grouped by "
                                "layer)");
      }
      if (!rows.layer_ids.empty() && rows.experts.back().size() != rows.experts[0].size()) {
        return Status::DataLoss(Where(file, row_line) + ": layer " +
                                std::to_string(rows.layer_ids.back()) + " has " +
                                std::to_string(rows.experts.back().size() / *top_k) +
                                " tokens but layer " + std::to_string(rows.layer_ids[0]) + " has " +
                                std::to_string(rows.experts[0].size() / *top_k));
      }
      rows.layer_ids.push_back(static_cast<int>(layer));
      rows.experts.emplace_back();
    }
    StatusOr<std::vector<int64_t>> ids = ParseIdList(fields[3]);
    if (!ids.ok()) return ids.status().WithContext(Where(file, row_line));
    RETURN_IF_ERROR(AppendIds(*ids, num_experts, top_k, &rows.experts.back())
                        .WithContext(Where(file, row_line)));
  }
  if (rows.layer_ids.empty()) return Status::DataLoss(file + ": no rows");
  if (rows.experts.back().size() != rows.experts[0].size()) {
    return Status::DataLoss(Where(file, line_no) + ": layer " +
                            std::to_string(rows.layer_ids.back()) + " has " +
                            std::to_string(rows.experts.back().size() / *top_k) +
                            " tokens but layer " + std::to_string(rows.layer_ids[0]) + " has " +
                            std::to_string(rows.experts[0].size() / *top_k));
  }
  return rows;
}

// Orders files by the first number in their name (prompt_2 before prompt_10), then by name.
std::vector<std::string> SortedByNumber(std::vector<std::string> files) {
  auto key = [](const std::string& path) {
    const std::string name = fs::path(path).filename().string();
    const size_t p = name.find_first_of("0123456789");
    int64_t number = -1;
    if (p != std::string::npos) {
      number = 0;
      for (size_t i = p; i < name.size() && std::isdigit(static_cast<unsigned char>(name[i]));
           ++i) {
        number = std::min<int64_t>(number * 10 + (name[i] - '0'), int64_t{1} << 50);
      }
    }
    return std::make_pair(number, name);
  };
  std::stable_sort(files.begin(), files.end(),
                   [&](const std::string& a, const std::string& b) { return key(a) < key(b); });
  return files;
}

StatusOr<std::vector<std::string>> ExpandCsvPaths(const std::vector<std::string>& paths) {
  std::vector<std::string> files;
  for (const std::string& path : paths) {
    std::error_code ec;
    if (fs::is_directory(path, ec)) {
      std::vector<std::string> in_dir;
      for (const auto& entry : fs::directory_iterator(path, ec)) {
        if (entry.is_regular_file() && entry.path().extension() == ".csv") {
          in_dir.push_back(entry.path().string());
        }
      }
      if (ec) return Status::IoError(path + ": cannot list: " + ec.message());
      if (in_dir.empty()) return Status::NotFound(path + ": no *.csv files");
      in_dir = SortedByNumber(std::move(in_dir));
      files.insert(files.end(), in_dir.begin(), in_dir.end());
    } else {
      files.push_back(path);
    }
  }
  if (files.empty()) return Status::InvalidArgument("no trace files given");
  return files;
}

// Completes the shape from the data: num_experts and top_k where they were left 0.
Status CompleteShape(int max_id, int top_k, ModelShape* shape) {
  if (shape->num_experts == 0) shape->num_experts = max_id + 1;
  shape->top_k = top_k;
  return shape->Validate();
}

int MaxId(const std::vector<std::vector<uint16_t>>& lists, int max_id) {
  for (const auto& v : lists) {
    for (uint16_t e : v) max_id = std::max<int>(max_id, e);
  }
  return max_id;
}

}  // namespace

StatusOr<Trace> ImportCsvTrace(const std::vector<std::string>& paths,
                               const TraceImportOptions& options) {
  ASSIGN_OR_RETURN(std::vector<std::string> files, ExpandCsvPaths(paths));
  ModelShape shape = options.shape;
  int top_k = shape.top_k;
  std::vector<SequenceRows> sequences;
  sequences.reserve(files.size());
  int max_id = 0;
  for (const std::string& file : files) {
    ASSIGN_OR_RETURN(SequenceRows rows, ReadCsvFile(file, shape.num_experts, &top_k));
    if (!sequences.empty() && rows.layer_ids != sequences[0].layer_ids) {
      return Status::DataLoss(file + ": its layers differ from those of " + files[0]);
    }
    max_id = MaxId(rows.experts, max_id);
    sequences.push_back(std::move(rows));
  }
  RETURN_IF_ERROR(CompleteShape(max_id, top_k, &shape).WithContext(files[0]));
  std::vector<int> layer_ids = sequences[0].layer_ids;
  std::sort(layer_ids.begin(), layer_ids.end());
  Trace trace(shape, layer_ids, GateWeights::kAbsent);
  const size_t n = layer_ids.size() * static_cast<size_t>(top_k);
  std::vector<uint16_t> token(n);
  for (size_t s = 0; s < sequences.size(); ++s) {
    const SequenceRows& rows = sequences[s];
    const size_t num_tokens = rows.experts[0].size() / top_k;
    // Rows may list layers in any order; the trace keeps them sorted by id.
    std::vector<size_t> src(layer_ids.size());
    for (size_t l = 0; l < layer_ids.size(); ++l) {
      src[l] = std::find(rows.layer_ids.begin(), rows.layer_ids.end(), layer_ids[l]) -
               rows.layer_ids.begin();
    }
    for (size_t t = 0; t < num_tokens; ++t) {
      for (size_t l = 0; l < layer_ids.size(); ++l) {
        std::copy_n(rows.experts[src[l]].begin() + t * top_k, top_k, token.begin() + l * top_k);
      }
      RETURN_IF_ERROR(
          trace.AddToken(static_cast<uint32_t>(s), static_cast<uint32_t>(t), token.data(), nullptr)
              .WithContext(files[s]));
    }
  }
  return trace;
}

StatusOr<Trace> ImportJsonlTrace(const std::string& path, const TraceImportOptions& options) {
  std::ifstream in(path);
  if (!in) return Status::IoError(path + ": cannot open");
  struct TokenRows {
    int64_t sequence = -1;
    int64_t first_line = 0;
    std::map<int, std::pair<std::vector<uint16_t>, std::vector<float>>> layers;
  };
  std::map<int64_t, TokenRows> tokens;
  std::map<int, bool> layer_set;
  ModelShape shape = options.shape;
  int top_k = shape.top_k;
  int has_weights = -1;  // unknown until the first row
  int max_id = 0;
  std::string line;
  for (int64_t line_no = 1; std::getline(in, line); ++line_no) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = Where(path, line_no);
    ASSIGN_OR_RETURN(Json row, ParseJson(line, where));
    if (!row.is_object()) {
      return Status::DataLoss(where + ": expected a JSON object, got " + row.type_name());
    }
    // Each field is checked by type, so an error names the line and field (never the JSON
    // library's own text).
    auto bad_field = [&](const char* name, const char* want, const Json& v) {
      std::string got = v.dump();
      if (got.size() > 40) got = got.substr(0, 37) + "...";
      return Status::DataLoss(where + ": field \"" + name + "\" must be " + want + ", got " + got);
    };
    auto integer = [&](const char* name, int64_t* out) -> Status {
      const auto it = row.find(name);
      if (it == row.end()) return Status::DataLoss(where + ": missing field \"" + name + "\"");
      if (!it->is_number_integer()) return bad_field(name, "an integer", *it);
      *out = it->get<int64_t>();
      return Status::Ok();
    };
    int64_t layer64 = 0, token = 0, sequence = 0;
    std::vector<int64_t> ids;
    std::vector<float> weights;
    RETURN_IF_ERROR(integer("layer", &layer64));
    RETURN_IF_ERROR(integer("token", &token));
    sequence = token;
    if (row.contains("sequence")) RETURN_IF_ERROR(integer("sequence", &sequence));
    {
      const auto it = row.find("experts");
      if (it == row.end()) return Status::DataLoss(where + ": missing field \"experts\"");
      if (!it->is_array()) return bad_field("experts", "an array of integers", *it);
      for (const Json& x : *it) {
        if (!x.is_number_integer()) return bad_field("experts", "an array of integers", *it);
        ids.push_back(x.get<int64_t>());
      }
    }
    if (row.contains("weights")) {
      const Json& w = row["weights"];
      if (!w.is_array()) return bad_field("weights", "an array of numbers", w);
      for (const Json& x : w) {
        if (!x.is_number()) return bad_field("weights", "an array of numbers", w);
        weights.push_back(x.get<float>());
      }
    }
    if (layer64 > INT32_MAX) return Status::DataLoss(where + ": field \"layer\" is too large");
    const int layer = static_cast<int>(layer64);
    if (layer < 0 || token < 0 || sequence < 0 || sequence > UINT32_MAX) {
      return Status::DataLoss(where + ": layer, token and sequence must be non-negative");
    }
    const int row_weights = row.contains("weights") ? 1 : 0;
    if (has_weights == -1) has_weights = row_weights;
    if (row_weights != has_weights) {
      return Status::DataLoss(where + ": \"weights\" must be given on every row or on none");
    }
    TokenRows& tok = tokens[token];
    if (tok.sequence == -1) {
      tok.sequence = sequence;
      tok.first_line = line_no;
    } else if (tok.sequence != sequence) {
      return Status::DataLoss(where + ": token " + std::to_string(token) +
                              " was given another sequence on line " +
                              std::to_string(tok.first_line));
    }
    if (tok.layers.count(layer)) {
      return Status::DataLoss(where + ": token " + std::to_string(token) + " layer " +
                              std::to_string(layer) + " given twice");
    }
    auto& [experts, w] = tok.layers[layer];
    RETURN_IF_ERROR(AppendIds(ids, shape.num_experts, &top_k, &experts).WithContext(where));
    if (has_weights && weights.size() != ids.size()) {
      return Status::DataLoss(where + ": " + std::to_string(weights.size()) + " weights for " +
                              std::to_string(ids.size()) + " experts");
    }
    w = std::move(weights);
    for (uint16_t e : experts) max_id = std::max<int>(max_id, e);
    layer_set[layer] = true;
  }
  if (tokens.empty()) return Status::DataLoss(path + ": no rows");
  RETURN_IF_ERROR(CompleteShape(max_id, top_k, &shape).WithContext(path));
  std::vector<int> layer_ids;
  for (const auto& [layer, unused] : layer_set) layer_ids.push_back(layer);
  Trace trace(shape, layer_ids, has_weights == 1 ? GateWeights::kRecorded : GateWeights::kAbsent);
  const size_t n = layer_ids.size() * static_cast<size_t>(top_k);
  std::vector<uint16_t> experts(n);
  std::vector<float> weights(has_weights == 1 ? n : 0);
  std::map<int64_t, uint32_t> next_position;
  for (const auto& [token, tok] : tokens) {
    if (tok.layers.size() != layer_ids.size()) {
      return Status::DataLoss(Where(path, tok.first_line) + ": token " + std::to_string(token) +
                              " has " + std::to_string(tok.layers.size()) + " of the " +
                              std::to_string(layer_ids.size()) + " layers");
    }
    size_t l = 0;
    for (const auto& [layer, rows] : tok.layers) {
      std::copy(rows.first.begin(), rows.first.end(), experts.begin() + l * top_k);
      if (has_weights == 1)
        std::copy(rows.second.begin(), rows.second.end(), weights.begin() + l * top_k);
      ++l;
    }
    RETURN_IF_ERROR(trace
                        .AddToken(static_cast<uint32_t>(tok.sequence),
                                  next_position[tok.sequence]++, experts.data(),
                                  weights.empty() ? nullptr : weights.data())
                        .WithContext(Where(path, tok.first_line)));
  }
  return trace;
}

StatusOr<Trace> LoadAnyTrace(const std::vector<std::string>& paths,
                             const TraceImportOptions& options) {
  if (paths.empty()) return Status::InvalidArgument("no trace given");
  const fs::path first(paths[0]);
  std::error_code ec;
  if (fs::is_directory(first, ec) || first.extension() == ".csv") {
    return ImportCsvTrace(paths, options);
  }
  if (paths.size() != 1) {
    return Status::InvalidArgument("only CSV traces may span several files");
  }
  if (first.extension() == ".jsonl") return ImportJsonlTrace(paths[0], options);
  return ReadTrace(paths[0]);
}

}  // namespace epserve::placement
