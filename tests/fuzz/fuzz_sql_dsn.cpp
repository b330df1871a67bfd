// The sql strategy's DSN parser (parse_sql_dsn). Properties:
//  - it throws nothing but invalid_argument_error;
//  - the password it reads is not in the DSN's redacted() form.
#include <locksmith/errors.hpp>
#include <locksmith/strategies/sql.hpp>

#include "fuzz_support.hpp"

using namespace locksmith;
using namespace locksmith::strategies;
using locksmith::fuzz::check;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const auto text = fuzz::as_text(data, size);
    sql_dsn d;
    try {
        d = parse_sql_dsn(text);
    } catch (const invalid_argument_error&) {
        return 0;
    }
    // With a %-escape, the password as read is not the text that the DSN shows.
    if (text.find('%') == std::string_view::npos)
        check(!fuzz::reveals(d.redacted(), text, d.password), "redacted() shows the password",
              d.redacted());
    if (d.driver == sql_dsn::kind::sqlite)
        check(!d.path.empty() && d.path.front() == '/', "a SQLite path that is not absolute",
              d.path);
    else
        check(d.port >= 0 && d.port <= 65535, "a port out of range");
    return 0;
}
