// Whether `glm4 serve` can listen where it was told, asked before the model loads: a port another
// server holds is named at once, not after the minutes a large model takes to load.
#pragma once
#include <string>

namespace glm4::serve {

// Binds a socket to host:port (as the server will: SO_REUSEADDR) and closes it again; throws
// naming --host and --port when that fails. Port 0 (any free port) always passes.
void check_listen_address(const std::string& host, int port);

}  // namespace glm4::serve
