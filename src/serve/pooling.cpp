#include "serve/pooling.h"

#include <filesystem>
#include <stdexcept>

#include "runtime/untrusted.h"

namespace tracelm::serve {

Pooling gguf_pooling(const GgufFile& g) {
    const std::string arch(g.get_string("general.architecture"));
    const auto type = g.opt_int<int64_t>(arch + ".pooling_type");
    if (!type || *type == 0) return Pooling::Unspecified;
    switch (*type) {
        case 1:
            return Pooling::Mean;
        case 2:
            return Pooling::Cls;
        case 3:
            return Pooling::Last;
        default:
            return Pooling::Other;
    }
}

Pooling sentence_transformers_pooling(const std::string& json_text, const std::string& source) {
    nlohmann::json c;
    try {
        c = untrusted::parse_json(json_text);
    } catch (const std::exception& e) {
        throw std::runtime_error(source + ": " + e.what());
    }
    if (!c.is_object()) throw std::runtime_error(source + ": not a JSON object");
    if (const auto it = c.find("pooling_mode"); it != c.end() && it->is_string()) {
        const std::string mode = *it;
        if (mode == "lasttoken") return Pooling::Last;
        if (mode == "mean") return Pooling::Mean;
        if (mode == "cls") return Pooling::Cls;
        return Pooling::Other;
    }
    Pooling found = Pooling::Unspecified;
    for (const auto& [key, value] : c.items()) {
        if (key.rfind("pooling_mode_", 0) != 0 || !value.is_boolean() || !value.get<bool>()) continue;
        if (found != Pooling::Unspecified) return Pooling::Other;
        found = key == "pooling_mode_lasttoken"     ? Pooling::Last
                : key == "pooling_mode_mean_tokens" ? Pooling::Mean
                : key == "pooling_mode_cls_token"   ? Pooling::Cls
                                                    : Pooling::Other;
    }
    return found;
}

Pooling folder_pooling(const std::string& folder) {
    const std::string path = (std::filesystem::path(folder) / "1_Pooling" / "config.json").string();
    if (!std::filesystem::exists(path)) return Pooling::Unspecified;
    return sentence_transformers_pooling(untrusted::read_regular_file(path, untrusted::kMaxSmallJsonFileBytes), path);
}

}  // namespace tracelm::serve
