// Status values: errors inside the core travel as these, never as
// exceptions; the front ends translate the code into their own error types.
#ifndef HBCORE_COMMON_STATUS_H_
#define HBCORE_COMMON_STATUS_H_

#include <string>
#include <utility>

#include "hbcore/c_api.h"

namespace hbcore {

class Status {
 public:
  Status() = default;
  Status(int code, std::string message)
      : code_(code), message_(std::move(message)) {}

  static Status OK() { return Status(); }
  static Status InvalidArgument(std::string m) {
    return Status(HB_ERR_INVALID_ARGUMENT, std::move(m));
  }
  static Status Mismatch(std::string m) {
    return Status(HB_ERR_MISMATCH, std::move(m));
  }
  static Status Shutdown(std::string m) {
    return Status(HB_ERR_SHUTDOWN, std::move(m));
  }
  static Status Internal(std::string m) {
    return Status(HB_ERR_INTERNAL, std::move(m));
  }
  static Status Unsupported(std::string m) {
    return Status(HB_ERR_UNSUPPORTED, std::move(m));
  }

  bool ok() const { return code_ == HB_OK; }
  int code() const { return code_; }
  const std::string& message() const { return message_; }

 private:
  int code_ = HB_OK;
  std::string message_;
};

}  // namespace hbcore

#endif  // HBCORE_COMMON_STATUS_H_
