#include "tools/replace_flags.h"

#include "tools/flag_checks.h"

namespace epserve::tools {

void ReplaceFlags::AddTo(CLI::App* cmd, const std::string& group) {
  cmd->add_option("--replace-every", every,
                  "online re-placement (docs/expert-parallelism.md): every N steps, place the "
                  "experts anew with GRACE from the routing of recent tokens and move them "
                  "between ranks without stopping; 0: only when asked (SIGUSR2 to a rank; serve "
                  "--np: POST /admin/replace-experts); in one process there is nothing to move")
      ->check(AtLeast(0))
      ->group(group);
  cmd->add_option("--replace-window", window,
                  "with --replace-every: recent tokens each DP group profiles")
      ->check(AtLeast(1))
      ->capture_default_str()
      ->group(group);
  cmd->add_option("--replace-slots", slots,
                  "with --replace-every: extra expert slots per MoE layer the new placement may "
                  "use (default: half the routed experts, as `epserve place`)")
      ->check(AtLeast(0))
      ->group(group);
}

std::optional<OnlinePlacerOptions> ReplaceFlags::Options() const {
  if (every < 0) return std::nullopt;
  return OnlinePlacerOptions{
      .replace_every = every, .window_tokens = window, .redundant_slots = slots};
}

std::vector<std::string> ReplaceFlags::Args() const {
  if (every < 0) return {};
  std::vector<std::string> a = {"--replace-every", std::to_string(every), "--replace-window",
                                std::to_string(window)};
  if (slots >= 0) a.insert(a.end(), {"--replace-slots", std::to_string(slots)});
  return a;
}

}  // namespace epserve::tools
