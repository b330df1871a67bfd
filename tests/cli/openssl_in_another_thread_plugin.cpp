// SPDX-License-Identifier: MIT
// A plugin for cli_inherited_fds_test: the file strategy under another name, whose store starts
// a thread that keeps doing what OpenSSL and libpq do while they connect — open certificate,
// key and password files without O_CLOEXEC. Through OpenSSL itself: a CA file loaded again and
// again (SSL_CTX_load_verify_locations), and one always open (BIO_new_file, as OpenSSL reads a
// certificate or a key), so that a fork at any moment meets such a descriptor. A command started
// by `locksmith run` must get none of them. And a second thread as a client library's event
// loop, blocking no signal.
#include <fcntl.h>
#include <openssl/bio.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <unistd.h>

#include <atomic>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>

#include <locksmith/author/plugin.hpp>
#include <locksmith/options.hpp>
#include <locksmith/strategies/file.hpp>

namespace {

// Until `stop`: while locksmith takes the lock, forks the command and waits for it.
void open_files_until(const std::string& file, const std::atomic<bool>& stop) {
    BIO* held = nullptr;
    while (!stop) {
        BIO* next = BIO_new_file(file.c_str(), "r");
        if (next == nullptr) break;
        if (held != nullptr) BIO_free(held);
        held = next;  // one always open
        SSL_CTX* ctx = SSL_CTX_new(TLS_client_method());
        if (ctx != nullptr) {
            (void)SSL_CTX_load_verify_locations(ctx, file.c_str(), nullptr);
            SSL_CTX_free(ctx);
        }
    }
    if (held != nullptr) BIO_free(held);
}

// A client library's event loop, polling without sleeping until `stop_fd` turns readable, with
// no signal blocked: the thread the kernel hands a process's signals to when the others block
// them, and one that takes them at once (it is on a CPU, leaving the kernel all the time).
void wait_for_events(int stop_fd) {
    pollfd p{stop_fd, POLLIN, 0};
    while (::poll(&p, 1, 0) <= 0) {
    }
}

void add(locksmith::plugin_registrar& registrar) {
    locksmith::strategy_descriptor d;
    d.name = "openssl_in_another_thread";
    d.description = "file locks, with a thread opening files through OpenSSL meanwhile";
    d.default_priority = 1;
    d.capabilities = locksmith::capability::exclusive | locksmith::capability::noblock;
    d.validate_options = [](const nlohmann::json& options) {
        locksmith::options_reader r(options);
        (void)r.string("lock_dir");
        (void)r.string("file");
        r.finish();
    };
    d.create = [](const nlohmann::json& options) {
        locksmith::strategies::file_options o;
        o.lock_dir = options.at("lock_dir").get<std::string>();
        const auto file = options.at("file").get<std::string>();
        // Started before the lock is taken, running while `run` forks the command, stopped
        // with the store (a thread in OpenSSL while the process exits would race its clean-up).
        auto stop = std::make_shared<std::atomic<bool>>(false);
        auto opener = std::make_shared<std::thread>(open_files_until, file, std::cref(*stop));
        int stop_pipe[2];
        if (::pipe2(stop_pipe, O_CLOEXEC) != 0) throw std::runtime_error("pipe2");
        auto waiter = std::make_shared<std::thread>(wait_for_events, stop_pipe[0]);
        auto files = locksmith::strategies::make_file_store(o);
        return std::shared_ptr<locksmith::store>(files.get(),
                                                 [files, stop, opener, waiter, stop_pipe](auto*) {
                                                     *stop = true;
                                                     (void)!::write(stop_pipe[1], "s", 1);
                                                     opener->join();
                                                     waiter->join();
                                                     ::close(stop_pipe[0]);
                                                     ::close(stop_pipe[1]);
                                                 });
    };
    registrar.add(d);
}

}  // namespace

LOCKSMITH_PLUGIN(openssl_in_another_thread, "openssl_in_another_thread", "0.0.1", add)
