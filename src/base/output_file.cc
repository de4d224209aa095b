#include "base/output_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <utility>

namespace epserve {
namespace {

constexpr size_t kBufferBytes = 64 << 10;

std::string Errno(int err) { return std::strerror(err); }

// True when `path` exists and is something other than a regular file (a device, a FIFO).
bool IsSpecialFile(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode);
}

}  // namespace

StatusOr<OutputFile> OutputFile::Create(const std::string& path) {
  if (path.empty()) return Status::InvalidArgument("output file name is empty");
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    return Status::IoError(path + ": cannot write: is a directory");
  OutputFile file;
  file.path_ = path;
  if (IsSpecialFile(path)) {
    file.fd_ = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
    if (file.fd_ < 0) return Status::IoError(path + ": cannot open for writing: " + Errno(errno));
    return file;
  }
  file.temp_path_ = path + ".tmp." + std::to_string(::getpid());
  file.fd_ = ::open(file.temp_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (file.fd_ < 0) {
    const int err = errno;
    file.temp_path_.clear();
    return Status::IoError(path + ": cannot create: " + Errno(err));
  }
  return file;
}

OutputFile::OutputFile(OutputFile&& other) noexcept { *this = std::move(other); }

OutputFile& OutputFile::operator=(OutputFile&& other) noexcept {
  if (this != &other) {
    Discard();
    path_ = std::move(other.path_);
    temp_path_ = std::exchange(other.temp_path_, std::string());
    fd_ = std::exchange(other.fd_, -1);
    buffer_ = std::exchange(other.buffer_, std::string());
    status_ = std::move(other.status_);
  }
  return *this;
}

OutputFile::~OutputFile() { Discard(); }

void OutputFile::Discard() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  if (!temp_path_.empty()) ::unlink(temp_path_.c_str());
  temp_path_.clear();
}

Status OutputFile::Write(const void* data, size_t size) {
  if (!status_.ok()) return status_;
  if (fd_ < 0) return Status::Internal(path_ + ": written after Commit");
  const char* p = static_cast<const char*>(data);
  if (buffer_.size() + size <= kBufferBytes) {
    buffer_.append(p, size);
    return Status::Ok();
  }
  RETURN_IF_ERROR(Flush());
  if (size >= kBufferBytes) return WriteRaw(p, size);
  buffer_.append(p, size);
  return Status::Ok();
}

Status OutputFile::Flush() {
  Status st = WriteRaw(buffer_.data(), buffer_.size());
  buffer_.clear();
  return st;
}

Status OutputFile::WriteRaw(const char* p, size_t size) {
  while (size > 0) {
    const ssize_t n = ::write(fd_, p, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      status_ = Status::IoError(path_ + ": write failed: " + Errno(n < 0 ? errno : ENOSPC));
      return status_;
    }
    p += n;
    size -= static_cast<size_t>(n);
  }
  return Status::Ok();
}

Status OutputFile::Commit() {
  CHECK(fd_ >= 0) << path_ << ": committed twice";
  if (status_.ok()) (void)Flush();
  if (!status_.ok()) {
    Discard();
    return status_;
  }
  // fsync of a device or a pipe may say EINVAL; only a regular temporary must reach the disk.
  if (!temp_path_.empty() && ::fsync(fd_) != 0) {
    status_ = Status::IoError(path_ + ": fsync failed: " + Errno(errno));
    Discard();
    return status_;
  }
  const int rc = ::close(fd_);
  const int close_err = errno;
  fd_ = -1;
  if (rc != 0) {
    status_ = Status::IoError(path_ + ": close failed: " + Errno(close_err));
    Discard();
    return status_;
  }
  if (!temp_path_.empty()) {
    if (std::rename(temp_path_.c_str(), path_.c_str()) != 0) {
      status_ =
          Status::IoError(path_ + ": cannot rename " + temp_path_ + " over it: " + Errno(errno));
      Discard();
      return status_;
    }
    temp_path_.clear();
  }
  return Status::Ok();
}

Status WriteFileAtomically(const std::string& path, std::string_view bytes) {
  ASSIGN_OR_RETURN(OutputFile file, OutputFile::Create(path));
  RETURN_IF_ERROR(file.Write(bytes));
  return file.Commit();
}

Status CheckNotSameFile(std::string_view output_flag, const std::string& output,
                        std::string_view input_flag, const std::vector<std::string>& inputs) {
  namespace fs = std::filesystem;
  if (output.empty()) return Status::Ok();
  std::error_code ec;
  const bool out_exists = fs::exists(output, ec);
  const fs::path out_normal = fs::absolute(output, ec).lexically_normal();
  for (const std::string& input : inputs) {
    if (input.empty()) continue;
    bool same;
    if (out_exists && fs::exists(input, ec)) {
      same = fs::equivalent(output, input, ec) && !ec;
    } else {
      same = fs::absolute(input, ec).lexically_normal() == out_normal;
    }
    if (same)
      return Status::InvalidArgument(std::string(output_flag) + " " + output +
                                     " is also an input (" + std::string(input_flag) +
                                     "); write elsewhere");
  }
  return Status::Ok();
}

Status CheckWritable(std::string_view output_flag, const std::string& path) {
  namespace fs = std::filesystem;
  if (path.empty()) return Status::Ok();
  const std::string where = std::string(output_flag) + " " + path + ": ";
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (fs::is_directory(st)) return Status::InvalidArgument(where + "is a folder, not a file");
  if (fs::exists(st)) {
    if (::access(path.c_str(), W_OK) != 0)
      return Status::InvalidArgument(where + "cannot be written: " + std::strerror(errno));
    if (!fs::is_regular_file(st)) return Status::Ok();  // a device or FIFO: written in place
  }
  fs::path folder = fs::path(path).parent_path();
  if (folder.empty()) folder = ".";
  if (!fs::is_directory(folder, ec))
    return Status::InvalidArgument(where + "the folder " + folder.string() + " does not exist");
  // The temporary file is created beside the target, so the folder itself must be writable.
  if (::access(folder.c_str(), W_OK | X_OK) != 0)
    return Status::InvalidArgument(where + "cannot create files in " + folder.string() + ": " +
                                   std::strerror(errno));
  return Status::Ok();
}

}  // namespace epserve
