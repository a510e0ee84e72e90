// ft perplexity: placeholder until the command lands (issue 8).
#include "base/error.h"
#include "cli/commands.h"

namespace ft::cli {

void add_perplexity_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("perplexity", "Perplexity of a model on a text file");
  cmd->callback([] { fail("ft perplexity is not available in this build"); });
}

}  // namespace ft::cli
