#include "serve/listen_check.h"

#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "base/check.h"

namespace glm4::serve {

void check_listen_address(const std::string& host, int port) {
  if (port == 0) return;
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* found = nullptr;
  const std::string service = std::to_string(port);
  const int err = getaddrinfo(host.c_str(), service.c_str(), &hints, &found);
  GLM4_CHECK(err == 0, "--host ", host, " --port ", port,
             ": cannot listen on this address: ", gai_strerror(err));
  std::string why;
  bool bound = false;
  for (addrinfo* a = found; a && !bound; a = a->ai_next) {
    const int fd = socket(a->ai_family, a->ai_socktype, a->ai_protocol);
    if (fd < 0) {
      why = std::strerror(errno);
      continue;
    }
    const int yes = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    bound = ::bind(fd, a->ai_addr, a->ai_addrlen) == 0 && listen(fd, 1) == 0;
    if (!bound) why = std::strerror(errno);
    close(fd);
  }
  freeaddrinfo(found);
  GLM4_CHECK(bound, "--host ", host, " --port ", port, ": cannot listen on this address: ", why);
}

}  // namespace glm4::serve
