// TLS for the engine service's gRPC channel (docs/serving-api.md, "Security and limits"): the
// credentials of both ends, made from PEM files. Every file is read and checked here, before
// gRPC sees it: a missing or unreadable file, one that holds no PEM certificate or key, an
// encrypted key, or a key that does not belong to its certificate is an error naming the flag
// (`epserve engine --tls-*`, `epserve serve --engine-tls-*`) and the file. What cannot be found
// out from the files (a CA that did not sign the peer's certificate, a certificate issued to
// another name) fails the TLS handshake of the first call instead.
// The token check (EngineServiceOptions::token) is independent of this and works with both.
#pragma once

#include <memory>
#include <string>

#include "base/status.h"

namespace grpc {
class ChannelCredentials;
class ServerCredentials;
}  // namespace grpc

namespace epserve::rpc {

// The engine service's side (`epserve engine`).
struct ServerTlsFiles {
  std::string cert;       // --tls-cert: the service's certificate chain, leaf first
  std::string key;        // --tls-key: the leaf's private key (not encrypted)
  std::string client_ca;  // --tls-client-ca: "" none; else every caller must present a
                          // certificate this CA signed (mutual TLS)
  bool empty() const { return cert.empty() && key.empty() && client_ca.empty(); }
};

// The caller's side (`epserve serve`).
struct ClientTlsFiles {
  std::string ca;           // --engine-tls-ca: the CA that signed the services' certificates
  std::string cert;         // --engine-tls-cert: a client certificate (mutual TLS) ...
  std::string key;          // --engine-tls-key: ... and its private key; both or neither
  std::string server_name;  // --engine-tls-server-name: the name the services' certificates
                            // must carry; "": the host of the address called
  bool empty() const { return ca.empty() && cert.empty() && key.empty() && server_name.empty(); }
};

// For EngineServiceOptions::credentials: null (plaintext) when `files` is empty; else TLS with
// the certificate and key, and with `client_ca` client certificates required and verified.
// Needs cert and key together; client_ca only with them.
StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    const ServerTlsFiles& files);

// For GrpcEngineGroupOptions::credentials: null (plaintext) when `files` is empty; else TLS that
// verifies the service's certificate against `ca`, presenting cert and key when given. Needs
// `ca` for any of the others. (server_name is not part of the credentials:
// GrpcEngineGroupOptions::tls_server_name carries it.)
StatusOr<std::shared_ptr<grpc::ChannelCredentials>> MakeChannelCredentials(
    const ClientTlsFiles& files);

}  // namespace epserve::rpc
