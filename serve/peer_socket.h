// The socket a request came in on, found by the connection's two ends, so that a handler can
// tell that its client went away. cpp-httplib 0.11 (Debian's) tells only streamed responses of a
// closed connection (their writes fail); a non-streamed handler gets neither the socket nor a
// signal, and would keep its slot generating for nobody.
#pragma once

namespace httplib {
struct Request;
}

namespace glm4::serve {

class PeerSocket {
 public:
  // Looks the connection up among this process's sockets (by local and remote address and port).
  explicit PeerSocket(const httplib::Request& req);
  // True once the client has closed or reset the connection. False while it is open, and always
  // when the socket was not found. A half-close after the request counts as gone, as no HTTP
  // client here does that and waits for an answer.
  bool gone() const;

 private:
  int fd_ = -1;
};

}  // namespace glm4::serve
