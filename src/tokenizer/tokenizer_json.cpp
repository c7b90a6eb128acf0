#include "tokenizer/tokenizer_json.h"

#include <limits>
#include <stdexcept>

#include "runtime/untrusted.h"

namespace tracelm::tokenizer_detail {

namespace {

using nlohmann::json;

class Handler final : public nlohmann::json_sax<json> {
   public:
    explicit Handler(TokenizerJson& out) : out_(out) {}

    const std::string& error() const { return error_; }

    bool null() override { return value(nullptr); }
    bool boolean(bool v) override { return value(v); }
    bool number_integer(number_integer_t v) override {
        if (mode_ == Mode::Vocab) return fail("model.vocab[\"" + untrusted::escape(key_) + "\"] is a negative id");
        return value(v);
    }
    bool number_unsigned(number_unsigned_t v) override {
        if (mode_ == Mode::Vocab) {
            if (v > static_cast<number_unsigned_t>(std::numeric_limits<int32_t>::max())) {
                return fail("model.vocab[\"" + untrusted::escape(key_) + "\"] id " + std::to_string(v) +
                            " does not fit in 32 bits");
            }
            out_.vocab->emplace_back(std::move(key_), static_cast<int32_t>(v));
            return true;
        }
        return value(v);
    }
    bool number_float(number_float_t v, const string_t&) override { return value(v); }
    bool string(string_t& v) override {
        if (mode_ == Mode::Merges) return split_merge_string(v);
        if (mode_ == Mode::MergePair) {
            if (pair_size_ == 2) return fail(merge_name() + " has more than two tokens");
            (pair_size_ == 0 ? pair_.first : pair_.second) = std::move(v);
            ++pair_size_;
            return true;
        }
        return value(std::move(v));
    }
    bool binary(binary_t&) override { return fail("unexpected binary value"); }

    bool start_object(std::size_t) override {
        if (!depth_.enter()) return fail(untrusted::DepthGuard::error());
        if (mode_ == Mode::Dom && at_model_member("vocab")) {
            mode_ = Mode::Vocab;
            out_.vocab.emplace();
            return true;
        }
        return open(json::object());
    }
    bool key(string_t& k) override {
        key_ = std::move(k);
        return true;
    }
    bool end_object() override {
        depth_.leave();
        if (mode_ == Mode::Vocab) {
            mode_ = Mode::Dom;
            return true;
        }
        return close();
    }
    bool start_array(std::size_t) override {
        if (!depth_.enter()) return fail(untrusted::DepthGuard::error());
        if (mode_ == Mode::Dom && at_model_member("merges")) {
            mode_ = Mode::Merges;
            out_.merges.emplace();
            return true;
        }
        if (mode_ == Mode::Merges) {
            mode_ = Mode::MergePair;
            pair_size_ = 0;
            return true;
        }
        return open(json::array());
    }
    bool end_array() override {
        depth_.leave();
        if (mode_ == Mode::MergePair) {
            if (pair_size_ != 2) return fail(merge_name() + " does not have two tokens");
            out_.merges->push_back(std::move(pair_));
            mode_ = Mode::Merges;
            return true;
        }
        if (mode_ == Mode::Merges) {
            mode_ = Mode::Dom;
            return true;
        }
        return close();
    }

    bool parse_error(std::size_t, const std::string&, const nlohmann::json::exception& e) override {
        return fail(std::string("invalid JSON: ") + e.what());
    }

   private:
    enum class Mode { Dom, Vocab, Merges, MergePair };

    bool fail(std::string message) {
        if (error_.empty()) error_ = std::move(message);
        return false;
    }

    std::string merge_name() const {
        return "model.merges[" + std::to_string(out_.merges->size()) + "]";
    }

    // True when the container about to open is root["model"][member].
    bool at_model_member(const char* member) const {
        return stack_.size() == 2 && stack_[0]->is_object() && keys_[1] == "model" &&
               stack_[1]->is_object() && key_ == member;
    }

    bool split_merge_string(const std::string& s) {
        const size_t space = s.find(' ');
        if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos) {
            return fail(merge_name() + " \"" + untrusted::escape(s) + "\" is not of the form \"left right\"");
        }
        out_.merges->emplace_back(s.substr(0, space), s.substr(space + 1));
        return true;
    }

    // Stores a value in the innermost open container (or as the document).
    json* place(json&& v) {
        if (mode_ != Mode::Dom) {
            fail(mode_ == Mode::Vocab ? "model.vocab[\"" + untrusted::escape(key_) + "\"] is not an integer id"
                                      : merge_name() + " is not a pair of token strings");
            return nullptr;
        }
        if (stack_.empty()) {
            out_.doc = std::move(v);
            return &out_.doc;
        }
        json& parent = *stack_.back();
        if (parent.is_object()) {
            json& slot = parent[key_];
            slot = std::move(v);
            return &slot;
        }
        parent.push_back(std::move(v));
        return &parent.back();
    }
    bool value(json&& v) { return place(std::move(v)) != nullptr; }
    bool open(json&& container) {
        // Only the innermost open container ever grows, so pointers to the open ones stay valid.
        json* p = place(std::move(container));
        if (p == nullptr) return false;
        keys_.push_back(stack_.empty() || !stack_.back()->is_object() ? std::string() : key_);
        stack_.push_back(p);
        return true;
    }
    bool close() {
        stack_.pop_back();
        keys_.pop_back();
        return true;
    }

    TokenizerJson& out_;
    untrusted::DepthGuard depth_;  // checked as containers open, so the readers' recursion stays shallow
    Mode mode_ = Mode::Dom;
    std::vector<json*> stack_;       // open containers, outermost first
    std::vector<std::string> keys_;  // the key each open container sits under ("" in arrays)
    std::string key_;                // the most recent object key
    std::pair<std::string, std::string> pair_;
    int pair_size_ = 0;
    std::string error_;
};

}  // namespace

TokenizerJson parse_tokenizer_json(std::string_view text) {
    TokenizerJson out;
    Handler handler(out);
    if (!json::sax_parse(text.begin(), text.end(), &handler)) {
        throw std::runtime_error(handler.error().empty() ? "invalid JSON" : handler.error());
    }
    return out;
}

}  // namespace tracelm::tokenizer_detail
