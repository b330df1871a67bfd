#include <locksmith/errors.hpp>

#include <cstring>

namespace locksmith {

config_error::config_error(std::string id, std::string pointer, const std::string& message,
                           std::size_t line, std::size_t column)
    : error(message), id_(std::move(id)), pointer_(std::move(pointer)), line_(line), column_(column) {}

backend_error::backend_error(std::string backend, std::string native_code,
                             const std::string& message)
    : error(message), backend_(std::move(backend)), native_code_(std::move(native_code)) {}

void throw_errno(const std::string& strategy, const std::string& what, int err) {
    throw backend_error(strategy, "errno " + std::to_string(err),
                        strategy + ": " + what + ": " + std::strerror(err) + " (errno " +
                            std::to_string(err) + ")");
}

}  // namespace locksmith
