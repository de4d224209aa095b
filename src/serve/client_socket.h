// Whether an HTTP client is still there while its request runs: a non-streamed completion and
// a stream waiting for its next token both watch their connection's socket.
// Thread safety: free function, any thread.
#pragma once

namespace epserve::serve {

// Whether the peer of `fd` has closed or reset the connection (its end of the stream: a client
// that gave up). Does not block; bytes the client sent (a pipelined request) do not count.
bool ClientClosed(int fd);

}  // namespace epserve::serve
