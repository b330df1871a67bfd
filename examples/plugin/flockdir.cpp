// SPDX-License-Identifier: MIT
// flockdir: an example locksmith plugin, built outside the locksmith tree (README, "Extending
// locksmith"). flock(2) on one file per lock name in a directory the config gives, named so an
// admin can read it: the lock name percent-encoded, "<encoded>.flock" (names too long for one
// file name use their hash). The kernel drops a lock when its holder dies; files stay.
//
//   "plugins":    ["libflockdir.so"],  (installed into locksmith_MODULE_DIR, the module folder)
//   "strategies": {"flockdir": {"priority": 90, "options": {"directory": "/run/mylocks"}}}
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <string>

#include <locksmith/author/plugin.hpp>
#include <locksmith/author/strategy_support.hpp>
#include <locksmith/errors.hpp>
#include <locksmith/key.hpp>
#include <locksmith/options.hpp>

namespace {

using namespace locksmith;

constexpr capability flockdir_capabilities =
    capability::exclusive | capability::noblock | capability::crash_release;

struct flockdir_options {
    std::string directory;

    static flockdir_options from_json(const nlohmann::json& options) {
        options_reader r(options);
        flockdir_options out;
        auto dir = r.string("directory");
        r.finish();
        if (!dir || dir->empty() || dir->front() != '/')
            throw config_error("flockdir.directory", "/directory",
                               "flockdir needs \"directory\": an absolute path");
        out.directory = *dir;
        return out;
    }
};

// "backup%2Fdaily.flock" for "backup/daily": readable in `ls`, one path component for any name.
std::string file_name(std::string_view name) {
    static constexpr char hex[] = "0123456789ABCDEF";
    std::string out;
    for (unsigned char c : name) {
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
            c == '-' || c == '_' || (c == '.' && !out.empty())) {
            out += char(c);
        } else {
            out += '%';
            out += hex[c >> 4];
            out += hex[c & 15];
        }
    }
    if (out.size() > 200) out = "hash-" + stable_name_hash(name).hex();
    return out + ".flock";
}

// The open file whose flock a key holds; closing it releases the lock.
struct held_file : key_local_state {
    explicit held_file(int fd) : fd(fd) {}
    ~held_file() override { ::close(fd); }
    int fd;
};

class flockdir_store : public store {
  public:
    explicit flockdir_store(std::shared_ptr<const lock_directory> dir)
        : store("flockdir", flockdir_capabilities), dir_(std::move(dir)) {}

  protected:
    bool do_try_acquire(key& k, lock_mode, std::chrono::milliseconds) override {
        if (k.local_state_of<held_file>(instance_id()) != nullptr) return true;
        const std::string name = file_name(k.resource());
        const int fd = ::openat(dir_->fd(), name.c_str(),
                                O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NOCTTY, 0600);
        if (fd < 0) fail("open " + name, errno);
        if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
            const int err = errno;
            ::close(fd);
            if (err == EWOULDBLOCK) return false;
            fail("flock " + name, err);
        }
        k.set_local_state(instance_id(), std::make_unique<held_file>(fd));
        return true;
    }

    void do_release(key& k) override {
        if (k.local_state_of<held_file>(instance_id()) != nullptr)
            k.set_local_state(instance_id(), nullptr);
    }

    bool do_holds(const key& k) override {
        return k.local_state_of<held_file>(instance_id()) != nullptr;
    }

    lock_status do_status(std::string_view resource) override {
        lock_status status;
        status.held = lock_status::state::free;
        const int fd = ::openat(dir_->fd(), file_name(resource).c_str(),
                                O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NOCTTY);
        if (fd < 0) return status;  // never locked here
        if (::flock(fd, LOCK_SH | LOCK_NB) != 0) status.held = lock_status::state::held_exclusive;
        ::close(fd);  // drops the probe's shared lock, if it got one
        return status;
    }

  private:
    [[noreturn]] void fail(const std::string& what, int err) const {
        throw backend_error(
            "flockdir", "errno " + std::to_string(err),
            "flockdir: " + what + " in " + dir_->path().string() + ": " + std::strerror(err));
    }
    std::shared_ptr<const lock_directory> dir_;
};

void add_flockdir(plugin_registrar& registrar) {
    strategy_descriptor d;
    d.name = "flockdir";
    d.description =
        "flock(2) on readable per-name files in a configured directory (example plugin)";
    d.default_priority = 40;
    d.capabilities = flockdir_capabilities;
    d.needs_configuration = true;
    d.example_options = {{"directory", "/run/mylocks"}};
    d.validate_options = [](const nlohmann::json& options) {
        flockdir_options::from_json(options);
    };
    d.create = [](const nlohmann::json& options) -> std::shared_ptr<store> {
        auto o = flockdir_options::from_json(options);
        return std::make_shared<flockdir_store>(
            open_private_directory(o.directory, "flockdir", "directory"));
    };
    registrar.add(d);
}

}  // namespace

LOCKSMITH_PLUGIN(flockdir, "flockdir", "1.0.0", add_flockdir)
