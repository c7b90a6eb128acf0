#include "tokenizer/bpe.h"

#include <algorithm>
#include <cstdio>
#include <stdexcept>

#include "tokenizer/byte_level.h"
#include "tokenizer/utf8.h"

namespace tracelm::tokenizer_detail {

namespace {

uint64_t pair_key(int32_t left, int32_t right) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) |
           static_cast<uint32_t>(right);
}

// Heap order for std::push_heap/pop_heap (a max-heap): the lowest rank comes out first, and
// among equal ranks the leftmost position, as in the reference implementation.
bool candidate_after(const BpeScratch::Candidate& a, const BpeScratch::Candidate& b) {
    if (a.rank != b.rank) return a.rank > b.rank;
    return a.pos > b.pos;
}

}  // namespace

BpeModel::BpeModel(BpeConfig config)
    : vocab_(std::move(config.vocab)),
      text_to_id_(vocab_.size()),
      byte_level_(config.byte_level),
      fuse_unk_(config.fuse_unk),
      ignore_merges_(config.ignore_merges) {
    for (const auto& [text, id] : vocab_) text_to_id_.try_emplace(text, id);

    merges_ = decltype(merges_)(config.merges.size());
    std::string joined;
    for (size_t rank = 0; rank < config.merges.size(); ++rank) {
        // Not a structured binding: clang 14 (the fuzz build) cannot capture those in the lambda below.
        const std::string& left = config.merges[rank].first;
        const std::string& right = config.merges[rank].second;
        const auto lookup = [&](const std::string& token) {
            const int32_t* id = text_to_id_.find(std::string_view(token));
            if (id == nullptr) {
                throw std::runtime_error("merge #" + std::to_string(rank) + " (\"" + left +
                                         "\" \"" + right + "\") references unknown token \"" +
                                         token + "\"");
            }
            return *id;
        };
        const int32_t left_id = lookup(left);
        const int32_t right_id = lookup(right);
        joined.assign(left).append(right);
        const int32_t new_id = lookup(joined);
        // A duplicated pair keeps its first (best) rank.
        merges_.try_emplace(pair_key(left_id, right_id), Merge{static_cast<int32_t>(rank), new_id});
    }

    if (config.unk_token) {
        const int32_t* id = text_to_id_.find(std::string_view(*config.unk_token));
        if (id == nullptr) {
            throw std::runtime_error("model.unk_token \"" + *config.unk_token +
                                     "\" is not in the vocabulary");
        }
        unk_id_ = *id;
    }
    for (int b = 0; b < 256; ++b) {
        const std::string byte(1, static_cast<char>(b));
        const int32_t* id = byte_level_ ? text_to_id_.find(std::string_view(byte_level_encode(byte))) : nullptr;
        if (id == nullptr && config.byte_fallback) {
            char name[8];
            std::snprintf(name, sizeof name, "<0x%02X>", b);
            id = text_to_id_.find(std::string_view(name));
        }
        byte_ids_[static_cast<size_t>(b)] = id == nullptr ? -1 : *id;
    }
}

const BpeModel::Merge* BpeModel::find_merge(int32_t left, int32_t right) const {
    return merges_.find(pair_key(left, right));
}

std::optional<int32_t> BpeModel::find_token(std::string_view raw_bytes) const {
    const int32_t* id = byte_level_ ? text_to_id_.find(std::string_view(byte_level_encode(raw_bytes))) : nullptr;
    // Tokens outside the byte-level alphabet stand for their own UTF-8 text, as in the
    // ByteLevel decoder.
    if (id == nullptr) id = text_to_id_.find(raw_bytes);
    if (id == nullptr) return std::nullopt;
    return *id;
}

void BpeModel::initial_symbols(std::string_view piece, std::vector<BpeScratch::Symbol>& symbols) const {
    const auto push = [&](int32_t id) {
        const auto index = static_cast<int32_t>(symbols.size());
        symbols.push_back({id, index - 1, index + 1, true});
    };
    // The reference's unknown-token handling: consecutive unknown units make one <unk> with fuse_unk, and a
    // pending one is emitted once a unit with a token of its own follows (byte fallback tokens do not count).
    bool unk_pending = false;
    const auto unknown = [&] {
        if (!unk_id_) return;  // the unit is dropped, as the reference does
        if (unk_pending && !fuse_unk_) push(*unk_id_);
        unk_pending = true;
    };
    const auto known = [&](int32_t id) {
        if (unk_pending) push(*unk_id_);
        unk_pending = false;
        push(id);
    };
    if (byte_level_) {
        for (unsigned char b : piece) {
            if (byte_ids_[b] >= 0) {
                known(byte_ids_[b]);
            } else {
                unknown();
            }
        }
    } else {
        for (size_t pos = 0; pos < piece.size();) {
            const std::string_view ch = piece.substr(pos, scan_utf8(piece, pos).len);
            pos += ch.size();
            if (const int32_t* id = text_to_id_.find(ch)) {
                known(*id);
            } else if (std::all_of(ch.begin(), ch.end(),
                                   [&](char b) { return byte_ids_[static_cast<unsigned char>(b)] >= 0; })) {
                for (unsigned char b : ch) push(byte_ids_[b]);
            } else {
                unknown();
            }
        }
    }
    if (unk_pending) push(*unk_id_);
}

void BpeModel::encode_word(std::string_view piece, BpeScratch& scratch, std::vector<int32_t>& out) const {
    if (ignore_merges_) {
        if (const auto whole = find_token(piece)) {
            out.push_back(*whole);
            return;
        }
    }

    auto& symbols = scratch.symbols;
    symbols.clear();
    initial_symbols(piece, symbols);
    if (symbols.empty()) return;
    symbols.back().next = -1;

    auto& heap = scratch.heap;
    heap.clear();
    const auto push_candidate = [&](int32_t pos) {
        const BpeScratch::Symbol& left = symbols[static_cast<size_t>(pos)];
        if (left.next < 0) return;
        if (const Merge* m = find_merge(left.id, symbols[static_cast<size_t>(left.next)].id)) {
            heap.push_back({m->rank, pos, m->new_id});
            std::push_heap(heap.begin(), heap.end(), candidate_after);
        }
    };
    for (int32_t pos = 0; pos + 1 < static_cast<int32_t>(symbols.size()); ++pos) {
        push_candidate(pos);
    }

    while (!heap.empty()) {
        std::pop_heap(heap.begin(), heap.end(), candidate_after);
        const BpeScratch::Candidate top = heap.back();
        heap.pop_back();
        BpeScratch::Symbol& left = symbols[static_cast<size_t>(top.pos)];
        if (!left.alive || left.next < 0) continue;
        BpeScratch::Symbol& right = symbols[static_cast<size_t>(left.next)];
        // A candidate is stale once either side merged with something else; the merged text
        // then differs, and with it the id the pair would produce.
        const Merge* m = find_merge(left.id, right.id);
        if (m == nullptr || m->new_id != top.new_id) continue;

        left.id = top.new_id;
        right.alive = false;
        left.next = right.next;
        if (right.next >= 0) symbols[static_cast<size_t>(right.next)].prev = top.pos;
        if (left.prev >= 0) push_candidate(left.prev);
        push_candidate(top.pos);
    }

    // Merges only ever remove the right symbol, so the list still starts at index 0.
    for (int32_t i = 0; i >= 0; i = symbols[static_cast<size_t>(i)].next) {
        out.push_back(symbols[static_cast<size_t>(i)].id);
    }
}

}  // namespace tracelm::tokenizer_detail
