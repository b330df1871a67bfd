// SPDX-License-Identifier: MIT
// The TLS options of the strategies that use tls_stream: one reading, so that "ca_file" means the
// same in etcd's options as in redis's, and a wrong combination gets the same error.
#include <utility>

#include <locksmith/errors.hpp>
#include <locksmith/options.hpp>

#include "tls_stream.hpp"

namespace locksmith::strategies::tls {

tls_options read_tls_options(options_reader& reader, bool secure, const std::string& pointer,
                             std::string_view needed) {
    tls_options o;
    for (auto [name, target] : {std::pair{"ca_file", &o.ca_file},
                                {"cert_file", &o.cert_file},
                                {"key_file", &o.key_file},
                                {"server_name", &o.server_name}})
        if (auto v = reader.string(name)) *target = *v;
    if (!secure && !(o.ca_file + o.cert_file + o.key_file + o.server_name).empty())
        throw config_error("config.value", pointer,
                           "TLS options (ca_file, cert_file, key_file, server_name) need " +
                               std::string(needed) +
                               "; without TLS they would be ignored and everything sent in clear "
                               "text");
    if (o.cert_file.empty() != o.key_file.empty())
        throw config_error("config.value", o.cert_file.empty() ? "/cert_file" : "/key_file",
                           "options 'cert_file' and 'key_file' go together (a client "
                           "certificate and its private key)");
    return o;
}

}  // namespace locksmith::strategies::tls
