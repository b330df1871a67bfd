#include <locksmith/module.hpp>

#include <dlfcn.h>
#include <map>
#include <mutex>

#include <locksmith/errors.hpp>

namespace locksmith {
namespace {

struct loaded_module {
    strategy_implementation implementation;
    std::string failure;  // why it could not be loaded; empty when loaded
};

struct module_table {
    std::mutex mutex;
    std::map<std::string, module_entry> linked;
    std::map<std::string, loaded_module> loaded;
};

module_table& modules() {
    static auto* table = new module_table();  // never destroyed: stores may outlive main()
    return *table;
}

// Fills `m` from a module's entry point, or sets m.failure when its API version differs.
void enter(const std::string& where, module_entry entry, loaded_module& m) {
    if (std::uint32_t version = entry(m.implementation); version != module_api_version) {
        m.failure = where + " speaks module API " + std::to_string(version) + ", this library " +
                    std::to_string(module_api_version);
        m.implementation = {};
    }
}

// Resolves a module once per process: linked into the program, else liblocksmith_<name>.so.
// Loaded modules are never unloaded: stores, and the code behind their vtables, may live until
// exit.
const loaded_module& module_for(const std::string& name) {
    auto& table = modules();
    std::lock_guard guard(table.mutex);
    if (auto it = table.loaded.find(name); it != table.loaded.end()) return it->second;
    loaded_module m;
    if (auto linked = table.linked.find(name); linked != table.linked.end()) {
        enter("the module " + name + " linked into this program", linked->second, m);
        return table.loaded.emplace(name, std::move(m)).first->second;
    }
    const auto path = module_directory() / ("liblocksmith_" + name + ".so");
    if (void* handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL)) {
        const std::string symbol = "locksmith_module_" + name;
        auto entry = reinterpret_cast<module_entry>(::dlsym(handle, symbol.c_str()));
        if (entry == nullptr)
            m.failure = path.string() + " has no entry point " + symbol;
        else
            enter(path.string(), entry, m);
    } else {
        const char* why = ::dlerror();
        m.failure = "its module cannot be loaded: " + std::string(why ? why : path.string());
    }
    return table.loaded.emplace(name, std::move(m)).first->second;
}

}  // namespace

void link_module(const std::string& name, module_entry entry) {
    auto& table = modules();
    std::lock_guard guard(table.mutex);
    table.linked[name] = entry;
}

std::filesystem::path module_directory() {
    if (const char* dir = std::getenv("LOCKSMITH_MODULE_DIR"); dir && *dir) return dir;
    Dl_info info{};
    if (::dladdr(reinterpret_cast<void*>(&module_directory), &info) != 0 && info.dli_fname)
        return std::filesystem::path(info.dli_fname).parent_path() / "locksmith-modules";
    return "locksmith-modules";
}

strategy_descriptor load_on_first_use(strategy_descriptor d) {
    const std::string name = d.name;
    d.supported = [name] {
        const auto& m = module_for(name);
        if (!m.failure.empty()) return support_status::no(m.failure);
        return m.implementation.supported ? m.implementation.supported() : support_status::yes();
    };
    d.validate_options = [name](const nlohmann::json& options) {
        const auto& m = module_for(name);
        if (m.failure.empty() && m.implementation.validate_options)
            m.implementation.validate_options(options);
    };
    d.create = [name](const nlohmann::json& options) -> std::shared_ptr<store> {
        const auto& m = module_for(name);
        if (!m.failure.empty() || !m.implementation.create)
            throw backend_error(name, "module", "strategy '" + name + "': " + m.failure);
        return m.implementation.create(options);
    };
    return d;
}

}  // namespace locksmith
