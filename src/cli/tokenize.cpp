// ft tokenize: placeholder until the tokenizer lands (issue 3).
#include "base/error.h"
#include "cli/commands.h"

namespace ft::cli {

void add_tokenize_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("tokenize", "Tokenize text with a model's tokenizer");
  cmd->callback([] { fail("ft tokenize is not available in this build"); });
}

}  // namespace ft::cli
