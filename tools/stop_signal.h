// The SIGINT/SIGTERM flag of the long-running commands (serve, engine). A handler that sets a
// flag, not a blocked mask with sigwait: libraries (OpenBLAS) start threads before main, and any
// of them could take a process signal. SIGPIPE is ignored (a client that went away is an error
// return from write, not a dead server).
#pragma once

namespace epserve::tools {

// `restart`: SA_RESTART, so blocking calls resume after the signal instead of failing with EINTR.
void InstallStopSignalHandler(bool restart);
// The signal that asked the process to stop, or 0.
int StopSignal();

}  // namespace epserve::tools
