// chat_template_check CONVERSATIONS.json TEMPLATE_DIR EXPECTED.json
//
// Renders every (template, conversation) pair of CONVERSATIONS.json with ChatTemplate and compares
// it byte for byte with jinja2's rendering in EXPECTED.json (tests/text/render_jinja2.py). A pair
// jinja2 failed on must fail here too. Prints each mismatch (template, conversation, first
// differing byte with context) and a summary; exits 1 on any mismatch.
//
// chat_template_check --jsonl: reads lines {"tpl": ..., "ctx": {...}} from stdin and writes
// {"ok": true, "out": ...} or {"ok": false, "err": ...} per line (for tests/text/fuzz_jinja.py).
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "text/chat_template.h"

namespace {

using epserve::text::ChatTemplate;
using nlohmann::ordered_json;

epserve::StatusOr<ordered_json> ReadJson(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return epserve::Status::IoError(path + ": cannot open");
  std::stringstream buf;
  buf << in.rdbuf();
  ordered_json j = ordered_json::parse(buf.str(), nullptr, false);
  if (j.is_discarded()) return epserve::Status::InvalidArgument(path + ": invalid JSON");
  return j;
}

// The context render_jinja2.py's context_for builds (keep them in step).
ordered_json ContextFor(const ordered_json& spec, const ordered_json& conv,
                        const ordered_json& tokens) {
  ordered_json ctx = {{"messages", conv["messages"]},
                      {"tools", conv.value("tools", ordered_json())},
                      {"documents", nullptr},
                      {"add_generation_prompt", conv.value("add_generation_prompt", false)},
                      {"strftime_now_epoch", spec["fixed_time_epoch"]}};
  for (const auto& [k, v] : tokens.items()) ctx[k] = v;
  if (conv.contains("extra")) {
    for (const auto& [k, v] : conv["extra"].items()) ctx[k] = v;
  }
  return ctx;
}

std::string Escape(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    if (c == '\n') {
      out += "\\n";
    } else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\x%02x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

void PrintDiff(const std::string& want, const std::string& got) {
  size_t n = std::min(want.size(), got.size()), i = 0;
  while (i < n && want[i] == got[i]) ++i;
  size_t from = i > 40 ? i - 40 : 0;
  std::printf("  first difference at byte %zu (jinja2 %zu bytes, ours %zu bytes)\n", i, want.size(),
              got.size());
  std::printf("  jinja2: ...%s...\n", Escape(want.substr(from, 100)).c_str());
  std::printf("  ours:   ...%s...\n", Escape(got.substr(from, 100)).c_str());
}

int RenderJsonLines() {
  std::string line;
  while (std::getline(std::cin, line)) {
    ordered_json in = ordered_json::parse(line, nullptr, false);
    ordered_json out;
    if (in.is_discarded() || !in.contains("tpl") || !in["tpl"].is_string()) {
      out = {{"ok", false}, {"err", "bad input line"}};
    } else {
      auto tpl = ChatTemplate::Parse(in["tpl"].get<std::string>(), "t");
      auto got = tpl.ok() ? tpl->Render(in.value("ctx", ordered_json::object()))
                          : epserve::StatusOr<std::string>(tpl.status());
      out = got.ok() ? ordered_json{{"ok", true}, {"out", *got}}
                     : ordered_json{{"ok", false}, {"err", got.status().ToString()}};
    }
    std::cout << out.dump(-1, ' ', false, ordered_json::error_handler_t::replace) << "\n";
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 2 && std::string(argv[1]) == "--jsonl") return RenderJsonLines();
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s CONVERSATIONS.json TEMPLATE_DIR EXPECTED.json\n", argv[0]);
    return 2;
  }
  auto spec = ReadJson(argv[1]);
  auto expected = ReadJson(argv[3]);
  if (!spec.ok() || !expected.ok()) {
    std::fprintf(stderr, "%s\n",
                 (!spec.ok() ? spec.status() : expected.status()).ToString().c_str());
    return 2;
  }
  const ordered_json& convs = (*spec)["conversations"];
  int total = 0, same = 0, both_failed = 0;
  for (const auto& want : (*expected)["results"]) {
    std::string name = want["template"].get<std::string>();
    size_t idx = want["conversation"].get<size_t>();
    ++total;
    std::string path = std::string(argv[2]) + "/" + name;
    std::ifstream in(path, std::ios::binary);
    std::stringstream source;
    source << in.rdbuf();
    auto tpl = ChatTemplate::Parse(source.str(), name);
    if (!in || !tpl.ok()) {
      std::printf("MISMATCH %s: cannot parse: %s\n", name.c_str(),
                  tpl.ok() ? "cannot read" : tpl.status().ToString().c_str());
      continue;
    }
    auto got = tpl->Render(ContextFor(*spec, convs[idx], (*spec)["templates"][name]));
    std::string label =
        name + " conversation " + std::to_string(idx) + " (" + convs[idx].value("name", "") + ")";
    if (!want["ok"].get<bool>()) {
      if (got.ok()) {
        std::printf("MISMATCH %s: jinja2 failed (%s) but we rendered %zu bytes\n", label.c_str(),
                    want["error"].get<std::string>().c_str(), got->size());
      } else {
        ++same;
        ++both_failed;
      }
      continue;
    }
    if (!got.ok()) {
      std::printf("MISMATCH %s: we failed: %s\n", label.c_str(), got.status().ToString().c_str());
      continue;
    }
    const std::string want_text = want["output"].get<std::string>();
    if (*got == want_text) {
      ++same;
      continue;
    }
    std::printf("MISMATCH %s\n", label.c_str());
    PrintDiff(want_text, *got);
  }
  std::printf("%d/%d pairs identical to jinja2 (%d of them errors in both)\n", same, total,
              both_failed);
  return same == total && total > 0 ? 0 : 1;
}
