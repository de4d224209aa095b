// Whether an HTTP client is still there while its non-streamed request runs. cpp-httplib 0.11
// does not give a handler its connection's socket, so FindClientSocket looks it up among this
// process's open files (/proc/self/fd, Linux): the TCP socket whose local port and peer address
// are the request's. The handler's connection stays open while the handler runs, so the
// descriptor found is that connection's for as long as the handler uses it.
// Thread safety: free functions, any thread.
#pragma once

#include <string>

namespace epserve::serve {

// The descriptor of the connected socket with this local port and this peer (as cpp-httplib
// writes them: numeric host, port), or -1 when there is none.
int FindClientSocket(int local_port, const std::string& remote_addr, int remote_port);

// Whether the peer of `fd` has closed or reset the connection (its end of the stream: a client
// that gave up). Does not block; bytes the client sent (a pipelined request) do not count.
bool ClientClosed(int fd);

}  // namespace epserve::serve
