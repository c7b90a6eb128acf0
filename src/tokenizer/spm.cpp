#include "tokenizer/spm.h"

#include <algorithm>

#include "tokenizer/utf8.h"

namespace tracelm::tokenizer_detail {

namespace {

struct Symbol {
    size_t begin, len;  // bytes of the escaped text; len = 0 once merged into its left neighbour
    int32_t prev, next;
};

struct Bigram {
    float score;
    int32_t left, right;
    size_t len;  // left.len + right.len when queued: a later change of either makes it stale
};

// Heap order for std::push_heap/pop_heap (a max-heap): the highest score comes out first, and
// among equal scores the leftmost pair.
bool bigram_after(const Bigram& a, const Bigram& b) {
    if (a.score != b.score) return a.score < b.score;
    return a.left > b.left;
}

}  // namespace

std::string spm_escape(std::string_view text) {
    std::string out;
    for (char c : text) {
        if (c == ' ') {
            out += kSpmSpace;
        } else {
            out += c;
        }
    }
    return out;
}

std::string spm_unescape(std::string_view piece) {
    std::string out;
    for (size_t i = 0; i < piece.size();) {
        if (piece.substr(i).starts_with(kSpmSpace)) {
            out += ' ';
            i += kSpmSpace.size();
        } else {
            out += piece[i++];
        }
    }
    return out;
}

SpmModel::SpmModel(std::vector<SpmPiece> pieces, const std::array<int32_t, 256>& byte_ids,
                   std::optional<int32_t> unk_id)
    : pieces_(std::move(pieces)), index_(pieces_.size()), byte_ids_(byte_ids), unk_id_(unk_id) {
    // Of pieces with the same text, the last one counts, as in llama.cpp.
    for (size_t i = pieces_.size(); i-- > 0;) {
        index_.try_emplace(pieces_[i].text, static_cast<int32_t>(i));
    }
}

const SpmPiece* SpmModel::find(std::string_view text) const {
    const int32_t* i = index_.find(text);
    return i == nullptr ? nullptr : &pieces_[static_cast<size_t>(*i)];
}

std::optional<int32_t> SpmModel::find_token(std::string_view raw_text) const {
    const SpmPiece* p = find(spm_escape(raw_text));
    if (p == nullptr) return std::nullopt;
    return p->id;
}

void SpmModel::encode(std::string_view text, bool space_prefix, std::vector<int32_t>& out) const {
    std::string escaped(space_prefix ? kSpmSpace : std::string_view());
    escaped += spm_escape(text);

    std::vector<Symbol> symbols;
    for (size_t pos = 0; pos < escaped.size();) {
        const size_t len = scan_utf8(escaped, pos).len;
        const auto index = static_cast<int32_t>(symbols.size());
        symbols.push_back({pos, len, index - 1, index + 1});
        pos += len;
    }
    if (symbols.empty()) return;
    symbols.back().next = -1;

    std::vector<Bigram> heap;
    const auto try_bigram = [&](int32_t left, int32_t right) {
        if (left < 0 || right < 0) return;
        const Symbol& l = symbols[static_cast<size_t>(left)];
        const size_t len = l.len + symbols[static_cast<size_t>(right)].len;
        if (const SpmPiece* p = find(std::string_view(escaped).substr(l.begin, len))) {
            heap.push_back({p->score, left, right, len});
            std::push_heap(heap.begin(), heap.end(), bigram_after);
        }
    };
    for (int32_t i = 1; i < static_cast<int32_t>(symbols.size()); ++i) try_bigram(i - 1, i);

    while (!heap.empty()) {
        std::pop_heap(heap.begin(), heap.end(), bigram_after);
        const Bigram top = heap.back();
        heap.pop_back();
        Symbol& left = symbols[static_cast<size_t>(top.left)];
        Symbol& right = symbols[static_cast<size_t>(top.right)];
        // Symbols only grow, and a merged-away one has length 0, so an unchanged total length
        // means neither side has changed since the pair was queued.
        if (left.len == 0 || right.len == 0 || left.len + right.len != top.len) continue;
        left.len += right.len;
        right.len = 0;
        left.next = right.next;
        if (right.next >= 0) symbols[static_cast<size_t>(right.next)].prev = top.left;
        try_bigram(left.prev, top.left);
        try_bigram(top.left, left.next);
    }

    // Merges only ever remove the right symbol, so the list still starts at index 0.
    for (int32_t i = 0; i >= 0; i = symbols[static_cast<size_t>(i)].next) {
        const Symbol& s = symbols[static_cast<size_t>(i)];
        const std::string_view piece = std::string_view(escaped).substr(s.begin, s.len);
        if (const SpmPiece* p = find(piece)) {
            out.push_back(p->id);
            continue;
        }
        // Only single characters reach this point: every merged symbol is a piece.
        const bool has_bytes = std::all_of(piece.begin(), piece.end(), [&](char c) {
            return byte_ids_[static_cast<unsigned char>(c)] >= 0;
        });
        if (has_bytes) {
            for (unsigned char b : piece) out.push_back(byte_ids_[b]);
        } else if (unk_id_) {
            out.push_back(*unk_id_);  // one per character, as SentencePiece does
        }
    }
}

}  // namespace tracelm::tokenizer_detail
