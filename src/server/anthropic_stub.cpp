// Placeholder: Anthropic routes are registered by anthropic.cpp (in progress).
#include "server/server.h"

namespace ft::server {
void register_anthropic_routes(httplib::Server&, ServerContext&) {}
}  // namespace ft::server
