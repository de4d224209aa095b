#include "serve/client_socket.h"

#include <poll.h>

namespace epserve::serve {

bool ClientClosed(int fd) {
  if (fd < 0) return false;
  pollfd p{.fd = fd, .events = POLLRDHUP, .revents = 0};
  if (poll(&p, 1, 0) <= 0) return false;
  return (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) != 0;
}

}  // namespace epserve::serve
