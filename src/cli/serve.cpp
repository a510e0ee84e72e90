// ft serve: placeholder until the server lands.
#include "base/error.h"
#include "cli/commands.h"

namespace ft::cli {

void add_serve_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("serve", "Serve OpenAI- and Anthropic-compatible APIs");
  cmd->callback([] { fail("ft serve is not available in this build"); });
}

}  // namespace ft::cli
