// Placeholder: OpenAI routes are registered by openai_*.cpp (in progress).
#include "server/server.h"

namespace ft::server {
void register_openai_routes(httplib::Server&, ServerContext&) {}
}  // namespace ft::server
