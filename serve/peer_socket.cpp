#include "serve/peer_socket.h"

#include <httplib.h>
#include <netdb.h>
#include <sys/socket.h>

#include <cerrno>
#include <filesystem>
#include <string>

namespace glm4::serve {

namespace {

// The numeric host and the port of a socket address, as cpp-httplib writes them into a Request.
bool host_and_port(const sockaddr_storage& addr, socklen_t len, std::string* host, int* port) {
  if (addr.ss_family != AF_INET && addr.ss_family != AF_INET6) return false;
  char h[NI_MAXHOST], p[NI_MAXSERV];
  if (getnameinfo(reinterpret_cast<const sockaddr*>(&addr), len, h, sizeof h, p, sizeof p,
                  NI_NUMERICHOST | NI_NUMERICSERV) != 0)
    return false;
  *host = h;
  *port = std::atoi(p);
  return true;
}

bool is_connection_of(int fd, const httplib::Request& req) {
  sockaddr_storage addr{};
  socklen_t len = sizeof addr;
  std::string host;
  int port = -1;
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0 ||
      !host_and_port(addr, len, &host, &port) || port != req.local_port || host != req.local_addr)
    return false;
  len = sizeof addr;
  return getpeername(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0 &&
         host_and_port(addr, len, &host, &port) && port == req.remote_port &&
         host == req.remote_addr;
}

}  // namespace

PeerSocket::PeerSocket(const httplib::Request& req) {
  if (req.remote_port < 0 || req.local_port < 0) return;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd", ec)) {
    const std::string name = entry.path().filename().string();
    const int fd = std::atoi(name.c_str());
    if (fd > 2 && is_connection_of(fd, req)) {
      fd_ = fd;
      return;
    }
  }
}

bool PeerSocket::gone() const {
  if (fd_ < 0) return false;
  char byte;
  const ssize_t n = recv(fd_, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  if (n == 0) return true;                                                    // orderly close
  return n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR;  // reset
}

}  // namespace glm4::serve
