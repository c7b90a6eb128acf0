#include "chat/jinja/percent_format.h"

#include <cmath>
#include <cstdio>

#include "chat/jinja/error.h"
#include "chat/jinja/py_text.h"

namespace tracelm::jinja {

namespace {

// The spec's flags, width and precision as a C format, for the numeric conversions C formats as Python does.
std::string c_format(const std::string& flags, int width, int precision, const char* length, char conv) {
    std::string f = "%";
    f += flags;
    if (width >= 0) f += std::to_string(width);
    if (precision >= 0) f.append(".").append(std::to_string(precision));
    f += length;
    f += conv;
    return f;
}

std::string sprint(const std::string& fmt, auto value) {
    const int n = std::snprintf(nullptr, 0, fmt.c_str(), value);
    std::string out(static_cast<size_t>(n), '\0');
    std::snprintf(out.data(), out.size() + 1, fmt.c_str(), value);
    return out;
}

// %s / %r with width and precision: precision cuts, width pads (left unless "-"), counted in code points.
std::string pad_text(std::string s, const std::string& flags, int width, int precision) {
    if (precision >= 0) {
        const std::vector<size_t> off = py::offsets(s);
        if (static_cast<size_t>(precision) + 1 < off.size()) s.resize(off[static_cast<size_t>(precision)]);
    }
    const int64_t len = static_cast<int64_t>(py::length(s));
    if (width > len) {
        const std::string fill(static_cast<size_t>(width - len), ' ');
        s = flags.find('-') != std::string::npos ? s + fill : fill + s;
    }
    return s;
}

std::string convert(char conv, const Value& v, const std::string& flags, int width, int precision) {
    switch (conv) {
        case 's':
            return pad_text(to_str(v), flags, width, precision);
        case 'r':
        case 'a':
            return pad_text(repr(v), flags, width, precision);
        case 'c': {
            std::string s;
            if (v.is_string() && py::length(v.str()) == 1) {
                s = v.str();
            } else if (v.is_int() || v.is_bool()) {
                if (v.integer() < 0 || v.integer() > 0x10FFFF) fail("%c arg not in range(0x110000)");
                py::append_utf8(s, static_cast<char32_t>(v.integer()));
            } else {
                fail("%c requires int or char");
            }
            return pad_text(s, flags, width, -1);
        }
        case 'd':
        case 'i':
        case 'u':
        case 'x':
        case 'X':
        case 'o': {
            const std::string spec{'%', conv};
            if (!v.is_number()) fail(spec + " format: a real number is required, not " + type_name(v));
            if (v.is_float() && (conv == 'x' || conv == 'X' || conv == 'o'))
                fail(spec + " format: an integer is required, not float");
            const double d = v.number();
            if (v.is_float() && !std::isfinite(d)) fail("cannot convert float infinity or NaN to integer");
            const long long i = v.is_float() ? static_cast<long long>(std::trunc(d)) : v.integer();
            if (conv == 'o' && flags.find('#') != std::string::npos) {
                // Python's alternate octal form is "0o17" where C writes "017".
                std::string plain = flags;
                plain.erase(plain.find('#'), 1);
                std::string digits = sprint(c_format("", -1, precision, "ll", 'o'), i < 0 ? -i : i);
                std::string sign = i < 0 ? "-" : plain.find('+') != std::string::npos ? "+"
                                              : plain.find(' ') != std::string::npos ? " " : "";
                const auto len = static_cast<int>(sign.size() + 2 + digits.size());
                if (width > len && plain.find('-') == std::string::npos && plain.find('0') != std::string::npos)
                    digits.insert(0, static_cast<size_t>(width - len), '0');
                return pad_text(sign + "0o" + digits, plain, width, -1);
            }
            return sprint(c_format(flags, width, precision, "ll", conv == 'u' || conv == 'i' ? 'd' : conv), i);
        }
        default: {  // f F e E g G
            if (!v.is_number()) fail("must be real number, not " + type_name(v));
            return sprint(c_format(flags, width, precision < 0 ? 6 : precision, "", conv), v.number());
        }
    }
}

}  // namespace

std::string percent_format(Runtime& rt, const std::string& format, const Value& args) {
    const bool tuple = args.is_list() && args.list().tuple;
    const std::vector<Value> positional = tuple ? args.list().items : std::vector<Value>{args};
    size_t next = 0;
    bool used_mapping = false;
    std::string out;
    for (size_t i = 0; i < format.size(); ++i) {
        if (format[i] != '%') {
            out += format[i];
            continue;
        }
        if (++i >= format.size()) fail("incomplete format");
        const Value* arg = nullptr;
        if (format[i] == '(') {
            const size_t close = format.find(')', i);
            if (close == std::string::npos) fail("incomplete format key");
            if (!args.is_dict()) fail("format requires a mapping");
            arg = args.dict().find(std::string_view(format).substr(i + 1, close - i - 1));
            if (!arg) fail("KeyError: " + py::repr(format.substr(i + 1, close - i - 1)));
            used_mapping = true;
            i = close + 1;
        }
        std::string flags;
        while (i < format.size() && std::string_view("-+ #0").find(format[i]) != std::string_view::npos)
            flags += format[i++];
        int width = -1, precision = -1;
        if (i < format.size() && format[i] == '*') fail("* widths are not supported by tracelm's template engine");
        for (; i < format.size() && std::isdigit(static_cast<unsigned char>(format[i])); ++i)
            width = std::max(width, 0) * 10 + (format[i] - '0');
        if (i < format.size() && format[i] == '.') {
            precision = 0;
            for (++i; i < format.size() && std::isdigit(static_cast<unsigned char>(format[i])); ++i)
                precision = precision * 10 + (format[i] - '0');
        }
        while (i < format.size() && (format[i] == 'l' || format[i] == 'h' || format[i] == 'L')) ++i;
        if (i >= format.size()) fail("incomplete format");
        const char conv = format[i];
        if (width > 4096 || precision > 4096) fail("format width or precision too large");
        if (conv == '%') {
            out += '%';
            continue;
        }
        if (std::string_view("sraciduxXoeEfFgG").find(conv) == std::string_view::npos)
            fail(std::string("unsupported format character '") + conv + "'");
        if (!arg) {
            if (args.is_dict() && !tuple) {
                arg = &args;  // a lone mapping is one argument
            } else {
                if (next >= positional.size()) fail("not enough arguments for format string");
                arg = &positional[next];
            }
            ++next;
        }
        out += convert(conv, *arg, flags, width, precision);
        rt.scan(out.size());
    }
    if (!used_mapping && !args.is_dict() && next < positional.size())
        fail("not all arguments converted during string formatting");
    rt.alloc(out.size());
    return out;
}

}  // namespace tracelm::jinja
