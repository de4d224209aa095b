#include "rpc/tls.h"

#include <grpcpp/security/credentials.h>
#include <grpcpp/security/server_credentials.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

namespace epserve::rpc {

namespace {

struct BioFree {
  void operator()(BIO* b) const { BIO_free(b); }
};
struct X509Free {
  void operator()(X509* x) const { X509_free(x); }
};
struct PkeyFree {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};
using BioPtr = std::unique_ptr<BIO, BioFree>;
using X509Ptr = std::unique_ptr<X509, X509Free>;
using PkeyPtr = std::unique_ptr<EVP_PKEY, PkeyFree>;

// "--flag FILE", the start of every error about that file.
std::string Named(const char* flag, const std::string& path) {
  return std::string(flag) + " " + path;
}

// The file's text. A PEM file is a few KiB; anything over 1 MiB is a wrong file.
StatusOr<std::string> ReadPemFile(const char* flag, const std::string& path) {
  std::error_code ec;
  const auto st = std::filesystem::status(path, ec);
  if (!std::filesystem::exists(st)) return Status::NotFound(Named(flag, path) + ": no such file");
  if (!std::filesystem::is_regular_file(st))
    return Status::InvalidArgument(Named(flag, path) + ": not a file");
  if (std::filesystem::file_size(path, ec) > (1 << 20))
    return Status::InvalidArgument(Named(flag, path) + ": over 1 MiB, not a PEM file");
  std::ifstream in(path, std::ios::binary);
  if (!in)
    return Status::IoError(Named(flag, path) + ": cannot read it (" +
                           std::error_code(errno, std::generic_category()).message() + ")");
  std::stringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return Status::IoError(Named(flag, path) + ": cannot read it");
  return ss.str();
}

std::string Reason(unsigned long err) {
  const char* r = ERR_reason_error_string(err);
  return r != nullptr ? r : "error " + std::to_string(err);
}

BioPtr MemoryBio(const std::string& text) {
  return BioPtr(BIO_new_mem_buf(text.data(), static_cast<int>(text.size())));
}

// Every certificate in `text`, in order; an error unless there is at least one and all parse.
StatusOr<std::vector<X509Ptr>> ParseCertificates(const char* flag, const std::string& path,
                                                 const std::string& text) {
  std::vector<X509Ptr> certs;
  BioPtr bio = MemoryBio(text);
  for (;;) {
    X509Ptr x(PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr));
    if (x == nullptr) break;
    certs.push_back(std::move(x));
  }
  const unsigned long err = ERR_peek_last_error();
  ERR_clear_error();
  // The loop ends at the end of the text (no further BEGIN line) or at a block it cannot read.
  if (err != 0 && !(ERR_GET_LIB(err) == ERR_LIB_PEM && ERR_GET_REASON(err) == PEM_R_NO_START_LINE))
    return Status::InvalidArgument(
        Named(flag, path) + ": a PEM certificate in it cannot be read (" + Reason(err) + ")");
  if (certs.empty())
    return Status::InvalidArgument(Named(flag, path) +
                                   ": no PEM certificate in it (-----BEGIN CERTIFICATE-----)");
  return certs;
}

int NoPassphrase(char*, int, int, void*) { return -1; }

StatusOr<PkeyPtr> ParseKey(const char* flag, const std::string& path, const std::string& text) {
  BioPtr bio = MemoryBio(text);
  PkeyPtr key(PEM_read_bio_PrivateKey(bio.get(), nullptr, NoPassphrase, nullptr));
  ERR_clear_error();
  if (key != nullptr) return key;
  if (text.find("ENCRYPTED") != std::string::npos)
    return Status::InvalidArgument(Named(flag, path) +
                                   ": the key is encrypted; give it unencrypted (e.g. `openssl "
                                   "pkey -in KEY -out PLAIN`) and keep the file private");
  return Status::InvalidArgument(Named(flag, path) +
                                 ": no PEM private key in it (-----BEGIN PRIVATE KEY-----)");
}

// The PEM texts of a certificate chain and its key, checked: both parse, the key is the leaf's,
// the leaf has not expired.
struct KeyPair {
  std::string cert, key;
};
StatusOr<KeyPair> ReadKeyPair(const char* cert_flag, const std::string& cert_path,
                              const char* key_flag, const std::string& key_path) {
  KeyPair out;
  ASSIGN_OR_RETURN(out.cert, ReadPemFile(cert_flag, cert_path));
  ASSIGN_OR_RETURN(out.key, ReadPemFile(key_flag, key_path));
  ASSIGN_OR_RETURN(std::vector<X509Ptr> chain, ParseCertificates(cert_flag, cert_path, out.cert));
  ASSIGN_OR_RETURN(PkeyPtr key, ParseKey(key_flag, key_path, out.key));
  const bool match = X509_check_private_key(chain[0].get(), key.get()) == 1;
  ERR_clear_error();
  if (!match)
    return Status::InvalidArgument(Named(key_flag, key_path) +
                                   ": not the private key of the certificate in " +
                                   Named(cert_flag, cert_path));
  if (X509_cmp_current_time(X509_get0_notAfter(chain[0].get())) < 0)
    return Status::InvalidArgument(Named(cert_flag, cert_path) + ": the certificate has expired");
  return out;
}

StatusOr<std::string> ReadCa(const char* flag, const std::string& path) {
  ASSIGN_OR_RETURN(std::string text, ReadPemFile(flag, path));
  RETURN_IF_ERROR(ParseCertificates(flag, path, text).status());
  return text;
}

}  // namespace

StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    const ServerTlsFiles& files) {
  if (files.empty()) return {std::shared_ptr<grpc::ServerCredentials>()};
  if (files.cert.empty() || files.key.empty())
    return Status::InvalidArgument(files.client_ca.empty()
                                       ? "--tls-cert and --tls-key go together"
                                       : "--tls-client-ca needs --tls-cert and --tls-key");
  ASSIGN_OR_RETURN(KeyPair pair, ReadKeyPair("--tls-cert", files.cert, "--tls-key", files.key));
  grpc::SslServerCredentialsOptions options(GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
  if (!files.client_ca.empty()) {
    ASSIGN_OR_RETURN(options.pem_root_certs, ReadCa("--tls-client-ca", files.client_ca));
    options.client_certificate_request = GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY;
  }
  options.pem_key_cert_pairs.push_back({.private_key = pair.key, .cert_chain = pair.cert});
  return grpc::SslServerCredentials(options);
}

StatusOr<std::shared_ptr<grpc::ChannelCredentials>> MakeChannelCredentials(
    const ClientTlsFiles& files) {
  if (files.empty()) return {std::shared_ptr<grpc::ChannelCredentials>()};
  if (files.ca.empty())
    return Status::InvalidArgument(
        "--engine-tls-cert, --engine-tls-key and --engine-tls-server-name need --engine-tls-ca "
        "(the CA that signed the engine services' certificates)");
  if (files.cert.empty() != files.key.empty())
    return Status::InvalidArgument("--engine-tls-cert and --engine-tls-key go together");
  grpc::SslCredentialsOptions options;
  ASSIGN_OR_RETURN(options.pem_root_certs, ReadCa("--engine-tls-ca", files.ca));
  if (!files.cert.empty()) {
    ASSIGN_OR_RETURN(KeyPair pair,
                     ReadKeyPair("--engine-tls-cert", files.cert, "--engine-tls-key", files.key));
    options.pem_cert_chain = std::move(pair.cert);
    options.pem_private_key = std::move(pair.key);
  }
  return grpc::SslCredentials(options);
}

}  // namespace epserve::rpc
