// SPDX-License-Identifier: MIT
#include <locksmith/author/module.hpp>

#include <dlfcn.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>

#include <locksmith/errors.hpp>
#include <locksmith/version.hpp>

#include "core/trusted_path.hpp"
#include "plugin_entry.hpp"

namespace locksmith {
namespace {

namespace fs = std::filesystem;

constexpr const char* entry_symbol = "locksmith_plugin_info";

using detail::entered;

// The host handle given to a plugin: it collects the descriptors, so that a plugin is checked
// as a whole before any of its strategies reaches a registry.
struct collecting_host {
    locksmith_host host{};
    std::vector<strategy_descriptor> strategies;
    std::string failure;
};

int collect_strategy(locksmith_host* host, const void* descriptor) noexcept {
    auto* self = static_cast<collecting_host*>(host->context);
    try {
        self->strategies.push_back(*static_cast<const strategy_descriptor*>(descriptor));
        return 0;
    } catch (const std::exception& e) {
        self->failure = std::string("a strategy could not be taken over: ") + e.what();
        return 1;
    }
}

void collect_failure(locksmith_host* host, const char* message) noexcept {
    auto* self = static_cast<collecting_host*>(host->context);
    try {
        self->failure = message != nullptr && *message != '\0' ? message : "no reason given";
    } catch (...) {
    }
}

std::string describe(const locksmith_cxx_abi& a) {
    static constexpr const char* libraries[] = {"an unknown standard library",
                                                "libstdc++ with the old std::string ABI",
                                                "libstdc++ with the C++11 ABI", "libc++"};
    auto n = [](std::uint32_t v) { return std::to_string(v); };
    return "C++ ABI " + n(a.gxx_abi_version) + ", " +
           (a.standard_library < 4 ? libraries[a.standard_library] : libraries[0]) +
           ", nlohmann_json " + n(a.json_major) + ".x, sizes of string/function/shared_ptr/json/" +
           "strategy_descriptor/store " + n(a.sizeof_string) + "/" + n(a.sizeof_function) + "/" +
           n(a.sizeof_shared_ptr) + "/" + n(a.sizeof_json) + "/" + n(a.sizeof_descriptor) + "/" +
           n(a.sizeof_store);
}

bool same_abi(const locksmith_cxx_abi& a, const locksmith_cxx_abi& b) {
    return a.gxx_abi_version == b.gxx_abi_version && a.standard_library == b.standard_library &&
           a.json_major == b.json_major && a.sizeof_string == b.sizeof_string &&
           a.sizeof_function == b.sizeof_function && a.sizeof_shared_ptr == b.sizeof_shared_ptr &&
           a.sizeof_json == b.sizeof_json && a.sizeof_descriptor == b.sizeof_descriptor &&
           a.sizeof_store == b.sizeof_store;
}

}  // namespace

namespace detail {

entered enter(const std::string& where, locksmith_plugin_entry entry) {
    entered out;
    const locksmith_plugin* info = entry();
    if (info == nullptr) {
        out.failure = where + ": its " + entry_symbol + "() returned no plugin";
        return out;
    }
    if (info->api_version != LOCKSMITH_PLUGIN_API_VERSION) {
        out.failure = where + " was built for locksmith plugin API " +
                      std::to_string(info->api_version) + ", but this program (locksmith " +
                      version + ") loads plugin API " +
                      std::to_string(LOCKSMITH_PLUGIN_API_VERSION) +
                      ": rebuild the plugin against this locksmith";
        return out;
    }
    constexpr locksmith_cxx_abi mine = this_cxx_abi();
    if (info->abi == nullptr || !same_abi(*info->abi, mine)) {
        out.failure = where + " was built with another C++ ABI (plugin: " +
                      (info->abi ? describe(*info->abi) : std::string("none given")) +
                      "; this program: " + describe(mine) +
                      "): build it with the compiler, standard library and nlohmann_json "
                      "locksmith was built with";
        return out;
    }
    out.name = info->name ? info->name : "";
    out.version = info->version ? info->version : "";
    if (info->register_strategies == nullptr) {
        out.failure = where + " has no registration function";
        return out;
    }
    collecting_host h;
    h.host = {LOCKSMITH_PLUGIN_API_VERSION, &h, &collect_strategy, &collect_failure};
    if (info->register_strategies(&h.host) != 0 || !h.failure.empty()) {
        out.failure = where + " failed to register its strategies: " +
                      (h.failure.empty() ? std::string("no reason given") : h.failure);
        out.strategies.clear();
        return out;
    }
    out.strategies = std::move(h.strategies);
    return out;
}

}  // namespace detail

namespace {

using detail::enter;

// dlopen + dlsym + enter. Loaded libraries are never unloaded, refused ones included: stores,
// and the code behind their vtables, may live until exit, and a refused library's destructors
// are code of its that would run.
entered open_and_enter(const fs::path& file, const std::string& where) {
    void* handle = ::dlopen(file.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
        const char* why = ::dlerror();
        entered out;
        out.failure = where + " cannot be loaded: " + std::string(why ? why : "dlopen failed");
        return out;
    }
    auto entry = reinterpret_cast<locksmith_plugin_entry>(::dlsym(handle, entry_symbol));
    if (entry == nullptr) {
        entered out;
        out.failure = where + " is not a locksmith plugin: it defines no " + entry_symbol +
                      " (see LOCKSMITH_PLUGIN in <locksmith/author/plugin.hpp>)";
        return out;
    }
    return enter(where, entry);
}

// ---- built-in modules ----

struct loaded_module {
    strategy_descriptor descriptor;
    std::string failure;  // why it could not be loaded; empty when loaded
};

struct module_table {
    std::mutex mutex;
    std::map<std::string, locksmith_plugin_entry> linked;
    std::map<std::string, loaded_module> loaded;
};

module_table& modules() {
    static auto* table = new module_table();  // never destroyed: stores may outlive main()
    return *table;
}

fs::path module_file(const std::string& name) {
    return module_directory() / ("liblocksmith_" + name + ".so");
}

// Resolves a module once per process: linked into the program, else liblocksmith_<name>.so.
const loaded_module& module_for(const std::string& name) {
    auto& table = modules();
    std::lock_guard guard(table.mutex);
    if (auto it = table.loaded.find(name); it != table.loaded.end()) return it->second;
    entered e;
    if (auto linked = table.linked.find(name); linked != table.linked.end()) {
        e = enter("the module " + name + " linked into this program", linked->second);
    } else {
        const auto file = module_file(name);
        e = open_and_enter(file, "its module " + file.string());
    }
    loaded_module m;
    m.failure = e.failure;
    if (m.failure.empty()) {
        for (auto& d : e.strategies)
            if (d.name == name) m.descriptor = std::move(d);
        if (!m.descriptor.create)
            m.failure = "its module registers no strategy '" + name + "' with a factory";
    }
    return table.loaded.emplace(name, std::move(m)).first->second;
}

bool is_linked(const std::string& name) {
    auto& table = modules();
    std::lock_guard guard(table.mutex);
    return table.linked.count(name) != 0;
}

// ---- plugins ----

std::mutex& plugin_mutex() {
    static std::mutex m;
    return m;
}

// Loads one plugin entry into `registry`; returns the problem, or "".
std::string load_plugin(const std::string& entry, strategy_registry& registry) {
    const bool bare = entry.find('/') == std::string::npos;
    const fs::path given = bare ? module_directory() / entry : fs::path(entry);
    const std::string named =
        "plugin " + (bare ? "'" + entry + "' (" + given.string() + ")" : given.string());
    // Checked before dlopen, which runs the library's constructors: every component of the
    // path as written (a symlink planted in a folder others can write names any library) and
    // of the one its symlinks lead to.
    const path_trust trust = check_trusted_path(given);
    if (trust.error == ENOENT || trust.error == ENOTDIR)
        return named + " does not exist (" + trust.problem + ")" +
               (bare ? "; a plugin named without a path is looked for in the module folder "
                       "($LOCKSMITH_MODULE_DIR, else locksmith-modules beside the library)"
                     : "");
    if (trust.error != 0) return named + " cannot be checked: " + trust.problem;
    if (!trust.problem.empty())
        return named + " is not safe to load: " + trust.problem +
               ". A plugin, and every folder and symlink on its path, must be owned by you or "
               "root and writable by no one else";
    if (!S_ISREG(trust.st.st_mode)) return named + " is not a regular file";
    const fs::path& file = trust.resolved;

    const std::string origin_prefix = "plugin " + file.string();
    for (const auto& name : registry.names())
        if (auto d = registry.find(name); d && d->origin.rfind(origin_prefix, 0) == 0)
            return "";  // loaded into this registry already (another factory on it)

    auto e = open_and_enter(file, "plugin " + file.string());
    if (!e.failure.empty()) return e.failure;
    const std::string origin = origin_prefix + " (" + e.name + " " + e.version + ")";

    // Checked as a whole first, so that a refused plugin adds nothing.
    strategy_registry scratch;
    for (auto& d : e.strategies) {
        d.origin = origin;
        try {
            scratch.add(d);
        } catch (const std::exception& ex) {
            return origin + " registers a bad strategy: " + ex.what();
        }
        if (auto existing = registry.find(d.name))
            return origin + " registers strategy '" + d.name + "', which is already registered (" +
                   (existing->origin.empty() ? std::string("by the program") : existing->origin) +
                   ")";
    }
    for (auto& d : e.strategies) {
        try {
            registry.add(std::move(d));
        } catch (const std::exception& ex) {
            return origin + ": " + ex.what();
        }
    }
    return "";
}

}  // namespace

void link_module(const std::string& name, locksmith_plugin_entry entry) {
    auto& table = modules();
    std::lock_guard guard(table.mutex);
    table.linked[name] = entry;
}

std::filesystem::path module_directory() {
    if (const char* dir = std::getenv("LOCKSMITH_MODULE_DIR"); dir && *dir) return dir;
    Dl_info info{};
    if (::dladdr(reinterpret_cast<void*>(&module_directory), &info) == 0 || !info.dli_fname)
        return "locksmith-modules";
    std::error_code ec;
    const fs::path here = fs::canonical(info.dli_fname, ec);
    // Linked statically into a program (the locksmith command, in bin/): the modules are in the
    // library folder beside it, as in the build tree (cli/ beside lib/).
    if (!ec && here == fs::canonical("/proc/self/exe", ec))
        return here.parent_path().parent_path() / LOCKSMITH_LIBDIR / "locksmith-modules";
    return fs::path(info.dli_fname).parent_path() / "locksmith-modules";
}

strategy_descriptor load_on_first_use(strategy_descriptor d) {
    const std::string name = d.name;
    if (d.origin.empty())
        d.origin = is_linked(name) ? "built in"
                                   : "module " + module_file(name).string() + " (loaded on use)";
    d.supported = [name] {
        const auto& m = module_for(name);
        if (!m.failure.empty()) return support_status::no(m.failure);
        return m.descriptor.supported ? m.descriptor.supported() : support_status::yes();
    };
    d.validate_options = [name](const nlohmann::json& options) {
        const auto& m = module_for(name);
        if (m.failure.empty() && m.descriptor.validate_options)
            m.descriptor.validate_options(options);
    };
    d.backends = [name](const nlohmann::json& options) -> std::vector<std::string> {
        const auto& m = module_for(name);
        if (m.failure.empty() && m.descriptor.backends) return m.descriptor.backends(options);
        return {};
    };
    d.create = [name](const nlohmann::json& options) -> std::shared_ptr<store> {
        const auto& m = module_for(name);
        if (!m.failure.empty())
            throw backend_error(name, "module", "strategy '" + name + "': " + m.failure,
                                error_kind::permanent);
        return m.descriptor.create(options);
    };
    return d;
}

std::vector<config_error> load_plugins(const config& cfg, strategy_registry& registry) {
    std::vector<config_error> problems;
    std::lock_guard guard(plugin_mutex());
    for (std::size_t i = 0; i < cfg.plugins.size(); ++i) {
        if (auto why = load_plugin(cfg.plugins[i], registry); !why.empty())
            problems.emplace_back("config.plugin", "/plugins/" + std::to_string(i), why);
    }
    return problems;
}

void load_plugins_or_throw(const config& cfg, strategy_registry& registry) {
    if (auto problems = load_plugins(cfg, registry); !problems.empty())
        cfg.throw_problems(problems);
}

}  // namespace locksmith
