// POST /v1/responses (in progress).
#include "server/openai_common.h"

namespace ft::server::openai {
void register_responses_route(httplib::Server&, ServerContext&) {}
}  // namespace ft::server::openai
